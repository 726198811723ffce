package replay

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
)

// asAGate routes recs through a candidate of cfg's limits as a gate routes them: each at
// its own time, its fleet ticking at every multiple of GATE_TICK_INTERVAL (a candidate on
// the event clock, of its own interval), whether records come or not, writing at the
// boundary and reading the read delay later. It returns the records limited.
func asAGate(t *testing.T, cfg config.Config, recs []*kgo.Record) int64 {
	t.Helper()
	c, err := NewCandidate("gate", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(cfg.TickInterval, c); err != nil { // sets c.every
		t.Fatal(err)
	}
	first := recs[0].Timestamp
	if err := c.start(first); err != nil {
		t.Fatal(err)
	}
	// tick.nextTick: the multiples of the interval since the Unix epoch, as every gate.
	next := time.Unix(0, first.UnixNano()-first.UnixNano()%int64(c.every)+int64(c.every)).UTC()
	var readAt time.Time
	for _, r := range recs {
		for {
			if !readAt.IsZero() && !r.Timestamp.Before(readAt) {
				c.read(readAt)
				readAt = time.Time{}
				continue
			}
			if r.Timestamp.Before(next) {
				break
			}
			c.tick(next)
			readAt = next.Add(c.delay)
			next = next.Add(c.every)
		}
		c.route(r.Timestamp, r)
	}
	c.seal()
	return c.b.report("gate", 5, nil).Total.Limited
}

// TestReplayTicksThroughAGap: a gate ticks every GATE_TICK_INTERVAL whether records come
// or not, and so must replay's fleet, or a hold's release is judged on what the tick
// after a pause in the input sees. A team at 1.5 × its threshold for a minute is held
// (GATE_DIVERT_HOLD, a window); from 1m28s its level is under 0.8 of its threshold, and
// a gate ticking through the quiet releases it a window later, at 2m28s: its next
// record, at 2m40s, is accepted. Replay ticked only when that record came: its one tick
// saw the level of the last view read (the whole minute's count, never rebuilt during
// the quiet) and held the team a window more.
func TestReplayTicksThroughAGap(t *testing.T) {
	for _, clk := range []string{"wall", "event"} {
		cfg := testConfig(t, map[string]string{"GATE_CLOCK": clk, "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_LIMIT_MODE": "divert"})
		for _, at := range []time.Duration{100 * time.Second, 125 * time.Second, 160 * time.Second, 10 * time.Minute} {
			recs := append(steady(nil, "held", 0, time.Minute, 150), event("held", "u", at))
			want := asAGate(t, cfg, recs)
			for _, workers := range []int{1, 2} {
				if got := replaySet(t, clk, cfg, nil, recs, workers, 5).Candidates[0].Total.Limited; got != want {
					t.Errorf("%s clock, a record at %s after a minute at 1.5 × (%d workers): replay limits %d, a gate %d", clk, at, workers, got, want)
				}
			}
		}
	}
	// The case above, spelled out: held through 2m05s, released by 2m40s.
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_LIMIT_MODE": "divert"})
	for at, want := range map[time.Duration]int64{125 * time.Second: 51, 160 * time.Second: 50} {
		if got := asAGate(t, cfg, append(steady(nil, "held", 0, time.Minute, 150), event("held", "u", at))); got != want {
			t.Errorf("a gate, a record at %s: %d limited, want %d", at, got, want)
		}
	}
}

// TestReplayTicksOnTheGatesInstants: a gate ticks at the multiples of GATE_TICK_INTERVAL
// since the Unix epoch (tick.Ticker.Run), and so must replay's fleet. Replay ticked at
// time.Truncate's multiples, counted from year 1, the same instants only for intervals
// that divide the 62,135,596,800 s between the two: with GATE_TICK_INTERVAL=7s its ticks
// fell 4 s before the gate's, and a held team was released, and its record accepted, 4 s
// before a gate releases it.
func TestReplayTicksOnTheGatesInstants(t *testing.T) {
	for _, iv := range []string{"7s", "700ms"} {
		cfg := testConfig(t, map[string]string{"GATE_TICK_INTERVAL": iv, "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_LIMIT_MODE": "divert"})
		for at := 120 * time.Second; at < 160*time.Second; at += 500 * time.Millisecond {
			recs := append(steady(nil, "held", 0, time.Minute, 150), event("held", "u", at))
			want := asAGate(t, cfg, recs)
			if got := replayRecords(t, "replay", cfg, recs, 5).Candidates[0].Total.Limited; got != want {
				t.Errorf("GATE_TICK_INTERVAL=%s, a record at %s after a minute at 1.5 × its threshold: replay limits %d, a gate %d", iv, at, got, want)
			}
		}
	}
}

// TestReplayTicksThroughAPauseLongerThanTheIdleTimeout: a held key stays cached however
// long it is idle (limit's sweep keeps it until its window ages out and its hold is
// released), so under a window longer than GATE_CACHE_IDLE_TIMEOUT the ticks of a pause
// past the idle timeout still release holds. A team over a limit of an hour for 40
// minutes is held; a gate ticking through the pause releases it (its level under 0.8 of
// the threshold from 1h30m, GATE_DIVERT_HOLD later), and the records it sends after the
// pause are accepted. Replay skipped the pause's ticks from the idle timeout on: its
// first tick after the pause saw the level fallen and only then began the hold's 5
// minutes, limiting 60 records a gate accepts.
func TestReplayTicksThroughAPauseLongerThanTheIdleTimeout(t *testing.T) {
	for _, clk := range []string{"wall", "event"} {
		vars := map[string]string{"GATE_CLOCK": clk, "GATE_WINDOW": "1h", "GATE_THRESHOLD": "1000", "GATE_LIMIT_MODE": "divert",
			"GATE_CACHE_IDLE_TIMEOUT": "300s"}
		if clk == "wall" {
			vars["GATE_DIVERT_HOLD"] = "5m" // the event clock keeps no holds
		}
		cfg := testConfig(t, vars)
		for _, resume := range []time.Duration{95 * time.Minute, 110 * time.Minute} {
			recs := steady(nil, "held", 0, 40*time.Minute, 40)
			recs = steady(recs, "held", resume, resume+30*time.Minute, 12)
			want := asAGate(t, cfg, recs)
			for _, workers := range []int{1, 2} {
				if got := replaySet(t, clk, cfg, nil, recs, workers, 5).Candidates[0].Total.Limited; got != want {
					t.Errorf("%s clock, records again %s after the start, a pause of %s (%d workers): replay limits %d, a gate %d",
						clk, resume, resume-40*time.Minute, workers, got, want)
				}
			}
		}
	}
}
