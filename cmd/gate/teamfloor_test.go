package main

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// gate team's line on a key under its rule's floor says the floor in the rule's unit and
// the window as the table beside it does: a bytes rule's floor was said in records, and
// the window as 1m0s beside the table's 1m (a review).
func TestTeamUnderFloorLineInTheRulesUnitAndWindow(t *testing.T) {
	for _, c := range []struct {
		cost route.Cost
		n    int64
		want string
	}{{route.CostEvents, 7, " records a window"}, {route.CostBytes, 700, " bytes a window"}} {
		t0 := time.Now()
		user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1_000_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100}, clock.NewFake(t0), nil)
		if err != nil {
			t.Fatal(err)
		}
		user.CheckAt(t0, "t1:u1", c.n)
		var sw limit.Sweep
		user.Sweep(t0, &sw)
		rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}, Cost: c.cost}}
		srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { return rs })))
		var out strings.Builder
		err = teamCmd(context.Background(), []string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "t1:u1"}, func(string) string { return "" }, &out, io.Discard)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "rule team-user (1m window): under its floor") || !strings.Contains(out.String(), c.want) {
			t.Errorf("cost %s: gate team's floor line does not say %q of a 1m window:\n%s", c.cost, c.want, out.String())
		}
	}
}
