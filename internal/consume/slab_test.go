package consume

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSlabBackOnlyWhenBatchDone: a batch's slab goes back to the pool only with the
// acknowledgement that completes the batch, and cleared, so that a kept slab holds no
// input record; before that the batch still holds it, contents intact.
func TestSlabBackOnlyWhenBatchDone(t *testing.T) {
	c := &Consumer{}
	p := newPartition("in", 0, newMono())
	in := &kgo.Record{Value: []byte(`{"team_id":"t"}`)}
	b := p.add(3, 0, 3)
	fs := c.slabs.get(3)
	b.slab = fs
	for i := range fs {
		fs[i].b, fs[i].in = b, in
	}
	c.ackBatch(b, 1)
	c.ackBatch(b, 1)
	if b.slab == nil || fs[0].in != in || fs[2].b != b {
		t.Fatal("slab put back, or cleared, with a record of its batch still in flight")
	}
	c.ackBatch(b, 1)
	if b.slab != nil {
		t.Fatal("slab still held by a completed batch")
	}
	for i := range fs[:cap(fs)] {
		if fs[:cap(fs)][i].in != nil || fs[:cap(fs)][i].b != nil {
			t.Fatalf("slab put back holding record %d", i)
		}
	}
}

// TestSlabUnroutedCompletesBatch: records left unrouted count as done, so a batch whose
// routing stopped midway gives its slab back once the routed ones are acknowledged.
func TestSlabUnroutedCompletesBatch(t *testing.T) {
	c := &Consumer{}
	p := newPartition("in", 0, newMono())
	recs := []*kgo.Record{{Offset: 10}, {Offset: 11}, {Offset: 12}, {Offset: 13}}
	b := p.add(14, 0, len(recs))
	b.slab = c.slabs.get(len(recs))
	c.unroute(work{p: p, recs: recs}, b, 1) // 11, 12, 13 not routed
	if b.slab == nil {
		t.Fatal("slab put back while record 10 is in flight")
	}
	c.ackBatch(b, 1)
	if b.slab != nil {
		t.Fatal("slab not put back once the routed record was acknowledged")
	}
}

// TestSlabSizes: get gives n zeroed records; slabs of a pooled class come back at their
// class's capacity, others are not kept.
func TestSlabSizes(t *testing.T) {
	var s slabs
	for _, n := range []int{1, 2, 3, 500, 10_000, 1 << 15, 1<<15 + 1} {
		fs := s.get(n)
		if len(fs) != n {
			t.Fatalf("get(%d): len %d", n, len(fs))
		}
		if n <= 1<<15 && cap(fs)&(cap(fs)-1) != 0 {
			t.Fatalf("get(%d): capacity %d is not a class", n, cap(fs))
		}
		fs[n-1].attempts = 7
		s.put(fs)
		if again := s.get(n); again[n-1].attempts != 0 {
			t.Fatalf("get(%d) after put: a record not zeroed", n)
		}
	}
}

// TestSlabsReusedUnderRetries: with polls of a few records, slabs are taken back and
// reused all the time, while produce requests fail and their records wait for retries
// in slabs whose other records are done. Every record still comes out once, and as
// itself: a slab reused under a record in flight or queued would send another record's
// value, key or headers in its place.
func TestSlabsReusedUnderRetries(t *testing.T) {
	t.Parallel()
	const parts, n = 3, 3000
	env := newEnv(t, parts)
	env.ccfg.MaxPollRecords = 7
	// One client retry: a failed produce comes back to the gate, whose records then wait
	// in their slabs for the gate's own retries.
	env.ccfg.ProduceRetries = 1
	// The gate's retries at a tenth of their delays: how long they wait is not what is
	// tested, that the records wait in their slabs for them is.
	env.ccfg.Jitter = shortJitter
	env.wrap = func(r Router) Router { return slowRouter{r, 20 * time.Microsecond} }
	fault := failAcceptedProduces(env, 3)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%11))
	}
	g := env.start(t, "a")
	produceAll(t, producer(t, env.cluster), recs)
	// Thirty failed requests, or, on a machine so loaded that the client batched every
	// record into fewer requests than that, whatever failed by then: the gate's own
	// retries must still have run (checked below).
	for deadline := time.Now().Add(30 * time.Second); fault.Hits() < 30 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fault.Remove()
	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	retried := counterSum(t, g.reg, "gate_produce_retries_total")
	g.stop(t)
	if retried == 0 {
		t.Fatal("no record was produced again by the gate: its retries were not exercised")
	}
	// The input is snappy (franz-go's default): the gate's client decompressed into its
	// pools and reported its batches to them (pools.go).
	if g.c.pools.ratio[kgo.CodecSnappy].Load() == 0 {
		t.Fatal("the consumer's client reported no snappy batch to its pools: the hook is not wired")
	}
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	for _, r := range out.recs[accTopic] {
		id, _ := strconv.Atoi(header(r, idHeader))
		want := recs[id]
		if !bytes.Equal(r.Value, want.Value) || !bytes.Equal(r.Key, want.Key) || header(r, "trace") != "t"+strconv.Itoa(id) || !r.Timestamp.Equal(want.Timestamp) {
			t.Fatalf("record %d came out as key %q, value %s, trace %q, time %v", id, r.Key, r.Value, header(r, "trace"), r.Timestamp)
		}
	}
	t.Logf("%d records in polls of at most 7, %d failed produce requests, %v produced again by the gate, each out once and whole", n, fault.Hits(), retried)
}
