package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// readRetryStall is how long Redis stalls: longer than the tick made during the stall
// waits for it (stallWait), so that tick fails by timeout within the stall.
const readRetryStall = 2 * stallWait

// readsTotal is the gate's gate_limiter_reads_total for reason (0 when never counted).
func readsTotal(t *testing.T, g *gate, reason string) float64 {
	t.Helper()
	fams, err := g.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != "gate_limiter_reads_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestFailedReadRetriedNextTick (issue 27, item 2): a gate that meets a team during a
// one-tick Redis stall reads it again on the next tick, and so learns that the fleet is far
// over the team's limit one tick later, not a cadence later (up to a minute for a team
// that looks idle from here, while the fleet is at 6 × its limit).
func TestFailedReadRetriedNextTick(t *testing.T) {
	t.Parallel()
	const (
		threshold = 100
		fleetAt   = 6 * threshold // what the fleet counted in the current window
		seen      = 3             // what the gate under test sees: idle here, under 5% pending
	)
	for _, lc := range []limit.Clock{limit.WallClock, limit.EventClock} {
		t.Run(lc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			bg := context.Background()
			clk := clock.NewFake(epochStart.Add(5 * time.Second))
			cfg := limit.Config{Window: time.Minute, Threshold: threshold, Mode: limit.Divert, Clock: lc, MaxEventAge: 5 * time.Minute}
			check := func(g *gate, team string, n int64) limit.Decision {
				now := clk.Now()
				return g.l.CheckEventAt(now, now, team, n) // CheckAt(now, …) under the wall clock
			}
			tick := func(ctx context.Context, g *gate, what string) TickResult {
				t.Helper()
				r := g.tk.Tick(ctx)
				t.Logf("%s: %+v", what, r)
				return r
			}

			// The fleet: another gate that counted 6 × the team's limit in this window and
			// wrote it through its tick.
			fleet := newGate(t, clk, cfg, Config{TickTimeout: 10 * time.Second}, srv) // seconds for the ticks that must succeed
			check(fleet, "team", fleetAt)
			if r := tick(bg, fleet, "fleet tick"); r.Errors != 0 || r.Writes < 1 {
				t.Fatalf("fleet tick = %+v, want its counts written", r)
			}

			// The gate under test, its connection to Redis open (a tick for another team).
			g := newGate(t, clk, cfg, Config{TickTimeout: 10 * time.Second}, srv) // the tick in the stall alone waits stallWait (stallCtx)
			check(g, "warm-up", 1)
			if r := tick(bg, g, "warm-up tick"); r.Errors != 0 {
				t.Fatalf("warm-up tick = %+v, want no error", r)
			}

			// It meets the team while Redis stalls: the team's first read fails by timeout.
			for range seen {
				if d := check(g, "team", 1); d.Limited {
					t.Fatalf("first contact limited: %+v", d)
				}
			}
			srv.Pause(t)
			t.Cleanup(func() { srv.Resume(t) })
			stalled := time.Now()
			r := tick(stallCtx(bg, t), g, "tick during the stall")
			if r.FailedReads != 1 {
				t.Fatalf("tick during the stall = %+v, want the team's read failed", r)
			}
			time.Sleep(time.Until(stalled.Add(readRetryStall))) // the rest of the stall
			srv.Resume(t)
			if d := check(g, "team", 0); d.Limited {
				t.Fatalf("limited on local counts alone after the failed read: %+v", d)
			}

			// One tick interval later Redis answers. The team is read on that tick: should
			// this loaded machine time that tick out too, the read is due on the one after,
			// the fake clock standing still.
			clk.Advance(g.tk.Config().TickInterval)
			deadline := time.Now().Add(30 * time.Second)
			for n := 1; ; n++ {
				r = tick(bg, g, "tick after the stall")
				if r.Errors == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis never answered a tick after the stall (%d ticks): %+v", n, r)
				}
			}
			d := check(g, "team", 0)
			if r.Reads < 1 || !d.Limited {
				t.Fatalf("one tick after the failed read: tick %+v, team %+v; want the team read again and limited "+
					"(the fleet is at %d, %d × its limit of %d)", r, d, fleetAt, fleetAt/threshold, threshold)
			}
			if got := readsTotal(t, g, "retry"); got != 1 {
				t.Errorf("gate_limiter_reads_total{reason=\"retry\"} = %v, want 1", got)
			}
			if d.Level < fleetAt {
				t.Errorf("level after the read %.1f, want at least the fleet's %d", d.Level, fleetAt)
			}
		})
	}
}
