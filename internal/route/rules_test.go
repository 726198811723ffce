package route

import (
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// ruleFixture is a router with rules, each rule's limiters on one fake clock.
type ruleFixture struct {
	clk  *clock.Fake
	reg  *prometheus.Registry
	r    *Router
	lims map[string][]*limit.Limiter // by rule
}

// ruleSpec is a rule for newRuleFixture: its limits as window → threshold, one per limiter.
type ruleSpec struct {
	Rule
	limits []limit.Config
}

func newRuleFixture(t testing.TB, cfg Config, specs ...ruleSpec) *ruleFixture {
	t.Helper()
	if cfg.AcceptedTopic == "" {
		cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic = topicAccepted, topicOverflow, topicDead
	}
	f := &ruleFixture{clk: clock.NewFake(t0), reg: prometheus.NewRegistry(), lims: map[string][]*limit.Limiter{}}
	var rules []Rule
	for _, sp := range specs {
		ru := sp.Rule
		for _, lc := range sp.limits {
			l, err := limit.New(lc, f.clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			ru.Limiters = append(ru.Limiters, l)
		}
		f.lims[ru.Name] = ru.Limiters
		rules = append(rules, ru)
	}
	var err error
	if f.r, err = NewRules(cfg, rules, f.reg); err != nil {
		t.Fatal(err)
	}
	return f
}

// counts is what rule's primary limiter counted per key since its last sweep.
func (f *ruleFixture) counts(rule string) map[string]int64 {
	var sw limit.Sweep
	f.lims[rule][0].Sweep(f.clk.Now(), &sw)
	m := make(map[string]int64)
	for _, c := range sw.Counts {
		m[c.Team] += c.N
	}
	return m
}

func (f *ruleFixture) ruleCount(rule, result string) float64 {
	return testutil.ToFloat64(f.r.rules[slices.IndexFunc(f.r.rules, func(s ruleState) bool { return s.Name == rule })].counter(result))
}

func (s *ruleState) counter(result string) prometheus.Counter {
	return s.results[slices.Index(resultNames[:], result)]
}

func mustKey(t testing.TB, s string) KeyFrom {
	t.Helper()
	k, err := ParseKeyFrom(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func event(team, user, ev string) *kgo.Record {
	return input(fmt.Sprintf(`{"team_id":%q,"distinct_id":%q,"event":%q}`, team, user, ev), "")
}

func headerValues(rec *kgo.Record, key string) []string {
	var out []string
	for _, h := range rec.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// A runaway user inside a team is diverted by a user rule while the team's other users
// are accepted; in either mode the team's rule does not count what the user rule sent
// away, so the team is judged by what it sends otherwise.
func TestRulesRunawayUser(t *testing.T) {
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newRuleFixture(t, Config{},
				ruleSpec{Rule{Name: "team-user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow},
					[]limit.Config{{Window: time.Minute, Threshold: 10, Mode: mode}}},
				ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow},
					[]limit.Config{{Window: time.Minute, Threshold: 150, Mode: mode}}},
			)
			routes := map[string]map[string]int{}
			for i := range 200 {
				user := fmt.Sprintf("u%d", (i/2)%20) // 20 users at 5 a minute...
				if i%2 == 0 {
					user = "runaway" // ... and one at 100
				}
				out, o := f.r.Route(f.clk.Now(), event("t1", user, "$pageview"), nil)
				if routes[user] == nil {
					routes[user] = map[string]int{}
				}
				routes[user][out.Topic]++
				if out.Topic == topicOverflow && (o.Rule != "team-user" || headerValues(out, HeaderOverflowRule)[0] != "team-user") {
					t.Fatalf("overflow record: rule %q, headers %v", o.Rule, out.Headers)
				}
			}
			if got := routes["runaway"]; got[topicAccepted] != 10 || got[topicOverflow] != 90 {
				t.Errorf("runaway user: %v, want its 10 accepted and 90 diverted", got)
			}
			for u, got := range routes {
				if u != "runaway" && (got[topicAccepted] != 5 || got[topicOverflow] != 0) {
					t.Errorf("user %s: %v, want all 5 accepted", u, got)
				}
			}
			// The team counted what the user rule let through: 10 of the runaway's and the
			// others' 100, under its 150 (200 would have put it over).
			if n := f.ruleCount("team", "not_checked"); n != 90 {
				t.Errorf("team rule not_checked %v, want 90", n)
			}
			if got := f.counts("team")["t1"]; got != 110 {
				t.Errorf("team t1 counted %d, want 110", got)
			}
		})
	}
}

// An event-type rule counts only the events its match selects; a not_in match the others.
func TestRulesMatch(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "events_merges",
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$identify", "$create_alias", "$merge_dangerously"}}}},
			[]limit.Config{{Window: time.Minute, Threshold: 3}}},
		ruleSpec{Rule{Name: "not-internal", Key: mustKey(t, "json:team_id"), Action: ActionOverflow,
			Match: []RuleMatch{{Field: mustKey(t, "header:source"), Values: []string{"internal"}, Not: true}}},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	topics := map[string]int{}
	for i := range 20 {
		ev := "$pageview"
		if i%4 == 0 {
			ev = "$identify"
		}
		rec := event("t1", "u", ev)
		if i%5 == 0 {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "source", Value: []byte("internal")})
		}
		out, _ := f.r.Route(f.clk.Now(), rec, nil)
		topics[out.Topic]++
		if out.Topic == "events_merges" && (ev != "$identify" || headerValues(out, HeaderOverflowRule)[0] != "merges" || headerValues(out, HeaderOverflowReason)[0] != ReasonRateLimited) {
			t.Errorf("%s to the merge topic, headers %v", ev, out.Headers)
		}
	}
	if topics["events_merges"] != 2 || topics[topicAccepted] != 18 {
		t.Errorf("routes %v, want the 4th and 5th $identify on the merge topic, the rest accepted", topics)
	}
	if got := f.counts("merges")["t1"]; got != 5 {
		t.Errorf("merges counted %d, want the 5 $identify events only", got)
	}
	// 16 records without source: internal, less the 2 the merges rule sent to its topic (a
	// stronger action than this rule's overflow: not checked again).
	if got := f.counts("not-internal")["t1"]; got != 14 || f.ruleCount("not-internal", "not_checked") != 2 {
		t.Errorf("not-internal counted %d, not_checked %v: want 14 and 2", got, f.ruleCount("not-internal", "not_checked"))
	}
	if f.ruleCount("merges", "unmatched") != 15 || f.ruleCount("not-internal", "unmatched") != 4 {
		t.Errorf("unmatched: merges %v, not-internal %v", f.ruleCount("merges", "unmatched"), f.ruleCount("not-internal", "unmatched"))
	}
	// A match field given twice is as ambiguous as a key: dead-lettered, naming the field.
	out, o := f.r.Route(f.clk.Now(), input(`{"team_id":"t1","event":"$pageview","event":"$identify"}`, ""), nil)
	if out.Topic != topicDead || o.Reason != ReasonAmbiguousTeam || !strings.Contains(headerValues(out, HeaderErrorDetail)[0], `rule merges:`) ||
		!strings.Contains(headerValues(out, HeaderErrorDetail)[0], "event") {
		t.Errorf("an ambiguous match field: %s %s %v", out.Topic, o.Reason, headerValues(out, HeaderErrorDetail))
	}
	if n := testutil.ToFloat64(f.r.ruleTopic[0][0]); n != 2 {
		t.Errorf("gate_rule_topic_records_total{merges, rate_limited} = %v, want 2", n)
	}
}

// The strongest action wins, every enforced rule over is named, a tag keeps the record on
// accepted with its header, and a shadow rule changes nothing but its own metrics.
func TestRulesActions(t *testing.T) {
	over := []limit.Config{{Window: time.Minute, Threshold: 1}} // over from the first record on
	under := []limit.Config{{Window: time.Minute, Threshold: 1000}}
	spec := func(name string, a RuleAction, topic string, shadow bool, lims []limit.Config) ruleSpec {
		return ruleSpec{Rule{Name: name, Key: mustKey(t, "json:team_id"), Action: a, Topic: topic, Shadow: shadow}, lims}
	}
	for _, c := range []struct {
		name   string
		rules  []ruleSpec
		topic  string
		reason string
		rule   string   // Outcome.Rule, and gate-overflow-rule off the accepted topic
		tags   []string // gate-tag
	}{
		{"all under", []ruleSpec{spec("a", ActionTag, "", false, under), spec("b", ActionOverflow, "", false, under)}, topicAccepted, ReasonAllowed, "", nil},
		{"tag", []ruleSpec{spec("a", ActionTag, "", false, over), spec("b", ActionOverflow, "", false, under)}, topicAccepted, ReasonTagged, "a", []string{"a"}},
		{"overflow over tag", []ruleSpec{spec("a", ActionTag, "", false, over), spec("b", ActionOverflow, "", false, over)}, topicOverflow, ReasonRateLimited, "b", []string{"a"}},
		{"topic over overflow", []ruleSpec{spec("a", ActionOverflow, "", false, over), spec("b", ActionTopic, "mine", false, over)}, "mine", ReasonRateLimited, "b", nil},
		{"two topics: the earlier", []ruleSpec{spec("a", ActionTopic, "first", false, over), spec("b", ActionTopic, "second", false, over)}, "first", ReasonRateLimited, "a", nil},
		{"two tags", []ruleSpec{spec("a", ActionTag, "", false, over), spec("b", ActionTag, "", false, over)}, topicAccepted, ReasonTagged, "a", []string{"a", "b"}},
		{"a topic after overflow is checked", []ruleSpec{spec("a", ActionOverflow, "", false, over), spec("b", ActionTopic, "mine", false, over), spec("c", ActionOverflow, "", false, over)}, "mine", ReasonRateLimited, "b", nil},
		{"shadow", []ruleSpec{spec("a", ActionTopic, "s", true, over), spec("b", ActionOverflow, "", false, under)}, topicAccepted, ReasonAllowed, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newRuleFixture(t, Config{}, c.rules...)
			f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil) // the first reaches a threshold of 1
			out, o := f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil)
			if out.Topic != c.topic || o.Reason != c.reason || o.Rule != c.rule {
				t.Errorf("topic %q reason %q rule %q, want %q %q %q", out.Topic, o.Reason, o.Rule, c.topic, c.reason, c.rule)
			}
			wantHdr := []string{c.rule}
			if c.topic == topicAccepted {
				wantHdr = nil
			}
			if got := headerValues(out, HeaderOverflowRule); !slices.Equal(got, wantHdr) {
				t.Errorf("%s: %v, want %q", HeaderOverflowRule, got, c.rule)
			}
			if got := headerValues(out, HeaderTag); !slices.Equal(got, c.tags) {
				t.Errorf("%s: %v, want %v", HeaderTag, got, c.tags)
			}
			if c.name == "shadow" {
				if n := f.ruleCount("a", "over"); n != 1 {
					t.Errorf("shadow rule over %v, want 1 (what it would have done to the second record)", n)
				}
				if got := f.counts("a")["t1"]; got != 2 {
					t.Errorf("shadow rule counted %d, want 2", got)
				}
			}
		})
	}
}

// A record without a rule's key is dead-lettered by default, and passes a rule that skips
// such records; a key there but unusable is dead-lettered either way.
func TestRulesMissingKey(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
	)
	for _, c := range []struct {
		value, topic, reason, detail string
	}{
		{`{"team_id":"t1"}`, topicAccepted, ReasonAllowed, ""},
		{`{"distinct_id":"u1"}`, topicDead, ReasonFieldMissing, "rule team: "},
		{`{"team_id":"t1","distinct_id":"a","distinct_id":"b"}`, topicDead, ReasonAmbiguousTeam, "rule user: "},
		{`{"team_id":"t1","distinct_id":{"x":1}}`, topicDead, ReasonFieldType, `rule user: json field "distinct_id"`},
		{`{"team_id":"t1",`, topicDead, ReasonNotJSON, ""},
		{`[1]`, topicDead, ReasonNotJSON, ""},
	} {
		out, o := f.r.Route(f.clk.Now(), input(c.value, ""), nil)
		if out.Topic != c.topic || o.Reason != c.reason {
			t.Errorf("%s: %s %s, want %s %s", c.value, out.Topic, o.Reason, c.topic, c.reason)
		}
		if c.detail != "" && !strings.HasPrefix(headerValues(out, HeaderErrorDetail)[0], c.detail) {
			t.Errorf("%s: detail %q, want it to start %q", c.value, headerValues(out, HeaderErrorDetail), c.detail)
		}
	}
	if n := f.ruleCount("user", "missing"); n != 1 {
		t.Errorf("user rule missing %v, want 1", n)
	}
}

// A composite key is missing when any of its fields is, however long the fields before
// the missing one: a per-user rule with missing: skip lets a record without a distinct_id
// pass to the next rule, even when its team id alone is longer than GATE_MAX_KEY_BYTES,
// and a dead letter then names the rule whose key is at fault.
func TestRulesCompositeKeyMissingFieldAfterLongOne(t *testing.T) {
	long := strings.Repeat("t", DefaultMaxKeyBytes+10)
	for _, c := range []struct {
		teamKey, topic, reason, detail string
	}{
		{"json:token", topicAccepted, ReasonAllowed, ""},
		{"json:team_id", topicDead, ReasonKeyTooLong, "rule team: "},
	} {
		f := newRuleFixture(t, Config{},
			ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
			ruleSpec{Rule{Name: "team", Key: mustKey(t, c.teamKey), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
		)
		out, o := f.r.Route(f.clk.Now(), input(`{"team_id":"`+long+`","token":"phc"}`, ""), nil)
		if out.Topic != c.topic || o.Reason != c.reason {
			t.Errorf("team rule %s: %s %s, want %s %s", c.teamKey, out.Topic, o.Reason, c.topic, c.reason)
		}
		if c.detail != "" && !strings.HasPrefix(strings.Join(headerValues(out, HeaderErrorDetail), ""), c.detail) {
			t.Errorf("team rule %s: detail %q, want it to start %q", c.teamKey, headerValues(out, HeaderErrorDetail), c.detail)
		}
		if n := f.ruleCount("user", "missing"); n != 1 {
			t.Errorf("team rule %s: user rule missing %v, want 1", c.teamKey, n)
		}
	}
}

// Forced keys take their rule's action; dry run accepts everything and counts what would
// have happened.
func TestRulesForcedAndDryRun(t *testing.T) {
	for _, dry := range []bool{false, true} {
		f := newRuleFixture(t, Config{DryRun: dry},
			ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "quarantine", Forced: []string{"bad"}},
				[]limit.Config{{Window: time.Minute, Threshold: 100}}},
		)
		out, o := f.r.Route(f.clk.Now(), event("bad", "u", "e"), nil)
		want, reason := "quarantine", ReasonForced
		if dry {
			want, reason = topicAccepted, ReasonDryRun
		}
		if out.Topic != want || o.Reason != reason || o.EnforcedReason != ReasonForced || o.Enforced != RuleTopic {
			t.Errorf("dry run %v: %s %s (enforced %s %s)", dry, out.Topic, o.Reason, o.Enforced, o.EnforcedReason)
		}
		if out, _ := f.r.Route(f.clk.Now(), event("good", "u", "e"), nil); out.Topic != topicAccepted {
			t.Errorf("dry run %v: good team to %s", dry, out.Topic)
		}
		// A record no rule can read: dead-lettered, or in dry run accepted and counted.
		out, o = f.r.Route(f.clk.Now(), input(`not json`, ""), nil)
		if want := map[bool]string{false: topicDead, true: topicAccepted}[dry]; out.Topic != want || o.EnforcedReason != ReasonNotJSON {
			t.Errorf("dry run %v: unreadable record to %s (enforced %s), want %s", dry, out.Topic, o.EnforcedReason, want)
		}
		if dry && testutil.ToFloat64(f.r.diverted[reasonNotJSON]) != 1 {
			t.Errorf("dry run: not_json not counted in gate_dry_run_diverted_total")
		}
	}
}

// Routing a record through three rules reads the JSON once and allocates nothing.
func TestRulesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 1 << 40}}},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 1 << 40}}},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTag,
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$identify"}}}}, []limit.Config{{Window: time.Minute, Threshold: 1 << 40}}},
	)
	if len(f.r.plan.top) != 3 {
		t.Errorf("plan reads %d top-level fields, want 3 (team_id, distinct_id, event)", len(f.r.plan.top))
	}
	rec := event("t1", "u1", "$identify")
	var s Scratch
	var out kgo.Record
	f.r.RouteInto(f.clk.Now(), rec, &s, &out)
	if n := testing.AllocsPerRun(100, func() { f.r.RouteInto(f.clk.Now(), rec, &s, &out) }); n != 0 {
		t.Errorf("%v allocations per record", n)
	}
}

func TestNewRulesRefuses(t *testing.T) {
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := limit.New(limit.Config{Window: time.Hour, Threshold: 1, Mode: limit.Cap}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead}
	k := mustKey(t, "key")
	for _, c := range []struct {
		name  string
		rules []Rule
	}{
		{"none", nil},
		{"no limiter", []Rule{{Name: "a", Key: k, Action: ActionOverflow}}},
		{"same name", []Rule{{Name: "a", Key: k, Action: ActionOverflow, Limiters: []*limit.Limiter{l}}, {Name: "a", Key: k, Action: ActionTag, Limiters: []*limit.Limiter{l}}}},
		{"no action", []Rule{{Name: "a", Key: k, Limiters: []*limit.Limiter{l}}}},
		{"bad topic", []Rule{{Name: "a", Key: k, Action: ActionTopic, Topic: "a b", Limiters: []*limit.Limiter{l}}}},
		{"modes", []Rule{{Name: "a", Key: k, Action: ActionOverflow, Limiters: []*limit.Limiter{l, lc}}}},
	} {
		if _, err := NewRules(cfg, c.rules, nil); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// A record routed again after an aborted transaction (Scratch.Replay) is judged by every
// rule and counted by none: a retried transaction does not count its records twice.
func TestRulesReplayCountsNothing(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow, Forced: []string{"forced"}}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
	)
	s := Scratch{Replay: true}
	for _, team := range []string{"t1", "forced"} {
		f.r.Route(f.clk.Now(), event(team, "u1", "e"), &s)
	}
	if u, tm := f.counts("user"), f.counts("team"); len(u)+len(tm) != 0 {
		t.Errorf("replayed records counted: user %v, team %v", u, tm)
	}
	s.Replay = false
	f.r.Route(f.clk.Now(), event("t1", "u1", "e"), &s)
	if u, tm := f.counts("user"), f.counts("team"); u["t1:u1"] != 1 || tm["t1"] != 1 {
		t.Errorf("a record routed once: user %v, team %v", u, tm)
	}
}

// A value that is not JSON reads the same in its dead letter whichever rule found it: it
// is the value's fault, no rule's. (The rules path once wrote "rule user: value is not
// valid JSON" for a value cut short and a bare "value is not valid JSON" for one that
// is not JSON from its first byte.) A rule's own field fault names the rule.
func TestRulesNotJSONDetailOneForm(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 100}}},
	)
	for _, v := range []string{`{"team_id":"t1",`, `{"team_id":"t1","x":}`, `not json`} {
		out, o := f.r.Route(f.clk.Now(), input(v, ""), nil)
		if d := headerValues(out, HeaderErrorDetail); o.Reason != ReasonNotJSON || len(d) != 1 || d[0] != "value is not valid JSON" {
			t.Errorf("%s: %s, detail %q, want not_json and %q", v, o.Reason, d, "value is not valid JSON")
		}
	}
	out, _ := f.r.Route(f.clk.Now(), input(`{"team_id":"t1"}`, ""), nil)
	if d := headerValues(out, HeaderErrorDetail); len(d) != 1 || d[0] != `rule user: json field "distinct_id" not found or null` {
		t.Errorf("a rule's field missing: detail %q", d)
	}
}

// A team rotating identities under a per-user rule takes the rule's on_cardinality:
// overflow sends its records there, saying why (key_cardinality, the rule named); tag
// keeps them accepted with the rule's tag; a steady team beside it is untouched.
func TestRulesRotatingTeam(t *testing.T) {
	for _, c := range []struct {
		on    limit.CardinalityAction
		topic string
	}{{limit.CardinalityOverflow, topicOverflow}, {limit.CardinalityTag, topicAccepted}} {
		t.Run(c.on.String(), func(t *testing.T) {
			f := newRuleFixture(t, Config{},
				ruleSpec{Rule{Name: "team-user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow},
					[]limit.Config{{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100, OnCardinality: c.on}}},
			)
			for i := range 300 {
				f.r.Route(f.clk.Now(), event("rot", fmt.Sprint("id-", i), "e"), nil)
			}
			var sw limit.Sweep
			f.lims["team-user"][0].Sweep(f.clk.Now(), &sw)
			if len(sw.Rotations) != 1 {
				t.Fatalf("rotations %+v, want rot's", sw.Rotations)
			}
			out, o := f.r.Route(f.clk.Now(), event("rot", "id-new", "e"), nil)
			if out.Topic != c.topic || o.Rule != "team-user" {
				t.Fatalf("rotating team's record: topic %s, outcome %+v; want %s by team-user", out.Topic, o, c.topic)
			}
			switch c.on {
			case limit.CardinalityOverflow:
				if got := headerValues(out, HeaderOverflowReason); len(got) != 1 || got[0] != ReasonKeyCardinality || o.Reason != ReasonKeyCardinality {
					t.Errorf("reason header %v, outcome reason %q; want %s", got, o.Reason, ReasonKeyCardinality)
				}
			case limit.CardinalityTag:
				if got := headerValues(out, HeaderTag); len(got) != 1 || got[0] != "team-user" {
					t.Errorf("tag headers %v, want team-user", got)
				}
			}
			if out, _ := f.r.Route(f.clk.Now(), event("steady", "u1", "e"), nil); out.Topic != topicAccepted || len(headerValues(out, HeaderTag)) != 0 {
				t.Errorf("steady team: topic %s, headers %v", out.Topic, out.Headers)
			}
		})
	}
}

// Dry run counts a rotating team's records under on_cardinality: overflow as enforcement
// would have sent them, key_cardinality in gate_dry_run_diverted_total (configuration.md:
// decisions counted "as if enforced"). Before, they were counted rate_limited, as if each
// user were over the rule's threshold.
func TestRulesDryRunRotatingTeamCountedKeyCardinality(t *testing.T) {
	f := newRuleFixture(t, Config{DryRun: true},
		ruleSpec{Rule{Name: "team-user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100, OnCardinality: limit.CardinalityOverflow}}},
	)
	for i := range 300 {
		f.r.Route(f.clk.Now(), event("rot", fmt.Sprint("id-", i), "e"), nil)
	}
	var sw limit.Sweep
	f.lims["team-user"][0].Sweep(f.clk.Now(), &sw)
	if len(sw.Rotations) != 1 {
		t.Fatalf("rotations %+v, want rot's", sw.Rotations)
	}
	out, o := f.r.Route(f.clk.Now(), event("rot", "id-new", "e"), nil)
	if out.Topic != topicAccepted || o.Reason != ReasonDryRun || o.EnforcedReason != ReasonKeyCardinality {
		t.Fatalf("rotating team's record: topic %s, reason %s (enforced %s); want accepted, dry_run (key_cardinality)", out.Topic, o.Reason, o.EnforcedReason)
	}
	kc := counter(t, f.reg, "gate_dry_run_diverted_total", "overflow", ReasonKeyCardinality)
	rl := counter(t, f.reg, "gate_dry_run_diverted_total", "overflow", ReasonRateLimited)
	if kc != 1 || rl != 0 {
		t.Errorf("gate_dry_run_diverted_total: key_cardinality %v, rate_limited %v; want 1 and 0", kc, rl)
	}
}

// A rotating team's key is counted as its own in the sketch as well as the collapsed key
// (limit's cardinality.go), through the Scratch's tally, late: in a rule of two limits in
// cap mode too, where the counting pass's decisions are not kept, its sketch counts are.
func TestRulesRotatingKeyCountedInCapMode(t *testing.T) {
	for _, mode := range []limit.Mode{limit.Cap, limit.Divert} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newRuleFixture(t, Config{},
				ruleSpec{Rule{Name: "team-user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow},
					[]limit.Config{
						{Window: time.Minute, Threshold: 10_000, Mode: mode, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 100, OnCardinality: limit.CardinalityCollapse},
						{Window: time.Hour, Threshold: 100_000, Mode: mode},
					}},
			)
			lim := f.lims["team-user"][0]
			for i := range 300 {
				f.r.Route(f.clk.Now(), event("rot", fmt.Sprint("id-", i), "e"), nil)
			}
			var sw limit.Sweep
			lim.Sweep(f.clk.Now(), &sw)
			if len(sw.Rotations) != 1 {
				t.Fatalf("rotations %+v, want rot's", sw.Rotations)
			}
			var s Scratch
			var out kgo.Record
			for range 50 {
				if o := f.r.RouteInto(f.clk.Now(), event("rot", "heavy", "e"), &s, &out); o.Route != Accepted {
					t.Fatalf("rot:heavy: %s %s, want accepted (collapsed, under the threshold)", o.Route, o.Reason)
				}
			}
			s.Flush()
			if n, _, ok := lim.Untracked(f.clk.Now(), "rot:heavy"); !ok || n != 50 {
				t.Errorf("rot:heavy's own sketch count %d (untracked %v), want 50", n, ok)
			}
		})
	}
}

// Rules reading the same fields read each one once a record (the shared pass keeps the
// values): every rule still gets its own key, from this record and not the one before,
// and the outcome's team is the first rule's key even after a later composite key was
// joined in the same buffer.
func TestRulesSharedReadsPerRecord(t *testing.T) {
	hi := []limit.Config{{Window: time.Minute, Threshold: limit.MaxThreshold}}
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow}, hi},
		ruleSpec{Rule{Name: "token-user", Key: mustKey(t, "json:token+distinct_id"), Action: ActionOverflow}, hi},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, hi},
		ruleSpec{Rule{Name: "token", Key: mustKey(t, "json:token"), Action: ActionOverflow}, hi},
	)
	var s Scratch
	var out kgo.Record
	for _, c := range []struct{ value, team string }{
		{`{"team_id":"t1","distinct_id":"u1","token":"k1"}`, "t1:u1"},
		{`{"team_id":"t2","distinct_id":"u\u00e9","token":"k2"}`, "t2:ué"},
		{`{"token":"k3","distinct_id":"u3","team_id":3}`, "3:u3"},
	} {
		if o := f.r.RouteInto(t0, input(c.value, ""), &s, &out); o.Route != Accepted || o.Team != c.team {
			t.Errorf("%s: %s %s, team %q; want accepted, team %q", c.value, o.Route, o.Reason, o.Team, c.team)
		}
	}
	s.Flush()
	for rule, want := range map[string]map[string]int64{
		"user":       {"t1:u1": 1, "t2:ué": 1, "3:u3": 1},
		"token-user": {"k1:u1": 1, "k2:ué": 1, "k3:u3": 1},
		"team":       {"t1": 1, "t2": 1, "3": 1},
		"token":      {"k1": 1, "k2": 1, "k3": 1},
	} {
		if got := f.counts(rule); !maps.Equal(got, want) {
			t.Errorf("rule %s counted %v, want %v", rule, got, want)
		}
	}
	// A field one rule cannot read fails that rule, whatever an earlier one read.
	o := f.r.RouteInto(t0, input(`{"team_id":"t1","distinct_id":"u1"}`, ""), &s, &out)
	if detail := headerValues(&out, HeaderErrorDetail); o.Route != DeadLetter || o.Reason != ReasonFieldMissing ||
		!slices.Equal(detail, []string{`rule token-user: json field "token" not found or null`}) {
		t.Errorf("no token: %s %s %q, want a dead letter for token-user's missing token", o.Route, o.Reason, detail)
	}
}

// Every rule's first limit counts its decisions in the routing goroutine's Scratch and
// hands them to its limiter at Flush (gate_limiter_decisions_total): none is lost, for the
// first rule or any other.
func TestRulesDecisionsCountedAtFlush(t *testing.T) {
	clk := clock.NewFake(t0)
	var rules []Rule
	var regs []*prometheus.Registry
	for _, c := range []struct{ name, key string }{{"user", "json:team_id+distinct_id"}, {"team", "json:team_id"}, {"team-hour", "json:team_id"}} {
		reg := prometheus.NewRegistry()
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 3}, clk, reg)
		if err != nil {
			t.Fatal(err)
		}
		lims := []*limit.Limiter{l}
		if c.name == "team-hour" { // a second limit: counted at once
			l2, err := limit.New(limit.Config{Window: time.Hour, Threshold: 100}, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, l2)
		}
		rules = append(rules, Rule{Name: c.name, Key: mustKey(t, c.key), Action: ActionTag, Limiters: lims})
		regs = append(regs, reg)
	}
	r, err := NewRules(Config{AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead}, rules, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var s Scratch
	var out kgo.Record
	for i := range 5 {
		r.RouteInto(clk.Now(), event("t1", fmt.Sprint("u", i%2), "$pageview"), &s, &out)
	}
	s.Flush()
	decisions := func(reg *prometheus.Registry) (allowed, limited float64) {
		const name = "gate_limiter_decisions_total"
		return metric(t, reg, name, map[string]string{"decision": "allowed"}), metric(t, reg, name, map[string]string{"decision": "limited"})
	}
	// user: u0 three times and u1 twice, under 3 (tag checks go on: every record checked);
	// team: t1 five times, over at the fourth.
	for i, want := range [][2]float64{{5, 0}, {3, 2}, {3, 2}} {
		if a, l := decisions(regs[i]); a != want[0] || l != want[1] {
			t.Errorf("rule %s: allowed %v limited %v, want %v %v", rules[i].Name, a, l, want[0], want[1])
		}
	}
}

// A rule before one whose key is a single top-level field has its limiter prefetch that
// key's slot (prefetchNext): the record's route, output, rule results and counts are the
// same with it as without it, for records whose next key is there, missing, escaped, of
// another type or ambiguous, and for values that are not JSON. The team limiter holds
// enough keys that Prefetch fetches.
func TestRulesPrefetchNextRoutesAlike(t *testing.T) {
	specs := func() []ruleSpec {
		return []ruleSpec{
			{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 3}}},
			{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Window: time.Minute, Threshold: 5}}},
			{Rule{Name: "token", Key: mustKey(t, "json:token"), SkipMissing: true, Action: ActionTag}, []limit.Config{{Window: time.Minute, Threshold: 2}}},
		}
	}
	on, off := newRuleFixture(t, Config{}, specs()...), newRuleFixture(t, Config{}, specs()...)
	if !on.r.rules[0].prefetchNext || !on.r.rules[1].prefetchNext || on.r.rules[2].prefetchNext {
		t.Fatalf("prefetchNext %v %v %v, want the user and team rules' set (a single field follows each)",
			on.r.rules[0].prefetchNext, on.r.rules[1].prefetchNext, on.r.rules[2].prefetchNext)
	}
	for i := range off.r.rules {
		off.r.rules[i].prefetchNext = false
	}
	for _, f := range []*ruleFixture{on, off} {
		for i := range 20_000 { // past prefetchKeys: the team limiter's Prefetch fetches
			f.lims["team"][0].CheckAt(t0, fmt.Sprintf("filler-%d", i), 0)
		}
	}
	values := []string{
		`{"team_id":"t1","distinct_id":"u1","token":"k"}`,
		`{"distinct_id":"u1","token":"k"}`,
		`{"team_id":"t\"1","distinct_id":"u:1","token":"k"}`,
		`{"team_id":{"x":1},"distinct_id":"u1"}`,
		`{"team_id":"t1","team_id":"t2","distinct_id":"u1"}`,
		`{"team_id":7,"distinct_id":"u2"}`,
		`{"team_id":"t1","distinct_id":null,"token":""}`,
		`{"team_id":"t1",`,
		`not json`,
	}
	var s [2]Scratch
	for round := range 4 { // past every threshold: overflow and tags too
		for _, v := range values {
			var out [2]kgo.Record
			var o [2]Outcome
			for k, f := range []*ruleFixture{on, off} {
				o[k] = f.r.RouteInto(t0, input(v, "key"), &s[k], &out[k])
			}
			if o[0] != o[1] {
				t.Errorf("round %d, %s: outcome %+v with prefetch, %+v without", round, v, o[0], o[1])
			}
			if out[0].Topic != out[1].Topic || string(out[0].Value) != string(out[1].Value) || fmt.Sprint(out[0].Headers) != fmt.Sprint(out[1].Headers) {
				t.Errorf("round %d, %s: output %s %v with prefetch, %s %v without", round, v, out[0].Topic, out[0].Headers, out[1].Topic, out[1].Headers)
			}
		}
	}
	s[0].Flush()
	s[1].Flush()
	for _, rule := range []string{"user", "team", "token"} {
		for _, res := range resultNames {
			if a, b := on.ruleCount(rule, res), off.ruleCount(rule, res); a != b {
				t.Errorf("rule %s %s: %v with prefetch, %v without", rule, res, a, b)
			}
		}
		if a, b := on.counts(rule), off.counts(rule); !maps.Equal(a, b) {
			t.Errorf("rule %s counted %v with prefetch, %v without", rule, a, b)
		}
	}
}

// prefetchNext is set only where the next rule's key is cheap to read ahead: one
// top-level JSON field, no match, a shared pass.
func TestRulesPrefetchNextWhere(t *testing.T) {
	hi := []limit.Config{{Window: time.Minute, Threshold: limit.MaxThreshold}}
	rule := func(name, key string, match ...RuleMatch) ruleSpec {
		return ruleSpec{Rule{Name: name, Key: mustKey(t, key), Match: match, Action: ActionOverflow}, hi}
	}
	ev := RuleMatch{Field: mustKey(t, "header:event"), Values: []string{"$pageview"}}
	for _, c := range []struct {
		name  string
		specs []ruleSpec
		want  []bool
	}{
		{"composite then nested", []ruleSpec{rule("a", "json:team_id+distinct_id"), rule("b", "json:properties.team")}, []bool{false, false}},
		{"then composite", []ruleSpec{rule("a", "json:team_id"), rule("b", "json:team_id+distinct_id")}, []bool{false, false}},
		{"then matched", []ruleSpec{rule("a", "json:team_id+distinct_id"), rule("b", "json:team_id", ev)}, []bool{false, false}},
		{"then header", []ruleSpec{rule("a", "json:team_id+distinct_id"), rule("b", "header:team")}, []bool{false, false}},
		{"then field", []ruleSpec{rule("a", "header:team"), rule("b", "json:team_id")}, []bool{true, false}},
	} {
		f := newRuleFixture(t, Config{}, c.specs...)
		for i, want := range c.want {
			if got := f.r.rules[i].prefetchNext; got != want {
				t.Errorf("%s: rule %d prefetchNext %v, want %v", c.name, i, got, want)
			}
		}
	}
}

// docs/rules.md: shadow "true: counted, measured and logged as if enforced; never changes
// where a record goes or its headers". A shadow rule (missing left at its default) does
// not dead-letter a record that lacks its key, or whose key is unusable: the enforced
// rules alone decide where it goes (it did, naming the shadow rule).
func TestShadowRuleNeverDeadLetters(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "ip", Key: mustKey(t, "header:ip"), Action: ActionOverflow, Shadow: true},
			[]limit.Config{{Window: 10 * time.Second, Threshold: 200}}},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:distinct_id"), Action: ActionOverflow, Shadow: true},
			[]limit.Config{{Window: time.Minute, Threshold: 200}}},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	for _, c := range []struct {
		name, value string
		hdrs        []string
	}{
		{"no ip header", `{"team_id":"t1","distinct_id":"u1"}`, nil},
		{"empty ip header", `{"team_id":"t1","distinct_id":"u1"}`, []string{"ip", ""}},
		{"no distinct_id", `{"team_id":"t1"}`, []string{"ip", "1.2.3.4"}},
		{"distinct_id an object", `{"team_id":"t1","distinct_id":{}}`, []string{"ip", "1.2.3.4"}},
		{"distinct_id twice", `{"team_id":"t1","distinct_id":"a","distinct_id":"b"}`, []string{"ip", "1.2.3.4"}},
	} {
		out, o := f.r.Route(f.clk.Now(), input(c.value, "", c.hdrs...), nil)
		if out.Topic != topicAccepted || o.Reason != ReasonAllowed {
			t.Errorf("%s: to %s (%s, %q), want accepted: only shadow rules could not read it", c.name, out.Topic, o.Reason, headerValues(out, HeaderErrorDetail))
		}
	}
}

// A shadow rule never changes where a record goes: adding one that reads JSON to rules
// that read only a header must not dead-letter the records whose value is not a JSON
// object (a tombstone, a binary payload), which the enforced rules route as ever; and
// where the shadow rule is listed must not matter.
func TestShadowJSONRuleNeverDeadLettersNonJSON(t *testing.T) {
	enforced := ruleSpec{Rule{Name: "ip", Key: mustKey(t, "header:ip"), Action: ActionOverflow},
		[]limit.Config{{Window: time.Minute, Threshold: 1000}}}
	shadow := ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow, Shadow: true},
		[]limit.Config{{Window: time.Minute, Threshold: 1000}}}
	for _, order := range []struct {
		name  string
		specs []ruleSpec
	}{
		{"enforced only", []ruleSpec{enforced}},
		{"shadow first", []ruleSpec{shadow, enforced}},
		{"shadow last", []ruleSpec{enforced, shadow}},
	} {
		f := newRuleFixture(t, Config{}, order.specs...)
		for _, v := range []string{"", "\x00\x01binary", `[1,2]`} {
			out, o := f.r.Route(f.clk.Now(), input(v, "", "ip", "1.2.3.4"), nil)
			if out.Topic != topicAccepted || o.Reason != ReasonAllowed {
				t.Errorf("%s: value %q to %s (%s, %q), want accepted: only a shadow rule reads JSON",
					order.name, v, out.Topic, o.Reason, headerValues(out, HeaderErrorDetail))
			}
		}
	}
}

// docs/rules.md: a rule is not checked (not_checked) when an earlier enforced rule already
// sends the record away with an action at least as strong; its key is then not read, and
// neither is its match. A later rule's match field given twice dead-lettered a record the
// user rule had sent to overflow (a key field given twice did not), and a record it would
// not have matched was counted unmatched rather than not_checked.
func TestRulesNotCheckedReadsNoMatch(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow, Forced: []string{"t1:runaway"}},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionOverflow,
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$identify"}}}},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	out, o := f.r.Route(f.clk.Now(), input(`{"team_id":"t1","distinct_id":"runaway","event":"$identify","event":"$pageview"}`, ""), nil)
	if out.Topic != topicOverflow || o.Rule != "user" || o.Reason != ReasonForced {
		t.Errorf("forced user, merges' match field given twice: to %s (%s, rule %q, %q), want overflow by rule user: merges is not checked",
			out.Topic, o.Reason, o.Rule, headerValues(out, HeaderErrorDetail))
	}
	f.r.Route(f.clk.Now(), event("t1", "runaway", "$pageview"), nil)
	if nc, um := f.ruleCount("merges", "not_checked"), f.ruleCount("merges", "unmatched"); nc != 2 || um != 0 {
		t.Errorf("merges: not_checked %v, unmatched %v; want 2 and 0 (both records were sent away by user first)", nc, um)
	}
}

// docs/rules.md: a shadow rule's record "whose key or match field it cannot read (absent,
// of another type, given twice) is counted missing for it". A match field given twice, or
// a value that is no JSON object, was counted unmatched, which hides the records the rule
// would dead-letter once enforced.
func TestShadowRuleUnreadableMatchCountedMissing(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionOverflow, Shadow: true,
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$identify"}}}},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
		ruleSpec{Rule{Name: "ip", Key: mustKey(t, "header:ip"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	for _, v := range []string{`{"team_id":"t1","event":"$identify","event":"$pageview"}`, "\x00binary"} {
		out, o := f.r.Route(f.clk.Now(), input(v, "", "ip", "1.2.3.4"), nil)
		if out.Topic != topicAccepted || o.Reason != ReasonAllowed {
			t.Errorf("%q: to %s (%s), want accepted", v, out.Topic, o.Reason)
		}
	}
	if m, um := f.ruleCount("merges", "missing"), f.ruleCount("merges", "unmatched"); m != 2 || um != 0 {
		t.Errorf("shadow merges: missing %v, unmatched %v; want 2 and 0", m, um)
	}
}

// Dry run counts a forced key's record for a rule's topic as forced, as it counts a
// forced key's record for overflow: what enforcement would have done. Before, it was
// counted rate_limited.
func TestRulesDryRunForcedTopicCountedForced(t *testing.T) {
	f := newRuleFixture(t, Config{DryRun: true},
		ruleSpec{Rule{Name: "tp", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "quarantine", Forced: []string{"bad"}},
			[]limit.Config{{Window: time.Minute, Threshold: 1}}},
	)
	f.r.Route(f.clk.Now(), event("bad", "u", "e"), nil)
	f.r.Route(f.clk.Now(), event("good", "u", "e"), nil)
	f.r.Route(f.clk.Now(), event("good", "u", "e"), nil) // over its threshold of 1
	forced, limited := testutil.ToFloat64(f.r.diverted[reasonForced]), testutil.ToFloat64(f.r.diverted[reasonRateLimited])
	if forced != 1 || limited != 1 {
		t.Errorf("gate_dry_run_diverted_total: forced %v, rate_limited %v; want 1 and 1", forced, limited)
	}
}

// What the docs say of combined rules, in one table: the strongest action wins (drop,
// then a topic, then overflow, then tag), the gate-tag of every tagging rule over goes
// wherever the record goes, a rule's second limit over is named, a missing rule topic
// sends to overflow naming it, an earlier rule that sends the record away (drop
// included) leaves weaker or equal later rules not_checked, and dry run adds no header.
func TestRulesCombinedActions(t *testing.T) {
	over := []limit.Config{{Window: time.Minute, Threshold: 1}}
	two := []limit.Config{{Window: time.Minute, Threshold: 1000}, {Window: time.Hour, Threshold: 1}}
	sp := func(name string, a RuleAction, topic string, lims []limit.Config) ruleSpec {
		return ruleSpec{Rule{Name: name, Key: mustKey(t, "json:team_id"), Action: a, Topic: topic}, lims}
	}
	for _, c := range []struct {
		name       string
		gone, dry  bool
		rules      []ruleSpec
		topic      string
		reason     string
		headers    string // the gate's headers, in order
		notChecked string // the rule counted not_checked, if any
	}{
		{"tag and overflow", false, false, []ruleSpec{sp("tg", ActionTag, "", over), sp("ov", ActionOverflow, "", over)}, topicOverflow, ReasonRateLimited,
			"gate-overflow-reason=rate_limited gate-overflow-rule=ov gate-tag=tg", ""},
		{"overflow then tag", false, false, []ruleSpec{sp("ov", ActionOverflow, "", over), sp("tg", ActionTag, "", over)}, topicOverflow, ReasonRateLimited,
			"gate-overflow-reason=rate_limited gate-overflow-rule=ov", "tg"},
		{"topic then drop", false, false, []ruleSpec{sp("tp", ActionTopic, "mine", over), sp("dr", ActionDrop, "", over)}, "", ReasonDropped, "", ""},
		{"drop then topic", false, false, []ruleSpec{sp("dr", ActionDrop, "", over), sp("tp", ActionTopic, "mine", over)}, "", ReasonDropped, "", "tp"},
		{"tag, topic, tag", false, false, []ruleSpec{sp("tg1", ActionTag, "", over), sp("tp", ActionTopic, "mine", over), sp("tg2", ActionTag, "", over)}, "mine", ReasonRateLimited,
			"gate-overflow-reason=rate_limited gate-overflow-rule=tp gate-tag=tg1", "tg2"},
		{"second limit over", false, false, []ruleSpec{sp("ov", ActionOverflow, "", two)}, topicOverflow, ReasonRateLimited,
			"gate-overflow-reason=rate_limited gate-overflow-rule=ov gate-overflow-limit=1h0m0s", ""},
		{"topic missing", true, false, []ruleSpec{sp("tp", ActionTopic, "mine", two), sp("ov", ActionOverflow, "", over)}, topicOverflow, ReasonRateLimited,
			"gate-overflow-reason=rate_limited gate-overflow-rule=tp gate-overflow-limit=1h0m0s gate-rule-topic-missing=mine", "ov"},
		{"dry run tag", false, true, []ruleSpec{sp("tg", ActionTag, "", over)}, topicAccepted, ReasonAllowed, "", ""},
		{"dry run drop", false, true, []ruleSpec{sp("dr", ActionDrop, "", over)}, topicAccepted, ReasonDryRun, "", ""},
		{"dry run topic missing", true, true, []ruleSpec{sp("tp", ActionTopic, "mine", over)}, topicAccepted, ReasonDryRun, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := NewTopicWatch(topicOverflow)
			f := newRuleFixture(t, Config{DryRun: c.dry, RuleTopics: w}, c.rules...)
			w.Use([]string{"mine"})
			w.SetMissing("mine", c.gone)
			f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil)
			out, o := f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil)
			var hdrs []string
			for _, h := range out.Headers {
				hdrs = append(hdrs, h.Key+"="+string(h.Value))
			}
			if out.Topic != c.topic || o.Reason != c.reason || strings.Join(hdrs, " ") != c.headers {
				t.Errorf("%q %s [%s], want %q %s [%s]", out.Topic, o.Reason, strings.Join(hdrs, " "), c.topic, c.reason, c.headers)
			}
			for _, st := range f.r.rules {
				want := 0.0
				if st.Name == c.notChecked {
					want = 1
				}
				if n := f.ruleCount(st.Name, "not_checked"); n != want {
					t.Errorf("rule %s not_checked %v, want %v", st.Name, n, want)
				}
			}
		})
	}
}

// diffRuleName is the name of the rule of the one-rule router in the differential tests.
const diffRuleName = "team"

// diffPair is the gate without a rules file (fileless: route.Config's KeyFrom, limits,
// ForceOverflow) and a gate with a one-rule file saying the same (file: the rule's key,
// limits, force, cost, action overflow), each on its own limiters, clock and registry.
type diffPair struct {
	clkA, clkB *clock.Fake
	regA, regB *prometheus.Registry
	fileless   *Router
	file       *Router
	sA, sB     Scratch
	aggA, aggB *outcome.Agg
	keyFrom    string
}

// diffCase is one setting of the file-less gate the differential tests compare.
type diffCase struct {
	name   string
	key    string
	cfg    Config // KeyFrom is set from key; ForceOverflow is the rule's force
	limits []limit.Config
	// shadow, when set, adds a shadow rule to the file, before or after the rule: a
	// shadow rule "never changes where a record goes, its headers or its outcome row"
	// (docs/rules.md), so the file still writes what the file-less gate writes.
	shadow string
}

func newDiffPair(t testing.TB, c diffCase) *diffPair {
	t.Helper()
	p := &diffPair{clkA: clock.NewFake(t0), clkB: clock.NewFake(t0), regA: prometheus.NewRegistry(), regB: prometheus.NewRegistry(), keyFrom: c.key}
	lims := func(clk *clock.Fake) []*limit.Limiter {
		var out []*limit.Limiter
		for _, lc := range c.limits {
			l, err := limit.New(lc, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	cfg := c.cfg
	cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic = topicAccepted, topicOverflow, topicDead
	cfg.KeyFrom = mustKey(t, c.key)
	var err error
	if p.fileless, err = NewMulti(cfg, lims(p.clkA), p.regA); err != nil {
		t.Fatal(err)
	}
	// A rules file: the variables a rule says for itself are unset (docs/rules.md), the
	// rule says them.
	fcfg := cfg
	fcfg.KeyFrom, fcfg.ForceOverflow, fcfg.Cost = KeyFrom{}, nil, CostEvents
	rule := Rule{Name: diffRuleName, Key: mustKey(t, c.key), Limiters: lims(p.clkB), Cost: cfg.Cost, Action: ActionOverflow, Forced: slices.Clone(cfg.ForceOverflow)}
	rules := []Rule{rule}
	if c.shadow != "" {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 2, Clock: c.limits[0].Clock}, p.clkB, nil)
		if err != nil {
			t.Fatal(err)
		}
		sh := Rule{Name: "shadow", Key: mustKey(t, "json:distinct_id"), Limiters: []*limit.Limiter{l}, Action: ActionOverflow, Shadow: true, Forced: []string{"u2"}}
		if c.shadow == "before" {
			rules = []Rule{sh, rule}
		} else {
			rules = append(rules, sh)
		}
	}
	if p.file, err = NewRules(fcfg, rules, p.regB); err != nil {
		t.Fatal(err)
	}
	p.aggA, p.aggB = outcome.NewAgg(time.Minute, nil), outcome.NewAgg(time.Minute, nil)
	p.sA.Outcomes, p.sB.Outcomes = p.aggA, p.aggB
	return p
}

// fileDetail is the dead-letter detail the one-rule file writes for the file-less gate's
// detail d of reason: the rule named ("gate-error-detail names the rule"), except for a
// value that is not JSON ("its detail naming no rule: the value is at fault").
func fileDetail(reason, d string) string {
	if reason == ReasonNotJSON {
		return d
	}
	return "rule " + diffRuleName + ": " + d
}

// expectFromFileless is what the one-rule file must write for in, given what the
// file-less gate wrote (out) and decided (o): the same record, but for what docs/rules.md
// says a rule's name adds: gate-overflow-rule: NAME after gate-overflow-reason on a record
// that leaves the accepted topic, and the rule named in gate-error-detail; and Outcome's
// Rule (when the rule acted), KeyRule (when its key was read) and DeadRule (when it
// could not be: the rule gate-error-detail names).
func expectFromFileless(out kgo.Record, o Outcome) (kgo.Record, Outcome) {
	want := out
	want.Headers = nil
	for _, h := range out.Headers {
		switch {
		case h.Key == HeaderErrorDetail && out.Topic == topicDead:
			h.Value = []byte(fileDetail(o.Reason, string(h.Value)))
		}
		want.Headers = append(want.Headers, h)
		if h.Key == HeaderOverflowReason && out.Topic == topicOverflow {
			want.Headers = append(want.Headers, kgo.RecordHeader{Key: HeaderOverflowRule, Value: []byte(diffRuleName)})
		}
	}
	if out.Headers != nil && want.Headers == nil {
		want.Headers = []kgo.RecordHeader{}
	}
	if o.Team != "" {
		o.KeyRule = diffRuleName
	}
	if o.Enforced == Overflow {
		o.Rule = diffRuleName
	}
	if o.Enforced == DeadLetter && o.EnforcedReason != ReasonNotJSON {
		o.DeadRule = diffRuleName
	}
	return want, o
}

func fmtRecord(r kgo.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic=%q key=%q value=%q ts=%s part=%d", r.Topic, r.Key, r.Value, r.Timestamp.Format(time.RFC3339Nano), r.Partition)
	for _, h := range r.Headers {
		fmt.Fprintf(&b, " %s=%q", h.Key, h.Value)
	}
	return b.String()
}

// route routes in through both routers at the same time and reports every difference
// but the documented ones.
func (p *diffPair) route(t testing.TB, in *kgo.Record) {
	t.Helper()
	inA, inB := cloneRecord(in), cloneRecord(in)
	var outA, outB kgo.Record
	oA := p.fileless.RouteInto(p.clkA.Now(), inA, &p.sA, &outA)
	oB := p.file.RouteInto(p.clkB.Now(), inB, &p.sB, &outB)
	wantOut, wantO := expectFromFileless(outA, oA)
	if g, w := fmtRecord(outB), fmtRecord(wantOut); g != w {
		t.Errorf("%s: value %q key %q headers %v:\n file     %s\n fileless %s\n want     %s", p.keyFrom, in.Value, in.Key, in.Headers, g, fmtRecord(outA), w)
	}
	if g, w := fmt.Sprintf("%+v", oB), fmt.Sprintf("%+v", wantO); g != w {
		t.Errorf("%s: value %q key %q: outcome\n file     %s\n fileless %+v\n want     %s", p.keyFrom, in.Value, in.Key, g, oA, w)
	}
	if a, b := p.fileless.TeamOf(inA, &p.sA), p.file.TeamOf(inB, &p.sB); a != b {
		t.Errorf("%s: value %q: TeamOf %q with the file, %q without", p.keyFrom, in.Value, b, a)
	}
}

// cloneRecord is a deep copy of in: neither router may see what the other did to it.
func cloneRecord(in *kgo.Record) *kgo.Record {
	c := *in
	c.Value, c.Key = slices.Clone(in.Value), slices.Clone(in.Key)
	c.Headers = nil
	for _, h := range in.Headers {
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: h.Key, Value: slices.Clone(h.Value)})
	}
	return &c
}

// finish compares what each router counted (gate_records_total,
// gate_dry_run_diverted_total) and the outcome rows, the rule column aside (the file's
// rule is named in the rows it acted on: outcomes.md).
func (p *diffPair) finish(t testing.TB) {
	t.Helper()
	p.sA.Flush()
	p.sB.Flush()
	for _, name := range []string{"gate_records_total", "gate_dry_run_diverted_total"} {
		a, b := metricSeries(t, p.regA, name), metricSeries(t, p.regB, name)
		if a != b {
			t.Errorf("%s: %s\n file     %s\n fileless %s", p.keyFrom, name, b, a)
		}
	}
	rows := func(agg *outcome.Agg) string {
		got := map[string]int64{}
		for _, r := range outcome.Seal("g", "s", agg) {
			if r.Outcome == "shadow_over" {
				continue // the shadow rule's own rows, beside the records'
			}
			rule := r.Rule
			if rule == diffRuleName {
				rule = ""
			}
			got[fmt.Sprintf("%s|%s|%s|%s|%s|thr=%d/%s|bytes=%d", r.Team, r.Key, rule, r.Outcome, r.Reason, r.Threshold, r.ThresholdSource, r.Bytes)] += r.Records
		}
		return fmt.Sprint(got)
	}
	if a, b := rows(p.aggA), rows(p.aggB); a != b {
		t.Errorf("%s: outcome rows\n file     %s\n fileless %s", p.keyFrom, b, a)
	}
}

// metricSeries is every series of the metric name on reg, with its value, as text.
func metricSeries(t testing.TB, reg *prometheus.Registry, name string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("{%s} %v", strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// diffCases are the file-less settings the differential tests compare with a one-rule
// file: each key source, one limit and several, both modes, dry run, validation, cost
// in bytes with the record key kept, a small key bound, and the event clock.
func diffCases() []diffCase {
	one := func(mode limit.Mode, clk limit.Clock) []limit.Config {
		return []limit.Config{{Window: time.Minute, Threshold: 3, Mode: mode, Clock: clk}}
	}
	three := func(mode limit.Mode) []limit.Config {
		return []limit.Config{{Window: time.Minute, Threshold: 3, Mode: mode}, {Window: 2 * time.Minute, Threshold: 4, Mode: mode}, {Window: time.Hour, Threshold: 5, Mode: mode}}
	}
	forced := []string{"forced", "hdr-forced", "kf", "forced:u2", "42"}
	var cases []diffCase
	for _, key := range []string{"json:team_id", "header:team", "key", "json:team_id+distinct_id", "json:properties.team"} {
		cases = append(cases,
			diffCase{key + "/divert", key, Config{ForceOverflow: forced}, one(limit.Divert, limit.WallClock), ""},
			diffCase{key + "/cap", key, Config{ForceOverflow: forced}, one(limit.Cap, limit.WallClock), ""},
			diffCase{key + "/three", key, Config{ForceOverflow: forced}, three(limit.Divert), ""},
			diffCase{key + "/three_cap", key, Config{ForceOverflow: forced}, three(limit.Cap), ""},
			diffCase{key + "/dry_run", key, Config{ForceOverflow: forced, DryRun: true}, three(limit.Divert), ""},
			diffCase{key + "/validate", key, Config{ForceOverflow: forced, ValidateJSON: true}, one(limit.Divert, limit.WallClock), ""},
			diffCase{key + "/bytes_keep_key", key, Config{ForceOverflow: forced, Cost: CostBytes, OverflowKeepKey: true}, []limit.Config{{Window: time.Minute, Threshold: 60}}, ""},
			diffCase{key + "/short_keys", key, Config{ForceOverflow: forced, MaxKeyBytes: 8}, one(limit.Divert, limit.WallClock), ""},
			diffCase{key + "/event", key, Config{ForceOverflow: forced}, one(limit.Divert, limit.EventClock), ""},
			diffCase{key + "/shadow_after", key, Config{ForceOverflow: forced}, three(limit.Divert), "after"},
			diffCase{key + "/shadow_before", key, Config{ForceOverflow: forced}, three(limit.Cap), "before"},
			diffCase{key + "/shadow_validate_short", key, Config{ForceOverflow: forced, ValidateJSON: true, MaxKeyBytes: 8}, one(limit.Divert, limit.WallClock), "before"},
		)
	}
	return cases
}

// diffInputs are records of every kind: readable keys, keys repeated past the limits,
// forced keys, and every way a value, a header or a record key can be unusable.
func diffInputs() []*kgo.Record {
	var in []*kgo.Record
	add := func(value, key string, hdrs ...string) {
		r := input(value, key, hdrs...)
		r.Offset = int64(len(in))
		in = append(in, r)
	}
	for i := range 6 { // over every limit by the sixth
		add(fmt.Sprintf(`{"team_id":"t1","distinct_id":"u1","properties":{"team":"t1"},"n":%d}`, i), "t1", "team", "t1", "h", "v")
	}
	for _, v := range []string{
		`{"team_id":42,"distinct_id":"u:1","properties":{"team":42}}`,
		`{"team_id":"forced","distinct_id":"u2","properties":{"team":"forced"}}`,
		`{"team_id":"forced","distinct_id":"u3"}`,
		`{"team_id":"esc\u0061ped","distinct_id":"u%3","properties":{"team":"esc\u0061ped"}}`,
		`{"team_id":"a:b%c","distinct_id":"d:e"}`,
		`{"team_id":-1.5e3,"distinct_id":0}`,
		`{"distinct_id":"u1"}`,
		`{"team_id":"t2"}`,
		`{"team_id":null,"distinct_id":null,"properties":null}`,
		`{"team_id":"","distinct_id":"","properties":{"team":""}}`,
		`{"team_id":"t2","distinct_id":""}`,
		`{"team_id":true,"distinct_id":false,"properties":{"team":true}}`,
		`{"team_id":{"a":1},"distinct_id":[1],"properties":[1]}`,
		`{"team_id":[],"distinct_id":{}}`,
		`{"team_id":"a","team_id":"b","distinct_id":"x","distinct_id":"y","properties":{"team":1,"team":2}}`,
		`{"team_id":"a","distinct_id":"x","properties":{"team":1},"properties":{"team":2}}`,
		`{"team_id":"` + strings.Repeat("x", 300) + `","distinct_id":"u","properties":{"team":"` + strings.Repeat("y", 300) + `"}}`,
		`{"team_id":"t12345678","distinct_id":"u"}`,
		`{"team_id":"t5","distinct_id":"` + strings.Repeat("z", 300) + `"}`,
		`{"team_id":"t2",`,
		`{"team_id":"t2","distinct_id":"u","x":}`,
		`{"x":}`,
		`{"team_id":"t2","distinct_id":"u","properties":{"team":"t2"},"x":[1,2}`,
		`[1,2]`,
		`"str"`,
		`42`,
		`null`,
		``,
		`   `,
		`not json`,
		"{\"team_id\":\"t\xff\",\"distinct_id\":\"\xfe\"}",
		"{\"team_id\":\"t3\",\"distinct_id\":\"u\",\"x\":\"\xff\"}",
		"\xff\xfe",
		`{"team_id":"\ud800","distinct_id":"a\u0000b"}`,
		`{"team_id":"huge","distinct_id":"u","blob":"` + strings.Repeat("b", 100_000) + `"}`,
		`{"team_id":"t1","distinct_id":"u1","properties":{"team":"t1"}}`,
		`{"team_id":"kf","distinct_id":"u"}`,
		`{"team_id":"forced:u2"}`,
	} {
		add(v, "")
	}
	// Headers and record keys, with readable values.
	v := `{"team_id":"t4","distinct_id":"u4","properties":{"team":"t4"}}`
	add(v, "kf", "team", "hdr-forced")
	add(v, "kf", "team", "hdr-forced")
	add(v, "", "team", "")
	add(v, "", "Team", "t4")
	add(v, "k4", "team", "first", "team", "second")
	add(v, "k4", "team", "", "team", "second")
	add(v, "k4", "team", strings.Repeat("h", 300))
	add(v, strings.Repeat("k", 300), "team", "\xff\xfe")
	add(`not json`, "onlykey", "team", "hdr-team")
	add(``, "onlykey", "team", "hdr-team")
	add(`{"team_id":"t3"}`, "", "team", "")
	add(`{"team_id":"t3"}`, "", "team", "forced")
	for i := range 4 { // t1 again, over
		add(fmt.Sprintf(`{"team_id":"t1","distinct_id":"u1","properties":{"team":"t1"},"again":%d}`, i), "t1", "team", "t1")
	}
	return in
}

// TestRulesOneRuleFileRoutesAsFileless: a gate whose rules file has one rule saying what
// the file-less gate's variables say (key, limits, force, cost; action overflow) writes
// every output record as the file-less gate does, byte for byte (topic, key, value,
// timestamp, headers in order, detail strings), decides the same outcomes, counts the
// same records and outcome rows, but for what docs/rules.md says the rule's name adds:
// gate-overflow-rule: NAME on a record it sends to overflow, the rule named in
// gate-error-detail (not for a value that is not JSON), Outcome.Rule and KeyRule, and
// the rule column of the outcome rows it acted on.
func TestRulesOneRuleFileRoutesAsFileless(t *testing.T) {
	for _, c := range diffCases() {
		t.Run(c.name, func(t *testing.T) {
			p := newDiffPair(t, c)
			for i, in := range diffInputs() {
				if i%7 == 6 { // time passes, a little, the same on both
					p.clkA.Advance(time.Second)
					p.clkB.Advance(time.Second)
				}
				p.route(t, in)
			}
			p.finish(t)
		})
	}
}

// gate_rule_records_total counts, for every rule, each record routed once: a record
// dead-lettered (a key or match field an enforced rule cannot read, a value that is no
// JSON object) is dead_letter for the rule that could not read it and for every rule
// after it, which never saw it; the rules before keep what they found. It counted
// nothing for any rule from the one that failed on, so a rule's results summed short of
// the records, the dead letters nowhere.
func TestRuleRecordsCountDeadLetters(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
		ruleSpec{Rule{Name: "ip", Key: mustKey(t, "header:ip"), Action: ActionOverflow, SkipMissing: true},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	s := &Scratch{}
	for _, v := range []string{
		`{"team_id":"t1","distinct_id":"u1"}`, // under for all, ip missing
		`{"team_id":"t1"}`,                    // team under; user cannot read its key
		`{"distinct_id":"u1"}`,                // team cannot read its key
		"\x00binary",                          // no JSON object: no rule reads it
	} {
		var out kgo.Record
		f.r.RouteInto(f.clk.Now(), input(v, ""), s, &out)
	}
	s.Flush()
	want := map[string]map[string]float64{
		"team": {"under": 2, "dead_letter": 2},
		"user": {"under": 1, "dead_letter": 3},
		"ip":   {"missing": 1, "dead_letter": 3},
	}
	for rule, results := range want {
		sum := 0.0
		for _, res := range resultNames {
			got := f.ruleCount(rule, res)
			sum += got
			if got != results[res] {
				t.Errorf("rule %s, result %s: %v, want %v", rule, res, got, results[res])
			}
		}
		if sum != 4 {
			t.Errorf("rule %s counted %v records, want the 4 routed", rule, sum)
		}
	}
}

// Rules of one key whose limiters hash with one seed (a gate gives them one) hash a
// record's key once: the later rule's check takes the earlier one's hash. Decisions,
// counts and where each key's entry is found are those of limiters with a seed each,
// whichever rules a record reaches (a match unmet, a key missing, a composite key of
// the same field between them), with and without outcomes; a wrong hash taken (another
// key's) fails the lookups below. And a team rule checked alone is not slowed by it:
// 0 allocations.
func TestRulesOfOneKeyHashItOnce(t *testing.T) {
	seed := maphash.MakeSeed()
	build := func(seed maphash.Seed, thr int64, tag bool) *ruleFixture {
		lc := []limit.Config{{Threshold: thr, HashSeed: seed}}
		specs := []ruleSpec{
			{Rule{Name: "team", Key: mustKey(t, "json:team_id"), SkipMissing: true, Action: ActionOverflow}, lc},
			{Rule{Name: "team-user", Key: mustKey(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, lc},
			{Rule{Name: "events", Key: mustKey(t, "json:team_id"), Action: ActionOverflow,
				Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$pageview"}}}}, lc},
		}
		if tag {
			specs = append(specs, ruleSpec{Rule{Name: "team-tag", Key: mustKey(t, "json:team_id"), Action: ActionTag}, lc})
		}
		return newRuleFixture(t, Config{}, specs...)
	}
	shared, apart := build(seed, 4, true), build(maphash.Seed{}, 4, true)
	if shared.r.rules[2].sameKey != 0 || shared.r.rules[3].sameKey != 0 || shared.r.rules[1].sameKey != -1 || !shared.r.rules[0].keyShared {
		t.Fatalf("sameKey %d %d %d: want the events and tag rules to take the team rule's hash",
			shared.r.rules[1].sameKey, shared.r.rules[2].sameKey, shared.r.rules[3].sameKey)
	}
	values := []string{
		`{"team_id":"a","distinct_id":"u1","event":"$pageview"}`,
		`{"team_id":"a","distinct_id":"u2","event":"$identify"}`,
		`{"team_id":7,"distinct_id":"u1","event":"$pageview"}`,
		`{"distinct_id":"u1","event":"$pageview"}`, // no team: the team rule skips it
		`{"team_id":"b","event":"$pageview"}`,      // no user
	}
	for _, outcomes := range []bool{false, true} {
		var sS, sA Scratch
		if outcomes {
			sS.Outcomes, sA.Outcomes = outcome.NewAggSeeded(60e9, nil, seed), outcome.NewAgg(60e9, nil)
		}
		for round := range 4 {
			for _, v := range values {
				var outS, outA kgo.Record
				oS, oA := shared.r.RouteInto(t0, input(v, ""), &sS, &outS), apart.r.RouteInto(t0, input(v, ""), &sA, &outA)
				if oS != oA || outS.Topic != outA.Topic || len(outS.Headers) != len(outA.Headers) {
					t.Errorf("outcomes %v, round %d, %s: %+v to %s with one seed, %+v to %s with a seed each", outcomes, round, v, oS, outS.Topic, oA, outA.Topic)
				}
			}
		}
		sS.Flush()
		sA.Flush()
		if outcomes {
			if got, want := rowsOf(sS.Outcomes), rowsOf(sA.Outcomes); !maps.Equal(got, want) {
				t.Errorf("outcome rows %v with one seed, %v with a seed each", got, want)
			}
		}
	}
	for _, rule := range []string{"team", "team-user", "events", "team-tag"} {
		if got, want := shared.counts(rule), apart.counts(rule); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rule %s counts: %v with one seed, %v with a seed each", rule, got, want)
		}
	}
	// Each key's entry is where a lookup of its own hash finds it.
	for rule, keys := range map[string][]string{"team": {"a", "7", "b"}, "events": {"a", "7", "b"}, "team-tag": {"a", "7", "b"}} {
		for _, k := range keys {
			if _, ok := shared.lims[rule][0].Snapshot(t0, k); !ok {
				t.Errorf("rule %s, key %s: not found by its own hash", rule, k)
			}
		}
	}
	if raceEnabled {
		return // the race detector allocates
	}
	// Accepted (a tag or an overflow's headers are a new slice), every rule checked.
	free := build(seed, limit.MaxThreshold, false)
	in := input(values[0], "")
	var s Scratch
	var out kgo.Record
	free.r.RouteInto(t0, in, &s, &out)
	if n := testing.AllocsPerRun(1000, func() { free.r.RouteInto(t0, in, &s, &out) }); n != 0 {
		t.Errorf("RouteInto: %v allocations a record, want 0", n)
	}
}

// TestCompositeKeyUnusableWhateverTheOrder: a composite key with one field missing and
// another there but unusable is dead-lettered for the unusable one, whatever the order the
// key names them in and whether the rule reads its fields alone or in the rules' shared
// pass (a second rule reading one of them): docs/rules.md says so. It was judged by the
// first field to fail, so json:b+a let {"a":{"x":1}} pass as missing (missing: skip) where
// json:a+b dead-lettered it.
func TestCompositeKeyUnusableWhateverTheOrder(t *testing.T) {
	big := []limit.Config{{Window: time.Minute, Threshold: 1 << 40}}
	for _, c := range []struct{ value, reason, detail string }{
		{`{"a":{"x":1}}`, ReasonFieldType, `json field "a" is an object, want a string or a number`},
		{`{"a":"","b":{"o":1}}`, ReasonFieldType, `json field "b" is an object, want a string or a number`},
		{`{"a":null,"b":[1]}`, ReasonFieldType, `json field "b" is an array, want a string or a number`},
		{`{"b":1,"b":2}`, ReasonAmbiguousTeam, `json field "b" appears more than once`},
	} {
		for _, key := range []string{"json:a+b", "json:b+a"} {
			for _, shared := range []bool{false, true} {
				specs := []ruleSpec{{Rule{Name: "user", Key: mustKey(t, key), SkipMissing: true, Action: ActionOverflow}, big}}
				if shared {
					specs = append(specs, ruleSpec{Rule{Name: "by-a", Key: mustKey(t, "json:a"), SkipMissing: true, Action: ActionOverflow}, big})
				}
				r := newRuleFixture(t, Config{}, specs...).r
				var s Scratch
				var out kgo.Record
				o := r.RouteInto(t0, input(c.value, ""), &s, &out)
				detail := headerValues(&out, HeaderErrorDetail)
				if o.Route != DeadLetter || o.Reason != c.reason || !slices.Equal(detail, []string{"rule user: " + c.detail}) {
					t.Errorf("%s under %s (shared pass %v): %s %s %q, want a dead letter: %s", c.value, key, shared, o.Route, o.Reason, detail, c.detail)
				}
			}
		}
	}
}
