package limit

import (
	"math"
	"testing"
	"time"
)

// TestLevelFollowsTheFleetsRate: between reads a gate carries the fleet's count forward at
// the rate it moved between the last two reads, less its own records. A team steady at half
// its limit across a fleet (its count flat in Redis) no longer drains to a lower tier in
// each gate's view between reads, which had a 16-gate fleet take 19 ticks to divert it
// when it jumped to 1.2 × (BenchmarkFidelity); a rising one is seen rising. Before a second
// read, and after a failed one, the level drains as the leaky bucket does.
func TestLevelFollowsTheFleetsRate(t *testing.T) {
	// A read on every record counted (PendingReadShare), so the test reads when it wants.
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 6000, SyncInterval: 15 * time.Second, ColdWriteInterval: -1, PendingReadShare: 0.0001})
	now := t0
	read := func(curr, prev int64) {
		t.Helper()
		l.CheckAt(now, "team", 1) // due for a read
		sw := new(Sweep)
		l.Sweep(now, sw)
		r := findRead(sw, "team")
		if r == nil {
			t.Fatalf("no read planned at %s", now.Sub(t0))
		}
		l.ApplyRead(r, curr, prev, now)
	}
	level := func(at time.Time) float64 { return l.CheckAt(at, "team", 0).Level }
	l.CheckAt(now, "team", 100) // first contact, read at once (over the sync floor)
	read(3000, 0)
	// First read: no rate known yet, the estimate drains at threshold / window (100/s).
	if got, want := level(now.Add(10*time.Second)), 3000.0-1000; math.Abs(got-want) > 1 {
		t.Errorf("after the first read, 10 s on: level %.1f, want %.1f (leaky drain)", got, want)
	}
	// Flat in Redis 15 s later: the rate is 0, the level holds.
	now = now.Add(15 * time.Second)
	read(3000, 0)
	if got := level(now.Add(10 * time.Second)); math.Abs(got-3000) > 1 {
		t.Errorf("steady fleet: level %.1f 10 s after the read, want 3000 (no drain)", got)
	}
	// Rising by 1500 in 15 s, none of it this gate's: 100/s carried forward.
	now = now.Add(15 * time.Second)
	read(4500, 0)
	if got, want := level(now.Add(5*time.Second)), 4500.0+500; math.Abs(got-want) > 1 {
		t.Errorf("rising fleet: level %.1f 5 s after the read, want %.1f", got, want)
	}
	// Carried forward for at most SyncInterval: a team whose traffic stopped is not held up.
	if got, want := level(now.Add(60*time.Second)), 4500.0+1500; math.Abs(got-want) > 1 {
		t.Errorf("rising fleet, a minute on: level %.1f, want %.1f (capped at SyncInterval)", got, want)
	}
	// A failed read: the rate is forgotten, the level drains again.
	now = now.Add(15 * time.Second)
	l.CheckAt(now, "team", 1)
	sw := new(Sweep)
	l.Sweep(now, sw)
	r := findRead(sw, "team")
	if r == nil {
		t.Fatal("no read planned")
	}
	before := level(now)
	l.ApplyLocal(r, now)
	if got, want := level(now.Add(10*time.Second)), before-1000; math.Abs(got-want) > 2 {
		t.Errorf("after a failed read: level %.1f 10 s on, want %.1f (leaky drain)", got, want)
	}
}
