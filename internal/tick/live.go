// The fleet's live key, {prefix}:live: each running gate sets it once a minute, with its
// clock check, to expire LiveTTL later, so operator tools can tell a prefix some gate set
// within LiveTTL from one no gate reads. Setting it is best effort: a failure is left to
// the tick to report, as it meets the same Redis.

package tick

import (
	"context"
	"strings"
	"time"
)

// LiveTTL is how long a fleet's live key ({prefix}:live) outlives the last gate that set
// it. Run sets it once a minute, with its clock check, so a prefix whose key is missing
// has had no running gate for LiveTTL.
const LiveTTL = 10 * time.Minute

// LiveKeyFor is the key the gates of a fleet keep set while they run: {prefix}:live, its
// value the last setter's writer name. No counter, hold, profile or sequence key has two
// parts, so none can be it. The operator's tools read it to tell a prefix a fleet uses
// from one no gate reads: a chart release's gates use the release's name as their prefix,
// and an override written under the default one would change nothing, silently.
func LiveKeyFor(prefix string) string { return prefix + ":live" }

// liveRules starts the rules' part of a live key's value.
const liveRules = " rules="

// LiveValue is what the live key holds: writer, and with a rules file (rules not empty)
// " rules=" and the rules' names, comma separated (a rule's name holds neither a space
// nor a comma).
func LiveValue(writer string, rules []string) string {
	if len(rules) == 0 {
		return writer
	}
	return writer + liveRules + strings.Join(rules, ",")
}

// LiveRulesOf reads a live key's value (LiveValue): the rules of the gate that set it,
// and whether it runs a rules file. A gate older than the rules' part sets its writer
// alone, read as a gate without rules.
func LiveRulesOf(v string) (rules []string, withRules bool) {
	i := strings.Index(v, liveRules)
	if i < 0 {
		return nil, false
	}
	return strings.Split(v[i+len(liveRules):], ","), true
}

// markLive sets the live key and, at now (the clock check's wall clock), compares the
// fleet's limits (checkAgreement); checkClock calls it, once a minute. A failure is the
// tick's to report (the same Redis, the same ACL: SET on the prefix's keys).
func (t *Ticker) markLive(ctx context.Context, now time.Time) {
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	_ = t.instances[0].Set(cctx, LiveKeyFor(t.cfg.KeyPrefix), LiveValue(t.cfg.Writer, t.cfg.LiveRules), LiveTTL).Err()
	t.m.commands.WithLabelValues(cmdSet).Inc()
	t.checkAgreement(ctx, now)
}
