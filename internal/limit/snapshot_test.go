package limit

import (
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
)

func TestSnapshotAndTop(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	l, err := New(Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"small": 10}}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Snapshot(t0, "nobody"); ok {
		t.Fatal("a team never seen has a snapshot")
	}
	if l.Len() != 0 {
		t.Fatal("Snapshot cached a team")
	}
	for range 30 {
		l.CheckAt(t0, "small", 1) // 3 × its threshold of 10
	}
	for range 50 {
		l.CheckAt(t0, "half", 1) // half of 100
	}
	l.CheckAt(t0, "one", 1)

	s, ok := l.Snapshot(t0, "small")
	if !ok {
		t.Fatal("no snapshot of a cached team")
	}
	if s.Threshold != 10 || !s.Override || s.Level != 30 || s.Pending != 30 || !s.Limited || s.Tier != Hot || !s.ReadAt.IsZero() {
		t.Errorf("small: %+v", s)
	}
	// 20 over a threshold of 10 per minute drains in 2 minutes.
	if s.UnderIn != 2*time.Minute {
		t.Errorf("small: under again in %s, want 2m", s.UnderIn)
	}
	h, _ := l.Snapshot(t0, "half")
	if h.Override || h.Threshold != 100 || h.Limited || h.UnderIn != 0 || h.Tier != Normal {
		t.Errorf("half: %+v", h)
	}

	top := l.Top(t0, 2)
	if len(top) != 2 || top[0].Team != "small" || top[1].Team != "half" {
		t.Errorf("top 2: %+v", top)
	}
	if got := l.Top(t0, 10); len(got) != 3 || got[2].Team != "one" {
		t.Errorf("top 10: %+v", got)
	}
	if l.Top(t0, 0) != nil {
		t.Error("top 0 is not empty")
	}
	// Reading changes nothing: the counts are all still there for the tick.
	var sw Sweep
	l.Sweep(t0, &sw)
	var n int64
	for _, c := range sw.Counts {
		n += c.N
	}
	if n != 81 {
		t.Errorf("swept %d records, want 81", n)
	}
}

// A team far over a small threshold (bytes counted, a team blocked with an override of 1)
// is under again in a long time, never in a negative one: the wait overflowed a Duration.
func TestSnapshotUnderInHuge(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	l, err := New(Config{Window: time.Minute, Threshold: 1_000_000, Overrides: map[string]int64{"blocked": 1}}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		l.CheckAt(t0, "blocked", 1<<20) // 200 MiB of 1 MiB records, in divert mode all counted
	}
	s, ok := l.Snapshot(t0, "blocked")
	if !ok || !s.Limited {
		t.Fatalf("blocked: %+v", s)
	}
	if s.UnderIn <= 0 {
		t.Errorf("blocked, level %g over a threshold of %d: under again in %s, want a positive wait", s.Level, s.Threshold, s.UnderIn)
	}
}
