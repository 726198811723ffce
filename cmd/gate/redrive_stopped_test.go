package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/durtext"
)

// refuseProduce makes the broker answer every produce request, while on, with err for
// each of its partitions (of any topic: only gate redrive produces once it is set),
// calling first before each it answers so.
func refuseProduce(c *kfake.Cluster, err *kerr.Error, first func()) *atomic.Bool {
	var on atomic.Bool
	on.Store(true)
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		first()
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, rp := range tp.Partitions {
				pr := kmsg.NewProduceResponseTopicPartition()
				pr.Partition, pr.ErrorCode = rp.Partition, err.Code
				rt.Partitions = append(rt.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return &on
}

// produceLetters writes n not_json dead letters to events_dead_letter, each in a batch
// of its own, their values {0 to {n-1 then 600 x, their gate-source events/0/0 to
// events/0/n-1.
func produceLetters(t *testing.T, cl *kgo.Client, n int) {
	t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: "events_dead_letter", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "{%d %s", i, strings.Repeat("x", 600)),
			Timestamp: testNow.Add(-time.Hour), Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")},
				{Key: "gate-source", Value: fmt.Appendf(nil, "events/0/%d", i)}}}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// notCopied matches gate redrive's error naming the dead letters it did not copy.
var notCopied = regexp.MustCompile(`(?s)(\d+) of (\d+) dead letters not known to be copied.*to copy them again: gate redrive -offsets (\S+)`)

// A redrive stopped (Ctrl-C) while the broker holds its copies back (NOT_ENOUGH_REPLICAS,
// retried) fails the copies still unsent when its half minute for them ends, and says
// so: it counted them before the client's callbacks for them had run, and said
// "re-drove 40 dead letters … (not_json 40)", exit status 0, with none in the input.
func TestRedriveStoppedCountsTheCopiesItGaveUp(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c)
	produceLetters(t, cl, 40)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	refuseProduce(c, kerr.NotEnoughReplicas, stop)
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"redrive"}, testHost(env), &stdout, &stderr) // takes redriveGrace
	t.Logf("gate redrive stopped, the broker taking nothing: %v\n%s", err, stdout.String())
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 0 dead letters ") {
		t.Errorf("gate redrive stopped, the broker taking nothing, said:\n%s", out)
	}
	if m := notCopied.FindStringSubmatch(fmt.Sprint(err)); m == nil || m[1] != m[2] {
		t.Errorf("gate redrive stopped, the broker taking nothing: %v; want every copy named as not copied", err)
	}
	// Copies given up in flight may have been taken by the brokers, unanswered: the count
	// of those that "went through already" left them out, and a run on Apache Kafka copied
	// 27060 twice where the error said 26881 (a review's).
	if want := "and of the 40 in flight when the stop's 30s ended, the brokers may have taken some unanswered, copied twice then)"; !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("gate redrive stopped, its copies given up in flight: %v; want it to say %q", err, want)
	}
	// Said at the stop, not only at the half minute's end: a second Ctrl-C in it exited
	// at once, saying nothing of what was copied (a review: 12 of 40 in the input).
	if e := stderr.String(); !strings.Contains(e, "redrive: stopping: waiting for the copies not yet acknowledged") || !strings.Contains(e, "a second Ctrl-C exits at once") {
		t.Errorf("gate redrive stopped with copies in flight said nothing of them at the stop:\n%s", e)
	}
}

// A redrive whose copies the brokers keep waiting (retried: a leader moving, too few
// in-sync replicas) says so after redriveStallWarn, and goes on waiting for them: it said
// nothing for as long as it waited (a review's, 45 s and more), stdout and stderr empty.
func TestRedriveSaysItsCopiesWait(t *testing.T) {
	t.Parallel()
	w := startWaitingRedrive(t, t.Context())
	stdout, stderr, done := w.stdout, w.stderr, w.done
	w.refusing.Store(false) // the brokers take them now
	if err := <-done; err != nil {
		t.Fatalf("gate redrive, its copies taken after the wait: %v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 5 dead letters ") {
		t.Errorf("gate redrive, its copies taken after the wait, said:\n%s", out)
	}
	if e := stderr.String(); !strings.Contains(e, `"waiting":5`) && !strings.Contains(e, "waiting=5") {
		t.Errorf("the wait's line does not count the 5 copies waiting:\n%s", e)
	}
}

// waitingRedrive is a gate redrive run by startWaitingRedrive: its output, its error
// once it ends, and the switch of the brokers' refusal of its copies.
type waitingRedrive struct {
	stdout   *bytes.Buffer
	stderr   *syncBuffer
	done     chan error
	refusing *atomic.Bool
}

// startWaitingRedrive runs gate redrive on ctx over 5 dead letters whose copies the broker
// keeps waiting (NOT_ENOUGH_REPLICAS, retried while refusing holds), and returns once it
// has said that they wait.
func startWaitingRedrive(t *testing.T, ctx context.Context) waitingRedrive {
	t.Helper()
	c, env := kafkaEnv(t)
	produceLetters(t, kafkaClient(t, c), 5)
	w := waitingRedrive{stdout: new(bytes.Buffer), stderr: new(syncBuffer), done: make(chan error, 1),
		refusing: refuseProduce(c, kerr.NotEnoughReplicas, func() {})}
	go func() { w.done <- run(ctx, []string{"redrive"}, testHost(env), w.stdout, w.stderr) }()
	const said = "redrive: copies wait, none acknowledged"
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(w.stderr.String(), said); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gate redrive waiting on refused copies for 2 minutes said nothing:\n%s", w.stderr.String())
		}
	}
	return w
}

// A redrive stopped (Ctrl-C) while its copies wait says, every redriveStallWarn of the
// stop's grace, that it is stopping and how long is left of it: its wait's line went on
// saying "Ctrl-C stops it" in the grace, where a second Ctrl-C exits without saying
// which copies went through (a review).
func TestRedriveStoppingSaysSoWhileItsCopiesWait(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	w := startWaitingRedrive(t, ctx)
	stderr, done := w.stderr, w.done
	before := len(stderr.String())
	stop()
	select {
	case err := <-done: // after redriveGrace
		t.Logf("gate redrive stopped, its copies waiting: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("gate redrive stopped, its copies waiting, had not ended 3 minutes on:\n%s", stderr.String())
	}
	after := stderr.String()[before:]
	if strings.Contains(after, "Ctrl-C stops it") {
		t.Errorf("gate redrive stopped said to press Ctrl-C to stop it in its grace:\n%s", after)
	}
	stopping := regexp.MustCompile(`redrive: stopping: 5 copies still wait, none acknowledged; \S+ left, then it says which are not known to be copied; a second Ctrl-C exits at once without saying`)
	if !stopping.MatchString(after) {
		t.Errorf("gate redrive stopped, its copies waiting %s, did not say it is stopping and how long is left:\n%s", durtext.String(redriveGrace), after)
	}
}

// A redrive stopped (Ctrl-C) as it reads names the copies the broker refused as well as
// where the read stopped: its error said "reading events_dead_letter (what was read is
// copied): context canceled", though some were not, and gave no -offsets for them, so
// the docs' resume (from where the printed offsets end) left them out of the input.
func TestRedriveStoppedNamesTheRefusedCopies(t *testing.T) {
	t.Parallel()
	const n = 200
	c, env, ctx, stop := stoppableRedrive(t, n)
	refusing := refuseProduce(c, kerr.InvalidRecord, func() {})
	// The stop comes as the read fetches partition 1 from offset 40: partition 0's dead
	// letters (the merge hands on those of one time by partition) have been handed on,
	// and their copies refused, by then.
	stopReadingAt(c, 1, 40, stop)
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"redrive"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive stopped, the broker refusing: %v\n%s", err, stdout.String())
	read := regexp.MustCompile(`read offsets (\S+)`).FindStringSubmatch(stdout.String())
	if read == nil {
		t.Fatalf("gate redrive stopped printed no offsets:\n%s", stdout.String())
	}
	m := notCopied.FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("gate redrive stopped, the broker refusing every copy: %v; want the copies refused named, with their -offsets", err)
	}

	// Two runs given, each knowing only its own letters: an input record with a refused
	// letter before the stop and another past it would be copied by both, said (a
	// review: said only of input records the stopped run copied, none here).
	if !strings.Contains(err.Error(), "an input record with a dead letter in each, the same gate-source, is copied by both") {
		t.Errorf("gate redrive stopped with copies refused: %v; want it said that the two runs it gives both copy an input record with a letter in each", err)
	}
	// The error's two runs: the copies refused again, and the rest from where the read
	// stopped (the docs' resume, which an operator wrote from the offsets printed).
	refusing.Store(false)
	rest := goOn.FindStringSubmatch(fmt.Sprint(err))
	if rest == nil {
		t.Fatalf("gate redrive stopped: %v; want the run that goes on from where it stopped", err)
	}
	for _, offsets := range []string{rest[1], m[3]} {
		stdout.Reset()
		if err := run(t.Context(), []string{"redrive", "-offsets", offsets}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate redrive -offsets %s: %v\n%s", offsets, err, stderr.String())
		}
		t.Logf("gate redrive -offsets %s:\n%s", offsets, stdout.String())
	}
	eachLetterInInputOnce(t, c, n)
}

// stoppableRedrive is a broker holding n dead letters (produceLetters), fetched a batch at
// a time (so that a stop finds the read under way), the environment of a redrive of them,
// and the context a test stops it with (stop; ended with t).
func stoppableRedrive(t *testing.T, n int) (*kfake.Cluster, map[string]string, context.Context, context.CancelFunc) {
	t.Helper()
	c, env := kafkaEnv(t)
	produceLetters(t, kafkaClient(t, c), n)
	env["GATE_KAFKA_FETCH_MAX_BYTES"] = "1024"
	ctx, stop := context.WithCancel(t.Context())
	t.Cleanup(stop)
	return c, env, ctx, stop
}

// stopReadingAt calls stop as the read fetches partition from offset at or past it.
func stopReadingAt(c *kfake.Cluster, partition int32, offset int64, stop func()) {
	c.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range kr.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.Partition == partition && p.FetchOffset >= offset {
					stop()
					return nil, nil, false
				}
			}
		}
		c.KeepControl()
		return nil, nil, false
	})
}

// goOn matches gate redrive's error giving the run that copies what a stopped read left.
var goOn = regexp.MustCompile(`to go on from where it stopped: gate redrive -offsets (\S+)`)

// A redrive stopped (Ctrl-C) as it reads, every copy taken, gives the run that copies the
// rest: it said "reading events_dead_letter (what was read is copied): context
// canceled" and printed the offsets read, leaving the operator to write the -offsets of
// the rest from them (and from each partition's end, which it did not print).
func TestRedriveStoppedGivesTheRunThatGoesOn(t *testing.T) {
	t.Parallel()
	const n = 200
	c, env, ctx, stop := stoppableRedrive(t, n)
	stopReadingAt(c, 1, 40, stop)
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"redrive", "-from", "3h"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive -from 3h stopped: %v\n%s", err, stdout.String())
	rest := goOn.FindStringSubmatch(fmt.Sprint(err))
	if rest == nil {
		t.Fatalf("gate redrive stopped: %v; want the run that goes on from where it stopped", err)
	}
	if !strings.Contains(err.Error(), "whatever its time") {
		t.Errorf("gate redrive -from stopped: %v; want it said that -offsets copies whatever the time", err)
	}
	// A run knows the letters of one gate-source it met itself only: said, as the run
	// that goes on copies again a second letter of an input record copied before the stop.
	if !strings.Contains(err.Error(), "a dead letter there of an input record this run copied before the stop, the same gate-source, is copied again") {
		t.Errorf("gate redrive stopped: %v; want it said that the run that goes on copies again the letters of input records copied before the stop", err)
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"redrive", "-offsets", rest[1]}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -offsets %s: %v\n%s", rest[1], err, stderr.String())
	}
	t.Logf("gate redrive -offsets %s:\n%s", rest[1], stdout.String())
	eachLetterInInputOnce(t, c, n)
}

// eachLetterInInputOnce fails t unless each of the n dead letters produceLetters wrote
// is in the input topic once.
func eachLetterInInputOnce(t *testing.T, c *kfake.Cluster, n int) {
	t.Helper()
	in, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	got := map[string]int{}
	for total := 0; total < n; {
		pctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		fs := in.PollFetches(pctx)
		waited := pctx.Err() != nil && fs.NumRecords() == 0 // before cancel, which sets it
		cancel()
		if waited {
			break // nothing more within 10 s: the counts below say what is missing
		}
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v, _, _ := strings.Cut(string(r.Value), " ")
			got[v]++
			total++
		})
	}
	for i := range n {
		if v := fmt.Sprintf("{%d", i); got[v] != 1 {
			t.Errorf("dead letter %s is in the input %d times after the stopped redrive and the runs it asks for, want 1", v, got[v])
		}
	}
}

// A transaction still open on the dead-letter topic (an exactly-once gate stopped
// mid-transaction) holds a read_committed read at the partition's end until the brokers
// abort it, GATE_TRANSACTION_TIMEOUT (90 s by default) on: gate redrive sat silent all
// that while (a review's, 38 s on Apache Kafka, stdout and stderr empty), where gate
// replay says what it waits for. It says so, naming the partitions, and goes on once the
// transaction ends.
func TestRedriveSaysItsReadWaitsForAnOpenTransaction(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	manual := kgo.RecordPartitioner(kgo.ManualPartitioner())
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), manual)
	if err := cl.ProduceSync(t.Context(), sourcedLetter("a", "events/0/1")).FirstErr(); err != nil { // partition 0
		t.Fatal(err)
	}
	txn := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), manual, kgo.TransactionalID("gate-stopped"),
		kgo.TransactionTimeout(2*time.Minute)) // open for the whole test: the read's wait is said after 10 s

	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open := sourcedLetter("b", "events/0/2")
	open.Partition = 1
	if err := txn.ProduceSync(t.Context(), open).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	stderr := new(syncBuffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"redrive", "-dry-run"}, testHost(env), &stdout, stderr) }()
	const said = "redrive: reading waits for partitions not at their end"
	for !strings.Contains(stderr.String(), said) {
		select {
		case err := <-done:
			t.Fatalf("gate redrive ended before the transaction did: %v\n%s", err, stdout.String())
		case <-ctx.Done():
			t.Fatalf("gate redrive held by a transaction still open said nothing:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if e := stderr.String(); !strings.Contains(e, "partitions=[1]") && !strings.Contains(e, `"partitions":[1]`) {
		t.Errorf("the wait's line does not name partition 1:\n%s", e)
	}
	if err := txn.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("gate redrive, the transaction committed: %v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "would re-drive 2 dead letters ") {
		t.Errorf("gate redrive, the transaction committed, said:\n%s", out)
	}
}

// A dry run stopped (Ctrl-C, a broker gone silent) as it reads copied nothing: its error
// says so and gives the dry run of the rest, with no word of copies made again. It said
// the run going on "copies again" a letter of an input record "this run copied before
// the stop", which no dry run does.
func TestRedriveDryRunStoppedSaysNothingIsCopied(t *testing.T) {
	t.Parallel()
	const n = 200
	c, env, ctx, stop := stoppableRedrive(t, n)
	stopReadingAt(c, 1, 40, stop)
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"redrive", "-from", "3h", "-dry-run"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive -from 3h -dry-run stopped: %v\n%s", err, stdout.String())
	if err == nil {
		t.Fatalf("gate redrive -dry-run stopped: no error\n%s", stdout.String())
	}
	e := err.Error()
	if !strings.Contains(e, "a dry run: nothing copied") {
		t.Errorf("gate redrive -dry-run stopped: %v; want it to say a dry run copied nothing", err)
	}
	if strings.Contains(e, "copied again") || strings.Contains(e, "copied before the stop") || strings.Contains(e, "copied by both") {
		t.Errorf("gate redrive -dry-run stopped: %v; a dry run copied nothing, so nothing is copied again", err)
	}
	rest := regexp.MustCompile(`gate redrive -offsets (\S+) -dry-run`).FindStringSubmatch(e)
	if rest == nil {
		t.Fatalf("gate redrive -dry-run stopped: %v; want the dry run of the rest", err)
	}
	if !strings.Contains(e, "without -dry-run") {
		t.Errorf("gate redrive -dry-run stopped: %v; want it to say the copy is the command without -dry-run", err)
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"redrive", "-offsets", rest[1], "-dry-run"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -offsets %s -dry-run: %v\n%s", rest[1], err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "would re-drive ") {
		t.Errorf("gate redrive -offsets %s -dry-run said:\n%s", rest[1], out)
	}
}
