package replay

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/outcome"
)

// minute formats a minute of the report.
func minute(t time.Time) string { return fmtTime(t, "2006-01-02 15:04Z") }

// WriteText writes r as the terminal tables `gate replay` prints: per candidate, what
// every record became and what each rule did, the dead letters' reasons, its most
// affected keys, and with two candidates the teams whose records limited change.
func WriteText(w io.Writer, r *Report) error {
	n := outcome.Thousands
	// To the second, as the page has them: a range of under a minute read "from 05:03Z
	// to 05:03Z" (a review's).
	second := func(t time.Time) string { return fmtTime(t, "2006-01-02 15:04:05Z") }
	fmt.Fprintf(w, "replayed %s records (%s bytes) of %s from %s to %s\n", n(r.Records), n(r.Bytes), cli.Shown(r.Topic), second(r.From), second(r.To))
	if r.Partial {
		fmt.Fprintln(w, "PARTIAL: stopped before the end of the range; the figures cover what was read")
	}
	for _, note := range r.Notes {
		fmt.Fprintln(w, "note:", note)
	}
	for _, c := range r.Candidates {
		t := c.Total
		fmt.Fprintf(w, "\n== %s: accepted %s (tagged %s), limited %s (overflow %s, topic %s, dropped %s), dead letter %s, shadow over %s\n",
			cli.Shown(c.Name), n(t.Accepted), n(t.Tagged), n(t.Limited), n(t.Overflow), n(t.Topic), n(t.Dropped), n(t.DeadLetter), n(t.ShadowOver))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "RULE\tACCEPTED\tTAGGED\tOVERFLOW\tTOPIC\tDROPPED\tDEAD LETTER\tSHADOW OVER\t")
		for _, rf := range c.Rules {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", ruleText(rf.Rule, rf.Shadow), n(rf.Accepted), n(rf.Tagged), n(rf.Overflow), n(rf.Topic),
				n(rf.Dropped), n(rf.DeadLetter), n(rf.ShadowOver))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if namedRules(c.Rules) {
			fmt.Fprintln(w, ruleLegend)
		}
		if len(c.DeadLetters) > 0 {
			var parts []string
			for _, reason := range slices.Sorted(maps.Keys(c.DeadLetters)) {
				parts = append(parts, fmt.Sprintf("%s %s", cli.Shown(reason), n(c.DeadLetters[reason])))
			}
			fmt.Fprintf(w, "dead letters by reason: %s\n", strings.Join(parts, ", "))
		}
		if c.Folded > 0 {
			fmt.Fprintf(w, "%s records of keys past %d a minute are in the totals, in no key\n", n(c.Folded), MaxRowsPerMinute)
		}
		if len(c.Keys) == 0 {
			fmt.Fprintln(w, "no key limited, tagged or over a shadow rule")
			continue
		}
		fmt.Fprintf(w, "the %d most affected of %d keys:\n", len(c.Keys), c.KeysAffected)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tKEY\tLIMITED\tTAGGED\tSHADOW OVER\tFIRST\tLAST\tPEAK ÷ THRESHOLD")
		for _, k := range c.Keys {
			peak := "-"
			if k.Threshold > 0 {
				peak = ratioDown(k.PeakRatio, 2) + " × " + n(k.Threshold)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ruleText(k.Rule, k.Shadow), cli.Shown(k.Key), n(k.Limited), n(k.Tagged), n(k.ShadowOver),
				minute(k.FirstLimited), minute(k.LastLimited), peak)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Candidates) == 2 {
		a, b := cli.Shown(r.Candidates[0].Name), cli.Shown(r.Candidates[1].Name)
		if len(r.Diff) == 0 {
			// The diff is of records limited; tags are not limits, but two sets that
			// tag differently are not alike (a review read "alike" beside 15,460 more
			// records tagged by one).
			ta, tb := r.Candidates[0].Total.Tagged, r.Candidates[1].Total.Tagged
			if ta != tb {
				_, err := fmt.Fprintf(w, "\n%s and %s limit every team alike; they tag differently: %s and %s records tagged\n", a, b, n(ta), n(tb))
				return err
			}
			_, err := fmt.Fprintf(w, "\n%s and %s limit every team alike\n", a, b)
			return err
		}
		teams := "teams"
		if len(r.Diff) == 1 {
			teams = "team"
		}
		fmt.Fprintf(w, "\n%d %s limited differently, most changed first (change = %s − %s):\n", len(r.Diff), teams, a, b)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "TEAM\tLIMITED (%s)\tLIMITED (%s)\tCHANGE\n", a, b)
		shown := min(len(r.Diff), maxDiffRows)
		for _, d := range r.Diff[:shown] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cli.Shown(d.Team), n(d.A), n(d.B), signed(d.Change))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more := len(r.Diff) - shown; more > 0 {
			// Said, as the page says it: the header counts every team, the rows stop short.
			teams := "teams"
			if more == 1 {
				teams = "team"
			}
			_, err := fmt.Fprintf(w, "and %s more %s (-json lists every one)\n", n(int64(more)), teams)
			return err
		}
	}
	return nil
}

// ruleLegend says what a rules file's rows count, under the rules table: not every
// record a rule checked (the gate's gate_rule_records_total), which read as a rule's
// ACCEPTED of 0 beside thousands accepted, and dead letters summing to less than the
// total's (a review took both for wrong figures).
const ruleLegend = "each rule: the records whose fate it decided (a dead letter where it could not read its key or match field, a tag where it tagged); a record no rule acted on, and a value that is no JSON object, are in the totals only"

// namedRules reports whether rules are a rules file's: the gate's limits without one
// are one row, every record's.
func namedRules(rules []RuleFate) bool {
	return slices.ContainsFunc(rules, func(r RuleFate) bool { return r.Rule != "" })
}

// signed is n grouped by thousands as the columns beside it are, with its sign: +12,227
// or -12,227 (the text had -12227); the page's change column too.
func signed(n int64) string {
	if n > 0 {
		return "+" + outcome.Thousands(n)
	}
	return outcome.Thousands(n)
}

// ruleText is a rule's name as the tables show it, a shadow rule's marked (shadow), as
// gate team marks its rows: its figures are what it would have done.
func ruleText(rule string, shadow bool) string {
	if shadow {
		return cli.Shown(rule) + " (shadow)"
	}
	return cli.Shown(ruleName(rule))
}
