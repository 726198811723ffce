package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/route"
)

// redriveDocs is docs/operations.md's re-drive recipe: a sh block of gate redrive lines.
var redriveDocs = regexp.MustCompile("(?s)```sh\n(gate redrive .*?)```")

// gate redrive copies the dead letters of a range back into the input topic, as
// docs/operations.md's recipe runs it: key, value and non-gate headers kept, a rejected
// dead letter's timestamp taken back from gate-original-timestamp, and none of the gate's
// headers of the first failure (gate-error, gate-error-detail, gate-source,
// gate-original-timestamp), which a gate routing the record again would otherwise pass
// through to accepted or overflow. A dead letter whose value was dropped is named, not
// re-driven; -dry-run and -reason copy nothing, or only the reasons given.
func TestRedriveCommand(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events_dead_letter"),
		kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := func(kv ...string) (hs []kgo.RecordHeader) {
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	first := testNow.Add(-3 * time.Hour).Truncate(time.Millisecond) // the rejected record's own time
	notJSON := testNow.Add(-time.Hour).Truncate(time.Millisecond)
	dls := []*kgo.Record{
		{Key: []byte("k1"), Value: []byte("{bad"), Timestamp: notJSON, Headers: h("trace", "abc",
			"gate-error", "not_json", "gate-error-detail", "the value is not JSON", "gate-source", "events/0/5")},
		{Key: []byte("k2"), Value: []byte(`{"team_id":"t"}`), Timestamp: testNow.Add(-30 * time.Minute), Headers: h("x-id", "1",
			"gate-error", "rejected", "gate-error-detail", "topic events_accepted rejected the record: MESSAGE_TOO_LARGE",
			"gate-source", "events/1/7", "gate-original-timestamp", strconv.FormatInt(first.UnixMilli(), 10))},
		{Key: []byte("k3"), Timestamp: testNow.Add(-20 * time.Minute), Headers: h("gate-error", "rejected",
			"gate-error-detail", "topic events_dead_letter rejected the record: MESSAGE_TOO_LARGE", "gate-source", "events/1/9",
			"gate-original-timestamp", strconv.FormatInt(first.UnixMilli(), 10), "gate-dropped", "value_bytes=2000000 headers=0")},
		{Key: []byte("old"), Value: []byte("{old"), Timestamp: testNow.Add(-48 * time.Hour), Headers: h("gate-error", "not_json")},
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// -dry-run copies nothing; -reason only the reasons given.
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-from", "6h", "-reason", "rejected", "-dry-run"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -dry-run: %v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "would re-drive 1 dead letter") || !strings.Contains(out, "events/1/9") {
		t.Errorf("gate redrive -reason rejected -dry-run said:\n%s", out)
	}

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := redriveDocs.FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/operations.md has no sh block of gate redrive lines: it says "replay them into the input topic once fixed" with no way to`)
	}
	for line := range strings.Lines(string(m[1])) {
		line, _, _ = strings.Cut(line, "#")
		args := strings.Fields(line)[1:]
		stdout.Reset()
		if err := run(t.Context(), args, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		t.Logf("gate %s:\n%s", strings.Join(args, " "), stdout.String())
	}
	if out := stdout.String(); !strings.Contains(out, "re-drove 2 dead letters from events_dead_letter to events") ||
		!strings.Contains(out, "not_json 1, rejected 1") || !strings.Contains(out, "events/1/9") {
		t.Errorf("the docs' gate redrive said:\n%s", out)
	}

	var got []*kgo.Record
	for len(got) < 2 {
		fs := cl.PollFetches(t.Context())
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fs.Records()...)
	}
	slices.SortFunc(got, func(a, b *kgo.Record) int { return strings.Compare(string(a.Key), string(b.Key)) })
	for i, want := range []struct {
		key, value string
		at         time.Time
		headers    []kgo.RecordHeader
	}{
		{"k1", "{bad", notJSON, h("trace", "abc")},
		{"k2", `{"team_id":"t"}`, first, h("x-id", "1")},
	} {
		r := got[i]
		if string(r.Key) != want.key || string(r.Value) != want.value || !r.Timestamp.Equal(want.at) ||
			!slices.EqualFunc(r.Headers, want.headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Errorf("re-driven record %d: key %q value %q at %v headers %v; want %q %q at %v headers %v", i,
				r.Key, r.Value, r.Timestamp.UTC(), r.Headers, want.key, want.value, want.at.UTC(), want.headers)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d records in the input, want 2: the two of the docs' range with values", len(got))
	}

	for _, args := range [][]string{
		{"redrive", "-from", "1h", "-offsets", "0:0-5"},
		{"redrive", "-topic", "events"},
		{"redrive", "-from", "1h", "-to", "2h"},
	} {
		if err := run(t.Context(), args, testHost(env), &stdout, &stderr); !errors.As(err, new(*cli.UsageError)) {
			t.Errorf("gate %q: %v, want a usage error", args, err)
		}
	}
}

// A redrive stopped (Ctrl-C) as it copies still copies every dead letter it read: the
// offsets it prints are where a resume starts (docs/operations.md: the -offsets run an
// interrupted copy's error gives goes on from where each partition's read ended), so
// one read and not copied is left behind by that. The records handed to the producer when
// the stop came had their context canceled with it, and failed unsent, the half minute
// given to the flush for them notwithstanding.
func TestRedriveStoppedCopiesWhatItRead(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events_dead_letter"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 40
	var dls []*kgo.Record
	for i := range n {
		dls = append(dls, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat([]byte("x"), 600), Timestamp: testNow.Add(-time.Hour),
			Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}})
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// One record a batch, so that most are still in the producer's buffer when the stop
	// comes, at the broker's first produce request.
	env["GATE_KAFKA_MAX_MESSAGE_BYTES"] = "1024"
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		stop()
		time.Sleep(200 * time.Millisecond)
		return nil, nil, false
	})
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"redrive"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive stopped: %v\n%s", err, stdout.String())
	m := regexp.MustCompile(`read offsets (\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("gate redrive stopped printed no offsets:\n%s", stdout.String())
	}
	// Again from where the printed offsets end, as the run the error gives does.
	var resume []string
	for p := range strings.SplitSeq(m[1], ",") {
		part, ab, _ := strings.Cut(p, ":")
		_, end, _ := strings.Cut(ab, "-")
		resume = append(resume, fmt.Sprintf("%s:%s-%d", part, end, n))
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"redrive", "-offsets", strings.Join(resume, ",")}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -offsets %s: %v\n%s", strings.Join(resume, ","), err, stderr.String())
	}
	copied := inputRecords(t, cl)
	if copied != n {
		t.Errorf("the input holds %d of the %d dead letters after a stopped redrive and the docs' resume (-offsets %s)", copied, n, strings.Join(resume, ","))
	}
}

// A redrive whose copies fail counts them out of its line's reasons too, not only out of
// its total: "re-drove 0 dead letters (not_json 2)" said two were copied, and nothing
// on it said which reasons' were not.
func TestRedriveFailedCountsByReason(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	produceDeadLetters(t, c, "not_json", "not_json", "field_missing")
	// Every copy fails: the broker refuses each batch to either partition (an input
	// topic that does not exist is refused before any copy:
	// TestRedriveRefusesWhatCannotBeMeant).
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return faulttest.ProduceRefused(kreq.(*kmsg.ProduceRequest), func(int, *kmsg.ProduceRequestTopicPartition) int16 {
			return kerr.InvalidRecord.Code
		}), nil, true
	})
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"redrive", "-topic", "events_dead_letter"}, testHost(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "3 of 3 dead letters not known to be copied") {
		t.Errorf("gate redrive to an input topic refusing its writes: %v", err)
	}
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 0 dead letters from events_dead_letter to events (field_missing 0 of 1, not_json 0 of 2); ") {
		t.Errorf("gate redrive to an input topic refusing its writes said:\n%s", out)
	}
}

// gate redrive's line names the reason of every dead letter it counts: those it left for
// -reason (a -reason misspelt copied none, "3 of other reasons left", with nothing to say
// the reason was not_json), and one without gate-error, shown as a blank ("( 1, ...").
func TestRedriveLineNamesEveryReason(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	produceDeadLetters(t, c, "not_json", "not_json", "field_missing", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		// A reason no letter here has (a misspelt one is refused: TestRedriveRefusesWhatCannotBeMeant).
		{[]string{"-reason", "key_missing"}, "would re-drive 0 dead letters from events_dead_letter to events; 4 of other reasons left (field_missing 1, no gate-error 1, not_json 2); "},
		{nil, "would re-drive 4 dead letters from events_dead_letter to events (field_missing 1, no gate-error 1, not_json 2); "},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"redrive", "-dry-run"}, c.args...)
		if err := run(t.Context(), args, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if out := stdout.String(); !strings.HasPrefix(out, c.want) {
			t.Errorf("gate %s said:\n%s\nwant it to begin %q", strings.Join(args, " "), out, c.want)
		}
	}
}

// produceDeadLetters writes to events_dead_letter one dead letter a reason, its gate-error
// header the reason ("": none).
func produceDeadLetters(t *testing.T, c *kfake.Cluster, reasons ...string) {
	t.Helper()
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	var recs []*kgo.Record
	for _, reason := range reasons {
		r := &kgo.Record{Value: []byte("{bad")}
		if reason != "" {
			r.Headers = []kgo.RecordHeader{{Key: "gate-error", Value: []byte(reason)}}
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A redrive into an input topic whose own max.message.bytes is below
// GATE_KAFKA_MAX_MESSAGE_BYTES copies every dead letter, each of which the input took
// once: its producer's batches stay within the topic's limit, as the gate's to its output
// topics do, rather than filling up to the brokers' and being refused whole
// (MESSAGE_TOO_LARGE for records that fit on their own).
func TestRedriveWithinTheInputTopicsLimit(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	limit := "8192"
	if _, err := kadm.NewClient(cl).AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, "events"); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var dls []*kgo.Record
	for i := range n {
		v := make([]byte, 500) // random: as large compressed
		rand.Read(v)
		dls = append(dls, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: v, Timestamp: testNow.Add(-time.Hour),
			Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}})
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr); err != nil {
		t.Errorf("gate redrive into an input of max.message.bytes %s: %v\n%s", limit, err, stdout.String())
	}
	copied := inputRecords(t, cl)
	if copied != n {
		t.Errorf("the input holds %d of the %d dead letters re-driven", copied, n)
	}
}

// A dead letter's time is its own, not this host's: the input's (a producer's clock) or,
// for a rejected one, the clock of the gate that refused it, either of which may be ahead
// of the clock gate redrive runs by. A -from after now selects those letters, each judged
// by its own time, and is no mistake to refuse ("no record is there yet" while one is).
func TestRedriveFromAfterNowTakesLettersStampedAhead(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	dls := []*kgo.Record{
		{Key: []byte("now"), Value: []byte("{bad"), Timestamp: testNow.Add(-time.Minute), Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}},
		{Key: []byte("ahead"), Value: []byte("{bad"), Timestamp: testNow.Add(10 * time.Minute), Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}},
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	from := testNow.Add(5 * time.Minute).Format(time.RFC3339)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-dry-run", "-from", from}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -from %s (after now, a letter stamped after it): %v\n%s", from, err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "would re-drive 1 dead letter from events_dead_letter to events") {
		t.Errorf("gate redrive -from %s said:\n%s", from, out)
	}
}

// gate redrive's texts as an operator reads them: a range of -offsets past a partition's
// end says it read less than asked (it copied nothing and exited 0 without a word), a
// header value with a newline is quoted rather than printed as a line of its own, a
// dead-letter topic stamping append times is said to (its copies carry when each was
// dead-lettered, not the input's time the docs promise), and a dry run stopped does not
// claim to have copied what it read.
func TestRedriveSaysWhatItDidNot(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c)
	forged := "events/0/1\nre-drove 999 dead letters"
	recs := []*kgo.Record{
		{Topic: "events_dead_letter", Partition: 0, Value: []byte("{bad"), Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}},
		{Topic: "events_dead_letter", Partition: 0, Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("rejected")},
			{Key: "gate-dropped", Value: []byte("1")}, {Key: "gate-source", Value: []byte(forged)}}},
	}
	pcl := kafkaClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pcl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	redrive := func(env map[string]string, args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"redrive"}, args...), testHost(env), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := redrive(env, "-offsets", "0:100-200", "-dry-run")
	if err != nil || !strings.Contains(errOut, "gate redrive: partition 0 ends at offset 2: -offsets 0:100-200 read nothing") {
		t.Errorf("gate redrive -offsets past the end: %v\nstdout %s\nstderr %s\nwant it to say the range was cut", err, out, errOut)
	}
	out, _, err = redrive(env, "-offsets", "0:0-2", "-dry-run")
	if err != nil || strings.Contains(out, "\nre-drove 999") || !strings.Contains(out, strconv.Quote(forged)) {
		t.Errorf("gate redrive with a gate-source holding a newline: %v\n%s\nwant it quoted, on the dropped letter's line", err, out)
	}

	// A dead-letter topic of append times.
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}, "appended_dead_letter"); err != nil {
		t.Fatal(err)
	}
	if err := pcl.ProduceSync(t.Context(), &kgo.Record{Topic: "appended_dead_letter", Value: []byte("{bad"), Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = redrive(env, "-topic", "appended_dead_letter", "-from", "1h", "-dry-run")
	if err != nil || !strings.Contains(errOut, "appended_dead_letter stamps each record when appended (message.timestamp.type=LogAppendTime)") {
		t.Errorf("gate redrive of a LogAppendTime topic: %v\n%s\nwant it to say the times are append times", err, errOut)
	}
	if _, errOut, _ := redrive(env, "-from", "1h", "-dry-run"); strings.Contains(errOut, "LogAppendTime") {
		t.Errorf("gate redrive of a CreateTime topic says:\n%s", errOut)
	}

	// A dry run stopped at its first fetch, after the ranges were listed: nothing was
	// copied, and the error does not say otherwise.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		cancel()
		return nil, nil, false
	})
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"redrive", "-offsets", "0:0-2", "-dry-run"}, testHost(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "a dry run: nothing copied") {
		t.Errorf("gate redrive -dry-run stopped: %v; want it to say a dry run copied nothing", err)
	}
}

// An -offsets partition the dead-letter topic does not have fails the command without
// claiming that what was read is copied: nothing was.
func TestRedriveOffsetsOfAPartitionNotThere(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"redrive", "-offsets", "7:0-5"}, testHost(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "nothing read") || !strings.Contains(err.Error(), "partition 7") {
		t.Errorf("gate redrive -offsets 7:0-5 on a topic of 2 partitions: %v; want an error naming partition 7 and that nothing was read", err)
	}
}

// -offsets the dead-letter topic cannot have, a partition it lacks or a start retention
// deleted, fail alike on every run: the error gave the same command "to go on from where
// it stopped", and a line on stdout that 0 dead letters were re-driven (a review's).
// Each is refused, naming the partition, with no run to go on with and no line.
func TestRedriveOffsetsTheTopicCannotHaveGiveNoRunToGoOn(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 4 {
		if err := cl.ProduceSync(t.Context(), sourcedLetter(fmt.Sprintf("k%d", i), fmt.Sprintf("events/0/%d", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	del, err := kadm.NewClient(cl).DeleteRecords(t.Context(), kadm.Offsets{"events_dead_letter": {0: {Topic: "events_dead_letter", Partition: 0, At: 2}}})
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ offsets, want string }{
		{"7:0-5", "it has no partition 7 (it has 2: 0 to 1)"},
		{"0:0-4", "partition 0 starts at offset 2 (the records before it deleted): offsets 0:0-4 start before it"},
	} {
		for _, dry := range []bool{false, true} {
			args := []string{"redrive", "-offsets", tc.offsets}
			if dry {
				args = append(args, "-dry-run")
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), args, testHost(env), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "go on") {
				t.Errorf("gate %s: %v; want an error saying %q, giving no run to go on with", strings.Join(args, " "), err, tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("gate %s printed, though it read nothing:\n%s", strings.Join(args, " "), stdout.String())
			}
		}
	}
}

// A broker that takes connections and never answers left gate redrive silent for as long
// as the client's retries took (41 s on Apache Kafka's address in a review's, -offsets or
// not), where gate replay and gate outcomes say after brokerWait that they wait: gate
// redrive says so too, naming the brokers.
func TestRedriveSaysItWaitsForSilentBrokers(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"redrive", "-dry-run"}, {"redrive", "-offsets", "0:0-5"}} {
		t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
			t.Parallel()
			stop, _ := saysItWaitsForSilentBrokers(t, nil, args...)
			stop()
		})
	}
}

// A dead letter without a timestamp (-1: a record of message format v0, or a producer
// that sent none) is outside every -from, as no time selects it: it was left out without
// a word, and the line's count read as every dead letter there was in the range. It is
// named, with the -offsets that copy it.
func TestRedriveFromNamesLettersWithoutATime(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, at := range []time.Time{testNow.Add(-10 * time.Minute), time.UnixMilli(-1), testNow.Add(-5 * time.Minute)} {
		r := &kgo.Record{Partition: 0, Value: []byte("{bad"), Timestamp: at, Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-dry-run", "-from", "30m"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -from 30m: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "not copied: events_dead_letter/0/1 (not_json) has no timestamp (-1), which no -from selects: -offsets 0:1-2 copies it") ||
		!strings.Contains(out, "would re-drive 2 dead letters") {
		t.Errorf("gate redrive -from 30m over a dead letter without a timestamp said:\n%s", out)
	}
}

// gate redrive copies every record it reads that is no dropped letter: pointed at one of
// the gate's own topics it would copy routed records, or outcome rows, back into the
// input (a review's dry run of -topic events_accepted offered 408), and a mistyped
// -reason copied nothing, exit 0; so would a rule's own topic (topic:NAME) with
// GATE_RULES_FILE set. Each is refused, naming the topic's variable (or rule) or the
// reasons there are; so is an input topic that does not exist, dry run or not, which
// failed every copy with UNKNOWN_TOPIC_OR_PARTITION (and a dry run said it would copy).
func TestRedriveRefusesWhatCannotBeMeant(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte("{bad"), Timestamp: testNow.Add(-time.Minute),
		Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	env["GATE_OUTCOMES_TOPIC"] = "events_outcomes"
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n  - {name: bots, key: json:team_id, limits: [1m:10], action: topic:events_bots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withRules := map[string]string{"GATE_RULES_FILE": rulesFile}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-dry-run", "-topic", "events_accepted"}, nil, "-topic events_accepted is the accepted topic: its records were routed, and would be copied back into the input (GATE_ACCEPTED_TOPIC)"},
		{[]string{"-dry-run", "-topic", "events_overflow"}, nil, "(GATE_OVERFLOW_TOPIC)"},
		{[]string{"-dry-run", "-topic", "events_outcomes"}, nil, "is the outcomes topic: its records are outcome rows, no dead letters (GATE_OUTCOMES_TOPIC)"},
		{[]string{"-dry-run", "-topic", "events"}, nil, "is the input topic"},
		{[]string{"-dry-run", "-topic", "events_bots"}, withRules, "-topic events_bots is rule bots's own topic (its action in GATE_RULES_FILE): its records were routed, and would be copied back into the input"},
		{[]string{"-dry-run", "-reason", "not_json,bogus"}, nil, `-reason "bogus": want gate-error reasons, comma separated, of not_json, field_missing`},
		{[]string{"-dry-run"}, map[string]string{"GATE_INPUT_TOPIC": "nosuch_in"}, "the input topic nosuch_in (GATE_INPUT_TOPIC) does not exist"},
		{nil, map[string]string{"GATE_INPUT_TOPIC": "nosuch_in"}, "the input topic nosuch_in (GATE_INPUT_TOPIC) does not exist"},
	} {
		e := maps.Clone(env)
		maps.Copy(e, tc.env)
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"redrive"}, tc.args...), testHost(e), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gate redrive %q %v: %v, want an error with %q\n%s", tc.args, tc.env, err, tc.want, stdout.String())
		}
	}
	// The same dead letter with a reason it has, into the input that exists: copied.
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-reason", "not_json"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -reason not_json: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "re-drove 1 dead letter") {
		t.Errorf("gate redrive -reason not_json said:\n%s", stdout.String())
	}
}

// A record outside the timestamps its topic takes is explained with the durations as an
// operator writes them (25h ago, 24h old), not as time.Duration's String (25h0m0s).
func TestOutsideBoundsText(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	if got, want := outsideBounds(now.Add(-25*time.Hour), now, 24*time.Hour, 0, "events"),
		"stamped 2026-11-26T13:00:00Z (25h ago): events takes records up to message.timestamp.before.max.ms 24h old, less a minute for the copy"; got != want {
		t.Errorf("too old: %q, want %q", got, want)
	}
	if got, want := outsideBounds(now.Add(2*time.Hour), now, 0, time.Hour, "events"),
		"stamped 2026-11-27T16:00:00Z (2h ahead): events takes records up to message.timestamp.after.max.ms 1h ahead, less a minute for the copy"; got != want {
		t.Errorf("too new: %q, want %q", got, want)
	}
}

// A copy leaves out the gate's own headers, and keeps a producer's that start gate- too:
// every gate-* was dropped, and a fleet keyed by one (GATE_KEY_FROM=header:gate-team) had
// each copy dead-lettered again, header_missing (a review).
func TestRedriveKeepsAProducersGateHeader(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	dl := &kgo.Record{Key: []byte("k"), Value: []byte("{}"), Timestamp: testNow.Add(-time.Minute), Headers: []kgo.RecordHeader{
		{Key: "gate-team", Value: []byte("t1")}, {Key: "trace", Value: []byte("x")},
		{Key: route.HeaderError, Value: []byte("header_missing")}, {Key: route.HeaderErrorDetail, Value: []byte("no header gate-team")},
		{Key: route.HeaderSource, Value: []byte("events/0/7")}, {Key: route.HeaderOverflowReason, Value: []byte("rate_limited")},
		{Key: route.HeaderTag, Value: []byte("watch")},
	}}
	if err := cl.ProduceSync(t.Context(), dl).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive: %v\n%s", err, stderr.String())
	}
	in := kafkaClient(t, c, kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fs := in.PollRecords(ctx, 10)
	if fs.NumRecords() != 1 {
		t.Fatalf("the input holds %d records after redriving one dead letter: %v", fs.NumRecords(), fs.Errors())
	}
	var got []string
	for _, h := range fs.Records()[0].Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	if want := []string{"gate-team=t1", "trace=x"}; !slices.Equal(got, want) {
		t.Errorf("the copy's headers %q, want %q: the producer's kept, the gate's left out", got, want)
	}
}

// Dead letters since -from that retention deleted are said to be gone: the count read as
// every letter of the range (a review's: 5 of 8, 3 deleted, stderr empty).
func TestRedriveSaysRetentionDeletedLetters(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 8 {
		r := &kgo.Record{Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("{bad"), Timestamp: testNow.Add(-time.Hour),
			Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	del, err := kadm.NewClient(cl).DeleteRecords(t.Context(), kadm.Offsets{"events_dead_letter": {0: {Topic: "events_dead_letter", Partition: 0, At: 3}}})
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-from", "6h", "-dry-run"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -from 6h -dry-run: %v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "would re-drive 5 dead letters") {
		t.Errorf("gate redrive -from 6h -dry-run said:\n%s", out)
	}
	if e := stderr.String(); !strings.Contains(e, "events_dead_letter partition 0 starts at offset 3, retention having deleted the dead letters before it") {
		t.Errorf("gate redrive said nothing of the 3 dead letters retention deleted:\n%s", e)
	}
}

// sourcedLetter is a not_json dead letter of key, a minute old, of the input record src
// (its gate-source).
func sourcedLetter(key, src string) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Value: []byte("{bad"), Timestamp: testNow.Add(-time.Minute), Headers: []kgo.RecordHeader{
		{Key: route.HeaderError, Value: []byte("not_json")}, {Key: route.HeaderSource, Value: []byte(src)}}}
}

// At least once a gate can write a dead letter twice (a rebalance replays what it routed
// since its last commit): two letters of one gate-source, one input record. Both were
// copied, two records in the input for one (a review); the second is left out and said.
func TestRedriveCopiesAnInputRecordOnce(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	if err := cl.ProduceSync(t.Context(), sourcedLetter("a", "events/0/7"), sourcedLetter("a", "events/0/7"), sourcedLetter("b", "events/1/3")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive: %v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 2 dead letters ") || !strings.Contains(out, "; 1 dead letter of an input record met earlier in this run left out (the same gate-source") {
		t.Errorf("gate redrive of two letters of one input record and another said:\n%s", out)
	}
	copied := inputRecords(t, cl)
	if copied != 2 {
		t.Errorf("the input holds %d records, want 2: the two letters of one input record copied once", copied)
	}
}

// A dead letter of an input record met earlier in a run whose first letter's copy failed
// is not copied, and given again with it: it was left out, said "already copied" of one
// that was not, and counted as gone through in the run that copies them again (a
// review: "1 dead letter of an input record already copied left out", "(of those it
// copies, 1 went through already)", every copy refused). That run copies the input
// record once.
func TestRedriveTwinOfALetterNotCopied(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	if err := cl.ProduceSync(t.Context(), sourcedLetter("a", "events/0/7"), sourcedLetter("a", "events/0/7"), sourcedLetter("b", "events/1/3")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	refusing := refuseProduce(c, kerr.InvalidRecord, func() {})
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive, every copy refused: %v\n%s", err, stdout.String())
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 0 dead letters ") || strings.Contains(out, "left out") ||
		!strings.Contains(out, "; 1 dead letter of an input record met earlier in this run not copied, as the first of it was not") {
		t.Errorf("gate redrive of two letters of one input record and another, every copy refused, said:\n%s", out)
	}
	m := notCopied.FindStringSubmatch(fmt.Sprint(err))
	if m == nil || m[1] != "2" || m[2] != "2" || !strings.Contains(err.Error(), "(of those it copies, 0 went through already)") {
		t.Fatalf("gate redrive, every copy refused: %v; want 2 of 2 not copied, none gone through", err)
	}
	refusing.Store(false)
	stdout.Reset()
	if err := run(t.Context(), []string{"redrive", "-offsets", m[3]}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -offsets %s: %v\n%s", m[3], err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "re-drove 2 dead letters ") || !strings.Contains(out, "; 1 dead letter of an input record met earlier in this run left out") {
		t.Errorf("gate redrive -offsets %s, the run the refused one gave, said:\n%s", m[3], out)
	}
	if copied := inputRecords(t, cl); copied != 2 {
		t.Errorf("the input holds %d records, want 2: each input record once", copied)
	}
}

// inputRecords is how many records the input topic (events) holds, every partition's end
// offset added up: the copies a redrive wrote into a topic that started empty.
func inputRecords(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), "events")
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}
