package consume

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// TestEndToEnd runs one gate between real topics (kfake) with a real Redis: every input
// record lands exactly once on one output, the heavy team is held to about its
// threshold, light teams never overflow, records keep their value, headers, timestamp
// (and key where documented), bad records go to dead letter with their reason, Redis
// holds the counts, and the commits cover everything after a graceful stop.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	const parts, n, whaleLimit = 4, 3000, 200
	env := newEnv(t, parts)
	env.redis = redistest.Start(t)
	env.lcfg.Overrides = map[string]int64{"whale": whaleLimit}

	inputs := make([]*kgo.Record, n)
	teams := make([]string, n)
	for id := range n {
		switch {
		case id%100 == 1:
			teams[id] = "" // unreadable
		case id%2 == 0:
			teams[id] = "whale"
		default:
			teams[id] = "team-" + strconv.Itoa(id%50)
		}
		inputs[id] = inputRecord(id, teams[id])
	}

	g := env.start(t, "a")
	produceAll(t, producer(t, env.cluster), inputs)
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	g.stop(t)

	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("conservation: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	if behind := committedBehind(env.cluster, parts); len(behind) > 0 {
		t.Errorf("after a graceful stop, commits short of the end: %v", behind)
	}

	var whaleAccepted, whaleOverflow int
	for _, r := range out.recs[accTopic] {
		id := mustID(t, r)
		in := inputs[id]
		if teams[id] == "whale" {
			whaleAccepted++
		} else if teams[id] == "" {
			t.Errorf("unreadable record %d was accepted", id)
		}
		if !bytes.Equal(r.Key, in.Key) {
			t.Errorf("accepted %d: key %q, want %q", id, r.Key, in.Key)
		}
		checkPreserved(t, "accepted", in, r, 0)
	}
	for _, r := range out.recs[ovfTopic] {
		id := mustID(t, r)
		switch teams[id] {
		case "whale":
			whaleOverflow++
		default:
			t.Errorf("record %d of team %q overflowed; only the whale is over its limit", id, teams[id])
		}
		if r.Key != nil {
			t.Errorf("overflow %d kept its key %q; overflow drops keys by default", id, r.Key)
		}
		if got := header(r, "gate-overflow-reason"); got != "rate_limited" {
			t.Errorf("overflow %d: gate-overflow-reason %q, want rate_limited", id, got)
		}
		checkPreserved(t, "overflow", inputs[id], r, 1)
	}
	for _, r := range out.recs[dlqTopic] {
		id := mustID(t, r)
		if teams[id] != "" {
			t.Errorf("readable record %d of team %q went to dead letter: %s", id, teams[id], header(r, "gate-error"))
		}
		if got := header(r, "gate-error"); got != "not_json" {
			t.Errorf("dead letter %d: gate-error %q, want not_json", id, got)
		}
		if !bytes.Equal(r.Key, inputs[id].Key) {
			t.Errorf("dead letter %d: key %q, want it kept", id, r.Key)
		}
		checkPreserved(t, "dead letter", inputs[id], r, -1)
	}
	if want := n / 100; len(out.recs[dlqTopic]) != want {
		t.Errorf("%d dead letters, want %d", len(out.recs[dlqTopic]), want)
	}
	// Divert: the whale is let through until its level reaches its threshold; the
	// window leaks a little (threshold/60 per second) while the test runs.
	if whaleAccepted < whaleLimit || whaleAccepted > whaleLimit+whaleLimit/10 {
		t.Errorf("whale: %d accepted, %d overflowed; want about its threshold %d accepted", whaleAccepted, whaleOverflow, whaleLimit)
	}

	// Every whale record counted in Redis (divert counts all), flushed by the final tick.
	rc := env.redis.Client(t)
	keys, err := rc.Keys(context.Background(), "gate:whale:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var counted int64
	held := false
	for _, k := range keys {
		if strings.HasSuffix(k, ":hold") {
			held = true // the whale is held in overflow (GATE_DIVERT_HOLD): not a counter
			continue
		}
		v, err := rc.Get(context.Background(), k).Int64()
		if err != nil {
			t.Fatalf("reading %s: %v", k, err)
		}
		counted += v
	}
	if counted != int64(n/2) {
		t.Errorf("redis holds %d whale records over keys %v, want %d", counted, keys, n/2)
	}
	if !held {
		t.Errorf("no hold flag for the whale among %v: a team over its limit is held fleet-wide", keys)
	}
	if got := testutil.ToFloat64(g.c.m.rebalances.WithLabelValues("assigned")); got < 1 {
		t.Errorf("gate_rebalances_total{event=assigned} = %v", got)
	}
}

// checkPreserved checks out carries in's value, timestamp and headers (in order, first),
// plus extra gate headers (-1: any number).
func checkPreserved(t *testing.T, what string, in, out *kgo.Record, extra int) {
	t.Helper()
	if !bytes.Equal(in.Value, out.Value) {
		t.Errorf("%s: value %q, want %q", what, out.Value, in.Value)
	}
	if !in.Timestamp.Equal(out.Timestamp) {
		t.Errorf("%s: timestamp %v, want %v", what, out.Timestamp, in.Timestamp)
	}
	if len(out.Headers) < len(in.Headers) || (extra >= 0 && len(out.Headers) != len(in.Headers)+extra) {
		t.Errorf("%s: headers %v, want %v plus %d", what, out.Headers, in.Headers, extra)
		return
	}
	for i, h := range in.Headers {
		if out.Headers[i].Key != h.Key || !bytes.Equal(out.Headers[i].Value, h.Value) {
			t.Errorf("%s: header %d is %v, want %v", what, i, out.Headers[i], h)
		}
	}
}

func mustID(t *testing.T, r *kgo.Record) int {
	t.Helper()
	id, err := strconv.Atoi(header(r, idHeader))
	if err != nil {
		t.Fatalf("record without id: %v", r.Headers)
	}
	return id
}

func head(ids []int) []int { return ids[:min(len(ids), 10)] }

// TestRebalanceNeitherLosesNorDuplicates adds a second and a third gate to the group
// and removes them again while records keep arriving: every record comes out exactly
// once, and the commits end at the input's end. Each step waits until the group has
// settled on it (the partitions shared out among the gates then running, each owning
// some and routing records), so a gate that never joined, or a leave whose partitions
// were not taken over, fails the test rather than leaving it to pass with no rebalance.
func TestRebalanceNeitherLosesNorDuplicates(t *testing.T) {
	t.Parallel()
	const parts = 6
	env := newEnv(t, parts)
	prod := producer(t, env.cluster)

	var (
		mu   sync.Mutex
		sent int
	)
	stopProducing := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for {
			select {
			case <-stopProducing:
				return
			default:
			}
			mu.Lock()
			batch := make([]*kgo.Record, 50)
			for i := range batch {
				batch[i] = inputRecord(sent+i, "team-"+strconv.Itoa((sent+i)%20))
			}
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := prod.ProduceSync(ctx, batch...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("producing: %v", err)
				return
			}
			mu.Lock()
			sent += len(batch)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // a steady trickle, not a flood
		}
	}()
	// The producer stops before the test returns, a failed wait included.
	stopProducer := sync.OnceFunc(func() { close(stopProducing); <-producing })
	defer stopProducer()

	// settled waits until the gates gs own every partition between them, each at least
	// one, and each has routed records since the step began.
	settled := func(what string, gs ...*testGate) {
		t.Helper()
		before := make([]float64, len(gs))
		for i, g := range gs {
			before[i] = counterSum(t, g.reg, "gate_records_total")
		}
		waitFor(t, 30*time.Second, what, func() bool {
			owned := 0
			for i, g := range gs {
				n := int(gaugeValue(t, g, "gate_owned_partitions"))
				if n == 0 || counterSum(t, g.reg, "gate_records_total") <= before[i] {
					return false
				}
				owned += n
			}
			return owned == parts
		})
	}
	a := env.start(t, "a")
	settled("a owning every partition and routing", a)
	b := env.start(t, "b")
	settled("b joined: the partitions shared by a and b, both routing", a, b)
	c := env.start(t, "c")
	settled("c joined: the partitions shared by a, b and c, all routing", a, b, c)
	b.stop(t)
	settled("b left: its partitions taken over by a and c", a, c)
	c.stop(t)
	settled("c left: every partition back with a", a)
	stopProducer()

	mu.Lock()
	n := sent
	mu.Unlock()
	out := collect(t, env.cluster, n, 30*time.Second, 500*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 10*time.Second)
	a.stop(t)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d records through 3 gates joining and leaving: %d lost %v, %d duplicated %v", n, len(lost), head(lost), len(dup), head(dup))
	}
	// The rebalances, as each gate counted them: a gave partitions up to the newcomers
	// and took them back, b and c were given some and gave them up when they left.
	rebalances := func(g *testGate, event string) float64 {
		return testutil.ToFloat64(g.c.m.rebalances.WithLabelValues(event))
	}
	if rebalances(a, "revoked") < 1 || rebalances(a, "assigned") < 2 {
		t.Errorf("a: %v revoked, %v assigned; want a revocation when b joined and an assignment at start and after the leaves: the test tests nothing",
			rebalances(a, "revoked"), rebalances(a, "assigned"))
	}
	for _, g := range []*testGate{b, c} {
		if rebalances(g, "assigned") < 1 || rebalances(g, "revoked") < 1 {
			t.Errorf("%s: %v assigned, %v revoked; want partitions given on joining and revoked on leaving: the test tests nothing",
				g.name, rebalances(g, "assigned"), rebalances(g, "revoked"))
		}
	}
	t.Logf("%d records, 3 gates (routed: a %v, b %v, c %v), 0 lost, 0 duplicated", n,
		counterSum(t, a.reg, "gate_records_total"), counterSum(t, b.reg, "gate_records_total"), counterSum(t, c.reg, "gate_records_total"))
}

// TestProduceFailureHoldsCommits fails every produce to the accepted topic for a while:
// the gate retries, counts the errors, and commits nothing past a record that is not
// acknowledged; once the broker recovers every record arrives exactly once and the
// commits catch up.
func TestProduceFailureHoldsCommits(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 2
	fault := env.cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: accTopic,
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})

	g := env.start(t, "a")
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)

	waitFor(t, 20*time.Second, "produce errors and gate retries", func() bool {
		return counterSum(t, g.reg, "gate_produce_errors_total") > 0 && counterSum(t, g.reg, "gate_produce_retries_total") > 0
	})
	time.Sleep(500 * time.Millisecond) // several commit intervals
	gi := env.cluster.GroupInfo(testGroup)
	for p := range int32(parts) {
		if gc, ok := gi.Commits[inTopic][p]; ok && gc.Offset > 0 {
			t.Errorf("partition %d committed to %d while no record was acknowledged", p, gc.Offset)
		}
	}
	if got := testutil.ToFloat64(g.c.m.produceErrors.WithLabelValues(accTopic, "NOT_ENOUGH_REPLICAS")) + testutil.ToFloat64(g.c.m.produceErrors.WithLabelValues(accTopic, "record_timeout")); got == 0 {
		t.Errorf("gate_produce_errors_total{topic=accepted} not counted by error")
	}

	fault.Remove()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 10*time.Second)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("after the broker recovered: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	if len(out.recs[accTopic]) != n {
		t.Errorf("%d accepted, want all %d", len(out.recs[accTopic]), n)
	}
}

// TestRecordTooLargeGoesToDeadLetter: a record larger than the producer may send is
// rejected for good on its topic, so it goes to dead letter, and since it is too large
// for that too, without its value; the records around it are unaffected and the
// partition commits past it.
func TestRecordTooLargeGoesToDeadLetter(t *testing.T) {
	t.Parallel()
	const parts = 1
	env := newEnv(t, parts)
	env.ccfg.MaxMessageBytes = 4096
	g := env.start(t, "a")

	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-a"), big, inputRecord(2, "team-a")})

	out := collect(t, env.cluster, 3, 20*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 10*time.Second)
	g.stop(t)
	lost, dup := out.conservation(3)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), lost, len(dup), dup)
	}
	if len(out.recs[dlqTopic]) != 1 {
		t.Fatalf("dead letters: %d, want the one large record", len(out.recs[dlqTopic]))
	}
	r := out.recs[dlqTopic][0]
	if got := header(r, "gate-error"); got != "rejected" {
		t.Errorf("gate-error %q, want rejected", got)
	}
	if got := header(r, "gate-dropped"); !strings.Contains(got, "value_bytes="+strconv.Itoa(len(big.Value))) {
		t.Errorf("gate-dropped %q, want the dropped value's size", got)
	}
	if len(r.Value) != 0 {
		t.Errorf("the dead letter kept a %d-byte value the broker cannot take", len(r.Value))
	}
	if got := header(r, "gate-source"); got != inTopic+"/0/1" {
		t.Errorf("gate-source %q, want %s/0/1", got, inTopic)
	}
	if got := testutil.ToFloat64(g.c.m.rerouted.WithLabelValues("dead_letter_stripped")); got != 1 {
		t.Errorf("gate_records_rerouted_total{to=dead_letter_stripped} = %v, want 1", got)
	}
}

// TestStrippedDeadLetterKeepsOriginalTimestamp: a dead letter replayed into the input
// topic carries gate-original-timestamp already; when it is refused again and its large
// headers are dropped with its value, the new dead letter still says when the record was
// first written (the replayed one's header, as a dead letter with its value keeps it).
func TestStrippedDeadLetterKeepsOriginalTimestamp(t *testing.T) {
	t.Parallel()
	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	big.Headers = append(big.Headers,
		kgo.RecordHeader{Key: HeaderOriginalTimestamp, Value: []byte("1600000000000")},
		kgo.RecordHeader{Key: "pad", Value: bytes.Repeat([]byte{'h'}, 2000)}) // over a quarter of 4096: dropped
	r := firstDeadLetter(t, 4096, big)
	if r == nil {
		t.Fatal("no dead letter")
	}
	if got := header(r, HeaderOriginalTimestamp); got != "1600000000000" {
		t.Errorf("%s = %q, want the replayed dead letter's 1600000000000", HeaderOriginalTimestamp, got)
	}
	if got := header(r, "gate-dropped"); !strings.Contains(got, "headers=3") {
		t.Errorf("gate-dropped %q, want the input's other 3 headers dropped", got)
	}
}

// TestStrippedDeadLetterHugeOriginalTimestamp: an input record whose
// gate-original-timestamp header is not a timestamp but kilobytes of bytes (its bulk,
// over the dead-letter topic's limit) is refused whole by the dead-letter topic too; the
// stripped dead letter, which drops the input's headers so that it fits, must drop that
// one as well (stamping the input's own timestamp in its place), and be delivered.
// Before, it kept the header, was refused again, and stopped the partition
// (GATE_ON_UNDELIVERABLE=stop, the default).
func TestStrippedDeadLetterHugeOriginalTimestamp(t *testing.T) {
	t.Parallel()
	big := inputRecord(1, "team-big")
	big.Timestamp = time.UnixMilli(1_700_000_000_000)
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	big.Headers = append(big.Headers, kgo.RecordHeader{Key: HeaderOriginalTimestamp, Value: bytes.Repeat([]byte{'9'}, 5000)})
	r := firstDeadLetter(t, 4096, big)
	if r == nil {
		t.Fatal("no dead letter: the stripped one kept the input's 5000-byte gate-original-timestamp and was refused")
	}
	if got := header(r, HeaderOriginalTimestamp); got != "1700000000000" {
		t.Errorf("%s = %.40q, want the input's timestamp 1700000000000", HeaderOriginalTimestamp, got)
	}
}

// firstDeadLetter runs a gate of GATE_KAFKA_MAX_MESSAGE_BYTES maxBytes over in and
// returns the first record on the dead-letter topic, nil when none came within 20 s.
func firstDeadLetter(t *testing.T, maxBytes int32, in *kgo.Record) *kgo.Record {
	t.Helper()
	env := newEnv(t, 1)
	env.ccfg.MaxMessageBytes = maxBytes
	g := env.start(t, "a")
	produceAll(t, producer(t, env.cluster), []*kgo.Record{in})
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(dlqTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var r *kgo.Record
	for r == nil && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { r = rec })
	}
	g.stop(t)
	return r
}

// TestConfigDefaultsAndErrors checks the zero values take the defaults and that missing
// settings are reported together.
func TestConfigDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	c, err := Config{Brokers: []string{"x:9092"}, InputTopic: "in", GroupID: "g"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPollRecords != DefaultMaxPollRecords || c.CommitInterval != DefaultCommitInterval || c.MaxMessageBytes != DefaultMaxMessageBytes {
		t.Errorf("defaults not applied: %+v", c)
	}
	_, err = Config{CommitInterval: -time.Second}.withDefaults()
	for _, want := range []string{"no brokers", "no input topic", "no group id", "CommitInterval -1s is negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// waitOwning waits until g owns input partitions: a gate started joins its group in its
// own time, longer than any fixed step on a loaded machine.
func waitOwning(t *testing.T, g *testGate) {
	t.Helper()
	waitFor(t, 30*time.Second, "gate "+g.name+" owning partitions", func() bool {
		g.c.partsMu.Lock()
		defer g.c.partsMu.Unlock()
		return len(g.c.parts) > 0
	})
}

// unwell is "" while c is ready and live, else what it answered: its readiness, the
// reasons NotReady gave and Live's error, each read once, so that a message says what was
// seen when the check failed, not what a second read (a stall just over, say) finds.
func unwell(c *Consumer) string {
	ready, why, live := c.Ready(), c.NotReady(), c.Live()
	if ready && live == nil {
		return ""
	}
	return fmt.Sprintf("ready %v (%v), live %v", ready, why, live)
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s; %s", what, timeout, dumpGoroutines(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpGoroutines writes every goroutine's stack to a file in the temporary directory,
// which outlives the test, and returns a line naming it: a wait that runs out in a CI run
// then shows where the gate's loop and the client's goroutines were, which its log alone
// cannot (an exactly-once gate that fetched nothing for 30 s, its log silent: the dump
// showed no fetch loop in franz-go, nudge.go). The package's tests run in parallel: the
// dump holds theirs too.
func dumpGoroutines(t *testing.T) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	f, err := os.CreateTemp("", "gate-stacks-"+name+"-*.txt")
	if err == nil {
		_, err = f.Write(buf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Sprintf("goroutine stacks not written: %v", err)
	}
	return "goroutine stacks in " + f.Name()
}

// waitNotReady waits up to timeout for g's not-ready reasons, joined, to satisfy named;
// past it, it fails with the reasons it last read and want, what they should say.
func waitNotReady(t *testing.T, g *testGate, timeout time.Duration, want string, named func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for why := strings.Join(g.c.NotReady(), "; "); !named(why); why = strings.Join(g.c.NotReady(), "; ") {
		if time.Now().After(deadline) {
			t.Fatalf("not ready because %q; want %s; %s", why, want, dumpGoroutines(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMore waits for count to grow by more from now: a test that something happens once
// over the attempts that came, not over a sleep a loaded machine may pass with none.
func waitMore(t *testing.T, what string, more float64, count func() float64) {
	t.Helper()
	from := count()
	waitFor(t, 60*time.Second, what, func() bool { return count() >= from+more })
}

// countOf is n's count (faulttest.RequestsCounted's, say), for waitMore.
func countOf(n *atomic.Int64) func() float64 { return func() float64 { return float64(n.Load()) } }

// waitMoreFetchErrors is waitMore of g's gate_fetch_errors_total.
func waitMoreFetchErrors(t *testing.T, g *testGate, more float64) {
	t.Helper()
	waitMore(t, fmt.Sprintf("%v more fetch errors", more), more, func() float64 { return counterSum(t, g.reg, "gate_fetch_errors_total") })
}

// counterSum adds up every series of a counter family on reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				s += m.GetCounter().GetValue()
			}
		}
	}
	return s
}

// TestStrippedDeadLetterManyEmptyHeaders: an input record whose headers are thousands of
// empty ones (a few bytes of keys and values, kilobytes once encoded) and whose value is
// too large for every topic is dead-lettered stripped, its headers dropped with its value:
// they are large on the wire, whatever their keys' and values' lengths. Before, they
// were kept as small, the stripped dead letter was refused as well, and the partition
// stopped (GATE_ON_UNDELIVERABLE=stop, the default).
func TestStrippedDeadLetterManyEmptyHeaders(t *testing.T) {
	t.Parallel()
	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	for range 3000 {
		big.Headers = append(big.Headers, kgo.RecordHeader{})
	}
	r := firstDeadLetter(t, 4096, big)
	if r == nil {
		t.Fatal("no dead letter: the stripped one kept the input's 3000 empty headers and was refused")
	}
	if got := header(r, "gate-dropped"); !strings.Contains(got, "headers=3002") {
		t.Errorf("gate-dropped %q, want the input's 3002 headers dropped", got)
	}
}

// TestStrippedRedrivenDeadLetterKeepsGateHeaders: a dead letter re-driven into the input
// topic (its gate-error, gate-error-detail and gate-source with it) and refused again for
// its size is dead-lettered stripped with this failure's three headers, once each.
func TestStrippedRedrivenDeadLetterKeepsGateHeaders(t *testing.T) {
	t.Parallel()
	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	big.Headers = append(big.Headers,
		kgo.RecordHeader{Key: route.HeaderError, Value: []byte("rejected")},
		kgo.RecordHeader{Key: route.HeaderErrorDetail, Value: []byte("an earlier failure")},
		kgo.RecordHeader{Key: route.HeaderSource, Value: []byte("elsewhere/0/7")},
		kgo.RecordHeader{Key: "pad", Value: bytes.Repeat([]byte{'h'}, 2000)}) // over a quarter of 4096: dropped
	r := firstDeadLetter(t, 4096, big)
	if r == nil {
		t.Fatal("no dead letter")
	}
	var gate []string
	for _, h := range r.Headers {
		if strings.HasPrefix(h.Key, "gate-error") || h.Key == route.HeaderSource {
			gate = append(gate, h.Key+"="+string(h.Value))
		}
	}
	if len(gate) != 3 || header(r, route.HeaderError) != "rejected" || header(r, route.HeaderSource) != inTopic+"/0/0" ||
		!strings.Contains(header(r, route.HeaderErrorDetail), "rejected the record") {
		t.Errorf("gate headers %q: want this failure's gate-error, gate-error-detail and gate-source, once each", gate)
	}
}

// TestRefusedDeadLetterKeepsFirstReason: when the dead-letter topic itself refuses a
// record, the dead letter it finally gets (here stripped of its value) says in
// gate-error-detail what happened first: the output topic that refused it, or the
// reason it was dead-lettered for (not_json), then the dead-letter topic's refusal.
// Before, the detail named only the dead-letter topic's refusal: the topic to fix, or
// the record's own fault, was written nowhere.
func TestRefusedDeadLetterKeepsFirstReason(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 10_000)
	for _, tc := range deliveries() {
		for _, c := range []struct{ name, value, first string }{
			{"too large for accepted", `{"team_id":"team-big","pad":"` + pad + `"}`, "topic " + accTopic + " rejected the record: MESSAGE_TOO_LARGE"},
			{"not json", `{"team_id":` + pad, "dead-lettered not_json (value is not valid JSON"},
		} {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				env := newEnv(t, 1)
				env.ccfg.Delivery = tc.d
				env.ccfg.MaxMessageBytes = 4096
				env.rcfg.ValidateJSON = true
				g := env.start(t, "a")
				in := inputRecord(1, "team-big")
				in.Value = []byte(c.value)
				produceAll(t, producer(t, env.cluster), []*kgo.Record{in})
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(dlqTopic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond)}, tc.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var r *kgo.Record
				for r == nil && ctx.Err() == nil {
					cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { r = rec })
				}
				g.stop(t)
				if r == nil {
					t.Fatal("no dead letter")
				}
				detail := header(r, route.HeaderErrorDetail)
				if !strings.HasPrefix(detail, c.first) || !strings.Contains(detail, "topic "+dlqTopic+" rejected the record") {
					t.Errorf("gate-error-detail %q: want it to start %q, then name the dead-letter topic's refusal", detail, c.first)
				}
				if len(r.Value) != 0 || header(r, route.HeaderError) != route.ReasonRejected {
					t.Errorf("dead letter: %d-byte value, gate-error %q: want it stripped, rejected", len(r.Value), header(r, route.HeaderError))
				}
			})
		}
	}
}
