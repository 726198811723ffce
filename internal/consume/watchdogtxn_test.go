package consume

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestWatchdogIdleAfterTransactionalInput: input written in a transaction ends with its
// commit marker, an offset no poll returns; a gate that has routed and committed every
// record of it is idle, and stays ready and live however long it idles, in both delivery
// modes. Before, the marker counted as lag (the high watermark is one past the last
// record), so the idle gate went not ready past StallNotReady and not live past
// StallRestart: Kubernetes restarted it for want of input.
func TestWatchdogIdleAfterTransactionalInput(t *testing.T) {
	t.Parallel()
	const n = 50
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			env.ccfg.TransactionalID = "gate-" + d.String()
			env.ccfg.StallNotReady = time.Second
			env.ccfg.StallRestart = 2 * time.Second

			prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.TransactionalID("input-writer"),
				kgo.DefaultProduceTopic(inTopic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := prod.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for id := range n {
				r := inputRecord(id, "team-"+strconv.Itoa(id%7))
				if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if hwm := env.cluster.PartitionInfo(inTopic, 0).HighWatermark; hwm != n+1 {
				t.Fatalf("input high watermark %d, want %d (the records and the commit marker)", hwm, n+1)
			}

			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "every record committed", func() bool {
				gi := env.cluster.GroupInfo(testGroup)
				if gi == nil {
					return false
				}
				gc, ok := gi.Commits[inTopic][0]
				return ok && gc.Offset >= n
			})
			for deadline := time.Now().Add(4 * env.ccfg.StallRestart); time.Now().Before(deadline); {
				if u := unwell(g.c); u != "" {
					t.Fatalf("an idle gate: %s", u)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestWatchdogExactlyOnceWaitsForOpenInputTransaction: an exactly-once gate reads its
// input read_committed, so records of a transaction an upstream producer keeps open
// cannot be polled until it ends: the gate, having routed and committed every record
// below it, waits, and that wait is no stall: it stays ready and live. Before, the open
// transaction's records counted as lag (the high watermark, not the last stable offset),
// so the gate went not ready past StallNotReady and not live past StallRestart, and
// Kubernetes restarted it for a transaction no restart can end.
func TestWatchdogExactlyOnceWaitsForOpenInputTransaction(t *testing.T) {
	t.Parallel()
	const n, open = 50, 5
	env := newEOSEnv(t, 1)
	// Bounds a loaded machine's scheduling stays inside (at 1 s and 2 s the gate once went
	// not ready beside eight -race packages and the JVM suite, load 19); the open
	// transaction's wait, as lag, passed them within the watch below.
	env.ccfg.StallNotReady = 3 * time.Second
	env.ccfg.StallRestart = 6 * time.Second
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)

	prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.TransactionalID("input-writer"),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(inTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for id := n; id < n+open; id++ {
		if err := prod.ProduceSync(ctx, inputRecord(id, "team-1")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if p := env.cluster.PartitionInfo(inTopic, 0); p.LastStableOffset != n || p.HighWatermark != n+open {
		t.Fatalf("input stable to %d of %d, want %d of %d (the transaction open)", p.LastStableOffset, p.HighWatermark, n, n+open)
	}

	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "every record below the open transaction committed", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		gc, ok := gi.Commits[inTopic][0]
		return ok && gc.Offset >= n
	})
	for deadline := time.Now().Add(env.ccfg.StallRestart + env.ccfg.StallNotReady); time.Now().Before(deadline); {
		if u := unwell(g.c); u != "" {
			t.Fatalf("a gate waiting for an input transaction to end: %s", u)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Committed, the transaction's records are routed: the gate did not forget them.
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	out := collect(t, env.cluster, n+open, 20*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(n + open); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestWatchdogExactlyOnceHungTransactionEnd: the transaction coordinator stops
// answering EndTxn while records keep arriving. The gate cannot end its transaction, so
// it polls nothing more: it is stuck, not idle, and is reported not ready past
// StallNotReady and not live past StallRestart. Before, the records it had polled were
// all routed and produced, the lag it last saw was 0 and nothing was buffered, so the
// watchdog took the gate for idle: ready and live for as long as End hung, its input
// piling up unread.
func TestWatchdogExactlyOnceHungTransactionEnd(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.StallNotReady = time.Second
	env.ccfg.StallRestart = 2 * time.Second
	release := make(chan struct{})
	var held atomic.Int64
	env.cluster.ControlKey(kmsg.EndTxn.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		held.Add(1)
		env.cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	t.Cleanup(func() { close(release) }) // before the gate's stop: its last End is answered
	id := 0
	more := func() {
		batch := make([]*kgo.Record, 5)
		for i := range batch {
			batch[i] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			id++
		}
		produceAll(t, prod, batch)
		time.Sleep(20 * time.Millisecond)
	}
	// The hung End first: on a loaded machine the gate may make no progress for a
	// StallNotReady before its first transaction ends, which is not what is tested.
	waitFor(t, 30*time.Second, "an EndTxn held at the broker", func() bool {
		more()
		return held.Load() > 0
	})
	waitFor(t, 20*time.Second, "not ready for want of progress, not live", func() bool {
		more()
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), "no progress for") && g.c.Live() != nil
	})
}

// TestWatchdogEveryProduceFailing: the broker fails every produce to the accepted topic
// (a retriable error, for good), so no record is ever written: the gate makes no
// progress while records wait, and is reported not ready past StallNotReady and not
// live past StallRestart, in both delivery modes; once the broker takes records again
// it commits them and is ready again. Before, exactly once, each aborted transaction
// (and each poll replaying it) counted as progress, and between the replays the lag
// measured from the routed records read 0, the gate idle: ready and live for as long
// as every transaction aborted, as GATE_STALL_RESTART promises otherwise.
func TestWatchdogEveryProduceFailing(t *testing.T) {
	t.Parallel()
	const n = 50
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 1)
			env.ccfg.Delivery = tc.d
			env.ccfg.StallNotReady = time.Second
			env.ccfg.StallRestart = 2 * time.Second
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			}
			produceAll(t, producer(t, env.cluster), recs)
			fault := failAcceptedProduces(env, 1<<62)
			g := env.start(t, "a")
			waitFor(t, 30*time.Second, "not ready for want of progress, not live", func() bool {
				return strings.Contains(strings.Join(g.c.NotReady(), ";"), "no progress for") && g.c.Live() != nil
			})
			fault.Remove()
			waitCommitted(t, env.cluster, 1, 30*time.Second)
			waitFor(t, 20*time.Second, "ready and live again", func() bool { return g.c.Ready() && g.c.Live() == nil })
		})
	}
}

// TestWatchdogExactlyOnceIdleThenRecords: an exactly-once gate idle for longer than
// StallRestart (its input quiet), then given records whose transaction takes a while to
// end (here its offset commit answered after 600 ms, well within StallNotReady: a loaded
// coordinator, or an end waiting behind a rebalance), is not stalled: the stall clock
// starts when the work does. Before, only a commit restarted it, so the idle time counted
// as stall time: from the first record polled until its transaction committed the gate
// was not ready and not live (gate_stalled_seconds the whole idle time, the error line
// that has Kubernetes restart it logged), and an end that waited out a rebalance for as
// long as the liveness probe's failures take got a healthy gate restarted.
func TestWatchdogExactlyOnceIdleThenRecords(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	// Thresholds the idle time (over StallRestart) exceeds, so that counted it would make
	// the gate not ready and not live while idle or at once after. What the test holds
	// the gate to after the idle time is the clock itself, never ahead of the records
	// (below), not these: a loaded CI machine's transaction (-race, two cores) took 1.007 s
	// with StallNotReady at 1 s, no idle time counted. (Once, in a whole -race run, Live
	// failed for an instant as the records came, Stalled reading 0 just before: the idle
	// time counted. The one path found that did so was the lag measured from the input's
	// end, set before the stall clock was started: TestLagRefreshedOnAnIdleGateStartsTheStallClock.)
	env.ccfg.StallNotReady = 3 * time.Second
	env.ccfg.StallRestart = 6 * time.Second
	var slow atomic.Bool
	var held atomic.Int64
	env.cluster.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if slow.Load() {
			held.Add(1)
			env.cluster.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		}
		return nil, nil, false
	})
	prod := producer(t, env.cluster)
	batch := func(from int) []*kgo.Record {
		recs := make([]*kgo.Record, 10)
		for i := range recs {
			recs[i] = inputRecord(from+i, "team-"+strconv.Itoa(i%3))
		}
		return recs
	}
	g := env.start(t, "a")
	produceAll(t, prod, batch(0))
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	// Idle past StallRestart: ready and live throughout.
	for deadline := time.Now().Add(env.ccfg.StallRestart + time.Second); time.Now().Before(deadline); {
		if u := unwell(g.c); u != "" {
			t.Fatalf("an idle gate: %s", u)
		}
		time.Sleep(20 * time.Millisecond)
	}
	slow.Store(true)
	came := time.Now()
	produceAll(t, prod, batch(10))
	// The stall clock must start no earlier than the records came: a stall longer than
	// they have been there counts the idle time. How long their transaction then takes
	// (its commit held 600 ms, more on a loaded machine) is the clock's to count.
	var early []string
	var longest time.Duration
	for deadline := time.Now().Add(20 * time.Second); ; {
		s := g.c.Stalled()
		there := time.Since(came) // read after s: a clock started at came or later is never ahead of it
		if s > there {
			early = append(early, fmt.Sprintf("stalled %s when the records had been there %s", s.Round(time.Millisecond), there.Round(time.Millisecond)))
		}
		longest = max(longest, s)
		if held.Load() > 0 && len(committedBehind(env.cluster, 1)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the records after the idle time not committed: %v", committedBehind(env.cluster, 1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the first transaction after the idle time: stalled at most %s", longest.Round(time.Millisecond))
	if len(early) > 0 {
		t.Errorf("the first transaction after %s idle was counted a stall from before its records came, %d times, first %s",
			env.ccfg.StallRestart+time.Second, len(early), early[0])
	}
}

// TestExactlyOnceLeftWithNothingAfterAnAbortIsIdle: an exactly-once gate whose open
// transaction was aborted as it lost its partitions (its session expired, its heartbeats
// held; another member took them) owns nothing, so nothing aborted waits for it to poll
// again: it is idle, as a gate that never transacted is. Given partitions again much
// later (the other member leaving), the stall clock starts when their records come.
// Before, the abort left it "unsettled" while it owned nothing, so its first poll of the
// new partitions' records counted the whole time since its last commit as a stall: not
// ready and not live at once, until its first transaction committed (with more replicas
// than partitions, the gate the rebalance passed over).
func TestExactlyOnceLeftWithNothingAfterAnAbortIsIdle(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.StallNotReady = 3 * time.Second
	env.ccfg.StallRestart = 6 * time.Second
	// A transaction open across the loss: one ends 2 s after its input goes quiet.
	env.ccfg.TransactionInterval = 20 * time.Second
	// The member whose group requests are dropped (the connection closed, no answer):
	// its rejoins too, which kept its session alive and took the partition back.
	var held atomic.Value
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup} {
		env.cluster.ControlKey(key.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
			env.cluster.KeepControl()
			var member string
			switch r := req.(type) {
			case *kmsg.HeartbeatRequest:
				member = r.MemberID
			case *kmsg.JoinGroupRequest:
				member = r.MemberID
			case *kmsg.SyncGroupRequest:
				member = r.MemberID
			}
			if id, _ := held.Load().(string); id != "" && member == id {
				return nil, errors.New("group request dropped"), true
			}
			return nil, nil, false
		})
	}
	var slow atomic.Bool
	env.cluster.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if slow.Load() {
			env.cluster.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		}
		return nil, nil, false
	})
	prod := producer(t, env.cluster)
	next := 0
	batch := func(n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = inputRecord(next, "team-"+strconv.Itoa(next%3))
			next++
		}
		return recs
	}
	var routed atomic.Int64
	env.wrap = func(r Router) Router { return &countingRouter{Router: r, routed: &routed} }
	a := env.start(t, "a")
	env.wrap = nil
	produceAll(t, prod, batch(10))
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	gi := env.cluster.GroupInfo(testGroup)
	if gi == nil || len(gi.Members) != 1 {
		t.Fatalf("group %v, want a alone in it", gi)
	}
	aID := gi.Members[0].MemberID
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "b in the group, a keeping the partition", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		return gi != nil && len(gi.Members) == 2 && len(owned(a)) == 1
	})
	// a's session fails with a transaction open: its group requests dropped once it
	// has routed the next records, until its session expires and b owns the partition.
	produceAll(t, prod, batch(5))
	waitFor(t, 30*time.Second, "a routing the next records", func() bool { return routed.Load() > 10 })
	held.Store(aID)
	waitFor(t, 60*time.Second, "b owning the partition, a nothing", func() bool {
		return len(owned(b)) == 1 && len(owned(a)) == 0
	})
	held.Store("")
	waitFor(t, 30*time.Second, "a's open transaction aborted", func() bool {
		return testutil.ToFloat64(a.c.m.transactions.WithLabelValues("aborted")) > 0
	})
	waitFor(t, 60*time.Second, "a back in the group, ready", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		return gi != nil && len(gi.Members) == 2 && unwell(a.c) == ""
	})
	// Idle past StallRestart, owning nothing: ready and live throughout.
	for deadline := time.Now().Add(env.ccfg.StallRestart + time.Second); time.Now().Before(deadline); {
		if u := unwell(a.c); u != "" {
			t.Fatalf("a gate owning nothing: %s", u)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(owned(a)) != 0 {
		t.Fatalf("a owns %v, want nothing (b keeps the partition)", owned(a))
	}
	waitCommitted(t, env.cluster, 1, 30*time.Second) // b has routed everything
	b.stop(t)
	slow.Store(true)
	came := time.Now()
	produceAll(t, prod, batch(10))
	var early []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		s := a.c.Stalled()
		there := time.Since(came)
		if s > there {
			early = append(early, fmt.Sprintf("stalled %s when the records had been there %s", s.Round(time.Millisecond), there.Round(time.Millisecond)))
		}
		if len(owned(a)) == 1 && len(committedBehind(env.cluster, 1)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a did not take the partition and commit its records: owns %v, behind %v", owned(a), committedBehind(env.cluster, 1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(early) > 0 {
		t.Errorf("a's first transaction after owning nothing counted a stall from before its records came, %d times, first %s", len(early), early[0])
	}
}
