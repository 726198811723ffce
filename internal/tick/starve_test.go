package tick

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestReadsOverBudgetStarveNoTeam: more hot teams due every tick (HotEveryTick) than the
// read budget holds. The hottest go first, but a team put off is not put off for ever: the
// least hot of them is read within a few ticks, not never.
func TestReadsOverBudgetStarveNoTeam(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{MaxReadsPerTick: 2}, srv)
	levels := []int64{950, 900, 850} // all hot, each read every tick it can be
	for i, n := range levels {
		g.l.Check(fmt.Sprintf("team-%d", i), n)
	}
	for range 8 {
		g.tk.Tick(context.Background())
		clk.Advance(time.Second)
		for i := range levels {
			g.l.Check(fmt.Sprintf("team-%d", i), 1)
		}
	}
	for i := range levels {
		s, ok := g.l.Snapshot(clk.Now(), fmt.Sprintf("team-%d", i))
		if !ok {
			t.Fatalf("team-%d not cached", i)
		}
		if s.ReadAt.IsZero() || clk.Now().Sub(s.ReadAt) > 3*time.Second {
			t.Errorf("team-%d (pressure %.2f, tier %s) last read at %v, now %v: starved by hotter teams", i, s.Pressure(), s.Tier, s.ReadAt, clk.Now())
		}
	}
}
