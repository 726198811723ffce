package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/replay"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

const redriveUsage = `Usage: gate redrive [-from T] [-to T | -offsets P:A-B,...] [-reason R,...] [-topic TOPIC] [-dry-run]

Copies dead letters (GATE_DEAD_LETTER_TOPIC, or -topic) back into the input topic
(GATE_INPUT_TOPIC), once what sent them there is fixed, each with its key, value, headers
and its original timestamp. The gate's own headers (gate-error, gate-error-detail,
gate-source, gate-original-timestamp, gate-dropped, and a routing's gate-overflow-*,
gate-tag, gate-rule-topic-missing) are left out, so that a gate routing the record again
does not pass its first failure's on to accepted or overflow (a producer's own header
that starts gate- is kept); a dead letter stamped anew (rejected) gets back the timestamp
its gate-original-timestamp kept. A dead letter whose value was not kept (gate-dropped) is
not copied: its line names where it still is in the input (gate-source). Nor is one
stamped outside the times the input topic takes (message.timestamp.before.max.ms,
after.max.ms): its line says when it was stamped, and the error gives the -offsets that
copy it once the topic takes it, as it does for the copies the broker refused.
A dead-letter topic of message.timestamp.type=LogAppendTime keeps when each record was
dead-lettered, not its input record's time: its copies carry that (said on stderr).

The dead letters copied are those whose record times are from -from to -to (T: a time,
RFC 3339, or a duration before now, 24h), or exactly -offsets, and with -reason those of
the gate-error reasons given (not_json,rejected). It joins no group and commits nothing:
a range copied twice is in the input twice; the offsets it read are printed, as
-offsets takes them (a range past a partition's end is read to it, and said), and a copy
stopped (Ctrl-C) or failed before its end gives the -offsets run that goes on from
there. -dry-run copies nothing and says what it would copy.
`

type redriveOpts struct {
	from, to, offsets, reasons, topic string
	dryRun                            bool
}

func redriveFlags(o *redriveOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	fs.StringVar(&o.from, "from", "", "copy dead letters from `T`: a time (RFC 3339) or a duration before now (default: each partition's start)")
	fs.StringVar(&o.to, "to", "", "copy dead letters before `T`: a time (RFC 3339) or a duration before now (default: the end when the copy starts)")
	fs.StringVar(&o.offsets, "offsets", "", "copy exactly these offsets instead of -from and -to: `P:A-B`,... (partition P, offsets A to B−1)")
	fs.StringVar(&o.reasons, "reason", "", "copy only the dead letters of these gate-error `REASONS`, comma separated (default: every reason)")
	fs.StringVar(&o.topic, "topic", "", "read dead letters from `TOPIC` (default GATE_DEAD_LETTER_TOPIC)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "copy nothing: say what would be copied")
	return fs
}

// redriveCmd runs `gate redrive`: the recipe for "replay dead letters into the input topic
// once fixed". kcat cannot do it: its producer takes no record's headers or timestamp
// from its input, and copying them as they are would hand the gate's headers of the first
// failure on to accepted and overflow (the router passes input headers through).
func redriveCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	var o redriveOpts
	fs := redriveFlags(&o)
	args, done, err := parseCommand(fs, redriveUsage, args, stderr)
	if done || err != nil {
		return err
	}
	if len(args) > 0 {
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("redrive takes no arguments, got %q", args)}
	}
	// A -from after now is taken: each dead letter is judged by its own time, which a
	// producer's clock or the refusing gate's may have put ahead of this host's
	// (TestRedriveFromAfterNowTakesLettersStampedAhead).
	rng, err := parseRange("redrive", o.from, o.to, o.offsets, clk.Now())
	if err != nil {
		return err
	}
	var reasons map[string]bool
	if o.reasons != "" {
		reasons = map[string]bool{}
		known := route.DeadLetterReasons()
		for r := range strings.SplitSeq(o.reasons, ",") {
			r = strings.TrimSpace(r)
			if !slices.Contains(known, r) {
				// A mistyped reason copied nothing, exit 0 (a review's -reason bogus).
				return &cli.UsageError{Msg: fmt.Sprintf("redrive: -reason %q: want gate-error reasons, comma separated, of %s", r, strings.Join(known, ", "))}
			}
			reasons[r] = true
		}
	}
	cfg, err := config.Load(getenv, names)
	if err != nil {
		return err
	}
	rng.Topic = cmp.Or(o.topic, cfg.DeadLetterTopic)
	// The gate's own topics but the dead-letter one: redrive copies every record it reads
	// that is no gate-dropped letter, and -topic events_accepted would copy the records
	// routed back into the input (a review's dry run offered 408).
	for _, own := range []struct{ topic, variable, what string }{
		{cfg.InputTopic, "GATE_INPUT_TOPIC", "the input topic: it copies dead letters into it"},
		{cfg.AcceptedTopic, "GATE_ACCEPTED_TOPIC", "the accepted topic: its records were routed, and would be copied back into the input"},
		{cfg.OverflowTopic, "GATE_OVERFLOW_TOPIC", "the overflow topic: its records were routed, and would be copied back into the input"},
		{cfg.OutcomesTopic, "GATE_OUTCOMES_TOPIC", "the outcomes topic: its records are outcome rows, no dead letters"},
	} {
		if own.topic != "" && rng.Topic == own.topic {
			return &cli.UsageError{Msg: fmt.Sprintf("redrive: -topic %s is %s (%s)", rng.Topic, own.what, own.variable)}
		}
	}
	// So are the rules' own topics (topic:NAME), when the rules file is at hand: their
	// records were routed too. Read only for -topic: none is the dead-letter topic (the
	// rules refuse the gate's topics), and a shell whose GATE_RULES_FILE is not there
	// still redrives from it.
	if o.topic != "" && cfg.RulesFile != "" {
		set, err := rules.ReadFile(cfg.RulesFile, cfg.RulesOptions())
		if err != nil {
			return config.Problems{fmt.Errorf("GATE_RULES_FILE=%q: %w", cfg.RulesFile, err)}
		}
		for _, r := range set.Rules {
			if r.Enforces(rules.Topic) && r.Action.Topic == rng.Topic {
				return &cli.UsageError{Msg: fmt.Sprintf("redrive: -topic %s is rule %s's own topic (its action in GATE_RULES_FILE): its records were routed, and would be copied back into the input", rng.Topic, r.Name)}
			}
		}
	}
	log := gate.NewLogger(cfg, stderr)
	opts, err := toolClientOpts(cfg, clk, log, "redrive")
	if err != nil {
		return err
	}
	// As gate replay says (waitNote): a broker that takes connections and never answers
	// left it silent for as long as the client's retries took (41 s in a review's). Any
	// answer read from a broker, by any of its clients, quiets it.
	quiet := waitNote(ctx, stderr, brokerWait, fmt.Sprintf("gate redrive: no answer yet from the brokers (%s); waiting, Ctrl-C stops\n", strings.Join(cfg.KafkaBrokers, ",")))
	defer quiet()
	opts = append(opts, kgo.WithHooks(brokerAnswered(quiet)))
	asked := rng.Offsets // -offsets's ranges, nil without it
	if len(rng.Offsets) == 0 {
		// Read from the first offset at or after -from to the end, each dead letter judged
		// by its own time: a dead-letter topic's times go back and forth (a rejected one is
		// stamped when refused, the others keep their input's), which replay's reading by
		// time (a record at its next one's time when that is earlier) would skip some of.
		if rng.Offsets, err = replay.Offsets(ctx, replay.Range{Topic: rng.Topic, From: rng.From}, opts...); errors.Is(err, replay.ErrNoTopic) {
			return noTopic("redrive: reading", rng.Topic, o.topic != "", "GATE_DEAD_LETTER_TOPIC", err)
		} else if err != nil {
			return err
		}
		// Dead letters retention deleted since -from are gone unsaid otherwise: the count
		// reads as every letter of the range (a review's -from 6h said 5 of 8, 3 deleted).
		trimmed, terr := replay.Trimmed(ctx, replay.Range{Topic: rng.Topic, From: rng.From}, opts...)
		if terr != nil {
			fmt.Fprintf(stderr, "gate redrive: whether retention deleted dead letters of the range is not known: %v\n", terr)
		}
		for _, tp := range trimmed {
			fmt.Fprintf(stderr, "gate redrive: %s partition %d starts at offset %d, retention having deleted the dead letters before it: letters since -from (%s) may have been among them, Kafka keeping no time of a deleted record; only those kept are copied\n",
				rng.Topic, tp.Partition, tp.Start, rng.From.UTC().Format(time.RFC3339))
		}
	}
	var prod *kgo.Client
	batchMax := cfg.KafkaMaxMessageBytes // the producer's limit, the input topic's once read (below)
	if !o.dryRun {
		// Acks from every in-sync replica, idempotent: franz-go's defaults, as the gate's.
		// No kgo.RecordDeliveryTimeout: franz-go counts it from the record's timestamp, and
		// every record here keeps its old one (each would time out unsent). Batches stay
		// within the input topic's own max.message.bytes, read before the first record
		// (franz-go asks for a partition's limit at its first record): one below
		// GATE_KAFKA_MAX_MESSAGE_BYTES refused every full batch whole, and a redrive of
		// 300 letters the topic had taken one by one copied none.
		prod, err = kgo.NewClient(append(slices.Clone(opts), kgo.DefaultProduceTopic(cfg.InputTopic),
			kgo.ProducerBatchMaxBytesFn(func(string) int32 { return consume.ClientBatchLimit(batchMax) }))...)
		if err != nil {
			return fmt.Errorf("creating the Kafka producer: %w", err)
		}
		defer prod.Close()
	}

	// Dead letters keep their old timestamps: one outside the input topic's timestamp
	// bounds is left out and named (and its offsets given for a run once the bounds take
	// it), not produced, as the broker refuses its batch whole and franz-go fails every
	// record buffered behind it in the partition (one old letter of 300 kept 128 others
	// from being copied).
	bcl := prod
	if bcl == nil {
		if bcl, err = kgo.NewClient(opts...); err != nil {
			return fmt.Errorf("creating the Kafka client: %w", err)
		}
		defer bcl.Close()
	}
	if err := inputTopicExists(ctx, bcl, cfg.InputTopic); err != nil {
		return err
	}
	if prod != nil {
		var lerr error
		if batchMax, lerr = consume.TopicBatchMaxBytes(ctx, prod, cfg.InputTopic, batchMax); lerr != nil {
			log.Info("redrive: batches up to GATE_KAFKA_MAX_MESSAGE_BYTES; a lower max.message.bytes of the input topic refuses larger ones (MESSAGE_TOO_LARGE)",
				"gate_max_message_bytes", batchMax, "err", lerr)
		}
	}
	// A dead-letter topic whose broker stamps append times replaced each dead letter's
	// time (its input record's, which the docs promise the copy) with when it was
	// dead-lettered: said, as its copies carry that time and -from and -to select by it.
	if appended, err := consume.TopicAppendTimed(ctx, bcl, rng.Topic); err != nil {
		log.Debug("redrive: the dead-letter topic's message.timestamp.type not read", "err", err)
	} else if appended {
		fmt.Fprintf(stderr, "gate redrive: %s stamps each record when appended (message.timestamp.type=LogAppendTime): a dead letter's time is when it was dead-lettered, not its input record's; its copy carries that time, and -from and -to select by it\n", rng.Topic)
	}
	tooOld, tooNew, berr := consume.TopicTimestampBounds(ctx, bcl, cfg.InputTopic)
	if berr != nil {
		log.Info("redrive: every dead letter is copied whatever its timestamp; timestamp bounds of the input topic (message.timestamp.before.max.ms, after.max.ms) refuse a batch with one outside them whole (INVALID_TIMESTAMP)",
			"err", berr)
	}

	// What is handed to the producer is produced on a context of its own, given a last
	// half minute once ctx is done (Ctrl-C): the offsets printed count it as read, and a
	// copy resumed after them (docs/operations.md) leaves behind any that failed for the
	// stop. On ctx, those still in the producer's buffer failed unsent (38 of 40 in a test).
	pctx, endProduce := context.WithCancel(context.WithoutCancel(ctx))
	defer endProduce()
	// handed and acked count the copies given to the producer and those it answered,
	// either way: what the stop's line and the wait's say is still in flight.
	var handed, acked atomic.Int64
	stopSaid := make(chan struct{}) // closed once the stop's line is written
	stopStop := context.AfterFunc(ctx, func() {
		defer close(stopSaid)
		if n := handed.Load() - acked.Load(); prod != nil && n > 0 {
			// Said at once: the copies' half minute passed in silence, and a second
			// Ctrl-C in it exits at once, saying nothing of what was copied. Before the
			// timer: the lines written once the wait ends come after it.
			log.Warn("redrive: stopping: waiting for the copies not yet acknowledged, then saying which are not known to be copied; a second Ctrl-C exits at once, without saying which were (copied again, a letter is in the input twice)",
				"copies", n, "wait", durtext.String(redriveGrace))
		}
		time.AfterFunc(redriveGrace, endProduce)
	})
	// endStop ends the stop's wait for ctx, or waits for its line once it has started:
	// a stop as the copies were answered wrote it after the summary, or after the command
	// returned. Once: a second call would wait for a line never written.
	var endStopOnce sync.Once
	endStop := func() {
		endStopOnce.Do(func() {
			if !stopStop() {
				<-stopSaid
			}
		})
	}
	defer endStop()
	stopWatch := func() {}
	if prod != nil {
		stopWatch = watchRedriveCopies(ctx, &handed, &acked, log, cfg.InputTopic)
		defer stopWatch() // idempotent: stopped before the lines below are written
	}
	var (
		mu sync.Mutex
		// answered waits for every copy's callback: Close fails what the producer still
		// holds in callbacks that run after it returns, uncounted below without it.
		answered sync.WaitGroup
		failed   int
		firstErr error
		// failedBy is failed by reason: the line's reasons count what was copied, as its
		// total does ("re-drove 0 dead letters (not_json 2)" said two were).
		failedBy = map[string]int{}
		// notCopied are the dead letters whose copies failed, for the -offsets of a run
		// that copies them again: the range again copied twice every one that went through.
		notCopied []readLetter
		outside   int // left out for their timestamps (outsideBounds), in notCopied
		// unanswered are the copies failed as the producer was given up (the stop's
		// redriveGrace ended): sent, some may have been taken by the brokers unanswered,
		// which no count of those that went through can hold (a review's run on Apache
		// Kafka: 179 of 24,076 were in the input).
		unanswered int
	)
	// again counts, by partition, the dead letters read that a run of -offsets with the
	// same -reason copies: those in -from and -to, and those outside (-offsets has no
	// times); inTime those in.
	again, inTime := map[int32]int{}, map[int32]int{}
	copied := map[string]int{} // by reason
	other := map[string]int{}  // of a reason not asked for, by reason
	var dropped []string       // lines for the dead letters without their value
	// sources are, by gate-source, the first dead letter of each in this run (copied or
	// left out for its time), and the letters of the same gate-source met after it.
	sources := map[string]*redriveSource{}
	from, to := rng.From, rng.To
	rng.From, rng.To = time.Time{}, time.Time{} // the exact offsets found above
	// A read held at a partition's end by a transaction still open on the dead-letter
	// topic (an exactly-once gate stopped mid-transaction, until the brokers abort it) is
	// said each time the read has fetched nothing for a while, as gate replay says it:
	// the command sat silent for as long (a review's 38 s on Apache Kafka).
	readWaits := func(p replay.Progress) {
		if len(p.Waiting) > 0 {
			log.Warn("redrive: reading waits for partitions not at their end, nothing fetched for a while: a transaction still open on the dead-letter topic holds back what a read_committed reader gets (an exactly-once gate stopped mid-transaction, until the brokers abort it: GATE_TRANSACTION_TIMEOUT); Ctrl-C stops it, giving the -offsets run that goes on",
				"topic", rng.Topic, "partitions", p.Waiting)
		}
	}
	parts, rerr := replay.Read(ctx, rng, func(r *kgo.Record, _ time.Time) {
		inRange := (from.IsZero() || !r.Timestamp.Before(from)) && (to.IsZero() || r.Timestamp.Before(to))
		out, reason, src := redriven(r)
		// Named on the line as every reason is: a blank there read as a figure misplaced.
		reason = cmp.Or(reason, "no gate-error")
		switch {
		case reasons != nil && !reasons[reason]:
			if inRange {
				other[reason]++
			}
			return
		case out == nil:
			if inRange {
				// Header values as the record has them, quoted when odd: a newline in one
				// would print a line of its own, read as the command's.
				dropped = append(dropped, fmt.Sprintf("not copied: %s/%d/%d (%s) kept no value; the record is in the input at %s",
					r.Topic, r.Partition, r.Offset, cli.Shown(reason), cmp.Or(cli.Shown(src), "(no gate-source)")))
			}
			return
		}
		again[r.Partition]++
		if !inRange {
			if !from.IsZero() && r.Timestamp.UnixMilli() < 0 {
				// No time selects it: named, as the line's count would read as every
				// dead letter in the range.
				dropped = append(dropped, fmt.Sprintf("not copied: %s/%d/%d (%s) has no timestamp (-1), which no -from selects: -offsets %d:%d-%d copies it",
					r.Topic, r.Partition, r.Offset, cli.Shown(reason), r.Partition, r.Offset, r.Offset+1))
			}
			return
		}
		inTime[r.Partition]++
		letter := readLetter{partition: r.Partition, offset: r.Offset, again: again[r.Partition], inTime: inTime[r.Partition]}
		first := &redriveSource{}
		if src != "" {
			// At least once a gate can write a dead letter twice (a rebalance replays
			// what it routed since its last commit): one input record, two letters of
			// one gate-source, which were both copied, two records in the input for one
			// (a review). The first is copied, the others kept aside: left out if it
			// went through, not copied (given again with it) if it did not.
			if s, dup := sources[src]; dup {
				mu.Lock()
				s.twins = append(s.twins, letter)
				mu.Unlock()
				return
			}
			sources[src] = first
		}
		if why := outsideBounds(out.Timestamp, clk.Now(), tooOld, tooNew, cfg.InputTopic); why != "" {
			dropped = append(dropped, fmt.Sprintf("not copied: %s/%d/%d (%s) %s", r.Topic, r.Partition, r.Offset, cli.Shown(reason), why))
			mu.Lock()
			outside++
			notCopied = append(notCopied, letter)
			first.notCopied = true
			mu.Unlock()
			return
		}
		copied[reason]++
		if prod != nil {
			answered.Add(1)
			handed.Add(1)
			prod.Produce(pctx, out, func(_ *kgo.Record, err error) {
				defer answered.Done()
				acked.Add(1)
				if err != nil {
					mu.Lock()
					failed++
					failedBy[reason]++
					if errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, context.Canceled) {
						unanswered++
					}
					notCopied = append(notCopied, letter)
					first.notCopied = true
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
				}
			})
		}
	}, readWaits, opts...)
	if errors.Is(rerr, replay.ErrNoTopic) { // -offsets: nothing read, nothing handed on
		return noTopic("redrive: reading", rng.Topic, o.topic != "", "GATE_DEAD_LETTER_TOPIC", rerr)
	}
	if errors.Is(rerr, replay.ErrOffsets) {
		// -offsets the topic cannot have (a partition it lacks, a start retention deleted):
		// nothing read, nothing handed on, and the same -offsets fail alike on every run:
		// no run to go on with (the error gave this one's again) and no line of 0 copied.
		return fmt.Errorf("redrive: %w (nothing read)", rerr)
	}
	if prod != nil {
		if prod.Flush(pctx) != nil {
			prod.Close() // what it still holds fails, counted below
		}
		answered.Wait()
	}
	stopWatch()
	endStop()
	mu.Lock()
	defer mu.Unlock()
	// The letters of an input record met earlier in this run: left out when the first
	// went through (or, a dry run, would); else not copied, and given with it again: a
	// letter counted as copied, its first's copy refused, was in no run's -offsets, and
	// its twin left out said "already copied" of one that was not (a review).
	twins, twinsNotCopied, sourcesCopied, sourcesNotCopied := 0, 0, 0, 0
	for _, s := range sources {
		if s.notCopied {
			notCopied = append(notCopied, s.twins...)
			twinsNotCopied += len(s.twins)
			sourcesNotCopied++
			continue
		}
		twins += len(s.twins)
		sourcesCopied++
	}
	for _, l := range dropped {
		fmt.Fprintln(stdout, l)
	}
	n := 0
	var by []string
	for _, r := range slices.Sorted(maps.Keys(copied)) {
		n += copied[r]
		if f := failedBy[r]; f > 0 {
			by = append(by, fmt.Sprintf("%s %d of %d", cli.Shown(r), copied[r]-f, copied[r]))
			continue
		}
		by = append(by, fmt.Sprintf("%s %d", cli.Shown(r), copied[r]))
	}
	verb := "re-drove"
	if o.dryRun {
		verb = "would re-drive"
	}
	letters := "dead letters"
	if n-failed == 1 {
		letters = "dead letter"
	}
	line := fmt.Sprintf("%s %d %s from %s to %s", verb, n-failed, letters, rng.Topic, cfg.InputTopic)
	if len(by) > 0 {
		line += " (" + strings.Join(by, ", ") + ")"
	}
	if twins > 0 {
		line += fmt.Sprintf("; %s of an input record met earlier in this run left out (the same gate-source: written twice at least once)", counted(int64(twins), "dead letter"))
	}
	if twinsNotCopied > 0 {
		line += fmt.Sprintf("; %s of an input record met earlier in this run not copied, as the first of it was not", counted(int64(twinsNotCopied), "dead letter"))
	}
	if len(other) > 0 {
		// By reason: a -reason misspelt copies nothing, and this says what is there.
		var left []string
		total := 0
		for _, r := range slices.Sorted(maps.Keys(other)) {
			total += other[r]
			left = append(left, fmt.Sprintf("%s %d", cli.Shown(r), other[r]))
		}
		line += fmt.Sprintf("; %d of other reasons left (%s)", total, strings.Join(left, ", "))
	}
	var read []string
	for _, p := range parts {
		read = append(read, fmt.Sprintf("%d:%d-%d", p.Partition, p.Start, p.End))
	}
	fmt.Fprintf(stdout, "%s; read offsets %s\n", line, cmp.Or(strings.Join(read, ","), "none"))
	if rerr == nil {
		// A range of -offsets past a partition's end read less than asked: said, as a
		// mistyped range otherwise copied nothing and said nothing of why.
		cutOffsets(stderr, "redrive", asked, parts)
	}
	// A read stopped (Ctrl-C) or failed before the ends it set out for: the run that
	// copies the rest, from where each partition's read ended, which an operator
	// otherwise wrote from the offsets printed.
	rest := ""
	if rerr != nil && o.dryRun {
		// A dry run copied nothing: no copy is made again, and the copy itself is the
		// whole range, not the rest. It said the run going on copied again the letters of
		// input records "this run copied before the stop" (a review).
		if r := restOffsets(rng.Offsets, parts); r != "" {
			rest = "; to see what it would copy of the rest: " + o.again(r)
			if o.from != "" || o.to != "" {
				rest += " (-offsets takes every dead letter in them, whatever its time: -from and -to chose by time)"
			}
			if sourcesCopied > 0 {
				rest += " (a dead letter there of an input record met before the stop, the same gate-source, is counted as one to copy: a run over the whole range leaves it out)"
			}
		}
		rest += "; nothing was copied: the copy is this command again without -dry-run, over the whole range"
	} else if rerr != nil {
		if r := restOffsets(rng.Offsets, parts); r != "" {
			rest = "; to go on from where it stopped: " + o.again(r)
			if o.from != "" || o.to != "" {
				rest += " (-offsets copies every dead letter in them, whatever its time: -from and -to chose by time)"
			}
			if sourcesCopied > 0 {
				// The letters of one gate-source are known for a run only: a second
				// letter of an input record copied before the stop is copied again.
				rest += " (a dead letter there of an input record this run copied before the stop, the same gate-source, is copied again: a run leaves out only those of input records it met itself)"
			}
			if sourcesNotCopied > 0 {
				// Two runs given: each copies its own letter of an input record whose
				// letter before the stop was not copied and whose other is past it.
				rest += " (with the run that copies again the letters not copied: an input record with a dead letter in each, the same gate-source, is copied by both, twice in the input; a run leaves out only the second letters it meets itself)"
			}
		}
	}
	if failed == 0 && (outside == 0 || o.dryRun) {
		if rerr != nil {
			done := "what was read is copied"
			switch {
			case len(read) == 0:
				done = "nothing read" // an -offsets partition it does not have, say
			case o.dryRun:
				done = "a dry run: nothing copied"
			}
			return fmt.Errorf("reading %s (%s): %w%s", rng.Topic, done, rerr, rest)
		}
		return nil
	}
	var why []error
	if rerr != nil {
		// The read stopped (Ctrl-C) or failed: resuming after the offsets printed leaves
		// behind the dead letters read and not copied, given below.
		why = append(why, fmt.Errorf("reading %s stopped after the offsets printed: %w", rng.Topic, rerr))
	}
	if outside > 0 {
		letters := "dead letters"
		if outside == 1 {
			letters = "dead letter"
		}
		why = append(why, fmt.Errorf("%d %s stamped outside the times %s takes not copied (named above)", outside, letters, cfg.InputTopic))
	}
	if failed > 0 {
		why = append(why, fmt.Errorf("%d of %d dead letters not known to be copied, the first error: %w", failed, n, firstErr))
	}
	if twinsNotCopied > 0 {
		why = append(why, fmt.Errorf("%s of an input record met earlier in this run not copied, as the first of it was not (the run below copies one of them)", counted(int64(twinsNotCopied), "dead letter")))
	}
	offsets, twice, untimed := letterOffsets(notCopied)
	also := ""
	if untimed > 0 {
		also = fmt.Sprintf(", %d are outside -from and -to", untimed)
	}
	if unanswered > 0 {
		also += fmt.Sprintf(", and of the %d in flight when the stop's %s ended, the brokers may have taken some unanswered, copied twice then",
			unanswered, durtext.String(redriveGrace))
	}
	return fmt.Errorf("copying to %s: %w; to copy them again: %s (of those it copies, %d went through already%s)%s",
		cfg.InputTopic, errors.Join(why...), o.again(offsets), twice, also, rest)
}

// again is the gate redrive command that copies offsets (as -offsets takes them) as o
// did: from its topic, of its reasons, a dry run if it was one.
func (o *redriveOpts) again(offsets string) string {
	cmd := "gate redrive -offsets " + offsets
	if o.topic != "" {
		cmd += " -topic " + o.topic
	}
	if o.reasons != "" {
		cmd += " -reason " + quoteArg(o.reasons)
	}
	if o.dryRun {
		cmd += " -dry-run"
	}
	return cmd
}

// restOffsets is, as -offsets takes them, what a read of planned that stopped at read
// (the ranges it read, by partition) left: of each planned range, from where its
// partition's read ended (its start when none was read) to its end; "" for none.
func restOffsets(planned, read []replay.PartitionRange) string {
	var rest []string
	for _, p := range planned {
		at := p.Start
		for _, r := range read {
			if r.Partition == p.Partition {
				at = max(at, r.End)
			}
		}
		if at < p.End {
			rest = append(rest, fmt.Sprintf("%d:%d-%d", p.Partition, at, p.End))
		}
	}
	return strings.Join(rest, ",")
}

// boundsMargin is how far inside the input topic's timestamp bounds a dead letter must be
// to be copied: the broker judges it by its own clock, later.
const boundsMargin = time.Minute

// outsideBounds says why a record stamped at is outside the timestamps topic takes at
// now (TopicTimestampBounds: tooOld before now, tooNew after, 0 for none), within
// boundsMargin of them; "" when it is inside, or has no timestamp (Kafka's -1).
func outsideBounds(at, now time.Time, tooOld, tooNew time.Duration, topic string) string {
	switch {
	case at.UnixMilli() < 0:
		return ""
	case tooOld > 0 && at.Before(now.Add(-tooOld+boundsMargin)):
		return fmt.Sprintf("stamped %s (%s ago): %s takes records up to message.timestamp.before.max.ms %s old, less a minute for the copy",
			at.UTC().Format(time.RFC3339Nano), durtext.String(now.Sub(at).Round(time.Second)), topic, durtext.String(tooOld))
	case tooNew > 0 && at.After(now.Add(tooNew-boundsMargin)):
		return fmt.Sprintf("stamped %s (%s ahead): %s takes records up to message.timestamp.after.max.ms %s ahead, less a minute for the copy",
			at.UTC().Format(time.RFC3339Nano), durtext.String(at.Sub(now).Round(time.Second)), topic, durtext.String(tooNew))
	}
	return ""
}

// quoteArg is a, quoted for a shell when it holds a space ("no gate-error").
func quoteArg(a string) string {
	if strings.ContainsAny(a, " '") {
		return strconv.Quote(a)
	}
	return a
}

// redriveSource is, in a redrive, the first dead letter of a gate-source met: whether it
// was not copied (its copy failed, or it was left out for its time), and the letters of
// the same gate-source met after it (twins), kept out of the producer.
type redriveSource struct {
	notCopied bool
	twins     []readLetter
}

// readLetter is a dead letter read in -from and -to: its partition and offset, and how
// many of its partition's dead letters read a run of -offsets would copy, up to it and
// with it: of every time (again), and in -from and -to (inTime).
type readLetter struct {
	partition     int32
	offset        int64
	again, inTime int
}

// letterOffsets is ls as -offsets takes them, a range a partition from its first to its
// last, and how many dead letters not in ls a run of them copies (one range a partition):
// in -from and -to, which went through (twice), and outside them (untimed).
func letterOffsets(ls []readLetter) (offsets string, twice, untimed int) {
	ls = slices.Clone(ls)
	slices.SortFunc(ls, func(a, b readLetter) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
	var out []string
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j].partition == ls[i].partition {
			j++
		}
		first, last := ls[i], ls[j-1]
		out = append(out, fmt.Sprintf("%d:%d-%d", first.partition, first.offset, last.offset+1))
		twice += last.inTime - first.inTime + 1 - (j - i)
		untimed += last.again - first.again - (last.inTime - first.inTime)
		i = j
	}
	return strings.Join(out, ","), twice, untimed
}

// redriveStallWarn is how long copies may wait unacknowledged, none answered meanwhile,
// before gate redrive says so: a broker that retries them (a leader moving, too few in-sync
// replicas) held a review's redrive for minutes without a word.
const redriveStallWarn = 10 * time.Second

// watchRedriveCopies warns, through log, each redriveStallWarn that copies handed to the
// producer wait with none of them answered (acked) meanwhile, until the returned stop is
// called (which returns once the watch has ended). Once ctx is done (Ctrl-C) it says the
// command is stopping and how long is left of redriveGrace: its advice to press Ctrl-C
// read, in that grace, as a call for the second one that exits without saying.
func watchRedriveCopies(ctx context.Context, handed, acked *atomic.Int64, log *slog.Logger, topic string) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, since := acked.Load(), time.Now()
		stopping, stoppedAt := ctx.Done(), time.Time{}
		for {
			select {
			case <-done:
				return
			case <-stopping:
				stopping, stoppedAt = nil, time.Now()
			case now := <-tick.C:
				a := acked.Load()
				if a != last || handed.Load() == a {
					last, since = a, now // answered meanwhile, or nothing waiting
					continue
				}
				if now.Sub(since) < redriveStallWarn {
					continue
				}
				waiting, waited := handed.Load()-a, durtext.String(now.Sub(since).Round(time.Second))
				since = now
				if !stoppedAt.IsZero() {
					left := max(redriveGrace-now.Sub(stoppedAt), 0).Round(time.Second)
					copies := fmt.Sprintf("%d copies still wait", waiting)
					if waiting == 1 {
						copies = "1 copy still waits"
					}
					log.Warn(fmt.Sprintf("redrive: stopping: %s, none acknowledged; %s left, then it says which are not known to be copied; a second Ctrl-C exits at once without saying",
						copies, durtext.String(left)), "topic", topic, "waiting", waiting, "for", waited)
					continue
				}
				log.Warn("redrive: copies wait, none acknowledged: the brokers keep them (a leader moving, too few in-sync replicas, a quota); gate redrive waits for them (Ctrl-C stops it, giving them "+durtext.String(redriveGrace)+", then says which are not known to be copied)",
					"topic", topic, "waiting", waiting, "for", waited)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-ended
	}
}

// redriveGrace is how long a redrive stopped (Ctrl-C) gives the producer to send the
// dead letters it was handed before the stop.
const redriveGrace = 30 * time.Second

// redriven is the input record dead letter r was made from: its key, value and headers
// but the gate's (consume.GateHeader), and the timestamp its gate-original-timestamp kept, else
// its own; nil when r kept no value (gate-dropped). reason and src are r's gate-error and
// gate-source.
func redriven(r *kgo.Record) (out *kgo.Record, reason, src string) {
	out = &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	valueDropped := false
	for _, h := range r.Headers {
		switch h.Key {
		case route.HeaderError:
			reason = string(h.Value)
		case route.HeaderSource:
			src = string(h.Value)
		case consume.HeaderOriginalTimestamp:
			if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				out.Timestamp = time.UnixMilli(ms)
			}
		case consume.HeaderDropped:
			valueDropped = true
		}
		if !consume.GateHeader(h.Key) {
			// The gate's own only: every gate-* was left out, and a fleet keyed by a
			// producer's (GATE_KEY_FROM=header:gate-team) had each copy dead-lettered
			// again, header_missing (a review).
			out.Headers = append(out.Headers, h)
		}
	}
	if valueDropped {
		return nil, reason, src
	}
	return out, reason, src
}

// inputTopicExists refuses a redrive whose input topic, where every copy goes, does not
// exist: each copy failed with UNKNOWN_TOPIC_OR_PARTITION, naming neither the topic's
// variable nor the cause, and a dry run said it would copy (a review's). Any other
// answer (a principal not allowed to describe it) is left to the copies themselves.
func inputTopicExists(ctx context.Context, cl *kgo.Client, topic string) error {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("redrive: looking up the input topic %s: %w", topic, err)
	}
	if td, ok := tds[topic]; !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("redrive: the input topic %s (GATE_INPUT_TOPIC) does not exist: the dead letters are copied into it; set GATE_INPUT_TOPIC to the gates' input", topic)
	}
	return nil
}
