package route

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/spike"
)

// rowsOf seals agg and returns its rows by "team|key|rule|outcome|reason": records.
func rowsOf(agg *outcome.Agg) map[string]int64 {
	got := map[string]int64{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[fmt.Sprintf("%s|%s|%s|%s|%s", r.Team, r.Key, r.Rule, r.Outcome, r.Reason)] += r.Records
	}
	return got
}

// A gate without a rules file records each record's fate under its team: accepted,
// overflow, forced, and a dead letter under no key.
func TestOutcomesFileless(t *testing.T) {
	f := newFixture(t, Config{ForceOverflow: []string{"9"}}, limit.Config{Threshold: 2})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 3 {
		f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	}
	f.r.RouteInto(t0, input(`{"team_id":9}`, ""), &s, &out)
	f.r.RouteInto(t0, input(`not json`, ""), &s, &out)
	want := map[string]int64{
		"1|1||accepted|allowed":      2,
		"1|1||overflow|rate_limited": 1,
		"9|9||overflow|forced":       1,
		"|||dead_letter|not_json":    1,
	}
	if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
}

// A gate without a rules file touches its team's row as soon as it finds team_id, before
// it looks through the rest of the value (touchAhead): a value whose team_id comes first
// and again later is dead-lettered (ambiguous) with no row for the first one; one whose
// team has escapes, is a number, or comes last is counted under the team it reads; and
// the output records are those of a router with outcomes off.
func TestOutcomesTouchedAhead(t *testing.T) {
	f := newFixture(t, Config{}, limit.Config{Threshold: limit.MaxThreshold})
	off := newFixture(t, Config{}, limit.Config{Threshold: limit.MaxThreshold})
	agg := outcome.NewAgg(60e9, nil)
	s, s0 := Scratch{Outcomes: agg}, Scratch{}
	values := []string{
		`{"team_id":"a","x":1}`,
		`{"team_id":"a","x":{"team_id":"nested"},"y":"team_id"}`,
		`{"team_id":"b","x":1,"team_id":"c"}`,
		`{"team_id":"t\u0031","x":1}`,
		`{"team_id":-12.5e3,"x":"m"}`,
		`{"x":"team_id","team_id":"d"}`,
		`{"team_id":"","x":1}`,
		`{"team_id":"e","x":`,
	}
	for _, v := range values {
		var out, out0 kgo.Record
		o, o0 := f.r.RouteInto(t0, input(v, ""), &s, &out), off.r.RouteInto(t0, input(v, ""), &s0, &out0)
		if o != o0 || out.Topic != out0.Topic || fmt.Sprint(out.Headers) != fmt.Sprint(out0.Headers) {
			t.Errorf("%s: %+v to %s %v with outcomes, %+v to %s %v without", v, o, out.Topic, out.Headers, o0, out0.Topic, out0.Headers)
		}
	}
	want := map[string]int64{
		"a|a||accepted|allowed":             2,
		"t1|t1||accepted|allowed":           1,
		"-12.5e3|-12.5e3||accepted|allowed": 1,
		"d|d||accepted|allowed":             1,
		"e|e||accepted|allowed":             1, // lax: read as far as it goes
		"|||dead_letter|ambiguous_team":     1,
		"|||dead_letter|field_empty":        1,
	}
	if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
}

// A router whose limiter shares its hash seed with the outcome aggregate (as a gate's do)
// checks a team with the hash its row was touched with (limit.Limiter.CheckTallyHashed):
// its decisions, its limiter's counts and its rows are those of a router whose seeds
// differ, for teams touched ahead (plain strings and numbers), touched after the read
// (escapes), limited, and for a record without a team, and it allocates nothing.
func TestOutcomesSharedSeedChecksAlike(t *testing.T) {
	seed := maphash.MakeSeed()
	shared := newFixture(t, Config{}, limit.Config{Threshold: 3, HashSeed: seed})
	apart := newFixture(t, Config{}, limit.Config{Threshold: 3})
	aggShared, aggApart := outcome.NewAggSeeded(60e9, nil, seed), outcome.NewAgg(60e9, nil)
	if shared.lim.Seed() != aggShared.Seed() || apart.lim.Seed() == aggApart.Seed() {
		t.Fatal("the seeds are not as the test needs them")
	}
	sS, sA := Scratch{Outcomes: aggShared}, Scratch{Outcomes: aggApart}
	values := []string{`{"team_id":"a","x":1}`, `{"team_id":7,"x":1}`, `{"team_id":"b\u0031","x":1}`, `{"x":1,"team_id":"c"}`, `{"x":1}`}
	for round := range 5 {
		for _, v := range values {
			var outS, outA kgo.Record
			oS, oA := shared.r.RouteInto(t0, input(v, ""), &sS, &outS), apart.r.RouteInto(t0, input(v, ""), &sA, &outA)
			if oS != oA || outS.Topic != outA.Topic {
				t.Errorf("round %d, %s: %+v to %s with one seed, %+v to %s with two", round, v, oS, outS.Topic, oA, outA.Topic)
			}
		}
	}
	sS.Flush()
	sA.Flush()
	// Each team's entry is where a lookup of its own hash finds it (the team view's, an
	// override's), not only where the next record's touch would.
	for _, team := range []string{"a", "7", "b1", "c"} {
		if st, ok := shared.lim.Snapshot(t0, team); !ok || st.Level < 3 {
			t.Errorf("team %s with one seed: %+v, found %v; want it cached at its level", team, st, ok)
		}
	}
	if got, want := shared.counts(), apart.counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limiter counts: %v with one seed, %v with two", got, want)
	}
	want := map[string]int64{
		"a|a||accepted|allowed": 3, "a|a||overflow|rate_limited": 2,
		"7|7||accepted|allowed": 3, "7|7||overflow|rate_limited": 2,
		"b1|b1||accepted|allowed": 3, "b1|b1||overflow|rate_limited": 2,
		"c|c||accepted|allowed": 3, "c|c||overflow|rate_limited": 2,
		"|||dead_letter|field_missing": 5,
	}
	for name, agg := range map[string]*outcome.Agg{"one seed": aggShared, "two seeds": aggApart} {
		if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rows with %s:\n got %v\nwant %v", name, got, want)
		}
	}
	if raceEnabled {
		return // the race detector allocates
	}
	// Accepted (an overflow's headers are a new slice), a row once made.
	free := newFixture(t, Config{}, limit.Config{Threshold: limit.MaxThreshold, HashSeed: seed})
	in := input(`{"team_id":"a","x":1}`, "")
	var out kgo.Record
	free.r.RouteInto(t0, in, &sS, &out)
	if n := testing.AllocsPerRun(1000, func() { free.r.RouteInto(t0, in, &sS, &out) }); n != 0 {
		t.Errorf("RouteInto with one seed: %v allocations a record, want 0", n)
	}
}

// With rules, a limited record's row is keyed by the acting rule's key (a user of a
// team), an accepted one's by its team, a shadow rule over adds a shadow_over row beside
// the record's own, and a drop rule's records are dropped: written nowhere, recorded.
func TestOutcomesRules(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "drop-bots", Key: mustKeyFrom(t, "json:team_id"), Action: ActionDrop,
			Match: []RuleMatch{{Field: mustKeyFrom(t, "json:bot"), Values: []string{"yes"}}}}, []limit.Config{{Threshold: 1}}},
		ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 2}}},
		ruleSpec{Rule{Name: "watch", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow, Shadow: true}, []limit.Config{{Threshold: 3}}},
	)
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 4 {
		f.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u1"}`, ""), &s, &out)
	}
	for _, u := range []string{"u2", "u3", "u4"} {
		f.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"`+u+`"}`, ""), &s, &out)
	}
	dropped := []Outcome{}
	for range 2 {
		out.Topic = "left-over"
		o := f.r.RouteInto(t0, input(`{"team_id":2,"distinct_id":"b","bot":"yes"}`, ""), &s, &out)
		dropped = append(dropped, o)
		if o.Route == Dropped && (out.Topic != "" || out.Value != nil) {
			t.Errorf("a dropped record left an output record: %+v", out)
		}
	}
	// The drop rule's threshold of 1: the first is under, the second dropped.
	if dropped[0].Route != Accepted || dropped[1].Route != Dropped || dropped[1].Reason != ReasonDropped {
		t.Errorf("drop rule: %s/%s then %s/%s, want accepted then dropped", dropped[0].Route, dropped[0].Reason, dropped[1].Route, dropped[1].Reason)
	}
	want := map[string]int64{
		"1|1||accepted|allowed":             5, // u1 twice, u2, u3, u4
		"1|1:u1|user|overflow|rate_limited": 2,
		// watch checks the team's records the user rule does not send away (u1's first
		// two, u2, u3, u4): over its 3 at u3 and u4, which are accepted all the same.
		"1|1|watch|shadow_over|rate_limited": 2,
		"2|2||accepted|allowed":              1,
		"2|2|drop-bots|dropped|dropped":      1,
	}
	if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
	// The team of a record the consumer dead-letters itself: the first rule's key's.
	if got := f.r.TeamOf(input(`{"team_id":5,"distinct_id":"u1"}`, ""), &s); got != "5" {
		t.Errorf("TeamOf = %q, want 5", got)
	}
	if got := f.r.TeamOf(input(`not json`, ""), &s); got != "" {
		t.Errorf("TeamOf(not json) = %q, want none", got)
	}
}

// Recording allocates nothing once a row exists.
func TestOutcomesNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), Action: ActionOverflow}, []limit.Config{{Threshold: limit.MaxThreshold}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	in := input(`{"team_id":1,"distinct_id":"u1"}`, "")
	f.r.RouteInto(t0, in, &s, &out)
	if n := testing.AllocsPerRun(1000, func() { f.r.RouteInto(t0, in, &s, &out) }); n != 0 {
		t.Errorf("RouteInto with outcomes: %v allocations a record, want 0", n)
	}
}

// A row's threshold and its source are those of one limit of its key: a rule that acted
// over its second limit gives that limit's threshold and source (static, where the first
// has an override for the key), a team's accepted row under a composite key has none (the
// decision was a user's), and a team rule's accepted row its team's. Before, the source
// was always looked up on the first limit, and the team's row took the user's threshold.
func TestOutcomeThresholdOfItsLimit(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), Action: ActionOverflow},
			[]limit.Config{{Threshold: 10, Overrides: map[string]int64{"1:u1": 99}}}},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow},
			[]limit.Config{{Threshold: 1000, Window: time.Minute, Overrides: map[string]int64{"1": 500}}, {Threshold: 2, Window: time.Hour}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 3 {
		f.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u1"}`, ""), &s, &out)
	}
	type th struct {
		threshold int64
		source    string
	}
	got := map[string]th{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[r.Key+" "+r.Outcome] = th{r.Threshold, r.ThresholdSource}
	}
	want := map[string]th{
		"1 accepted": {},            // the user rule decided first: a user's threshold, not the team's
		"1 overflow": {2, "static"}, // over the team rule's hour limit, static, not the minute's override
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("thresholds by row:\n got %v\nwant %v", got, want)
	}

	// A team rule alone: its accepted row has the team's threshold and source.
	g := newRuleFixture(t, Config{}, ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow},
		[]limit.Config{{Threshold: 1000, Overrides: map[string]int64{"1": 500}}}})
	agg = outcome.NewAgg(60e9, nil)
	s = Scratch{Outcomes: agg}
	g.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	rows := outcome.Seal("g", "s", agg)
	if len(rows) != 1 || rows[0].Outcome != "accepted" {
		t.Fatalf("team rule alone: rows %+v, want its one accepted row", rows)
	}
	if r := rows[0]; r.Threshold != 500 || r.ThresholdSource != "override" {
		t.Errorf("team rule's accepted row: threshold %d (%s), want 500 (override)", r.Threshold, r.ThresholdSource)
	}
}

// In a dry run a forced user's record is accepted: its row is the team's under a
// composite key, which has no threshold and no source, "forced" being the user's.
func TestOutcomeDryRunForcedTeamRow(t *testing.T) {
	f := newRuleFixture(t, Config{DryRun: true},
		ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), Action: ActionOverflow, Forced: []string{"1:u1"}},
			[]limit.Config{{Threshold: 10}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	f.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u1"}`, ""), &s, &out)
	rows := outcome.Seal("g", "s", agg)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want the team's one: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.Key != "1" || r.ThresholdSource != "" || r.Threshold != 0 {
			t.Errorf("row %q %s: threshold %d, source %q; want the team's row, with neither", r.Key, r.Outcome, r.Threshold, r.ThresholdSource)
		}
	}
}

// A shadow rule changes no record's outcome, its row included: listed first (as the
// docs' shadow example lists an IP rule before the team's), it does not make its key the
// team of the records the enforced rules accept, nor of those the consumer dead-letters
// itself (TeamOf). Before, every accepted record's row was keyed by its IP.
func TestOutcomesShadowRuleFirstKeepsTeamRows(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "ip", Key: mustKeyFrom(t, "header:ip"), SkipMissing: true, Action: ActionOverflow, Shadow: true}, []limit.Config{{Threshold: 1}}},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1000, Overrides: map[string]int64{"1": 500}}}},
	)
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	var o Outcome
	for range 2 {
		o = f.r.RouteInto(t0, input(`{"team_id":1}`, "", "ip", "10.0.0.1"), &s, &out)
	}
	if o.Team != "1" || o.KeyRule != "team" || o.Decision.Threshold != 500 {
		t.Errorf("Outcome: team %q of rule %q, threshold %d; want the team rule's 1 (500)", o.Team, o.KeyRule, o.Decision.Threshold)
	}
	want := map[string]int64{
		"1|1||accepted|allowed":                    2,
		"1|1:10.0.0.1|ip|shadow_over|rate_limited": 1, // the IP's row under its record's team (rowKey)
	}
	got := map[string]int64{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[fmt.Sprintf("%s|%s|%s|%s|%s", r.Team, r.Key, r.Rule, r.Outcome, r.Reason)] += r.Records
		if r.Outcome == "accepted" && (r.Threshold != 500 || r.ThresholdSource != "override") {
			t.Errorf("accepted row: threshold %d (%s), want the team's 500 (override)", r.Threshold, r.ThresholdSource)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
	if got := f.r.TeamOf(input(`{"team_id":1}`, "", "ip", "10.0.0.1"), &s); got != "1" {
		t.Errorf("TeamOf = %q, want the team rule's 1", got)
	}
	// A record no enforced rule checks (the merges rule's match fails) keeps the shadow
	// rule's key: the only key read.
	g := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "ip", Key: mustKeyFrom(t, "header:ip"), Action: ActionOverflow, Shadow: true}, []limit.Config{{Threshold: 1000}}},
		ruleSpec{Rule{Name: "merges", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow,
			Match: []RuleMatch{{Field: mustKeyFrom(t, "json:event"), Values: []string{"$identify"}}}}, []limit.Config{{Threshold: 1000}}},
	)
	if o := g.r.RouteInto(t0, input(`{"team_id":1,"event":"x"}`, "", "ip", "10.0.0.2"), &s, &out); o.Team != "10.0.0.2" || o.KeyRule != "ip" {
		t.Errorf("only the shadow rule checked: team %q of rule %q, want its key", o.Team, o.KeyRule)
	}
}

// A shadow rule listed first leaves the row of a record the enforced rules dead-letter
// as it is with the shadow rule listed after, or without it: under no key, as the team
// rule read none (docs/rules.md: "the record's own row keeps the team the enforced rules
// read, wherever the shadow rule is listed"). Before, a record without a team_id was
// dead-lettered under its IP, the shadow rule's key, with its threshold, and Outcome
// named the shadow rule's key as its team.
func TestOutcomesShadowRuleFirstKeepsDeadLetterRows(t *testing.T) {
	ip := ruleSpec{Rule{Name: "ip", Key: mustKeyFrom(t, "header:ip"), SkipMissing: true, Action: ActionOverflow, Shadow: true}, []limit.Config{{Threshold: 1000}}}
	team := ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}}
	for _, order := range [][]ruleSpec{{ip, team}, {team, ip}} {
		f := newRuleFixture(t, Config{}, order...)
		agg := outcome.NewAgg(60e9, nil)
		s := Scratch{Outcomes: agg}
		var out kgo.Record
		for _, v := range []string{`{"distinct_id":"u1"}`, `{"team_id":{"a":1}}`} {
			o := f.r.RouteInto(t0, input(v, "", "ip", "10.0.0.1"), &s, &out)
			if o.Route != DeadLetter || o.Team != "" || o.KeyRule != "" || o.Decision != (limit.Decision{}) {
				t.Errorf("%s first, %s: %s, team %q of rule %q, decision %+v; want a dead letter of no team", order[0].Name, v, o.Route, o.Team, o.KeyRule, o.Decision)
			}
		}
		want := map[string]int64{"|||dead_letter|field_missing": 1, "|||dead_letter|field_type": 1}
		if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s first: rows\n got %v\nwant %v", order[0].Name, got, want)
		}
	}
}

// In a dry run a record a tagging rule would have tagged is accepted without the header,
// reason allowed, and its row names the rule that would have acted (docs/outcomes.md).
func TestOutcomeDryRunTagRow(t *testing.T) {
	f := newRuleFixture(t, Config{DryRun: true},
		ruleSpec{Rule{Name: "tg", Key: mustKeyFrom(t, "json:team_id"), Action: ActionTag}, []limit.Config{{Threshold: 1}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 2 {
		f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	}
	want := map[string]int64{"1|1||accepted|allowed": 1, "1|1|tg|accepted|allowed": 1}
	if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) || len(headerValues(&out, HeaderTag)) != 0 {
		t.Errorf("rows %v, tags %v; want %v and no tag", got, headerValues(&out, HeaderTag), want)
	}
}

// A shadow rule over its second limit gives its shadow_over row that limit's threshold
// and source: the source is not looked up on the first limit (an override there for the
// key made the second limit's static threshold read "override").
func TestOutcomeShadowThresholdOfItsLimit(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "watch", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow, Shadow: true},
			[]limit.Config{{Threshold: 1000, Window: time.Minute, Overrides: map[string]int64{"1": 500}}, {Threshold: 2, Window: time.Hour}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 3 {
		f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	}
	n := 0
	for _, r := range outcome.Seal("g", "s", agg) {
		if r.Outcome != "shadow_over" {
			continue
		}
		n++
		if r.Threshold != 2 || r.ThresholdSource != "static" {
			t.Errorf("shadow_over row: threshold %d (%s), want the hour limit's 2 (static)", r.Threshold, r.ThresholdSource)
		}
	}
	if n != 1 {
		t.Errorf("%d shadow_over rows, want 1", n)
	}
}

// The record's own row takes its threshold and its source from one limit, the one whose
// decision it has: a team's accepted row under a shadow rule over its second limit, and
// its dead_letter row after its rule acted over its second limit and a later rule
// dead-lettered the record, had the second limit's threshold and the first limit's
// source (an override there: "2 (override)" where the hour limit is static; a review).
func TestOutcomeRowThresholdAndSourceOfOneLimit(t *testing.T) {
	limits := []limit.Config{{Threshold: 1000, Window: time.Minute, Overrides: map[string]int64{"1": 500}}, {Threshold: 2, Window: time.Hour}}
	for _, tc := range []struct {
		name  string
		rules []ruleSpec
		value string // the last record's, after three of {"team_id":1,"distinct_id":"u"}
		row   string // the row whose threshold is looked at
	}{
		{"accepted under a shadow rule", []ruleSpec{{Rule{Name: "watch", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow, Shadow: true}, limits}},
			`{"team_id":1,"distinct_id":"u"}`, "accepted"},
		{"dead_letter after its rule acted", []ruleSpec{
			{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, limits},
			{Rule{Name: "drop-user", Key: mustKeyFrom(t, "json:distinct_id"), Action: ActionDrop}, []limit.Config{{Threshold: 1000}}}},
			`{"team_id":1}`, "dead_letter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRuleFixture(t, Config{}, tc.rules...)
			agg := outcome.NewAgg(60e9, nil)
			s := Scratch{Outcomes: agg}
			var out kgo.Record
			for range 3 {
				f.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u"}`, ""), &s, &out)
			}
			outcome.Seal("g", "s1", agg) // the next seal's row is the last record's alone
			f.r.RouteInto(t0, input(tc.value, ""), &s, &out)
			n := 0
			for _, r := range outcome.Seal("g", "s2", agg) {
				if r.Outcome != tc.row {
					continue
				}
				n++
				if r.Threshold != 2 || r.ThresholdSource != "static" {
					t.Errorf("%s row: threshold %d (%s), want the hour limit's 2 (static)", r.Outcome, r.Threshold, r.ThresholdSource)
				}
			}
			if n != 1 {
				t.Errorf("%d %s rows, want 1", n, tc.row)
			}
		})
	}
}

// TeamOf, the team of a record the consumer decides itself (exactly once: rejected by the
// broker, or skipped as undeliverable), is the team RouteInto gives it: the first
// enforced rule that checked it, past a rule whose key is missing under missing: skip (the
// docs' team-user rule, for a record without a distinct_id) or whose match does not hold.
// Before, it read the first enforced rule's key whatever, so such records were counted
// under no team.
func TestTeamOfFirstRuleChecked(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "merges", Key: mustKeyFrom(t, "json:event"), Action: ActionOverflow,
			Match: []RuleMatch{{Field: mustKeyFrom(t, "json:event"), Values: []string{"$merge"}}}}, []limit.Config{{Threshold: 1000}}},
		ruleSpec{Rule{Name: "team-user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
	)
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for _, c := range []struct{ value, team string }{
		{`{"team_id":1,"distinct_id":"u1","event":"x"}`, "1"},
		{`{"team_id":2,"event":"x"}`, "2"},
		{`{"team_id":3,"distinct_id":"u1","event":"$merge"}`, "3"}, // merges is keyed by event: the record's team, read by team_id (TeamField)
		{`{"distinct_id":"u1","event":"x"}`, ""},
		{`not json`, ""},
	} {
		f.r.RouteInto(t0, input(c.value, ""), &s, &out)
		if got := f.r.TeamOf(input(c.value, ""), &s); got != c.team {
			t.Errorf("%s: TeamOf = %q, want %q", c.value, got, c.team)
		}
	}
}

// A value that is no JSON object (with GATE_VALIDATE_JSON, no valid JSON) is
// dead-lettered before any rule is checked when an enforced rule reads JSON, whatever the
// rules before it read: RouteInto gives it no team, and TeamOf (the team of its row when
// the consumer dead-letters it again, rejected, or skips it) gives none either. Before,
// TeamOf gave the key of a first rule reading a header (an IP), which had checked nothing.
func TestTeamOfNotJSONBeforeAnyRule(t *testing.T) {
	for _, validate := range []bool{false, true} {
		f := newRuleFixture(t, Config{ValidateJSON: validate},
			ruleSpec{Rule{Name: "ip", Key: mustKeyFrom(t, "header:ip"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
			ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
		)
		s := Scratch{Outcomes: outcome.NewAgg(60e9, nil)}
		var out kgo.Record
		values := []string{`not json`, `[1]`, `{"team_id":1}`}
		if validate {
			values = append(values, `{"team_id":1,`)
		}
		for _, v := range values {
			o := f.r.RouteInto(t0, input(v, "", "ip", "10.0.0.1"), &s, &out)
			want := teamOf(o.Team, false)
			if got := f.r.TeamOf(input(v, "", "ip", "10.0.0.1"), &s); got != want {
				t.Errorf("validate %v, %s: routed %s/%s under team %q, TeamOf = %q", validate, v, o.Route, o.Reason, want, got)
			}
		}
	}
}

// In a dry run a record a later rule would dead-letter, after an earlier rule was over
// for it, is accepted: its row is the dead letter's as a dry run has it (reason dry_run),
// naming no rule, as enforcement's dead_letter row names none. Before, it named the
// earlier rule, as if that rule would have sent the record away.
func TestOutcomeDryRunDeadLetterAfterRuleOver(t *testing.T) {
	for _, dry := range []bool{false, true} {
		f := newRuleFixture(t, Config{DryRun: dry},
			ruleSpec{Rule{Name: "ov", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow, Forced: []string{"1"}}, []limit.Config{{Threshold: 1000}}},
			ruleSpec{Rule{Name: "tp", Key: mustKeyFrom(t, "json:distinct_id"), Action: ActionTopic, Topic: "quarantine"}, []limit.Config{{Threshold: 1000}}},
		)
		agg := outcome.NewAgg(60e9, nil)
		s := Scratch{Outcomes: agg}
		var out kgo.Record
		o := f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
		if o.Enforced != DeadLetter || o.EnforcedReason != ReasonFieldMissing {
			t.Fatalf("dry run %v: enforced %s %s, want dead_letter field_missing", dry, o.Enforced, o.EnforcedReason)
		}
		want := map[string]int64{"1|1||dead_letter|field_missing": 1}
		if dry {
			want = map[string]int64{"1|1||accepted|dry_run": 1}
		}
		if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("dry run %v: rows\n got %v\nwant %v", dry, got, want)
		}
	}
}

// thresholdsOf seals agg and returns each row's threshold and source by "key outcome
// reason".
func thresholdsOf(agg *outcome.Agg) map[string]string {
	got := map[string]string{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[r.Key+" "+r.Outcome+" "+r.Reason] = fmt.Sprintf("%d %s", r.Threshold, r.ThresholdSource)
	}
	return got
}

// A forced key's row that its rule acted on has the source forced, as the issue's
// "threshold and its source (static, override, learned, forced)" asks: a team key in a
// rule's forced list (forced over the key's override, which stays its threshold), a
// user's under a composite key, and a team in a gate without a rules file
// (GATE_FORCE_OVERFLOW). Another key of the same rule keeps its own source.
func TestOutcomeThresholdSourceForced(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow, Forced: []string{"1"}},
			[]limit.Config{{Threshold: 1000, Overrides: map[string]int64{"1": 500}}}})
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 2 {
		f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	}
	f.r.RouteInto(t0, input(`{"team_id":2}`, ""), &s, &out)
	want := map[string]string{
		"1 overflow forced":  "500 forced",
		"2 accepted allowed": "1000 static",
	}
	if got := thresholdsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("team rule, team 1 forced: thresholds by row:\n got %v\nwant %v", got, want)
	}

	// A user forced under a composite key: the user's row is forced; the team's row of
	// another user's accepted record has none (the decision was a user's).
	g := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), Action: ActionOverflow, Forced: []string{"1:u1"}},
			[]limit.Config{{Threshold: 10}}})
	agg = outcome.NewAgg(60e9, nil)
	s = Scratch{Outcomes: agg}
	g.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u1"}`, ""), &s, &out)
	g.r.RouteInto(t0, input(`{"team_id":1,"distinct_id":"u2"}`, ""), &s, &out)
	want = map[string]string{
		"1:u1 overflow forced": "10 forced",
		"1 accepted allowed":   "0 ",
	}
	if got := thresholdsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("user rule, 1:u1 forced: thresholds by row:\n got %v\nwant %v", got, want)
	}

	// No rules file: GATE_FORCE_OVERFLOW's team.
	h := newFixture(t, Config{ForceOverflow: []string{"9"}}, limit.Config{Threshold: 2})
	agg = outcome.NewAgg(60e9, nil)
	s = Scratch{Outcomes: agg}
	h.r.RouteInto(t0, input(`{"team_id":9}`, ""), &s, &out)
	h.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	want = map[string]string{
		"9 overflow forced":  "2 forced",
		"1 accepted allowed": "2 static",
	}
	if got := thresholdsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("no rules file, team 9 forced: thresholds by row:\n got %v\nwant %v", got, want)
	}
}

// A key whose threshold its limit learned (an adaptive limit, the team's profile
// applied by the tick's read: limit.ApplyProfile) has rows with that threshold and the
// source learned, the accepted row and the overflow row past it; a key of the same limit
// with no profile stays static, and one with an override is override, over what it
// learned.
func TestOutcomeThresholdSourceLearned(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow},
			[]limit.Config{{Threshold: 1_000_000, Window: time.Minute, Adaptive: &spike.Config{}, Overrides: map[string]int64{"3": 50}}}})
	lim := f.lims["team"][0]
	cfg := lim.Adaptive()
	if cfg == nil {
		t.Fatal("the limit is not adaptive")
	}
	// The teams met, with outcomes off; the sweep plans their profiles' reads, and the
	// tick hands teams 1 and 3 a day's history at 50 records a window: 4 × 50 = 200.
	var out kgo.Record
	for _, team := range []string{"1", "3"} {
		f.r.RouteInto(t0, input(`{"team_id":`+team+`}`, ""), &Scratch{}, &out)
	}
	var sw limit.Sweep
	lim.Sweep(t0, &sw)
	learned := 0
	for i := range sw.Reads {
		r := &sw.Reads[i]
		if r.Team != "1" && r.Team != "3" {
			continue
		}
		if !r.Profile {
			t.Fatalf("%s's read does not ask for its profile: %+v", r.Team, *r)
		}
		p := spike.Profile{Epoch: r.Epoch - 1, Windows: 1440, Level: 50}
		for cfg.NextFold(&p, "") <= r.Epoch+1 { // not due for a fold: applied as it is
			p.Epoch++
		}
		lim.ApplyProfile(r, p, true, 0, t0)
		learned++
	}
	if learned != 2 {
		t.Fatalf("%d of teams 1 and 3 read, want both", learned)
	}
	if thr, src := lim.ThresholdOf("1"); thr != 200 || src != limit.SourceLearned {
		t.Fatalf("team 1's threshold %d (%s), want 200 learned", thr, src)
	}

	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	for range 300 {
		f.r.RouteInto(t0, input(`{"team_id":1}`, ""), &s, &out)
	}
	f.r.RouteInto(t0, input(`{"team_id":2}`, ""), &s, &out)
	f.r.RouteInto(t0, input(`{"team_id":3}`, ""), &s, &out)
	want := map[string]string{
		"1 accepted allowed":      "200 learned",
		"1 overflow rate_limited": "200 learned",
		"2 accepted allowed":      "1000000 static",
		"3 accepted allowed":      "50 override",
	}
	if got := thresholdsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("thresholds by row:\n got %v\nwant %v", got, want)
	}
}

// A rule keyed by something other than the team (an event type here, as an IP or a
// user-agent rule is) files its outcome rows under the team of the records it limited,
// its key after the team's (team:key): before, its rows' team was the event, so
// `gate outcomes 42` said the team was never limited, and -top listed "$pageview" as
// a team (a review, black-box: 150 of a team's 200 records overflowed by the event
// rule, none of them in the team's history). The team is read by the first field of
// the first composite key, else of the first rule without a match (TeamField), or by
// Config.OutcomesTeam (a rules file's team:), whatever order the rules are in.
func TestOutcomesRuleNotKeyedByTheTeamFilesUnderTheTeam(t *testing.T) {
	team := func() ruleSpec {
		return ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}}
	}
	ev := func() ruleSpec {
		return ruleSpec{Rule{Name: "ev", Key: mustKeyFrom(t, "json:event"), Action: ActionOverflow}, []limit.Config{{Threshold: 50}}}
	}
	for _, tc := range []struct {
		name     string
		cfg      Config
		rules    func() []ruleSpec
		teamOf   string // the rows' team
		limitKey string // the ev rule's row's key
	}{
		{"team-first", Config{}, func() []ruleSpec { return []ruleSpec{team(), ev()} }, "42", "42:$pageview%3Ax"},
		{"event-first-team-given", Config{OutcomesTeam: mustKeyFrom(t, "json:team_id")}, func() []ruleSpec { return []ruleSpec{ev(), team()} }, "42", "42:$pageview%3Ax"},
		// Without team:, the first rule's field is the team's: the docs say to set team:.
		{"event-first", Config{}, func() []ruleSpec { return []ruleSpec{ev(), team()} }, "$pageview:x", "$pageview:x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRuleFixture(t, tc.cfg, tc.rules()...)
			agg := outcome.NewAgg(60e9, nil)
			s := Scratch{Outcomes: agg}
			var out kgo.Record
			in := input(`{"team_id":"42","event":"$pageview:x"}`, "")
			for range 200 {
				f.r.RouteInto(t0, in, &s, &out)
			}
			s.Flush()
			got := map[string]int64{}
			for _, r := range outcome.Seal("g", "s", agg) {
				got[fmt.Sprintf("%s|%s|%s|%s", r.Team, r.Key, r.Rule, r.Outcome)] += r.Records
				if r.Outcome == "overflow" && r.Threshold != 50 {
					t.Errorf("the ev rule's row: threshold %d, want its 50", r.Threshold)
				}
			}
			want := map[string]int64{
				tc.teamOf + "|" + tc.teamOf + "||accepted":     50,
				tc.teamOf + "|" + tc.limitKey + "|ev|overflow": 150,
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rows:\n got %v\nwant %v", got, want)
			}
			if got := f.r.TeamOf(in, &s); got != tc.teamOf {
				t.Errorf("TeamOf = %q, want %q", got, tc.teamOf)
			}
		})
	}
}

// The rows of a rule not keyed by the team, filed under the record's team (rowKey), as a
// review found them wanting: the threshold's source is asked of the limiter by the key
// it knows (an override read "static", asked by the row's team:key); a team longer than
// GATE_MAX_KEY_BYTES is no team (its row held the whole team, 600 KB, for the topic to
// refuse); and a record with no team files the rule's key, escaped as after a team, in
// the rows of no team, where it was taken for a team and could share a row with a
// team's key ({"event":"42:$pageview"} and team 42's $pageview were one row).
func TestOutcomesRuleNotKeyedByTheTeamRowsHold(t *testing.T) {
	f := newRuleFixture(t, Config{OutcomesTeam: mustKeyFrom(t, "json:team_id"), MaxKeyBytes: 64},
		ruleSpec{Rule{Name: "ev", Key: mustKeyFrom(t, "json:event"), Action: ActionOverflow}, []limit.Config{{Threshold: 1, Overrides: map[string]int64{"$pageview": 1}}}},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
	)
	agg := outcome.NewAgg(60e9, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	long := strings.Repeat("t", 100)
	for _, v := range []string{
		`{"event":"42:$pageview"}`, `{"event":"42:$pageview"}`, // no team: its key escaped, no team
		`{"team_id":"42","event":"$pageview"}`, `{"team_id":"42","event":"$pageview"}`,
		`{"team_id":"` + long + `","event":"$pageview"}`, // a team too long: none
	} {
		f.r.RouteInto(t0, input(v, ""), &s, &out)
	}
	s.Flush()
	got := map[string]int64{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[fmt.Sprintf("%s|%s|%s|%s", r.Team, r.Key, r.Rule, r.Outcome)] += r.Records
		if r.Key == "42:$pageview" && r.ThresholdSource != "override" {
			t.Errorf("row %q: threshold %d from %q, want the override's 1", r.Key, r.Threshold, r.ThresholdSource)
		}
		if len(r.Team) > 64 {
			t.Errorf("a row's team of %d bytes, over GATE_MAX_KEY_BYTES", len(r.Team))
		}
	}
	want := map[string]int64{ // each key's first record is under its threshold of 1
		"|||accepted": 1, "|42%3A$pageview|ev|overflow": 1,
		"42|42||accepted": 1, "42|42:$pageview|ev|overflow": 1,
		"|$pageview|ev|overflow": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
	if got := f.r.TeamOf(input(`{"event":"42:$pageview"}`, ""), &s); got != "" {
		t.Errorf("TeamOf a record without a team = %q, want none", got)
	}
	if got := f.r.LimiterKey("ev", "42", "42:$pageview"); got != "$pageview" {
		t.Errorf("LimiterKey of team 42's row = %q, want $pageview", got)
	}
	if got := f.r.LimiterKey("ev", "", "42%3A$pageview"); got != "42:$pageview" {
		t.Errorf("LimiterKey of a row of no team = %q, want 42:$pageview", got)
	}
}

// Past GATE_OUTCOMES_MAX_ROWS a kept team's new keys under a rule not keyed by the team
// (a user id) are counted in the team's row of the rule, keyed by the team's id; a record
// whose team cannot be read has the rule's key as its row's key, and no team. User ids
// and team ids meet ("42" both): the team's row and the records of no team were one row,
// Bump finding the team's by the key alone, team 42's overflow and the other's summed
// under team 42. They are apart now, the records of no team, a key new past the cap,
// folded.
func TestOutcomesKeyOfNoTeamApartFromTheTeamOfItsBytes(t *testing.T) {
	f := newRuleFixture(t, Config{OutcomesTeam: mustKeyFrom(t, "json:team_id")},
		ruleSpec{Rule{Name: "users", Key: mustKeyFrom(t, "json:distinct_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1}}},
	)
	agg := outcome.NewAgg(60e9, outcome.NewBudget(2))
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	f.r.RouteInto(t0, input(`{"team_id":"42","distinct_id":"u0"}`, ""), &s, &out) // team 42 kept
	f.r.RouteInto(t0, input(`{"team_id":"7","distinct_id":"v"}`, ""), &s, &out)   // the cap
	for i := range 5 {
		in := input(fmt.Sprintf(`{"team_id":"42","distinct_id":"u%d"}`, i+1), "")
		f.r.RouteInto(t0, in, &s, &out) // accepted
		f.r.RouteInto(t0, in, &s, &out) // overflow: a new key past the cap, in team 42's row
	}
	for range 3 { // the first accepted, in the row of no key; then overflow, keyed 42
		f.r.RouteInto(t0, input(`{"distinct_id":"42"}`, ""), &s, &out)
	}
	s.Flush()
	got := map[string]int64{}
	for _, r := range outcome.Seal("g", "s", agg) {
		got[fmt.Sprintf("%s|%s|%s|%s|%v", r.Team, r.Key, r.Rule, r.Outcome, r.Folded)] += r.Records
	}
	want := map[string]int64{
		"42|42||accepted|false": 6, "7|7||accepted|false": 1,
		"42|42|users|overflow|false": 5,
		"|||accepted|true":           1, "||users|overflow|true": 2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
}
