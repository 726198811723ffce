package consume

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// Behaviours of real brokers that the in-process one does not have by default, and
// what the gate must do about them (see docs/design.md, "Guarantees").

// validateTimestamps makes the broker refuse, as a Kafka 3.6+ broker with
// message.timestamp.after.max.ms = maxAhead does (KIP-937), every produce batch holding a
// record stamped more than maxAhead in the future: that partition's batch is answered
// INVALID_TIMESTAMP, the request's other partitions NOT_ENOUGH_REPLICAS (not written,
// retried by the client) so that the rest of the request is neither written nor lost.
// It returns the count of batches refused.
func validateTimestamps(t *testing.T, c *kfake.Cluster, maxAhead time.Duration) *atomic.Int64 {
	t.Helper()
	var refused atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		limit := time.Now().Add(maxAhead).UnixMilli()
		bad := func(raw []byte) bool {
			var b kmsg.RecordBatch
			return b.ReadFrom(raw) == nil && b.MaxTimestamp > limit
		}
		any := false
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				any = any || bad(p.Records)
			}
		}
		if !any {
			return nil, nil, false
		}
		return faulttest.ProduceRefused(req, func(_ int, p *kmsg.ProduceRequestTopicPartition) int16 {
			if bad(p.Records) {
				refused.Add(1)
				return kerr.InvalidTimestamp.Code
			}
			return kerr.NotEnoughReplicas.Code
		}), nil, true
	})
	return &refused
}

// futureInputs returns n input records over many keys, record bad stamped two days ahead.
func futureInputs(n, bad int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	recs[bad].Timestamp = time.Now().Add(48 * time.Hour)
	return recs
}

func deliveries() []struct {
	name string
	d    Delivery
	opts []kgo.Opt
} {
	return []struct {
		name string
		d    Delivery
		opts []kgo.Opt
	}{{"at-least-once", AtLeastOnce, nil}, {"exactly-once", ExactlyOnce, []kgo.Opt{readCommitted()}}}
}

// TestFutureTimestampGoesToDeadLetter: a broker that validates timestamps refuses a
// record stamped two days ahead. The gate dead-letters it stamped now, the original
// timestamp in a header, and only it: the records batched with it are retried alone
// and delivered. Before, the dead letter kept the refused timestamp and the partition
// retried it for ever, committing nothing past it.
func TestFutureTimestampGoesToDeadLetter(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, n, bad = 3, 300, 150
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			recs := futureInputs(n, bad)
			produceAll(t, producer(t, env.cluster), recs)
			refused := validateTimestamps(t, env.cluster, time.Hour)
			start := time.Now()
			g := env.start(t, "a")

			out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, tc.opts...)
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			g.stop(t)
			lost, dup := out.conservation(n)
			if len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
			}
			if refused.Load() == 0 {
				t.Fatal("the broker refused nothing: the test did not test")
			}
			if got := len(out.recs[dlqTopic]); got != 1 {
				t.Fatalf("%d dead letters, want only the refused record", got)
			}
			r := out.recs[dlqTopic][0]
			if id := header(r, idHeader); id != strconv.Itoa(bad) {
				t.Errorf("dead letter is record %s, want %d", id, bad)
			}
			if got, want := header(r, HeaderOriginalTimestamp), strconv.FormatInt(recs[bad].Timestamp.UnixMilli(), 10); got != want {
				t.Errorf("%s = %q, want %s", HeaderOriginalTimestamp, got, want)
			}
			if r.Timestamp.Before(start.Add(-time.Second)) || r.Timestamp.After(time.Now().Add(time.Second)) {
				t.Errorf("dead letter stamped %s, want the time it was sent", r.Timestamp)
			}
			if got := header(r, "gate-error"); got != "rejected" {
				t.Errorf("gate-error %q, want rejected", got)
			}
			if got := testutil.ToFloat64(g.c.m.rerouted.WithLabelValues("dead_letter")); got != 1 {
				t.Errorf("gate_records_rerouted_total{to=dead_letter} = %v, want 1", got)
			}
		})
	}
}

// TestBatchRejectionRetriesRecordsAlone: the broker answers INVALID_RECORD once for a
// whole batch of valid records. Each is retried alone, accepted, and none is
// dead-lettered. Before, every record of the batch (and every one buffered behind it
// in its partition) was dead-lettered.
func TestBatchRejectionRetriesRecordsAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, n = 3, 300
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			}
			produceAll(t, producer(t, env.cluster), recs)
			fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.InvalidRecord, Count: 1})
			g := env.start(t, "a")

			out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, tc.opts...)
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			g.stop(t)
			if fault.Hits() != 1 {
				t.Fatalf("fault hit %d times, want 1", fault.Hits())
			}
			lost, dup := out.conservation(n)
			if len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
			}
			if got := len(out.recs[dlqTopic]); got != 0 {
				t.Errorf("%d valid records dead-lettered for one batch-level rejection, want 0", got)
			}
			if got := len(out.recs[accTopic]); got != n {
				t.Errorf("%d accepted, want %d", got, n)
			}
		})
	}
}

// TestUndeliverable: a record refused by its output topic (a future timestamp) and by
// the dead-letter topic (which refuses every record) follows GATE_ON_UNDELIVERABLE.
// skip: counted, committed past, everything else delivered. stop: its partition stops
// there (nothing committed past it), the others go on, and the consumer is not ready,
// saying which record. Before, the partition retried the record for ever, ready.
// Either way the record is no dead letter in gate_records_total, written nowhere
// (at least once its first route counts it once, as every record routed; exactly once
// nothing does, its first routing's transaction aborted); before, the dead letter
// built for it was counted as dead_letter/rejected.
func TestUndeliverable(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		for _, policy := range []Undeliverable{UndeliverableSkip, UndeliverableStop} {
			t.Run(tc.name+"/"+policy.String(), func(t *testing.T) {
				t.Parallel()
				const parts, n, bad = 3, 300, 150
				env := newEnv(t, parts)
				env.ccfg.Delivery = tc.d
				env.ccfg.OnUndeliverable = policy
				recs := futureInputs(n, bad)
				produceAll(t, producer(t, env.cluster), recs)
				badPart, badOff := partitionOf(t, env.cluster, bad)
				validateTimestamps(t, env.cluster, time.Hour)
				env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlqTopic, Err: kerr.InvalidRecord, Count: -1})
				g := env.start(t, "a")

				if policy == UndeliverableSkip {
					out := collect(t, env.cluster, n-1, 30*time.Second, 300*time.Millisecond, tc.opts...)
					waitCommitted(t, env.cluster, parts, 20*time.Second)
					lost, dup := out.conservation(n)
					if len(dup) > 0 || len(lost) != 1 || lost[0] != bad {
						t.Fatalf("lost %v (want only %d), duplicated %v", head(lost), bad, head(dup))
					}
					if got := testutil.ToFloat64(g.c.m.undeliverable.WithLabelValues("skipped")); got != 1 {
						t.Errorf("gate_records_undeliverable_total{action=skipped} = %v, want 1", got)
					}
					if !g.c.Ready() {
						t.Errorf("not ready after skipping: %v", g.c.NotReady())
					}
					// Exactly once, the skipped record is counted nowhere: it was first
					// routed in a transaction its refusal aborted, and the metrics count
					// committed transactions' records only.
					counted := n
					if tc.d == ExactlyOnce {
						counted = n - 1
					}
					assertNoDeadLetterCounted(t, g, counted)
					return
				}
				waitFor(t, 30*time.Second, "the partition stopped", func() bool {
					return testutil.ToFloat64(g.c.m.undeliverable.WithLabelValues("stopped")) == 1
				})
				if got := recordsCounted(t, g.reg, "dead_letter", "rejected"); got != 0 {
					t.Errorf(`gate_records_total{route="dead_letter",reason="rejected"} = %v with the record written nowhere, want 0`, got)
				}
				if g.c.Ready() {
					t.Error("ready with a stopped partition")
				}
				why := strings.Join(g.c.NotReady(), "; ")
				if want := fmt.Sprintf("partition %s/%d stopped at offset %d", inTopic, badPart, badOff); !strings.Contains(why, want) {
					t.Errorf("not ready because %q, want it to say %q", why, want)
				}
				// The other partitions are routed and committed to their end; the stopped
				// one is never committed past the record.
				waitFor(t, 30*time.Second, "the other partitions committed", func() bool {
					behind := committedBehind(env.cluster, parts)
					return len(behind) == 1 && strings.HasPrefix(behind[0], strconv.Itoa(int(badPart))+":")
				})
				if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][badPart]; ok && gc.Offset > badOff {
					t.Errorf("partition %d committed to %d, past the undeliverable record at %d", badPart, gc.Offset, badOff)
				}
				// Its stuck record is not awaited: a revoke or a shutdown does not wait out
				// its timeout for a record that will never be acknowledged.
				expired, cancel := context.WithCancel(context.Background())
				cancel()
				if left := g.c.waitInFlight(expired, []int32{badPart}); left != 0 {
					t.Errorf("a revoke of the stopped partition would wait for %d records", left)
				}
			})
		}
	}
}

// assertNoDeadLetterCounted checks that g, which routed records and skipped one
// undeliverable, counted n records once where they were first routed (the metric's
// sum without rejected) and none as dead_letter/rejected.
func assertNoDeadLetterCounted(t *testing.T, g *testGate, n int) {
	t.Helper()
	// Each routing goroutine adds its counts after its batch: they may lag the commit.
	waitFor(t, 30*time.Second, "every record counted where it was first routed", func() bool {
		return counterSum(t, g.reg, "gate_records_total")-recordsCounted(t, g.reg, "dead_letter", "rejected") >= float64(n)
	})
	if got := recordsCounted(t, g.reg, "dead_letter", "rejected"); got != 0 {
		t.Errorf(`gate_records_total{route="dead_letter",reason="rejected"} = %v with the record written nowhere, want 0`, got)
	}
}

// TestPartitionsStoppedGauge: gate_partitions_stopped counts the partitions a gate owns
// and has stopped, so an alert on it lasts as long as the stop: 1 while gate a holds the
// partition stopped at an undeliverable record, 0 once its partitions are revoked; 1 on the
// partition's next owner, which stops at the same record, and 0 on an owner after the
// topics were fixed, which routes past it. Before, only the counter
// gate_records_undeliverable_total{action="stopped"} said so, whose increase over the
// alert's 15 minutes went back to 0 while the partition was still stopped.
func TestPartitionsStoppedGauge(t *testing.T) {
	t.Parallel()
	const parts, n, bad = 3, 300, 150
	env := newEnv(t, parts)
	env.ccfg.OnUndeliverable = UndeliverableStop
	produceAll(t, producer(t, env.cluster), futureInputs(n, bad))
	validateTimestamps(t, env.cluster, time.Hour)
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlqTopic, Err: kerr.InvalidRecord, Count: -1})
	const name = "gate_partitions_stopped"

	a := env.start(t, "a")
	waitFor(t, 30*time.Second, "partition stopped on a", func() bool {
		return testutil.ToFloat64(a.c.m.undeliverable.WithLabelValues("stopped")) == 1
	})
	if got := gaugeValue(t, a, name); got != 1 {
		t.Errorf("%s on a = %v with a partition stopped, want 1", name, got)
	}
	// b joins, a leaves: every partition of a is revoked, the stopped one with them.
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "b assigned", b.c.ready.Load)
	a.stop(t)
	if got := gaugeValue(t, a, name); got != 0 {
		t.Errorf("%s on a = %v after its partitions were revoked, want 0", name, got)
	}
	waitFor(t, 30*time.Second, "partition stopped on b", func() bool {
		return testutil.ToFloat64(b.c.m.undeliverable.WithLabelValues("stopped")) == 1
	})
	if got := gaugeValue(t, b, name); got != 1 {
		t.Errorf("%s on b = %v with the partition stopped again, want 1", name, got)
	}
	// Fixed: the dead-letter topic takes the record, and the partition's next owner
	// routes past it.
	refused.Remove()
	b.stop(t)
	if got := gaugeValue(t, b, name); got != 0 {
		t.Errorf("%s on b = %v after its partitions were revoked, want 0", name, got)
	}
	c := env.start(t, "c")
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	if got := gaugeValue(t, c, name); got != 0 {
		t.Errorf("%s on c = %v with every partition routed to its end, want 0", name, got)
	}
}

// partitionOf finds where input record id was written.
func partitionOf(t *testing.T, c *kfake.Cluster, id int) (int32, int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(inTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var p int32 = -1
		var off int64
		cl.PollFetches(t.Context()).EachRecord(func(r *kgo.Record) {
			if header(r, idHeader) == strconv.Itoa(id) {
				p, off = r.Partition, r.Offset
			}
		})
		if p >= 0 {
			return p, off
		}
	}
	t.Fatalf("input record %d not found", id)
	return 0, 0
}

// TestRetriesKeepKeyOrder: the broker fails eleven of every twelve produces to the
// accepted topic for a while. Each key's records still appear on the accepted topic in input
// order. Before, the client gave up after GATE_PRODUCE_RETRIES (10) tries, the gate
// produced the records again, and records routed after a failed one overtook it (1,340
// of 3,000 out of order here); bounded client retries can still reorder within
// franz-go itself, so the default is now no bound.
func TestRetriesKeepKeyOrder(t *testing.T) {
	t.Parallel()
	const parts, n, keys = 2, 3000, 10
	env := newEnv(t, parts)
	// The default: no bound on the client's retries (a bound lets franz-go write a
	// later batch of a partition after failing an earlier one).
	env.ccfg.ProduceRetries = 0
	// Routing as slow as a loaded gate's, so that records are still being routed when
	// earlier ones fail, as they are in production, rather than all buffered at once.
	env.wrap = func(r Router) Router { return slowRouter{r, 100 * time.Microsecond} }
	// A session outliving a loaded machine's pauses. A CI run found every record twice
	// (28 s for this test, 6 s alone): what one heartbeat refused while the produces fail
	// gives (tried by hand), the gate losing its partitions and routing again, as at least
	// once should, all that nothing had committed. The harness's 3 s session lapsing under
	// that load does the same; it is not what this test is about.
	env.ccfg.ClientOpts = append(slices.Clip(env.ccfg.ClientOpts), kgo.SessionTimeout(45*time.Second), kgo.RebalanceTimeout(60*time.Second))
	// Eleven in a row: more than the client's old bound of 10 retries.
	fault := failAcceptedProduces(env, 12)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
		recs[id].Key = []byte("k" + strconv.Itoa(id%keys))
	}
	g := env.start(t, "a")
	produceAll(t, producer(t, env.cluster), recs)
	waitFor(t, 30*time.Second, "produce errors", func() bool { return fault.Hits() >= 100 })
	fault.Remove()

	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	lostParts, revoked := testutil.ToFloat64(g.c.m.rebalances.WithLabelValues("lost")), testutil.ToFloat64(g.c.m.rebalances.WithLabelValues("revoked"))
	g.stop(t)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v (partitions lost %v times, revoked %v)", len(lost), head(lost), len(dup), head(dup), lostParts, revoked)
	}
	last := map[string]int{}
	var disorder []string
	for _, r := range out.recs[accTopic] {
		id, _ := strconv.Atoi(header(r, idHeader))
		k := string(r.Key)
		if prev, ok := last[k]; ok && id < prev {
			disorder = append(disorder, fmt.Sprintf("%s: %d after %d", k, id, prev))
		}
		last[k] = max(last[k], id)
	}
	if len(disorder) > 0 {
		t.Fatalf("%d records out of their key's input order after %d failed produce requests, e.g. %v",
			len(disorder), fault.Hits(), disorder[:min(5, len(disorder))])
	}
	t.Logf("%d records, %d failed produce requests, every key in order", n, fault.Hits())
}

// slowRouter routes as its Router, taking at least d per record.
type slowRouter struct {
	Router
	d time.Duration
}

func (s slowRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	for start := time.Now(); time.Since(start) < s.d; {
	}
	return s.Router.RouteInto(now, in, sc, out)
}

// TestExactlyOnceReplayCountsOnce: transactions abort several times on failed produces
// and their records are replayed; each record still counts once toward its team. Before,
// every replay counted them again.
func TestExactlyOnceReplayCountsOnce(t *testing.T) {
	t.Parallel()
	const parts, n = 1, 100
	env := newEOSEnv(t, parts)
	env.ccfg.ProduceRetries = 1
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-once")
	}
	produceAll(t, producer(t, env.cluster), recs)
	g := env.start(t, "a")
	waitFor(t, 30*time.Second, "3 aborted transactions", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) >= 3
	})
	fault.Remove()
	collect(t, env.cluster, n, 30*time.Second, 100*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
	st, ok := g.lim.Snapshot(time.Now(), "team-once")
	if !ok {
		t.Fatal("team-once not in the limiter")
	}
	if st.Pending != n {
		t.Fatalf("team-once counted %d for %d records after %v aborted transactions, want %d", st.Pending, n, aborted, n)
	}
}

// TestExactlyOnceAbortedTransactionsAreNotCounted: exactly once, the routing metrics
// count what committed transactions hold, as read_committed readers see it: a record
// refused for good (too large) goes to dead letter, and the transactions that carry it
// abort on a failed produce several times, its dead letter acknowledged in each. The
// committed outputs are 2 accepted and 1 dead letter (stripped), and gate_records_total
// adds up to 3. Before, every aborted attempt was counted
// too (gate_records_total 3 per attempt that routed the poll, and the dead letter each
// time the broker took it).
func TestExactlyOnceAbortedTransactionsAreNotCounted(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.MaxMessageBytes = 4096
	env.ccfg.ProduceRetries = 1
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	// The produce requests to the dead-letter topic, each in a transaction the failing
	// accepted records abort (the dead letter with its value is refused by the client).
	dlqProduces := produceRequests(env, dlqTopic)
	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-a"), big, inputRecord(2, "team-a")})
	g := env.start(t, "a")
	waitFor(t, 30*time.Second, "the dead letter produced in 2 transactions", func() bool { return dlqProduces.Load() >= 2 })
	fault.Remove()
	out := collect(t, env.cluster, 3, 30*time.Second, 100*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	if acc, dlq := len(out.recs[accTopic]), len(out.recs[dlqTopic]); acc != 2 || dlq != 1 {
		t.Fatalf("read_committed: %d accepted, %d dead letters, want 2 and 1", acc, dlq)
	}
	aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
	// Nothing is routed after the commit: the counts are final once they reach 3.
	var counted float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if counted = counterSum(t, g.reg, "gate_records_total"); counted == 3 {
			break
		}
	}
	if counted != 3 {
		t.Errorf("gate_records_total = %v after %v aborted transactions, want 3: the records of the committed one", counted, aborted)
	}
	// Moved once to each stage: to dead letter (refused in its batch, then alone), then
	// stripped (its dead letter refused as too large too).
	for _, to := range []string{"dead_letter", "dead_letter_stripped"} {
		if got := testutil.ToFloat64(g.c.m.rerouted.WithLabelValues(to)); got != 1 {
			t.Errorf("gate_records_rerouted_total{to=%q} = %v after %v aborted transactions, want 1", to, got, aborted)
		}
	}
}

// TestExactlyOnceRetriedTransactionGoesWhereItWent: a team's 200 records, its threshold
// 150, routed in a transaction whose overflow produce fails: the transaction aborts and
// its records are routed again. They go where they went the first time, 150 accepted
// and 50 to overflow, each record counted once (cap mode: the 150 it accepted; divert:
// all 200). Before, the retry was judged against levels holding the first attempt's
// counts of the same records, and none of them was accepted.
func TestExactlyOnceRetriedTransactionGoesWhereItWent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode    limit.Mode
		counted int64
	}{{limit.Cap, 150}, {limit.Divert, 200}} {
		t.Run(c.mode.String(), func(t *testing.T) {
			t.Parallel()
			const parts, n, threshold = 1, 200, 150
			env := newEOSEnv(t, parts)
			env.ccfg.ProduceRetries = 1
			env.lcfg.Threshold, env.lcfg.Mode = threshold, c.mode
			fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: ovfTopic, Err: kerr.NotEnoughReplicas, Count: -1})
			produceAll(t, producer(t, env.cluster), teamInputs("team-near", 0, n))
			g := env.start(t, "a")
			waitFor(t, 30*time.Second, "an aborted transaction", func() bool {
				return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) >= 1
			})
			fault.Remove()
			out := collect(t, env.cluster, n, 30*time.Second, 100*time.Millisecond, readCommitted())
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("read_committed: %d lost, %d duplicated", len(lost), len(dup))
			}
			aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
			var accepted []int
			for _, r := range out.recs[accTopic] {
				id, _ := strconv.Atoi(header(r, idHeader))
				accepted = append(accepted, id)
			}
			slices.Sort(accepted)
			if len(accepted) != threshold || accepted[0] != 0 || accepted[len(accepted)-1] != threshold-1 {
				t.Errorf("after %v aborted transactions, %d accepted (%v...), want the first %d, as the first attempt routed them", aborted, len(accepted), head(accepted), threshold)
			}
			if got := len(out.recs[ovfTopic]); got != n-threshold {
				t.Errorf("%d to overflow, want %d", got, n-threshold)
			}
			st, ok := g.lim.Snapshot(time.Now(), "team-near")
			if !ok {
				t.Fatal("team-near not in the limiter")
			}
			if st.Pending != c.counted {
				t.Errorf("team-near counted %d after %v aborted transactions, want %d", st.Pending, aborted, c.counted)
			}
		})
	}
}

// TestExactlyOnceDecisionsOfARevokedPartitionGo: the decisions an aborted transaction
// kept for a partition (route.Decisions, for its replay) are let go once the gate commits
// a transaction without owning the partition: its next owner routes and commits those
// records, and this gate never routes them again. Before, a partition revoked while its
// records were in an aborted transaction kept them for the life of the process, a
// transaction's records' worth of decisions each (8 bytes and a byte a rule a record
// over), though a partition revoked for good was meant to take no memory.
func TestExactlyOnceDecisionsOfARevokedPartitionGo(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEOSEnv(t, parts)
	env.ccfg.ProduceRetries = 1
	env.ccfg.Jitter = shortJitter
	env.lcfg.Threshold = 2 // every team over: each record's decisions are kept
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: ovfTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	var recs []*kgo.Record
	for i := range 8 {
		recs = append(recs, teamInputs("team-"+strconv.Itoa(i), i*20, i*20+20)...)
	}
	produceAll(t, producer(t, env.cluster), recs)
	a := env.start(t, "a")
	// The partitions a keeps decisions for: read once a is idle (the routing goroutines
	// write them unlocked).
	held := func() (ids []int32) {
		a.c.txn.countedMu.Lock()
		defer a.c.txn.countedMu.Unlock()
		for id, d := range a.c.txn.decisions {
			if d.Len() > 0 {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	// Read under countedMu, unlike the decisions, which the routing goroutines write.
	countedBoth := func() bool {
		a.c.txn.countedMu.Lock()
		defer a.c.txn.countedMu.Unlock()
		return len(a.c.txn.counted) == parts
	}
	waitFor(t, 30*time.Second, "both partitions routed in transactions that abort", func() bool {
		return countedBoth() && testutil.ToFloat64(a.c.m.transactions.WithLabelValues("aborted")) >= 1
	})
	b := env.start(t, "b") // takes a partition from a, for good
	waitOwning(t, b)
	fault.Remove()
	out := collect(t, env.cluster, len(recs), 30*time.Second, 300*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	if lost, dup := out.conservation(len(recs)); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost, %d duplicated", len(lost), len(dup))
	}
	// a commits on its own partition (more records, so that it has a transaction to commit).
	before := testutil.ToFloat64(a.c.m.transactions.WithLabelValues("committed"))
	produceAll(t, producer(t, env.cluster), teamInputs("team-late", len(recs), len(recs)+20))
	waitFor(t, 30*time.Second, "a committing again", func() bool {
		return testutil.ToFloat64(a.c.m.transactions.WithLabelValues("committed")) > before
	})
	a.c.partsMu.Lock()
	var stale []int32
	for _, id := range held() {
		if a.c.parts[id] == nil {
			stale = append(stale, id)
		}
	}
	a.c.partsMu.Unlock()
	if len(stale) > 0 {
		t.Errorf("gate a keeps decisions for partitions %v it no longer owns, after committing", stale)
	}
}

// TestPreflightMissingTopic: an output topic that does not exist (auto-creation off, as
// in production) keeps the gate not ready, saying which topic, and consuming nothing;
// once the topic is created the gate starts. Before, it joined and retried produces
// for ever, ready.
func TestPreflightMissingTopic(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 50
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, inTopic), kfake.SeedTopics(3, accTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := newEnv(t, parts)
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, c), recs)
	g := env.start(t, "a")

	waitFor(t, 20*time.Second, "the missing topic reported", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), `topic "overflow" does not exist`)
	})
	if g.c.Ready() {
		t.Fatal("ready while an output topic is missing")
	}
	if gi := c.GroupInfo(testGroup); gi != nil && len(gi.Commits[inTopic]) > 0 {
		t.Errorf("committed %v before the topics were checked", gi.Commits[inTopic])
	}
	if err := c.CreateTopic(ovfTopic, 3, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "ready once the topic exists", g.c.Ready)
	out := collect(t, c, n, 30*time.Second, 200*time.Millisecond)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
	}
}

// TestOutputTopicDeletedAndCreatedAgain: an output topic the gate has written to (the
// accepted topic, the outcomes topic), deleted and created again by an operator (as a
// topic is reset), takes the gate's records again, nothing lost or committed past them,
// and the gate is ready again. franz-go keeps the deleted topic's ID and fails every
// produce to the new one with UNKNOWN_TOPIC_ID until the topic is purged from the
// client, so the gate must purge it, as it does rule topics. Before, the records routed
// after the topic was created again were retried for ever, nothing was committed past
// them and the gate stayed not ready.
func TestOutputTopicDeletedAndCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{accTopic, outTopic} {
		for _, tc := range deliveries() {
			t.Run(topic+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				const parts, n1, n2 = 2, 20, 40
				env := newEnv(t, parts)
				env.ccfg.Delivery = tc.d
				env.ccfg.WatchInterval = time.Second // the output watch every second, not every 5 s
				// The retries of the records meanwhile at a tenth of their delays: the
				// first after the output watch found the topic (every watch interval) is
				// what the test waits for, not how long the gate backs off.
				env.ccfg.Jitter = shortJitter
				if topic == outTopic {
					withOutcomes(t, env)
				}
				g := env.start(t, "a")
				waitFor(t, 20*time.Second, "ready", g.c.Ready)
				prod := producer(t, env.cluster)
				in := func(from, to int) []*kgo.Record {
					var recs []*kgo.Record
					for id := from; id < to; id++ {
						recs = append(recs, inputRecord(id, "team-"+strconv.Itoa(id%7)))
					}
					return recs
				}
				produceAll(t, prod, in(0, n1))
				if out := collect(t, env.cluster, n1, 30*time.Second, 0, tc.opts...); out.n < n1 {
					t.Fatalf("%d of the first %d records arrived", out.n, n1)
				}
				waitCommitted(t, env.cluster, parts, 20*time.Second)

				adm := kadm.NewClient(prod)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := adm.DeleteTopics(ctx, topic); err != nil {
					t.Fatal(err)
				}
				if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
					t.Fatal(err)
				}
				produceAll(t, prod, in(n1, n1+n2))
				out := collect(t, env.cluster, n2, 45*time.Second, 300*time.Millisecond, tc.opts...)
				var lost, dup []int
				for id := n1; id < n1+n2; id++ {
					switch got := out.ids[id]; {
					case len(got) == 0:
						lost = append(lost, id)
					case len(got) > 1:
						dup = append(dup, id)
					}
				}
				if len(lost) > 0 || len(dup) > 0 {
					t.Fatalf("after %s was created again: %d lost %v, %d duplicated %v; commits behind %v; not ready: %v",
						topic, len(lost), head(lost), len(dup), head(dup), committedBehind(env.cluster, parts), g.c.NotReady())
				}
				if topic == accTopic && len(out.recs[accTopic]) != n2 {
					t.Errorf("%d on the accepted topic created again, want %d", len(out.recs[accTopic]), n2)
				}
				waitCommitted(t, env.cluster, parts, 20*time.Second)
				if topic == outTopic {
					got, _ := readOutcomes(t, env, n2, tc.d == ExactlyOnce, 20*time.Second, 300*time.Millisecond)
					var counted int64
					for _, byOutcome := range got {
						for _, k := range byOutcome {
							counted += k
						}
					}
					if counted != n2 {
						t.Errorf("rows on the outcomes topic created again count %d records, want %d", counted, n2)
					}
				}
				waitFor(t, 20*time.Second, "ready again", g.c.Ready)
			})
		}
	}
}

// TestPreflightMissingACL: on a cluster with ACLs, a gate whose principal may not
// write the overflow topic is not ready and says so, naming the topic and the ACL.
func TestPreflightMissingACL(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acls := faulttest.GateNeeds{Input: inTopic, Group: testGroup, Outputs: []string{accTopic, dlqTopic}, TransactionalID: "gate-a"}.ACLs()
			acls = append(acls, faulttest.AllowACL(kmsg.ACLResourceTypeTopic, ovfTopic, kmsg.ACLOperationDescribe)...) // no WRITE
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
				kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
				kfake.User("PLAIN", "gate", "gate-secret", acls...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			env := newEnv(t, 2)
			env.cluster = c
			env.ccfg.Delivery = tc.d
			env.ccfg.Brokers = c.ListenAddrs()
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
			env.ccfg.PreflightInterval = 100 * time.Millisecond
			env.ccfg.ClientOpts = append(testClientOpts(), kgo.SASL(plain.Auth{User: "gate", Pass: "gate-secret"}.AsMechanism()))
			g := env.start(t, "a")
			want := `topic "overflow": no permission to write it: grant the WRITE ACL`
			waitFor(t, 20*time.Second, "the missing ACL reported", func() bool {
				return strings.Contains(strings.Join(g.c.NotReady(), ";"), want)
			})
			why := strings.Join(g.c.NotReady(), ";")
			for _, ok := range []string{accTopic, dlqTopic, inTopic, "consumer group"} {
				if strings.Contains(why, `"`+ok+`"`) {
					t.Errorf("reported a problem with %s, which is permitted: %s", ok, why)
				}
			}
		})
	}
}

// TestOutputACLRevokedExactlyOncePreKIP890: with exactly-once delivery on brokers whose
// transactions predate KIP-890 part 2 (Kafka 3.x, or 4.x with transaction.version below
// 2), the WRITE ACL on one output topic (the dead-letter topic) revoked while the gate
// runs. The brokers refuse the topic's AddPartitionsToTxn, which leaves franz-go's
// transactional producer unable to go on (every record buffered fails with the error,
// and the next Begin with "producer ID has a fatal, unrecoverable error"). The gate
// must stay up and not ready naming that topic, as docs/operations.md says a revoked ACL
// shows, never naming the accepted or outcomes topics, whose records and rows failed
// with the same error, and route everything once the ACL is back, nothing lost or
// duplicated. Before, Run returned the error (the process exited), after error lines
// and /readyz named the accepted and outcomes topics, whose ACLs were never touched, as
// refusing writes too.
func TestOutputACLRevokedExactlyOncePreKIP890(t *testing.T) {
	t.Parallel()
	const parts, n = 3, 100
	acls := faulttest.GateNeeds{Input: inTopic, Group: testGroup, Outputs: []string{accTopic, ovfTopic, dlqTopic, outTopic}, TransactionalID: "gate-a"}.ACLs()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic, outTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.MaxVersions(kversion.V3_9_0()),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "gate", "gate-secret", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := newEnv(t, parts)
	env.cluster = c
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, outTopic}
	env.ccfg.OutcomesTopic, env.ccfg.Gate = outTopic, "test-gate"
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.SASL(plain.Auth{User: "gate", Pass: "gate-secret"}.AsMechanism()))
	logs := &syncBuffer{}
	env.logs = logs
	env.before = func(c *Consumer) { c.txn.closedRetry = 200 * time.Millisecond }
	admin := kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	adm := kadm.NewClient(admCl)

	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	write := kadm.NewACLs().Allow("User:gate").AllowHosts("*").Topics(dlqTopic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	if _, err := adm.DeleteACLs(ctx, write); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for id := range recs {
		team := "team-" + strconv.Itoa(id%7)
		if id%10 == 0 {
			team = "" // not JSON: to the dead-letter topic
		}
		recs[id] = inputRecord(id, team)
	}
	produceAll(t, admCl, recs)

	// Up, not ready, naming the topic, through more than one new client.
	const rebuilt = "building a new Kafka client"
	waitFor(t, 30*time.Second, "the gate rebuilding its client for the closed topic", func() bool {
		select {
		case err := <-g.done:
			g.done <- err
			t.Fatalf("the gate stopped: %v", err)
		default:
		}
		if why := strings.Join(g.c.NotReady(), "; "); strings.Contains(why, `"accepted"`) || strings.Contains(why, `"outcomes"`) {
			t.Errorf("not ready naming a topic whose ACL is untouched: %s", why)
		}
		return strings.Count(logs.String(), rebuilt) >= 2
	})
	if g.c.Ready() {
		t.Error("ready while the dead-letter topic refuses the gate's writes")
	}
	// Each new client follows a transaction the closed topic ended: its End (an abort,
	// answered without error) counts it aborted, as every other abort is; the error that
	// builds a new client is the next Begin's, where no transaction is open. The lines
	// are read first: the count goes up before the line is written.
	rebuilds := strings.Count(logs.String(), rebuilt)
	if got := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")); got < float64(rebuilds) {
		t.Errorf("gate_transactions_total{result=\"aborted\"} = %v after %d transactions ended by the closed topic", got, rebuilds)
	}
	if why := strings.Join(g.c.NotReady(), "; "); !strings.Contains(why, `"dead-letter"`) {
		t.Errorf("not ready because %q, want it to name the dead-letter topic", why)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, rebuilt) && (strings.Contains(line, accTopic) || strings.Contains(line, outTopic) || !strings.Contains(line, dlqTopic)) {
			t.Errorf("the line naming the topics that refuse writes names the wrong ones: %s", line)
		}
		if strings.Contains(line, `producing to topic \"accepted\"`) || strings.Contains(line, `producing to topic \"outcomes\"`) {
			t.Errorf("a line blames a topic whose ACL is untouched: %s", line)
		}
	}

	if _, err := adm.CreateACLs(ctx, write); err != nil {
		t.Fatal(err)
	}
	out := collect(t, c, n, 45*time.Second, 300*time.Millisecond, readCommitted(), admin)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v; not ready: %v", len(lost), head(lost), len(dup), head(dup), g.c.NotReady())
	}
	waitCommitted(t, c, parts, 20*time.Second)
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
}

// TestPreflightKIP848GroupWithoutRead: with GATE_KAFKA_GROUP_PROTOCOL=consumer, a gate
// whose principal may describe the group but not read it (join it) is not ready and
// says so, as with the classic protocol, when the group already runs KIP-848. Kafka
// 4's DescribeGroups knows only classic groups: for a KIP-848 one it answers
// GROUP_ID_NOT_FOUND ("Group ... is not a classic group.", state Dead, no authorized
// operations), which the control below reproduces (kfake describes every group); the
// preflight took that for a new group and passed, and the gate stayed not ready saying
// only that it had not joined the group, its heartbeats refused.
func TestPreflightKIP848GroupWithoutRead(t *testing.T) {
	t.Parallel()
	acls := faulttest.GateNeeds{Input: inTopic, Outputs: []string{accTopic, ovfTopic, dlqTopic}}.ACLs()
	acls = append(acls, faulttest.AllowACL(kmsg.ACLResourceTypeGroup, testGroup, kmsg.ACLOperationDescribe)...) // no READ
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "gate", "gate-secret", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Kafka 4's answer for a group that is not a classic one.
	c.ControlKey(kmsg.DescribeGroups.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.DescribeGroupsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		resp.Version = r.Version
		for _, g := range r.Groups {
			sg := kmsg.NewDescribeGroupsResponseGroup()
			sg.Group, sg.State = g, "Dead"
			if r.Version >= 6 {
				sg.ErrorCode = kerr.GroupIDNotFound.Code
			}
			resp.Groups = append(resp.Groups, sg)
		}
		return resp, nil, true
	})
	// The group exists, running KIP-848: another member of it, allowed to read it.
	member, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism()),
		kgo.ConsumerGroup(testGroup), kgo.ConsumeTopics(inTopic), kgo.ServerSideBalancer())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	member.PollFetches(ctx) // joins
	cancel()

	env := newEnv(t, 2)
	env.cluster = c
	env.ccfg.GroupProtocol = GroupConsumer
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.SASL(plain.Auth{User: "gate", Pass: "gate-secret"}.AsMechanism()))
	g := env.start(t, "a")
	want := `consumer group "` + testGroup + `": no permission to join it: grant the READ ACL`
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(strings.Join(g.c.NotReady(), ";"), want) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s not ready because %q; want it to name the group and its READ ACL", strings.Join(g.c.NotReady(), "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProduceProblemWhileRunning: an output topic deleted while the gate runs (as an
// operator's mistake would) makes the gate not ready, naming the topic, with its records
// retried and nothing committed past them; once the topic is back the gate recovers by
// itself and every record routed meanwhile arrives.
func TestProduceProblemWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testProduceProblemWhileRunning(t, tc.d, tc.opts)
		})
	}
}

func testProduceProblemWhileRunning(t *testing.T, d Delivery, opts []kgo.Opt) {
	const parts, n = 2, 100
	env := newEnv(t, parts)
	env.ccfg.Delivery = d
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.UnknownTopicRetries(2))
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	if err := env.cluster.DeleteTopic(accTopic); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	want := `producing to topic "` + accTopic + `" fails`
	waitFor(t, 30*time.Second, "not ready naming the topic", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), want)
	})
	if g.c.Ready() {
		t.Error("ready while an output topic is gone")
	}
	if err := env.cluster.CreateTopic(accTopic, 3, nil); err != nil {
		t.Fatal(err)
	}
	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond, opts...)
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestPreflightWaitsForTransactionCoordinator: exactly once, a transaction coordinator
// the cluster cannot name yet (COORDINATOR_NOT_AVAILABLE in the FindCoordinator answer's
// body, as while __transaction_state loads after a broker restart) keeps the gate in its
// preflight, not ready; it passed, the gate reporting ready with records no transaction
// could take. Once the coordinator answers, the gate starts and routes.
func TestPreflightWaitsForTransactionCoordinator(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	var asked atomic.Int64
	var down atomic.Bool
	down.Store(true)
	txnCoordinatorUnavailable(env.cluster, &down, &asked)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the preflight asking for the transaction coordinator again", func() bool { return asked.Load() >= 3 })
	if g.c.Ready() {
		t.Fatalf("ready (partitions assigned: %v) while the transaction coordinator is not available", g.c.ready.Load())
	}
	if why := strings.Join(g.c.NotReady(), "; "); !strings.Contains(why, `kafka: waiting for the cluster before consuming: transactional id "gate-a": COORDINATOR_NOT_AVAILABLE`) {
		t.Errorf("not ready because %q; want it to name the transactional id and the coordinator", why)
	}
	down.Store(false)
	waitFor(t, 30*time.Second, "ready once the coordinator answers", g.c.Ready)
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-0")})
	if out := collect(t, env.cluster, 1, 30*time.Second, 200*time.Millisecond, readCommitted()); out.n != 1 {
		t.Fatalf("%d records on the outputs, want 1", out.n)
	}
}

// TestOutputTopicCreatedAgainBatchLimitReadAgain: the accepted topic, deleted and created
// again with another max.message.bytes (as a topic is reset), has its new limit used for
// the records after: kept, the old smaller one made the client refuse a record the new
// topic takes (MESSAGE_TOO_LARGE), which the gate then dead-lettered, as it did for rule
// topics (TestRuleTopicCreatedAgainBatchLimitReadAgain).
func TestOutputTopicCreatedAgainBatchLimitReadAgain(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.Jitter = shortJitter
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic} // as the gate's (internal/gate)
	prod := producer(t, env.cluster)
	adm := kadm.NewClient(prod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small := "4096"
	if _, err := adm.DeleteTopics(ctx, accTopic); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &small}, accTopic); err != nil {
		t.Fatal(err)
	}
	g := env.start(t, "g")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "the accepted topic's batch limit read at start", func() bool { return g.c.batchMaxBytes(accTopic) == 4096 })
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "t")})
	waitCommitted(t, env.cluster, 1, 30*time.Second)
	if _, err := adm.DeleteTopics(ctx, accTopic); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, accTopic); err != nil {
		t.Fatal(err)
	}
	// A record to the topic created again: refused with UNKNOWN_TOPIC_ID until the gate
	// purges the topic from its client, then written.
	produceAll(t, prod, []*kgo.Record{inputRecord(2, "t")})
	waitCommitted(t, env.cluster, 1, time.Minute)
	big := inputRecord(3, "t")
	big.Value = []byte(`{"team_id":"t","seq":3,"pad":"` + strings.Repeat("x", 8000) + `"}`)
	produceAll(t, prod, []*kgo.Record{big})
	waitCommitted(t, env.cluster, 1, time.Minute)
	ends, err := adm.ListEndOffsets(ctx, accTopic, dlqTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { on[o.Topic] += o.Offset })
	if on[accTopic] != 2 || on[dlqTopic] != 0 {
		t.Errorf("after the accepted topic was created again with the default max.message.bytes: %d accepted, %d dead-lettered; want records 2 and the 8 KB record 3 accepted (batch limit %d)",
			on[accTopic], on[dlqTopic], g.c.batchMaxBytes(accTopic))
	}
}
