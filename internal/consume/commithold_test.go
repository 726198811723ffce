package consume

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// holdBatch is input records from to from+n-1, of seven teams.
func holdBatch(from, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = inputRecord(from+i, "team-"+strconv.Itoa((from+i)%7))
	}
	return recs
}

// TestCommitHold: at-least-once, the broker refuses every offset commit (as while the
// group coordinator is dead). After 2 × GATE_COMMIT_INTERVAL of failures the gate
// stops fetching the input, says so and shows it in gate_fetch_held_by_commits; once
// commits succeed again it resumes by itself and routes every record. Before, it
// fetched and routed on while nothing was committed, all of which a rebalance would
// have replayed.
func TestCommitHold(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	var logs logSink
	env.logs = &logs
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, holdBatch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	produceAll(t, prod, holdBatch(100, 100)) // routed, acknowledged, not committed
	waitFor(t, 20*time.Second, "fetching held after failed commits", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) &&
			testutil.ToFloat64(g.c.m.commitHeld) == 1
	})
	if !strings.Contains(logs.String(), "fetching the input stops until one succeeds") {
		t.Error("no line says fetching stopped")
	}
	produceAll(t, prod, holdBatch(200, 100)) // not fetched while held

	fail.Remove()
	waitFor(t, 20*time.Second, "fetching resumed once commits succeed", func() bool {
		return !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) &&
			testutil.ToFloat64(g.c.m.commitHeld) == 0
	})
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if seen, _ := out.routed(idRange(0, 300)); len(seen) != 300 {
		t.Errorf("%d of 300 records routed after the hold", len(seen))
	}
	if !strings.Contains(logs.String(), "kafka: offsets commit again; fetching the input resumes") {
		t.Error("no line says fetching resumed")
	}
}

// TestCommitHoldIsAStall: at-least-once, every offset commit fails and fetching is held
// (TestCommitHold) while records wait in the input: the gate makes no progress with work
// to do, and the watchdog says so, not ready past StallNotReady naming the held fetches,
// not live past StallRestart; once commits succeed it is ready again and routes every
// record. Before, the paused fetches left each partition's lag at its last value, 0 on a
// gate that had caught up: no work, no stall, and the gate stayed ready and live with
// its input unread for as long as the commits failed.
func TestCommitHoldIsAStall(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	env.ccfg.StallNotReady = time.Second
	env.ccfg.StallRestart = 2 * time.Second
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, holdBatch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	produceAll(t, prod, holdBatch(100, 100))
	waitFor(t, 20*time.Second, "fetching held after failed commits", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	produceAll(t, prod, holdBatch(200, 100)) // not fetched while held
	waitFor(t, 30*time.Second, "not ready for want of progress, the held fetches named", func() bool {
		nr := strings.Join(g.c.NotReady(), ";")
		return strings.Contains(nr, "no progress for") && strings.Contains(nr, "fetching the input is held")
	})
	waitFor(t, 30*time.Second, "not live", func() bool { return g.c.Live() != nil })

	fail.Remove()
	waitFor(t, 30*time.Second, "ready and live once commits succeed", func() bool {
		return g.c.Ready() && g.c.Live() == nil
	})
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if seen, _ := out.routed(idRange(0, 300)); len(seen) != 300 {
		t.Errorf("%d of 300 records routed after the hold", len(seen))
	}
}

// TestCommitHoldHangingCommit: the broker takes the commits and never answers them, as a
// client retrying a coordinator that is gone keeps one in flight: no callback reports a
// failure, and the gate holds its fetches all the same, judged from its last
// successful commit; once the commits are answered it resumes. (The first version of the
// hold counted failed callbacks only, and one gate of two never held on Apache Kafka.)
func TestCommitHoldHangingCommit(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, holdBatch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	release := make(chan struct{})
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		env.cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	produceAll(t, prod, holdBatch(100, 100))
	waitFor(t, 20*time.Second, "fetching held while commits hang", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	if got := testutil.ToFloat64(g.c.m.commitErrors); got != 0 {
		t.Errorf("gate_commit_errors_total = %v while commits hang unanswered, want 0 (the hold is not a failure count)", got)
	}
	free()
	waitFor(t, 20*time.Second, "fetching resumed once commits are answered", func() bool {
		return !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	produceAll(t, prod, holdBatch(200, 100))
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if seen, _ := out.routed(idRange(0, 300)); len(seen) != 300 {
		t.Errorf("%d of 300 records routed after the hold", len(seen))
	}
}

// owned returns the input partitions g owns, in order.
func owned(g *testGate) []int32 {
	var ids []int32
	for _, p := range g.c.snapshot(nil) {
		ids = append(ids, p.id)
	}
	slices.Sort(ids)
	return ids
}

// TestCommitHoldRevokeNothingToCommit: fetching is held while commits fail, and a
// rebalance revokes partitions of the gate that have nothing to commit (idle since the
// last commit). The revoke's commit finds nothing to send, and the hold must stay: the
// partitions the gate keeps still have records routed and not committed, and their
// commits still fail. Before, nothing to commit for the revoked partitions counted as a
// successful commit: the revoke resumed fetching the whole input, and the gate fetched
// and routed another GATE_COMMIT_INTERVAL × 2 of records a rebalance would replay.
func TestCommitHoldRevokeNothingToCommit(t *testing.T) {
	t.Parallel()
	const parts = 4
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	var logs logSink
	env.logs = &logs
	prod := partProducer(t, env.cluster)
	a := env.start(t, "a")
	waitFor(t, 20*time.Second, "gate a owning every partition", func() bool { return len(owned(a)) == parts })
	for p := range int32(parts) {
		produceTo(t, prod, p, int(p)*100, 50)
	}
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	defer fail.Remove()
	// Traffic on every partition a keeps when b joins (the cooperative-sticky balancer
	// moves the last ones), none on those it gives up.
	for _, p := range []int32{0, 1} {
		produceTo(t, prod, p, 1000+int(p)*100, 50)
	}
	waitFor(t, 20*time.Second, "fetching held after failed commits", func() bool {
		return slices.Contains(a.c.live.Load().PauseFetchTopics(), inTopic) && testutil.ToFloat64(a.c.m.commitHeld) == 1
	})
	// From here on: a loaded machine can starve the commit loop for a hold's time before
	// the records came, and the next commit, finding nothing to commit, end that hold.
	mark := len(logs.String())

	b := env.start(t, "b")
	waitFor(t, 20*time.Second, "the partitions shared by a and b", func() bool {
		return len(owned(a)) == parts/2 && len(owned(b)) == parts/2 && b.c.Ready()
	})
	t.Logf("a owns %v, b owns %v", owned(a), owned(b))
	if slices.Contains(owned(b), 0) || slices.Contains(owned(b), 1) {
		t.Fatalf("b took a partition with uncommitted records (%v): the test needs them kept by a", owned(b))
	}
	if !slices.Contains(a.c.live.Load().PauseFetchTopics(), inTopic) || testutil.ToFloat64(a.c.m.commitHeld) != 1 {
		t.Errorf("gate a resumed fetching at a revoke with nothing to commit, while its commits still fail (gate_fetch_held_by_commits %v)",
			testutil.ToFloat64(a.c.m.commitHeld))
	}
	if strings.Contains(logs.String()[mark:], `"msg":"kafka: offsets commit again; fetching the input resumes","gate":"a"`) {
		t.Error("gate a says offsets commit again while every commit fails")
	}
}

// TestCommitAnsweredAfterLost: an interval commit is in flight when the gate loses its
// partitions (a heartbeat refused: the group moved on without it), and the broker takes
// it after. The partitions are gone, and so must their gate_committed_offset series be:
// another gate owns them now and exports its own. Before, the late answer brought the
// series back, at a stale offset, for partitions the gate no longer owned.
func TestCommitAnsweredAfterLost(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	var block atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	// The commit waits in the client, before it is sent: the connection the heartbeats
	// use stays free.
	env.ctx = func(ctx context.Context) context.Context {
		return kgo.PreCommitFnContext(ctx, func(*kmsg.OffsetCommitRequest) error {
			if block.Load() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
			}
			return nil
		})
	}
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = inputRecord(i, "team-"+strconv.Itoa(i%7))
	}
	produceAll(t, prod, recs[:50])
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	block.Store(true)
	produceAll(t, prod, recs[50:])
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no interval commit in flight")
	}
	// The gate is out of the group from its next heartbeat on, and stays out (every
	// join refused) while the commit in flight is answered.
	env.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	env.cluster.ControlKey(kmsg.JoinGroup.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil, true
	})
	waitFor(t, 20*time.Second, "partitions lost", func() bool {
		return testutil.ToFloat64(g.c.m.rebalances.WithLabelValues("lost")) == 1 && len(owned(g)) == 0 &&
			testutil.CollectAndCount(g.c.m.committed) == 0
	})
	free()
	waitCommitted(t, env.cluster, parts, 20*time.Second) // the broker took the commit
	// Its answer handled (the interval commit's callback clears commitPending), not a
	// second of sleep a loaded machine may pass with the answer not yet read.
	waitFor(t, 20*time.Second, "the commit's answer handled", func() bool { return !g.c.commitPending.Load() })
	if n := testutil.CollectAndCount(g.c.m.committed); n != 0 {
		t.Fatalf("gate_committed_offset has %d series after the gate lost every partition, want 0", n)
	}
}

// TestCommitHoldNotEndedByACommitSentBefore: a commit the coordinator is slow with is
// answered, successfully, only after the gate began holding its fetches, and every
// commit after it fails. It covers nothing routed between its send and the hold, and
// must not end the hold; the first commit sent during the hold that succeeds does.
// Before, its late answer resumed fetching (and said offsets commit again) while no
// commit since had succeeded, and the gate fetched and routed on what a rebalance
// would replay.
func TestCommitHoldNotEndedByACommitSentBefore(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	// The test starts the hold itself (holdNow), once the records it needs are routed: a
	// hold of CommitHoldAfter's own could come first on a loaded machine.
	env.ccfg.CommitHoldAfter = time.Hour
	var logs logSink
	env.logs = &logs
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, holdBatch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	release := make(chan struct{})
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	var seen atomic.Int32 // commits the broker was sent since the first was held
	var failing atomic.Bool
	failing.Store(true)
	env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if seen.Add(1) == 1 {
			env.cluster.SleepControl(func() { <-release })
			return nil, nil, false // answered as the broker answers: taken
		}
		if !failing.Load() {
			return nil, nil, false
		}
		return refuseOffsetCommit(req, kerr.UnknownServerError), nil, true
	})
	produceAll(t, prod, holdBatch(100, 100))
	waitFor(t, 20*time.Second, "a commit held", func() bool { return seen.Load() == 1 })
	// Routed and acknowledged after the held commit was sent: the commits after it have
	// them to send (franz-go queues each behind the one in flight).
	produceAll(t, prod, holdBatch(200, 100))
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	if got, _ := out.routed(idRange(0, 300)); len(got) != 300 {
		t.Fatalf("%d of 300 records routed before the hold", len(got))
	}
	waitAcked(t, g)
	holdNow(g)
	waitFor(t, 20*time.Second, "fetching held while the first commit hangs", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	mark := len(logs.String())
	free()
	// The held commit answered, franz-go sends the next: it fails, as every one after.
	waitFor(t, 20*time.Second, "a commit after the held one failed", func() bool {
		return seen.Load() >= 3 && testutil.ToFloat64(g.c.m.commitErrors) >= 2
	})
	if !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) || testutil.ToFloat64(g.c.m.commitHeld) != 1 {
		t.Errorf("fetching resumed on the answer of a commit sent before the hold, every commit since failing (gate_fetch_held_by_commits %v)",
			testutil.ToFloat64(g.c.m.commitHeld))
	}
	if strings.Contains(logs.String()[mark:], "offsets commit again") {
		t.Error("the gate says offsets commit again while every commit since the hold fails")
	}

	failing.Store(false)
	waitFor(t, 20*time.Second, "fetching resumed once a commit sent during the hold is taken", func() bool {
		return !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) && strings.Contains(logs.String()[mark:], "offsets commit again")
	})
	produceAll(t, prod, holdBatch(300, 100))
	out = collect(t, env.cluster, 400, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if got, _ := out.routed(idRange(0, 400)); len(got) != 400 {
		t.Errorf("%d of 400 records routed after the hold", len(got))
	}
}

// waitAcked waits until every record g routed is acknowledged.
func waitAcked(t *testing.T, g *testGate) {
	t.Helper()
	waitFor(t, 20*time.Second, "every record acknowledged", func() bool {
		for _, p := range g.c.snapshot(nil) {
			if n, _ := p.inFlight(false); n > 0 {
				return false
			}
		}
		return true
	})
}

// holdNow has g's hold loop hold fetching at its next check, as CommitHoldAfter of
// failed commits would: its last successful commit is made an hour old.
func holdNow(g *testGate) {
	g.c.hold.mu.Lock()
	defer g.c.hold.mu.Unlock()
	g.c.hold.lastOK = time.Now().Add(-time.Hour)
}

// TestIntervalCommitCanceledAtShutdownIsNoError: at-least-once, the shutdown cancels
// the commit loop while an interval commit is in flight (franz-go then answers its
// callback with the context's error); the final commit commits what was routed. Nothing
// failed: the interval commit was given up, its offsets in the final one. Before, it was
// counted in gate_commit_errors_total and logged as an interval commit that failed, at
// every shutdown that met one in flight.
func TestIntervalCommitCanceledAtShutdownIsNoError(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = time.Hour // only the commits the test makes
	var logs logSink
	env.logs = &logs
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, holdBatch(0, 100))
	out := collect(t, env.cluster, 100, 30*time.Second, 300*time.Millisecond)
	if got, _ := out.routed(idRange(0, 100)); len(got) != 100 {
		t.Fatalf("%d of 100 records routed", len(got))
	}
	waitAcked(t, g)
	// The commit loop's commit as the shutdown cancels its context under it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := g.c.commit(ctx, false, nil); err != nil {
		t.Fatal(err)
	}
	g.stop(t)
	if got := testutil.ToFloat64(g.c.m.commitErrors); got != 0 {
		t.Errorf("gate_commit_errors_total = %v after a shutdown that canceled an interval commit, want 0", got)
	}
	if strings.Contains(logs.String(), "commit failed") {
		t.Errorf("a shutdown that canceled an interval commit logged a failed commit:\n%s", logs.String())
	}
	waitCommitted(t, env.cluster, parts, 20*time.Second)
}

// TestCommitHoldNotForSlowCommits: at-least-once with a short GATE_COMMIT_INTERVAL
// (10 ms), every offset commit succeeds but is answered after 100 ms, as on a loaded
// cluster. The commits must keep up with the input, and, none failing, fetching must
// never be held. Before, every tick queued one more commit in franz-go behind the
// unanswered ones, each with the offsets of its send: 20 s after the input ended the
// group's commits covered 300 of its 400 records, and fell further behind the longer
// the gate ran. And the hold came at 2 × GATE_COMMIT_INTERVAL (20 ms) without an answer,
// with a warning at every slow commit.
func TestCommitHoldNotForSlowCommits(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 10 * time.Millisecond
	var logs logSink
	env.logs = &logs
	env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		env.cluster.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		return nil, nil, false // then committed as usual
	})
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	for i := range 5 {
		produceAll(t, prod, holdBatch(i*100, 100))
		waitCommitted(t, env.cluster, parts, 20*time.Second)
	}
	g.stop(t)
	if strings.Contains(logs.String(), "fetching the input stops until one succeeds") {
		t.Errorf("fetching held though every commit succeeded (GATE_COMMIT_INTERVAL %s, commits answered in 100 ms): %d holds",
			env.ccfg.CommitInterval, strings.Count(logs.String(), "fetching the input stops until one succeeds"))
	}
}
