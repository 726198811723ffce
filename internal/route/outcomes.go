package route

import (
	"hash/maphash"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// What RouteInto tells Scratch.Outcomes. A record's own outcome is keyed by the key of the
// rule whose action it got; a record no rule acted on (accepted, or dead-lettered) by its
// team, the first field of the key of the first enforced rule checked (a shadow rule's
// only when no enforced rule checked it), so that a per-user rule makes a row per user
// only for the users it limits, and a shadow rule listed first changes no row's team.

// teamOf returns key's team: key itself for a key of one field, a composite key's first
// field (its values escape ':', so the first ':' ends it).
func teamOf(key string, composite bool) string {
	if composite {
		if i := strings.IndexByte(key, ':'); i >= 0 {
			return key[:i]
		}
	}
	return key
}

// TeamOf returns rec's team as its outcome row has it, RouteInto's: that of the key of the
// first enforced rule that checks it (its match holds, its key is not missing under
// missing: skip), a shadow rule's only when no enforced rule does, or "" when it cannot
// be read (a record RouteInto dead-letters has no team either): for a record the consumer
// decides itself (dead-lettered after the broker refused it), whose row must count under
// its team. It may alias rec or s (valid until s is used again).
func (r *Router) TeamOf(rec *kgo.Record, s *Scratch) string {
	if r.plan.shared && r.plan.enforcedJSON {
		// RouteInto dead-letters a value that is no JSON object before any rule checks it
		// (rulesJSON), a first rule reading a header or the record key included.
		if _, code := jsonObject(rec.Value, r.cfg.ValidateJSON, s); code != reasonNone {
			return ""
		}
	}
	shadow := ""
	for i := range r.rules {
		st := &r.rules[i]
		matched := true
		for j := range st.Match {
			m := &st.Match[j]
			v, mf := m.Field.team(rec, s, maxMatchBytes) // on its own, not from a shared pass
			if mf != reasonNone && !missingKey(mf) && mf != reasonFieldType {
				if st.Shadow {
					matched = false
					break
				}
				return "" // dead-lettered by this rule's match
			}
			if (mf == reasonNone && slices.Contains(m.Values, v)) == m.Not {
				matched = false
				break
			}
		}
		if !matched {
			continue
		}
		key, code := st.Key.team(rec, s, r.maxKey)
		if code != reasonNone {
			if st.SkipMissing && missingKey(code) || st.Shadow {
				continue
			}
			return "" // dead-lettered by this rule's key
		}
		team := teamOf(key, st.Key.Composite())
		if !st.teamFirst {
			// As rowKey: the record's team read by the outcomes' team field; none when it
			// cannot be read.
			team = ""
			if t, code := r.teamKey.team(rec, s, r.maxKey); code == reasonNone {
				team = keypart.Escape(t)
			}
		}
		if !st.Shadow {
			return team
		}
		if shadow == "" {
			shadow = strings.Clone(team) // a later rule's read may write over s's key
		}
	}
	return shadow
}

// recordOutcome tells s.Outcomes the fate of rec as o says it; teamRule is the rule whose
// key o.Team is (-1: none read), ro what the rules decided. A record whose row exists
// is counted in it (Agg.Bump); only a new row needs the whole Fate.
func (r *Router) recordOutcome(s *Scratch, now time.Time, rec *kgo.Record, js string, noJSON bool, o *Outcome, teamRule int, ro *ruleOutcome) {
	var kind outcome.Kind
	// A record an enforced rule dead-letters got no rule's action, whatever rules were
	// over it before: in a dry run too, whose row is then the dead letter's, accepted.
	acted := ro.action != 0 && o.Enforced != DeadLetter
	switch o.Route {
	case Accepted:
		kind = outcome.Accepted
		if o.Reason == ReasonTagged {
			kind = outcome.Tagged
		}
	case Overflow:
		kind = outcome.Overflow
	case RuleTopic:
		kind = outcome.Topic
	case Dropped:
		kind = outcome.Dropped
	default:
		kind, acted = outcome.DeadLetter, false
	}
	var rule, topic, key, team string
	if acted {
		rule = r.rules[ro.rule].Name
	}
	if kind == outcome.Topic {
		topic = r.rules[ro.rule].Topic
	}
	hashed := false
	decision := false // key is the key the decision was about, o.Team (after its team or not)
	if teamRule >= 0 {
		prefixed := false
		if st := &r.rules[teamRule]; st.teamFirst { // rowKey's usual case, here without its call
			key, team = o.Team, teamOf(o.Team, st.Key.Composite())
		} else {
			key, team, prefixed = r.rowKey(st, o.Team, rec, js, noJSON, s)
		}
		if !acted || kind == outcome.Accepted {
			key = team // no rule's key: the team's row
			decision = !prefixed && len(team) == len(o.Team)
		} else {
			decision = true
		}
		// o.Team is the touched rule's key still, so team is what was touched: its hash
		// is known. key is team when as long (team is o.Team's first field). Not so of
		// a team read by the outcomes' team field.
		hashed = !prefixed && teamRule == s.touchedRule && len(key) == len(team)
	}
	if hashed {
		if s.Outcomes.BumpHashed(s.touched, now, key, kind, rule, topic, o.Reason, len(rec.Value)) {
			return
		}
	} else if s.Outcomes.Bump(now, key, team, kind, rule, topic, o.Reason, len(rec.Value)) {
		return
	}
	f := outcome.Fate{At: now, Kind: kind, Rule: rule, Reason: o.Reason, Key: key, Team: team, Topic: topic, Bytes: len(rec.Value), Forced: acted && ro.forced && decision}
	if decision && len(key) != len(o.Team) {
		f.LimiterKey = o.Team // a rule not keyed by the team: the row's key is after the team's
	}
	// The threshold is of the key the decision was about (o.Team): a row keyed by that
	// key has it, from the limit that decided (the first one over, for a rule that acted
	// over a further limit); a team's row under a composite key has none of its own.
	if teamRule >= 0 && decision {
		// The limit the decision is of (ro.decided): a rule that did not act can have
		// been over its second limit (a shadow rule's, the team's dead_letter row after
		// its rule acted), and the first limit's source is not that threshold's.
		f.Threshold, f.Limiter = o.Decision.Threshold, r.rules[teamRule].Limiters[ro.decided]
	}
	s.Outcomes.Record(&f)
}

// touchAhead hashes the key the router's one JSON reader (a gate without a rules file, or
// a file whose first rule alone reads JSON: not a shared pass) reads as soon as it has
// found the key's field, before it looks through the rest of the value for a second
// member of that name, which on an event with the team first is most of the read, and
// has the lines the record then needs fetched with that hash: the slot of the key's
// limiter (lim, set by RouteInto for a rule of one limit on the wall clock:
// limit.Limiter.PrefetchHashed), and its outcomes row (outcome.Agg.Touch) when outcomes
// are on. Those lines, which miss the caches between two of a team's records under a
// gate's thousands of teams, then have that long to come, not the check's time alone,
// and the check takes the hash (CheckTallyHashed) rather than hashing the key again.
// Only a plain value, a string without escapes or a number, is touched: what fieldValue
// would return for it without allocating; the read then returns it as it is, the field
// having been found once. A value found twice (ambiguous) was touched for nothing.
type touchAhead struct {
	s   *Scratch
	lim *limit.Limiter // the limiter of the key being read, or nil (RouteInto)
	ok  bool           // touched for this read: v, at and h
	// by is the limiter whose seed h is by, its slot for v prefetched, or nil: a check of
	// v by it takes h. lim itself without outcomes; with them when the gate gave the Agg
	// lim's seed. Kept apart from lim, which RouteInto unsets once the key is read.
	by *limit.Limiter
	at int    // where v's member value starts
	v  string // the value touched
	h  uint64 // the hash of v: Touch's with outcomes on, else by lim's seed
}

// on reports whether a read of a key of one JSON field touches it: when outcomes are on,
// or a limiter is to be prefetched.
func (t *touchAhead) on() bool { return t.s.Outcomes != nil || t.lim != nil }

// touch touches the value at js[at], if it is a plain one.
func (t *touchAhead) touch(js string, at int) {
	if at <= 0 {
		return
	}
	var v string
	switch c := js[at]; {
	case c == '"':
		end := stringEnd(js, at+1)
		if end < 0 {
			return
		}
		v = js[at+1 : end]
		if v == "" || strings.IndexByte(v, '\\') >= 0 || !jsonString(v) {
			return
		}
	case c == '-' || c >= '0' && c <= '9':
		end := skipValue(js, at)
		if end < 0 || !numberWhole(js, end) || !jsonNumber(js[at:end]) {
			return
		}
		v = js[at:end]
	default:
		return
	}
	t.v, t.at, t.ok = v, at, true
	t.by = nil
	if out := t.s.Outcomes; out != nil {
		t.h = out.Touch(v)
		if t.lim != nil && t.lim.Seed() == out.Seed() {
			t.by = t.lim
		}
	} else {
		t.h, t.by = maphash.String(t.lim.Seed(), v), t.lim
	}
	if t.by != nil {
		t.by.PrefetchHashed(t.h)
	}
}

// hashOf returns the hash of key by lim's seed when touch made it (key being the value
// it touched, as the read returned it), and whether it did.
func (t *touchAhead) hashOf(lim *limit.Limiter, key string) (uint64, bool) {
	if t.ok && t.by == lim && lim != nil && len(key) == len(t.v) && unsafe.StringData(key) == unsafe.StringData(t.v) {
		return t.h, true
	}
	return 0, false
}

// recordShadow tells s.Outcomes that shadow rule st was over rec (key, its decision d, of
// its limit over: an index into st.Limiters, -1 for a forced or rotating key, whose d is
// the first limit's): a shadow_over row beside the record's own outcome.
func (r *Router) recordShadow(s *Scratch, now time.Time, rec *kgo.Record, js string, noJSON bool, st *ruleState, key string, d limit.Decision, over int, forced bool) {
	reason := ReasonRateLimited
	switch {
	case forced:
		reason = ReasonForced
	case d.Rotating:
		reason = ReasonKeyCardinality
	}
	rk, team, prefixed := r.rowKey(st, key, rec, js, noJSON, s)
	f := outcome.Fate{At: now, Kind: outcome.ShadowOver, Rule: st.Name, Reason: reason, Key: rk,
		Team: team, Bytes: len(rec.Value), Threshold: d.Threshold, Forced: forced, Limiter: st.Limiters[max(over, 0)]}
	if prefixed {
		f.LimiterKey = key
	}
	s.Outcomes.Record(&f)
	if s.ShadowOver != nil {
		s.ShadowOver(now, st.Name, rk, d)
	}
}

// rowKey is the key and team of the outcome row of rec under rule st, whose key of rec is
// key: key and its team (teamOf) when st's key starts with the outcomes' team field
// (teamFirst); else the record's team read by that field, escaped as a composite key's
// part, and key after it (team:key, key escaped too when of one field), so that a rule
// keyed by something other than the team (an event type, an IP) files its rows under
// the team whose records it limited, not under an event or an address as if it were a
// team. A record whose team that field cannot read has no team: key alone, escaped as
// after a team (two fields then never read as one), in the rows of no team, not under
// an event's value as a team of its own. prefixed is whether the row's key is not key
// itself (LimiterKey reads it back). The strings may alias key, rec or s.okey (valid
// until the next rowKey with s).
func (r *Router) rowKey(st *ruleState, key string, rec *kgo.Record, js string, noJSON bool, s *Scratch) (rowKey, team string, prefixed bool) {
	if st.teamFirst {
		return key, teamOf(key, st.Key.Composite()), false
	}
	s.okey = s.okey[:0]
	if t, ok := r.readTeam(rec, js, noJSON, s); ok {
		s.okey = append(keypart.Append(s.okey, t), ':')
	}
	n := max(len(s.okey)-1, 0)
	if st.Key.Composite() {
		s.okey = append(s.okey, key...) // its parts escaped already
	} else {
		s.okey = keypart.Append(s.okey, key)
	}
	k := bytesString(s.okey)
	return k, k[:n], true
}

// LimiterKey is the key rule's limiter decided on for an outcome row of this router's
// with key and team (Row.Key, Row.Team): key itself, for a rule keyed by the team (its
// key's first field the outcomes' team field); for another, key without its team
// (rowKey), read back from its escape when of one field. "" for a rule the router does
// not have. A replay's report finds a row's key's levels by it.
func (r *Router) LimiterKey(rule, team, key string) string {
	i := slices.IndexFunc(r.rules, func(st ruleState) bool { return st.Name == rule })
	if i < 0 {
		return ""
	}
	st := &r.rules[i]
	if st.teamFirst {
		return key
	}
	if team != "" {
		key = strings.TrimPrefix(key, team+":")
	}
	if !st.Key.Composite() {
		key = keypart.Value(key)
	}
	return key
}

// readTeam reads rec's team by the outcomes' team field (Router.teamKey): from the shared
// pass's fields when it has one (js, noJSON as RouteInto's), else by itself. A key of
// one field never writes s's key buffer: what a rule read stays as it is.
func (r *Router) readTeam(rec *kgo.Record, js string, noJSON bool, s *Scratch) (string, bool) {
	k := &r.teamKey
	if k.src == sourceJSON && k.idx != nil && r.plan.shared {
		if noJSON {
			return "", false
		}
		v, code := k.sharedValue(js, 0, s.at, s)
		// As a rule's key: a team longer than GATE_MAX_KEY_BYTES is none (a row holding a
		// team of 600 KB would be refused by the topic, and its retries stop polling).
		return v, code == reasonNone && len(v) <= r.maxKey
	}
	v, code := k.team(rec, s, r.maxKey)
	return v, code == reasonNone
}
