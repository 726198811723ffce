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

// TestClusterHungNodeCostsOnlyItsTeams: one primary of three hangs (SIGSTOP: it keeps its
// connections and answers nothing). Each tick still ends within the tick's deadline, the
// other primaries' teams are written every tick, and once the node wakes its teams hold
// exactly what was counted: the writes it received while hung and applied on waking are
// not added again by the resends. Before ticks had a deadline, the cluster client's
// retries made every tick take 1.9-2.1 s against a 1 s interval, delaying every node.
func TestClusterHungNodeCostsOnlyItsTeams(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	interval := time.Second
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{Mode: ModeCluster, TickInterval: interval}, cc)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	teams := make([]string, 60)
	want := map[string]int64{}
	for i := range teams {
		teams[i] = fmt.Sprintf("team-%d", i)
		g.l.Check(teams[i], 1)
		want[teams[i]] = 1
	}
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != len(teams) {
		t.Fatalf("tick = %+v", r)
	}

	// Without full coverage the cluster keeps serving the other nodes' slots once it
	// calls the hung node failed (cluster-node-timeout); with it, every node would answer
	// CLUSTERDOWN, which is the cluster's choice and not what this test is about.
	for _, n := range cl.Primaries {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	victim := cl.Owner(t, ClusterKey(DefaultKeyPrefix, teams[0], ep))
	onVictim := map[string]bool{}
	for _, team := range teams {
		onVictim[team] = cl.Owner(t, ClusterKey(DefaultKeyPrefix, team, ep)) == victim
	}
	healthy := 0
	for _, v := range onVictim {
		if !v {
			healthy++
		}
	}
	victim.Pause(t)
	paused := true
	defer func() {
		if paused {
			victim.Resume(t)
		}
	}()
	for tick := range 3 {
		for _, team := range teams {
			g.l.Check(team, 1)
			want[team]++
		}
		clk.Advance(interval)
		start := time.Now()
		r := g.tk.Tick(ctx)
		took := time.Since(start)
		// The deadline is 3/4 of the interval; what remains of a tick after it is local.
		if took > interval+interval/2 {
			t.Errorf("tick %d took %s with one node hung, want it bounded by its deadline (%s)", tick, took, g.tk.Config().TickTimeout)
		}
		if r.Writes != healthy {
			t.Errorf("tick %d = %+v: want the %d teams on healthy nodes written", tick, r, healthy)
		}
		for _, team := range teams {
			if onVictim[team] {
				continue
			}
			if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, team, ep); got != want[team] {
				t.Errorf("tick %d: %s on a healthy node holds %d, want %d", tick, team, got, want[team])
			}
		}
	}

	victim.Resume(t)
	paused = false
	deadline := time.Now().Add(30 * time.Second)
	for {
		clk.Advance(interval)
		r := g.tk.Tick(ctx)
		if r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts for the woken node never confirmed: %+v", r)
		}
	}
	for _, team := range teams {
		if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, team, ep); got != want[team] {
			t.Errorf("after the node woke: %s holds %d, want %d (on the hung node: %v)", team, got, want[team], onVictim[team])
		}
	}
}

// TestClusterHungNodeCostsOthersNoReads is TestHungInstanceCostsOthersNoReads on Redis
// Cluster, whose lanes are shards and whose pipelines go one per primary: with one primary
// hung, a team of another primary's, which the fleet has taken far past its limit, is
// still read by Run and limited.
func TestClusterHungNodeCostsOthersNoReads(t *testing.T) {
	t.Parallel()
	const interval = 400 * time.Millisecond
	const prefix = "hungc"
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := newTopologyGate(t, nil, limit.Config{Window: time.Minute, Threshold: 1000},
		Config{Mode: ModeCluster, TickInterval: interval, KeyPrefix: prefix}, cc)
	ctx := context.Background()
	for _, n := range cl.Primaries { // the other nodes keep serving their slots (see above)
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	ep := g.l.Epoch(time.Now())
	victim := cl.Owner(t, ClusterKey(prefix, "t0", ep))
	busy := ""
	for i := 1; busy == ""; i++ {
		if team := fmt.Sprintf("t%d", i); cl.Owner(t, ClusterKey(prefix, team, ep)) != victim {
			busy = team
		}
	}
	for _, e := range []int64{ep, ep + 1} {
		if err := cc.Set(ctx, ClusterKey(prefix, busy, e), 100_000, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer countEvery(g.l, "t0", interval/4)() // the victim's write phase waits to the deadline
	victim.Pause(t)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { g.tk.Run(rctx); close(done) }()
	defer func() { cancel(); victim.Resume(t); <-done }()
	limited := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !limited; time.Sleep(interval / 4) {
		limited = g.l.Check(busy, 1).Limited
	}
	if !limited {
		t.Errorf("a team of a healthy primary at 100× its limit in Redis was never limited while another primary hung: its reads failed")
	}
}
