package tick

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestClusterSlotMigrationKeyByKey moves one lane's slot to another primary as
// redis-cli --cluster reshard does (IMPORTING, MIGRATING, one MIGRATE a key, the slot
// given to its new owner), with a tick between every step and counts for the lane's
// teams and for teams of other lanes on the same node at each tick. Every count must
// land once, and no Redis error be counted. The lane's batch in doubt (TRYAGAIN) goes
// first in its node's pipeline, so go-redis resends that node's whole pipeline (up to
// MaxRedirects) every tick of the migration, and a read answered ASK meanwhile goes to
// both nodes at once: before, its ASK, answered last, was counted as errors{cause="redis"}
// in two runs of four.
func TestClusterSlotMigrationKeyByKey(t *testing.T) {
	if raceEnabled {
		// go-redis v9.23.0 runs that read on the two nodes in parallel, and the race
		// detector reports its two goroutines writing the command's reply (make test-norace).
		t.Skip("go-redis's cluster pipeline races on a command it sends to two nodes at once")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart.Add(time.Second))
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 200},
		Config{Mode: ModeCluster}, cc)
	ctx := context.Background()

	// The moving lane's teams, and teams of other lanes on the same node.
	var moving, others []string
	lane := -1
	for i := 0; len(moving) < 6 || len(others) < 6; i++ {
		team := fmt.Sprintf("t%d", i)
		if lane < 0 {
			lane = ClusterShard(team)
		}
		if ClusterShard(team) == lane {
			if len(moving) < 6 {
				moving = append(moving, team)
			}
		} else if len(others) < 6 {
			others = append(others, team)
		}
	}
	teams := append(append([]string(nil), moving...), others...)
	want := map[string]map[int64]int64{}
	count := func(k int) {
		ep := g.l.Epoch(clk.Now())
		for i, team := range teams {
			if (i+k)%3 == 0 {
				continue // some teams are quiet some ticks: their counters are new later
			}
			n := int64(1 + i + k)
			g.l.Check(team, n)
			if want[team] == nil {
				want[team] = map[int64]int64{}
			}
			want[team][ep] += n
		}
	}
	var results []TickResult
	tick := func() {
		clk.Advance(time.Second)
		results = append(results, g.tk.Tick(ctx))
	}
	for k := range 3 {
		count(k)
		tick()
	}
	key := ClusterKey(DefaultKeyPrefix, moving[0], g.l.Epoch(clk.Now()))
	mv := newSlotMove(t, cl, key)
	mv.do(mv.tc, "CLUSTER", "SETSLOT", mv.slot, "IMPORTING", mv.fromID)
	mv.do(mv.fc, "CLUSTER", "SETSLOT", mv.slot, "MIGRATING", mv.toID)
	count(3)
	tick()
	keys, err := mv.fc.ClusterGetKeysInSlot(ctx, int(mv.slot), 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, key := range keys {
		mv.do(mv.fc, "MIGRATE", mv.toHost, mv.toPort, key, 0, 5000)
		count(4 + k)
		tick()
		if k == len(keys)/2 {
			clk.Advance(time.Minute) // a new epoch mid-migration: new counters
		}
	}
	// Keys created on the source meanwhile (counters of the new epoch) move too.
	mv.finish()
	for k := range 3 {
		count(100 + k)
		tick()
	}
	for range 3 {
		tick()
	}
	for team, eps := range want {
		for ep, n := range eps {
			if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, team, ep); got != n {
				t.Errorf("%s epoch %d holds %d, want %d", team, ep, got, n)
			}
		}
	}
	for i, r := range results {
		if r.Errors != 0 {
			t.Errorf("tick %d = %+v, want no error", i, r)
		}
	}
	// Every series: in cluster mode a failure is counted on its primary, not instance 0.
	for k, got := range errorSeries(t, g.tk) {
		if got != 0 {
			t.Errorf("errors{cause=%s,redis_instance=%s} = %v, want 0", k[0], k[1], got)
		}
	}
	if got := testutil.ToFloat64(g.tk.m.redirects.WithLabelValues("tryagain")); got < 1 {
		t.Errorf("redirects{kind=tryagain} = %v, want ≥ 1: the test moved no slot", got)
	}
}

// TestClusterAskLeftOverIsNoError: a slot in migration whose keys have all moved to the
// importing node answers ASK on its owner. The cluster client follows ASK up to its
// redirects; when they run out within the tick (go-redis resends a node's whole pipeline
// when its first command answers TRYAGAIN, a slot in migration, and an ASK'd command is
// then sent to both nodes at once, the owner's ASK answered last in half of
// TestClusterSlotMigrationKeyByKey's runs), the ASK is what the command is left with. It
// was not run: a slot in migration, as TRYAGAIN, no failure of Redis. Before, it was
// counted as errors{cause="redis"} and logged "redis pipeline failed" with the ASK as
// its error, which a routine resharding should not do. A client that follows no redirect
// makes it happen every time.
func TestClusterAskLeftOverIsNoError(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Primaries[0].Addr()}, MaxRedirects: -1, MaxRetries: -1})
	clk := clock.NewFake(epochStart.Add(time.Second))
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	ctx := context.Background()
	ep := g.l.Epoch(clk.Now())
	g.l.Check("mover", 150) // over its threshold: read every tick
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("first tick = %+v", r)
	}
	key := ClusterKey(DefaultKeyPrefix, "mover", ep)
	mv := newSlotMove(t, cl, key)
	mv.do(mv.tc, "CLUSTER", "SETSLOT", mv.slot, "IMPORTING", mv.fromID)
	mv.do(mv.fc, "CLUSTER", "SETSLOT", mv.slot, "MIGRATING", mv.toID)
	keys, err := mv.fc.ClusterGetKeysInSlot(ctx, int(mv.slot), 100).Result()
	if err != nil || len(keys) < 2 {
		t.Fatalf("keys in the slot: %v (%v), want the counter and the sequence key", keys, err)
	}
	for _, k := range keys {
		mv.do(mv.fc, "MIGRATE", mv.toHost, mv.toPort, k, 0, 5000)
	}

	g.l.Check("mover", 5)
	clk.Advance(time.Second)
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Writes != 0 || r.CarriedWrites != 1 || r.FailedReads != 1 {
		t.Errorf("tick with ASK left on its commands = %+v, want no error, the write kept and the read failed", r)
	}
	// Every series: in cluster mode a failure is counted on its primary, not instance 0.
	for k, got := range errorSeries(t, g.tk) {
		if got != 0 {
			t.Errorf("errors{cause=%s,redis_instance=%s} = %v, want 0", k[0], k[1], got)
		}
	}
	if got := testutil.ToFloat64(g.tk.m.redirects.WithLabelValues("ask")); got < 2 {
		t.Errorf("redirects{kind=ask} = %v, want ≥ 2 (the write's and the read's)", got)
	}

	mv.finish()
	// This client follows no MOVED either: the tick starts once it knows the new owner.
	cc.ReloadState(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, err := cc.MasterForKey(ctx, key); err == nil && n.Options().Addr == mv.tc.Options().Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client never learned the slot's new owner")
		}
		time.Sleep(20 * time.Millisecond)
	}
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 || r.Reads != 1 {
		t.Fatalf("tick after the migration = %+v, want the kept write made and the team read", r)
	}
	if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, "mover", ep); got != 155 {
		t.Errorf("the team's counter holds %d, want 155", got)
	}
}
