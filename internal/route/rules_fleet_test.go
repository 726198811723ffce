package route_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tick"
)

// ruleGate is one gate of a rules fleet: its rules' limiters, the tick that syncs them
// (each rule's keys under its own prefix), and the router over them.
type ruleGate struct {
	r  *route.Router
	tk *tick.Ticker
}

const fidWindow = 10 * time.Second

// TestRulesFleetFidelity: four gates sharing one Redis on a fake clock, each seeing a
// quarter of a team's traffic, with a cap rule per user (600 a window) listed before a
// cap rule per team (6,000). A runaway user offering 2 × its limit is admitted one
// threshold a window fleet-wide, as one limit alone is (TestFleetCapAdmitsOneThresholdPerWindow
// in internal/tick); and the team's other users, at 0.5 × the team's limit, are all
// admitted, on every gate.
//
// The runaway's share is held to the goal README's headline table and docs/benchmarks.md
// give for a capped team in a fleet: [0.97, 1.03] × its limit, in the steady windows 2..7
// BenchmarkFidelity measures. The bound is the goal itself, with no margin for spread:
// the run is deterministic (a fake clock, one goroutine, the same Redis commands in the
// same order), and gave 0.992 in every steady window in each of 10 runs (5 of them under
// -race, beside another test's load), 0.022 inside the lower edge; one record is 1/600
// of the ratio. A fleet model that overestimates the other gates' traffic by half (the
// fleet factor × 1.5 in limit.ApplyRead) admits 0.928 and fails here; the old bound,
// [0.9, 1.1], passed it.
func TestRulesFleetFidelity(t *testing.T) {
	srv := redistest.Start(t)
	epoch := time.Unix(1_800_000_000-1_800_000_000%60, 0)
	clk := clock.NewFake(epoch)
	const gates, userLimit, teamLimit = 4, 600, 6000
	interval := fidWindow / 60
	var fleet []ruleGate
	for range gates {
		lc := func(threshold int64) limit.Config {
			return limit.Config{Window: fidWindow, Threshold: threshold, Mode: limit.Cap, SyncInterval: fidWindow / 4}
		}
		user, err := limit.New(lc(userLimit), clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		team, err := limit.New(lc(teamLimit), clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		opt, err := redis.ParseURL(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		// The fake clock paces the ticks; the deadline only has to outlast a loaded machine.
		tk, err := tick.NewMulti([]tick.Limit{{Lim: user, KeyPrefix: "fid:rule:user"}, {Lim: team, KeyPrefix: "fid:rule:team"}},
			[]redis.UniversalClient{c}, tick.Config{TickInterval: interval, TickTimeout: time.Minute, KeyPrefix: "fid"}, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		key := func(s string) route.KeyFrom {
			k, err := route.ParseKeyFrom(s)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
		r, err := route.NewRules(route.Config{AcceptedTopic: "a", OverflowTopic: "o", DeadLetterTopic: "d"}, []route.Rule{
			{Name: "user", Key: key("json:team_id+distinct_id"), Limiters: []*limit.Limiter{user}, Action: route.ActionOverflow},
			{Name: "team", Key: key("json:team_id"), Limiters: []*limit.Limiter{team}, Action: route.ActionOverflow},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, ruleGate{r: r, tk: tk})
	}
	runaway := []byte(`{"team_id":"t1","distinct_id":"runaway"}`)
	others := make([][]byte, 100)
	for i := range others {
		others[i] = fmt.Appendf(nil, `{"team_id":"t1","distinct_id":"u%d"}`, i)
	}
	now := epoch
	var s route.Scratch
	var out kgo.Record
	for w := range 8 {
		admittedUser, admittedOthers, offeredOthers := 0, 0, 0
		for range 60 {
			// A tick's worth: the runaway at 2 × its limit, the others at 0.5 × the team's,
			// each record at one of the four gates in turn.
			perTick := 2 * userLimit / 60
			othersPerTick := teamLimit / 2 / 60
			for j := range perTick + othersPerTick {
				at := now.Add(time.Duration(j) * interval / time.Duration(perTick+othersPerTick))
				g := fleet[j%gates]
				v := runaway
				if j >= perTick {
					v = others[j%len(others)]
					offeredOthers++
				}
				o := g.r.RouteInto(at, &kgo.Record{Topic: "events", Value: v}, &s, &out)
				if o.Route == route.Accepted {
					if j < perTick {
						admittedUser++
					} else {
						admittedOthers++
					}
				}
			}
			now = now.Add(interval)
			clk.Set(now)
			for _, g := range fleet {
				if r := g.tk.Tick(context.Background()); r.Errors != 0 || r.FailedReads != 0 {
					t.Fatalf("tick: %+v", r)
				}
			}
		}
		ratio := float64(admittedUser) / userLimit
		t.Logf("window %d: runaway user admitted %.3f × its limit, the team's others %d of %d", w, ratio, admittedOthers, offeredOthers)
		if w >= 2 && (ratio < 0.97 || ratio > 1.03) {
			t.Errorf("window %d: the fleet admitted the runaway user %.3f × its limit, want within [0.97, 1.03]", w, ratio)
		}
		if admittedOthers != offeredOthers {
			t.Errorf("window %d: %d of the team's other users' %d records admitted, want all", w, admittedOthers, offeredOthers)
		}
	}
}
