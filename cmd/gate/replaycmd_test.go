package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/replay"
)

// gate replay reads the input topic and reports, with another limit given in the
// environment against a rules file: the text tables, -json, -html, and a report marked
// partial when it is stopped.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"))
	at := testNow.Add(-time.Hour).Truncate(time.Minute)
	recs := loudAndQuiet(at, 3000, func(team string, _ int) []byte { return fmt.Appendf(nil, `{"team_id":%q}`, team) })
	recs = append(recs, &kgo.Record{Value: []byte("not json"), Timestamp: at})
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n- name: team\n  key: json:team_id\n  limits: [1m:1500]\n  action: overflow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["GATE_THRESHOLD"], env["GATE_WINDOW"] = "500", "1m"
	html := filepath.Join(t.TempDir(), "report.html")
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"replay", "-against", rulesFile, "-from", "2h", "-html", html}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate replay: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"replayed 3,001 records", "== GATE_* limits:", "== " + rulesFile + ":", "dead letters by reason: not_json 1",
		"teams limited differently", "loud"} {
		if !strings.Contains(out, want) {
			t.Errorf("gate replay's report lacks %q:\n%s", want, out)
		}
	}
	if page, err := os.ReadFile(html); err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Errorf("-html: %v, %d bytes and no chart", err, len(page))
	}

	stdout.Reset()
	if err := run(t.Context(), []string{"replay", "-json", "-to", "30m"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate replay -json: %v\n%s", err, stderr.String())
	}
	var rep replay.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	loud := rep.Candidates[0].Keys
	if rep.Records != 3001 || len(rep.Partitions) != 2 || len(loud) == 0 || loud[0].Key != "loud" || loud[0].Limited == 0 {
		t.Errorf("gate replay -json: %d records of %v, keys %+v", rep.Records, rep.Partitions, loud)
	}

	// Any number of workers, the same report.
	reports := map[string]string{}
	for _, n := range []string{"1", "3"} {
		stdout.Reset()
		stderr.Reset()
		if err := run(t.Context(), []string{"replay", "-json", "-to", "30m", "-workers", n}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate replay -workers %s: %v\n%s", n, err, stderr.String())
		}
		reports[n] = stdout.String()
	}
	if reports["1"] != reports["3"] {
		t.Errorf("gate replay -workers 3 reports otherwise than -workers 1:\n%s\n%s", reports["3"], reports["1"])
	}
	if !strings.Contains(stderr.String(), "3 workers, records dealt by json:team_id") {
		t.Errorf("gate replay -workers 3 does not say how it deals records:\n%s", stderr.String())
	}

	// Stopped (Ctrl-C) before it read anything: a partial report, and exit status 1, so
	// that a script does not take it for the whole range.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stdout.Reset()
	if err := run(ctx, []string{"replay"}, testHost(env), &stdout, &stderr); !errors.Is(err, errReplayStopped) || cli.ExitCode(err) != 1 {
		t.Fatalf("gate replay, stopped: error %v, want errReplayStopped (exit status 1)", err)
	}
	if !strings.Contains(stdout.String(), "PARTIAL") {
		t.Errorf("a stopped replay's report is not marked partial:\n%s", stdout.String())
	}
}

// -workers 0 takes one a processor within the bound an explicit -workers has.
func TestReplayWorkersOfZeroBounded(t *testing.T) {
	for _, c := range []struct{ n, procs, want int }{{0, 2, 2}, {0, maxReplayWorkers, maxReplayWorkers}, {0, 384, maxReplayWorkers}, {3, 384, 3}, {maxReplayWorkers, 2, maxReplayWorkers}} {
		if got := replayWorkers(c.n, c.procs); got != c.want {
			t.Errorf("-workers %d on %d processors: %d workers, want %d", c.n, c.procs, got, c.want)
		}
	}
}

func TestReplayCommandRefusesBadFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-from", "yesterday"}, `-from "yesterday": want a time`},
		// Durations count back from now (testNow, 15:09:26): -to 2h is before -from 1h,
		// which the times say and the flags' values alone do not.
		{[]string{"-from", "1h", "-to", "2h"}, "-to 2h (2026-03-14T13:09:26Z) is not after -from 1h (2026-03-14T14:09:26Z)"},
		// A -from after now read nothing and said only "replayed 0 records".
		{[]string{"-from", "2026-03-15T09:00:00+01:00"}, "-from 2026-03-15T09:00:00+01:00 (2026-03-15T08:00:00Z) is after now (2026-03-14T15:09:26Z)"},
		{[]string{"-offsets", "0:5"}, "want P:A-B"},
		{[]string{"-offsets", "0:9-5"}, "want P:A-B"},
		// Well-formed ranges the replay cannot take are said for what they are, not as
		// ranges that are not P:A-B.
		{[]string{"-offsets", "0:9-5"}, "0:9-5 ends before it starts"},
		{[]string{"-offsets", "0:1-2,1:0-9,0:3-4"}, "partition 0 is given twice (0:1-2 and 0:3-4): one range a partition"},
		{[]string{"-offsets", "0:1-5", "-from", "1h"}, "-offsets replaces -from and -to"},
		{[]string{"-top", "0"}, "-top 0"},
		{[]string{"-workers", "-2"}, "-workers -2"},
		{[]string{"-workers", "1000"}, "-workers 1000: want a number of goroutines up to 256"},
		{[]string{"-clock", "processing"}, `-clock "processing": want wall or event`},
		{[]string{"extra"}, "takes no arguments"},
		{[]string{"-rules", "/nonexistent/rules.yaml"}, "/nonexistent/rules.yaml (-rules)"},
		// Each file's error names the flag that gave it (a review's -against nosuch.yaml
		// was told only "rules file nosuch.yaml"), and a page that cannot be written its
		// directory, not the name of the file written first beside -html's.
		{[]string{"-against", "/nonexistent/other.yaml"}, "rules file /nonexistent/other.yaml (-against)"},
		{[]string{"-html", "/nonexistent/dir/x.html"}, "writing the report page /nonexistent/dir/x.html: its directory /nonexistent/dir: no such file or directory"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"replay"}, tc.args...), testHost(env), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gate replay %q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// The progress line of a long replay: records and their rate, offsets read and their
// share, where in time, time left; nothing in its first second.
func TestReplayProgressLine(t *testing.T) {
	var b bytes.Buffer
	p := replay.Progress{Done: 2_500_000, Total: 10_000_000, Records: 2_400_000, At: time.Date(2026, 11, 27, 14, 3, 0, 0, time.UTC)}
	replayProgress(&b, p, 500*time.Millisecond)
	if b.Len() != 0 {
		t.Errorf("a progress line in the first second: %q", b.String())
	}
	replayProgress(&b, p, 5*time.Second)
	want := "gate replay: 2,400,000 records, 480,000/s; 2,500,000 of 10,000,000 offsets (25%), at 2026-11-27 14:03:00Z, 15s left\n"
	if b.String() != want {
		t.Errorf("progress line %q, want %q", b.String(), want)
	}
	// Time left is written as an operator writes a duration: 3m, not 3m0s.
	b.Reset()
	replayProgress(&b, p, time.Minute)
	if !strings.HasSuffix(b.String(), ", 3m left\n") {
		t.Errorf("progress line %q after a minute of a quarter: want 3m left", b.String())
	}
	// Near the end: 100% only once every offset is read, not with offsets still to go.
	b.Reset()
	replayProgress(&b, replay.Progress{Done: 9_999_000, Total: 10_000_000, At: p.At}, 20*time.Second)
	if !strings.Contains(b.String(), "(99%)") {
		t.Errorf("progress line %q with 1,000 records left: want (99%%)", b.String())
	}
	// Nothing handed on yet (the offsets listed, or fetches held for a partition's next
	// record): no place in time, not year one.
	b.Reset()
	replayProgress(&b, replay.Progress{Done: 5_000, Total: 10_000_000}, 2*time.Second)
	if want := "gate replay: 0 records, 0/s; 5,000 of 10,000,000 offsets (0%), 1h6m38s left\n"; b.String() != want {
		t.Errorf("progress line %q before any record was handed on, want %q", b.String(), want)
	}
}

// The progress line over a transactional input (a producer's transactions, or the
// gate's own exactly-once outputs replayed) counts records, not offsets: each
// transaction's marker and an aborted transaction's records take offsets a
// read_committed reader never gets. It called 13 offsets "13 of 13 records" where 7
// records were read.
func TestReplayProgressCountsRecordsOfATransactionalInput(t *testing.T) {
	t.Parallel()
	c, _ := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"), kgo.TransactionalID("progress-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	txn := func(n int, end kgo.TransactionEndTry) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			r := &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, `{"team_id":"a","i":%d}`, i), Timestamp: at.Add(time.Duration(i) * time.Second)}
			if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
	txn(5, kgo.TryCommit) // offsets 0-4, its marker 5
	txn(3, kgo.TryAbort)  // offsets 6-8, aborted, its marker 9
	txn(2, kgo.TryCommit) // offsets 10-11, its marker 12
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var last replay.Progress
	n := 0
	_, err := replay.Read(ctx, replay.Range{Topic: "events", Offsets: []replay.PartitionRange{{Partition: 0, Start: 0, End: 13}}},
		func(*kgo.Record, time.Time) { n++ }, func(p replay.Progress) { last = p }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || n != 7 {
		t.Fatalf("read %d records: %v; want the 7 committed", n, err)
	}
	var b bytes.Buffer
	replayProgress(&b, last, 7*time.Second)
	line := b.String()
	if !strings.HasPrefix(line, "gate replay: 7 records, 1/s; 13 of 13 offsets (100%)") {
		t.Errorf("progress line %q at the end of 7 records in 13 offsets: want 7 records, at 1/s, and the 13 offsets read of 13", line)
	}
}

// A replay that fails after its workers started stops them: none is left routing nothing.
// Not parallel: it counts the process's replay workers before and after.
func TestReplayFailureStopsWorkers(t *testing.T) {
	_, env := kafkaEnv(t)
	workers := func() int {
		buf := make([]byte, 1<<22)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "replay.(*worker).run")
	}
	before := workers()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"replay", "-workers", "3", "-topic", "no-such-topic"}, testHost(env), &stdout, &stderr)
	if err == nil {
		t.Fatalf("gate replay of a missing topic: no error\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "3 workers") {
		t.Fatalf("the replay did not start its workers before failing (%v):\n%s", err, stderr.String())
	}
	if n := workers() - before; n > 0 {
		t.Errorf("%d replay workers still running after gate replay failed: %v", n, err)
	}
}

// A topic that does not exist is said to be so, with where its name came from (-topic,
// else the variable), not as the broker's UNKNOWN_TOPIC_OR_PARTITION ("This server does
// not host this topic-partition"), which reads as a fault of the cluster's: gate replay's
// input, and gate redrive's dead-letter topic by a range of times and by -offsets (whose
// error said "(what was read is copied)" of a read that never began).
func TestMissingTopicSaysWhereItsNameCameFrom(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"replay", "-topic", "evnets"}, nil, "replaying evnets (-topic's): listing the offsets of evnets: the topic does not exist"},
		{[]string{"replay"}, map[string]string{"GATE_INPUT_TOPIC": "evnets"}, "replaying evnets (GATE_INPUT_TOPIC's, as -topic is not given): listing the offsets of evnets: the topic does not exist"},
		{[]string{"redrive", "-topic", "evnets_dead_letter", "-from", "1h"}, nil, "redrive: reading evnets_dead_letter (-topic's): listing the offsets of evnets_dead_letter: the topic does not exist"},
		{[]string{"redrive", "-topic", "evnets_dead_letter", "-offsets", "0:0-5", "-dry-run"}, nil, "redrive: reading evnets_dead_letter (-topic's): listing the offsets of evnets_dead_letter: the topic does not exist"},
		{[]string{"redrive", "-from", "1h"}, map[string]string{"GATE_DEAD_LETTER_TOPIC": "evnets_dead_letter"}, "(GATE_DEAD_LETTER_TOPIC's, as -topic is not given)"},
	} {
		e := maps.Clone(env)
		maps.Copy(e, tc.env)
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tc.args, testHost(e), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "does not host") || strings.Contains(err.Error(), "what was read") {
			t.Errorf("gate %q of a missing topic: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// -offsets past a partition's end reads to its end, where a read_committed reader stops,
// and says so: the report gave the records read with no word that the range asked for was
// cut (or, wholly past the end, "replayed 0 records" as of an empty range).
func TestReplayOffsetsPastTheEndSaySo(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Value: []byte(`{"team_id":"a"}`), Timestamp: testNow.Add(-time.Hour + time.Duration(i)*time.Second)})
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ offsets, read, want string }{
		{"0:5-100", "replayed 5 records", "partition 0 ends at offset 10: -offsets 0:5-100 read 5-10"},
		{"0:20-30", "replayed 0 records", "partition 0 ends at offset 10: -offsets 0:20-30 read nothing"},
		{"0:2-4", "replayed 2 records", ""},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"replay", "-offsets", tc.offsets}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate replay -offsets %s: %v\n%s", tc.offsets, err, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.read) {
			t.Errorf("gate replay -offsets %s: want %q:\n%s", tc.offsets, tc.read, stdout.String())
		}
		if tc.want == "" && strings.Contains(stderr.String(), "ends at offset") || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("gate replay -offsets %s: stderr %q, want %q", tc.offsets, stderr.String(), tc.want)
		}
	}
	// A partition the topic does not have says which it has (a review's -offsets 7:0-10
	// was told only "it has no partition 7").
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"replay", "-offsets", "7:0-10"}, testHost(env), &stdout, &stderr)
	if want := "reading events: it has no partition 7 (it has 2: 0 to 1)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("gate replay -offsets 7:0-10: %v, want %q", err, want)
	}
}

// gate replay -rules FILE reads the environment as a gate with FILE reads it (as gate
// rules check does), when every set it replays is a rules file: a GATE_TICK_INTERVAL of
// 1m or more, or a GATE_COLD_WRITE_INTERVAL over 1m, which a gate with that file takes,
// failed the replay against a GATE_WINDOW no rule uses, nothing read. Against the
// environment's GATE_* limits (-against current), GATE_WINDOW is replayed, and checked.
func TestReplayRulesReadsTheEnvironmentAsAGateWithRules(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	dir := t.TempDir()
	hour, day := filepath.Join(dir, "hour.yaml"), filepath.Join(dir, "day.yaml")
	for path, body := range map[string]string{
		hour: "rules:\n  - {name: team, key: json:team_id, limits: [1h:100000]}\n",
		day:  "rules:\n  - {name: team, key: json:team_id, limits: [24h:1000000]}\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, vars := range []map[string]string{
		{"GATE_TICK_INTERVAL": "2m", "GATE_SYNC_INTERVAL": "5m"},
		{"GATE_COLD_WRITE_INTERVAL": "5m"},
	} {
		e := maps.Clone(env)
		maps.Copy(e, vars)
		for _, args := range [][]string{{"-rules", hour}, {"-rules", hour, "-against", day}} {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"replay"}, args...), testHost(e), &stdout, &stderr)
			if err != nil || !strings.Contains(stdout.String(), "replayed 0 records") {
				t.Errorf("%v gate replay %q: %v, stdout %q; want the file replayed, as a gate with it runs", vars, args, err, stdout.String())
			}
		}
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"replay", "-rules", hour, "-against", "current"}, testHost(e), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "(1m)") {
			t.Errorf("%v gate replay -against current (the GATE_* limits): %v; want the problem with GATE_WINDOW (1m)", vars, err)
		}
	}
}

// A broker that takes connections and never answers left gate replay silent for as long
// as the client's retries took (41 s in a review's), and a Ctrl-C then printed an empty
// report as if the range were empty. It says, after brokerWait, that it waits for the
// brokers, naming them, and once stopped that they never answered.
func TestReplaySaysItWaitsForSilentBrokers(t *testing.T) {
	t.Parallel()
	stop, stderr := saysItWaitsForSilentBrokers(t, nil, "replay", "-from", "1h")
	if err := stop(); !errors.Is(err, errReplayStopped) {
		t.Errorf("gate replay stopped: %v, want it stopped", err)
	}
	if !strings.Contains(stderr.String(), "gate replay: stopped before the brokers answered: nothing was read") {
		t.Errorf("gate replay stopped while the brokers were silent does not say so:\n%s", stderr.String())
	}
}

// A replay stopped before it read anything (Ctrl-C as it starts) writes a report a script
// can take as it takes any: "partitions" an empty list, not null, and no record times,
// not "0001-01-01T00:00:00Z" as the first and last record's.
func TestReplayStoppedAtOnceReportsNoNullsNorYearOne(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"replay", "-json"}, testHost(env), &stdout, &stderr)
	if !errors.Is(err, errReplayStopped) {
		t.Fatalf("gate replay stopped at once: %v, want it stopped\n%s", err, stderr.String())
	}
	var rep map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report: %v\n%s", err, stdout.String())
	}
	if ps, ok := rep["partitions"].([]any); !ok || len(ps) != 0 {
		t.Errorf(`"partitions": %v, want []`, rep["partitions"])
	}
	// Every field there whatever its value (a review found notes, dead_letters and
	// partial left out when empty or false, where the lists beside them are []).
	if ns, ok := rep["notes"].([]any); !ok || len(ns) != 0 {
		t.Errorf(`"notes": %v, want []`, rep["notes"])
	}
	if p, ok := rep["partial"].(bool); !ok || !p {
		t.Errorf(`"partial": %v, want true`, rep["partial"])
	}
	for _, c := range rep["candidates"].([]any) {
		if d, ok := c.(map[string]any)["dead_letters"].(map[string]any); !ok || len(d) != 0 {
			t.Errorf(`a candidate's "dead_letters": %v, want {}`, c.(map[string]any)["dead_letters"])
		}
	}
	if strings.Contains(stdout.String(), "0001-01-01") {
		t.Errorf("the report gives year one for a time:\n%s", stdout.String())
	}
	if rep["partial"] != true {
		t.Errorf(`"partial": %v, want true`, rep["partial"])
	}
}

// A rules file whose rule sends records to a topic the cluster does not have is a file a
// gate refuses (not ready at start; kept rules at a reload), while replay counted
// records into the topic as into any other: the report says the topic does not exist
// and which file names it, in the text and in -json's notes; a topic that exists is not
// named.
func TestReplaySaysARuleTopicDoesNotExist(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c)
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, nil, "merges"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  - {name: merges, key: json:team_id, limits: [1m:5], action: topic:merges}\n  - {name: hot, key: json:team_id, limits: [1m:50], action: topic:no-such-topic}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "rule topic no-such-topic does not exist: a gate with " + file + " refuses it"
	for _, args := range [][]string{{"-rules", file}, {"-rules", file, "-json"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"replay"}, args...), testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate replay %q: %v\n%s", args, err, stderr.String())
		}
		if !strings.Contains(stdout.String(), want) || strings.Contains(stdout.String(), "rule topic merges") {
			t.Errorf("gate replay %q: want %q, and nothing of merges:\n%s", args, want, stdout.String())
		}
	}
}

// A drop rule is read by replay whether or not GATE_OUTCOMES_TOPIC is set (it records
// every fate), where a gate in that environment refuses the file: the report says so,
// naming the rule and the variable, and not once the variable is set, nor for a drop
// rule in shadow (which a gate takes without outcomes).
func TestReplaySaysADropRuleNeedsOutcomes(t *testing.T) {
	t.Parallel()
	env, file := replayOneEvent(t, `{"team_id":"a"}`,
		"  - {name: bots, key: json:team_id, limits: [1m:5], action: drop}\n  - {name: trial, key: json:team_id, limits: [1m:5], action: drop, shadow: true}\n")
	want := "rule bots of " + file + " drops records: a gate in this environment refuses the file (action drop needs GATE_OUTCOMES_TOPIC"
	for _, outcomes := range []string{"", "outcomes"} {
		e := maps.Clone(env)
		if outcomes != "" {
			e["GATE_OUTCOMES_TOPIC"] = outcomes
		}
		for _, args := range [][]string{{"-rules", file}, {"-rules", file, "-json"}} {
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), append([]string{"replay", "-from", "1h"}, args...), testHost(e), &stdout, &stderr); err != nil {
				t.Fatalf("gate replay %q: %v\n%s", args, err, stderr.String())
			}
			out := stdout.String()
			if strings.Contains(out, want) != (outcomes == "") || strings.Contains(out, "rule trial") {
				t.Errorf("gate replay %q with GATE_OUTCOMES_TOPIC=%q: want the note %q only without it, and nothing of trial:\n%s", args, outcomes, want, out)
			}
		}
	}
}

// Replay counts every key of a per-user rule exactly, without max_keys: a team minting a
// fresh distinct_id per event is limited key by key in the report where a gate takes it
// for rotating identities (on_cardinality), and a review found 9 % of such an input
// placed otherwise with nothing said. The report names each rule with a max_keys (the
// default for a key of several fields included), its bound and its on_cardinality, and
// says nothing of a rule keyed by team alone, which has none.
func TestReplaySaysMaxKeysIsNotApplied(t *testing.T) {
	t.Parallel()
	env, file := replayOneEvent(t, `{"team_id":"a","distinct_id":"u1"}`,
		"  - {name: users, key: json:team_id+distinct_id, limits: [1m:5], max_keys: 300, on_cardinality: overflow}\n"+
			"  - {name: people, key: json:team_id+distinct_id, limits: [1m:5]}\n"+
			"  - {name: teams, key: json:team_id, limits: [1m:50]}\n")
	wants := []string{
		"rule users of " + file + " has max_keys 300, which replay does not apply",
		"more than 300 keys in a window (on one gate) for rotating identities and gives its keys under the floor on_cardinality's overflow",
		"rule people of " + file + " has max_keys 100000",
		"on_cardinality's collapse",
	}
	for _, args := range [][]string{{"-rules", file}, {"-rules", file, "-json"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"replay", "-from", "1h"}, args...), testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate replay %q: %v\n%s", args, err, stderr.String())
		}
		out := stdout.String()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("gate replay %q: want %q in the report:\n%s", args, want, out)
			}
		}
		if strings.Contains(out, "rule teams") {
			t.Errorf("gate replay %q: a note of rule teams, keyed by team alone:\n%s", args, out)
		}
	}
}

// The environment may set what a gate acts on and replay does not: GATE_THRESHOLD beside
// -rules (left out, as a gate with a rules file refuses it) and GATE_DRY_RUN (replay
// reports enforcement). A review ran both and was told nothing: the report names them,
// and says nothing of them when they are unset.
func TestReplaySaysWhatTheEnvironmentSetsThatItLeavesOut(t *testing.T) {
	t.Parallel()
	env, file := replayOneEvent(t, `{"team_id":"a"}`, "  - {name: teams, key: json:team_id, limits: [1m:50]}\n")
	wants := []string{
		"GATE_THRESHOLD set here: replay leaves them out, and a gate started with a rules file in this environment refuses to start with them",
		"GATE_DRY_RUN is set: a gate in this environment sends every record to the accepted topic",
	}
	for _, set := range []bool{false, true} {
		e := maps.Clone(env)
		if set {
			e["GATE_THRESHOLD"], e["GATE_DRY_RUN"] = "5", "true"
		}
		for _, args := range [][]string{{"-rules", file}, {"-rules", file, "-json"}} {
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), append([]string{"replay", "-from", "1h"}, args...), testHost(e), &stdout, &stderr); err != nil {
				t.Fatalf("gate replay %q: %v\n%s", args, err, stderr.String())
			}
			for _, want := range wants {
				if strings.Contains(stdout.String(), want) != set {
					t.Errorf("gate replay %q, GATE_THRESHOLD and GATE_DRY_RUN set %v: the note %q shown %v:\n%s", args, set, want, !set, stdout.String())
				}
			}
		}
	}
}

// gate replay -from before what retention kept replayed from the oldest record kept and
// said nothing: a report of "yesterday" on a topic of 12 hours' retention read as whole,
// and a range wholly deleted read 0 records, exit 0. It says which partitions start at
// their first record kept, records deleted before it, on stderr and among the report's
// notes.
func TestReplayFromBeforeRetentionSaysSo(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Value: []byte(`{"team_id":"a"}`), Timestamp: testNow.Add(-time.Hour + time.Duration(i)*time.Minute)})
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "events", Partition: 0, At: 5})
	if _, err := kadm.NewClient(cl).DeleteRecords(t.Context(), del); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from string
		said bool
	}{{"2h", true}, {"50m", false}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"replay", "-from", tc.from}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("gate replay -from %s: %v\n%s", tc.from, err, stderr.String())
		}
		const want = "partition 0 starts at offset 5, retention having deleted the records before it"
		if got := strings.Contains(stdout.String(), want); got != tc.said {
			t.Errorf("gate replay -from %s: report says %q: %v, want %v:\n%s", tc.from, want, got, tc.said, stdout.String())
		}
	}
}

// replayOneEvent is the replay notes' tests' set-up: a cluster whose input holds one
// event (value), a minute old, and a rules file of rules (its YAML, "rules:" added).
func replayOneEvent(t *testing.T, value, rules string) (env map[string]string, file string) {
	t.Helper()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"))
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte(value), Timestamp: testNow.Add(-time.Minute)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("rules:\n"+rules), 0o644); err != nil {
		t.Fatal(err)
	}
	return env, file
}

// A rule keyed by something other than the team (here by distinct_id alone) listed the
// keys it limited as the teams limited differently, "u0" to "u6", and the teams whose
// records they were, loud and quiet, nowhere (a review): its rows are filed under the
// record's team (route.TeamField: the team rule's field), so the teams are listed.
func TestReplayDiffListsTheTeamsOfARuleNotKeyedByTheTeam(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"))
	at := testNow.Add(-time.Hour).Truncate(time.Minute)
	recs := loudAndQuiet(at, 700, func(team string, i int) []byte {
		return fmt.Appendf(nil, `{"team_id":%q,"distinct_id":"u%d"}`, team, i%7)
	})
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	const team = "- name: team\n  key: json:team_id\n  limits: [1m:100000]\n"
	if err := os.WriteFile(a, []byte("rules:\n"+team+"- name: user\n  key: json:distinct_id\n  limits: [1m:40]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("rules:\n"+team), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"replay", "-rules", a, "-against", b, "-from", "2h", "-json"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate replay: %v\n%s", err, stderr.String())
	}
	var rep replay.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var teams []string
	for _, d := range rep.Diff {
		teams = append(teams, d.Team)
	}
	slices.Sort(teams)
	if !slices.Equal(teams, []string{"loud", "quiet"}) {
		t.Errorf("teams limited differently: %q, want loud and quiet (the users' teams)", teams)
	}
	// Each user's key, reported under its team (loud:u1), has the levels the user's
	// limiter had: its threshold and peak were 0, kept under the user's key alone.
	n := 0
	for _, k := range rep.Candidates[0].Keys {
		if k.Rule != "user" {
			continue
		}
		n++
		if !strings.Contains(k.Key, ":u") || k.Threshold != 40 || k.PeakRatio < 1 || len(k.Series) == 0 || k.Series[0].Threshold != 40 {
			t.Errorf("key %q of rule user: threshold %d, peak %.2f, series %+v; want its team's prefix, 40, a peak over 1 and the levels", k.Key, k.Threshold, k.PeakRatio, k.Series)
		}
	}
	if n == 0 {
		t.Errorf("no key of rule user reported: %+v", rep.Candidates[0].Keys)
	}
}

// loudAndQuiet are n records from at on, 20 ms apart, two of every three of team loud and
// the third of team quiet, each keyed by its team, record i's value value(team, i).
func loudAndQuiet(at time.Time, n int, value func(team string, i int) []byte) []*kgo.Record {
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		team := "quiet"
		if i%3 != 0 {
			team = "loud"
		}
		recs = append(recs, &kgo.Record{Key: []byte(team), Value: value(team, i), Timestamp: at.Add(time.Duration(i) * 20 * time.Millisecond)})
	}
	return recs
}

// TestReplayUsageLineNamesEveryFlag: the usage's first line is what a user reads for the
// flags a replay takes; it left out -topic, which docs/rules.md names beside GATE_INPUT_TOPIC.
func TestReplayUsageLineNamesEveryFlag(t *testing.T) {
	line, _, _ := strings.Cut(replayUsage, "\n")
	replayFlags(&replayOpts{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(line, "[-"+f.Name+" ") && !strings.Contains(line, "[-"+f.Name+"]") && !strings.Contains(line, "| -"+f.Name+" ") {
			t.Errorf("replay's usage line lacks -%s:\n%s", f.Name, line)
		}
	})
}

// Brokers that answer, slowly, are not brokers that never answer: a review's replay on a
// loaded Apache Kafka listed the range's offsets at once, got its first fetch after more
// than brokerWait, and said "no answer yet from the brokers …; waiting, Ctrl-C stops"
// before reading the whole range. The offsets listed are an answer: the note is for
// brokers silent from the start (TestReplaySaysItWaitsForSilentBrokers).
func TestReplayDoesNotCallASlowFetchSilentBrokers(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events"))
	at := testNow.Add(-time.Hour)
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte(`{"team_id":"a"}`), Timestamp: at}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The first fetch is answered brokerWait and a second after it comes.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		c.SleepControl(func() { <-time.After(brokerWait + time.Second) })
		return nil, nil, false
	})
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"replay", "-workers", "1"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate replay: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "no answer yet from the brokers") {
		t.Errorf("gate replay said the brokers had not answered, after they listed its offsets:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "replayed 1 records") {
		t.Errorf("gate replay's report:\n%s", stdout.String())
	}
}
