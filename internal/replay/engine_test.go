package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

// testConfig is the gate's configuration from vars (GATE_* settings).
func testConfig(t testing.TB, vars map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) string { return vars[k] }, slices.Collect(maps.Keys(vars)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func testRules(t testing.TB, cfg config.Config, yaml string) *rules.Set {
	t.Helper()
	o := cfg.RulesOptions()
	o.EventClock, o.Outcomes = true, true
	set, err := rules.Parse("rules.yaml", []byte(yaml), o)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

var start = time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)

// event is a record of team (and user) at start+at, as capture writes them.
func event(team, user string, at time.Duration) *kgo.Record {
	v := fmt.Sprintf(`{"team_id":%q,"distinct_id":%q,"event":"pageview"}`, team, user)
	return &kgo.Record{Topic: "events", Value: []byte(v), Timestamp: start.Add(at)}
}

// traffic is 10 minutes of three teams: quiet (10 a minute), steady (90 a minute) and
// loud (300 a minute in minutes 3 to 5, one user sending most), a record every few
// milliseconds, and a bad record a minute.
func traffic() []*kgo.Record {
	var recs []*kgo.Record
	for m := range 10 {
		base := time.Duration(m) * time.Minute
		add := func(team string, n int, user func(i int) string) {
			for i := range n {
				recs = append(recs, event(team, user(i), base+time.Duration(i)*time.Minute/time.Duration(n)))
			}
		}
		add("quiet", 10, func(int) string { return "u1" })
		add("steady", 90, func(i int) string { return fmt.Sprint("u", i%9) })
		if m >= 3 && m <= 5 {
			add("loud", 300, func(i int) string {
				if i%3 == 0 {
					return fmt.Sprint("u", i)
				}
				return "bot"
			})
		}
		recs = append(recs, &kgo.Record{Topic: "events", Value: []byte("not json"), Timestamp: start.Add(base + 30*time.Second)})
	}
	for _, r := range recs {
		r.Timestamp = r.Timestamp.Truncate(time.Millisecond) // as Kafka keeps it
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	return recs
}

// rulesAgainstEnv is the candidate of the rules file yaml ("candidate") and the gate of
// cfg's GATE_* limits ("current"), as gate replay -against compares them.
func rulesAgainstEnv(t *testing.T, cfg config.Config, yaml string) (candidate, current *Candidate) {
	t.Helper()
	a, err := NewCandidate("candidate", cfg, testRules(t, cfg, yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCandidate("current", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func run(t *testing.T, cands ...*Candidate) *Report {
	t.Helper()
	e, err := NewEngine(time.Second, cands...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range traffic() {
		e.Route(r)
	}
	return e.Report(10)
}

func TestReplayTeamLimit(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100", "GATE_WINDOW": "1m", "GATE_LIMIT_MODE": "divert"})
	c, err := NewCandidate("env", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, c)
	got := r.Candidates[0]
	// Bounded: a key far from its threshold (quiet, 10 a minute against 100) is not kept;
	// one near it (steady, 90) is, a point for each minute it was near, and not reported.
	if _, ok := c.b.keys[keyID{"", "quiet"}]; ok {
		t.Errorf("quiet, at a tenth of its threshold, is kept")
	}
	if k := c.b.keys[keyID{"", "steady"}]; k == nil || len(k.Series) == 0 || len(k.Series) > 10 || k.affected() != 0 {
		t.Errorf("steady, at 0.9 of its threshold: %+v", k)
	}
	if r.Records != int64(len(traffic())) || got.Total.Records != r.Records {
		t.Fatalf("records %d, fates %d, want %d", r.Records, got.Total.Records, len(traffic()))
	}
	if got.Total.DeadLetter != 10 || got.DeadLetters["not_json"] != 10 {
		t.Errorf("dead letters %d %v, want 10 not_json", got.Total.DeadLetter, got.DeadLetters)
	}
	if len(got.Keys) == 0 || got.Keys[0].Key != "loud" {
		t.Fatalf("keys %+v, want loud first", got.Keys)
	}
	k := got.Keys[0]
	// 300 a minute against 100 a minute, in divert mode (every record counts): all but
	// the first 100 of minutes 3 to 5.
	if k.Limited != 800 || got.Total.Overflow != k.Limited {
		t.Errorf("loud limited %d (overflow %d), want 800", k.Limited, got.Total.Overflow)
	}
	if !k.FirstLimited.Equal(start.Add(3*time.Minute)) || k.LastLimited.Before(start.Add(5*time.Minute)) {
		t.Errorf("loud limited from %s to %s", k.FirstLimited, k.LastLimited)
	}
	if k.PeakRatio < 1 || k.Threshold != 100 {
		t.Errorf("loud peak ratio %.2f at threshold %d", k.PeakRatio, k.Threshold)
	}
	for _, other := range got.Keys[1:] {
		if other.Limited > 0 {
			t.Errorf("key %s limited %d", other.Key, other.Limited)
		}
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100", "GATE_WINDOW": "1m"})
	yaml := `
rules:
- name: user
  key: json:team_id+distinct_id
  limits: [1m:50]
  action: overflow
- name: team
  key: json:team_id
  limits: [1m:150]
  action: tag
- name: team-shadow
  key: json:team_id
  limits: [1m:80]
  shadow: true
`
	var out [][]byte
	for range 2 {
		a, b := rulesAgainstEnv(t, cfg, yaml)
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(run(t, a, b)); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatalf("two replays differ:\n%s\n%s", out[0], out[1])
	}
	var r Report
	if err := json.Unmarshal(out[0], &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out[0])
	cand := r.Candidates[0]
	var names []string
	for _, rf := range cand.Rules {
		names = append(names, rf.Rule)
	}
	if !slices.Equal(names, []string{"user", "team", "team-shadow"}) {
		t.Errorf("rules %q", names)
	}
	if cand.Rules[0].Overflow == 0 || cand.Rules[2].ShadowOver == 0 {
		t.Errorf("rules %+v: want the user rule to overflow the bot and the shadow rule over", cand.Rules)
	}
	if len(r.Diff) == 0 {
		t.Errorf("no diff between the candidates")
	}
	for _, k := range cand.Keys {
		if want, _, _ := strings.Cut(k.Key, ":"); k.Team != want {
			t.Errorf("key %s of rule %s: team %q, want %q", k.Key, k.Rule, k.Team, want)
		}
	}
}

// TestReplayHoldsOnTheWallClock: on the wall clock (GATE_CLOCK's default) replay holds a
// team in overflow as a gate does (GATE_DIVERT_HOLD: a window by default, released
// under 0.8 of its threshold): a team at 1.5 × its threshold for two minutes, then at
// 0.9 × for five, is held through the five; on the event clock, which has no holds, it
// is let through as soon as it is under.
func TestReplayHoldsOnTheWallClock(t *testing.T) {
	recs := steady(nil, "held", 0, 2*time.Minute, 150)
	recs = steady(recs, "held", 2*time.Minute, 7*time.Minute, 90)
	limited := func(clk string) int64 {
		cfg := testConfig(t, map[string]string{"GATE_CLOCK": clk, "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_LIMIT_MODE": "divert"})
		return replayRecords(t, clk, cfg, recs, 1).Candidates[0].Total.Limited
	}
	wall, ev := limited("wall"), limited("event")
	t.Logf("limited: wall clock %d, event clock %d, of %d", wall, ev, len(recs))
	if wall < 650 {
		t.Errorf("wall clock: %d limited; want the 5 minutes at 0.9 × held too (over 650)", wall)
	}
	if ev > 300 {
		t.Errorf("event clock: %d limited; want only the first two minutes' excess and what their window carries over", ev)
	}
}

// steady appends to recs team's records at perMinute a minute, evenly spread, from
// start+from to start+to, their times in milliseconds as Kafka keeps them.
// replayRecords runs recs through one candidate of cfg's limits (no rules file), ticking
// as cfg says, and reports its top keys.
func replayRecords(t testing.TB, name string, cfg config.Config, recs []*kgo.Record, top int) *Report {
	t.Helper()
	return replaySet(t, name, cfg, nil, recs, 0, top)
}

// replaySet is replayRecords of the rule set set (nil: the GATE_* limits) on workers
// workers (0: the engine's default).
func replaySet(t testing.TB, name string, cfg config.Config, set *rules.Set, recs []*kgo.Record, workers, top int) *Report {
	t.Helper()
	c, err := NewCandidate(name, cfg, set)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(cfg.TickInterval, c)
	if err != nil {
		t.Fatal(err)
	}
	if workers > 0 {
		e.Workers(workers)
	}
	for _, r := range recs {
		e.Route(r)
	}
	return e.Report(top)
}

func steady(recs []*kgo.Record, team string, from, to time.Duration, perMinute int) []*kgo.Record {
	for m := from; m < to; m += time.Minute {
		for i := range perMinute {
			r := event(team, "u", m+time.Duration(i)*time.Minute/time.Duration(perMinute))
			r.Timestamp = r.Timestamp.Truncate(time.Millisecond)
			recs = append(recs, r)
		}
	}
	return recs
}

// A record without a timestamp (Kafka's -1, read as 1969-12-31T23:59:59.999Z) first in
// the range: the range is the records' times, not 56 years, and a learned threshold's
// range of 30 minutes is called too short.
func TestReplayRecordWithoutTimestampFirst(t *testing.T) {
	first := event("steady", "u", 0)
	first.Timestamp = time.UnixMilli(-1)
	recs := append([]*kgo.Record{first}, steady(nil, "steady", 0, 30*time.Minute, 60)...)
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "1000", "GATE_THRESHOLD_MODE": "adaptive", "GATE_ADAPTIVE_MIN_HISTORY": "1h"})
	r := replayRecords(t, "c", cfg, recs, 5)
	if !r.From.Equal(start) {
		t.Errorf("report From %s, want the first timestamped record's, %s", r.From, start)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "too short") {
		t.Errorf("notes %q: want the 30-minute range called too short", r.Notes)
	}
}

// A record timestamp of 0 is a producer's unset one, as the gate's event clock takes it
// (route's recordTime): held for the first timed record, as one without a timestamp is.
// Before, it was a time: the replay's clock started in 1970 and ran the whole range's
// windows from there.
func TestReplayRecordWithTimestampZeroFirst(t *testing.T) {
	first := event("steady", "u", 0)
	first.Timestamp = time.UnixMilli(0)
	recs := append([]*kgo.Record{first}, steady(nil, "steady", 0, 30*time.Minute, 60)...)
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "1000"})
	r := replayRecords(t, "c", cfg, recs, 5)
	if !r.From.Equal(start) || r.Records != int64(len(recs)) {
		t.Errorf("report from %s with %d records, want from the first timestamped record's, %s, with %d", r.From, r.Records, start, len(recs))
	}
}

// A range in which not one record has a timestamp is replayed all the same, at the epoch's
// start (it was held for a first timed record that never came, and left out).
func TestReplayOnlyRecordsWithoutTimestamp(t *testing.T) {
	var recs []*kgo.Record
	for range 10 {
		r := event("steady", "u", 0)
		r.Timestamp = time.UnixMilli(-1)
		recs = append(recs, r)
	}
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "1000"})
	r := replayRecords(t, "c", cfg, recs, 5)
	if r.Records != 10 || !r.From.Equal(time.Unix(0, 0).UTC()) {
		t.Errorf("report of 10 records without timestamps: %d records from %s, want 10 from the epoch's start", r.Records, r.From)
	}
}

// TestDiffTeamSpelledAlikeUnderEitherKey: a team whose id holds ':' (or '%') is one team
// in the comparison of a per-user rule set with the GATE_* limits by team: the composite
// key's escaping (acme%3Aeu:bot) is not the team's name.
func TestDiffTeamSpelledAlikeUnderEitherKey(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100", "GATE_WINDOW": "1m", "GATE_LIMIT_MODE": "divert"})
	yaml := `
rules:
- name: user
  key: json:team_id+distinct_id
  limits: [1m:50]
  action: overflow
`
	a, b := rulesAgainstEnv(t, cfg, yaml)
	e, err := NewEngine(time.Second, a, b)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 300 { // one minute: 300 records of one user of team acme:eu
		recs = append(recs, event("acme:eu", "bot", time.Duration(i)*200*time.Millisecond))
	}
	for _, r := range recs {
		e.Route(r)
	}
	r := e.Report(10)
	// Under the per-user rule the bot's 250 past 50 are limited; under the team limit 200
	// past 100: one team, limited 50 more by the candidate.
	want := []TeamDiff{{Team: "acme:eu", A: 250, B: 200, Change: 50}}
	if fmt.Sprint(r.Diff) != fmt.Sprint(want) {
		t.Errorf("diff %+v, want %+v", r.Diff, want)
	}
}

// diffTraffic is four minutes of four teams, a record every few hundred milliseconds:
// calm (30 a minute), over (180 a minute against a limit of 100), burst (quiet, then 150
// records in five seconds at 1m30s) and late (nothing for a minute and a half, then 60 a
// minute), and no record at all from 2m to 3m (a pause), when over comes back.
func diffTraffic() []*kgo.Record {
	var recs []*kgo.Record
	add := func(team string, from, to time.Duration, n int) {
		for i := range n {
			at := from + time.Duration(i)*(to-from)/time.Duration(n)
			if at >= 2*time.Minute && at < 3*time.Minute {
				continue // the pause
			}
			recs = append(recs, event(team, "u1", at))
		}
	}
	add("calm", 0, 4*time.Minute, 120)
	add("over", 0, 4*time.Minute, 720)
	add("burst", 0, 90*time.Second, 15)
	add("burst", 90*time.Second, 95*time.Second, 150)
	add("late", 90*time.Second, 4*time.Minute, 150)
	for _, r := range recs {
		r.Timestamp = r.Timestamp.Truncate(time.Millisecond)
		var v struct {
			Team string `json:"team_id"`
		}
		_ = json.Unmarshal(r.Value, &v)
		r.Key = []byte(v.Team)
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	return recs
}

type recID struct {
	p int32
	o int64
}

// liveGate is one gate with rules as internal/gate builds it (each rule's limiters from
// cfg.RuleLimitConfigs, unchanged; the tick syncing them through a real Redis; the router
// from route.NewRules), on a fake clock that the records' times drive: it ticks at every
// multiple of the tick interval, writes at the boundary and reads a quarter interval
// later, as tick.Ticker.Run does.
type liveGate struct {
	clk    *clock.Fake
	tk     *tick.Ticker
	router *route.Router
	every  time.Duration
	next   time.Time
	readAt time.Time // a read phase pending at this time (zero: none)
	sc     route.Scratch
	out    kgo.Record
}

// TestReplayDecidesAsALiveGate: records read from a topic and replayed with a rules file
// go where a gate with those rules sends them, record by record. The gate is built as
// internal/gate builds one (unchanged limiter configs, tick.Ticker on a real Redis,
// route.NewRules), on a fake clock the record times drive, its tick split as Run's.
// What docs/rules.md says replay does not replay is kept out of the traffic: no live
// overrides, no lag (the gate routes each record at its record time), one user per team
// (a per-user rule's sketch of quiet keys is not replayed), one gate (a fleet's other
// gates are what its Redis reads add). Any difference left is replay's.
func TestReplayDecidesAsALiveGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		yaml string
	}{
		{"overflow", map[string]string{"GATE_LIMIT_MODE": "divert", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100"}, `
rules:
- name: team
  key: json:team_id
  limits: [1m:100]
  action: overflow
`},
		{"no hold, two limits", map[string]string{"GATE_LIMIT_MODE": "divert", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_DIVERT_HOLD": "0"}, `
rules:
- name: team
  key: json:team_id
  limits: [10s:25, 1m:100]
  action: overflow
`},
		{"cap", map[string]string{"GATE_LIMIT_MODE": "cap", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100"}, `
rules:
- name: team
  key: json:team_id
  limits: [1m:100]
  action: overflow
`},
		{"user and team", map[string]string{"GATE_LIMIT_MODE": "divert", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100"}, `
rules:
- name: user
  key: json:team_id+distinct_id
  limits: [1m:60]
  action: overflow
- name: team
  key: json:team_id
  limits: [30s:70]
  action: overflow
`},
		{"event clock", map[string]string{"GATE_LIMIT_MODE": "divert", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_CLOCK": "event", "GATE_DIVERT_HOLD": "0"}, `
rules:
- name: team
  key: json:team_id
  limits: [1m:100]
  action: overflow
`},
	} {
		t.Run(tc.name, func(t *testing.T) { replayVersusLive(t, tc.vars, tc.yaml) })
	}
}

func replayVersusLive(t *testing.T, vars map[string]string, yaml string) {
	srv := redistest.Start(t)
	c := faulttest.NewCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.ProduceSync(t.Context(), diffTraffic()...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t, vars)
	set := testRules(t, cfg, yaml)

	// (a) gate replay.
	cand, err := NewCandidate("candidate", cfg, set)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(cfg.TickInterval, cand)
	if err != nil {
		t.Fatal(err)
	}
	type routed struct {
		id    recID
		at    time.Time
		rec   *kgo.Record
		topic string
	}
	var got []routed
	if _, err := Read(t.Context(), Range{Topic: "events"}, func(rec *kgo.Record, at time.Time) {
		e.RouteAt(rec, at)
		got = append(got, routed{recID{rec.Partition, rec.Offset}, at, rec, cand.out.Topic})
	}, nil, kgo.SeedBrokers(c.ListenAddrs()...)); err != nil {
		t.Fatal(err)
	}
	rep := e.Report(10)

	// (b) a live gate, fed the same records in the same order at the same times.
	first := got[0].at
	clk := clock.NewFake(first.Add(-time.Hour).Truncate(time.Second))
	var tlims []tick.Limit
	var rrs []route.Rule
	for _, r := range set.Rules {
		var lims []*limit.Limiter
		for i, lc := range cfg.RuleLimitConfigs(r) {
			l, err := limit.New(lc, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, l)
			tlims = append(tlims, tick.Limit{Lim: l, KeyPrefix: cfg.RuleKeyPrefix(r, i)})
		}
		rrs = append(rrs, config.RouteRule(r, lims))
	}
	rc, err := tick.Dial([]string{srv.URL()}, tick.RedisOptions{ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc[0].Close() })
	scfg := cfg.SyncConfig()
	scfg.Writer = "live"
	tk, err := tick.NewMulti(tlims, []redis.UniversalClient{rc[0]}, scfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	router, err := route.NewRules(cfg.RouteConfig(), rrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &liveGate{clk: clk, tk: tk, router: router, every: cfg.TickInterval}
	g.next = time.Unix(0, first.UnixNano()-first.UnixNano()%int64(g.every)+int64(g.every)).UTC() // tick.nextTick
	ctx := context.Background()
	advance := func(to time.Time) {
		for {
			// The next event of the tick: a pending read phase, or the next write phase.
			if !g.readAt.IsZero() && !to.Before(g.readAt) {
				clk.Set(g.readAt)
				g.tk.ReadPhase(ctx)
				g.readAt = time.Time{}
				continue
			}
			if !to.Before(g.next) && g.readAt.IsZero() {
				clk.Set(g.next)
				g.tk.WritePhase(ctx)
				g.readAt = g.next.Add(g.every / 4) // tick.Ticker.Run's read delay
				g.next = g.next.Add(g.every)
				continue
			}
			break
		}
		if to.After(clk.Now()) {
			clk.Set(to)
		}
	}

	type counts struct{ accepted, limited int }
	replayTeams, liveTeams := map[string]*counts{}, map[string]*counts{}
	count := func(m map[string]*counts, rec *kgo.Record, topic string) {
		var v struct {
			Team string `json:"team_id"`
		}
		_ = json.Unmarshal(rec.Value, &v)
		if m[v.Team] == nil {
			m[v.Team] = &counts{}
		}
		if topic != cfg.AcceptedTopic {
			m[v.Team].limited++
		} else {
			m[v.Team].accepted++
		}
	}
	var diffs []string
	for _, r := range got {
		advance(r.at)
		g.router.RouteInto(clk.Now(), r.rec, &g.sc, &g.out)
		count(replayTeams, r.rec, r.topic)
		count(liveTeams, r.rec, g.out.Topic)
		if g.out.Topic != r.topic {
			diffs = append(diffs, fmt.Sprintf("%s p%d@%d at %s: replay %s, live %s", r.rec.Key, r.id.p, r.id.o, r.at.Sub(start), r.topic, g.out.Topic))
		}
	}
	for team, l := range liveTeams {
		t.Logf("%s: live %+v, replay %+v", team, *l, *replayTeams[team])
	}
	if len(diffs) > 0 {
		t.Errorf("%d records routed differently:\n%s", len(diffs), joinFirst(diffs, 30))
	}
	if liveTeams["over"].limited == 0 {
		t.Errorf("the traffic does not test what it should: %+v %+v", *liveTeams["over"], *liveTeams["calm"])
	}
	var limited int64
	for _, n := range liveTeams {
		limited += int64(n.limited)
	}
	if got := rep.Candidates[0].Total.Limited; got != limited {
		t.Errorf("replay's report: %d records limited, the live gate limited %d", got, limited)
	}
}

func joinFirst(s []string, n int) string {
	out := ""
	for i, l := range s {
		if i == n {
			out += fmt.Sprintf("... and %d more\n", len(s)-n)
			break
		}
		out += l + "\n"
	}
	return out
}

// TestReplaySaysLongWindowsStartEmpty: counts start at the range's start, so a limit of a
// long window judges the range's first window or two on less than a fleet running before
// it had: a team steady at 1.5 × its limit of an hour, which a running gate limits from
// the first record, is limited only from 40 minutes in (6,000 records, a sixth of four
// hours, reported accepted). The report said nothing of it; it now says so, and how far
// before the part that matters to start. A limit of a minute gets no such note.
func TestReplaySaysLongWindowsStartEmpty(t *testing.T) {
	recs := steady(nil, "hot", 0, 4*time.Hour, 150) // 9,000 an hour
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1h", "GATE_THRESHOLD": "6000", "GATE_LIMIT_MODE": "divert"})
	r := replayRecords(t, "hour", cfg, recs, 5)
	if k := r.Candidates[0].Keys; len(k) != 1 || !k[0].FirstLimited.Equal(start.Add(40*time.Minute)) {
		t.Fatalf("keys %+v: want hot limited from 40 minutes in", k)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "longest window, 1h,") || !strings.Contains(r.Notes[0], "start the range 2h before the part that matters") {
		t.Errorf("notes %q: want the range's first hour or two said to be judged on less, and to start it 2h before", r.Notes)
	}
	cfg = testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "150", "GATE_LIMIT_MODE": "divert"})
	if r := replayRecords(t, "minute", cfg, recs, 5); len(r.Notes) != 0 {
		t.Errorf("notes %q of a limit of a minute: want none", r.Notes)
	}
}

// A record a rule dead-letters (its key or match field unreadable: the rule its
// gate-error-detail names) is in that rule's DEAD LETTER, on one goroutine and on
// several: the column read 0 for every rule, whatever they dead-lettered, as a dead
// letter's outcome row names no rule. A value that is not JSON is no rule's (its detail
// names none): in the total only.
func TestRuleDeadLettersCountedAtTheRule(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	yaml := `
rules:
- {name: team, key: json:team_id, limits: ["1m:1000"]}
- {name: plan, key: json:team_id, match: [{field: json:plan, in: [free]}], limits: ["1m:1000"]}
- {name: session, key: json:team_id+session_id, limits: ["1m:1000"]}
`
	var recs []*kgo.Record
	add := func(n int, v string) {
		for range n {
			recs = append(recs, &kgo.Record{Topic: "events", Value: []byte(v), Timestamp: start.Add(time.Duration(len(recs)) * time.Second)})
		}
	}
	add(5, `{"team_id":"a","plan":"free","session_id":"s"}`)            // accepted
	add(3, `{"plan":"free","session_id":"s"}`)                          // team: field_missing
	add(2, `{"team_id":"a","plan":"free","plan":"x","session_id":"s"}`) // plan: ambiguous_team
	add(4, `{"team_id":"a","plan":"free"}`)                             // session: field_missing
	add(1, `not json`)                                                  // no rule's
	for _, workers := range []int{1, 3} {
		got := replaySet(t, "c", cfg, testRules(t, cfg, yaml), recs, workers, 5).Candidates[0]
		want := map[string]int64{"team": 3, "plan": 2, "session": 4}
		if len(got.Rules) != len(want) {
			t.Errorf("%d workers: %d rules reported, want %d: %+v", workers, len(got.Rules), len(want), got.Rules)
		}
		for _, rf := range got.Rules {
			if _, ok := want[rf.Rule]; !ok {
				t.Errorf("%d workers: rule %q reported, not in the file", workers, rf.Rule)
			}
			if rf.DeadLetter != want[rf.Rule] || rf.Records != want[rf.Rule] {
				t.Errorf("%d workers: rule %s: %d dead letters of %d records, want %d of %d", workers, rf.Rule, rf.DeadLetter, rf.Records, want[rf.Rule], want[rf.Rule])
			}
		}
		if got.Total.DeadLetter != 10 || got.Total.Accepted != 5 {
			t.Errorf("%d workers: total %+v, want 10 dead letters and 5 accepted", workers, got.Total)
		}
	}
}

// -json's lists are lists whatever they hold: "keys" (and "rules", for the GATE_* limits
// over an empty range) were null when empty, so that a script iterating them (jq's
// .candidates[].keys[]) failed on a quiet range, where nothing was limited, or an empty one.
func TestReportListsAreNeverNull(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100000", "GATE_WINDOW": "1m"})
	for name, recs := range map[string][]*kgo.Record{"empty": nil, "quiet": steady(nil, "quiet", 0, 5*time.Minute, 10)} {
		b, err := json.Marshal(replayRecords(t, "c", cfg, recs, 5).Candidates) // the partitions are gate replay's to set
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("null")) {
			t.Errorf("%s range: the report has a null list: %s", name, b)
		}
	}
}

// The rules table has a row for every rule whatever the range holds: a rules file's
// rules each with zeros over an empty range, and so the GATE_* limits' one row (rule
// ""), which an empty range left out, the table then only a header.
func TestEmptyRangeListsTheGateLimitsRow(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100000", "GATE_WINDOW": "1m"})
	for name, recs := range map[string][]*kgo.Record{"empty": nil, "quiet": steady(nil, "quiet", 0, 2*time.Minute, 10)} {
		rep := replayRecords(t, "c", cfg, recs, 5)
		rules := rep.Candidates[0].Rules
		if len(rules) != 1 || rules[0].Rule != "" || rules[0].Records != int64(len(recs)) {
			t.Errorf("%s range: rules %+v, want the GATE_* limits' one row of %d records", name, rules, len(recs))
		}
		var text bytes.Buffer
		if err := WriteText(&text, rep); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "(GATE_* limits)") {
			t.Errorf("%s range: the text's rules table has no row for the GATE_* limits:\n%s", name, text.String())
		}
	}
}

// A shadow rule's keys are reported with the rule's own level and threshold, marked
// (shadow) as gate team marks its rows: the record's decision, the only one the report
// followed, is another rule's, so a key over a shadow rule had threshold and peak 0
// ("-"), and a shadow rule's rows read as an enforced rule's. On any number of workers.
func TestShadowRuleKeyHasItsLevel(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m"})
	set := testRules(t, cfg, teamAndShadowBurst)
	for _, workers := range []int{1, 2} {
		rep := replaySet(t, "c", cfg, set, steady(nil, "steady", 0, 5*time.Minute, 90), workers, 5)
		keys := rep.Candidates[0].Keys
		if len(keys) != 1 || keys[0].Rule != "burst" || keys[0].ShadowOver == 0 {
			t.Fatalf("%d workers: keys %+v, want the steady team over burst", workers, keys)
		}
		k := keys[0]
		// 90 a minute against 50: over from its 51st record, its level up to 90.
		if k.Threshold != 50 || k.PeakRatio < 1 || k.PeakRatio > 2 {
			t.Errorf("%d workers: the shadow rule's key has threshold %d and peak ratio %g; want 50 and its level over it", workers, k.Threshold, k.PeakRatio)
		}
		for _, p := range k.Series {
			if p.Affected > 0 && (p.Threshold != 50 || p.Level < 50) {
				t.Errorf("%d workers: minute %s, %d records over burst, has level %g of threshold %d", workers, p.Minute.Format(time.TimeOnly), p.Affected, p.Level, p.Threshold)
			}
		}
		var text bytes.Buffer
		if err := WriteText(&text, rep); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^burst \(shadow\) +steady .* 1\.[0-9]+ × 50$`).MatchString(text.String()) ||
			!regexp.MustCompile(`(?m)^ *burst \(shadow\) `).MatchString(text.String()) {
			t.Errorf("%d workers: the text does not mark burst shadow in both tables with the key's peak of 50:\n%s", workers, text.String())
		}
		b, err := json.Marshal(rep.Candidates[0])
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte(`"rule":"burst","shadow":true`)); n != 2 {
			t.Errorf("%d workers: -json marks burst shadow %d times, want 2 (its rule and its key): %s", workers, n, b)
		}
	}
}

// A record two rules tag has one outcome row, the first's (or, sent away by a third, that
// rule's): each rule's TAGGED counts every record it tagged, the second's as well, which
// showed 0 though its gate-tag header was on every one of them. The total counts each
// record once.
func TestEveryTaggingRuleCountsItsTags(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	yaml := `
rules:
- {name: tag-a, key: json:team_id, limits: ["1m:1"], action: tag}
- {name: tag-b, key: json:team_id, limits: ["1m:1"], action: tag}
- {name: cap, key: json:team_id, limits: ["1m:4"], action: overflow}
`
	var recs []*kgo.Record
	for i := range 8 {
		recs = append(recs, &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"a"}`), Timestamp: start.Add(time.Duration(i) * time.Second)})
	}
	for _, workers := range []int{1, 3} {
		got := replaySet(t, "c", cfg, testRules(t, cfg, yaml), recs, workers, 5).Candidates[0]
		by := map[string]Totals{}
		for _, rf := range got.Rules {
			by[rf.Rule] = rf.Totals
		}
		a, b, cp := by["tag-a"], by["tag-b"], by["cap"]
		if a.Tagged == 0 || cp.Overflow == 0 || b.Tagged != a.Tagged || a.Tagged <= got.Total.Tagged {
			t.Errorf("%d workers: tag-a %+v, tag-b %+v, cap %+v, total %+v: want both tagging rules to count every record they tagged, some of them overflowed by cap",
				workers, a, b, cp, got.Total)
		}
		if b.Records != 0 || got.Total.Records != 8 {
			t.Errorf("%d workers: tag-b decided %d records, the total %d: want 0 (its tags are beside other rules' rows) and 8", workers, b.Records, got.Total.Records)
		}
	}
}

// A rules file read as a gate on the wall clock reads it (track: above_floor, max_keys:
// what it keeps of its quiet keys in a sketch) replays on the event clock, as gate
// replay -clock event does, and decides as the file without them: replay counts every
// key exactly on either clock.
func TestReplayOnTheEventClockIgnoresTheSketch(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	const rule = "rules:\n  - name: team-user\n    key: json:team_id+distinct_id\n    limits: [1m:50]\n"
	wall := cfg.RulesOptions()
	wall.EventClock, wall.Outcomes = false, true
	tracked, err := rules.Parse("rules.yaml", []byte(rule+"    track: above_floor\n    max_keys: 5\n"), wall)
	if err != nil {
		t.Fatal(err)
	}
	if r := tracked.Rules[0]; !r.AboveFloor || r.MaxKeys != 5 {
		t.Fatalf("read on the wall clock: %+v, want track above_floor and max_keys 5", r)
	}
	a, err := NewCandidate("tracked", cfg, tracked)
	if err != nil {
		t.Fatalf("a rule with track: above_floor on the event clock: %v", err)
	}
	b, err := NewCandidate("plain", cfg, testRules(t, cfg, rule))
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, a, b)
	got, want := r.Candidates[0], r.Candidates[1]
	if got.Total != want.Total || got.Total.Overflow == 0 {
		t.Errorf("tracked %+v, plain %+v: want the same fates, some over the limit", got.Total, want.Total)
	}
}

// With two candidates -json's "diff" is a list whatever it holds: two sets limiting
// alike left it out (omitempty), so a script reading .diff[] failed on the answer it
// wanted most, "nothing changes", where the docs say the lists are never null (a
// reviewer's `-rules r1.yaml -against r1.yaml | jq -c .diff` printed null). With one
// candidate there is no diff to give, and none is written.
func TestReportDiffIsAListWithTwoCandidates(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_THRESHOLD": "100000", "GATE_WINDOW": "1m"})
	a, b := rulesAgainstEnv(t, cfg, "rules:\n- name: team\n  key: json:team_id\n  limits: [1m:100000]\n  action: overflow\n")
	for _, cands := range [][]*Candidate{{a, b}, {a}} {
		e, err := NewEngine(time.Second, cands...)
		if err != nil {
			t.Fatal(err)
		}
		e.Route(event("quiet", "u", 0))
		js, err := json.Marshal(e.Report(5))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := bytes.Contains(js, []byte(`"diff":[]`)), len(cands) == 2; got != want || bytes.Contains(js, []byte(`"diff":null`)) {
			t.Errorf("%d candidates, nothing limited: %s; want \"diff\":[] with two, no diff with one", len(cands), js)
		}
	}
}

// A tick interval that is no duration to tick by is refused, written as an operator
// writes it (-1m, not -1m0s).
func TestNewEngineRefusesTick(t *testing.T) {
	if _, err := NewEngine(-time.Minute, nil); err == nil || err.Error() != "replay: tick interval -1m (want a positive duration)" {
		t.Errorf("NewEngine(-1m): %v", err)
	}
}

// A team forced to overflow (GATE_FORCE_OVERFLOW, a rule's force list) far under its
// threshold is reported with its level and threshold, as the gate decided it: the key
// was followed only from half its threshold, so a forced team sending a tenth of it had
// threshold and peak 0, its text "-", and its chart on the page said only a shadow rule
// had been over it, the records' decisions another rule's, with no rule but the GATE_*
// limits.
func TestForcedKeyHasItsLevel(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "100", "GATE_FORCE_OVERFLOW": "forced"})
	set := testRules(t, cfg, "rules:\n- name: tagged\n  key: json:team_id\n  limits: [1m:100]\n  action: tag\n  force: [forced]\n")
	for name, s := range map[string]*rules.Set{"GATE_* limits": nil, "a tag rule": set} {
		rep := replaySet(t, name, cfg, s, steady(nil, "forced", 0, 3*time.Minute, 10), 1, 5)
		keys := rep.Candidates[0].Keys
		if len(keys) != 1 || keys[0].Limited+keys[0].Tagged != 30 {
			t.Fatalf("%s: keys %+v, want the forced team's 30 records", name, keys)
		}
		k := keys[0]
		if k.Threshold != 100 || k.PeakRatio <= 0 || k.PeakRatio >= trackFrom {
			t.Errorf("%s: the forced team's threshold %d, peak ratio %g; want 100 and its level's share of it", name, k.Threshold, k.PeakRatio)
		}
		for _, p := range k.Series {
			if p.Threshold != 100 || p.Level <= 0 {
				t.Errorf("%s: the forced team's minute %s has level %g of threshold %d", name, p.Minute.Format(time.TimeOnly), p.Level, p.Threshold)
			}
		}
		var page bytes.Buffer
		if err := WriteHTML(&page, rep); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(page.Bytes(), []byte("Only a shadow rule was over it")) {
			t.Errorf("%s: the page says only a shadow rule was over the forced team", name)
		}
	}
}

// teamAndShadowBurst is a team rule of 1,000 a minute and, keyed alike, a shadow rule
// of 50: a key over the second is judged by the first alone.
const teamAndShadowBurst = `
rules:
- name: team
  key: json:team_id
  limits: [1m:1000]
  action: overflow
- name: burst
  key: json:team_id
  limits: [1m:50]
  shadow: true
`
