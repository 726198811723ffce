package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

const overridesUsage = `Usage: gate overrides [-rule RULE] list | set TEAM LIMIT | delete TEAM

Shows or changes the live per-team limits in the hash {GATE_REDIS_PREFIX}:overrides of the
first instance in GATE_REDIS_URLS; with rules (GATE_RULES_FILE), those of one rule, in
{GATE_REDIS_PREFIX}:rule:{RULE}:overrides, TEAM being a key of that rule (TEAM:USER for a
json:team_id+distinct_id rule) and LIMIT its first limit's threshold. Every gate reads it
every GATE_OVERRIDES_REFRESH and lays it over its GATE_OVERRIDES (then GATE_THRESHOLD), a
rule's over the rule's thresholds (GATE_OVERRIDES is unset with rules). list reads it as
the gates do, in short commands, and refuses a hash of more than
GATE_OVERRIDES_MAX_ENTRIES teams. -rule may come before the action or
after it (gate overrides set -rule RULE TEAM LIMIT); a TEAM that starts with '-' goes
after "--".
`

// overridesFlags is gate overrides' flag set, -rule bound to rule.
func overridesFlags(rule *string) *flag.FlagSet {
	fs := flag.NewFlagSet("overrides", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(rule, "rule", "", "the `RULE` whose overrides to show or change (with GATE_RULES_FILE: required)")
	return fs
}

// overridesCmd runs `gate overrides ...` against the Redis the environment names.
// clk dates the change (the hash's marker field).
func overridesCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	// bad is a command not written as the usage says, which it prints; badValue a team or
	// a limit the command cannot take, said alone: the usage printed before it buried the
	// one line that says what is wrong (a key's escaping, say).
	badValue := func(msg string) error { return &cli.UsageError{Msg: "overrides: " + msg} }
	bad := func(msg string) error {
		writeUsage(stderr, overridesUsage, overridesFlags(new(string)))
		return badValue(msg)
	}
	rule := new(string)
	fs := overridesFlags(rule)
	args, err := cli.ParseInterleaved(fs, args) // -rule before the verb or after it
	if err != nil {
		writeUsage(stderr, overridesUsage, fs)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(args) == 0 {
		return bad("want list, set TEAM LIMIT or delete TEAM")
	}
	verb, args := args[0], args[1:]
	var team string
	var lim int64
	switch verb {
	case "list":
		if len(args) != 0 {
			return bad(fmt.Sprintf("list takes no arguments, got %q", args))
		}
	case "set":
		if len(args) != 2 {
			return bad(fmt.Sprintf("set takes TEAM LIMIT, got %q", args))
		}
		team = args[0]
		n, err := overrides.ParseLimit(args[1])
		if err != nil {
			return badValue(fmt.Sprintf("set %s: %v", cli.Shown(team), err))
		}
		lim = n
	case "delete":
		if len(args) != 1 {
			return bad(fmt.Sprintf("delete takes TEAM, got %q", args))
		}
		team = args[0]
	default:
		return bad(fmt.Sprintf("unknown action %q (want list, set or delete)", verb))
	}
	// delete takes the empty team: an entry written by hand can hold one, and it makes
	// every gate refuse the whole hash until it is removed.
	if verb == "set" && team == "" || (verb == "set" || verb == "delete") && (team == overrides.MarkerField || team == overrides.VersionField) {
		return badValue(fmt.Sprintf("team %q cannot be overridden", team))
	}
	// A team that starts or ends with a character terminals do not show (copied with a
	// team id from a page or a chat) names a key no record has: refused, as GATE_OVERRIDES'
	// is. delete refuses it only where the hash holds no such entry (overridesDo): set
	// took such keys before, and delete is how they are cleaned up.
	if verb == "set" {
		if r, what := keypart.OddAtEdge(team); r != 0 {
			return badValue(oddKey(verb, team, r, what))
		}
	}

	cfg, err := config.Load(getenv, names)
	if err != nil {
		return err
	}
	if *rule != "" && !rules.ValidName(*rule) {
		// No gate reads the hash of a name no rule can have (gate:rule:a:b:overrides).
		return bad(fmt.Sprintf("-rule %q is no rule's name (1 to 40 of a-z 0-9 _ -, starting and ending with a letter or digit)", *rule))
	}
	r, err := checkRule(cfg, *rule)
	if err != nil {
		return err
	}
	keyFrom := cfg.KeyFrom.KeyFrom
	unchecked := "" // a note: the key could not be checked here
	switch {
	case r != nil:
		keyFrom = r.Key
	case *rule != "":
		keyFrom = route.KeyFrom{} // taken as given: its key is not known here
		if verb == "set" {
			unchecked = fmt.Sprintf("note: %s not checked against rule %q's key: GATE_RULES_FILE is not set here (set it to the gates' file to have it checked); "+
				"a composite key joins its values with ':', each value's ':' written %%3A and '%%' %%25 (phc_x:user%%3A1)\n", cli.Shown(team), *rule)
		}
	}
	// A key the gates never build names nothing they count: refused, as GATE_OVERRIDES'
	// and a force list's are. delete takes any key, to clean one up.
	if verb == "set" {
		if err := keyFrom.CheckKey(team, cfg.MaxKeyBytes); err != nil {
			return badValue(fmt.Sprintf("set %s: %v", cli.Shown(team), err))
		}
	}
	ropts, err := cfg.RedisOptions()
	if err != nil {
		return err
	}
	// The overrides hash lives where the gates read it: the first instance in standalone
	// mode, its slot's node in cluster mode, the primary in sentinel mode.
	if tick.Mode(cfg.RedisMode) == tick.ModeStandalone {
		cfg.RedisURLs = cfg.RedisURLs[:1]
	}
	// With Redis down, the error below says so once: go-redis's own lines on each failed
	// dial go to the log, at debug level (GATE_LOG_LEVEL=debug shows them).
	redisLogsTo(gate.NewLogger(cfg, stderr))
	clients, err := cfg.DialRedis(ropts, config.Reload{Clock: clk})
	if err != nil {
		return fmt.Errorf("configuring the Redis client: %w", err)
	}
	defer clients[0].Close()
	c := clients[0]
	ocfg := cfg.OverridesConfig()
	key := ocfg.Key
	if *rule != "" {
		key = overrides.Key(cfg.RulePrefix(*rule))
	}
	timeout := 5 * time.Second
	if verb == "list" {
		timeout = ocfg.Timeout // a whole read, of up to GATE_OVERRIDES_MAX_ENTRIES teams
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	note := warnNoFleet(ctx, c, cfg.RedisPrefix, *rule, key, clk.Now(), stderr)
	if err := overridesDo(ctx, c, cfg, limitOf(cfg, getenv, *rule, r), verb, key, team, lim, clk, stdout); err != nil {
		if _, usage := errors.AsType[*cli.UsageError](err); usage {
			return err // the team, not Redis
		}
		// Name the instance tried: a timeout from go-redis names none.
		return fmt.Errorf("%w (GATE_REDIS_URLS=%s)", err, cfg.RedisURLs)
	}
	_, err = io.WriteString(stderr, unchecked+note)
	return err
}

// overridesDo does verb (list, set or delete) on the overrides hash key through c, whose
// live set is laid over ol.
func overridesDo(ctx context.Context, c redis.UniversalClient, cfg config.Config, ol overriddenLimit, verb, key, team string, lim int64, clk clock.Clock, stdout io.Writer) error {
	switch verb {
	case "set":
		// For the note below only: Set reports a Redis error itself.
		existed, existsErr := c.Exists(ctx, key).Result()
		// Refused when it would leave the hash over GATE_OVERRIDES_MAX_ENTRIES: every gate
		// refuses such a hash as too large and keeps its limits, so neither this override
		// nor any other change to the hash would apply.
		maxEntries := cfg.OverridesConfig().MaxEntries
		if maxEntries <= 0 {
			maxEntries = overrides.DefaultMaxEntries
		}
		if teams, err := overrides.SetWithin(ctx, c, key, team, lim, clk.Now(), maxEntries); errors.Is(err, overrides.ErrTooLarge) {
			return fmt.Errorf("%w: %s not set: %s holds %d teams, and the gates read no hash of more than %d (GATE_OVERRIDES_MAX_ENTRIES): they would keep their limits, applying neither this nor any other change to it; delete teams from it first (gate overrides delete), or raise GATE_OVERRIDES_MAX_ENTRIES on every gate",
				overrides.ErrTooLarge, cli.Shown(team), key, teams, maxEntries)
		} else if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "set %s = %d%s in %s; gates apply it within GATE_OVERRIDES_REFRESH (%s as set here: the gates' own may differ)\n", cli.Shown(team), lim, ol.unit(), key, durtext.String(cfg.OverridesRefresh)); err != nil {
			return err
		}
		// An entry the gates cannot read (written by hand) has every gate refuse the whole
		// hash and keep the set it last read: this override would never apply, and the
		// line above would say it does.
		if h, err := overrides.Read(ctx, c, key, cfg.OverridesConfig().MaxEntries); err == nil {
			if _, err := overrides.Parse(h); err != nil {
				if _, err := fmt.Fprintf(stdout, "warning: every gate refuses %s as it stands, keeping the set it last read, so this override does not apply: %v; delete or fix that entry (gate overrides delete)\n", key, err); err != nil {
					return err
				}
			}
		}
		if existsErr == nil && existed == 0 {
			if _, err := fmt.Fprintf(stdout, "%s did not exist: the live set is now %s alone, in place of any set the gates kept from a lost hash (if it was lost, restore it: docs/operations.md, Overrides hash lost)\n", key, cli.Shown(team)); err != nil {
				return err
			}
		}
		if slices.Contains(ol.force, team) {
			// A forced key takes the action whatever its limit: set, the override changes
			// nothing until the key leaves the list, and the operator must hear it.
			_, err := fmt.Fprintf(stdout, "note: %s is in %s: the gates %s (reason forced) whatever its limit; this override applies once it is taken out of it\n", cli.Shown(team), ol.forceName, ol.forced)
			return err
		}
		if ol.unknown {
			// Nothing here says what the gates force: not said as if none were.
			_, err := fmt.Fprintf(stdout, "note: this environment sets none of the gates' limits (GATE_THRESHOLD, GATE_LIMITS, GATE_FORCE_OVERFLOW, GATE_RULES_FILE): whether the gates force %s is not known here\n", cli.Shown(team))
			return err
		}
		return nil
	case "delete":
		shown := cli.Shown(team)
		if team == "" {
			shown = `""` // shown as it is, it would be nothing
		}
		found, err := overrides.Delete(ctx, c, key, team, clk.Now())
		if errors.Is(err, overrides.ErrMissing) {
			_, err := fmt.Fprintf(stdout, "%s does not exist; nothing changed (gates that read it before keep the set they last read: docs/operations.md, Overrides hash lost)\n", key)
			return err
		}
		if err != nil {
			return err
		}
		if !found {
			if r, what := keypart.OddAtEdge(team); r != 0 {
				// Most likely the team meant, copied with a character no terminal shows.
				return &cli.UsageError{Msg: fmt.Sprintf("overrides: %s; %s holds no such entry, nothing changed", oddKey("delete", team, r, what), key)}
			}
			_, err := fmt.Fprintf(stdout, "%s has no live override in %s; nothing changed\n", shown, key)
			return err
		}
		_, err = fmt.Fprintf(stdout, "deleted %s from %s; it falls back to %s within GATE_OVERRIDES_REFRESH (%s), both as set here%s\n", shown, key, ol.fallback(team), durtext.String(cfg.OverridesRefresh), ol.notTheFleets())
		return err
	}
	live, updated, version, err := overrides.List(ctx, c, key, cfg.OverridesConfig().MaxEntries)
	if err != nil {
		return err
	}
	if updated == "" && len(live) == 0 {
		// No hash (List reads a missing one as empty; the commands keep a marker in any
		// other): said, as set and delete say it, since gates that read it before keep
		// enforcing the set they last read, and "no live overrides" alone reads as none in
		// force.
		_, err := fmt.Fprintf(stdout, "no live overrides in %s: %s does not exist (gates that read it before keep the set they last read: docs/operations.md, Overrides hash lost)\n", key, key)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if ol.bytes {
		fmt.Fprintf(tw, "TEAM\tLIMIT (BYTES)\n")
	} else {
		fmt.Fprintf(tw, "TEAM\tLIMIT\n")
	}
	for _, t := range slices.Sorted(maps.Keys(live)) {
		fmt.Fprintf(tw, "%s\t%s\n", cli.Shown(t), strconv.FormatInt(live[t], 10))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if updated == "" {
		updated = "at an unknown time (no " + overrides.MarkerField + " field)"
	}
	// The version (raised by each set and delete) tells an older set from a newer one
	// across a failover (docs/operations.md, Overrides hash older). On this line, not one
	// of its own, which the runbook's copy (awk NF == 2) would take for a team.
	shownVersion := "none (no " + overrides.VersionField + " field)"
	if version > 0 {
		shownVersion = strconv.FormatInt(version, 10)
	}
	_, err = fmt.Fprintf(stdout, "%s in %s, last changed %s, version %s\n", counted(int64(len(live)), "live override"), key, updated, shownVersion)
	return err
}

// oddKey says that verb's team starts or ends with r, what keypart.OddAtEdge says it is.
func oddKey(verb, team string, r rune, what string) string {
	return fmt.Sprintf("%s %s: starts or ends with %s (U+%04X), which terminals do not show: no record has that key; remove it", verb, cli.Shown(team), what, r)
}

// checkRule checks -rule against the environment: a gate with rules reads one hash per
// rule, so -rule is needed and must name one of them, which it returns; without
// GATE_RULES_FILE here it returns nil, a rule being taken as given (an operator's shell
// may lack the file).
func checkRule(cfg config.Config, rule string) (*rules.Rule, error) {
	if cfg.RulesFile == "" {
		return nil, nil
	}
	set, err := rules.ReadFile(cfg.RulesFile, cfg.RulesOptions())
	if err != nil {
		return nil, config.Problems{fmt.Errorf("GATE_RULES_FILE=%q: %w", cfg.RulesFile, err)}
	}
	var names []string
	for i, r := range set.Rules {
		if r.Name == rule {
			return &set.Rules[i], nil
		}
		names = append(names, r.Name)
	}
	if rule == "" {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("overrides: this gate runs rules (GATE_RULES_FILE): name one with -rule (%s)", strings.Join(names, ", "))}
	}
	return nil, &cli.UsageError{Msg: fmt.Sprintf("overrides: no rule %q in %s (it has %s)", rule, cfg.RulesFile, strings.Join(names, ", "))}
}

// overriddenLimit is what gate overrides knows of the limit a live set is laid over: its
// forced keys, and what a key falls back to once its live override is deleted.
type overriddenLimit struct {
	force     []string
	forceName string // where force comes from, for a message
	forced    string // what the gates do with a forced key's records, for a message
	// base are the static overrides under the live set (GATE_OVERRIDES; none with rules).
	base      map[string]int64
	threshold int64  // the default threshold; 0: not known here (a rule taken as given)
	thrName   string // what sets it, for a message
	adaptive  string // the setting that makes thresholds learned, "" when they are not
	// unknown: the environment sets none of the limit's variables, its figures being the
	// defaults, which the gates' own may well not be.
	unknown bool
	// bytes: the limit counts bytes of value (GATE_COST=bytes, a rule's cost: bytes), so
	// an override is bytes a window, and the messages say so.
	bytes bool
}

// unit is what follows a limit's figure in a message: " bytes" for a limit in bytes.
func (ol overriddenLimit) unit() string {
	if ol.bytes {
		return " bytes"
	}
	return ""
}

// notTheFleets is what a message giving ol's figures adds when they are this
// environment's defaults only.
func (ol overriddenLimit) notTheFleets() string {
	if ol.unknown {
		return ": this environment sets none of the gates' limits (GATE_THRESHOLD, GATE_LIMITS, GATE_OVERRIDES, GATE_RULES_FILE), so these are the defaults, not the gates'; run it with their GATE_* variables"
	}
	return ": the gates' own may differ"
}

// limitOf is the limit the live overrides of rule ("": the gate's without rules) are laid
// over, r being that rule as the rules file has it (nil: no file here).
func limitOf(cfg config.Config, getenv func(string) string, rule string, r *rules.Rule) overriddenLimit {
	switch {
	case r != nil:
		ol := overriddenLimit{force: r.Force, forceName: "rule " + rule + "'s force list", forced: "give its records the rule's action",
			threshold: r.Limits[0].Threshold, thrName: "rule " + rule + "'s threshold", bytes: r.Cost == route.CostBytes}
		if r.Adaptive {
			ol.adaptive, ol.thrName = "rule "+rule+"'s threshold_mode: adaptive", "its threshold" // the rule named once
		}
		return ol
	case rule != "":
		// A rule's key has no GATE_OVERRIDES or GATE_THRESHOLD under it (a gate with rules
		// has them unset): it falls back to the rule's own limits, not known here.
		return overriddenLimit{thrName: "rule " + rule + "'s threshold"}
	}
	ol := overriddenLimit{force: cfg.ForceOverflow, forceName: "GATE_FORCE_OVERFLOW", forced: "send its records to overflow", base: cfg.Overrides,
		threshold: cfg.Threshold, thrName: "GATE_THRESHOLD", bytes: cfg.Cost.Cost == route.CostBytes}
	if strings.TrimSpace(getenv("GATE_LIMITS")) != "" {
		ol.thrName = "GATE_LIMITS' first threshold" // GATE_THRESHOLD is then unset
	}
	if cfg.LimitConfig().Adaptive != nil {
		ol.adaptive = "GATE_THRESHOLD_MODE=adaptive"
	}
	ol.unknown = !slices.ContainsFunc([]string{"GATE_THRESHOLD", "GATE_LIMITS", "GATE_OVERRIDES", "GATE_FORCE_OVERFLOW", "GATE_THRESHOLD_MODE"},
		func(v string) bool { return strings.TrimSpace(getenv(v)) != "" })
	return ol
}

// fallback says what team's threshold is once its live override is deleted, as the gates
// that share this environment have it: a static override, else a learned threshold, else
// the default. It said "GATE_OVERRIDES or GATE_THRESHOLD" whatever they were, and a team
// back on a learned threshold of a few thousand was read as back on a million.
func (ol overriddenLimit) fallback(team string) string {
	if t, ok := ol.base[team]; ok {
		return fmt.Sprintf("its GATE_OVERRIDES limit, %d%s,", t, ol.unit())
	}
	thr := ol.thrName
	if ol.threshold > 0 {
		thr = fmt.Sprintf("%s, %d%s,", ol.thrName, ol.threshold, ol.unit())
	}
	if ol.adaptive != "" {
		return fmt.Sprintf("its learned threshold (%s; %s until it has one)", ol.adaptive, thr)
	}
	return thr
}

// warnNoFleet warns on w when no gate has run under prefix for tick.LiveTTL: its live
// key is missing. An override written under a prefix no gate reads changes nothing, and a
// chart release's gates use the release's name, not the default prefix. Likewise when the
// gate that last set the key runs a rules file (tick.LiveValue) and hash, the overrides
// hash of rule (none: the gate's own), is not one of its rules': run from a shell without
// GATE_RULES_FILE and without -rule, gate overrides wrote {prefix}:overrides, which no gate
// with rules reads, and said the gates apply it. And when the gates run no rules file and
// hash is a rule's (-rule), which none of them reads. It only warns: an override may be set
// before the fleet starts or its rules file changes, and gates older than the live key do
// not set it. When the key cannot be read, it returns a note saying so, for the caller to
// print once its command has worked: when that fails too (Redis is down), its error says
// why, alone.
//
// The rules are every gate's that added its limits to the fleet's minute keys in the last
// two minutes before now (tick.LimitsRulesOf), when any did: the live key holds the last
// setter's alone, and in a fleet whose gates ran different rules files the warning came
// and went, saying no gate read a hash one of them did (a review). Gates older than those
// keys leave the live key's.
func warnNoFleet(ctx context.Context, c redis.UniversalClient, prefix, rule, hash string, now time.Time, w io.Writer) (note string) {
	key := tick.LiveKeyFor(prefix)
	v, err := c.Get(ctx, key).Result()
	rules, withRules := tick.LiveRulesOf(v)
	whose := fmt.Sprintf("as the last to set %s says", key)
	minute := now.Unix() / 60
	var minutes []string
	for _, m := range []int64{minute, minute - 1} {
		if lv, lerr := c.Get(ctx, tick.LimitsKeyFor(prefix, m)).Result(); lerr == nil {
			minutes = append(minutes, lv)
		}
	}
	if len(minutes) > 0 {
		rules, withRules = tick.LimitsRulesOf(minutes...)
		whose = "as every gate that compared its limits in the last two minutes says"
	}
	if err == nil && !withRules && rule != "" {
		_, _ = fmt.Fprintf(w, "warning: the gates with GATE_REDIS_PREFIX=%q run no rules file (%s), and this command names rule %q: "+
			"no gate reads %s. Without -rule it writes the hash they read\n", prefix, whose, rule, hash)
	}
	if err == nil && withRules && !slices.Contains(rules, rule) {
		what := "names no rule (-rule)"
		if rule != "" {
			what = fmt.Sprintf("names rule %q", rule)
		}
		_, _ = fmt.Fprintf(w, "warning: the gates with GATE_REDIS_PREFIX=%q run a rules file, of rules %s (%s), and this command %s: "+
			"no gate reads %s. Set GATE_RULES_FILE to theirs and name the rule with -rule\n", prefix, strings.Join(rules, ", "), whose, what, hash)
	}
	switch {
	case errors.Is(err, redis.Nil):
		_, _ = fmt.Fprintf(w, "warning: no gate has run with GATE_REDIS_PREFIX=%q in the last %s (%s is not set): "+
			"no gate reads these overrides. Gates deployed by the Helm chart use the release's name as their prefix; "+
			"run this inside one of their pods (the chart's NOTES print the command) or set GATE_REDIS_PREFIX to theirs\n",
			prefix, durtext.String(tick.LiveTTL), key)
	case err != nil:
		return fmt.Sprintf("note: could not tell whether any gate runs with GATE_REDIS_PREFIX=%q (GET %s: %v)\n", prefix, key, err)
	}
	return ""
}
