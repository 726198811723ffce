package consume

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/route"
)

// TestOutputTopicBatchLimit: an output topic whose max.message.bytes is below
// GATE_KAFKA_MAX_MESSAGE_BYTES takes every record the gate routes to it when each is
// small: the producer's batches to it stay within the topic's limit. Before, the producer
// filled batches up to the gate's limit, the broker refused every batch over the
// topic's (MESSAGE_TOO_LARGE, for the whole batch), and each of its records was produced
// again alone, one round trip at a time: under load a stream of produce errors and
// retries, throughput collapsing, for records no topic refuses.
func TestOutputTopicBatchLimit(t *testing.T) {
	t.Parallel()
	const parts, n = 1, 2000
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 0
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	prod := producer(t, env.cluster)
	limit := "4096" // some forty records of the test's
	setTopicConfig(t, env.cluster, "max.message.bytes", limit, accTopic)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	// All in before the gate starts, so that its polls are large and its batches full.
	produceAll(t, prod, recs)
	g := env.start(t, "a")

	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	if got := len(out.recs[accTopic]); got != n {
		t.Errorf("%d accepted, want %d (dead letters: %d)", got, n, len(out.recs[dlqTopic]))
	}
	if got := testutil.ToFloat64(g.c.m.retries); got != 0 {
		t.Errorf("gate_produce_retries_total = %v for records each well under %s's max.message.bytes, want 0", got, accTopic)
	}
}

// TestStrippedDeadLetterWithinDeadLetterTopicLimit: a record too large for its output
// topic and for the dead-letter topic, whose max.message.bytes (2048) is far below
// GATE_KAFKA_MAX_MESSAGE_BYTES, with two kilobytes of headers: the dead letter without
// its value drops them too, as they are large for that topic, and is delivered. Before,
// headers were judged against a quarter of GATE_KAFKA_MAX_MESSAGE_BYTES (256 KiB), kept,
// the stripped dead letter refused as well, and the partition stopped
// (GATE_ON_UNDELIVERABLE=stop) on a record the dead-letter topic could have taken.
func TestStrippedDeadLetterWithinDeadLetterTopicLimit(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	prod := producer(t, env.cluster)
	setTopicConfig(t, env.cluster, "max.message.bytes", "4096", accTopic)
	setTopicConfig(t, env.cluster, "max.message.bytes", "2048", dlqTopic)
	big := inputRecord(1, "team-big")
	big.Value = []byte(`{"team_id":"team-big","pad":"` + strings.Repeat("x", 10_000) + `"}`)
	for i := range 20 {
		big.Headers = append(big.Headers, kgo.RecordHeader{Key: "baggage-" + strconv.Itoa(i), Value: []byte(strings.Repeat("b", 100))})
	}
	g := env.start(t, "a")
	produceAll(t, prod, []*kgo.Record{big})

	// Read here, not with collect: the dead letter has none of the input's headers, its
	// test id among them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(dlqTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	var r *kgo.Record
	for r == nil && rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(rec *kgo.Record) { r = rec })
	}
	g.stop(t)
	if r == nil {
		t.Fatalf("no dead letter (undeliverable, stopped: %v)", testutil.ToFloat64(g.c.m.undeliverable.WithLabelValues("stopped")))
	}
	if len(r.Value) != 0 || !strings.Contains(header(r, "gate-dropped"), "headers=22") || header(r, "baggage-0") != "" {
		t.Errorf("dead letter: %d-byte value, gate-dropped %q, baggage-0 %q: want no value and the input's 22 headers dropped",
			len(r.Value), header(r, "gate-dropped"), header(r, "baggage-0"))
	}
}

// TestReloadedRuleTopicBatchLimit: a rule topic that a reload brings (not one of the
// topics the preflight read) gets its max.message.bytes read when the reload checks it
// (CheckTopics), before its rule is put in use, and the producer's batches to it stay
// within it. Before, only the preflight read the limits: such a topic got batches up to
// GATE_KAFKA_MAX_MESSAGE_BYTES, the broker refused each one over its own limit, and every
// record of those went again alone.
func TestReloadedRuleTopicBatchLimit(t *testing.T) {
	t.Parallel()
	const parts, n, merges = 1, 2000, "merges"
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 0
	prod := producer(t, env.cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(prod)
	limit := "4096" // some forty records of the test's
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, merges); err != nil {
		t.Fatalf("creating %s: %v", merges, err)
	}
	w := ruleTopicRouter(t, env, merges, nil, nil) // the preflight checks no rule topic
	g := env.start(t, "a")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "the gate ready", g.c.Ready)
	if got := g.c.batchMaxBytes(merges); got != g.c.cfg.MaxMessageBytes {
		t.Fatalf("batch limit of %s before the reload checked it: %d, want the gate's %d", merges, got, g.c.cfg.MaxMessageBytes)
	}
	// The reload: its topics checked (internal/gate's checkRuleTopics), then in use.
	if err := g.c.CheckTopics(ctx, []string{merges}); err != nil {
		t.Fatalf("checking %s: %v", merges, err)
	}
	w.Use([]string{merges})
	if got := g.c.batchMaxBytes(merges); got != 4096 {
		t.Fatalf("batch limit of %s after the reload checked it: %d, want its max.message.bytes 4096", merges, got)
	}

	recs := make([]*kgo.Record, n)
	for id := range recs {
		team := "good"
		if id%2 == 0 {
			team = "bad" // the rule's: to merges
		}
		recs[id] = inputRecord(id, team)
	}
	produceAll(t, prod, recs)
	waitCommitted(t, env.cluster, parts, time.Minute)
	ends, err := adm.ListEndOffsets(ctx, merges)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ends.Lookup(merges, 0); got.Offset != n/2 {
		t.Errorf("%d records on %s, want %d", got.Offset, merges, n/2)
	}
	if got := testutil.ToFloat64(g.c.m.retries); got != 0 {
		t.Errorf("gate_produce_retries_total = %v for records each well under %s's max.message.bytes, want 0", got, merges)
	}
}

// TestOutputTopicBatchLimitChangeSaid: an output topic's max.message.bytes changed while
// the gate runs (an operator raising it to let larger records through) is read again
// and said, once, with what to do: franz-go keeps the limit it asked for at a
// partition's first record, so the gate still sends a record over the old limit to dead
// letter until it restarts. Before, nothing said so: the larger records kept going to
// dead letter with no word of why the new limit did not take.
func TestOutputTopicBatchLimitChangeSaid(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.TopicConfigInterval = 100 * time.Millisecond
	logs := &syncBuffer{}
	env.logs = logs
	var describes atomic.Int64 // the gate's reads of topic configs, the test's own too
	env.cluster.ControlKey(kmsg.DescribeConfigs.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		describes.Add(1)
		return nil, nil, false
	})
	prod := producer(t, env.cluster)
	setLimit := func(v string) {
		t.Helper()
		setTopicConfig(t, env.cluster, "max.message.bytes", v, accTopic)
	}
	changed := func() []string {
		var out []string
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, "max.message.bytes changed") {
				out = append(out, l)
			}
		}
		return out
	}
	readsAfter := func(what string) {
		t.Helper()
		n := describes.Load()
		waitFor(t, 20*time.Second, what, func() bool { return describes.Load() >= n+3 })
	}
	setLimit("4096")
	g := env.start(t, "g")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "the accepted topic's batch limit read at start", func() bool { return g.c.batchMaxBytes(accTopic) == 4096 })
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "t")}) // the partition's batch limit taken: 4096
	waitCommitted(t, env.cluster, 1, 30*time.Second)
	readsAfter("the limits read again, unchanged")
	if got := changed(); len(got) != 0 {
		t.Fatalf("the limit unchanged, yet: %q", got)
	}
	setLimit("16384")
	waitFor(t, 20*time.Second, "the change said", func() bool { return len(changed()) > 0 })
	line := changed()[0]
	for _, want := range []string{`"level":"WARN"`, `"topic":"` + accTopic + `"`, `"batch_limit_in_use":4096`, `"batch_limit_new":16384`, "restart"} {
		if !strings.Contains(line, want) {
			t.Errorf("the change's line lacks %s: %s", want, line)
		}
	}
	readsAfter("the limits read again after the change")
	if got := changed(); len(got) != 1 {
		t.Errorf("the change said %d times, want once: %q", len(got), got)
	}
}

// TestRecordAtOutputTopicLimitDelivered: a record whose batch is exactly its output
// topic's max.message.bytes, which the broker takes (a producer of the test's writes it
// there), is delivered, and one byte more goes to dead letter. Before, franz-go, given
// the topic's limit, counted against it the length the produce request writes before a
// batch too, which the broker does not: a record within those few bytes of the limit,
// taken by an input topic of the same limit, went to dead letter as "rejected" by a
// topic that never saw it.
func TestRecordAtOutputTopicLimitDelivered(t *testing.T) {
	t.Parallel()
	const limit = 4096
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	prod := producer(t, env.cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := strconv.Itoa(limit)
	setTopicConfig(t, env.cluster, "max.message.bytes", v, accTopic)
	// sized returns input record id whose batch alone is size bytes as the broker counts
	// it against max.message.bytes: the 61 bytes of a batch's header and the record.
	// Padded with random letters, as large compressed.
	letters := make([]byte, limit)
	for i := range letters {
		letters[i] = 'a' + byte(rand.IntN(26))
	}
	sized := func(id, size int) *kgo.Record {
		r := inputRecord(id, "t")
		r.Headers = r.Headers[:1]
		for pad := 0; ; pad++ {
			r.Value = []byte(`{"team_id":"t","pad":"` + string(letters[:pad]) + `"}`)
			n := 3 + varintLen(len(r.Key)) + len(r.Key) + varintLen(len(r.Value)) + len(r.Value) + varintLen(len(r.Headers))
			for _, h := range r.Headers {
				n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
			}
			if got := 61 + varintLen(n) + n; got >= size {
				if got != size {
					t.Fatalf("no record of %d bytes (%d)", size, got)
				}
				return r
			}
		}
	}
	big, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ProducerBatchMaxBytes(2*limit),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // the broker counts the batch as sent
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	at := sized(1, limit)
	direct := *at
	direct.Topic, direct.Headers = accTopic, []kgo.RecordHeader{{Key: idHeader, Value: []byte("9")}} // as large as at's
	if err := big.ProduceSync(ctx, &direct).FirstErr(); err != nil {
		t.Fatalf("the broker refused a batch of exactly %s's max.message.bytes: %v", accTopic, err)
	}

	g := env.start(t, "a")
	// A first record, so that the gate's producer knows the broker's produce version
	// before the large ones (until then franz-go sizes batches for the largest framing).
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "t")})
	collect(t, env.cluster, 1, 20*time.Second, 0)
	if err := big.ProduceSync(ctx, at, sized(2, limit+1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := collect(t, env.cluster, 3, 20*time.Second, 300*time.Millisecond)
	g.stop(t)
	if lost, dup := out.conservation(3); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("lost %v, duplicated %v", lost, dup)
	}
	if got := out.ids[1]; got[0] != accTopic {
		var why string
		for _, r := range out.recs[dlqTopic] {
			if header(r, idHeader) == "1" {
				why = header(r, route.HeaderErrorDetail)
			}
		}
		t.Errorf("a record of exactly %s's max.message.bytes (%d) went to %s (%s), want %s", accTopic, limit, got[0], why, accTopic)
	}
	if got := out.ids[2]; got[0] != dlqTopic {
		t.Errorf("a record one byte over %s's max.message.bytes went to %s, want %s", accTopic, got[0], dlqTopic)
	}
}

// TestRuleTopicBatchLimitChangeSaidAfterReload: a rule topic's max.message.bytes changed
// while the gate runs, and a rules reload checking that topic (CheckTopics, any edit of
// the file) before the limits are read again: the change is said all the same, with what
// to do, as for any output topic. Before, the reload's check took the new limit in
// silently (its line saying the batches to the topic stay within it), so the periodic
// read found nothing changed and never said that the producer keeps the old one until
// the gate restarts: records over the old limit kept going to dead letter unexplained.
func TestRuleTopicBatchLimitChangeSaidAfterReload(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	const merges = "merges"
	small := "4096"
	if err := env.cluster.CreateTopic(merges, 1, map[string]string{"max.message.bytes": small}); err != nil {
		t.Fatal(err)
	}
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, merges} // as the gate's (internal/gate)
	env.ccfg.TopicConfigInterval = time.Hour                               // read again below, by hand
	logs := &syncBuffer{}
	env.logs = logs
	ruleTopicRouter(t, env, merges, []string{merges}, nil)
	g := env.start(t, "g")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "the rule topic's batch limit read at start", func() bool { return g.c.batchMaxBytes(merges) == 4096 })
	prod := producer(t, env.cluster)
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "bad")}) // the partition's batch limit taken: 4096
	waitCommitted(t, env.cluster, 1, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := "16384"
	setTopicConfig(t, env.cluster, "max.message.bytes", big, merges)
	if err := g.c.CheckTopics(ctx, []string{merges}); err != nil { // a rules reload's check
		t.Fatal(err)
	}
	g.c.rereadBatchLimits(ctx, g.c.live.Load())
	var said []string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "max.message.bytes changed") && strings.Contains(l, `"topic":"`+merges+`"`) {
			said = append(said, l)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], `"batch_limit_in_use":4096`) || !strings.Contains(said[0], `"batch_limit_new":16384`) {
		t.Errorf("%s's max.message.bytes raised from 4096 to 16384, a reload between: said %q, want one line naming both and a restart", merges, said)
	}
}
