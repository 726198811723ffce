package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/limit"
)

// gate team . and gate team .. ask about the keys "." and "..", not the top list or /v1
// (a mux cleans the dot segments away: /v1/teams/. was redirected to the top list, and
// read as a team under its limits).
func TestTeamCommandDotKeys(t *testing.T) {
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckAt(t0, ".", 1)
		lim.CheckAt(t0, "..", 1)
	}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, team := range []string{".", ".."} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"team", "-addr", addr, team}, testHost(nil), &stdout, &stderr)
		if want := "team " + team + ": LIMITED"; err != nil || !strings.Contains(stdout.String(), want) {
			t.Errorf("gate team %q: err %v, stdout %q; want %q", team, err, stdout.String(), want)
		}
	}
}
