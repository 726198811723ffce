package replay

import (
	"cmp"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/route"
)

// Report is what a replay found, deterministic for a given range and candidates: two
// replays of the same records write it byte for byte alike.
type Report struct {
	// Input is what was read: the topic, each partition's offsets, and the range of
	// record times (From is the first record's, To the last's; left out of the JSON when
	// no record was read, not year one).
	Topic      string           `json:"topic"`
	Partitions []PartitionRange `json:"partitions"`
	From       time.Time        `json:"from,omitzero"`
	To         time.Time        `json:"to,omitzero"`
	Records    int64            `json:"records"`
	Bytes      int64            `json:"bytes"`
	// Partial says the replay was stopped before the end of its range.
	Partial    bool              `json:"partial"`
	Candidates []CandidateReport `json:"candidates"`
	// Diff is, with two candidates, every team whose records limited differ, the most
	// changed first: what the first candidate does to it against the second. Empty, not
	// nil, with two candidates that limit alike (-json writes [], a list as every other);
	// nil, and left out, with one.
	Diff []TeamDiff `json:"diff,omitzero"`
	// Notes say what the figures cannot (too little history for a learned threshold).
	Notes []string `json:"notes"`
}

// PartitionRange is the offsets read from one partition: [Start, End).
type PartitionRange struct {
	Partition int32 `json:"partition"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
}

// CandidateReport is one candidate's part of the report.
type CandidateReport struct {
	Name string `json:"name"`
	// Total is every record's fate; Rules what each rule did (the records it acted on,
	// and a shadow rule's would-be-over).
	Total Totals     `json:"total"`
	Rules []RuleFate `json:"rules"`
	// DeadLetters counts the dead-lettered records by the gate's reason.
	DeadLetters map[string]int64 `json:"dead_letters"`
	// KeysAffected is how many keys any rule limited, tagged or found over in shadow;
	// Keys are the most affected of them, most first.
	KeysAffected int         `json:"keys_affected"`
	Keys         []KeyReport `json:"keys"`
	// Folded counts the records of keys past the row budget of a minute
	// (MaxRowsPerMinute): in Total and Rules, in no key.
	Folded int64 `json:"folded,omitempty"`
}

// Totals counts records by fate: where the gate would have sent them. Limited is
// Overflow + Topic + Dropped.
type Totals struct {
	Records    int64 `json:"records"`
	Accepted   int64 `json:"accepted"` // Tagged among them, but for a rule (RuleFate: its tags beside)
	Tagged     int64 `json:"tagged"`
	Limited    int64 `json:"limited"`
	Overflow   int64 `json:"overflow"`
	Topic      int64 `json:"topic"`
	Dropped    int64 `json:"dropped"`
	DeadLetter int64 `json:"dead_letter"`
	ShadowOver int64 `json:"shadow_over"`
}

func (t *Totals) add(r *outcome.Row) {
	n := r.Records
	switch o := r.Outcome; {
	case o == outcome.ShadowOver.String():
		t.ShadowOver += n
		return // the record's own fate is in another row
	case o == outcome.Accepted.String():
		t.Accepted += n
	case o == outcome.Tagged.String():
		t.Accepted += n
		t.Tagged += n
	case o == outcome.DeadLetter.String():
		t.DeadLetter += n
	case outcome.Limited(o):
		t.Limited += n
		switch o {
		case outcome.Overflow.String():
			t.Overflow += n
		case outcome.Dropped.String():
			t.Dropped += n
		default: // topic:NAME
			t.Topic += n
		}
	}
	t.Records += n
}

// RuleFate is what one rule did: the records whose fate it decided (dead-lettered
// included: its key or match field unreadable), and as a shadow rule the records it was
// over. Tagged counts every record it tagged, those whose fate another rule decided (a
// rule before it that tagged them too, one after that sent them away) beside its
// Records, as ShadowOver is. Rule is empty for the gate's limits without a rules file.
type RuleFate struct {
	Rule string `json:"rule"`
	// Shadow says the rule is a shadow rule: it changes no record's fate, its figures are
	// what it would have done.
	Shadow bool `json:"shadow"`
	Totals
}

// KeyReport is one key as a rule saw it: the records limited (or tagged, or over a
// shadow rule) and when, and how far over its threshold it went. Its Tagged counts the
// records whose fate was the rule's tag, unlike its RuleFate's: a record another rule
// tagged first, or sent away after, is counted at that rule's key (an outcome row names
// one rule and key), so a rule's keys' Tagged may sum to less than its RuleFate's.
type KeyReport struct {
	Rule string `json:"rule"`
	// Shadow says Rule is a shadow rule: the key's level and threshold are the rule's
	// own, what it would have judged, not where the records went.
	Shadow     bool   `json:"shadow"`
	Key        string `json:"key"`
	Team       string `json:"team"`
	Limited    int64  `json:"limited"`
	Tagged     int64  `json:"tagged"`
	ShadowOver int64  `json:"shadow_over"`
	// FirstLimited and LastLimited are the first and last minutes with any of them.
	FirstLimited time.Time `json:"first_limited"`
	LastLimited  time.Time `json:"last_limited"`
	// Threshold is the key's threshold per window at its peak; PeakRatio its highest
	// level (the sliding-window count the gate compares) ÷ its threshold at the time:
	// under a shadow rule, the rule's own, seen at the records it was over.
	Threshold int64   `json:"threshold"`
	PeakRatio float64 `json:"peak_ratio"`
	// Series is the key's minutes within half of its threshold or more, or with records
	// limited (a key never that close is not worth a line).
	Series []Point `json:"series"`
}

func (k *KeyReport) affected() int64 { return k.Limited + k.Tagged + k.ShadowOver }

// Point is one minute of a key: its highest level and its threshold then, and its
// records limited, tagged or over in shadow. Level and Threshold are 0 in a minute no
// record was judged on the key near its threshold (or forced), nor found over it by a
// shadow rule.
type Point struct {
	Minute    time.Time `json:"minute"`
	Level     float64   `json:"level"`
	Threshold int64     `json:"threshold"`
	Affected  int64     `json:"affected"`
}

// TeamDiff is one team under two candidates: its records limited under each (tagged
// and shadow over aside). Change = A − B: negative, the first candidate limits it less.
type TeamDiff struct {
	Team   string `json:"team"`
	A      int64  `json:"a"`
	B      int64  `json:"b"`
	Change int64  `json:"change"`
}

// trackFrom is the pressure (level ÷ threshold) from which a key's minutes are kept.
const trackFrom = 0.5

type keyID struct{ rule, key string }

// builder gathers a candidate's report as records are routed (observe) and their
// minutes sealed (rows).
type builder struct {
	total   Totals
	rules   map[string]*Totals
	order   []string // rules in the order first seen
	dead    map[string]int64
	keys    map[keyID]*KeyReport
	teams   map[string]int64 // records limited, by team
	folded  int64
	ruleSet []string
	shadows []string // the set's shadow rules
	// deadAt counts the records each rule dead-lettered (route.Outcome.DeadRule): their
	// outcome rows name no rule.
	deadAt map[string]int64
	// taggedBeside counts the records each rule tagged whose outcome row is another
	// rule's (route.Outcome.TaggedBy): a record two rules tag has one row, the first's.
	taggedBeside map[string]int64
}

func newBuilder() *builder {
	return &builder{rules: map[string]*Totals{}, dead: map[string]int64{}, keys: map[keyID]*KeyReport{}, teams: map[string]int64{}, deadAt: map[string]int64{},
		taggedBeside: map[string]int64{}}
}

// observe follows the decision a record got: the level of the key it was decided on.
// It allocates only for a key newly within half of its threshold, or forced.
func (b *builder) observe(now time.Time, o *route.Outcome) {
	if o.DeadRule != "" {
		b.deadAt[o.DeadRule]++
	}
	for t := o.TaggedBy; t != 0; t &= t - 1 {
		// Each rule that tagged the record but the one its row names (the rule whose
		// action it got, when that was tag).
		if i := bits.TrailingZeros64(t); i < len(b.ruleSet) && (o.Reason != route.ReasonTagged || b.ruleSet[i] != o.Rule) {
			b.taggedBeside[b.ruleSet[i]]++
		}
	}
	d := &o.Decision
	if d.Threshold <= 0 || o.Team == "" {
		return
	}
	// A key a rule acted on, or forced, is followed at any level: a forced one far under
	// its threshold went unreported, with the 0 threshold of a key only a shadow rule was
	// over.
	near := d.Level >= trackFrom*float64(d.Threshold) || o.Reason == route.ReasonForced || o.Rule != ""
	k := b.keys[keyID{o.KeyRule, o.Team}]
	if k == nil {
		if !near {
			return
		}
		k = b.key(o.KeyRule, o.Team)
	}
	m := now.Truncate(time.Minute)
	if !near && (len(k.Series) == 0 || !k.Series[len(k.Series)-1].Minute.Equal(m)) {
		return // a minute far from its threshold: no point (the chart's line breaks)
	}
	p := k.point(m)
	if d.Level > p.Level || p.Threshold == 0 {
		p.Level, p.Threshold = d.Level, d.Threshold
	}
	if r := d.Level / float64(d.Threshold); r > k.PeakRatio {
		k.PeakRatio, k.Threshold = r, d.Threshold
	}
}

// shadowOver follows the level of shadow rule rule at key, the key of its outcome row,
// when it was over a record: the record's decision, which observe follows, is another
// rule's, and the row keeps no level.
func (b *builder) shadowOver(now time.Time, rule, key string, d limit.Decision) {
	if d.Threshold <= 0 {
		return
	}
	k := b.key(rule, key)
	p := k.point(now.Truncate(time.Minute))
	if d.Level > p.Level || p.Threshold == 0 {
		p.Level, p.Threshold = d.Level, d.Threshold
	}
	if r := d.Level / float64(d.Threshold); r > k.PeakRatio {
		k.PeakRatio, k.Threshold = r, d.Threshold
	}
}

// key returns the report of (rule, key), made (its strings copied) if new. Its Team is
// set by the first row that names the key: only keys with rows are reported.
func (b *builder) key(rule, key string) *KeyReport {
	if k := b.keys[keyID{rule, key}]; k != nil {
		return k
	}
	id := keyID{strings.Clone(rule), strings.Clone(key)}
	k := &KeyReport{Rule: id.rule, Key: id.key}
	b.keys[id] = k
	return k
}

// point returns k's point of minute m, appended if it is newer than its last.
func (k *KeyReport) point(m time.Time) *Point {
	for i := len(k.Series) - 1; i >= 0 && !k.Series[i].Minute.Before(m); i-- {
		if k.Series[i].Minute.Equal(m) {
			return &k.Series[i]
		}
	}
	k.Series = append(k.Series, Point{Minute: m})
	if n := len(k.Series); n > 1 && k.Series[n-2].Minute.After(m) {
		slices.SortFunc(k.Series, func(a, b Point) int { return a.Minute.Compare(b.Minute) })
		for i := range k.Series {
			if k.Series[i].Minute.Equal(m) {
				return &k.Series[i]
			}
		}
	}
	return &k.Series[len(k.Series)-1]
}

// rows adds sealed outcome rows.
func (b *builder) rows(rows []outcome.Row) {
	for i := range rows {
		r := &rows[i]
		b.total.add(r)
		t := b.rules[r.Rule]
		if t == nil {
			t = new(Totals)
			b.rules[r.Rule] = t
			b.order = append(b.order, r.Rule)
		}
		t.add(r)
		if r.Outcome == outcome.DeadLetter.String() {
			b.dead[r.Reason] += r.Records
		}
		if r.Folded {
			b.folded += r.Records
			continue
		}
		var d Totals // this row alone
		d.add(r)
		lim, tag, shadow := d.Limited, d.Tagged, d.ShadowOver
		if lim+tag+shadow == 0 || r.Key == "" {
			continue
		}
		if lim > 0 {
			b.teams[outcome.TeamOf(r.Team)] += lim
		}
		k := b.key(r.Rule, r.Key)
		if k.Team == "" {
			k.Team = r.Team // the row's own copy: every key reported has a row
		}
		k.Limited += lim
		k.Tagged += tag
		k.ShadowOver += shadow
		p := k.point(r.IntervalStart)
		p.Affected += lim + tag + shadow
		if k.FirstLimited.IsZero() || r.IntervalStart.Before(k.FirstLimited) {
			k.FirstLimited = r.IntervalStart
		}
		if r.IntervalStart.After(k.LastLimited) {
			k.LastLimited = r.IntervalStart
		}
	}
}

// merge adds o, what another worker gathered of the same candidate (parallel.go). The
// workers' keys are apart (each key's records go to one worker), so o's are taken as
// they are.
func (b *builder) merge(o *builder) {
	b.total.plus(&o.total)
	for _, r := range o.order {
		t := b.rules[r]
		if t == nil {
			t = new(Totals)
			b.rules[r] = t
			b.order = append(b.order, r)
		}
		t.plus(o.rules[r])
	}
	for r, n := range o.dead {
		b.dead[r] += n
	}
	for t, n := range o.teams {
		b.teams[t] += n
	}
	for r, n := range o.deadAt {
		b.deadAt[r] += n
	}
	for r, n := range o.taggedBeside {
		b.taggedBeside[r] += n
	}
	b.folded += o.folded
	maps.Copy(b.keys, o.keys)
}

// plus adds o's counts to t.
func (t *Totals) plus(o *Totals) {
	t.Records += o.Records
	t.Accepted += o.Accepted
	t.Tagged += o.Tagged
	t.Limited += o.Limited
	t.Overflow += o.Overflow
	t.Topic += o.Topic
	t.Dropped += o.Dropped
	t.DeadLetter += o.DeadLetter
	t.ShadowOver += o.ShadowOver
}

// report is the candidate's report with its top most affected keys.
func (b *builder) report(name string, top int, limiterKey func(rule, team, key string) string) CandidateReport {
	b.levelsOfRows(limiterKey)
	// Empty lists, not null ones, in -json: a script iterating them (jq's .keys[]) fails
	// on a null, as on a quiet range where nothing was limited.
	c := CandidateReport{Name: name, Total: b.total, Folded: b.folded, Rules: []RuleFate{}, Keys: []KeyReport{}, DeadLetters: map[string]int64{}}
	maps.Copy(c.DeadLetters, b.dead)
	names := slices.Clone(b.order)
	for _, r := range b.ruleSet { // every rule of the set, in its order, even one that did nothing
		if !slices.Contains(names, r) {
			names = append(names, r)
		}
	}
	if len(b.ruleSet) == 0 && !slices.Contains(names, "") {
		// The GATE_* limits are one rule, "": its row with zeros over an empty range, as a
		// rules file's rules have theirs, not a table of its header alone.
		names = append(names, "")
	}
	slices.SortStableFunc(names, func(x, y string) int {
		return cmp.Compare(rank(b.ruleSet, x), rank(b.ruleSet, y))
	})
	for _, r := range names {
		if r == "" && len(b.ruleSet) > 0 {
			continue // no rule: accepted and dead-lettered records, in Total
		}
		var t Totals
		if p := b.rules[r]; p != nil {
			t = *p
		}
		// The records the rule dead-lettered: their fate was its doing.
		t.DeadLetter += b.deadAt[r]
		t.Records += b.deadAt[r]
		// The records it tagged whose fate another rule decided (a row of theirs): tagged
		// beside it, as shadow_over is, not among its records.
		t.Tagged += b.taggedBeside[r]
		c.Rules = append(c.Rules, RuleFate{Rule: r, Shadow: slices.Contains(b.shadows, r), Totals: t})
	}
	var keys []*KeyReport
	for _, k := range b.keys {
		if k.affected() > 0 {
			keys = append(keys, k)
		}
	}
	c.KeysAffected = len(keys)
	slices.SortFunc(keys, func(x, y *KeyReport) int {
		return cmp.Or(cmp.Compare(y.affected(), x.affected()), cmp.Compare(y.PeakRatio, x.PeakRatio),
			cmp.Compare(x.Rule, y.Rule), cmp.Compare(x.Key, y.Key))
	})
	for _, k := range keys[:min(top, len(keys))] {
		kc := *k
		kc.Series = slices.Clone(k.Series)
		kc.Shadow = slices.Contains(b.shadows, k.Rule)
		c.Keys = append(c.Keys, kc)
	}
	return c
}

// levelsOfRows gives each key a row made under a rule not keyed by the team (its key the
// record's team and then the rule's: route's rowKey) the levels, threshold and peak that
// observe followed under the rule's own key (route.Outcome.Team, the limiter's), which
// limiterKey (route.Router.LimiterKey, nil: none) reads back from the row's: before,
// such a key was reported with no threshold nor peak, its levels kept under a key with
// no row. A key the rule limited for two teams gives both its levels. Idempotent.
func (b *builder) levelsOfRows(limiterKey func(rule, team, key string) string) {
	if limiterKey == nil {
		return
	}
	for id, k := range b.keys {
		if k.affected() == 0 {
			continue
		}
		lk := limiterKey(id.rule, k.Team, id.key)
		src := b.keys[keyID{id.rule, lk}]
		if lk == "" || lk == id.key || src == nil {
			continue
		}
		for _, sp := range src.Series {
			if sp.Threshold == 0 {
				continue
			}
			if p := k.point(sp.Minute); sp.Level > p.Level || p.Threshold == 0 {
				p.Level, p.Threshold = sp.Level, sp.Threshold
			}
		}
		if src.PeakRatio > k.PeakRatio {
			k.PeakRatio, k.Threshold = src.PeakRatio, src.Threshold
		}
	}
}

// rank is r's place in the rule set (a rule not in it last).
func rank(set []string, r string) int {
	if i := slices.Index(set, r); i >= 0 {
		return i
	}
	return len(set)
}

// diff compares the teams limited under a and b.
func diff(a, b map[string]int64) []TeamDiff {
	out := []TeamDiff{}
	for t, n := range a {
		if m := b[t]; m != n {
			out = append(out, TeamDiff{Team: t, A: n, B: m, Change: n - m})
		}
	}
	for t, m := range b {
		if _, ok := a[t]; !ok && m != 0 {
			out = append(out, TeamDiff{Team: t, B: m, Change: -m})
		}
	}
	slices.SortFunc(out, func(x, y TeamDiff) int {
		return cmp.Or(cmp.Compare(abs(y.Change), abs(x.Change)), cmp.Compare(x.Team, y.Team))
	})
	return out
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
