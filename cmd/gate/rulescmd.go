package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

const rulesUsage = `Usage: gate rules check FILE

Reads the rules file FILE as a gate started with GATE_RULES_FILE=FILE would, with this
environment's topics and tick interval, and prints each rule and where its keys are in
Redis, or every problem in the file on stderr, one a line as FILE:LINE:COL: ... (exit
status 2). Run it before a rules file is deployed: a gate keeps its rules in use when the
file changes into one it cannot use. The topics of topic:NAME actions are not checked
(that needs the broker): it names each; a gate started with the file routes nothing until
each exists and takes its writes, and a reload that brings one in is refused while it does
not.
Variables a rules file replaces (GATE_THRESHOLD, GATE_OVERRIDES, ...) set in this
environment are not the file's problem, but a gate with the file refuses to start with
them: a note on stderr names them.
`

// rulesCmd runs `gate rules check FILE`.
func rulesCmd(args []string, getenv func(string) string, names []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		_, _ = io.WriteString(stderr, rulesUsage) // as every command's -h: the usage, exit status 0
		return nil
	}
	if len(args) != 2 || args[0] != "check" {
		_, _ = io.WriteString(stderr, rulesUsage)
		return &cli.UsageError{Msg: fmt.Sprintf("rules: want check FILE, got %q", args)}
	}
	// The environment gives the topics and the tick interval the file is checked
	// against; FILE is checked whatever GATE_RULES_FILE names, in the environment as a
	// gate with FILE reads it (a tick interval over the GATE_WINDOW no rule uses is fine).
	path := args[1]
	cfg, err := config.Load(config.RulesFileEnv(getenv, path), names)
	if err != nil {
		return err
	}
	if set := config.RulesFileConflicts(getenv); len(set) > 0 {
		// Not the file's problem (a shell may hold them), but where this environment is
		// the gate's, the gate would refuse to start: said, so that a passing check is not
		// taken for a deployment that starts.
		if _, err := fmt.Fprintf(stderr, "gate rules check: note: %s set here: a gate started with a rules file refuses to start with them (each rule says its own key, limits, mode, cost, threshold mode and forced keys); unset them where the gate runs this file\n",
			strings.Join(set, ", ")); err != nil {
			return err
		}
	}
	set, err := rules.ReadFile(path, cfg.RulesOptions())
	var ps rules.Problems
	if errors.As(err, &ps) {
		// One problem a line, as a compiler prints them: a gate's log has them on one.
		for _, p := range ps {
			if _, err := fmt.Fprintln(stderr, p); err != nil {
				return err
			}
		}
		return config.Problems{&printedProblems{path: path, n: len(ps), err: err}}
	}
	if err != nil {
		return config.Problems{err}
	}
	noun := "rules"
	if len(set.Rules) == 1 {
		noun = "rule"
	}
	if _, err := fmt.Fprintf(stdout, "%s: %d %s, checked in file order\n", path, len(set.Rules), noun); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKEY\tMATCH\tLIMITS\tMODE\tCOST\tACTION\tKEYS IN REDIS")
	for _, r := range set.Rules {
		var match []string
		for _, m := range r.Match {
			op := "in"
			if m.Not {
				op = "not in"
			}
			match = append(match, fmt.Sprintf("%s %s [%s]", cli.Shown(m.Field.String()), op, cli.ShownList(m.Values)))
		}
		var lims []string
		for _, l := range r.Limits {
			lims = append(lims, limitText(l))
		}
		mode := r.Mode.String()
		if r.Adaptive {
			mode += ", adaptive"
		}
		action := r.Action.String()
		if r.Shadow {
			action += " (shadow)"
		}
		if len(r.Force) > 0 {
			action += fmt.Sprintf(", %d forced", len(r.Force))
		}
		key := cli.Shown(r.Key.String()) // a field name may hold a tab or a newline, which would break the table
		if r.SkipMissing {
			key += " (skip if missing)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, key, orDash(strings.Join(match, " and ")),
			strings.Join(lims, ","), mode, r.Cost, action, ruleKeys(cfg, r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Whose history a rule keyed by something else (an event, an IP) is filed under: the
	// field is chosen when the file does not say, and may not be the team.
	team, how, apart := set.OutcomesFiling()
	line := fmt.Sprintf("outcome rows' team (GATE_OUTCOMES_TOPIC): %s (%s)", team, how)
	if len(apart) > 0 {
		line += "; rows of " + strings.Join(apart, ", ") + " are filed under the record's team, their key after it (team:key)"
	}
	if _, err := fmt.Fprintln(stdout, line); err != nil {
		return err
	}
	if tick.Mode(cfg.RedisMode) == tick.ModeCluster {
		if _, err := fmt.Fprintf(stdout, "GATE_REDIS_MODE=cluster: {sN} is the key's shard in braces, its hash tag (N from 0 to %d)\n", tick.ClusterShards-1); err != nil {
			return err
		}
	}
	// The rules' topics need a broker to check, which this command does not ask: a gate
	// started with a file whose topic is missing or not writable waits, not ready, and a
	// reload bringing such a topic in is refused, so the check says what it left to the
	// gate rather than pass such a file silently.
	for _, t := range set.Topics() {
		if _, err := fmt.Fprintf(stdout, "topic %s: not checked here; the gate needs it to exist with WRITE allowed (max.message.bytes as the overflow topic's): "+
			"a gate started with the file is not ready and routes nothing until it does, and a reload that brings the topic in is refused while it does not\n", t); err != nil {
			return err
		}
	}
	// Which rules keep their keys under the floor out of Redis, and what a rotating team
	// gets: what the table's last column does not show.
	for _, r := range set.Rules {
		if !r.AboveFloor {
			continue
		}
		line := fmt.Sprintf("%s: keys under their floor (GATE_SYNC_FLOOR x threshold / the gates in the fleet) stay in a sketch, neither written to Redis nor read (track: above_floor)", r.Name)
		if r.Adaptive {
			// The learned first limit keeps no sketch (limit.New): it learns from every key.
			line = fmt.Sprintf("%s: its further limits keep keys under their floor (GATE_SYNC_FLOOR x threshold / the gates in the fleet) in a sketch, neither written to Redis nor read (track: above_floor); its first, adaptive, caches and writes every key", r.Name)
			if len(r.Limits) == 1 {
				continue
			}
		}
		// The floor is GATE_SYNC_FLOOR x threshold / the gates, and a floor under 2
		// records keeps no key apart (limit.setFloor): a per-user limit of 300 keeps none
		// from 2 gates on at the default 1%.
		// A limit whose floor is under 2 records on one gate keeps none apart on any
		// fleet: said so, not "up to 0 gates" under a line saying its keys stay apart.
		var fleets []string
		apart := false
		// The floor is in the rule's unit: bytes for a bytes rule (a review).
		units := "records"
		if r.Cost == route.CostBytes {
			units = "bytes"
		}
		for i, l := range r.Limits {
			if i == 0 && r.Adaptive {
				continue
			}
			n := int64(cfg.SyncFloor * float64(l.Threshold) / 2)
			if n < 1 {
				fleets = append(fleets, fmt.Sprintf("none (%s)", limitText(l)))
				continue
			}
			unit := ""
			if !apart { // the first fleet size says its unit, after a "none" too
				unit = " gates"
				if n == 1 {
					unit = " gate"
				}
			}
			apart = true
			fleets = append(fleets, fmt.Sprintf("%d%s (%s)", n, unit, limitText(l)))
		}
		if !apart {
			line = fmt.Sprintf("%s: every key is cached and written to Redis on any fleet, even of one gate: its floor (GATE_SYNC_FLOOR x threshold / the gates in the fleet) is under 2 %s (track: above_floor keeps none apart; a higher GATE_SYNC_FLOOR or threshold raises it)", r.Name, units)
		} else {
			line += "; kept apart on fleets of up to " + strings.Join(fleets, ", ") + " (past that its floor is under 2 " + units + ": every key cached and written; a higher GATE_SYNC_FLOOR raises it)"
		}
		if r.Key.Composite() && r.MaxKeys > 0 {
			line += fmt.Sprintf("; a team with more than %d keys a window: on_cardinality %s", r.MaxKeys, r.OnCardinality)
		}
		if _, err := fmt.Fprintln(stdout, line); err != nil {
			return err
		}
	}
	return nil
}

// ruleKeys is where r's counters are in Redis, a layout a limit, as the gates name them
// in cfg's Redis mode (tick.KeyFor): in cluster mode each key has its shard's hash tag
// after the prefix.
func ruleKeys(cfg config.Config, r rules.Rule) string {
	tag := ""
	if tick.Mode(cfg.RedisMode) == tick.ModeCluster {
		tag = "{sN}:"
	}
	keys := make([]string, len(r.Limits))
	for i := range r.Limits {
		keys[i] = cfg.RuleKeyPrefix(r, i) + ":" + tag + "{key}:{epoch}"
	}
	return strings.Join(keys, ", ")
}

// limitText is l as a rules file writes it (1h:5000), where Limit.String, the metrics'
// label, has time.Duration's 1h0m0s.
func limitText(l rules.Limit) string {
	return fmt.Sprintf("%s:%d", durtext.String(l.Window), l.Threshold)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printedProblems is a rules file's or the environment's problems once printed, one a line: its message
// counts them (main prints it after them), and it wraps them.
type printedProblems struct {
	path string
	n    int
	err  error
}

func (e *printedProblems) Error() string {
	if e.n == 1 {
		return e.path + ": 1 problem, on the line above"
	}
	return fmt.Sprintf("%s: %d problems, each on a line above", e.path, e.n)
}

func (e *printedProblems) Unwrap() error { return e.err }
