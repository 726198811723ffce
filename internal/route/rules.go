package route

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// Headers of a router with rules (NewRules).
const (
	// HeaderOverflowRule is added to a record a rule sent to overflow or to a topic of its
	// own: the rule's name.
	HeaderOverflowRule = "gate-overflow-rule"
	// HeaderTag is added once per tagging rule (action tag) that was over, its value the
	// rule's name, wherever the record goes.
	HeaderTag = "gate-tag"
)

// RuleAction is what a rule does to a record while it is over, weakest first: a record
// gets the strongest action of the enforced rules over it.
type RuleAction uint8

const (
	// ActionTag keeps the record on the accepted topic, with a HeaderTag naming the rule.
	ActionTag RuleAction = iota + 1
	// ActionOverflow sends the record to the overflow topic.
	ActionOverflow
	// ActionTopic sends the record to the rule's own topic (Rule.Topic).
	ActionTopic
	// ActionDrop writes the record nowhere: it is counted in the outcomes (Route
	// Dropped), which must be on (the gate refuses an enforced drop rule otherwise).
	ActionDrop
)

// Rule is one rule as the router runs it; internal/rules reads them from a file.
type Rule struct {
	// Name is the rule's name: HeaderOverflowRule's and HeaderTag's value and the rule
	// label of gate_rule_records_total.
	Name string
	// Key is what the rule counts by.
	Key KeyFrom
	// SkipMissing passes a record whose key is absent or empty (field_missing,
	// field_empty, header_missing, key_missing) unchecked by this rule; otherwise it is
	// dead-lettered. A key that is there but cannot be used is dead-lettered either way.
	SkipMissing bool
	// Match selects the records the rule applies to; every one must hold.
	Match []RuleMatch
	// Limiters are the rule's limits, the first one primary; all of one mode.
	Limiters []*limit.Limiter
	Cost     Cost
	Action   RuleAction
	Topic    string // ActionTopic
	// Shadow counts and measures the rule, and never lets it change a record.
	Shadow bool
	// Forced keys take the rule's action whatever their level (GATE_FORCE_OVERFLOW, per
	// rule); they are counted as the rule's mode counts.
	Forced []string
}

// RuleMatch holds when the value Field reads is (Not: is not) one of Values. A field that
// is absent, empty or of another type reads no value: it is in no list.
type RuleMatch struct {
	Field  KeyFrom
	Values []string
	Not    bool
}

// ruleState is a Rule compiled for the router.
type ruleState struct {
	Rule
	cap     bool  // cap mode: counts only the records it admits (checkLimits)
	forcedN int64 // what a forced record counts, per unit of cost: 1 in divert mode, 0 in cap mode
	forced  map[string]struct{}
	name    []byte // the header value; nil for the implicit rule, which adds no header
	// topicGone is, for action topic, whether the topic is marked missing (TopicWatch);
	// topicName the topic as a header value.
	topicGone *atomic.Bool
	topicName []byte
	limHdr    [][]byte // with several limits, each one's window as a header value
	// prefetchNext: the next rule has no match and a key of one top-level JSON field, which
	// the shared pass found and sharedValue keeps, and so costs next to nothing to read
	// before this rule's check, for its limiter to prefetch its slot (Limiter.Prefetch).
	prefetchNext bool
	// prefetchOwn: this rule's key is the one JSON reader's (not a shared pass) and of one
	// top-level field, checked by one limit on the wall clock: its limiter's slot is
	// fetched with the key's hash as soon as the field is found (touchAhead).
	prefetchOwn bool
	// sameKey is the first rule before this one that reads the same key (-1: none), whose
	// hash of the record's key this rule's check takes when both limiters hash with one
	// seed (a gate gives them one): two rules of one key, such as a team's and its
	// events', hash it once. keyShared: a rule after this one has it as its sameKey, so
	// this one keeps its hash (Scratch.hashes).
	sameKey   int
	keyShared bool
	// teamFirst: the rule's key starts with the outcomes' team field (Router.teamKey), so
	// its key's first field is the record's team (teamOf); else its outcome rows are
	// filed under the team read by that field (rowKey).
	teamFirst bool
	// gate_rule_records_total by result, resolved once; nil for the implicit rule.
	results [numResults]prometheus.Counter
}

// The results of a rule for one record, gate_rule_records_total's result label.
const (
	resultUnder = iota
	resultOver
	resultUnmatched
	resultMissing
	resultNotChecked
	// resultDeadLetter: the record was dead-lettered, by this rule (its key or match
	// field could not be read), by an earlier one, or before any (no JSON object): a
	// rule's results sum to the records routed.
	resultDeadLetter
	numResults
)

// resultNames is read-only.
var resultNames = [numResults]string{"under", "over", "unmatched", "missing", "not_checked", "dead_letter"}

// MaxRules bounds a router's rules: the rules over a record are kept in one word.
const MaxRules = 64

// ruleOutcome is what the rules checked so far decided for one record.
type ruleOutcome struct {
	action RuleAction // the strongest enforced action of the rules over; 0: none
	rule   int        // the rule whose action that is
	limit  int        // that rule's first limit over, -1 when forced
	// decided is the index, into the Limiters of the rule whose key the record's team
	// is, of the limit whose decision Outcome.Decision is: its row's threshold source.
	decided int
	over    uint64 // bit i: enforced rule i was over
	tags    int    // tagging rules over: the gate-tag headers to add
	forced  bool   // the rule's key is in its Forced list
	gone    bool   // the rule's own topic is missing: overflow instead
	// rotating: the rule whose action that is acts for its key's team rotating
	// identities (limit.Decision.Rotating: on_cardinality overflow or tag), not its own.
	rotating bool
	tagged   uint64 // bit i: enforced rule i tags the record
}

// sendsAway reports whether the record leaves the accepted topic.
func (o *ruleOutcome) sendsAway() bool { return o.action >= ActionOverflow }

// NewRules returns a Router that checks each record against rules, in order: every rule
// whose Match holds is checked against its limiters, the record gets the strongest action
// of the enforced rules over (drop, then a topic of its own, then overflow, then tag;
// between two of a kind, the earlier rule's), and its headers name the rule whose action it got, the first
// of its limits over when it has several (gate-overflow-limit, as for GATE_LIMITS), and
// every tagging rule over it. A shadow rule is counted and measured only.
//
// Counting across rules: a rule does not check, and so does not count, a record an
// earlier enforced rule already sends away (overflow or a topic) with an action at least
// as strong as its own. A runaway user diverted by a user rule listed before its team's
// rule is then kept out of the team's count, in either mode, and the team's other users
// are judged by what they send. A rule with a stronger action (a topic after overflow)
// still checks it; and a rule listed before one that sends the record to a topic has
// checked and counted it already. Within a rule, divert counts every record it checks
// (its windows measure the offered rate) and cap the records it admits. Put the
// narrowest rules first.
//
// One pass over a JSON value finds every top-level field any rule reads. cfg.KeyFrom,
// cfg.ForceOverflow and cfg.Cost are not used: each rule has its own (Rule.Cost).
func NewRules(cfg Config, rules []Rule, reg prometheus.Registerer) (*Router, error) {
	cfg.ForceOverflow = nil
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 || len(rules) > MaxRules {
		return nil, fmt.Errorf("%w: %d rules (want 1 to %d)", ErrBadConfig, len(rules), MaxRules)
	}
	var errs []error
	seen := map[string]bool{}
	for i, ru := range rules {
		if ru.Name == "" || seen[ru.Name] {
			errs = append(errs, fmt.Errorf("rule %d: name %q empty or taken", i, ru.Name))
		}
		seen[ru.Name] = true
		if ru.Key.IsZero() {
			errs = append(errs, fmt.Errorf("rule %q: no key", ru.Name))
		}
		if len(ru.Limiters) == 0 || slices.Contains(ru.Limiters, nil) {
			errs = append(errs, fmt.Errorf("rule %q: no limiter", ru.Name))
		}
		switch ru.Action {
		case ActionTag, ActionOverflow, ActionDrop:
		case ActionTopic:
			if err := CheckTopic(ru.Topic); err != nil {
				errs = append(errs, fmt.Errorf("rule %q: topic: %w", ru.Name, err))
			}
		default:
			errs = append(errs, fmt.Errorf("rule %q: unknown action %d", ru.Name, ru.Action))
		}
		if ru.Cost > CostBytes {
			errs = append(errs, fmt.Errorf("rule %q: unknown cost %d", ru.Name, ru.Cost))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	return newRouter(cfg, rules, true, reg)
}

// addRules compiles rules into r (the implicit rule when r is not named): each one's
// state, its metrics, and the plan of the JSON fields they read. It returns the collectors
// to register.
func (r *Router) addRules(rules []Rule) ([]prometheus.Collector, error) {
	var records, topicRecords *prometheus.CounterVec
	if r.named {
		records = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_rule_records_total",
			Help: "Records each rule saw, by result: under or over (a shadow rule's over is what it would have done), " +
				"unmatched (its match did not hold), missing (its key was absent and it skips such records, or a shadow rule could not read its key or match field), " +
				"not_checked (for a record an earlier enforced rule sent away with an action at least as strong), " +
				"dead_letter (the record was dead-lettered: this rule could not read its key or match field, or an earlier rule could not, " +
				"or its value is no JSON object; in a dry run, accepted instead).",
		}, []string{"rule", "result"})
		topicRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_rule_topic_records_total",
			Help: "Records of a rule's own topic (action topic:NAME), by rule and reason: rate_limited or forced (routed there), " +
				"topic_missing (sent to the overflow topic instead, as the topic was missing or closed to the gate: by the router, " +
				"or after a produce to the topic failed, a record then counted under both reasons).",
		}, []string{"rule", "reason"})
	}
	var errs []error
	clk := rules[0].Limiters[0].Config().Clock
	for _, ru := range rules {
		st := ruleState{Rule: ru, forced: make(map[string]struct{}, len(ru.Forced)), forcedN: 1}
		st.Limiters = slices.Clone(ru.Limiters)
		st.Forced = slices.Clone(ru.Forced)
		where := "" // what an error is about: the rule, named
		if r.named {
			st.name = []byte(ru.Name)
			where = fmt.Sprintf("rule %q: ", ru.Name)
		}
		mode := ru.Limiters[0].Config().Mode
		for _, l := range ru.Limiters {
			if l.Config().Mode != mode {
				errs = append(errs, fmt.Errorf("%slimits of different modes (%s, %s)", where, mode, l.Config().Mode))
				break
			}
			if l.Config().Clock != clk {
				errs = append(errs, fmt.Errorf("%slimits on different clocks (%s, %s)", where, clk, l.Config().Clock))
				break
			}
		}
		// Divert counts every record whatever its lane, so a forced key's offered rate keeps
		// being measured; cap counts admitted records only, and a forced one never is.
		if st.cap = mode == limit.Cap; st.cap {
			st.forcedN = 0
		}
		if len(ru.Limiters) > 1 {
			for _, l := range ru.Limiters {
				st.limHdr = append(st.limHdr, []byte(l.Config().Window.String()))
			}
		}
		for _, k := range ru.Forced {
			st.forced[k] = struct{}{}
		}
		if r.named {
			for res := range numResults {
				st.results[res] = records.WithLabelValues(ru.Name, resultNames[res])
			}
		}
		st.Key.lax = !r.cfg.ValidateJSON
		st.Match = slices.Clone(ru.Match)
		for j := range st.Match {
			st.Match[j].Field.lax = !r.cfg.ValidateJSON
		}
		st.topicGone = new(atomic.Bool)
		if ru.Action == ActionTopic {
			st.topicName = []byte(ru.Topic)
			if r.cfg.RuleTopics != nil {
				st.topicGone = r.cfg.RuleTopics.flag(ru.Topic)
			}
		}
		r.rules = append(r.rules, st)
		if r.named && ru.Action == ActionTopic {
			r.ruleTopic = append(r.ruleTopic, [3]prometheus.Counter{
				topicRecords.WithLabelValues(ru.Name, ReasonRateLimited), topicRecords.WithLabelValues(ru.Name, ReasonForced),
				topicRecords.WithLabelValues(ru.Name, "topic_missing")})
		} else {
			r.ruleTopic = append(r.ruleTopic, [3]prometheus.Counter{})
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	// Every JSON field any rule reads, each top-level name once: one members pass finds
	// them all.
	readers := 0
	for i := range r.rules {
		st := &r.rules[i]
		n := r.plan.add(&st.Key)
		for j := range st.Match {
			n += r.plan.add(&st.Match[j].Field)
		}
		readers += n
		if n > 0 && !st.Shadow {
			r.plan.enforcedJSON = true
		}
	}
	// One JSON reader, the first rule's key checked for every record (the implicit rule,
	// or a file's single team rule): it reads its own fields as it reads them alone, with
	// no shared pass to set up. Otherwise one shared pass reads the fields of them all.
	first := &r.rules[0]
	r.plan.shared = readers > 1 || readers == 1 && (first.Key.src != sourceJSON || len(first.Match) > 0)
	for i := range r.rules {
		st := &r.rules[i]
		st.sameKey = slices.IndexFunc(r.rules[:i], func(o ruleState) bool { return o.Key.String() == st.Key.String() })
		if st.sameKey >= 0 {
			r.rules[st.sameKey].keyShared = true
		}
	}
	first.prefetchOwn = !r.plan.shared && first.Key.src == sourceJSON && len(first.Key.fields) == 1 &&
		len(first.Key.fields[0].parts) == 1 && len(first.Limiters) == 1 && first.Limiters[0].Config().Clock != limit.EventClock
	for i := 0; i+1 < len(r.rules) && r.plan.shared; i++ {
		nx := &r.rules[i+1]
		r.rules[i].prefetchNext = len(nx.Match) == 0 && nx.Key.src == sourceJSON && len(nx.Key.fields) == 1 &&
			len(nx.Key.fields[0].parts) == 1 && nx.Key.idx[0] < 64 // a value sharedValue keeps
	}
	// The outcomes' team field (teamField). Read by the shared pass when there is one, as
	// a rule's field is.
	tk := r.cfg.OutcomesTeam
	if tk.IsZero() {
		tk = teamField(r.rules)
	} else if tk.Composite() {
		return nil, fmt.Errorf("%w: the outcomes' team key %s: want a key of one field", ErrBadConfig, tk)
	}
	tk.lax = !r.cfg.ValidateJSON
	r.teamKey = tk
	for i := range r.rules {
		r.rules[i].teamFirst = r.rules[i].Key.Members()[0].String() == tk.String()
	}
	if tk.src == sourceJSON && r.plan.shared {
		r.plan.add(&r.teamKey)
	}
	if !r.named {
		return nil, nil
	}
	return []prometheus.Collector{records, topicRecords}, nil
}

// teamField is the field outcome rows' team is read by when Config.OutcomesTeam does not
// say (TeamField).
func teamField(rules []ruleState) KeyFrom {
	enforced := func(st ruleState) bool { return !st.Shadow }
	for _, pick := range []func(st ruleState) bool{
		func(st ruleState) bool { return enforced(st) && st.Key.Composite() },
		func(st ruleState) bool { return enforced(st) && len(st.Match) == 0 },
		enforced,
	} {
		if i := slices.IndexFunc(rules, pick); i >= 0 {
			return rules[i].Key.Members()[0]
		}
	}
	return rules[0].Key.Members()[0]
}

// TeamField is the key of one field outcome rows' team is read by, for rules whose
// router is given no Config.OutcomesTeam: the first field of the first enforced rule's
// key that is composite (a composite key's first field is its team, as in
// json:team_id+distinct_id), else of the first enforced rule that matches every record
// (no match), else of the first enforced rule, else of the first rule.
func TeamField(rules []Rule) KeyFrom {
	st := make([]ruleState, len(rules))
	for i, ru := range rules {
		st[i].Rule = ru
	}
	return teamField(st)
}

// fieldPlan is every top-level JSON member name a router's rules read.
type fieldPlan struct {
	top []memberName
	// shared is whether the fields are read in one pass for all the rules (rulesJSON);
	// otherwise the one JSON reader reads its own (addRules).
	shared bool
	// enforcedJSON is whether an enforced rule reads JSON: else a value that is not a JSON
	// object is only unreadable to the shadow rules, which never dead-letter it.
	enforcedJSON bool
}

// add puts k's top-level names in the plan and records where (KeyFrom.idx). It returns
// 1 for a JSON reader, else 0.
func (p *fieldPlan) add(k *KeyFrom) int {
	if k.src != sourceJSON {
		return 0
	}
	k.idx = make([]int, len(k.top))
	for i, n := range k.top {
		j := slices.IndexFunc(p.top, func(m memberName) bool { return m.s == n.s })
		if j < 0 {
			j = len(p.top)
			p.top = append(p.top, n)
		}
		k.idx[i] = j
	}
	return 1
}

// missingKey reports whether a read that failed with code found no key (rather than one
// there and unusable).
func missingKey(code reasonCode) bool {
	switch code {
	case reasonFieldMissing, reasonFieldEmpty, reasonHeaderMissing, reasonKeyMissing:
		return true
	}
	return false
}

// keepKey is key kept past the next rule's read: with one rule, key itself (it aliases the
// record or s, valid until the next Route with s); with several, a copy in s's keep
// buffer, as the next rule's composite key reuses the key buffer.
func (r *Router) keepKey(key string, s *Scratch) string {
	if len(r.rules) == 1 || !s.joined(key) {
		return key
	}
	return s.keepKey(key)
}

// joined reports whether key is the composite key joined last in s's key buffer, the one
// buffer a next rule's read writes over (joinFields starts it at s.key[0]): any other key
// aliases the record, or a string of its own, and stays as it is.
func (s *Scratch) joined(key string) bool {
	return len(key) > 0 && len(s.key) > 0 && unsafe.StringData(key) == &s.key[0]
}

// keepKey copies key into s's keep buffer; it allocates only while the buffer grows.
func (s *Scratch) keepKey(key string) string {
	s.keep = append(s.keep[:0], key...)
	return bytesString(s.keep)
}

// maxMatchBytes bounds a matched value: a match compares it with a list, never keeps it.
const maxMatchBytes = 1 << 30

// rulesJSON prepares rec's value for the rules that read JSON, when they share one pass
// (fieldPlan.shared; RouteInto calls it only then): it checks the value is an
// object (and valid JSON under Config.ValidateJSON) and finds every top-level field of the
// plan in one members pass, into s.at. A value no rule reads as JSON is not looked at.
func (r *Router) rulesJSON(rec *kgo.Record, s *Scratch) (string, reasonCode) {
	if len(r.plan.top) == 0 {
		return "", reasonNone
	}
	// Lax: as jsonTeam, a value that is not an object fails here; one that breaks off is
	// read as far as it goes, and checked only if a rule then cannot read its key.
	js, code := jsonObject(rec.Value, r.cfg.ValidateJSON, s)
	if code != reasonNone {
		return "", code
	}
	n := len(r.plan.top)
	if cap(s.at) < n || cap(s.end) < n {
		s.at, s.end = make([]int, n), make([]int, n)
	}
	// Zeroed in a loop: a plan reads a few fields, and appending make([]int, n) called
	// the runtime's memclr twice a record (some 17 ns with three rules on AMD EPYC, profiled).
	s.at, s.end = s.at[:n], s.end[:n]
	for i := range n {
		s.at[i], s.end[i] = 0, 0
	}
	if len(s.val) < len(r.plan.top) {
		s.val = make([]string, len(r.plan.top))
	}
	s.vals = 0
	end := members(js, firstNonSpace(js), r.plan.top, s.at, s.end, nil)
	if end < 0 && r.cfg.ValidateJSON {
		return "", s.fail(malformed()) // not reached: the value is valid JSON
	}
	if !r.cfg.ValidateJSON && moreAfter(js, end) {
		return "", s.fail(severalValues())
	}
	return js, reasonNone
}

// readAt reads k from rec as team does, a json source from the members found in at
// (fieldPlan: at[k.idx[i]] for k's field i). Without validation, a field that cannot be
// read in a value that is not valid JSON is not_json, as in jsonTeam.
func (k *KeyFrom) readAt(rec *kgo.Record, js string, at []int, s *Scratch, maxKey int) (string, reasonCode) {
	if k.src != sourceJSON {
		return k.team(rec, s, maxKey)
	}
	var v string
	var code reasonCode
	if len(k.fields) == 1 {
		v, code = k.sharedValue(js, 0, at, s)
	} else {
		v, code = k.joinFields(js, at, true, s, maxKey)
	}
	if code == reasonNone && len(v) > maxKey {
		return "", s.fail(failure{reason: reasonKeyTooLong, size: len(v)})
	}
	if code != reasonNone && code != reasonKeyTooLong && k.lax && !gjson.Valid(js) {
		return "", s.fail(malformed())
	}
	return v, code
}

// sharedValue is fieldValue of k's field i, read by the shared pass (at, as readAt's):
// a top-level field another rule read in this record already is not read again. Only
// values are kept: a failure is read again, as its details (s.why) name the field of k.
func (k *KeyFrom) sharedValue(js string, i int, at []int, s *Scratch) (string, reasonCode) {
	j := k.idx[i]
	if j >= 64 || len(k.fields[i].parts) > 1 {
		return k.fieldValue(js, i, at[j], s.end[j], s)
	}
	if s.vals&(1<<j) != 0 {
		return s.val[j], reasonNone
	}
	v, code := k.fieldValue(js, i, at[j], s.end[j], s)
	if code == reasonNone {
		s.val[j] = v
		s.vals |= 1 << j
	}
	return v, code
}

// read reads k from rec: from the fields the shared pass found (readAt), or by itself when
// it is the router's one JSON reader (fieldPlan.shared) or reads no JSON.
// noJSON: the shared pass found the value no JSON object, which only shadow rules read.
func (r *Router) read(k *KeyFrom, rec *kgo.Record, js string, noJSON bool, s *Scratch, maxKey int) (string, reasonCode) {
	if k.src == sourceJSON && r.plan.shared {
		if noJSON {
			return "", reasonNotJSON
		}
		return k.readAt(rec, js, s.at, s, maxKey)
	}
	return k.team(rec, s, maxKey)
}

// matchOf reads st's match fields from rec as RouteInto does (js and noJSON as there):
// whether every one holds, or the code and field of the first one that cannot be read.
// A field absent, empty or of another type reads no value, which is in no list.
func (r *Router) matchOf(st *ruleState, rec *kgo.Record, js string, noJSON bool, s *Scratch) (matched bool, failed reasonCode, field *KeyFrom) {
	for j := range st.Match {
		m := &st.Match[j]
		v, mf := r.read(&m.Field, rec, js, noJSON, s, maxMatchBytes)
		if mf != reasonNone && !missingKey(mf) && mf != reasonFieldType {
			return false, mf, &m.Field
		}
		if (mf == reasonNone && slices.Contains(m.Values, v)) == m.Not {
			return false, reasonNone, nil
		}
	}
	return true, reasonNone, nil
}
