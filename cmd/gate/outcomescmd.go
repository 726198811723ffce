package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/outcome"
)

const outcomesUsage = `Usage: gate outcomes [-since T] [-until T] [-top N] [-json] [TEAM]

Reads the outcome rows the gates wrote to GATE_OUTCOMES_TOPIC (on GATE_KAFKA_BROKERS,
with the GATE_KAFKA_TLS_* and GATE_KAFKA_SASL_* settings) from -since to now, as a
read_committed consumer, and prints TEAM's history: per interval (each one that ends
after -since, whole, and, with -until, begins before it), its records accepted (tagged among them), limited (overflow, a
rule's topic, dropped) and by which rule, dead-lettered, skipped as undeliverable
(GATE_ON_UNDELIVERABLE=skip), and the first and last interval it was limited in. Without TEAM, the N
teams with the most records limited. TEAM is the team as the events have it: the rows of
a composite key's rules, which name it escaped (':' as %3A, '%' as %25), count too;
"(no key)" the rows of no team, as -top lists them (keys folded past
GATE_OUTCOMES_MAX_ROWS, records no key could be read from), from every partition. T is
a time (RFC 3339, 2026-11-24T14:00:00Z) or a duration before now (24h, 7d). It reads
from -since to the topic's end whatever -until says, and gives up after 5 minutes, a limit
of its own: a later -since reads less. -json prints the same figures as one JSON object,
for scripts (its fields: docs/outcomes.md).
`

func outcomesFlags(since, until *string, top *int, asJSON *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("outcomes", flag.ContinueOnError)
	fs.StringVar(since, "since", "24h", "read the rows from `T`: a time (RFC 3339) or a duration before now (24h, 7d)")
	fs.StringVar(until, "until", "", "show only the intervals that begin before `T`, a time or a duration before now (default: now)")
	fs.IntVar(top, "top", 20, "without TEAM, list the `N` teams with the most records limited")
	fs.BoolVar(asJSON, "json", false, "print the history, or the most limited teams, as one JSON object (docs/outcomes.md); what was left out still goes to stderr")
	return fs
}

// outcomesCmd runs `gate outcomes [TEAM]`.
func outcomesCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	var sinceFlag, untilFlag string
	var top int
	var asJSON bool
	fs := outcomesFlags(&sinceFlag, &untilFlag, &top, &asJSON)
	args, done, err := parseCommand(fs, outcomesUsage, args, stderr)
	if done || err != nil {
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
	case top < 1:
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -top %d: want a number of teams of 1 or more", top)}
	}
	now := clk.Now()
	if sinceFlag == "" {
		return &cli.UsageError{Msg: "outcomes: -since is empty: want a time (RFC 3339) or a duration before now (24h, 7d)"}
	}
	from, err := parseWhen("outcomes", "since", sinceFlag, now)
	if err != nil {
		return err
	}
	if !from.Before(now) {
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -since %s is %s, not before now (%s): no row was written since", sinceFlag, minute(from), minute(now))}
	}
	until, err := parseWhen("outcomes", "until", untilFlag, now)
	if err != nil {
		return err
	}
	if !until.IsZero() && !until.After(from) {
		return &cli.UsageError{Msg: fmt.Sprintf("outcomes: -until %s (%s) is not after -since %s (%s): no interval is between", untilFlag, minute(until), sinceFlag, minute(from))}
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
	// Neither holds the rows: a team's history reads its partition and sums its rows into
	// its intervals as they come; the summary keeps each team's totals.
	sums := outcome.NewSummaries()
	each, team := sums.Add, ""
	var hist *outcome.TeamSum
	if len(args) == 1 {
		team = args[0]
		hist = outcome.NewTeamSum(team)
		each = hist.Add
	}
	// The rows of no team, listed by -top as NoKey, are keyed by none: spread over every
	// partition, read whole, folded ones among them.
	noKey := team == outcome.NoKey
	scanTeam := team
	if noKey {
		scanTeam = ""
	}
	// Rows are found by their records' timestamps, when they were sealed: every row of an
	// interval is sealed after the interval began. Reading from an interval before from
	// finds every row of each interval that ends after from, the one from falls in whole;
	// the intervals that ended before it are left out, and so is one that began before
	// that interval (earliest: longer than GATE_OUTCOMES_INTERVAL says), of which rows
	// were missed.
	// The read begins clockSlack earlier still: a row's timestamp is its gate's clock at
	// the seal, and a gate whose clock stepped back after it routed a record (NTP, a VM
	// resumed) seals its row up to that step before the row's interval began. Read from
	// the interval's start alone, such a row of the first interval shown was missed and
	// the interval shown short as if whole.
	earliest := from.Add(-cfg.OutcomesInterval)
	scanFrom := earliest.Add(-clockSlack)
	// Rows of an interval longer than GATE_OUTCOMES_INTERVAL says (the gates' set to 1h,
	// this shell's at its default) that began before the read: left out, and said, as
	// support would otherwise read a team's figures short without a word.
	longer, longest := 0, time.Duration(0)
	// A team's records the gates folded (keys past GATE_OUTCOMES_MAX_ROWS) are in rows of
	// no team, not in its history: counted, as seen in its partitions (folded rows, keyed
	// by none, are spread over all), so that a history short by them is not read as whole.
	var folded int64
	whole := func(r *outcome.Row) {
		if !r.IntervalEnd.After(from) || !until.IsZero() && !r.IntervalStart.Before(until) {
			return
		}
		if hist != nil && !hist.Of(r) && !(r.Folded && !noKey) {
			// Another team's row of the partitions read: nothing of this history, and no
			// row it left out (another team's hourly rows said this one's were short: a
			// review).
			return
		}
		if r.IntervalStart.Before(earliest) {
			longer++
			longest = max(longest, r.IntervalEnd.Sub(r.IntervalStart))
			return
		}
		if team != "" && !noKey && r.Folded {
			folded += r.Records
			return
		}
		each(r)
	}
	// As gate replay says (waitNote): a broker that takes connections and never answers
	// left it silent for as long as the client's retries took (40 s in a review's). Any
	// answer read from a broker quiets it.
	quiet := waitNote(ctx, stderr, brokerWait, fmt.Sprintf("gate outcomes: no answer yet from the brokers (%s); waiting, Ctrl-C stops\n", strings.Join(cfg.KafkaBrokers, ",")))
	read, err := scanOutcomes(ctx, outcomesLimit, sinceFlag, cfg.OutcomesTopic, scanFrom, scanTeam, whole, append(opts, kgo.WithHooks(brokerAnswered(quiet)))...)
	quiet()
	if errors.Is(err, outcome.ErrNoTopic) {
		// Named as the variable it came from: the broker's UNKNOWN_TOPIC_OR_PARTITION
		// said neither that nor that the topic is missing.
		return fmt.Errorf("reading %s (GATE_OUTCOMES_TOPIC's): %w", cfg.OutcomesTopic, err)
	}
	if err != nil {
		return err
	}
	if n := read.Skipped - read.Newer; n > 0 {
		fmt.Fprintf(stderr, "gate outcomes: %s of %s %s not outcome rows of schema %d; skipped\n", counted(int64(n), "record"), cfg.OutcomesTopic, areOrIs(n), outcome.SchemaVersion)
	}
	if read.Newer > 0 {
		// Rows a newer gate wrote: this reader cannot count them, and its figures are short
		// by them; a newer gate outcomes can.
		fmt.Fprintf(stderr, "gate outcomes: %s of %s %s of schema %d, newer than this gate outcomes reads (%d), and not counted: "+
			"read them with gate outcomes of the gates' version\n", counted(int64(read.Newer), "row"), cfg.OutcomesTopic, areOrIs(read.Newer), read.NewestSchema, outcome.SchemaVersion)
	}
	if longer > 0 {
		fmt.Fprintf(stderr, "gate outcomes: left out %s of intervals up to %s long, longer than GATE_OUTCOMES_INTERVAL here (%s), which began before the read could see all their rows: "+
			"set GATE_OUTCOMES_INTERVAL as the gates have it\n", counted(int64(longer), "row"), durtext.String(longest), durtext.String(cfg.OutcomesInterval))
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
	span := "since " + minute(from)
	if !until.IsZero() {
		span = "from " + minute(from) + " to " + minute(until)
	}
	switch {
	case read.FoldedPartly:
		// Its leader gone mid-read: the team's own partitions were read whole, and its
		// history stands; only the folded records past where that read stopped are missed.
		fmt.Fprintf(stderr, "gate outcomes: the rows of no team were not read whole (%v): records of the intervals %s folded past the gates' GATE_OUTCOMES_MAX_ROWS, if any, are counted only as far as it read\n", read.FoldedUnread, span)
	case read.FoldedUnread != nil:
		fmt.Fprintf(stderr, "gate outcomes: the rows of no team were not read (%v): records of the intervals %s folded past the gates' GATE_OUTCOMES_MAX_ROWS, if any, are not counted\n", read.FoldedUnread, span)
	}
	if folded > 0 {
		fmt.Fprintf(stderr, "gate outcomes: at least %s of the intervals %s were folded (keys past the gates' GATE_OUTCOMES_MAX_ROWS), in rows that name no team: "+
			"those of team %s, if any, are not counted here (gate outcomes -top lists the limited ones among them as %s)\n", counted(folded, "record"), span, cli.Shown(team), outcome.NoKey)
	}
	if asJSON {
		if team != "" {
			return printJSON(stdout, historyJSON(hist.History(), cfg.OutcomesTopic, from, until))
		}
		return printJSON(stdout, mostLimitedJSON(sums.Top(top), sums.Limited(), sums.Rows(), cfg.OutcomesTopic, from, until))
	}
	if team != "" {
		return printHistory(stdout, hist.History(), cfg.OutcomesTopic, span)
	}
	return printMostLimited(stdout, sums.Top(top), sums.Limited(), sums.Rows(), cfg.OutcomesTopic, span)
}

// clockSlack is how far before its interval began a row sealed by a gate whose clock
// stepped back may be timestamped and still be read (outcomesCmd).
const clockSlack = time.Minute

// outcomesLimit bounds a read of gate outcomes, so that a broker that stops answering
// does not hold the command for ever. A long -since on a busy topic can reach it too.
const outcomesLimit = 5 * time.Minute

// errOutcomesLimit is the cause of a read's end at its limit (scanOutcomes).
var errOutcomesLimit = errors.New("gate outcomes' own limit on a read")

// scanOutcomes is outcome.Scan within limit. A read that reaches it fails saying that the
// limit is the command's own and that a later -since reads less, as the deadline alone
// reads "context deadline exceeded", which names neither. since is -since as given.
func scanOutcomes(ctx context.Context, limit time.Duration, since string, topic string, from time.Time, team string, each func(*outcome.Row), opts ...kgo.Opt) (outcome.Scanned, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, limit, errOutcomesLimit)
	defer cancel()
	read, err := outcome.Scan(ctx, topic, from, team, each, opts...)
	if err != nil && errors.Is(context.Cause(ctx), errOutcomesLimit) {
		return read, fmt.Errorf("gate outcomes gave up after %s, its own limit on a read (-since %s of %s): "+
			"give a later -since: %w", durtext.String(limit), since, topic, err)
	}
	return read, err
}

// brokerAnswered is a kgo hook calling itself at each response read from a broker.
type brokerAnswered func()

func (f brokerAnswered) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		f()
	}
}

// counted is n of what (a singular noun), its plural when n is not 1: "1 record",
// "1,234 records".
func counted(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return outcome.Thousands(n) + " " + what + "s"
}

// areOrIs is the verb after counted(n, ...).
func areOrIs(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// minute formats the start or end of an interval.
func minute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// bound is minute for an interval's start or end, or a limited span's, which an interval
// of a fraction of a second (GATE_OUTCOMES_INTERVAL=1.5s divides an hour) puts between
// seconds: its fraction is kept, or two intervals printed as one second.
func bound(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.999Z") }

// printHistory prints h, read from topic over span ("since T", "from T to U").
func printHistory(w io.Writer, h outcome.History, topic, span string) error {
	if len(h.Intervals) == 0 {
		_, err := fmt.Fprintf(w, "team %s: no outcomes in %s %s\n", cli.Shown(h.Team), topic, span)
		return err
	}
	t := h.Total
	// The gates that wrote a team's rows at once, not their names over the range: a
	// rollout gives every pod a new name, and a day of them said "gates: 24" of a fleet
	// of 8.
	gates := strconv.Itoa(len(h.Gates))
	if h.MostGates < len(h.Gates) {
		gates = fmt.Sprintf("at most %d an interval, %d names in all", h.MostGates, len(h.Gates))
	}
	fmt.Fprintf(w, "team %s: %s from %s to %s (gates: %s)\n", cli.Shown(h.Team),
		counted(t.Records(), "record"), bound(t.Start), bound(t.End), gates)
	if h.FirstLimited.IsZero() {
		fmt.Fprintln(w, "never limited")
	} else {
		fmt.Fprintf(w, "limited from %s to %s: %s (%s)\n", bound(h.FirstLimited), bound(h.LastLimited), counted(t.Limited, "record"), t.LimitedBy())
	}
	// Intervals of more than one length (gates that had GATE_OUTCOMES_INTERVAL changed
	// under a rollout) say their length: two of one start printed alike (a review).
	mixed := slices.ContainsFunc(h.Intervals, func(iv outcome.Interval) bool {
		return iv.End.Sub(iv.Start) != h.Intervals[0].End.Sub(h.Intervals[0].Start)
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERVAL\tACCEPTED\tTAGGED\tLIMITED\tDEAD LETTER\tSKIPPED\tSHADOW OVER\tBY")
	for _, iv := range h.Intervals {
		start := bound(iv.Start)
		if mixed {
			start += " +" + durtext.String(iv.End.Sub(iv.Start))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", start, outcome.Thousands(iv.Accepted), outcome.Thousands(iv.Tagged),
			outcome.Thousands(iv.Limited), outcome.Thousands(iv.DeadLetter), outcome.Thousands(iv.Skipped), outcome.Thousands(iv.ShadowOver), iv.ByString())
	}
	return tw.Flush()
}

// printMostLimited prints top, the most limited of the limited teams: when that leaves
// some out, the heading says how many were limited in all (a team that limited as many as
// the last one listed is left out by its name, and would otherwise vanish unsaid).
func printMostLimited(w io.Writer, top []outcome.Summary, limited, rows int, topic, span string) error {
	if len(top) == 0 {
		_, err := fmt.Fprintf(w, "no team limited in %s %s (%s read)\n", topic, span, counted(int64(rows), "row"))
		return err
	}
	if limited > len(top) {
		most := fmt.Sprintf("the %d teams", len(top))
		if len(top) == 1 {
			most = "the team" // not "the 1 teams"
		}
		fmt.Fprintf(w, "%s with the most records limited, of %d limited, in %s %s (-top %d lists them all)\n",
			most, limited, topic, span, limited)
	} else if len(top) == 1 {
		fmt.Fprintf(w, "the one team limited in %s %s\n", topic, span) // not "the 1 teams"
	} else {
		fmt.Fprintf(w, "the %d teams limited in %s %s, most records limited first\n", len(top), topic, span)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// RECORDS is the sum of the four columns after it: skipped ones have their own, as in
	// a team's history (without it, a team's figures did not add up).
	// LIMITED FROM and UNTIL: the first limited interval's start, the last's end, as a
	// history's "limited from … to …" (a column "LAST LIMITED" gave 09:41 for a team last
	// limited in the 09:40 interval, read as a time it was limited).
	fmt.Fprintln(tw, "TEAM\tRECORDS\tACCEPTED\tLIMITED\tDEAD LETTER\tSKIPPED\tLIMITED FROM\tLIMITED UNTIL\tBY")
	for _, s := range top {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cli.Shown(s.Team), outcome.Thousands(s.Records), outcome.Thousands(s.Accepted),
			outcome.Thousands(s.Limited), outcome.Thousands(s.DeadLetter), outcome.Thousands(s.Skipped), bound(s.FirstLimited), bound(s.LastLimited), s.By())
	}
	return tw.Flush()
}
