package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestSnapshotUnderInIsWhenTheLevelIsUnder: the team view's seconds_until_under is how
// long the level takes to drain under the threshold if the team sends nothing more
// (docs/configuration.md). A team at 7.5 × its threshold in divert mode (the demo's team
// 1: every record counted) that stops is under within two windows, as the sliding window
// forgets it; the view said 65 s for a 10 s window, as if its count aged out at
// threshold / window.
func TestSnapshotUnderInIsWhenTheLevelIsUnder(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	const thr = 2000
	g := newGate(t, clk, limit.Config{Window: fleetWindow, Threshold: thr, Mode: limit.Divert, SyncInterval: fleetWindow / 4},
		Config{TickInterval: time.Second}, srv)
	const team = "hot"
	// 1500 records a second (15,000 a window) for 25.3 s, a tick every second.
	stop := epochStart.Add(25300 * time.Millisecond)
	for at := epochStart; at.Before(stop); at = at.Add(100 * time.Millisecond) {
		clk.Set(at)
		if at.Sub(epochStart)%time.Second == 0 {
			g.tk.Tick(context.Background())
		}
		g.l.CheckAt(at, team, 150)
	}
	clk.Set(stop)
	s, ok := g.l.Snapshot(stop, team)
	if !ok || s.Level < 5*thr || s.UnderIn <= 0 {
		t.Fatalf("at %v: %+v, want a level over 5 × %d and a wait", stop.Sub(epochStart), s, thr)
	}
	// It sends nothing more: when is its level under the threshold?
	var under time.Duration
	for at := stop; at.Before(stop.Add(2 * time.Minute)); at = at.Add(100 * time.Millisecond) {
		clk.Set(at)
		if at.Sub(epochStart)%time.Second == 0 {
			g.tk.Tick(context.Background())
		}
		if st, ok := g.l.Snapshot(at, team); !ok || st.Level < thr {
			under = at.Sub(stop)
			break
		}
	}
	if under == 0 {
		t.Fatalf("level still over %d two minutes after the team stopped", thr)
	}
	if d := s.UnderIn - under; d < -time.Second || d > time.Second {
		t.Errorf("level %.0f over a threshold of %d (window %v): under in %v, said the view; it was under %v after the team stopped",
			s.Level, thr, fleetWindow, s.UnderIn.Round(100*time.Millisecond), under)
	}
}
