package tick

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// holdGates returns n gates on one Redis and a fake clock at epochStart: window 10 s,
// threshold 600, a hold of 5 s, release at 80% (480).
func holdGates(t *testing.T, n int, srv *redistest.Server) ([]*gate, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: fleetWindow, Threshold: 600, Mode: limit.Divert, SyncInterval: fleetWindow / 4,
		DivertHold: 5 * time.Second, DivertRelease: 0.8}
	var gs []*gate
	for range n {
		gs = append(gs, newGate(t, clk, lc, Config{TickInterval: time.Second}, srv))
	}
	return gs, clk
}

func tickAll(t *testing.T, gs ...*gate) {
	t.Helper()
	for _, g := range gs {
		g.tk.Tick(context.Background())
	}
}

// TestHoldIsFleetWide: a gate holding a team in overflow says so through Redis, with the
// counts it already writes and reads: a gate that starts while the fleet holds the team
// (its count under the threshold, over the release level) holds it at its first read, and
// both release it within a tick of each other once it has been under the release level
// for the hold. Before, the new gate sent the team back to the accepted topic.
func TestHoldIsFleetWide(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := holdGates(t, 2, srv)
	a, b := gs[0], gs[1]
	team := "hot"
	now := epochStart.Add(500 * time.Millisecond)
	a.l.CheckAt(now, team, 610)
	if d := a.l.CheckAt(now, team, 1); !d.Held {
		t.Fatalf("gate a at 611: %+v, want held", d)
	}
	// A second a tick until the next window is 1.5 s old: the count, 611 in the last
	// window, is then 611 × 0.85 ≈ 519 (under the threshold, over the release level).
	for s := 1; s <= 11; s++ {
		clk.Set(epochStart.Add(time.Duration(s) * time.Second))
		tickAll(t, a)
	}
	now = epochStart.Add(11500 * time.Millisecond)
	clk.Set(now)
	if d := a.l.CheckAt(now, team, 0); !d.Held || d.Level < 480 || d.Level >= 600 {
		t.Fatalf("gate a at 11.5 s: %+v, want held at a level in [480, 600)", d)
	}
	// Gate b meets the team now, and reads it on its next tick.
	if d := b.l.CheckAt(now, team, 10); d.Limited {
		t.Fatalf("gate b's first record: %+v, want allowed (first contact)", d)
	}
	clk.Set(epochStart.Add(12 * time.Second))
	tickAll(t, a, b)
	if d := b.l.CheckAt(epochStart.Add(12*time.Second), team, 0); !d.Held {
		t.Errorf("gate b after its first read (level %.0f, the fleet holding the team): %+v, want held", d.Level, d)
	}
	if st, _ := b.l.Snapshot(epochStart.Add(12*time.Second), team); !st.HeldSince.Equal(epochStart.Add(time.Second)) {
		t.Errorf("gate b's view: held since %v, want the fleet's 1 s", st.HeldSince.Sub(epochStart))
	}
	// The count falls under 480 at ~12.3 s: both hold until ~17 s, and have released by 18.
	var released [2]time.Duration
	for ms := 12500; ms <= 20000; ms += 500 {
		at := epochStart.Add(time.Duration(ms) * time.Millisecond)
		clk.Set(at)
		if ms%1000 == 0 {
			tickAll(t, a, b)
		}
		for i, g := range gs {
			if d := g.l.CheckAt(at, team, 0); !d.Held && released[i] == 0 {
				released[i] = at.Sub(epochStart)
			}
		}
	}
	for i, r := range released {
		if r < 17*time.Second || r > 18*time.Second {
			t.Errorf("gate %d released the team at %v, want within [17 s, 18 s]: a hold after the count fell under 480", i, r)
		}
	}
}

// TestHoldWithoutRedis: with Redis out of reach a gate keeps its own hold (fail-open as
// to counts, but a team it diverted stays diverted), and releases on its own decision.
func TestHoldWithoutRedis(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := holdGates(t, 1, srv)
	a := gs[0]
	now := epochStart.Add(500 * time.Millisecond)
	a.l.CheckAt(now, "hot", 610)
	a.l.CheckAt(now, "hot", 1)
	clk.Set(epochStart.Add(time.Second))
	tickAll(t, a)
	srv.Stop(t)
	for s := 2; s <= 4; s++ {
		clk.Set(epochStart.Add(time.Duration(s) * time.Second))
		if r := a.tk.Tick(context.Background()); r.Errors == 0 {
			t.Fatalf("tick with Redis stopped: %+v, want an error", r)
		}
		if d := a.l.CheckAt(epochStart.Add(time.Duration(s)*time.Second), "hot", 0); !d.Held {
			t.Errorf("%d s, Redis down: %+v, want still held", s, d)
		}
	}
}

// TestHoldIsFleetWideCluster: the same in cluster mode, over teams spread across the slots
// (braces in names too): each hold flag lives in its team's slot, so the gate that meets
// the teams reads their flags with their counters, one MGET per shard, and holds them.
func TestHoldIsFleetWideCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: fleetWindow, Threshold: 600, Mode: limit.Divert, SyncInterval: fleetWindow / 4,
		DivertHold: 5 * time.Second, DivertRelease: 0.8}
	var gs []*gate
	for range 2 {
		cc, err := DialCluster(cl.URLs(), RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, newTopologyGate(t, clk, lc, Config{Mode: ModeCluster, TickInterval: time.Second}, cc))
	}
	a, b := gs[0], gs[1]
	teams := []string{"a{b}c", "{", "}"}
	for i := range 20 {
		teams = append(teams, fmt.Sprintf("hot-%d", i))
	}
	now := epochStart.Add(500 * time.Millisecond)
	for _, team := range teams {
		a.l.CheckAt(now, team, 610)
		if d := a.l.CheckAt(now, team, 1); !d.Held {
			t.Fatalf("gate a, %q at 611: %+v, want held", team, d)
		}
	}
	for s := 1; s <= 11; s++ {
		clk.Set(epochStart.Add(time.Duration(s) * time.Second))
		if r := a.tk.Tick(context.Background()); r.Errors != 0 {
			t.Fatalf("gate a's tick at %d s: %+v", s, r)
		}
	}
	now = epochStart.Add(11500 * time.Millisecond)
	clk.Set(now)
	for _, team := range teams {
		b.l.CheckAt(now, team, 10)
	}
	clk.Set(epochStart.Add(12 * time.Second))
	for _, g := range gs {
		if r := g.tk.Tick(context.Background()); r.Errors != 0 || r.FailedReads != 0 {
			t.Fatalf("tick at 12 s: %+v", r)
		}
	}
	for _, team := range teams {
		if d := b.l.CheckAt(epochStart.Add(12*time.Second), team, 0); !d.Held {
			t.Errorf("gate b, %q after its first read (level %.0f): %+v, want held by the fleet's flag", team, d.Level, d)
		}
	}
}

// TestHoldKeyAndValue: a hold flag's key shares its team's slot and prefix, and its value
// reads back as written; a value that is not a flag (another writer's, a truncated one)
// is refused, not taken for a hold.
func TestHoldKeyAndValue(t *testing.T) {
	if got := HoldKeyFor(ModeStandalone, "gate", "t:1"); got != "gate:t:1:hold" {
		t.Errorf("standalone hold key %q", got)
	}
	if got, want := HoldKeyFor(ModeCluster, "gate", "a{b}"), strings.TrimSuffix(ClusterKey("gate", "a{b}", 7), ":7")+":hold"; got != want {
		t.Errorf("cluster hold key %q, want %q (the counters' hash tag)", got, want)
	}
	f := limit.HoldFlag{Team: "t", Since: time.UnixMilli(1_800_000_000_123), LastOver: time.UnixMilli(1_800_000_009_456), Threshold: 600}
	if got, ok := parseHold("t", holdValue(f)); !ok || got != f {
		t.Errorf("parseHold(holdValue(%+v)) = %+v, %v", f, got, ok)
	}
	for _, bad := range []string{"", "1:2", "1:2:x", "a:b:c", "1:2:3:4", "17"} {
		if _, ok := parseHold("t", bad); ok {
			t.Errorf("parseHold(%q) accepted", bad)
		}
	}
}

// TestHoldFlagsOneCommandALane: the hold flags of a lane go in one command (holdScript;
// one per KeysPerCommand flags, TestHoldFlagsWithinKeysPerCommand), each set as a SET of its own would set it (value, TTL of the hold), and another gate
// holds every one of those teams at its first read. A refused write of them is reported
// as a refused SET was.
func TestHoldFlagsOneCommandALane(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := holdGates(t, 2, srv)
	a, b := gs[0], gs[1]
	teams := []string{"h1", "h2", "h3", "h4", "h5"}
	now := epochStart.Add(500 * time.Millisecond)
	for _, team := range teams {
		a.l.CheckAt(now, team, 610)
		if d := a.l.CheckAt(now, team, 1); !d.Held {
			t.Fatalf("gate a, %s at 611: %+v, want held", team, d)
		}
	}
	clk.Set(epochStart.Add(time.Second))
	if r := a.tk.Tick(context.Background()); r.Errors != 0 {
		t.Fatalf("tick: %+v", r)
	}
	// One EVAL for the 5 teams' counts, one for their 5 flags; no SET.
	if set, eval := testutil.ToFloat64(a.tk.m.commands.WithLabelValues("set")), testutil.ToFloat64(a.tk.m.commands.WithLabelValues("eval")); set != 0 || eval != 2 {
		t.Errorf("commands: set %v, eval %v; want 0 and 2 (the counts' batch, the lane's 5 flags)", set, eval)
	}
	c := srv.Client(t)
	ctx := context.Background()
	for _, team := range teams {
		key := HoldKeyFor(ModeStandalone, DefaultKeyPrefix, team)
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if f, ok := parseHold(team, v); !ok || f.Threshold != 600 || !f.Since.Equal(epochStart.Add(time.Second)) {
			t.Errorf("%s = %q (%+v), want held since the tick's 1 s at 600", key, v, f)
		}
		if ttl := c.PTTL(ctx, key).Val(); ttl <= 4*time.Second || ttl > 5*time.Second {
			t.Errorf("%s TTL %v, want the hold's 5 s", key, ttl)
		}
	}
	for _, team := range teams {
		b.l.CheckAt(epochStart.Add(time.Second), team, 10) // over the sync floor (1%): read
	}
	clk.Set(epochStart.Add(2 * time.Second))
	if r := b.tk.Tick(context.Background()); r.Errors != 0 || r.Reads != len(teams) {
		t.Fatalf("gate b's tick: %+v, want a read of each team", r)
	}
	for _, team := range teams {
		if d := b.l.CheckAt(epochStart.Add(2*time.Second), team, 0); !d.Held {
			t.Errorf("gate b, %s after its first read: %+v, want held", team, d)
		}
	}

	srv.RefuseWrites(t, redistest.RefuseReadOnly)
	clk.Set(epochStart.Add(3 * time.Second))
	if r := a.tk.Tick(context.Background()); r.Errors == 0 {
		t.Errorf("tick with the hold flags refused: %+v, want an error", r)
	}
}
