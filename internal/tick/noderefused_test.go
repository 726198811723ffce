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

// TestClusterNodeRefusingWritesIsItsOwn: one primary of a cluster full (OOM under
// noeviction) refuses the writes of its slots' teams, and every gate's alike; the other
// primaries take theirs. The tick sends the cluster one plan, and took the full node's
// refusal for the whole cluster's: every team's read on every node was applied as one
// that holds the other gates' counts only as predicted (limit.Read.Refused), its fleet
// factor frozen and this gate's unwritten counts scaled by it, for as long as one node
// stayed full (a team shared by two gates kept a factor of 1). A read from a node that
// takes the writes is an ordinary read.
func TestClusterNodeRefusingWritesIsItsOwn(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	// A second gate shares the healthy team, counting as much as this one.
	cc2, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc2)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	full := cl.Owner(t, ClusterKey(DefaultKeyPrefix, "full", ep))
	healthy := ""
	for i := range 1000 {
		if team := fmt.Sprintf("team-%d", i); cl.Owner(t, ClusterKey(DefaultKeyPrefix, team, ep)) != full {
			healthy = team
			break
		}
	}
	fc := full.Client(t)
	for _, kv := range [][]any{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		if err := fc.Do(ctx, kv...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read := map[string]int{}
	var last *limit.Read // this gate's last read of the healthy team
	for i := range 10 {
		g.l.Check("full", 10)
		g.l.Check(healthy, 10)
		other.l.Check(healthy, 10)
		other.tk.Tick(ctx)
		r := g.tk.Tick(ctx)
		if i > 0 && r.Errors == 0 {
			t.Fatalf("tick %d: no error while a node refuses writes: %+v", i, r)
		}
		for _, rc := range g.tk.plans[0].rcmds {
			for _, rr := range rc.teams {
				read[rr.r.Team]++
				if rr.r.Team == healthy {
					last = rr.r
				}
				if want := rr.r.Team == "full"; rr.r.Refused != want {
					t.Errorf("tick %d: %s's read applied with Refused %v, want %v", i, rr.r.Team, rr.r.Refused, want)
				}
			}
		}
		clk.Advance(time.Second)
	}
	if read["full"] == 0 || read[healthy] == 0 {
		t.Fatalf("reads made: %v, want both teams read", read)
	}
	// Two gates counting alike: the healthy team's reads teach this one that the fleet
	// counts about twice what it does.
	if f := g.l.FleetFactor(last); f < 1.5 {
		t.Errorf("the healthy team's fleet factor is %.2f, want about 2: two gates count it alike", f)
	}
}
