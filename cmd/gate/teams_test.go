package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/capturegate/gate/internal/route"
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
	for _, want := range []string{"team whale: LIMITED", `as seen by the gate at ` + addr + `: Redis prefix "prod-gate"`, `consumer group "prod-gate"`, "WINDOW", "\n1m ", "10 (override)", "40", "400%", "hot", " 3m ", "never read",
		"DIVERTED SINCE", t0.UTC().Format(time.RFC3339), "not before " + t0.Add(time.Minute).UTC().Format(time.RFC3339)} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// -addr after TEAM as well as before.
	if out, err := do(nil, "whale", "-addr", addr); err != nil || !strings.Contains(out, "team whale: LIMITED") {
		t.Errorf("-addr after TEAM: %q %v", out, err)
	}
	// A team the gate has no state for is a failure (exit status 1), on one line that says
	// so and why, and nothing on stdout. The address comes from GATE_HTTP_ADDR when -addr
	// is not given.
	if out, err := do(map[string]string{"GATE_HTTP_ADDR": addr}, "nobody"); err == nil || cli.ExitCode(err) != 1 || out != "" ||
		err.Error() != "team nobody: no state on the gate at "+addr+": team not cached on this gate: it has sent nothing here lately (each gate sees the teams of the partitions it owns)" {
		t.Errorf("unknown team: stdout %q, err %v (exit %d)", out, err, cli.ExitCode(err))
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

// gate team -top N lists the gate's N teams closest to or over their limits, from
// GET /v1/teams?top=N, highest pressure first; gate team with neither TEAM nor -top
// prints its usage, which names -top.
func TestTeamCommandTop(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clk := clock.NewFake(t0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"whale": 10}}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := limit.New(limit.Config{Window: time.Hour, Threshold: 1000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for team, n := range map[string]int{"whale": 40, "minnow": 5, "shrimp": 1} {
		for range n {
			lim.CheckAt(t0, team, 1)
			hour.CheckAt(t0, team, 1)
		}
	}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{RedisPrefix: "prod-gate", ConsumerGroup: "grp"}, endpoints.FixedRules(lim, hour))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	do := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"team"}, args...), testHost(map[string]string{"GATE_HTTP_ADDR": addr}), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	out, _, err := do("-top", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// A header, the columns, then a row per limit of each team: whale's two, minnow's two.
	if len(lines) != 6 || lines[0] != `2 teams on the gate at `+addr+`, closest to or over their limits first: Redis prefix "prod-gate" (GATE_REDIS_PREFIX for gate overrides), consumer group "grp"` ||
		!strings.HasPrefix(lines[1], "TEAM") || !strings.Contains(lines[1], "PRESSURE") ||
		!strings.HasPrefix(lines[2], "whale") || field(lines[2], 1) != "1m" || !strings.Contains(lines[2], "10 (override)") || !strings.Contains(lines[2], "400%") || !strings.Contains(lines[2], "true") ||
		!strings.HasPrefix(lines[3], "whale") || field(lines[3], 1) != "1h" || !strings.Contains(lines[3], "4%") ||
		!strings.HasPrefix(lines[4], "minnow") || !strings.Contains(lines[4], "5%") || !strings.HasPrefix(lines[5], "minnow") {
		t.Errorf("-top 2:\n%s", out)
	}
	// -top after -addr or before it, as any flag.
	if out, _, err := do("-top", "1", "-addr", addr); err != nil || strings.Count(out, "\nwhale") != 2 || strings.Contains(out, "minnow") {
		t.Errorf("-top 1: %q %v", out, err)
	}
	// None cached: said, not an error.
	empty, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(empty))))
	defer srv2.Close()
	addr2 := strings.TrimPrefix(srv2.URL, "http://")
	if out, _, err := do("-top", "5", "-addr", addr2); err != nil || out != "no teams cached on the gate at "+addr2+": none has sent anything there lately\n" {
		t.Errorf("-top with no teams: %q %v", out, err)
	}
	// Neither TEAM nor -top: the usage, which names -top, and a usage error.
	if _, stderr, err := do(); cli.ExitCode(err) != 2 || !strings.Contains(stderr, "gate team [-addr HOST:PORT] -top N") || !strings.Contains(err.Error(), "-top N") {
		t.Errorf("no TEAM: %v, stderr:\n%s", err, stderr)
	}
	for _, args := range [][]string{{"-top", "0"}, {"-top", "-1"}, {"-top", fmt.Sprint(endpoints.MaxTop + 1)}, {"-top", "x"}, {"-top", "2", "whale"}} {
		if _, _, err := do(args...); err == nil || cli.ExitCode(err) != 2 {
			t.Errorf("team %q: %v, want a usage error", args, err)
		}
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

// A user rule's key under its floor is shown as such (its sketch count, the floor), and a
// team rotating identities under it says so, in the API and in `gate team`.
func TestTeamAPIUnderFloorAndRotating(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clk := clock.NewFake(t0)
	user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		user.CheckAt(t0, "t1:u1", 1)
	}
	for i := range 300 {
		user.CheckAt(t0, fmt.Sprintf("rot:id-%d", i), 1)
	}
	var sw limit.Sweep
	user.Sweep(t0, &sw)
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}}
	api := endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { return rs })
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, api))
	defer srv.Close()
	var out strings.Builder
	if err := teamCmd(context.Background(), []string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "t1:u1"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "under its floor on this gate (100 records a window)") {
		t.Errorf("gate team t1:u1:\n%s", out.String())
	}
	out.Reset()
	if err := teamCmd(context.Background(), []string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "rot"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rule team-user: rotating identities since") || !strings.Contains(out.String(), "on_cardinality: collapse") {
		t.Errorf("gate team rot:\n%s", out.String())
	}
	// A team that is only rotating has no limit rows: "limits" is an empty list, as ?top=N
	// gives it, not null (jq '.limits[]' fails on null).
	resp, err := http.Get(srv.URL + "/v1/teams/rot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"limits": []`) {
		t.Errorf("GET /v1/teams/rot: %d %s; want 200 and \"limits\":[]", resp.StatusCode, body)
	}
}

// gate team prints the team it was asked about as its tables do (cli.Shown): a newline
// in it does not split the first line, an escape sequence does not reach the terminal,
// and bytes that are not UTF-8 are not shown as the JSON's U+FFFD.
func TestTeamCommandOddNamesQuoted(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"x\ny", "\x1b[31mred", "\xff\xfe", "plain:a%3Ab"} {
		for range 40 {
			lim.CheckAt(t0, team, 1)
		}
	}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for team, want := range map[string]string{
		"x\ny":        `team "x\ny": LIMITED`,
		"\x1b[31mred": `team "\x1b[31mred": LIMITED`,
		"\xff\xfe":    `team "\xff\xfe": LIMITED`,
		"plain:a%3Ab": `team plain:a%3Ab: LIMITED`,
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"team", "-addr", addr, "--", team}, testHost(nil), &stdout, &stderr)
		if first, _, _ := strings.Cut(stdout.String(), "\n"); err != nil || first != want {
			t.Errorf("gate team %q: err %v, first line %q; want %q", team, err, first, want)
		}
	}
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"team", "-addr", addr, "no\nbody"}, testHost(nil), &stdout, &stderr)
	if err == nil || cli.ExitCode(err) != 1 || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), `team "no\nbody": no state on the gate at `+addr) {
		t.Errorf("unknown team with a newline: %v (exit %d); want one line naming it quoted", err, cli.ExitCode(err))
	}
}

// gate team -top names a key that is not UTF-8 (a binary record key) as gate team TEAM
// does, quoted: the JSON's team has each such byte U+FFFD, so "t\xff" and "t\xfe" were
// two rows both "t\ufffd", neither a key gate team or gate overrides would find.
func TestTeamTopQuotesKeysThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"t\xff", "t\xfe"} {
		for range 40 {
			lim.CheckAt(t0, team, 1)
		}
	}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim))))
	defer srv.Close()
	var out strings.Builder
	if err := teamCmd(t.Context(), []string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "-top", "5"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var teams []string
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "1m" {
			teams = append(teams, f[0])
		}
	}
	if want := []string{`"t\xfe"`, `"t\xff"`}; !slices.Equal(teams, want) {
		t.Errorf("gate team -top: teams %q, want %q\n%s", teams, want, out.String())
	}
}

// Under the event clock the view gives no wait until a limited team is under (how soon
// depends on its partitions' event time, not the wall clock: seconds_until_under is 0);
// gate team must not print that 0 as "under in 0s" for a team that is over.
func TestTeamCommandEventClockUnderIn(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10, Clock: limit.EventClock}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckEventAt(t0, t0, "whale", 1)
	}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim))))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"team", "-addr", strings.TrimPrefix(srv.URL, "http://"), "whale"}, testHost(nil), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(stdout.String(), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "1m ") })
	if i < 0 {
		t.Fatalf("no row for the limit:\n%s", stdout.String())
	}
	// WINDOW THRESHOLD LEVEL PRESSURE TIER LIMITED UNDER-IN ...
	if f := strings.Fields(lines[i]); len(f) < 7 || f[5] != "true" || f[6] != "-" {
		t.Errorf("row %q: want LIMITED true and UNDER IN -, not a wait of 0s\n%s", lines[i], stdout.String())
	}
}

// gate team -top lists a team rotating identities that has no limit row (on_cardinality
// overflow: its keys under the floor are never cached), with a row saying so, rather than
// leaving it out of the table its count in the heading includes.
func TestTeamTopShowsRotatingTeam(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clk := clock.NewFake(t0)
	user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth,
		KeyCardinality: 100, OnCardinality: limit.CardinalityOverflow}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		user.CheckAt(t0, fmt.Sprintf("rot:id-%d", i), 1)
	}
	var sw limit.Sweep
	user.Sweep(t0, &sw)
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { return rs })))
	defer srv.Close()
	var out strings.Builder
	if err := teamCmd(t.Context(), []string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "-top", "5"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, "rot ") {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 8 || f[1] != "team-user" || !slices.Contains(f, "rotating") || !slices.Contains(f, "true") {
		t.Errorf("gate team -top: row of rot %q, want one under team-user, rotating and limited\n%s", row, out.String())
	}
	if !strings.Contains(out.String(), "rot: rotating identities under rule team-user") {
		t.Errorf("gate team -top: no line saying rot rotates identities\n%s", out.String())
	}
}

// gate team -top against a gate that is not ready says so and why, not that no team has
// sent anything there lately.
func TestTeamTopSaysTheGateIsNotReady(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"gate": {"redis_prefix": "gate", "consumer_group": "g"}, "teams": [], "not_ready": ["kafka: not joined to consumer group g yet"]}`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"team", "-addr", addr, "-top", "5"}, testHost(nil), &stdout, &stderr)
	if want := "no teams cached on the gate at " + addr + ": it is not ready (/readyz): kafka: not joined to consumer group g yet\n"; err != nil || stdout.String() != want {
		t.Errorf("gate team -top, gate not ready: %v\n%s\nwant %q", err, stdout.String(), want)
	}
}

// TestTeamCommandSlowGateSaysWhatItWaitedFor: a gate that takes longer than the
// command's 5 s to answer (overloaded, or -addr a port that accepts and says nothing)
// fails gate team, of a TEAM or -top, with an error that names the gate's address and
// the 5 s the command waited, its own limit. Before, it ended in "context deadline
// exceeded", a deadline nobody had set, with no word of how long it had waited.
func TestTeamCommandSlowGateSaysWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: the client gives up
	}))
	t.Cleanup(srv.Close) // after the parallel subtests
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, args := range [][]string{{"whale"}, {"-top", "5"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			err := teamCmd(t.Context(), append([]string{"-addr", addr}, args...), func(string) string { return "" }, io.Discard, io.Discard)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want the command's deadline", err)
			}
			if want := "no answer from the gate at " + addr + " within 5s"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}

// field is the i-th blank-separated field of line, "" past its last: the windows are
// written as a rules file writes them (1m, 1h; they were time.Duration's 1m0s).
func field(line string, i int) string {
	if f := strings.Fields(line); i < len(f) {
		return f[i]
	}
	return ""
}

// TestUnderTextOfALimitedTeamIsNeverZero: a limited team a fraction of a second over its
// threshold (cap mode holds teams there) shows UNDER IN <1s, not 0s beside LIMITED true,
// which read as a contradiction (a review); longer waits as an operator writes them.
func TestUnderTextOfALimitedTeamIsNeverZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secs float64
		want string
	}{{0.0057, "<1s"}, {0.6, "1s"}, {180, "3m"}, {5400, "1h30m"}} {
		if got := underText(endpoints.LimitJSON{Limited: true, SecondsUntilUnder: tc.secs}); got != tc.want {
			t.Errorf("underText(limited, %v s) = %q, want %q", tc.secs, got, tc.want)
		}
	}
}

// TestTeamTablesSayBytes: a limit that counts bytes (GATE_COST=bytes, a rule's cost:
// bytes) shows its threshold as bytes in gate team's table and in -top's, so that 20000
// is not read as 20000 events; one that counts events shows the number alone.
func TestTeamTablesSayBytes(t *testing.T) {
	t0 := time.Now()
	newLim := func() *limit.Limiter {
		lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 20000}, clock.NewFake(t0), nil)
		if err != nil {
			t.Fatal(err)
		}
		lim.CheckAt(t0, "2", 1500)
		return lim
	}
	rules := []gate.RuleLimits{{Name: "team-bytes", Lims: []*limit.Limiter{newLim()}, Cost: route.CostBytes}, {Name: "team", Lims: []*limit.Limiter{newLim()}}}
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { return rules })))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, args := range [][]string{{"2"}, {"-top", "5"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"team", "-addr", addr}, args...), testHost(nil), &stdout, &stderr); err != nil {
			t.Fatalf("gate team %s: %v\n%s", args, err, stderr.String())
		}
		var bytesRow, eventsRow string
		for line := range strings.Lines(stdout.String()) {
			switch f := strings.Fields(line); {
			case slices.Contains(f, "team-bytes"):
				bytesRow = line
			case slices.Contains(f, "team"):
				eventsRow = line
			}
		}
		if !strings.Contains(bytesRow, "20000 bytes") || eventsRow == "" || strings.Contains(eventsRow, "bytes") || !strings.Contains(eventsRow, "20000") {
			t.Errorf("gate team %s: want 20000 bytes on team-bytes's row only:\n%s", args, stdout.String())
		}
	}
}

// gate team shows a shadow rule's rows as the rule's, marked (shadow), and a key over it
// alone as under its limits: the rule sends no record away.
func TestTeamCommandShadowRule(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clk := clock.NewFake(t0)
	newLim := func(thr int64) *limit.Limiter {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: thr}, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	trial, team := newLim(10), newLim(1000)
	rs := []gate.RuleLimits{{Name: "trial", Lims: []*limit.Limiter{trial}, Shadow: true}, {Name: "team", Lims: []*limit.Limiter{team}}}
	trial.CheckAt(t0, "t1", 50)
	team.CheckAt(t0, "t1", 50)
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, func() []gate.RuleLimits { return rs })))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, args := range [][]string{{"team", "-addr", addr, "t1"}, {"team", "-addr", addr, "-top", "5"}} {
		var out, stderr bytes.Buffer
		if err := run(t.Context(), args, testHost(nil), &out, &stderr); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out.String(), "trial (shadow)") || strings.Contains(out.String(), "LIMITED\n") {
			t.Errorf("%v:\n%s\nwant the rule shown as trial (shadow), the team not LIMITED", args, out.String())
		}
	}
}
