package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/outcome"
)

const outcomesUsage = `Usage: gate outcomes [-since D] [-top N] [TEAM]

Reads the outcome rows the gates wrote to GATE_OUTCOMES_TOPIC (on GATE_KAFKA_BROKERS,
with the GATE_KAFKA_TLS_* and GATE_KAFKA_SASL_* settings) from D ago to now, as a
read_committed consumer, and prints TEAM's history: per interval (each one that ends
after D ago, whole), its records accepted (tagged among them), limited (overflow, a
rule's topic, dropped) and by which rule, dead-lettered, skipped as undeliverable
(GATE_ON_UNDELIVERABLE=skip), and the first and last interval it was limited in. Without TEAM, the N
teams with the most records limited. TEAM is the team as the events have it: the rows of
a composite key's rules, which name it escaped (':' as %3A, '%' as %25), count too. It
gives up after 5 minutes, a limit of its own: a shorter -since reads less.
`

func outcomesFlags(since *time.Duration, top *int) *flag.FlagSet {
	fs := flag.NewFlagSet("outcomes", flag.ContinueOnError)
	fs.DurationVar(since, "since", 24*time.Hour, "read the rows of the last `D` (a duration such as 24h)")
	fs.IntVar(top, "top", 20, "without TEAM, list the `N` teams with the most records limited")
	return fs
}

// outcomesCmd runs `gate outcomes [TEAM]`.
func outcomesCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	var since time.Duration
	var top int
	fs := outcomesFlags(&since, &top)
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(stderr, outcomesUsage, fs) }
	args, err := cli.ParseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	topSet := cli.Set(fs, "top")
	switch {
	case len(args) > 1:
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: want at most one TEAM, got %q", args)}
	case len(args) == 1 && args[0] == "":
		// An empty TEAM (an unset shell variable) would read every row as one team's and
		// then report that no team was limited.
		fs.Usage()
		return &cli.UsageError{Msg: `outcomes: TEAM "" is empty: give a team, or no TEAM for the most limited teams`}
	case topSet && len(args) == 1:
		// -top counts the teams listed without TEAM: with one, it would be ignored.
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -top lists the most limited teams and takes no TEAM, got %q", args[0])}
	case since <= 0:
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -since %s: want a positive duration such as 24h", since)}
	case top < 1:
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -top %d: want a number of teams of 1 or more", top)}
	}
	cfg, err := config.Load(getenv, names)
	if err != nil {
		return err
	}
	if cfg.OutcomesTopic == "" {
		return config.Problems{errors.New("GATE_OUTCOMES_TOPIC is not set: gate outcomes reads the topic the gates write their outcomes to")}
	}
	log := gate.NewLogger(cfg, stderr)
	opts, err := toolClientOpts(cfg, clk, log, "outcomes") // TLS and SASL, as the gate connects
	if err != nil {
		return err
	}
	from := clk.Now().Add(-since)
	// Neither holds the topic's rows: a team's history reads its partition and keeps its
	// rows; the summary keeps each team's totals.
	var rows []outcome.Row
	sums := outcome.NewSummaries()
	each, team := sums.Add, ""
	if len(args) == 1 {
		team = args[0]
		each = func(r *outcome.Row) { rows = append(rows, *r) }
	}
	// Rows are found by their records' timestamps, when they were sealed: every row of an
	// interval is sealed after the interval began. Reading from an interval before from
	// finds every row of each interval that ends after from, the one from falls in whole;
	// the intervals that ended before it are left out, and so is one that began before
	// the read did (longer than GATE_OUTCOMES_INTERVAL says), of which rows were missed.
	scanFrom := from.Add(-cfg.OutcomesInterval)
	whole := func(r *outcome.Row) {
		if r.IntervalEnd.After(from) && !r.IntervalStart.Before(scanFrom) {
			each(r)
		}
	}
	read, err := scanOutcomes(ctx, outcomesLimit, since, cfg.OutcomesTopic, scanFrom, team, whole, opts...)
	if err != nil {
		return err
	}
	if n := read.Skipped - read.Newer; n > 0 {
		fmt.Fprintf(stderr, "gate outcomes: %d records of %s are not outcome rows of schema %d; skipped\n", n, cfg.OutcomesTopic, outcome.SchemaVersion)
	}
	if read.Newer > 0 {
		// Rows a newer gate wrote: this reader cannot count them, and its figures are short
		// by them; a newer gate outcomes can.
		fmt.Fprintf(stderr, "gate outcomes: %d rows of %s are of schema %d, newer than this gate outcomes reads (%d), and are not counted: "+
			"read them with gate outcomes of the gates' version\n", read.Newer, cfg.OutcomesTopic, read.NewestSchema, outcome.SchemaVersion)
	}
	for _, tr := range read.Trimmed {
		held := "holds no rows"
		if !tr.Oldest.IsZero() {
			held = "holds rows from " + minute(tr.Oldest) + " on"
		}
		fmt.Fprintf(stderr, "gate outcomes: %s partition %d %s, retention having deleted those before: rows since %s may be missing\n",
			cfg.OutcomesTopic, tr.Partition, held, minute(from))
	}
	for _, g := range read.Gone {
		fmt.Fprintf(stderr, "gate outcomes: offsets %d to %d of %s partition %d were deleted (retention) while it read; their rows are not counted\n",
			g.From, g.To-1, cfg.OutcomesTopic, g.Partition)
	}
	if team != "" {
		return printHistory(stdout, outcome.TeamHistory(rows, team), cfg.OutcomesTopic, from)
	}
	return printMostLimited(stdout, sums.Top(top), sums.Limited(), sums.Rows(), cfg.OutcomesTopic, from)
}

// outcomesLimit bounds a read of gate outcomes, so that a broker that stops answering
// does not hold the command for ever. A long -since on a busy topic can reach it too.
const outcomesLimit = 5 * time.Minute

// errOutcomesLimit is the cause of a read's end at its limit (scanOutcomes).
var errOutcomesLimit = errors.New("gate outcomes' own limit on a read")

// scanOutcomes is outcome.Scan within limit. A read that reaches it fails saying that the
// limit is the command's own and that a shorter -since reads less, as the deadline alone
// reads "context deadline exceeded", which names neither.
func scanOutcomes(ctx context.Context, limit, since time.Duration, topic string, from time.Time, team string, each func(*outcome.Row), opts ...kgo.Opt) (outcome.Scanned, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, limit, errOutcomesLimit)
	defer cancel()
	read, err := outcome.Scan(ctx, topic, from, team, each, opts...)
	if err != nil && errors.Is(context.Cause(ctx), errOutcomesLimit) {
		return read, fmt.Errorf("gate outcomes gave up after %s, its own limit on a read (-since %s of %s): "+
			"give a shorter -since: %w", limit, since, topic, err)
	}
	return read, err
}

// minute formats the start or end of an interval.
func minute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func printHistory(w io.Writer, h outcome.History, topic string, from time.Time) error {
	if len(h.Intervals) == 0 {
		_, err := fmt.Fprintf(w, "team %s: no outcomes in %s since %s\n", cli.Shown(h.Team), topic, minute(from))
		return err
	}
	t := h.Total
	fmt.Fprintf(w, "team %s: %s records from %s to %s (gates: %d)\n", cli.Shown(h.Team),
		outcome.Thousands(t.Accepted+t.Limited+t.DeadLetter+t.Skipped), minute(t.Start), minute(t.End), len(h.Gates))
	if h.FirstLimited.IsZero() {
		fmt.Fprintln(w, "never limited")
	} else {
		fmt.Fprintf(w, "limited from %s to %s: %s records (%s)\n", minute(h.FirstLimited), minute(h.LastLimited), outcome.Thousands(t.Limited), t.LimitedBy())
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERVAL\tACCEPTED\tTAGGED\tLIMITED\tDEAD LETTER\tSKIPPED\tSHADOW OVER\tBY")
	for _, iv := range h.Intervals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", minute(iv.Start), outcome.Thousands(iv.Accepted), outcome.Thousands(iv.Tagged),
			outcome.Thousands(iv.Limited), outcome.Thousands(iv.DeadLetter), outcome.Thousands(iv.Skipped), outcome.Thousands(iv.ShadowOver), iv.ByString())
	}
	return tw.Flush()
}

// printMostLimited prints top, the most limited of the limited teams: when that leaves
// some out, the heading says how many were limited in all (a team that limited as many as
// the last one listed is left out by its name, and would otherwise vanish unsaid).
func printMostLimited(w io.Writer, top []outcome.Summary, limited, rows int, topic string, from time.Time) error {
	if len(top) == 0 {
		_, err := fmt.Fprintf(w, "no team limited in %s since %s (%d rows read)\n", topic, minute(from), rows)
		return err
	}
	if limited > len(top) {
		fmt.Fprintf(w, "the %d teams with the most records limited, of %d limited, in %s since %s (-top %d lists them all)\n",
			len(top), limited, topic, minute(from), limited)
	} else {
		fmt.Fprintf(w, "the %d teams limited in %s since %s, most records limited first\n", len(top), topic, minute(from))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM\tRECORDS\tACCEPTED\tLIMITED\tDEAD LETTER\tFIRST LIMITED\tLAST LIMITED\tBY")
	for _, s := range top {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cli.Shown(s.Team), outcome.Thousands(s.Records), outcome.Thousands(s.Accepted),
			outcome.Thousands(s.Limited), outcome.Thousands(s.DeadLetter), minute(s.FirstLimited), minute(s.LastLimited), s.By)
	}
	return tw.Flush()
}
