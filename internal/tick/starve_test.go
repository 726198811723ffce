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

// TestReadsOverBudgetNearLimitFirst: over the read budget, teams far over their limit
// (already limited: a read changes nothing for them) must not crowd out a team near its
// limit, whose decision a read changes. Two teams at 5 × their threshold, read every tick
// (hot), and one at 0.95 ×, with room for two reads a tick: the near one was read only
// once its put-off ticks had raised it past 5 (about 40 ticks, minutes for a team at
// 50 ×).
func TestReadsOverBudgetNearLimitFirst(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{MaxReadsPerTick: 2}, srv)
	levels := map[string]int64{"far-0": 5000, "far-1": 5000, "near": 950}
	for team, n := range levels {
		g.l.Check(team, n)
	}
	for range 8 {
		g.tk.Tick(context.Background())
		clk.Advance(time.Second)
		for team := range levels {
			g.l.Check(team, 1)
		}
	}
	s, ok := g.l.Snapshot(clk.Now(), "near")
	if !ok {
		t.Fatal("near not cached")
	}
	if s.ReadAt.IsZero() || clk.Now().Sub(s.ReadAt) > 3*time.Second {
		t.Errorf("near (pressure %.2f, tier %s) last read at %v, now %v: crowded out by teams far over their limit", s.Pressure(), s.Tier, s.ReadAt, clk.Now())
	}
}

// TestReadsKeysWithinKeysPerTick: a read that fetches a team's hold flag with its two
// counters touches three keys, and the tick's key budget must count them: budgeted as two,
// a tick of first reads (each with its flag) touched half as many keys again as
// GATE_KEYS_PER_TICK allows.
func TestReadsKeysWithinKeysPerTick(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	const keysPerTick = 12
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100, DivertHold: 5 * time.Second, DivertRelease: 0.8},
		Config{KeysPerTick: keysPerTick}, srv)
	if !g.l.HoldsShared() {
		t.Fatal("holds not shared: reads carry no flag")
	}
	for i := range 4 {
		g.l.Check(fmt.Sprintf("team-%d", i), 90)
	}
	r := g.tk.Tick(context.Background())
	var read int
	for _, p := range g.tk.plans {
		for _, rc := range p.rcmds {
			read += len(rc.cmd.Args()) - 1 // MGET key...
		}
	}
	if r.Writes+read > keysPerTick {
		t.Errorf("tick touched %d keys (%d written, %d read in %d reads), over KeysPerTick %d", r.Writes+read, r.Writes, read, r.Reads, keysPerTick)
	}
	if r.Reads == 0 {
		t.Errorf("tick = %+v: no read made within the budget", r)
	}
}

// TestReadsUnderATinyKeyBudget: a GATE_KEYS_PER_TICK under what a read carries (2 is
// allowed; a first read with its hold flag carries 3) still reads, one read a tick when
// the writes leave two keys, as before reads were counted by their keys: counted so and
// nothing more, no team was read ever.
func TestReadsUnderATinyKeyBudget(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100, DivertHold: 5 * time.Second, DivertRelease: 0.8},
		Config{KeysPerTick: 2}, srv)
	if !g.l.HoldsShared() {
		t.Fatal("holds not shared: reads carry no flag")
	}
	g.l.Check("team-0", 90)
	reads := 0
	for range 5 {
		reads += g.tk.Tick(context.Background()).Reads
		clk.Advance(time.Second)
	}
	if reads == 0 {
		t.Error("no read in 5 ticks under GATE_KEYS_PER_TICK=2: a read with its hold flag never fits")
	}
}

// TestReadsUnderKeysLeftByWrites: writes every tick leaving two keys of
// GATE_KEYS_PER_TICK=4, and reads carrying three (the hold flag): no read fit the keys left
// and none was over GATE_KEYS_PER_TICK itself, so no team was read ever, each gate going
// by its own counts alone for as long as the traffic lasted. A read put off goes as the
// tick's first read when two keys are left.
func TestReadsUnderKeysLeftByWrites(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100, DivertHold: 5 * time.Second, DivertRelease: 0.8},
		Config{KeysPerTick: 4}, srv)
	if !g.l.HoldsShared() {
		t.Fatal("holds not shared: reads carry no flag")
	}
	teams := []string{"team-0", "team-1"}
	for _, team := range teams {
		g.l.Check(team, 60)
	}
	reads := 0
	for range 6 {
		r := g.tk.Tick(context.Background())
		reads += r.Reads
		clk.Advance(time.Second)
		for _, team := range teams {
			g.l.Check(team, 1)
		}
	}
	if reads == 0 {
		t.Error("no read in 6 ticks: the writes left two keys each tick, a read carries three")
	}
}

// TestReadsNotStarvedByWrites: a gate whose writes take the whole key budget every tick
// (more teams with counts a tick than GATE_KEYS_PER_TICK) still reads a team due: the
// writes leave a read's two keys. Before, no team was read in 20 ticks, and one the fleet
// had at 10 × its limit was never limited on this gate (a review).
func TestReadsNotStarvedByWrites(t *testing.T) {
	for _, keys := range []int{4, 2} { // under four, the reads' keys kept every other tick
		t.Run(fmt.Sprintf("keys per tick %d", keys), func(t *testing.T) {
			srv := redistest.Start(t)
			rc := srv.Client(t)
			clk := clock.NewFake(epochStart)
			g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100}, Config{KeyPrefix: "t", KeysPerTick: keys}, srv)
			ep := g.l.Epoch(clk.Now())
			// The rest of the fleet has counted 10 × the victim's limit this window.
			if err := rc.Set(context.Background(), g.tk.key(0, "victim", ep), 1000, 0).Err(); err != nil {
				t.Fatal(err)
			}
			reads, writes, limited := 0, 0, 0
			for range 20 {
				for _, b := range []string{"b0", "b1", "b2", "b3", "b4"} {
					g.l.Check(b, 1)
				}
				if g.l.Check("victim", 5).Limited {
					limited++
				}
				r := g.tk.Tick(context.Background())
				reads += r.Reads
				writes += r.Writes
				clk.Advance(time.Second)
			}
			if reads == 0 || limited == 0 {
				t.Errorf("%d reads in 20 ticks, the victim (10 × its limit fleet-wide) limited %d times of 20: want it read and limited", reads, limited)
			}
			if writes == 0 {
				t.Errorf("no count written in 20 ticks: the reads' keys took the writes' budget")
			}
		})
	}
}
