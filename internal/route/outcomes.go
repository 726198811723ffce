package route

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// What RouteInto tells Scratch.Outcomes. A record's own outcome is keyed by the key of the
// rule whose action it got; a record no rule acted on (accepted, or dead-lettered) by its
// team, the first field of the first rule's key checked, so that a per-user rule makes a
// row per user only for the users it limits.

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

// TeamOf returns rec's team as its outcome row has it (the first rule's key's team), or
// "" when it cannot be read: for a record the consumer decides itself (dead-lettered
// after the broker refused it), whose row must count under its team. It may alias rec or
// s (valid until s is used again).
func (r *Router) TeamOf(rec *kgo.Record, s *Scratch) string {
	st := &r.rules[0]
	key, code := st.Key.team(rec, s, r.maxKey) // on its own, not from a shared pass
	if code != reasonNone {
		return ""
	}
	return teamOf(key, st.Key.Composite())
}

// recordOutcome tells s.Outcomes the fate of rec as o says it; teamRule is the rule whose
// key o.Team is (-1: none read), ro what the rules decided.
func (r *Router) recordOutcome(s *Scratch, now time.Time, rec *kgo.Record, o *Outcome, teamRule int, ro *ruleOutcome) {
	f := outcome.Fate{At: now, Reason: o.Reason, Bytes: len(rec.Value), Threshold: o.Decision.Threshold}
	acted := ro.action != 0
	switch o.Route {
	case Accepted:
		f.Kind = outcome.Accepted
		if o.Reason == ReasonTagged {
			f.Kind = outcome.Tagged
		}
	case Overflow:
		f.Kind = outcome.Overflow
	case RuleTopic:
		f.Kind = outcome.Topic
		f.Topic = r.rules[ro.rule].Topic
	case Dropped:
		f.Kind = outcome.Dropped
	default:
		f.Kind, acted = outcome.DeadLetter, false
	}
	if acted {
		f.Rule, f.Forced = r.rules[ro.rule].Name, ro.forced
	}
	if teamRule >= 0 {
		st := &r.rules[teamRule]
		f.Key = o.Team
		f.Team = teamOf(o.Team, st.Key.Composite())
		if !acted || f.Kind == outcome.Accepted {
			f.Key = f.Team // no rule's key: the team's row
		}
		f.Limiter = st.Limiters[0]
	} else {
		f.Threshold = 0
	}
	s.Outcomes.Record(&f)
}

// recordShadow tells s.Outcomes that shadow rule st was over rec (key, its decision d):
// a shadow_over row beside the record's own outcome.
func (r *Router) recordShadow(s *Scratch, now time.Time, rec *kgo.Record, st *ruleState, key string, d limit.Decision, forced bool) {
	reason := ReasonRateLimited
	switch {
	case forced:
		reason = ReasonForced
	case d.Rotating:
		reason = ReasonKeyCardinality
	}
	s.Outcomes.Record(&outcome.Fate{At: now, Kind: outcome.ShadowOver, Rule: st.Name, Reason: reason, Key: key,
		Team: teamOf(key, st.Key.Composite()), Bytes: len(rec.Value), Threshold: d.Threshold, Forced: forced, Limiter: st.Limiters[0]})
}
