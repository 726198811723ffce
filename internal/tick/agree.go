// The fleet's agreement on its limits. Gates that share a Redis prefix count each key in
// one counter, and a counter is only right when every gate counts into it alike: a gate
// whose rule counts every record (divert) beside gates that count what they admit (cap)
// took a team to 13 % of its limit, one with another window to 1.5 ×, one with another
// threshold split the team's records by the partitions they landed on, and nothing told
// the operator (a review, three gates given different rules files). A fleet disagrees
// for a minute or so in every rules change (each gate reads the file on its own); one
// that keeps disagreeing has a gate left behind, or given other settings.
//
// So once a minute, with the live key, each gate adds the hash of its limits
// (Config.LiveLimits: every rule's key, match, limits, mode, cost, action...) to the
// minute's key, {prefix}:limits:{minute}:hashes, and reads the minute before's, whole by then:
// the hashes of every gate that added one in that minute. More than one is a gauge
// (gate_fleet_limit_variants) at once, and a warning once it has lasted agreeWarnAfter
// checks, again at most every agreeWarnEvery while it lasts; the line names this gate's
// hash and the others', and every gate's start and rules lines name its own, so the
// operator finds the odd one out. It is best effort: a failure is left to the tick to
// report (the same Redis, the same ACL: EVAL of GET and SET, as the write script).

package tick

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/throttle"
)

// LimitsHash is the hash of a gate's limits as the fleet compares them: desc is
// Config.LiveLimits, a text that names every setting that changes how a key is counted
// or judged. Twelve hex digits: two fleets' sets of limits, not a secret.
func LimitsHash(desc string) string {
	h := sha256.Sum256([]byte(desc))
	return hex.EncodeToString(h[:6])
}

// LimitsKeyFor is the key the gates of a fleet add their limits' hashes to in the minute
// of the Unix epoch minute: {prefix}:limits:{minute}:hashes. No team's key ends so (a
// counter's last part is its epoch, a number; then :hold and :profile). Without its last
// part it was team "limits"'s counter in standalone and sentinel mode, in the minute its
// epoch's number was the minute's (every minute, on a 60-second window): any sender
// could name that team, whose count writes then failed on the check's value, its count
// reaching no other gate (a security review). Renamed rather than the team escaped: no
// released gate writes this key, and every team keeps the key it always had.
func LimitsKeyFor(prefix string, minute int64) string {
	return prefix + ":limits:" + strconv.FormatInt(minute, 10) + ":hashes"
}

// agreeScript adds ARGV[1] (an entry: limitsEntry) to the minute's key unless it holds
// it, the key living ARGV[2] ms, and returns what the key holds. A key grown past 4 KB
// (tens of variants: no fleet's) takes no more, so that a bug cannot grow it without bound.
const agreeScript = `
local v = redis.call('GET', KEYS[1]) or ''
if not string.find(v, ARGV[1], 1, true) and #v < 4096 then
  v = v .. ARGV[1]
  redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
end
return v
`

// limitsEntry is a gate's entry in a minute's key: its limits' hash, then, with a rules
// file, its rules' names (a rule's name holds neither ',' nor ';'), "HASH=r1,r2;" ("HASH=;"
// without one). The names are what gate overrides reads to tell whether any gate reads a
// rule's overrides hash (LimitsRulesOf): every gate's, where the live key holds the last
// setter's alone.
func limitsEntry(hash string, rules []string) string {
	return hash + "=" + strings.Join(rules, ",") + ";"
}

// LimitsRulesOf reads minute keys' values (LimitsKeyFor): the rules of every gate that
// added an entry, each once, and whether any of them runs a rules file.
func LimitsRulesOf(values ...string) (rules []string, withRules bool) {
	for _, v := range values {
		for e := range strings.SplitSeq(v, ";") {
			_, names, ok := strings.Cut(e, "=")
			if !ok || names == "" {
				continue
			}
			withRules = true
			for n := range strings.SplitSeq(names, ",") {
				if !slices.Contains(rules, n) {
					rules = append(rules, n)
				}
			}
		}
	}
	return rules, withRules
}

// agreeWarnAfter is how many checks in a row (a minute apart) must see several hashes
// before the gate warns: a rules change leaves the fleet split for a minute or two (the
// ConfigMap reaches each pod within a minute, each gate reads it within 5 s), and that is
// not news.
const agreeWarnAfter = 3

// agreeWarnEvery is how often the warning is repeated while the fleet disagrees.
const agreeWarnEvery = 10 * time.Minute

// agreeCheck is the tick's part of the fleet's agreement.
type agreeCheck struct {
	hash string    // this tick's limits' hash (LimitsHash of Config.LiveLimits)
	run  *agreeRun // Config.Warnings's, or the tick's own
}

// checkAgreement adds this gate's limits' hash to the minute's key and counts the hashes
// of the minute before (markLive calls it, once a minute). Without Config.LiveLimits (a
// tick of tests) it does nothing.
func (t *Ticker) checkAgreement(ctx context.Context, now time.Time) {
	a := &t.agree
	if t.cfg.LiveLimits == "" {
		return
	}
	if a.hash == "" {
		a.hash = LimitsHash(t.cfg.LiveLimits)
	}
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	minute := now.Unix() / 60
	pipe := t.instances[0].Pipeline()
	// Each minute's key lives three minutes: read a minute after, whatever the clocks.
	add := pipe.Eval(cctx, agreeScript, []string{LimitsKeyFor(t.cfg.KeyPrefix, minute)}, limitsEntry(a.hash, t.cfg.LiveRules), (3 * time.Minute).Milliseconds())
	before := pipe.Get(cctx, LimitsKeyFor(t.cfg.KeyPrefix, minute-1))
	_, _ = pipe.Exec(cctx) // each command's error is read below
	t.m.commands.WithLabelValues(cmdEval).Inc()
	t.m.commands.WithLabelValues(cmdGet).Inc()
	if add.Err() != nil {
		return // told of by the tick, which meets the same Redis
	}
	v, err := before.Result()
	if err != nil {
		// redis.Nil: no gate added a hash in the minute before (the fleet just started),
		// nothing to compare; else told of by the tick.
		return
	}
	hashes := hashesOf(v)
	t.m.limitVariants.Set(float64(len(hashes)))
	r := a.run
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.warn == nil {
		r.warn = throttle.NewEvery(agreeWarnEvery, t.clockCheck.wall)
	}
	if r.read == minute {
		return // counted by this minute's earlier check
	}
	r.read = minute
	if len(hashes) <= 1 {
		if r.warned {
			r.warn.Reset() // a split after this one is told of at once
			t.log.Info("the fleet's gates enforce the same limits again", "redis_prefix", t.cfg.KeyPrefix, "limits_hash", a.hash)
		}
		r.split, r.warned = 0, false
		return
	}
	r.split++
	if r.split < agreeWarnAfter {
		return
	}
	if ok, _ := r.warn.Allow(); !ok {
		return
	}
	r.warned = true
	others := slices.DeleteFunc(slices.Clone(hashes), func(h string) bool { return h == a.hash })
	t.log.Warn("the fleet's gates enforce different limits under one Redis prefix: its counters are counted in different ways, so teams are limited too early or too late; "+
		"find the gates whose start or rules line has another limits_hash and give every gate the same rules file and GATE_* limits (docs/operations.md, GateFleetLimitsDisagree)",
		"redis_prefix", t.cfg.KeyPrefix, "limits_hash", a.hash, "other_hashes", others, "minutes", r.split)
}

// hashesOf reads a minute's key: its hashes, each once, in the order added.
func hashesOf(v string) []string {
	var out []string
	for e := range strings.SplitSeq(v, ";") {
		if h, _, _ := strings.Cut(e, "="); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
