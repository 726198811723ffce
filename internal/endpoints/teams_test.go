package endpoints

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

func TestTeamAPI(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"whale": 10}}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckAt(t0, "whale", 1)
	}
	for range 5 {
		lim.CheckAt(t0, "minnow", 1)
	}
	mux := NewMux(prometheus.NewRegistry(), nil, &TeamAPI{rules: FixedRules(lim)})
	get := func(path string, v any) int {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if v != nil {
			if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
				t.Fatalf("GET %s: %v\n%s", path, err, rec.Body)
			}
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: content type %q", path, ct)
		}
		return rec.Code
	}

	var whale TeamJSON
	if code := get("/v1/teams/whale", &whale); code != http.StatusOK {
		t.Fatalf("GET /v1/teams/whale: %d", code)
	}
	l := whale.Limits[0]
	if whale.Team != "whale" || !whale.Limited || len(whale.Limits) != 1 || l.Window != "1m0s" || l.Threshold != 10 ||
		!l.Override || l.Level != 40 || l.Pressure != 4 || l.Pending != 40 || l.Tier != "hot" || !l.Limited ||
		l.EstimateAgeSeconds != nil || l.SecondsUntilUnder != 180 {
		t.Errorf("whale: %+v", whale)
	}

	if l.DivertedSince != nil || l.ReleaseAt != nil || l.FleetShare != 1 {
		t.Errorf("whale before any tick: diverted since %v, release at %v, share %v; want not held yet, share 1", l.DivertedSince, l.ReleaseAt, l.FleetShare)
	}
	// The tick's sweep takes the hold the checks started: the view says since when, and
	// when it ends if the whale calms down (a hold, one window, after its last time over).
	lim.Sweep(t0.Add(time.Second), new(limit.Sweep))
	if code := get("/v1/teams/whale", &whale); code != http.StatusOK {
		t.Fatalf("GET /v1/teams/whale: %d", code)
	}
	if l := whale.Limits[0]; l.DivertedSince == nil || !l.DivertedSince.Equal(t0.Add(time.Second)) ||
		l.ReleaseAt == nil || !l.ReleaseAt.Equal(t0.Add(61*time.Second)) {
		t.Errorf("whale held: diverted since %v, release at %v; want %v and %v", l.DivertedSince, l.ReleaseAt, t0.Add(time.Second), t0.Add(61*time.Second))
	}

	var top struct{ Teams []TeamJSON }
	if code := get("/v1/teams?top=1", &top); code != http.StatusOK || len(top.Teams) != 1 || top.Teams[0].Team != "whale" {
		t.Errorf("top 1: %d %+v", code, top)
	}
	if code := get("/v1/teams", &top); code != http.StatusOK || len(top.Teams) != 2 || top.Teams[1].Team != "minnow" {
		t.Errorf("top: %d %+v", code, top)
	}
	var e map[string]string
	// A top the query's syntax loses (a bad escape, a ';') is refused too, not taken
	// for no top at all and answered with the default 20.
	// So is a top given empty or twice, not answered with the default or the first.
	for _, bad := range []string{"0", "-1", "x", fmt.Sprint(MaxTop + 1), "%ZZ", "1;2", "1%", "", "1&top=5000"} {
		if code := get("/v1/teams?top="+bad, &e); code != http.StatusBadRequest || e["error"] == "" {
			t.Errorf("top=%s: %d %v", bad, code, e)
		}
	}
	if code := get("/v1/teams/nobody", &e); code != http.StatusNotFound || e["error"] == "" {
		t.Errorf("unknown team: %d %v", code, e)
	}
	if lim.Len() != 2 {
		t.Errorf("the view cached a team: %d cached", lim.Len())
	}
}

// With several limits, a team has one entry per limit, and is limited when any is.
func TestTeamAPISeveralLimits(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := limit.New(limit.Config{Window: time.Hour, Threshold: 20}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckAt(t0, "whale", 1)
		hour.CheckAt(t0, "whale", 1)
	}
	for range 50 {
		lim.CheckAt(t0, "minnow", 1)
		hour.CheckAt(t0, "minnow", 1)
	}
	mux := NewMux(prometheus.NewRegistry(), nil, &TeamAPI{rules: FixedRules(lim, hour)})
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/whale", nil))
	var whale TeamJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &whale); err != nil {
		t.Fatal(err)
	}
	if !whale.Limited || len(whale.Limits) != 2 || whale.Limits[0].Window != "1m0s" || whale.Limits[0].Threshold != 100 ||
		whale.Limits[0].Limited || whale.Limits[1].Window != "1h0m0s" || whale.Limits[1].Threshold != 20 || !whale.Limits[1].Limited {
		t.Errorf("whale: %+v", whale)
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams?top=1", nil))
	var top struct{ Teams []TeamJSON }
	if err := json.Unmarshal(rec.Body.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	// Ranked by the highest pressure over the limits: minnow 2.5 (hour), whale 2 (hour).
	if len(top.Teams) != 1 || top.Teams[0].Team != "minnow" {
		t.Errorf("top 1: %+v", top)
	}
}

// threshold_source says where threshold comes from in every mode, not only the adaptive
// one: an overridden team's is override (the view showed static under the static mode and
// the event clock, where override is true and the threshold is the override's).
func TestTeamAPIThresholdSource(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, clk := range []limit.Clock{limit.WallClock, limit.EventClock} {
		t.Run(clk.String(), func(t *testing.T) {
			lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Clock: clk, Overrides: map[string]int64{"whale": 10}}, clock.NewFake(t0), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, team := range []string{"whale", "minnow"} {
				lim.CheckEventAt(t0, t0, team, 1)
			}
			mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
			for team, want := range map[string]struct {
				thr int64
				src string
			}{"whale": {10, "override"}, "minnow": {100, "static"}} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/"+team, nil))
				var v TeamJSON
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || len(v.Limits) != 1 {
					t.Fatalf("GET /v1/teams/%s: %d %v %s", team, rec.Code, err, rec.Body)
				}
				if l := v.Limits[0]; l.Threshold != want.thr || l.ThresholdMode != "static" || l.ThresholdSource != want.src {
					t.Errorf("%s: threshold %d, threshold_mode %q, threshold_source %q; want %d, static, %s", team, l.Threshold, l.ThresholdMode, l.ThresholdSource, want.thr, want.src)
				}
			}
		})
	}
}

// A team whose id holds ':' is shown rotating when asked by its id: the per-user rule
// records the team as its key's first field, escaped (team a:b as a%3Ab, internal/keypart),
// while the team rule's key, and what an operator asks for, is the id itself. The escaped
// field, as the rotation's log line names it, still finds it.
func TestTeamAPIRotatingTeamWithColon(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	team, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The keys the router builds for team a:b: a%3Ab:USER under the per-user rule, a:b
	// under the team rule.
	for i := range 300 {
		user.CheckAt(t0, fmt.Sprintf("a%%3Ab:id-%d", i), 1)
		team.CheckAt(t0, "a:b", 1)
	}
	var sw limit.Sweep
	user.Sweep(t0, &sw)
	if rt := user.Rotating(); len(rt) != 1 || rt[0].Team != "a%3Ab" {
		t.Fatalf("rotating %+v, want team a%%3Ab", rt)
	}
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}, {Name: "team", Lims: []*limit.Limiter{team}}}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs }))
	for _, path := range []string{"/v1/teams/a:b", "/v1/teams/a%253Ab"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var v TeamJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, rec.Code, err, rec.Body)
		}
		if len(v.Rotating) != 1 || v.Rotating[0].Rule != "team-user" {
			t.Errorf("GET %s: rotating %+v, want the team-user rule's\n%s", path, v.Rotating, rec.Body)
		}
	}
}

// A team found rotating identities under a per-user rule is in ?top=N even when it has no
// cached key of its own: with on_cardinality overflow (or tag) its keys under the floor
// are never cached, so the limiters' Top never names it, yet every such record of it goes
// to overflow. It is ranked as over its limit (overflow) and named by its id, as
// /v1/teams/{team} finds it; a team only tagged ranks by its rows like any other.
func TestTeamAPITopListsRotatingTeams(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	rs := []gate.RuleLimits{}
	for _, action := range []limit.CardinalityAction{limit.CardinalityOverflow, limit.CardinalityTag} {
		user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth,
			KeyCardinality: 100, OnCardinality: action}, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, gate.RuleLimits{Name: "user-" + action.String(), Lims: []*limit.Limiter{user}})
	}
	team, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, gate.RuleLimits{Name: "team", Lims: []*limit.Limiter{team}})
	// Team a:b rotates under the overflow rule (its keys' first field a%3Ab), team tagged
	// under the tag rule; busy is at half its team limit, the only key any Top names.
	for i := range 300 {
		rs[0].Lims[0].CheckAt(t0, fmt.Sprintf("a%%3Ab:id-%d", i), 1)
		rs[1].Lims[0].CheckAt(t0, fmt.Sprintf("tagged:id-%d", i), 1)
	}
	for range 50 {
		team.CheckAt(t0, "busy", 1)
	}
	for _, rl := range rs[:2] {
		var sw limit.Sweep
		rl.Lims[0].Sweep(t0, &sw)
		if len(rl.Lims[0].Rotating()) != 1 {
			t.Fatalf("rule %s: rotating %+v, want one team", rl.Name, rl.Lims[0].Rotating())
		}
	}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs }))
	get := func(top int) []TeamJSON {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, fmt.Sprintf("/v1/teams?top=%d", top), nil))
		var a TopAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("GET ?top=%d: %d %v %s", top, rec.Code, err, rec.Body)
		}
		return a.Teams
	}
	names := func(ts []TeamJSON) []string {
		var s []string
		for _, v := range ts {
			s = append(s, v.Team)
		}
		return s
	}
	all := get(10)
	if got := names(all); !slices.Equal(got, []string{"a:b", "busy", "tagged"}) {
		t.Fatalf("?top=10 lists %q, want [a:b busy tagged]: the rotating team sent to overflow first, the tagged one by its rows (none)", got)
	}
	if r := all[0].Rotating; len(r) != 1 || r[0].Rule != "user-overflow" || r[0].OnCardinality != "overflow" || !all[0].Limited {
		t.Errorf("a:b: limited %v, rotating %+v; want limited, rotating under user-overflow", all[0].Limited, r)
	}
	if r := all[2].Rotating; len(r) != 1 || r[0].Rule != "user-tag" || all[2].Limited {
		t.Errorf("tagged: limited %v, rotating %+v; want not limited, rotating under user-tag", all[2].Limited, r)
	}
	if got := names(get(1)); !slices.Equal(got, []string{"a:b"}) {
		t.Errorf("?top=1 lists %q, want [a:b]", got)
	}
}

// Under on_cardinality collapse, a rotating team's keys under the floor are counted as
// one, its collapsed key (the team's field and ':'). Asked for by its id, the team shows
// that key's row under the rule, limited when it is: its records are sent away by it. And
// ?top=N names the team once, by its id, not the collapsed key apart.
func TestTeamAPIRotatingCollapsedTeam(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		user.CheckAt(t0, fmt.Sprintf("a%%3Ab:id-%d", i), 1)
	}
	var sw limit.Sweep
	user.Sweep(t0, &sw)
	// Rotating now: its next keys count as the collapsed key, over the threshold.
	for i := range 10_100 {
		user.CheckAt(t0, fmt.Sprintf("a%%3Ab:new-%d", i), 1)
	}
	if s, ok := user.Snapshot(t0, "a%3Ab:"); !ok || !s.Limited {
		t.Fatalf("collapsed key: %+v %v; want cached and limited", s, ok)
	}
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs }))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/a:b", nil))
	var v TeamJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/teams/a:b: %d %v %s", rec.Code, err, rec.Body)
	}
	if !v.Limited || len(v.Limits) != 1 || v.Limits[0].Rule != "team-user" || !v.Limits[0].Limited || len(v.Rotating) != 1 {
		t.Errorf("a:b: %s\nwant limited, with the collapsed key's row under team-user, rotating", rec.Body)
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams?top=10", nil))
	var a TopAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET ?top=10: %d %v %s", rec.Code, err, rec.Body)
	}
	if len(a.Teams) != 1 || a.Teams[0].Team != "a:b" || !a.Teams[0].Limited || len(a.Teams[0].Rotating) != 1 {
		t.Errorf("?top=10: %s\nwant a:b alone, limited and rotating", rec.Body)
	}
}

// A user key of a team rotating identities, under its floor and not cached, is checked as
// its team's rotation says, not as its own: asked for (an operator looking into why a
// user's events went to overflow), the view says the team rotates and what the key's
// records get: limited under overflow, the collapsed key's row under collapse, rotating
// and not limited under tag. A user of the team cached before the rotation is checked as
// before, and shown so. It said "under its floor, not limited" for a key whose every
// record went to overflow.
func TestTeamAPIRotatingTeamsUserKey(t *testing.T) {
	t.Parallel()
	for _, action := range []limit.CardinalityAction{limit.CardinalityOverflow, limit.CardinalityCollapse, limit.CardinalityTag} {
		t.Run(action.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			user, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth,
				KeyCardinality: 100, OnCardinality: action}, clock.NewFake(t0), nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 150 { // at its floor (100) before the rotation: cached
				user.CheckAt(t0, "rot:cached", 1)
			}
			for i := range 300 {
				user.CheckAt(t0, fmt.Sprintf("rot:id-%d", i), 1)
			}
			var sw limit.Sweep
			user.Sweep(t0, &sw)
			if len(user.Rotating()) != 1 {
				t.Fatalf("rotating %+v, want rot", user.Rotating())
			}
			if action == limit.CardinalityCollapse {
				for i := range 10_100 { // the collapsed key over its threshold
					user.CheckAt(t0, fmt.Sprintf("rot:new-%d", i), 1)
				}
			}
			var d limit.Decision
			for range 3 {
				d = user.CheckAt(t0, "rot:alice", 1)
			}
			wantLimited := action != limit.CardinalityTag
			if d.Limited != wantLimited {
				t.Fatalf("rot:alice's check: %+v, want limited %v", d, wantLimited)
			}
			rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{user}}}
			mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs }))
			get := func(key string) TeamJSON {
				t.Helper()
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/"+key, nil))
				var v TeamJSON
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
					t.Fatalf("GET /v1/teams/%s: %d %v %s", key, rec.Code, err, rec.Body)
				}
				return v
			}
			v := get("rot:alice")
			if v.Limited != wantLimited || len(v.Rotating) != 1 || v.Rotating[0].Rule != "team-user" || v.Rotating[0].OnCardinality != action.String() {
				t.Errorf("rot:alice: limited %v, rotating %+v; want limited %v (as its checks), rotating under team-user", v.Limited, v.Rotating, wantLimited)
			}
			if action == limit.CardinalityCollapse && !slices.ContainsFunc(v.Limits, func(l LimitJSON) bool { return l.Limited && !l.UnderFloor }) {
				t.Errorf("rot:alice: rows %+v, want the collapsed key's, limited", v.Limits)
			}
			if c := get("rot:cached"); c.Limited || len(c.Rotating) != 0 || len(c.Limits) != 1 {
				t.Errorf("rot:cached, cached before the rotation and checked as before: limited %v, rotating %+v, %d rows; want its own row, not limited", c.Limited, c.Rotating, len(c.Limits))
			}
		})
	}
}

// A query parameter the team view does not take is refused, naming it: ?tpo=100 (a typo)
// answered with the default 20 teams read as all there are, and /v1/teams/a?b (a key's ?
// not written %3F) answered for team a.
func TestTeamAPIRefusesUnknownParameters(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0, "a")
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	for path, want := range map[string]string{
		"/v1/teams?tpo=100":       `unknown query parameter "tpo": /v1/teams takes top only`,
		"/v1/teams?top=5&limit=1": `unknown query parameter "limit": /v1/teams takes top only`,
		"/v1/teams/a?b":           `unknown query parameter "b": /v1/teams/{team} takes none (a ?, # or % in a team is written %3F, %23 or %25)`,
		"/v1/teams/a?top=5":       `unknown query parameter "top": /v1/teams/{team} takes none (a ?, # or % in a team is written %3F, %23 or %25)`,
		"/v1/teams/a?%ZZ":         `query "%ZZ": invalid URL escape "%ZZ"`,
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var e map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusBadRequest || e["error"] != want {
			t.Errorf("GET %s: %d %s, want 400 %q", path, rec.Code, rec.Body, want)
		}
	}
	for _, path := range []string{"/v1/teams", "/v1/teams?top=1", "/v1/teams/a"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// A gate that is not ready (starting: not joined to its group yet) has cached no team
// because it reads nothing yet, not because the team "has sent nothing here lately": the
// team view's 404 and an empty ?top=N say it is not ready, and why.
func TestTeamAPISaysTheGateIsNotReady(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0)
	ready := &Readiness{kafka: func() []string { return []string{"kafka: not joined to consumer group g yet"} }}
	ready.ok.Store(true)
	mux := NewMux(prometheus.NewRegistry(), ready, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/whale", nil))
	var e map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound ||
		!strings.Contains(e["error"], "this gate is not ready (/readyz): kafka: not joined to consumer group g yet") {
		t.Errorf("GET /v1/teams/whale not ready: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams?top=5", nil))
	var top TopAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &top); err != nil || rec.Code != http.StatusOK ||
		!slices.Equal(top.NotReady, []string{"kafka: not joined to consumer group g yet"}) {
		t.Errorf("GET /v1/teams?top=5 not ready: %d %s", rec.Code, rec.Body)
	}
}

// A path under /v1/teams/ that is not one team's, /v1/teams/ (no team) or
// /v1/teams/whale/ (a trailing slash), is a 404 in JSON with an "error" that gives the
// forms the view takes, as its other answers are JSON. Before, it was the router's plain
// "404 page not found", which a script reading .error could not parse. A team with a /,
// written %2F, is still answered.
func TestTeamAPIUnknownPathIsJSON(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0, "whale", "a/b")
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	for _, path := range []string{"/v1/teams/", "/v1/teams/whale/", "/v1/teams/whale/x"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var e map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound ||
			!strings.Contains(e["error"], "/v1/teams/{team}") || !strings.Contains(e["error"], "%2F") || !strings.Contains(e["error"], "/v1/teams?top=N") {
			t.Errorf("GET %s: %d %q, want a JSON 404 whose error gives /v1/teams/{team} (a / written %%2F) and /v1/teams?top=N", path, rec.Code, rec.Body)
		}
	}
	for _, path := range []string{"/v1/teams/whale", "/v1/teams/a%2Fb"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// A method the team view does not take (POST, DELETE) is a 405 in the view's JSON error
// form, {"error": ...}, keeping the Allow header the router sets. Before, it was
// net/http's plain-text "Method Not Allowed", which a script reading .error could not parse.
func TestTeamAPIWrongMethodIsJSON(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0, "whale")
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	for _, method := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
		for _, path := range []string{"/v1/teams/whale", "/v1/teams?top=5", "/v1/teams", "/v1/teams/whale/x"} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			var e map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusMethodNotAllowed ||
				rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(e["error"], method) ||
				!strings.Contains(e["error"], "GET") {
				t.Errorf("%s %s: %d %q %q, want a JSON 405 whose error names %s and GET", method, path, rec.Code,
					rec.Header().Get("Content-Type"), rec.Body, method)
			}
			if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q, want \"GET, HEAD\"", method, path, got)
			}
		}
	}
	// The view still answers its own methods.
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, "/v1/teams/whale", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s /v1/teams/whale: %d %s", method, rec.Code, rec.Body)
		}
	}
}

// A forced key is limited whatever its level, and ?top=N ranks it with the teams over
// their limits, ahead of a team under its own: every record of it is sent away.
func TestTeamAPIForcedKeyRankedOver(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0)
	for team, n := range map[string]int{"busy": 90, "forced": 1, "quiet": 2} {
		for range n {
			lim.CheckAt(t0, team, 1)
		}
	}
	rs := []gate.RuleLimits{{Lims: []*limit.Limiter{lim}, Force: []string{"forced"}}}
	api := NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs })
	ans := api.rank(t0, 2)
	if len(ans.Teams) != 2 || ans.Teams[0].Team != "forced" || !ans.Teams[0].Limited || !ans.Teams[0].Limits[0].Forced ||
		ans.Teams[1].Team != "busy" || ans.Teams[1].Limited || ans.Teams[1].Limits[0].Forced {
		t.Errorf("?top=2: %+v", ans.Teams)
	}
}

// A key that is not UTF-8 (a binary record key) is named in team_quoted, in Go syntax, by
// both forms of the view: JSON cannot hold its bytes (team has each U+FFFD), and "t\xff"
// and "t\xfe" read the same there.
func TestTeamAPIQuotesKeysThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0)
	for _, team := range []string{"t\xff", "t\xfe", "plain"} {
		lim.CheckAt(t0, team, 1)
	}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	get := func(path string, v any) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if err := json.Unmarshal(rec.Body.Bytes(), v); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %v\n%s", path, rec.Code, err, rec.Body)
		}
	}
	var one TeamJSON
	get("/v1/teams/t%FF", &one)
	if one.TeamQuoted != `"t\xff"` {
		t.Errorf("/v1/teams/t%%FF: team_quoted %q, want %q", one.TeamQuoted, `"t\xff"`)
	}
	var top struct{ Teams []TeamJSON }
	get("/v1/teams?top=3", &top)
	quoted := map[string]string{}
	for _, v := range top.Teams {
		quoted[v.Team+" "+v.TeamQuoted] = v.TeamQuoted
	}
	want := map[string]string{"plain ": "", "t\ufffd \"t\\xfe\"": `"t\xfe"`, "t\ufffd \"t\\xff\"": `"t\xff"`}
	if !maps.Equal(quoted, want) {
		t.Errorf("?top=3: team and team_quoted %q, want %q", quoted, want)
	}
}

// TestTeamAPIHeldKeyRankedFirst: a key held in overflow (DivertHold) whose level fell
// under its limit is still limited, every record of it sent away, so ?top=1 names it
// before a busier key under its limits: the runbook's "teams in overflow" looks here.
func TestTeamAPIHeldKeyRankedFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_040, 0).Truncate(time.Minute)
	clk := clock.NewFake(t0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, DivertHold: 10 * time.Second, DivertRelease: 0.8}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := limit.New(limit.Config{Window: time.Hour, Threshold: 1000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	// At its limit, as the fleet's count says (a read of 100 in the window before t0), then
	// draining for 20 s, sweeps a second apart and no read: under its release level (80)
	// since about 12 s, under DivertHold's 10 s, so still held.
	lim.CheckAt(t0, "held", 1)
	var sw limit.Sweep
	lim.Sweep(t0, &sw)
	for i := range sw.Reads {
		lim.ApplyRead(&sw.Reads[i], 0, 100, t0)
	}
	if d := lim.CheckAt(t0, "held", 0); !d.Held {
		t.Fatalf("at its limit: %+v, want held", d)
	}
	for s := 1; s <= 20; s++ {
		lim.Sweep(t0.Add(time.Duration(s)*time.Second), new(limit.Sweep))
	}
	now := t0.Add(20 * time.Second)
	lim.CheckAt(now, "busy", 90)
	hour.CheckAt(now, "busy", 90)
	h, _ := lim.Snapshot(now, "held")
	b, _ := lim.Snapshot(now, "busy")
	if !h.Limited || h.HeldSince.IsZero() || h.Pressure() >= b.Pressure() || b.Limited {
		t.Fatalf("held %+v, busy %+v: want held limited under busy's pressure, busy not limited", h, b)
	}
	api := NewTeamAPI(GateJSON{}, FixedRules(lim, hour))
	if ans := api.rank(now, 1); len(ans.Teams) != 1 || ans.Teams[0].Team != "held" || !ans.Teams[0].Limited {
		t.Errorf("?top=1 while held is held: %+v, want held", ans.Teams)
	}
}

// A key asked for that no rule builds, a composite key whose value's ':' is not written
// %3A ("phc_x:user:1" for token phc_x and distinct_id user:1), is said to be so, with its
// escaped forms, as gate overrides says; the view said only that it had sent nothing
// lately (a reviewer's). A key a composite rule builds, or one without ':', is answered
// as before.
func TestTeamAPINamesAKeyNoRuleBuilds(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0)
	user, err := route.ParseKeyFrom("json:token+distinct_id")
	if err != nil {
		t.Fatal(err)
	}
	team, err := route.ParseKeyFrom("json:token")
	if err != nil {
		t.Fatal(err)
	}
	rs := []gate.RuleLimits{{Name: "team-user", Lims: []*limit.Limiter{lim}, Key: user}, {Name: "team", Lims: []*limit.Limiter{lim}, Key: team}}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rs }))
	get := func(path string) string {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var e map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return e["error"]
	}
	if got := get("/v1/teams/phc_x:user:1"); !strings.Contains(got, "team not cached on this gate") ||
		!strings.Contains(got, `and it is no key rule team-user builds: "phc_x:user:1" has 3 parts`) || !strings.Contains(got, "phc_x:user%3A1") {
		t.Errorf("GET phc_x:user:1: %s", got)
	}
	for _, path := range []string{"/v1/teams/phc_x:user%253A1", "/v1/teams/whale"} {
		if got := get(path); strings.Contains(got, "no key") {
			t.Errorf("GET %s: %s", path, got)
		}
	}
}

// TestTeamViewSaysItsUnit: under GATE_COST=bytes (a rule's cost: bytes) a threshold of
// 20000 is 20000 bytes of value a window, and the view says so beside the figures, as
// it says events otherwise: the team view of a gate without rules (TeamsFor, its
// configuration's cost) and a rule of each cost.
func TestTeamViewSaysItsUnit(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	newLim := func() *limit.Limiter {
		lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 20000}, clock.NewFake(t0), nil)
		if err != nil {
			t.Fatal(err)
		}
		lim.CheckAt(t0, "2", 1500)
		return lim
	}
	unitOf := func(api *TeamAPI) []string {
		t.Helper()
		rec := httptest.NewRecorder()
		NewMux(prometheus.NewRegistry(), nil, api).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams/2", nil))
		var v TeamJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%v\n%s", err, rec.Body)
		}
		var units []string
		for _, l := range v.Limits {
			units = append(units, l.Unit)
		}
		return units
	}
	for _, c := range []struct{ cost, want string }{{"", "events"}, {"events", "events"}, {"bytes", "bytes"}} {
		cfg, err := config.Load(func(k string) string {
			return map[string]string{"GATE_COST": c.cost, "GATE_TEAM_API": "true"}[k]
		}, []string{"GATE_COST", "GATE_TEAM_API"})
		if err != nil {
			t.Fatal(err)
		}
		if got := unitOf(TeamsFor(cfg, &gate.Gate{Lim: newLim()})); !slices.Equal(got, []string{c.want}) {
			t.Errorf("GATE_COST=%q: units %q, want [%s]", c.cost, got, c.want)
		}
	}
	rules := []gate.RuleLimits{{Name: "team-bytes", Lims: []*limit.Limiter{newLim()}, Cost: route.CostBytes}, {Name: "team", Lims: []*limit.Limiter{newLim()}}}
	if got := unitOf(NewTeamAPI(GateJSON{}, func() []gate.RuleLimits { return rules })); !slices.Equal(got, []string{"bytes", "events"}) {
		t.Errorf("rules of cost bytes, events: units %q", got)
	}
}

// minuteLimiter is a limiter of 100 records a minute on a clock stopped at t0, each of
// teams checked once.
func minuteLimiter(t *testing.T, t0 time.Time, teams ...string) *limit.Limiter {
	t.Helper()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range teams {
		lim.CheckAt(t0, team, 1)
	}
	return lim
}
