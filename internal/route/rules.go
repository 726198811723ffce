package route

import (
	"errors"
	"fmt"
	"slices"
	"time"

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
	cap    bool // cap mode: counts only the records it admits (checkRule)
	forced map[string]struct{}
	name   []byte // the header value
	// Counters by result, resolved once.
	under, over, unmatched, missing, notChecked prometheus.Counter
}

// MaxRules bounds a router's rules: the rules over a record are kept in one word.
const MaxRules = 64

// ruleOutcome is what the rules checked so far decided for one record.
type ruleOutcome struct {
	action RuleAction // the strongest enforced action of the rules over; 0: none
	rule   int        // the rule whose action that is
	over   uint64     // bit i: enforced rule i was over
	tags   int        // tagging rules over: the gate-tag headers to add
	forced bool       // the rule's key is in its Forced list
}

// sendsAway reports whether the record leaves the accepted topic.
func (o *ruleOutcome) sendsAway() bool { return o.action >= ActionOverflow }

// NewRules returns a Router that checks each record against rules, in order: every rule
// whose Match holds is checked against its limiters, the record gets the strongest action
// of the enforced rules over (a topic of its own, then overflow, then tag; between two of a
// kind, the earlier rule's), and its headers name the rule whose action it got and every
// tagging rule over it. A shadow rule is counted and measured only.
//
// Counting across rules: a rule does not check, and so does not count, a record an
// earlier enforced rule already sends away (overflow or a topic) with an action at least
// as strong as its own. A runaway user diverted by a user rule listed before its team's
// rule is then kept out of the team's count, in either mode, and the team's other users
// are judged by what they send. A rule with a stronger action (a topic after overflow)
// still checks it. Within a rule, divert counts every record it checks (its windows
// measure the offered rate) and cap the records it admits. Put the narrowest rules first.
//
// One pass over a JSON value finds every top-level field any rule reads. cfg.KeyFrom and
// cfg.ForceOverflow are not used (each rule has its own); cfg.Cost is each rule's.
func NewRules(cfg Config, rules []Rule, reg prometheus.Registerer) (*Router, error) {
	if len(rules) == 0 || len(rules) > MaxRules {
		return nil, fmt.Errorf("%w: %d rules (want 1 to %d)", ErrBadConfig, len(rules), MaxRules)
	}
	var lims []*limit.Limiter
	for _, ru := range rules {
		lims = append(lims, ru.Limiters...)
	}
	if len(lims) == 0 || slices.Contains(lims, nil) {
		return nil, fmt.Errorf("%w: a rule without a limiter", ErrBadConfig)
	}
	cfg.ForceOverflow = nil
	r, err := NewMulti(cfg, lims[:1], reg)
	if err != nil {
		return nil, err
	}
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gate_rule_records_total",
		Help: "Records each rule saw, by result: under or over (a shadow rule's over is what it would have done), " +
			"unmatched (its match did not hold), missing (its key was absent and it skips such records), " +
			"not_checked (a cap rule, for a record an earlier enforced rule sent away).",
	}, []string{"rule", "result"})
	topicRecords := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gate_rule_topic_records_total",
		Help: "Records sent to a rule's own topic (action topic:NAME), by rule and reason (rate_limited or forced).",
	}, []string{"rule", "reason"})
	var errs []error
	seen := map[string]bool{}
	for i, ru := range rules {
		st := ruleState{Rule: ru, name: []byte(ru.Name), forced: map[string]struct{}{}}
		if ru.Name == "" || seen[ru.Name] {
			errs = append(errs, fmt.Errorf("rule %d: name %q empty or taken", i, ru.Name))
		}
		seen[ru.Name] = true
		if ru.Key.IsZero() {
			errs = append(errs, fmt.Errorf("rule %q: no key", ru.Name))
		}
		if len(ru.Limiters) == 0 {
			errs = append(errs, fmt.Errorf("rule %q: no limiter", ru.Name))
			continue
		}
		mode := ru.Limiters[0].Config().Mode
		for _, l := range ru.Limiters {
			if l.Config().Mode != mode {
				errs = append(errs, fmt.Errorf("rule %q: limits of different modes", ru.Name))
			}
			if l.Config().Clock != r.lim.Config().Clock {
				errs = append(errs, fmt.Errorf("rule %q: limits on different clocks", ru.Name))
			}
		}
		st.cap = mode == limit.Cap
		switch ru.Action {
		case ActionTag, ActionOverflow:
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
		for _, k := range ru.Forced {
			st.forced[k] = struct{}{}
		}
		st.under = records.WithLabelValues(ru.Name, "under")
		st.over = records.WithLabelValues(ru.Name, "over")
		st.unmatched = records.WithLabelValues(ru.Name, "unmatched")
		st.missing = records.WithLabelValues(ru.Name, "missing")
		st.notChecked = records.WithLabelValues(ru.Name, "not_checked")
		st.Key.lax = !cfg.ValidateJSON
		st.Match = slices.Clone(ru.Match)
		for j := range st.Match {
			st.Match[j].Field.lax = !cfg.ValidateJSON
		}
		r.rules = append(r.rules, st)
		if ru.Action == ActionTopic {
			r.ruleTopic = append(r.ruleTopic, [2]prometheus.Counter{
				topicRecords.WithLabelValues(ru.Name, ReasonRateLimited), topicRecords.WithLabelValues(ru.Name, ReasonForced)})
		} else {
			r.ruleTopic = append(r.ruleTopic, [2]prometheus.Counter{})
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	// Every JSON field any rule reads, each top-level name once: one members pass finds
	// them all.
	for i := range r.rules {
		st := &r.rules[i]
		r.plan.add(&st.Key)
		for j := range st.Match {
			r.plan.add(&st.Match[j].Field)
		}
	}
	if reg != nil {
		for _, m := range []prometheus.Collector{records, topicRecords} {
			if err := reg.Register(m); err != nil {
				return nil, fmt.Errorf("registering rule metrics: %w", err)
			}
		}
	}
	return r, nil
}

// fieldPlan is every top-level JSON member name a router's rules read.
type fieldPlan struct {
	top []memberName
}

// add puts k's top-level names in the plan and records where (KeyFrom.idx).
func (p *fieldPlan) add(k *KeyFrom) {
	if k.src != sourceJSON {
		return
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

// routeRules is RouteInto for a router with rules.
func (r *Router) routeRules(now time.Time, rec *kgo.Record, s *Scratch, out *kgo.Record) Outcome {
	var o Outcome
	js, failed := r.rulesJSON(rec, s)
	var ro ruleOutcome
	var at time.Time
	if r.event && failed == reasonNone {
		at = r.eventTime(rec)
	}
	failedRule := -1
	var failedKey *KeyFrom // the key or match field that could not be read
	for i := range r.rules {
		if failed != reasonNone {
			break
		}
		st := &r.rules[i]
		matched := true
		for j := range st.Match {
			m := &st.Match[j]
			v, mf := m.Field.readAt(rec, js, s.at, s, maxMatchBytes)
			if mf != reasonNone && !missingKey(mf) && mf != reasonFieldType {
				failed, failedRule, failedKey = mf, i, &m.Field
				break
			}
			if (mf == reasonNone && slices.Contains(m.Values, v)) == m.Not {
				matched = false
				break
			}
		}
		if failed != reasonNone {
			break
		}
		if !matched {
			st.unmatched.Inc()
			continue
		}
		if ro.sendsAway() && st.Action <= ro.action {
			// Already sent away by an action as strong: this rule neither checks nor counts
			// it (NewRules).
			st.notChecked.Inc()
			continue
		}
		key, kf := st.Key.readAt(rec, js, s.at, s, r.maxKey)
		if kf != reasonNone {
			if st.SkipMissing && missingKey(kf) {
				st.missing.Inc()
				continue
			}
			failed, failedRule, failedKey = kf, i, &st.Key
			break
		}
		if o.Team == "" {
			o.Team = s.keepKey(key)
		}
		forced := false
		if len(st.forced) > 0 {
			_, forced = st.forced[key] // a string key: the lookup does not allocate
		}
		var d limit.Decision
		over := false
		if forced {
			n := int64(1)
			if st.cap {
				n = 0
			}
			n *= r.ruleCost(st, rec, s)
			d = r.check(st.Limiters[0], now, at, key, n, s)
			for _, l := range st.Limiters[1:] {
				r.check(l, now, at, key, n, s)
			}
			over = true
		} else {
			d, over = r.checkRule(st, now, at, key, r.ruleCost(st, rec, s), s)
		}
		if o.Decision == (limit.Decision{}) {
			o.Decision = d
		}
		if !over {
			st.under.Inc()
			continue
		}
		st.over.Inc()
		if st.Shadow {
			continue
		}
		ro.over |= 1 << uint(i)
		if st.Action == ActionTag {
			ro.tags++
		}
		if st.Action > ro.action {
			ro.action, ro.rule, ro.forced = st.Action, i, forced
			o.Team, o.Decision = s.keepKey(key), d
		}
	}
	if failed != reasonNone {
		o.Enforced, o.EnforcedReason = DeadLetter, failed.String()
		if r.cfg.DryRun {
			// As without rules: dry run sends everything to accepted, counting what
			// enforcement would have done.
			s.diverted[failed]++
			s.records[reasonDryRun]++
			o.Route, o.Reason = Accepted, ReasonDryRun
			r.fill(out, rec, Accepted, rec.Key, 0)
			return o
		}
		detail := ""
		if failedRule >= 0 {
			detail = "rule " + r.rules[failedRule].Name + ": " + failedKey.detail(s.why, r.maxKey)
		} else {
			detail = r.rules[0].Key.detail(s.why, r.maxKey)
		}
		o.Route, o.Reason = DeadLetter, failed.String()
		s.records[failed]++
		*out = *r.deadLetter(rec, r.hdrValue[failed], detail)
		return o
	}
	o.Rule = ""
	code, route := reasonAllowed, Accepted
	if ro.action != 0 {
		o.Rule = r.rules[ro.rule].Name
		code = reasonRateLimited
		if ro.forced {
			code = reasonForced
		}
		switch ro.action {
		case ActionTag:
			code = reasonTagged
		case ActionOverflow:
			route = Overflow
		case ActionTopic:
			route = RuleTopic
		}
	}
	o.Enforced, o.EnforcedReason = route, code.String()
	if r.cfg.DryRun {
		if route != Accepted {
			if route == RuleTopic {
				s.diverted[reasonRateLimited]++
			} else {
				s.diverted[code]++
			}
			code = reasonDryRun
		} else if code == reasonTagged {
			code = reasonAllowed // dry run adds no header
		}
		s.records[code]++
		o.Route, o.Reason = Accepted, code.String()
		r.fill(out, rec, Accepted, rec.Key, 0)
		return o
	}
	o.Route, o.Reason = route, code.String()
	switch route {
	case Accepted:
		s.records[code]++
		r.fill(out, rec, Accepted, rec.Key, ro.tags)
	case Overflow, RuleTopic:
		var key []byte
		if r.cfg.OverflowKeepKey {
			key = rec.Key
		}
		if route == RuleTopic {
			c := r.ruleTopic[ro.rule][0]
			if code == reasonForced {
				c = r.ruleTopic[ro.rule][1]
			}
			c.Inc()
			r.fill(out, rec, Overflow, key, ro.tags+2)
			out.Topic = r.rules[ro.rule].Topic
		} else {
			s.records[code]++
			r.fill(out, rec, Overflow, key, ro.tags+2)
		}
		out.Headers = append(out.Headers,
			kgo.RecordHeader{Key: HeaderOverflowReason, Value: r.hdrValue[code]},
			kgo.RecordHeader{Key: HeaderOverflowRule, Value: r.rules[ro.rule].name})
	}
	for i := range r.rules {
		if ro.over&(1<<uint(i)) != 0 && r.rules[i].Action == ActionTag {
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderTag, Value: r.rules[i].name})
		}
	}
	return o
}

// keepKey copies key into s's keep buffer, past the next rule's composite key, which
// reuses the key buffer; it allocates only while the buffer grows.
func (s *Scratch) keepKey(key string) string {
	s.keep = append(s.keep[:0], key...)
	return bytesString(s.keep)
}

// maxMatchBytes bounds a matched value: a match compares it with a list, never keeps it.
const maxMatchBytes = 1 << 30

// rulesJSON prepares rec's value for the rules that read JSON: it checks the value is an
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
	s.at = append(s.at[:0], make([]int, len(r.plan.top))...)
	if members(js, firstNonSpace(js), r.plan.top, s.at) < 0 && r.cfg.ValidateJSON {
		return "", s.fail(malformed()) // not reached: the value is valid JSON
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
		v, code = k.fieldValue(js, 0, at[k.idx[0]], s)
	} else {
		v, code = k.joinFields(js, at, k.idx, s, maxKey)
	}
	if code == reasonNone && len(v) > maxKey {
		return "", s.fail(failure{reason: reasonKeyTooLong, size: len(v)})
	}
	if code != reasonNone && code != reasonKeyTooLong && k.lax && !gjson.Valid(js) {
		return "", s.fail(malformed())
	}
	return v, code
}

// ruleCost is what rec counts toward st's windows.
func (r *Router) ruleCost(st *ruleState, rec *kgo.Record, s *Scratch) int64 {
	if s.Replay {
		return 0
	}
	if st.Cost == CostBytes {
		return max(int64(len(rec.Value)), 1)
	}
	return 1
}

// checkRule checks key against st's limits and reports whether any is over, with the
// first limit over's decision (else the first's), counting n as st's mode says
// (checkAll).
func (r *Router) checkRule(st *ruleState, now, at time.Time, key string, n int64, s *Scratch) (limit.Decision, bool) {
	if len(st.Limiters) == 1 {
		d := r.check(st.Limiters[0], now, at, key, n, s)
		return d, d.Limited
	}
	d, over := r.checkLimits(st.Limiters[0], st.Limiters[1:], st.cap, now, at, key, n, s)
	return d, over >= 0
}
