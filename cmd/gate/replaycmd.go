package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/replay"
	"github.com/capturegate/gate/internal/rules"
)

const replayUsage = `Usage: gate replay [-rules FILE] [-against FILE|current] [-clock wall|event] [-from T] [-to T | -offsets P:A-B,...] [-topic TOPIC] [-top N] [-workers N] [-json] [-html FILE]

Replays the input topic (GATE_INPUT_TOPIC on GATE_KAFKA_BROKERS, with the GATE_KAFKA_TLS_*
and GATE_KAFKA_SASL_* settings) through the gate's router and limiter and reports what
the gate would have done: per rule, the records accepted, tagged, sent to overflow or a
topic, dropped and dead-lettered; per key, the most affected first (its records limited,
tagged or over a shadow rule, together), its records limited, its first and last limited
minute and its peak over its threshold. It judges as one
fleet that sees every partition, counting in memory: it joins no consumer group, commits
nothing, and writes to no topic and no Redis.

The limits replayed are FILE's rules (-rules), else the environment's: GATE_RULES_FILE,
else GATE_THRESHOLD, GATE_WINDOW, GATE_LIMITS and the other GATE_* limit settings, so
that "GATE_THRESHOLD=50000 gate replay" tries another limit. -against replays a second
set beside it (a rules file, or "current": the environment's) and lists the teams whose
records limited change. It judges on GATE_CLOCK's clock, or -clock's: on the wall clock
as a gate routing each record at its record time would (holds included), on the event
clock in each record's own window, faster. T is a time (RFC 3339,
2026-11-27T14:00:00Z) or a duration before now (24h); the range is found by record
timestamps. Records are routed on -workers goroutines, dealt by a field every key of
every rule is made of (team_id, when the rules count by team_id and team_id+distinct_id),
so that the report is the same as one goroutine's; on one when the keys share none.
`

// maxReplayWorkers bounds -workers: each worker builds every limiter of the rules
// replayed, some megabytes before the first record.
const maxReplayWorkers = 256

// replayWorkers is the goroutines -workers n asks for on a process that may use procs
// processors: n, or for 0 one a processor up to maxReplayWorkers, the bound an explicit
// -workers has (a host of 384 processors built 384 workers' limiters).
func replayWorkers(n, procs int) int {
	if n == 0 {
		return min(procs, maxReplayWorkers)
	}
	return n
}

type replayOpts struct {
	rules, against, from, to, offsets, html, topic, clock string
	top, workers                                          int
	asJSON                                                bool
}

func replayFlags(o *replayOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.StringVar(&o.rules, "rules", "", "replay the rules of `FILE` (default: GATE_RULES_FILE, else the GATE_* limits)")
	fs.StringVar(&o.against, "against", "", "compare with a second set: a rules `FILE`, or current (the environment's)")
	fs.StringVar(&o.from, "from", "", "start at `T`: a time (RFC 3339) or a duration before now, found by record timestamps: a record without one (Kafka's -1) before a partition's first stamped T or later is not read (default: each partition's start)")
	fs.StringVar(&o.to, "to", "", "end before `T`: a time (RFC 3339) or a duration before now (default: the end when the replay starts)")
	fs.StringVar(&o.offsets, "offsets", "", "replay exactly these offsets instead of -from and -to: `P:A-B`,... (partition P, offsets A to B−1)")
	fs.StringVar(&o.topic, "topic", "", "read `TOPIC` (default GATE_INPUT_TOPIC)")
	fs.StringVar(&o.clock, "clock", "", "judge on `CLOCK`: wall (each record at its record time, as a gate routing it then: holds, views read every tick) or event (each record in its own window, exact counts, faster; no holds, no learned thresholds) (default GATE_CLOCK)")
	fs.IntVar(&o.top, "top", 20, "list the `N` most affected keys of each set")
	fs.IntVar(&o.workers, "workers", 0, "route on up to `N` goroutines (0: as many as the processors this process may use, up to 256)")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&o.html, "html", "", fmt.Sprintf("also write the report to `FILE` as a self-contained page, with a chart for each of the %d most affected keys of each set (the rest of -top's in its table only)", replay.MaxChartsPerSet))
	return fs
}

// replayCmd runs `gate replay`.
func replayCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	var o replayOpts
	fs := replayFlags(&o)
	args, done, err := parseCommand(fs, replayUsage, args, stderr)
	if done || err != nil {
		return err
	}
	if len(args) > 0 {
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("replay takes no arguments, got %q", args)}
	}
	if o.workers < 0 || o.workers > maxReplayWorkers {
		return &cli.UsageError{Msg: fmt.Sprintf("replay: -workers %d: want a number of goroutines up to %d, or 0 for one a processor", o.workers, maxReplayWorkers)}
	}
	o.workers = replayWorkers(o.workers, runtime.GOMAXPROCS(0))
	if o.top < 1 {
		return &cli.UsageError{Msg: fmt.Sprintf("replay: -top %d: want a number of keys of 1 or more", o.top)}
	}
	now := clk.Now()
	rng, err := parseRange("replay", o.from, o.to, o.offsets, now)
	if err != nil {
		return err
	}
	if rng.From.After(now) {
		// Nothing is there yet: the range was read as empty, "replayed 0 records", with
		// no word of why (a year mistyped, a local time read as UTC). Replay's alone:
		// gate redrive judges each dead letter by its own time, which a producer's clock
		// or the refusing gate's may have put after this host's now.
		return &cli.UsageError{Msg: fmt.Sprintf("replay: -from %s (%s) is after now (%s): no record is there yet",
			o.from, rng.From.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	}
	// What the environment sets that a gate would act on and replay does not, said
	// among the report's notes (a review ran GATE_THRESHOLD=5 and GATE_DRY_RUN=true
	// beside -rules and was told nothing of either).
	var envNotes []string
	if o.rules != "" && o.against != "current" {
		// Every set replayed is a rules file: the environment is read as a gate with
		// -rules's file reads it (as gate rules check does), not as one without, whose
		// GATE_WINDOW no rule uses (a GATE_TICK_INTERVAL of 1m, which a gate with rules of
		// hours takes, failed the replay against it). -against current replays the GATE_*
		// limits when GATE_RULES_FILE is unset: they are read, and checked, as they are.
		if set := config.RulesFileConflicts(getenv); len(set) > 0 {
			envNotes = append(envNotes, fmt.Sprintf("%s set here: replay leaves them out, and a gate started with a rules file in this environment refuses to start with them (each rule says its own key, limits, mode, cost, threshold mode and forced keys)",
				strings.Join(set, ", ")))
		}
		getenv = config.RulesFileEnv(getenv, o.rules)
	}
	cfg, err := config.Load(getenv, names)
	if err != nil {
		return err
	}
	if cfg.DryRun {
		envNotes = append(envNotes, "GATE_DRY_RUN is set: a gate in this environment sends every record to the accepted topic; this report says where enforcing would send them")
	}
	// The files are read as a gate in this environment reads them, before -clock: the
	// flag's clock is replay's, not GATE_CLOCK, and what the parser keeps from the wall
	// clock only (track: above_floor, max_keys) is an economy of Redis replay does not
	// have (it counts every key exactly on either clock).
	ropts := replayRulesOptions(cfg)
	if o.clock != "" {
		c, err := limit.ParseClock(o.clock)
		if err != nil {
			return &cli.UsageError{Msg: fmt.Sprintf("replay: -clock %q: want wall or event", o.clock)}
		}
		if c == limit.EventClock && cfg.Clock.Clock != limit.EventClock {
			if err := learnedOnWallOnly(cfg, ropts, o.rules, o.against); err != nil {
				return err
			}
		}
		cfg.Clock.Clock = c
	}
	rng.Topic = cfg.InputTopic
	if o.topic != "" {
		rng.Topic = o.topic
	}
	first, set, err := replayCandidate(cfg, ropts, o.rules, "-rules")
	if err != nil {
		return err
	}
	cands := []*replay.Candidate{first}
	// The rules' own topics, each with the sets that send records there (checked once
	// the range is read: a missing one is a note, not a refusal, as the rehearsal is
	// the point).
	topicSets := map[string][]string{}
	// Replay reads a drop rule whether or not GATE_OUTCOMES_TOPIC is set (it records
	// every fate); a gate in this environment refuses it when unset, which is said.
	notes := envNotes
	addTopics := func(c *replay.Candidate, set *rules.Set) {
		if set == nil {
			return
		}
		for _, t := range set.Topics() {
			topicSets[t] = append(topicSets[t], c.Name())
		}
		for _, r := range set.Rules {
			if r.MaxKeys > 0 {
				// Replay counts every key exactly (NewCandidate), so a team minting a
				// fresh key per record is limited key by key here, where a gate takes it
				// for rotating identities: the figures part for just the team that
				// matters, and the report cannot tell (a review replayed such a team:
				// 9 % of the records placed otherwise, nothing said).
				notes = append(notes, fmt.Sprintf("rule %s of %s has max_keys %d, which replay does not apply: it counts each of a team's keys, where a gate takes a team with more than %d keys in a window (on one gate) for rotating identities and gives its keys under the floor on_cardinality's %s; a team minting keys (a fresh distinct_id per event) is placed otherwise there",
					r.Name, c.Name(), r.MaxKeys, r.MaxKeys, r.OnCardinality))
			}
		}
		if cfg.OutcomesTopic != "" {
			return
		}
		for _, r := range set.Rules {
			if r.Enforces(rules.Drop) { // as the parser refuses it without outcomes
				notes = append(notes, fmt.Sprintf("rule %s of %s drops records: a gate in this environment refuses the file (action drop needs GATE_OUTCOMES_TOPIC, so that nothing vanishes unrecorded), where this replay counts them as dropped",
					r.Name, c.Name()))
			}
		}
	}
	addTopics(first, set)
	if o.against != "" {
		file := o.against
		if file == "current" {
			file = ""
		}
		second, set, err := replayCandidate(cfg, ropts, file, "-against")
		if err != nil {
			return err
		}
		cands = append(cands, second)
		addTopics(second, set)
	}
	eng, err := replay.NewEngine(cfg.TickInterval, cands...)
	if err != nil {
		return err
	}
	// The page's file is made now, in -html's directory, so that one that cannot be
	// written fails before the replay rather than after it; it takes -html's name when
	// written, a file there before kept until then.
	var page *os.File
	if o.html != "" {
		// A directory cannot take the page's name at the end (the rename fails there, the
		// replay done and its report lost): refused now, as an unwritable directory is.
		if fi, err := os.Stat(o.html); err == nil && fi.IsDir() {
			return fmt.Errorf("writing the report page %s: it is a directory", o.html)
		}
		if page, err = os.CreateTemp(filepath.Dir(o.html), "."+filepath.Base(o.html)+".*"); err != nil {
			// The page is written to a file of its own beside -html's first: its name in
			// the error (".x.html.3063130959") is no name the user gave.
			if pe, ok := errors.AsType[*os.PathError](err); ok {
				err = fmt.Errorf("its directory %s: %w", filepath.Dir(o.html), pe.Err)
			}
			return fmt.Errorf("writing the report page %s: %w", o.html, err)
		}
		defer func() {
			if page != nil { // not written: the replay failed
				page.Close()
				os.Remove(page.Name())
			}
		}()
	}
	log := gate.NewLogger(cfg, stderr)
	opts, err := toolClientOpts(cfg, clk, log, "replay") // TLS and SASL, as the gate connects
	if err != nil {
		return err
	}
	defer eng.Close() // a replay that fails reports nothing: its workers stop here
	if n, by := eng.Workers(o.workers); n > 1 {
		fmt.Fprintf(stderr, "gate replay: %d workers, records dealt by %s\n", n, by)
	} else if o.workers > 1 {
		fmt.Fprintln(stderr, "gate replay: one worker: the keys replayed share no field to deal records by")
	}
	began := clk.Now()
	var shown time.Time
	quiet := waitNote(ctx, stderr, brokerWait, fmt.Sprintf("gate replay: no answer yet from the brokers (%s); waiting, Ctrl-C stops\n", strings.Join(cfg.KafkaBrokers, ",")))
	pace := func(p replay.Progress) { // Read reports the offsets listed and every fetch: a line a second at most
		quiet()
		if now := clk.Now(); len(p.Waiting) > 0 || now.Sub(shown) >= time.Second {
			shown = now
			replayProgress(stderr, p, now.Sub(began))
		}
	}
	parts, err := replay.Read(ctx, rng, eng.RouteAt, pace, opts...)
	quiet()
	if err == nil {
		err = eng.Err()
	}
	partial := false
	if err != nil {
		if errors.Is(err, replay.ErrNoTopic) {
			return noTopic("replaying", rng.Topic, o.topic != "", "GATE_INPUT_TOPIC", err)
		}
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("replaying %s: %w", rng.Topic, err)
		}
		partial = true // Ctrl-C: report what was read
		if parts != nil {
			fmt.Fprintln(stderr, "gate replay: stopped; reporting what was read")
		} else {
			// Not even the range's offsets listed: the report is empty for that reason.
			fmt.Fprintln(stderr, "gate replay: stopped before the brokers answered: nothing was read")
		}
	}
	if !partial {
		cutOffsets(stderr, "replay", rng.Offsets, parts)
		notes = append(notes, trimmedNotes(ctx, stderr, rng, opts)...)
	}
	rep := eng.Report(o.top)
	rep.Notes = append(rep.Notes, notes...)
	rep.Notes = append(rep.Notes, missingRuleTopics(ctx, opts, topicSets)...)
	if parts == nil {
		parts = []replay.PartitionRange{} // stopped before the offsets were listed: [] in -json, not null
	}
	rep.Topic, rep.Partitions, rep.Partial = rng.Topic, parts, partial
	if page != nil {
		f := page
		page = nil
		err := errors.Join(replay.WriteHTML(f, rep), f.Chmod(0o644), f.Close())
		if err == nil {
			err = os.Rename(f.Name(), o.html)
		}
		if err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("writing the report page %s: %w", o.html, err)
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = replay.WriteText(stdout, rep)
	}
	if err == nil && partial {
		// The report is written, and marked partial; the exit status says it too, so that
		// a script (a CI job stopped by its timeout) does not take it for the whole range.
		err = errReplayStopped
	}
	return err
}

// trimmedNotes says which partitions of rng a read from -from began at their first
// record kept, retention having deleted those before it (replay.Trimmed): some of the
// range's may be among them, and the report covers only what is kept. Said on stderr
// too; a failure to tell is said there alone.
func trimmedNotes(ctx context.Context, stderr io.Writer, rng replay.Range, opts []kgo.Opt) []string {
	trimmed, err := replay.Trimmed(ctx, rng, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "gate replay: whether retention deleted records of the range is not known: %v\n", err)
		return nil
	}
	var notes []string
	for _, tp := range trimmed {
		n := fmt.Sprintf("%s partition %d starts at offset %d, retention having deleted the records before it: records since -from (%s) may have been among them, Kafka keeping no time of a deleted record; the replay covers what is kept",
			rng.Topic, tp.Partition, tp.Start, rng.From.UTC().Format(time.RFC3339))
		fmt.Fprintln(stderr, "gate replay: "+n)
		notes = append(notes, n)
	}
	return notes
}

// noTopic is the error of a tool (doing: "replaying") whose topic does not exist
// (replay.ErrNoTopic), saying where its name came from, -topic (flag) or the variable
// named, as a name mistyped is the usual cause.
func noTopic(doing, topic string, flag bool, variable string, err error) error {
	from := variable + "'s, as -topic is not given"
	if flag {
		from = "-topic's"
	}
	return fmt.Errorf("%s %s (%s): %w", doing, topic, from, err)
}

// brokerWait is how long replay waits for the brokers' first answer before it says it is
// waiting: a broker that takes connections and never answers left it silent for as long
// as the client's retries took (41 s in a review's), then an i/o timeout.
const brokerWait = 5 * time.Second

// waitNote writes note to w once wait has passed, unless quiet is called first (or ctx
// ends). Once quiet returns, waitNote writes nothing more to w, so that the caller may
// write to it (quiet may be called any number of times). The wait is on the wall clock:
// it paces what is said, as a progress line is paced.
func waitNote(ctx context.Context, w io.Writer, wait time.Duration, note string) (quiet func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-stop:
		case <-ctx.Done():
		case <-t.C:
			_, _ = io.WriteString(w, note)
		}
	}()
	return func() { once.Do(func() { close(stop); <-done }) }
}

// errReplayStopped ends a replay stopped (Ctrl-C, SIGTERM) before the end of its range,
// once the report of what it read is written: exit status 1.
var errReplayStopped = errors.New("replay stopped before the end of its range: the report (marked partial) covers what was read")

// replayCandidate is the set of limits of the rules file file, or, when file is empty,
// the environment's (GATE_RULES_FILE, else the GATE_* limits); a file is read with ropts.
func replayCandidate(cfg config.Config, ropts rules.Options, file, flag string) (*replay.Candidate, *rules.Set, error) {
	// Where the file's name came from, for its errors: the flag, or GATE_RULES_FILE (a
	// review's "-against nosuch.yaml" was told only "rules file nosuch.yaml").
	from := flag
	if file == "" {
		from = "GATE_RULES_FILE"
	}
	file = cmp.Or(file, cfg.RulesFile)
	if file == "" {
		c, err := replay.NewCandidate("GATE_* limits", cfg, nil)
		return c, nil, err
	}
	set, err := rules.ReadFile(file, ropts)
	if err != nil {
		return nil, nil, config.Problems{fmt.Errorf("rules file %s (%s): %w", file, from, err)}
	}
	c, err := replay.NewCandidate(file, cfg, set)
	return c, set, err
}

// missingRuleTopics returns a note for each rule topic (a rules file's action
// topic:NAME, with the sets naming it) the cluster does not have: replay counts records
// into it as any other, where a gate refuses the file (not ready at start; at a reload it
// keeps its rules) until the topic is created. A listing that fails is a note too.
func missingRuleTopics(ctx context.Context, opts []kgo.Opt, topicSets map[string][]string) []string {
	if len(topicSets) == 0 || ctx.Err() != nil { // stopped: the report says partial
		return nil
	}
	topics := slices.Sorted(maps.Keys(topicSets))
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err == nil {
		defer cl.Close()
		var listed kadm.TopicDetails
		if listed, err = kadm.NewClient(cl).ListTopics(ctx, topics...); err == nil {
			var notes []string
			for _, t := range topics {
				if d, ok := listed[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
					notes = append(notes, fmt.Sprintf("rule topic %s does not exist: a gate with %s refuses it until the topic is created (not ready at start; at a reload it keeps the rules it has), where this replay counts records into it",
						t, strings.Join(topicSets[t], " and ")))
				}
			}
			return notes
		}
	}
	return []string{fmt.Sprintf("the rules' topics (%s) could not be checked: %v", strings.Join(topics, ", "), err)}
}

// replayRulesOptions are the options replay reads a rules file with: the gate's, but
// with outcomes, as replay records every fate (a drop rule has its outcome) whether or
// not GATE_OUTCOMES_TOPIC is set where it runs.
func replayRulesOptions(cfg config.Config) rules.Options {
	o := cfg.RulesOptions()
	o.Outcomes = true
	return o
}

// learnedOnWallOnly refuses -clock event for candidates with learned thresholds (the
// GATE_* limits under GATE_THRESHOLD_MODE=adaptive, or a rule of threshold_mode:
// adaptive), which are kept on the wall clock only: replayed on the event clock they
// failed to build, blaming GATE_CLOCK, which the user had not set. rulesFile and against are
// the flags; a file that cannot be read is left for the replay to report.
func learnedOnWallOnly(cfg config.Config, ropts rules.Options, rulesFile, against string) error {
	files := []string{cmp.Or(rulesFile, cfg.RulesFile)}
	if against != "" {
		if against == "current" {
			against = cfg.RulesFile
		}
		files = append(files, against)
	}
	refuse := func(what string) error {
		return &cli.UsageError{Msg: fmt.Sprintf("replay: -clock event: %s: learned thresholds are kept on the wall clock only; replay on it (-clock wall)", what)}
	}
	for _, file := range files {
		if file == "" {
			if cfg.LimitConfig().Adaptive != nil {
				return refuse("GATE_THRESHOLD_MODE=adaptive")
			}
			continue
		}
		// Read as the replay reads it: without outcomes a drop rule fails here, and the
		// replay's own read then blamed GATE_CLOCK.
		set, err := rules.ReadFile(file, ropts)
		if err != nil {
			continue
		}
		for _, r := range set.Rules {
			if r.Adaptive {
				return refuse(fmt.Sprintf("rule %s of %s has threshold_mode: adaptive", r.Name, file))
			}
		}
	}
	return nil
}

// parseRange is the range of cmd's -from, -to and -offsets (gate replay's, gate
// redrive's): -to after -from, judged as times (a duration counts back from now, so
// "-from 1h -to 2h" ends before it starts, which the flags' values alone do not show),
// and -offsets in place of both. The topic is the caller's to set.
func parseRange(cmd, from, to, offsets string, now time.Time) (replay.Range, error) {
	var rng replay.Range
	var err error
	if rng.From, err = parseWhen(cmd, "from", from, now); err != nil {
		return rng, err
	}
	if rng.To, err = parseWhen(cmd, "to", to, now); err != nil {
		return rng, err
	}
	if !rng.From.IsZero() && !rng.To.IsZero() && !rng.To.After(rng.From) {
		return rng, &cli.UsageError{Msg: fmt.Sprintf("%s: -to %s (%s) is not after -from %s (%s)",
			cmd, to, rng.To.UTC().Format(time.RFC3339), from, rng.From.UTC().Format(time.RFC3339))}
	}
	if offsets != "" {
		if from != "" || to != "" {
			return rng, &cli.UsageError{Msg: cmd + ": -offsets replaces -from and -to: give one or the other"}
		}
		if rng.Offsets, err = parseOffsets(cmd, offsets); err != nil {
			return rng, err
		}
	}
	return rng, nil
}

// parseWhen reads a flag of command cmd that names an instant (replay's -from and -to,
// outcomes' -since and -until): a time (RFC 3339), or a duration before now, in Go's
// units or days ("7d", "1d12h": Go's durations have none, and days are what a question
// about last Tuesday is asked in). Empty is the zero time.
func parseWhen(cmd, flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, ok := parseAgo(v); ok {
		if d <= 0 {
			return time.Time{}, &cli.UsageError{Msg: fmt.Sprintf("%s: -%s %s: want a positive duration before now", cmd, flag, v)}
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, &cli.UsageError{Msg: fmt.Sprintf("%s: -%s %q: want a time (RFC 3339, 2026-11-27T14:00:00Z) or a duration before now (24h, 7d)", cmd, flag, v)}
	}
	return t, nil
}

// parseAgo reads a duration in Go's units with, first, a whole number of days: "7d",
// "1d12h", "90m". It reports false for anything else, or days past what a Duration holds.
func parseAgo(v string) (time.Duration, bool) {
	days, rest, ok := strings.Cut(v, "d")
	if !ok {
		d, err := time.ParseDuration(v)
		return d, err == nil
	}
	n, err := strconv.ParseUint(days, 10, 16) // 65,535 days: 179 years
	if err != nil || days == "" || days[0] == '+' {
		return 0, false
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, true
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || rest[0] == '-' || rest[0] == '+' {
		return 0, false
	}
	return d + r, true
}

// parseOffsets reads command cmd's -offsets: P:A-B,...
func parseOffsets(cmd, v string) ([]replay.PartitionRange, error) {
	bad := func(part string) error {
		return &cli.UsageError{Msg: fmt.Sprintf("%s: -offsets %q: want P:A-B (partition P, offsets A to B−1), comma separated; %q is not", cmd, v, part)}
	}
	var out []replay.PartitionRange
	seen := map[int32]string{} // partition → its range as given
	for part := range strings.SplitSeq(v, ",") {
		p, ab, ok := strings.Cut(part, ":")
		a, b, ok2 := strings.Cut(ab, "-")
		if !ok || !ok2 {
			return nil, bad(part)
		}
		pn, err1 := strconv.ParseInt(p, 10, 32)
		an, err2 := strconv.ParseInt(a, 10, 64)
		bn, err3 := strconv.ParseInt(b, 10, 64)
		if errors.Join(err1, err2, err3) != nil || pn < 0 || an < 0 {
			return nil, bad(part)
		}
		// Well-formed, but not a range the read can take: said for what it is, not as a
		// range that is not P:A-B.
		if bn < an {
			return nil, &cli.UsageError{Msg: fmt.Sprintf("%s: -offsets %q: %s ends before it starts: want P:A-B with A at most B (partition P, offsets A to B−1)", cmd, v, part)}
		}
		if prev, ok := seen[int32(pn)]; ok {
			return nil, &cli.UsageError{Msg: fmt.Sprintf("%s: -offsets %q: partition %d is given twice (%s and %s): one range a partition", cmd, v, pn, prev, part)}
		}
		seen[int32(pn)] = part
		out = append(out, replay.PartitionRange{Partition: int32(pn), Start: an, End: bn})
	}
	return out, nil
}

// cutOffsets says which -offsets ranges (asked) went past their partition's end, where
// the read stopped (read): the report alone gave the records read with no word that the
// range was cut, or "replayed 0 records" for one wholly past the end.
func cutOffsets(w io.Writer, cmd string, asked, read []replay.PartitionRange) {
	for _, a := range asked {
		i := slices.IndexFunc(read, func(r replay.PartitionRange) bool { return r.Partition == a.Partition })
		if i < 0 || read[i].End >= a.End {
			continue
		}
		r := read[i]
		got := "nothing"
		if r.End > r.Start {
			got = fmt.Sprintf("%d-%d", r.Start, r.End)
		}
		fmt.Fprintf(w, "gate %s: partition %d ends at offset %d: -offsets %d:%d-%d read %s\n", cmd, a.Partition, r.End, a.Partition, a.Start, a.End, got)
	}
}

// replayProgress writes the progress line: records replayed and their rate, offsets read
// of the range's, where in time, and the time left. Records and offsets apart: on a
// transactional input each transaction's marker and an aborted one's records take
// offsets and are no records, so offsets called records overcounted them.
func replayProgress(w io.Writer, p replay.Progress, took time.Duration) {
	if len(p.Waiting) > 0 {
		fmt.Fprintf(w, "gate replay: waiting for partitions %v to reach their end: nothing fetched for a while (a transaction still open holds back what a read_committed reader gets)\n", p.Waiting)
		return
	}
	if took < time.Second || p.Total == 0 {
		return
	}
	rate := float64(p.Done) / took.Seconds() // offsets: the time left is the offsets left
	eta := "-"
	if rate > 0 {
		eta = durtext.String(time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second)).Round(time.Second))
	}
	at := "" // no record handed on yet (the offsets just listed, or a fetch held for the next): not year one
	if !p.At.IsZero() {
		at = ", at " + p.At.UTC().Format("2006-01-02 15:04:05Z")
	}
	// Whole percents, rounded down: 100% once every record is read, not at 99.5%.
	fmt.Fprintf(w, "gate replay: %s records, %s/s; %s of %s offsets (%d%%)%s, %s left\n", outcome.Thousands(p.Records),
		outcome.Thousands(int64(float64(p.Records)/took.Seconds())), outcome.Thousands(p.Done), outcome.Thousands(p.Total),
		100*p.Done/p.Total, at, eta)
}
