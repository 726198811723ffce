package route

import (
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// Capture headers as a PostHog-like producer sets them.
var benchHeaders = []kgo.RecordHeader{
	{Key: "token", Value: []byte("phc_Fq3rT8xWm2LpZ9vB6nC1dK4hJ7gS0aE5yU3iO8tR2wQ")},
	{Key: "distinct_id", Value: []byte("0190a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b")},
	{Key: "team", Value: []byte("2")},
	{Key: "event", Value: []byte("$pageview")},
	{Key: "uuid", Value: []byte("0190a1b2-7c3d-7e4f-8a9b-cccccccccccc")},
	{Key: "now", Value: []byte("2024-06-10T06:13:20.456Z")},
}

func readEvent(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(eventsDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

type routeCase struct {
	name, from string
	value      []byte
	key        string
	force      []string
	headers    []kgo.RecordHeader
	limits     int // 0 or 1: one limit; more: that many (a minute, an hour, a day...)
	rules      int // 0: no rules (GATE_KEY_FROM); n: the first n of benchRules (NewRules)
}

// benchRules are the rules of BenchmarkRoute's rules rows, most common first: a team rule,
// a user-within-team rule, an event-type rule (matching the event, so checked), then more
// keys a fleet might limit by.
var benchRules = []struct {
	name, key string
	match     []RuleMatch
	skip      bool // SkipMissing
}{
	{"team", "json:team_id", nil, false},
	{"team-user", "json:team_id+distinct_id", nil, false},
	{"events", "json:team_id", []RuleMatch{{Field: KeyFrom{src: sourceHeader, header: "event"}, Values: []string{"$pageview", "$identify", "$create_alias"}}}, false},
	{"token", "json:token", nil, false},
	{"ip", "json:ip", nil, false},
	{"token-user", "json:token+distinct_id", nil, false},
	{"site", "json:site_url", nil, false},
	{"header-user", "header:distinct_id", nil, true},
	{"record-key", "key", nil, true},
	{"not-internal", "json:team_id+ip", []RuleMatch{{Field: KeyFrom{src: sourceHeader, header: "source"}, Values: []string{"internal"}, Not: true}}, false},
}

func routeCases(tb testing.TB) []routeCase {
	event := readEvent(tb, "team_id_int.json") // ~1 KB, team_id last
	return []routeCase{
		{"json", "json:team_id", event, "k", nil, benchHeaders, 0, 0},
		{"json_1limit", "json:team_id", event, "k", nil, benchHeaders, 1, 0},
		{"json_3limits", "json:team_id", event, "k", nil, benchHeaders, 3, 0},
		{"json_small", "json:team_id", []byte(`{"team_id":2,"event":"$pageview","distinct_id":"u1"}`), "k", nil, benchHeaders, 0, 0},
		{"json_large", "json:team_id", readEvent(tb, "large_team_id_last.json"), "k", nil, benchHeaders, 0, 0},
		{"json_overflow", "json:team_id", event, "k", []string{"2"}, benchHeaders, 0, 0},
		{"composite", "json:token+distinct_id", event, "k", nil, benchHeaders, 0, 0},
		{"header", "header:team", event, "k", nil, benchHeaders, 0, 0},
		{"key", "key", event, "2", nil, benchHeaders, 0, 0},
		{"json_1rule", "", event, "k", nil, benchHeaders, 1, 1},
		{"json_3rules", "", event, "k", nil, benchHeaders, 1, 3},
		{"json_10rules", "", event, "k", nil, benchHeaders, 1, 10},
	}
}

func (c routeCase) setup(tb testing.TB) (*Router, *kgo.Record) {
	if c.rules > 0 {
		return c.setupRules(tb)
	}
	f := newFixture(tb, Config{KeyFrom: mustKeyFrom(tb, c.from), ForceOverflow: c.force}, limit.Config{Threshold: limit.MaxThreshold})
	if c.limits > 1 {
		lims := []*limit.Limiter{f.lim}
		for i := 1; i < c.limits; i++ {
			l, err := limit.New(limit.Config{Window: time.Duration(60*i) * time.Minute, Threshold: limit.MaxThreshold}, f.clk, nil)
			if err != nil {
				tb.Fatal(err)
			}
			lims = append(lims, l)
		}
		r, err := NewMulti(Config{KeyFrom: mustKeyFrom(tb, c.from), AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead}, lims, nil)
		if err != nil {
			tb.Fatal(err)
		}
		f.r = r
	}
	in := input("", c.key)
	in.Value, in.Headers = c.value, c.headers
	f.r.Route(t0, in, &Scratch{}) // cache the team
	return f.r, in
}

// setupRules is setup for a router with the first c.rules of benchRules, each with one
// limit no key reaches.
func (c routeCase) setupRules(tb testing.TB) (*Router, *kgo.Record) {
	idx := make([]int, c.rules)
	for i := range idx {
		idx[i] = i
	}
	return c.setupRuleSet(tb, idx)
}

// setupRuleSet is setupRules for the rules of benchRules at idx, in that order.
func (c routeCase) setupRuleSet(tb testing.TB, idx []int) (*Router, *kgo.Record) {
	var specs []ruleSpec
	seed := maphash.MakeSeed() // one for every limiter, as the gate gives them
	for _, i := range idx {
		br := benchRules[i]
		specs = append(specs, ruleSpec{Rule{Name: br.name, Key: mustKeyFrom(tb, br.key), Match: br.match, SkipMissing: br.skip, Action: ActionOverflow},
			[]limit.Config{{Threshold: limit.MaxThreshold, HashSeed: seed}}})
	}
	f := newRuleFixture(tb, Config{}, specs...)
	in := input("", c.key)
	in.Value, in.Headers = c.value, c.headers
	if _, o := f.r.Route(t0, in, &Scratch{}); o.Route != Accepted {
		tb.Fatalf("%s: %s %s", c.name, o.Route, o.Reason) // and every key is cached
	}
	return f.r, in
}

// BenchmarkRoute is routing a record of a team already cached, by key source: the common
// path, as the consumer takes it (RouteInto a record it owns, the Scratch flushed once a
// poll, here every 256 records).
func BenchmarkRoute(b *testing.B) {
	for _, c := range routeCases(b) {
		b.Run(c.name, func(b *testing.B) {
			r, in := c.setup(b)
			var s Scratch
			var out kgo.Record
			b.ReportAllocs()
			b.SetBytes(int64(len(in.Value)))
			i := 0
			for b.Loop() {
				r.RouteInto(t0, in, &s, &out)
				if i++; i%256 == 0 {
					s.Flush()
				}
			}
			s.Flush()
		})
	}
}

// TestRouteAllocs checks what BenchmarkRoute shows: for a cached team, RouteInto into a
// record the caller owns (as the consumer routes) allocates nothing, headers or not, but
// the slice of an overflow record's headers (the gate adds its own); Route allocates the
// output record besides.
func TestRouteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, c := range routeCases(t) {
		r, in := c.setup(t)
		var s Scratch
		want := 0.0
		if c.force != nil {
			want = 1 // the overflow header needs a slice
		}
		if n := testing.AllocsPerRun(200, func() { r.Route(t0, in, &s) }); n != want+1 {
			t.Errorf("%s: %v allocations per Route, want %v", c.name, n, want+1)
		}
		var out kgo.Record
		if n := testing.AllocsPerRun(200, func() { r.RouteInto(t0, in, &s, &out) }); n != want {
			t.Errorf("%s: %v allocations per RouteInto, want %v", c.name, n, want)
		}
		if c.from == "header:team" {
			continue // without headers it is a dead letter
		}
		in.Headers = nil
		if n := testing.AllocsPerRun(200, func() { r.RouteInto(t0, in, &s, &out) }); n != want {
			t.Errorf("%s without headers: %v allocations per RouteInto, want %v", c.name, n, want)
		}
	}
}

// BenchmarkValidate measures what validating a value costs next to reading its team:
// get is gjson.Get of team_id alone, valid+get is gjson.Valid then gjson.Get, as Route
// does. The numbers decide, and are quoted in, the comment on KeyFrom.jsonTeam.
func BenchmarkValidate(b *testing.B) {
	for _, c := range []struct {
		name  string
		value []byte
	}{
		{"small_team_first", []byte(`{"team_id":2,"event":"$pageview","distinct_id":"u1"}`)},
		{"1KB_team_last", readEvent(b, "team_id_int.json")},
		{"3.5KB_team_last", readEvent(b, "large_team_id_last.json")},
		{"nested_team_first", readEvent(b, "nested_properties.json")},
	} {
		js := bytesString(c.value)
		b.Run(c.name+"/get", func(b *testing.B) {
			b.SetBytes(int64(len(js)))
			b.ReportAllocs()
			for b.Loop() {
				if !gjson.Get(js, "team_id").Exists() {
					b.Fatal("no team_id")
				}
			}
		})
		b.Run(c.name+"/valid+get", func(b *testing.B) {
			b.SetBytes(int64(len(js)))
			b.ReportAllocs()
			for b.Loop() {
				if !gjson.Valid(js) || !gjson.Get(js, "team_id").Exists() {
					b.Fatal("invalid or no team_id")
				}
			}
		})
	}
}

// BenchmarkTeam is reading the team key alone, as Route does by default (without
// validation), by key source and event: what duplicate detection and the composite key's
// encoding cost shows here with less noise than in BenchmarkRoute.
func BenchmarkTeam(b *testing.B) {
	event := readEvent(b, "team_id_int.json")
	for _, c := range []struct {
		name, from string
		value      []byte
	}{
		{"1KB_team_last", "json:team_id", event},
		{"1KB_object_team_last", "json:team_id", embeddedAsObject(b, event)},
		{"small_team_first", "json:team_id", []byte(`{"team_id":2,"event":"$pageview","distinct_id":"u1"}`)},
		// The event of BenchmarkEndToEnd (internal/consume): team first, then a nested object.
		{"200B_team_first", "json:team_id", []byte(`{"team_id":"team-42","event":"$pageview","distinct_id":"user-4711","properties":{"$current_url":"https://example.com/a/b","$browser":"Firefox","seq":123456}}`)},
		{"3.5KB_team_last", "json:team_id", readEvent(b, "large_team_id_last.json")},
		{"composite", "json:token+distinct_id", event},
		{"nested", "json:properties.team", readEvent(b, "nested_properties.json")},
	} {
		b.Run(c.name, func(b *testing.B) {
			k := mustKeyFrom(b, c.from)
			k.lax = true
			rec := &kgo.Record{Value: c.value}
			var s Scratch
			if _, f := k.teamFailure(rec, &s, DefaultMaxKeyBytes); f.reason != reasonNone {
				b.Fatalf("%s: %s", c.name, f.reason)
			}
			b.SetBytes(int64(len(c.value)))
			b.ReportAllocs()
			for b.Loop() {
				k.team(rec, &s, DefaultMaxKeyBytes)
			}
		})
	}
}

// embeddedAsObject returns the sample event with its "data" string, JSON text, written as
// the object it holds: an event whose bulk is a nested object rather than a string.
func embeddedAsObject(tb testing.TB, event []byte) []byte {
	tb.Helper()
	r := gjson.GetBytes(event, "data")
	if r.Type != gjson.String || !gjson.Valid(r.Str) {
		tb.Fatal("no data string of JSON in the sample event")
	}
	return slices.Concat(event[:r.Index], []byte(r.Str), event[r.Index+len(r.Raw):])
}

// contender is a router and the record it routes in BenchmarkRouteTurns's turns.
type contender struct {
	r  *Router
	in *kgo.Record
}

// turn routes c's record 1<<16 times, as a partition worker does (RouteInto into a record
// it owns, the Scratch flushed every 256 records), and returns the time a record.
func (c contender) turn() float64 {
	const n = 1 << 16
	var s Scratch
	var out kgo.Record
	start := time.Now()
	for i := range n {
		c.r.RouteInto(t0, c.in, &s, &out)
		if i&255 == 255 {
			s.Flush()
		}
	}
	s.Flush()
	return float64(time.Since(start).Nanoseconds()) / n
}

// BenchmarkRouteTurns routes the same cached record through a router without a rules file,
// one with a one-rule file (the same team rule) and one with three rules (benchRules),
// in turns of 1<<16 records each, one after another in every round (b.N rounds), on one
// goroutine as a partition worker routes: the ratios of their medians are the one routing
// path's goals (issue "One way through the gate": one rule ÷ no file ≤ 1.05, three rules
// ÷ one rule ≤ 1.2), measured side by side so that a noisy machine moves all three alike.
func BenchmarkRouteTurns(b *testing.B) {
	cases := routeCases(b)
	find := func(name string) routeCase {
		i := slices.IndexFunc(cases, func(c routeCase) bool { return c.name == name })
		if i < 0 {
			b.Fatalf("no route case %s", name)
		}
		return cases[i]
	}
	names := []string{"json", "json_1rule", "json_3rules"}
	var cs []contender
	for _, name := range names {
		r, in := find(name).setup(b)
		cs = append(cs, contender{r: r, in: in})
	}
	meds := inTurns(b, names, func(i int) float64 { return cs[i].turn() })
	b.ReportMetric(meds[1]/meds[0], "1rule/nofile")
	b.ReportMetric(meds[2]/meds[1], "3rules/1rule")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRouteRuleCost is what each of BenchmarkRouteTurns's three rules adds to the
// team rule alone, measured as it does, in turns: the team rule, the team and event-type
// rules (a header match, the team's key: its hash shared), the team and per-user rules
// (a composite key of team_id and distinct_id: joined, hashed and checked as a long
// key), and all three. It reports each router's median and, in ns a record, what the
// event-type rule (events_ns) and the per-user rule (user_ns) add, and what the three
// add together (both_ns): where the three-rule goal's budget (three rules ≤ 1.2 × one)
// goes, part by part, beside limit's BenchmarkCheck (a check alone).
func BenchmarkRouteRuleCost(b *testing.B) {
	cases := routeCases(b)
	c := cases[slices.IndexFunc(cases, func(c routeCase) bool { return c.name == "json_3rules" })]
	sets := []struct {
		name string
		idx  []int
	}{{"team", []int{0}}, {"team+events", []int{0, 2}}, {"team+user", []int{0, 1}}, {"all3", []int{0, 1, 2}}}
	names := make([]string, len(sets))
	cs := make([]contender, len(sets))
	for i, set := range sets {
		names[i] = set.name
		r, in := c.setupRuleSet(b, set.idx)
		if _, o := r.Route(t0, in, &Scratch{}); o.Route != Accepted {
			b.Fatalf("%s: %s %s", set.name, o.Route, o.Reason)
		}
		cs[i] = contender{r, in}
	}
	meds := inTurns(b, names, func(i int) float64 { return cs[i].turn() })
	b.ReportMetric(meds[1]-meds[0], "events_ns")
	b.ReportMetric(meds[2]-meds[0], "user_ns")
	b.ReportMetric(meds[3]-meds[0], "both_ns")
	b.ReportMetric(meds[3]/meds[0], "all3/team")
	b.ReportMetric(0, "ns/op")
}

// inTurns runs the contenders of a benchmark in turns: each once to warm, then a turn of
// each a round (run(i) times contender i's turn and returns it per record) while the
// benchmark loops, each round starting with the next contender so that none always runs
// first, and so a noisy machine moves them all alike. It reports each one's median as
// NAME_ns/record and returns the medians, in names' order.
func inTurns(b *testing.B, names []string, run func(i int) float64) []float64 {
	for i := range names {
		run(i)
	}
	ns := make([][]float64, len(names))
	round := 0
	for b.Loop() {
		for k := range names {
			i := (round + k) % len(names)
			ns[i] = append(ns[i], run(i))
		}
		round++
	}
	meds := make([]float64, len(names))
	for i, v := range ns {
		slices.Sort(v)
		meds[i] = v[len(v)/2]
		b.ReportMetric(meds[i], names[i]+"_ns/record")
	}
	return meds
}
