package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/spike"
)

// gate team TEAM asks a gate's team view and prints it as a table.
func TestTeamCommand(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"whale": 10}}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckAt(t0, "whale", 1)
	}
	lim.Sweep(t0, new(limit.Sweep)) // the tick takes the whale's hold
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{RedisPrefix: "prod-gate", ConsumerGroup: "prod-gate"}, endpoints.FixedRules(lim))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	do := func(getenv map[string]string, args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"team"}, args...), testHost(getenv), &stdout, &stderr)
		return stdout.String(), err
	}
	out, err := do(nil, "-addr", addr, "whale")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team whale: LIMITED", `as seen by the gate at ` + addr + `: Redis prefix "prod-gate"`, `consumer group "prod-gate"`, "WINDOW", "1m0s", "10 (override)", "40", "400%", "hot", "3m0s", "never read",
		"DIVERTED SINCE", t0.UTC().Format(time.RFC3339), "not before " + t0.Add(time.Minute).UTC().Format(time.RFC3339)} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The address comes from GATE_HTTP_ADDR when -addr is not given.
	if out, err := do(map[string]string{"GATE_HTTP_ADDR": addr}, "nobody"); err != nil || !strings.Contains(out, "nobody: team not cached on this gate") {
		t.Errorf("unknown team: %q %v", out, err)
	}
	for _, args := range [][]string{nil, {"a", "b"}, {"-addr", "nocolon", "x"}, {"-bogus", "x"}} {
		if _, err := do(nil, args...); err == nil || cli.ExitCode(err) != 2 {
			t.Errorf("team %q: %v, want a usage error", args, err)
		}
	}
	if _, err := do(nil, "-addr", closedPort(t), "whale"); err == nil || !strings.Contains(err.Error(), "asking the gate at") {
		t.Errorf("no gate: %v", err)
	}
}

// TestTeamAPIAdaptive: in adaptive mode the team view says where the threshold comes from,
// the learned threshold and baseline, since when the team is in a spike and its daily
// pattern hours; `gate team` shows them.
func TestTeamAPIAdaptive(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000-1_800_000_000%3600, 0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1_000_000, Adaptive: &spike.Config{}}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim.CheckAt(t0, "steady", 1)
	lim.CheckAt(t0, "fresh", 1)
	var sw limit.Sweep
	lim.Sweep(t0, &sw)
	for i := range sw.Reads {
		if r := &sw.Reads[i]; r.Team == "steady" {
			// A day of history at 50 a window, folded up to the window before: not due.
			// An earlier spike ended by re-learning two hours ago (no part of the next).
			// Its nightly import at 02:00 and 03:00 is a daily pattern.
			p := spike.Profile{Epoch: r.Epoch - 1, Windows: 1440, Level: 50, Relearned: r.Epoch - 120, Pattern: 1<<2 | 1<<3}
			lim.ApplyProfile(r, p, true, 0, t0)
		}
	}
	lim.CheckAt(t0, "steady", 300) // over 4 × 50
	lim.Sweep(t0, &sw)
	if len(sw.Spikes) != 1 || sw.Spikes[0].Team != "steady" || sw.Spikes[0].Threshold != 200 {
		t.Fatalf("spikes %+v, want steady's over 200", sw.Spikes)
	}
	mux := endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim)))
	get := func(team string) endpoints.LimitJSON {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/"+team, nil))
		var v endpoints.TeamJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || len(v.Limits) != 1 {
			t.Fatalf("GET %s: %v\n%s", team, err, rec.Body)
		}
		return v.Limits[0]
	}
	s := get("steady")
	if s.ThresholdMode != "adaptive" || s.ThresholdSource != "learned" || s.Threshold != 200 || s.LearnedThreshold == nil || *s.LearnedThreshold != 200 ||
		s.Baseline == nil || *s.Baseline != 50 || s.SpikeSince == nil || !s.SpikeSince.Equal(t0) ||
		s.SpikeEnds == nil || !s.SpikeEnds.Equal(t0.Add(spike.DefaultMaxSpike)) {
		t.Errorf("steady: %+v, want a spike since %v ending by re-learning at %v", s, t0, t0.Add(spike.DefaultMaxSpike))
	}
	if s.RelearnedAt == nil || !s.RelearnedAt.Equal(t0.Add(-120*time.Minute)) {
		t.Errorf("steady: relearned_at %v, want %v", s.RelearnedAt, t0.Add(-120*time.Minute))
	}
	if !slices.Equal(s.PatternHoursUTC, []int{2, 3}) {
		t.Errorf("steady: pattern_hours_utc %v, want [2 3]", s.PatternHoursUTC)
	}
	if f := get("fresh"); f.ThresholdMode != "adaptive" || f.ThresholdSource != "static" || f.Threshold != 1_000_000 || f.Baseline != nil || f.SpikeSince != nil {
		t.Errorf("fresh (no history yet): %+v", f)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out, stderr bytes.Buffer
	if err := run(t.Context(), []string{"team", "-addr", strings.TrimPrefix(srv.URL, "http://"), "steady"}, testHost(nil), &out, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BASELINE", "SPIKE SINCE", "200 (learned)", t0.UTC().Format(time.RFC3339),
		"over its learned threshold 200 (its usual 50 a window", "accepted by " + t0.Add(spike.DefaultMaxSpike).UTC().Format(time.RFC3339),
		"daily pattern at 02:00, 03:00 UTC"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gate team output lacks %q:\n%s", want, out.String())
		}
	}
}

// With rules, the team view answers for any rule's key, a row per limit of each rule that
// has state for it, asking for the rules in use on each request; ?top=N ranks keys of
// every rule; gate team prints the rule of each row.
func TestTeamAPIRules(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clk := clock.NewFake(t0)
	newLim := func(w time.Duration, thr int64) *limit.Limiter {
		l, err := limit.New(limit.Config{Window: w, Threshold: thr}, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	user, team, teamHour := newLim(time.Minute, 10), newLim(time.Minute, 1000), newLim(time.Hour, 10000)
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}, {Name: "team", Lims: []*limit.Limiter{team, teamHour}}}
	for range 20 {
		user.CheckAt(t0, "t1:u1", 1)
	}
	team.CheckAt(t0, "t1", 20)
	teamHour.CheckAt(t0, "t1", 20)
	calls := 0
	api := endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { calls++; return rs })
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, api))
	defer srv.Close()
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	var u, tm endpoints.TeamJSON
	if get("/v1/teams/t1:u1", &u) != http.StatusOK || !u.Limited || len(u.Limits) != 1 || u.Limits[0].Rule != "team-user" || u.Limits[0].Threshold != 10 {
		t.Errorf("t1:u1: %+v", u)
	}
	if get("/v1/teams/t1", &tm) != http.StatusOK || tm.Limited || len(tm.Limits) != 2 || tm.Limits[0].Rule != "team" || tm.Limits[1].Window != "1h0m0s" {
		t.Errorf("t1: %+v", tm)
	}
	if code := get("/v1/teams/nobody", nil); code != http.StatusNotFound {
		t.Errorf("unknown key: %d", code)
	}
	var top struct{ Teams []endpoints.TeamJSON }
	if get("/v1/teams?top=5", &top) != http.StatusOK || len(top.Teams) != 2 || top.Teams[0].Team != "t1:u1" {
		t.Errorf("top: %+v", top)
	}
	if calls < 3 {
		t.Errorf("the rules were asked for %d times, want on every request", calls)
	}
	var out, stderr bytes.Buffer
	if err := run(t.Context(), []string{"team", "-addr", strings.TrimPrefix(srv.URL, "http://"), "t1"}, testHost(nil), &out, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "RULE") || !strings.Contains(out.String(), "team  ") {
		t.Errorf("gate team with rules:\n%s", out.String())
	}
}
