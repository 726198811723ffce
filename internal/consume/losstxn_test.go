package consume

import (
	"log/slog"
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

	"github.com/capturegate/gate/internal/route"
)

// spyRouter records the test ids of the records it routes.
type spyRouter struct {
	Router
	mu  sync.Mutex
	ids map[int]int
}

func (s *spyRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	if id, err := strconv.Atoi(header(in, idHeader)); err == nil {
		s.mu.Lock()
		s.ids[id]++
		s.mu.Unlock()
	}
	return s.Router.RouteInto(now, in, sc, out)
}

func (s *spyRouter) routed(ids []int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.ids[id] == 0 {
			return false
		}
	}
	return true
}

// lossInTxnEnv is an exactly-once gate whose transaction is held open (20 s, partition 1
// kept busy) after partition 0's records at offsets 50..79 (ids 100..129) were routed
// into it; stop ends the load. A setup's env.wrap wraps the router that sees which ids
// were routed. Unless a setup takes the gate's log lines, a failed test
// prints them, franz-go's included: these tests race a client's own recovery, and a
// failure seen once in a CI run must say what the client did.
func lossInTxnEnv(t *testing.T, onLoss DataLoss, setup ...func(*gateEnv)) (env *gateEnv, g *testGate, prod *kgo.Client, stop func()) {
	t.Helper()
	env = newEOSEnv(t, 2)
	env.ccfg.OnDataLoss = onLoss
	for _, f := range setup {
		f(env)
	}
	if env.logs == nil {
		logs := &syncBuffer{}
		env.logs, env.logLevel = logs, slog.LevelDebug
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the gate's log:\n%s", logs.String())
			}
		})
	}
	env.ccfg.TransactionInterval = 20 * time.Second
	spy := &spyRouter{ids: map[int]int{}}
	outer := env.wrap // a setup's router, around the spy
	env.wrap = func(r Router) Router {
		if spy.Router = r; outer != nil {
			return outer(spy)
		}
		return spy
	}
	prod = partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 50)    // ids 0..49 at offsets 0..49
	produceTo(t, prod, 1, 1000, 50) // ids 1000..1049
	g = env.start(t, "a")
	waitCommitted(t, env.cluster, 2, 40*time.Second)
	var done atomic.Bool
	var bg sync.WaitGroup
	bg.Go(func() {
		for id := 5000; !done.Load(); id++ {
			produceTo(t, prod, 1, id, 1)
			time.Sleep(30 * time.Millisecond) // a steady load, not a wait
		}
	})
	stop = func() { done.Store(true); bg.Wait() }
	t.Cleanup(stop)
	produceTo(t, prod, 0, 100, 30) // ids 100..129 at offsets 50..79
	waitFor(t, 20*time.Second, "ids 100..129 routed", func() bool { return spy.routed(idRange(100, 130)) })
	if gc := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; gc.Offset != 50 {
		t.Fatalf("partition 0 committed at %d: the transaction ended already (want it open, the commit at 50)", gc.Offset)
	}
	return env, g, prod, stop
}

// Exactly once, retention deletes partition 0 up to offset 140 while offsets 50..79 are
// in a transaction still open, and the gate meets the gap in it: the transaction aborts
// and the gap is handled from the last commit, with nothing in flight. Every offset of
// 50..139 is then either on the outputs once (read_committed) or counted lost, and the
// rest is routed once, a later transaction aborting or not. Before, the gap's commit
// (outside the transaction) and the client's move passed offsets 50..79, and when that
// transaction then aborted (a failed produce) they were neither delivered nor counted:
// skipped in silence.
func TestRetentionGapInOpenTransaction(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue)
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	produceTo(t, prod, 0, 200, 100) // ids 200..299 at offsets 80..179
	if err := env.cluster.DeleteRecords(inTopic, 0, 140); err != nil {
		t.Fatal(err)
	}
	hold.Remove()
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "retention") > 0 })
	// Then a transaction aborts (its produces fail): before, the one the gap was met in,
	// rewound past what it held.
	abortOne(t, env, g)
	stop() // the input goes quiet: the transaction ends
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 180
	})
	out := collect(t, env.cluster, 100+40, 20*time.Second, 300*time.Millisecond, readCommitted())
	g.stop(t)
	seen, dup := out.routed(append(idRange(100, 130), idRange(200, 300)...))
	lost := lostMetric(t, g.reg, 0, "retention")
	if len(dup) > 0 {
		t.Errorf("duplicated on the outputs: %v", head(dup))
	}
	if kept, _ := out.routed(idRange(260, 300)); len(kept) != 40 {
		t.Errorf("%d of the 40 records past the gap (offsets 140..179) on the outputs", len(kept))
	}
	if got := float64(len(seen)-40) + lost; got != 90 {
		t.Errorf("offsets 50..139: %d on the outputs + %v counted lost = %v, want 90", len(seen)-40, lost, got)
	}
}

// Exactly once, a broker loses partition 0's records from offset 65 (an unclean leader
// election) while offsets 50..79 are in a transaction still open: the loss is counted,
// the transaction aborts, and the records the broker kept (50..64) are on the outputs
// once, as read from the last commit again. Before, the gap's commit outside the
// transaction and the client's move made the abort rewind to 65: 50..64, routed only in
// the aborted transaction, were lost, and counted nowhere. Then with GATE_ON_DATA_LOSS=stop:
// the partition stops at its last commit, and a gate started after it with continue
// routes those records once, not twice (the transaction's offset commit left the
// partition out before, while its records were on the outputs).
func TestBrokerLossInOpenTransaction(t *testing.T) {
	t.Parallel()
	for _, onLoss := range []DataLoss{DataLossContinue, DataLossStop} {
		t.Run(onLoss.String(), func(t *testing.T) {
			env, g, prod, stop := lossInTxnEnv(t, onLoss)
			// The broker's log diverged at 65 (kfake keeps the records: the epoch's end is
			// what says so), and the fetch at 80 is out of range once.
			env.cluster.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				return epochEnds(kreq, func(int32) int64 { return 65 }), nil, true
			})
			env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
				Err: kerr.OffsetOutOfRange, Count: 1})
			produceTo(t, prod, 0, 200, 10) // offsets 80..89: partition 0 fetched at 80
			waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "broker") > 0 })
			if got := lostMetric(t, g.reg, 0, "broker"); got != 15 {
				t.Errorf("gate_records_lost_total{cause=broker} = %v, want 15 (offsets 65..79)", got)
			}
			if onLoss == DataLossContinue {
				// A transaction aborts (its produces fail): before, the one the loss was met
				// in, rewound past the records the broker kept.
				abortOne(t, env, g)
			}
			stop() // the input goes quiet: the transaction ends
			if onLoss == DataLossStop {
				waitFor(t, 30*time.Second, "partition 0 stopped", func() bool {
					for _, r := range g.c.NotReady() {
						if r != "" && containsAll(r, "stopped at its last committed offset") {
							return true
						}
					}
					return false
				})
				g.stop(t)
				env.ccfg.OnDataLoss = DataLossContinue
				env.wrap = nil
				g = env.start(t, "a")
			}
			waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
				return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 90
			})
			out := collect(t, env.cluster, 50+30+10, 20*time.Second, 300*time.Millisecond, readCommitted())
			g.stop(t)
			seen, dup := out.routed(idRange(100, 115))
			if len(seen) != 15 || len(dup) > 0 {
				t.Errorf("offsets 50..64, kept by the broker: %d of 15 on the outputs (read_committed), %d twice", len(seen), len(dup))
			}
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// divergeAt40 has the broker's log of partition 0 diverge at 40 (OffsetForLeaderEpoch
// says so, one fetch answers OFFSET_OUT_OF_RANGE), produces offsets 80..89 to it and
// waits until the gate has counted the loss.
func divergeAt40(t *testing.T, env *gateEnv, g *testGate, prod *kgo.Client) {
	t.Helper()
	env.cluster.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		return epochEnds(kreq, func(p int32) int64 {
			if p == 0 {
				return 40
			}
			return 1 << 40 // no divergence
		}), nil, true
	})
	env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.OffsetOutOfRange, Count: 1})
	produceTo(t, prod, 0, 200, 10) // offsets 80..89
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "broker") > 0 })
}

// readAgainAt40 waits until ids 40..49 (offsets 40..49 of partition 0) were routed a
// second time, from the new leader's log, and partition 0 is committed to its end (90),
// saying what it saw if they are not.
func readAgainAt40(t *testing.T, env *gateEnv, g *testGate) {
	t.Helper()
	spy := g.c.router.(*spyRouter)
	const within = 60 * time.Second
	deadline := time.Now().Add(within)
	for {
		spy.mu.Lock()
		seen := make([]int, 0, 10)
		for id := 40; id < 50; id++ {
			seen = append(seen, spy.ids[id])
		}
		spy.mu.Unlock()
		gi := env.cluster.GroupInfo(testGroup)
		at := gi.Commits[inTopic][0].Offset
		if slices.Min(seen) >= 2 && at == 90 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("offsets 40..49 not read again, or partition 0 not committed to its end (90), after %s: ids 40..49 routed %v times, "+
				"partition 0 committed at %d, lost %v, group generation %d, not ready: %q; %s",
				within, seen, at, lostMetric(t, g.reg, 0, "broker"), gi.Epoch, g.c.NotReady(), dumpGoroutines(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// As above, the broker's log diverging at 40, below the last commit (50): the gate goes
// on at 40 once the transaction has aborted, reading the new leader's records there (kfake
// keeps the old ones: each is routed a second time), as it does outside a transaction.
// Before, the abort put it back at the commit, and offsets 40..49 of the new log were
// never read.
func TestBrokerLossBelowCommitInOpenTransaction(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue)
	divergeAt40(t, env, g, prod)
	stop() // the input goes quiet: the transaction ends
	readAgainAt40(t, env, g)
	if got := lostMetric(t, g.reg, 0, "broker"); got != 40 {
		t.Errorf("gate_records_lost_total{cause=broker} = %v, want 40 (offsets 40..79, once)", got)
	}
	g.stop(t)
}

// As TestBrokerLossBelowCommitInOpenTransaction, with a rebalance during the open
// transaction that leaves both partitions with the gate (a member subscribed to another
// topic joins the group: the generation moves, cooperative-sticky revokes nothing). The
// gate still goes on at 40. Before, the rebalance made it skip the move (resumeTxnGaps:
// "the partition may have another owner now"), and as nobody fetched the commit again
// (the partition was kept), franz-go validated nothing either: the abort put partition 0
// back at 50, offsets 40..49 of the new log were never read, and nothing said so.
func TestBrokerLossBelowCommitKeptThroughRebalance(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue)
	before := env.cluster.GroupInfo(testGroup).Epoch
	bystander, err := kgo.NewClient(append(testClientOpts(), kgo.SeedBrokers(env.cluster.ListenAddrs()...),
		kgo.ConsumerGroup(testGroup), kgo.ConsumeTopics(accTopic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	go bystander.PollFetches(t.Context()) // joins the group
	waitFor(t, 20*time.Second, "the group rebalanced, the gate keeping both partitions", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi.Epoch == before || gi.State != "Stable" || len(gi.Members) != 2 {
			return false
		}
		_, gen := g.c.cl.GroupMetadata()
		return gen == gi.Epoch
	})
	if gc := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; gc.Offset != 50 {
		t.Fatalf("partition 0 committed at %d: the transaction ended already (want it open, the commit at 50)", gc.Offset)
	}
	divergeAt40(t, env, g, prod)
	stop()
	readAgainAt40(t, env, g)
	g.stop(t)
}

// A retention gap met in a partition the open transaction holds nothing of is handled
// at once, the transaction going on: aborting it would replay every other partition's
// records for nothing, and a gap met inside the next transaction again could abort it
// too. Partition 1 keeps the transaction open; partition 0, committed to 50, loses 50..119.
func TestGapOutsideTheOpenTransaction(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 2)
	env.ccfg.TransactionInterval = 20 * time.Second
	spy := &spyRouter{ids: map[int]int{}}
	env.wrap = func(r Router) Router { spy.Router = r; return spy }
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 50)
	produceTo(t, prod, 1, 1000, 50)
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, 2, 40*time.Second)
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	var done atomic.Bool
	var bg sync.WaitGroup
	bg.Go(func() {
		for id := 5000; !done.Load(); id++ {
			produceTo(t, prod, 1, id, 1)
			time.Sleep(30 * time.Millisecond) // a steady load, not a wait
		}
	})
	defer func() { done.Store(true); bg.Wait() }()
	produceTo(t, prod, 0, 100, 100) // ids 100..199 at offsets 50..149
	if err := env.cluster.DeleteRecords(inTopic, 0, 120); err != nil {
		t.Fatal(err)
	}
	// Partition 1's records routed: a transaction is open with them (the load never
	// goes quiet for the tenth of the interval that would end it).
	waitFor(t, 20*time.Second, "a transaction open with partition 1's records", func() bool { return spy.routed(idRange(5000, 5003)) })
	hold.Remove()
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "retention") > 0 })
	done.Store(true)
	bg.Wait()
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 150
	})
	if got := lostMetric(t, g.reg, 0, "retention"); got != 70 {
		t.Errorf("gate_records_lost_total{cause=retention} = %v, want 70", got)
	}
	if n := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")); n != 0 {
		t.Errorf("%v transactions aborted for a gap in a partition none of them held", n)
	}
	g.stop(t)
}

// abortOne makes g's open transaction abort, its produces to the accepted topic failing
// until it has, then lets them through again.
func abortOne(t *testing.T, env *gateEnv, g *testGate) {
	t.Helper()
	aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer fail.Remove()
	waitFor(t, 30*time.Second, "a transaction aborted", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) > aborted
	})
}

// As TestBrokerLossBelowCommitInOpenTransaction, the broker's log of partition 0
// diverging at 40 (below the last commit, 50) while offsets 50..79 are in an open
// transaction. The gate goes on at 40 and routes the new leader's records at 40..79:
// records the limiter never saw, which count, as at least once. They were judged as
// replayed (Scratch.Replay: the partition's counted mark stayed at 80), and the limiter
// counted none of them. (kfake keeps the old records at those offsets: the same records
// here, read as the new log's.)
func TestBrokerLossNewLogCounted(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue)
	divergeAt40(t, env, g, prod)
	stop()
	waitFor(t, 30*time.Second, "both partitions committed to their end", func() bool {
		return len(committedBehind(env.cluster, 2)) == 0 && env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 90
	})
	g.stop(t)
	input := env.cluster.PartitionInfo(inTopic, 0).HighWatermark + env.cluster.PartitionInfo(inTopic, 1).HighWatermark
	var counted int64
	for i := range 5 {
		st, ok := g.lim.Snapshot(time.Now(), "team-"+strconv.Itoa(i))
		if ok {
			counted += int64(st.Pending)
		}
	}
	// Every input record once, plus the new log's 40 records at offsets 40..79.
	if want := input + 40; counted != want {
		t.Errorf("limiter counted %d records; want %d (%d input records + the new leader's 40 at offsets 40..79)", counted, want, input)
	}
}

// As TestRetentionGapInOpenTransaction, with outcomes on: the rows a read_committed
// reader finds count, per team, exactly what it finds on the outputs, the gap met in an
// open transaction (which aborts with its rows) and a later transaction aborting.
func TestRetentionGapInOpenTransactionOutcomes(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue, func(env *gateEnv) {
		withOutcomes(t, env)
		env.lcfg.Threshold = 1_000_000
	})
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	produceTo(t, prod, 0, 200, 100)
	if err := env.cluster.DeleteRecords(inTopic, 0, 140); err != nil {
		t.Fatal(err)
	}
	hold.Remove()
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "retention") > 0 })
	abortOne(t, env, g)
	stop()
	waitFor(t, 30*time.Second, "both partitions committed to their end", func() bool {
		return len(committedBehind(env.cluster, 2)) == 0 && env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 180
	})
	g.stop(t)
	out := collectAll(t, env.cluster, readCommitted())
	got, _ := readOutcomes(t, env, int64(out.n), true, 20*time.Second, 500*time.Millisecond)
	sameCounts(t, "read_committed", got, out.byTeam())
}

// Exactly once with GATE_KAFKA_START_OFFSET=earliest (the default), a new group: the
// first transaction holds partition 0's offsets 0..29 when retention deletes the
// partition up to 80 under it. The transaction aborts, and the gap is met again at the
// partition's start, where nothing was ever committed: the 80 offsets, 30 routed only in
// the aborted transaction and 50 never read, are counted lost and the partition goes on
// at 80. Before, the gate took the partition for one it had read nothing of: no loss
// counted or logged, the partition stopped and the gate not ready until restarted.
func TestRetentionGapInFirstTransaction(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 2)
	env.ccfg.TransactionInterval = 20 * time.Second
	logs := &syncBuffer{}
	env.logs = logs
	spy := &spyRouter{ids: map[int]int{}}
	env.wrap = func(r Router) Router { spy.Router = r; return spy }
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 30) // ids 0..29 at offsets 0..29
	var done atomic.Bool
	var bg sync.WaitGroup
	bg.Go(func() {
		for id := 5000; !done.Load(); id++ {
			produceTo(t, prod, 1, id, 1)
			time.Sleep(30 * time.Millisecond) // keeps the first transaction open
		}
	})
	stop := func() { done.Store(true); bg.Wait() }
	t.Cleanup(stop)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ids 0..29 routed", func() bool { return spy.routed(idRange(0, 30)) })
	if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; ok {
		t.Fatalf("partition 0 committed at %d: the first transaction ended already", gc.Offset)
	}
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	produceTo(t, prod, 0, 100, 100) // ids 100..199 at offsets 30..129
	if err := env.cluster.DeleteRecords(inTopic, 0, 80); err != nil {
		t.Fatal(err)
	}
	hold.Remove()
	waitFor(t, 30*time.Second, "the loss counted, or the partition stopped", func() bool {
		return lostMetric(t, g.reg, 0, "retention") > 0 || strings.Contains(strings.Join(g.c.NotReady(), "; "), "stopped")
	})
	stop()
	if why := g.c.NotReady(); len(why) > 0 {
		t.Errorf("not ready: %v", why)
	}
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]
		return ok && gc.Offset == 130
	})
	out := collect(t, env.cluster, 50, 20*time.Second, 300*time.Millisecond, readCommitted())
	g.stop(t)
	if seen, dup := out.routed(idRange(150, 200)); len(seen) != 50 || len(dup) > 0 {
		t.Errorf("%d of the 50 records past the gap on the outputs, duplicated %v", len(seen), head(dup))
	}
	if got := lostMetric(t, g.reg, 0, "retention"); got != 80 {
		t.Errorf("gate_records_lost_total{partition=0,cause=retention} = %v, want 80", got)
	}
	checkLossLine(t, logs, 0, "retention", 0, 80)
}

// Exactly once, a partition the group has never committed, whose transaction aborts
// (every produce refused): between the abort's end and the gate's rewind franz-go shows
// no offsets for it (v1.22.3: none committed, none read past where reading began), and
// a check for partitions revoked untold there (onAssigned, on the group's goroutine:
// the next step of a rebalance) took it, still the client's, for revoked: the gate
// dropped its state (gate_owned_partitions 0, its lag series and the watchdog's view of
// it gone until the next rebalance). The check waits for the rewind: the partition
// stays the gate's, and once produces are accepted its records are committed.
func TestUntoldRevokeCheckWaitsForTheRewind(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	var checks atomic.Int32
	env.before = func(c *Consumer) {
		c.txn.beforeRewind = func() {
			if checks.Load() == 0 {
				checks.Add(1)
				c.dropRevokedUntold(c.cl, nil) // as onAssigned, given nothing new
			}
		}
	}
	refuse := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	g := env.start(t, "a")
	produceTo(t, partProducer(t, env.cluster), 0, 0, 20)
	waitFor(t, 30*time.Second, "a transaction aborted, checked for untold revokes before the rewind", func() bool {
		return checks.Load() > 0 && testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) > 0
	})
	if owned := gaugeValue(t, g, "gate_owned_partitions"); owned != 1 {
		t.Errorf("gate_owned_partitions = %v after the check, want 1: the partition is still the gate's", owned)
	}
	refuse.Remove()
	waitCommitted(t, env.cluster, 1, 30*time.Second)
}

// Exactly once, a partition the group has never committed whose polls so far returned
// only a control record (an upstream transaction's abort marker: no record of it went
// into a transaction of the gate's), when another partition's transaction aborts: the
// abort's rewind moves the client back to where it began reading each partition the
// group has not committed, and until a poll returns the marker again franz-go shows no
// offsets for it (v1.22.3). A check for partitions revoked untold there (onAssigned:
// the rebalance step an abort often comes with) took it, still the client's, for
// revoked and dropped its state: gate_owned_partitions 1 of 2, and its next records
// routed on detached state (no lag; seals whose sources name none of its offsets). Only
// a partition whose records went into a transaction is the check's to judge: a commit
// gives it the group's offset, an abort's rewind marks it (rewindTxnStarts).
func TestUntoldRevokeCheckKeepsAPartitionOfOnlyAMarker(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 2)
	upstream, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.TransactionalID("input-writer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(inTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(upstream.Close)
	if err := upstream.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := inputRecord(1000, "team-1")
	r.Partition = 1
	if err := upstream.ProduceSync(t.Context(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := upstream.EndTransaction(t.Context(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	var checked atomic.Bool
	env.before = func(c *Consumer) {
		c.txn.afterEnd = func() {
			// After an aborted transaction's end and rewind, before the next poll: as
			// onAssigned, given nothing new.
			if testutil.ToFloat64(c.m.transactions.WithLabelValues("aborted")) > 0 && !checked.Swap(true) {
				c.dropRevokedUntold(c.cl, nil)
			}
		}
	}
	g := env.start(t, "a")
	waitFor(t, 30*time.Second, "partition 1's abort marker polled", func() bool {
		p := g.c.owned(1)
		return p != nil && p.next.Load() >= 2
	})
	refuse := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 10)
	waitFor(t, 30*time.Second, "a transaction aborted, then checked for untold revokes", checked.Load)
	if owned := gaugeValue(t, g, "gate_owned_partitions"); owned != 2 {
		t.Errorf("gate_owned_partitions = %v after the check, want 2: partition 1 is still the gate's", owned)
	}
	if g.c.owned(1) == nil {
		t.Errorf("partition 1's state dropped by the check")
	}
	refuse.Remove()
	produceTo(t, prod, 1, 10, 5)
	waitCommitted(t, env.cluster, 2, 30*time.Second)
}
