package consume

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestProduceProblemOfRecordsGivenUpCleared: at least once, a record the dead-letter topic
// refuses (TOPIC_AUTHORIZATION_FAILED) makes the gate not ready naming the topic; when the
// record's partition then moves to another gate, the first gives the record up, and once
// the ACL is back the other writes it, and no produce of the first's fails any more. It
// stayed not ready, saying records were retried, until it happened to write a dead letter
// itself.
func TestProduceProblemOfRecordsGivenUpCleared(t *testing.T) {
	t.Parallel()
	env := newMovingEnv(t)
	fault := refuseDeadLetters(env)
	a := env.startA(t)
	produceToPartition0(t, env.cluster, inputRecord(0, "")) // not JSON: a dead letter
	want := `producing to topic "` + dlqTopic + `" fails`
	waitFor(t, 20*time.Second, "a not ready naming the dead-letter topic", func() bool {
		return strings.Contains(strings.Join(a.c.NotReady(), "; "), want)
	})

	b := env.startB(t)
	waitFor(t, 20*time.Second, "partition 0 moved to b", func() bool {
		return b.c.owned(0) != nil && a.c.owned(0) == nil && a.c.owned(1) != nil
	})
	// Given up before the ACL is back: an attempt of a's in flight as its revoke stopped
	// waiting may still land, at least once (TestRevokeGivesUpBeforeItsCommit), and
	// with the ACL back by then it did in 4 of 150 runs under -race: two dead letters.
	waitFor(t, 10*time.Second, "a gave the record up (nothing awaits a retry)", func() bool { return a.c.retry.pending.Load() == 0 })
	fault.Remove()
	if out := collect(t, env.cluster, 1, 20*time.Second, 200*time.Millisecond); len(out.recs[dlqTopic]) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want the one b wrote", len(out.recs[dlqTopic]))
	}
	// Polled, not slept: the problem is cleared as the last retry settles (produceSettled).
	waitFor(t, 20*time.Second, "a, which gave up the record that failed with its partition, ready again", func() bool {
		return !strings.Contains(strings.Join(a.c.NotReady(), "; "), want)
	})
}

// TestRevokeGivesUpBeforeItsCommit: at least once, a record that keeps failing (the
// dead-letter topic refusing it) while its partition is revoked is given up once the
// revoke stops waiting for it: the retry loop starts no attempt of it after that. Before,
// it was given up only once the partition was dropped, after the revoke's commit had come
// back; an attempt begun meanwhile, the topic writable again by then, wrote after the
// commit a record the partition's next owner wrote again
// (TestProduceProblemOfRecordsGivenUpCleared found two dead letters in 1 of 20, then 1 of
// 100, runs under -race). In the revoke, after its wait (Consumer.revokeWaited), the test counts the
// produces the topic refuses until the record is given up: at most the one in flight
// then.
func TestRevokeGivesUpBeforeItsCommit(t *testing.T) {
	t.Parallel()
	env := newMovingEnv(t)
	fault := refuseDeadLetters(env)
	type seen struct{ inFlight, attempts int64 }
	var once sync.Once
	result := make(chan seen, 1)
	env.before = func(c *Consumer) {
		c.revokeWaited = func() {
			once.Do(func() {
				// Only the dead letter is produced: what is outstanding is its attempt.
				from, inFlight := fault.Hits(), c.outstanding.Load()
				deadline := time.Now().Add(20 * time.Second)
				for c.retry.pending.Load() != 0 && int64(fault.Hits()-from) <= inFlight && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				result <- seen{inFlight, int64(fault.Hits() - from)}
			})
		}
	}
	a := env.startA(t)
	env.before = nil
	produceToPartition0(t, env.cluster, inputRecord(0, "")) // not JSON: a dead letter
	waitFor(t, 20*time.Second, "a's dead letter refused and awaiting a retry", func() bool { return a.c.retry.pending.Load() > 0 })

	env.startB(t)
	select {
	case r := <-result:
		if r.attempts > r.inFlight {
			t.Fatalf("a's revoke stopped waiting for its record with %d attempt(s) of it in flight, and the topic refused %d after: a retry began once its partition was given up", r.inFlight, r.attempts)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a's revoke never stopped waiting")
	}
	waitFor(t, 20*time.Second, "a gave the record up", func() bool { return a.c.retry.pending.Load() == 0 })
}

// refuseDeadLetters makes the dead-letter topic refuse every produce
// (TOPIC_AUTHORIZATION_FAILED) until the fault is removed.
func refuseDeadLetters(env *movingEnv) *kfake.FaultHandle {
	return env.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: dlqTopic, Err: kerr.TopicAuthorizationFailed, Count: -1,
	})
}

// TestFinalCommitRefusedNotLoggedCommitted: at least once, a shutdown whose final commit
// the coordinator refuses logs the error, and its "consumer stopped" line (and the
// "partitions revoked" line of leaving the group, which commits again) name no offset as
// committed. Before, both listed the offsets sent as "committed", at info for the stop.
func TestFinalCommitRefusedNotLoggedCommitted(t *testing.T) {
	t.Parallel()
	const n = 20
	env := newEnv(t, 1)
	env.ccfg.CommitInterval = time.Hour // only the shutdown commits
	env.ccfg.RevokeTimeout = time.Second
	logs := &syncBuffer{}
	env.logs = logs
	a := env.start(t, "a")
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-1")
	}
	produceAll(t, producer(t, env.cluster), recs)
	collect(t, env.cluster, n, 30*time.Second, 0)
	waitFor(t, 10*time.Second, "every output record acknowledged", func() bool {
		return a.c.outstanding.Load() == 0 && a.c.retry.pending.Load() == 0
	})
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.GroupAuthorizationFailed, Count: -1})
	a.stop(t)
	if refused.Hits() == 0 {
		t.Fatal("the shutdown sent no commit for the coordinator to refuse: the test tests nothing")
	}
	if !slices.ContainsFunc(logLines(t, logs.String()), func(line map[string]any) bool {
		return (line["level"] == "WARN" || line["level"] == "ERROR") && strings.Contains(fmt.Sprint(line), "GROUP_AUTHORIZATION_FAILED")
	}) {
		t.Errorf("the refused final commit logged no warning or error naming GROUP_AUTHORIZATION_FAILED:\n%s", logs.String())
	}
	if gi := env.cluster.GroupInfo(testGroup); gi != nil {
		if c, ok := gi.Commits[inTopic][0]; ok {
			t.Fatalf("partition 0 committed at %d: the fault let a commit through, the test tests nothing", c.Offset)
		}
	}
	var lines []map[string]any
	for _, line := range logLines(t, logs.String()) {
		if line["msg"] == "consumer stopped" || line["msg"] == "partitions revoked" {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no stop or revoke line:\n%s", logs.String())
	}
	for _, line := range lines {
		if m, _ := line["committed"].(map[string]any); len(m) > 0 {
			t.Errorf("%q line says committed %v, though the coordinator refused every commit: %v", line["msg"], m, line)
		}
	}
}

// TestStopLineSaysWhereEachPartitionResumes: at least once, a shutdown after the
// interval's commits had covered every record logs "consumer stopped" with the offset each
// partition's next owner starts at (committed_offsets). Before, the line's only offsets
// were committed, what the final commit moved: empty here, read as nothing committed.
// That committed, and the shutdown revoke line's, are {} (they were null).
func TestStopLineSaysWhereEachPartitionResumes(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 40
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	logs := &syncBuffer{}
	env.logs = logs
	a := env.start(t, "a")
	produceTeams(t, env, n, 5)
	collect(t, env.cluster, n, 30*time.Second, 0)
	ends := map[int32]int64{}
	// The group holding the offsets is not enough: the gate learns of an interval commit
	// from its answer, which may come after the coordinator stored it (and, at the
	// shutdown, not at all), and the final commit then sends those offsets again. Wait
	// for the gate's own gate_committed_offset, set once the answer is read.
	gateCommitted := func(p int32) (float64, bool) {
		mfs, err := a.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "gate_committed_offset" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "partition" && l.GetValue() == strconv.Itoa(int(p)) {
						return m.GetGauge().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	waitFor(t, 30*time.Second, "every partition committed at its end by the interval's commits, as the gate knows", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		total := int64(0)
		for p := range int32(parts) {
			c, ok := gi.Commits[inTopic][p]
			if !ok {
				return false
			}
			if got, ok := gateCommitted(p); !ok || int64(got) != c.Offset {
				return false
			}
			ends[p] = c.Offset
			total += c.Offset
		}
		return total == n
	})
	a.stop(t)
	stop := lastLine(t, logs.String(), "consumer stopped")
	if stop == nil {
		t.Fatalf("no \"consumer stopped\" line:\n%s", logs.String())
	}
	at, ok := stop["committed_offsets"].(map[string]any)
	if !ok {
		t.Fatalf("the stop line names no committed_offsets: %v", stop)
	}
	for p, end := range ends {
		if got, _ := at[strconv.Itoa(int(p))].(float64); int64(got) != end {
			t.Errorf("committed_offsets[%d] = %v, want %d, the group's commit (line %v)", p, at[strconv.Itoa(int(p))], end, stop)
		}
	}
	// Nothing was left for the final commit, nor for the revoke of leaving the group:
	// each line says so with an empty object, not null, which read as a fault.
	for _, msg := range []string{"consumer stopped", "partitions revoked"} {
		line := lastLine(t, logs.String(), msg)
		if line == nil {
			t.Fatalf("no %q line:\n%s", msg, logs.String())
		}
		if m, ok := line["committed"].(map[string]any); !ok || len(m) != 0 {
			t.Errorf("%q line: committed = %#v, want {} (nothing moved)", msg, line["committed"])
		}
	}
}

// TestNothingNewAssignedIsNoInfoLine: a rebalance that assigns a member nothing new (the
// member that keeps its partitions as another joins, cooperatively) logs no "partitions
// assigned" line at info: it logged one of null partitions, often twice a rebalance (a
// review).
func TestNothingNewAssignedIsNoInfoLine(t *testing.T) {
	t.Parallel()
	const parts = 4
	env := newEnv(t, parts)
	logs := &syncBuffer{}
	env.logs = logs
	a := env.start(t, "a")
	waitFor(t, 30*time.Second, "a owning every partition", func() bool { return len(owned(a)) == parts })
	env.logs = nil
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "b taking partitions from a", func() bool { return len(owned(b)) > 0 && len(owned(a)) < parts })
	b.stop(t)
	waitFor(t, 30*time.Second, "a owning every partition again", func() bool { return len(owned(a)) == parts })
	a.stop(t)
	n := 0
	for _, line := range logLines(t, logs.String()) {
		if line["msg"] != "partitions assigned" || line["level"] != "INFO" {
			continue
		}
		n++
		if ps, _ := line["partitions"].([]any); len(ps) == 0 {
			t.Errorf("an info line of no partition assigned: %v", line)
		}
	}
	if n < 2 {
		t.Errorf("%d info lines of partitions assigned, want the start's and the return's at least:\n%s", n, logs.String())
	}
}

// TestExactlyOnceStopLineSaysWhereEachPartitionResumes: exactly once, the stop line gives
// the offset each partition's next owner starts at (committed_offsets), as at least once
// it does: it gave only how many transactions committed and aborted (a review).
func TestExactlyOnceStopLineSaysWhereEachPartitionResumes(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 40
	env := newEOSEnv(t, parts)
	logs := &syncBuffer{}
	env.logs = logs
	a := env.start(t, "a")
	produceTeams(t, env, n, 5)
	collect(t, env.cluster, n, 30*time.Second, 0, readCommitted())
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	a.stop(t)
	gi := env.cluster.GroupInfo(testGroup)
	stop := lastLine(t, logs.String(), "consumer stopped")
	if stop == nil || gi == nil {
		t.Fatalf("no \"consumer stopped\" line, or no group:\n%s", logs.String())
	}
	at, ok := stop["committed_offsets"].(map[string]any)
	if !ok {
		t.Fatalf("the stop line names no committed_offsets: %v", stop)
	}
	total := int64(0)
	for p := range int32(parts) {
		c := gi.Commits[inTopic][p]
		total += c.Offset
		if got, _ := at[strconv.Itoa(int(p))].(float64); int64(got) != c.Offset {
			t.Errorf("committed_offsets[%d] = %v, want %d, the group's commit (line %v)", p, at[strconv.Itoa(int(p))], c.Offset, stop)
		}
	}
	if total != n {
		t.Errorf("the group's commits sum to %d, want %d", total, n)
	}
}

// produceTeams writes the input records of ids 0 to n-1, of teams team-0 to
// team-(teams-1) in turn.
func produceTeams(t *testing.T, env *gateEnv, n, teams int) {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%teams))
	}
	produceAll(t, producer(t, env.cluster), recs)
}
