package consume

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// countingPools is fetchPools counting what comes back to it.
type countingPools struct {
	fetchPools
	recPuts, bufPuts atomic.Int32
}

func (p *countingPools) PutRecords(rs []kgo.Record) {
	p.recPuts.Add(1)
	p.fetchPools.PutRecords(rs)
}

func (p *countingPools) PutDecompressBytes(b []byte) {
	p.bufPuts.Add(1)
	p.fetchPools.PutDecompressBytes(b)
}

// TestInputRecycledWhenBatchDone: fetched with the gate's pools, a poll's input records go
// back to the client (and their decompressed batch to the pools) with the
// acknowledgement that completes their batch, not before: until then every record reads
// as it was produced.
func TestInputRecycledWhenBatchDone(t *testing.T) {
	const n = 50
	var pools countingPools
	recs, want := pooledInput(t, &pools, n)
	c := &Consumer{}
	b := newPartition("in", 0, newMono()).add(n, 0, n)
	b.slab = c.slabs.get(n)
	fs := b.slab
	for i, in := range recs {
		fs[i].b, fs[i].in = b, in
	}
	for i := range n - 1 {
		c.ackBatch(b, 1)
		if pools.recPuts.Load() != 0 || pools.bufPuts.Load() != 0 {
			t.Fatalf("input given back after %d acknowledgements of %d", i+1, n)
		}
	}
	for i, in := range recs {
		if !bytes.Equal(in.Value, want[i].Value) || !bytes.Equal(in.Key, want[i].Key) {
			t.Fatalf("record %d changed before its batch completed: %q", i, in.Value)
		}
	}
	c.ackBatch(b, 1)
	if pools.recPuts.Load() == 0 || pools.bufPuts.Load() == 0 {
		t.Fatalf("input not given back when its batch completed: %d record slices, %d buffers",
			pools.recPuts.Load(), pools.bufPuts.Load())
	}
	if fs[0].in != nil {
		t.Fatal("slab put back holding its input")
	}
}

// TestExactlyOnceInputRecycledWhenBatchDone: with exactly-once, a poll's input records go
// back to the client with the last promise of their batch (routeTxnWork's slab, counted
// down by onProducedTxn, routing holding one count until it is done), not before; and a
// batch with a failed produce is kept whole, since the transaction's end reads its
// failures. Before, exactly-once recycled nothing: its client had no pools, and every
// poll's records and slab were garbage.
func TestExactlyOnceInputRecycledWhenBatchDone(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "all produced", true: "one failed"}[fail], func(t *testing.T) {
			var pools countingPools
			recs, want := pooledInput(t, &pools, 50)
			n := len(recs)
			c := &Consumer{}
			var err error
			if c.m, err = newMetrics(prometheus.NewRegistry(), c); err != nil {
				t.Fatal(err)
			}
			// As routeTxnWork builds it: one count a record, and routing's own.
			b := &batch{slab: c.slabs.get(n)}
			b.remaining.Store(int64(n) + 1)
			fs := b.slab
			for i, in := range recs {
				fs[i].b, fs[i].in = b, in
				fs[i].out = kgo.Record{Topic: "out", Value: in.Value}
				c.txn.pending.Add(1)
			}
			for i := range fs {
				var perr error
				if fail && i == 3 {
					perr = kerr.MessageTooLarge
				}
				c.onProducedTxn(&fs[i].out, perr)
			}
			if pools.recPuts.Load() != 0 || pools.bufPuts.Load() != 0 {
				t.Fatal("input given back while routing still held its batch")
			}
			for i, in := range recs {
				if !bytes.Equal(in.Value, want[i].Value) || !bytes.Equal(in.Key, want[i].Key) {
					t.Fatalf("record %d changed before its batch completed: %q", i, in.Value)
				}
			}
			c.ackBatch(b, 1) // routing done, every record produced
			puts := pools.recPuts.Load() + pools.bufPuts.Load()
			if fail {
				if puts != 0 || fs[0].in == nil {
					t.Fatalf("a batch with a failed produce was recycled (%d puts)", puts)
				}
				if got := c.txn.takeFailures(); len(got) != 1 || got[0].in != recs[3] || !bytes.Equal(got[0].in.Value, want[3].Value) {
					t.Fatalf("failures %v: want record 3, whole", got)
				}
				return
			}
			if pools.recPuts.Load() == 0 || pools.bufPuts.Load() == 0 {
				t.Fatalf("input not given back when its batch completed: %d record slices, %d buffers",
					pools.recPuts.Load(), pools.bufPuts.Load())
			}
			if fs[0].in != nil {
				t.Fatal("slab put back holding its input")
			}
		})
	}
}

// pooledInput polls n snappy records, decompressed into pools: with want, the records as
// produced.
func pooledInput(t *testing.T, pools *countingPools, n int) (recs, want []*kgo.Record) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	for i := range n {
		want = append(want, &kgo.Record{Topic: "in", Key: []byte("k" + strconv.Itoa(i)),
			Value: bytes.Repeat([]byte(`{"team_id":"t`+strconv.Itoa(i)+`"}`), 20)})
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.SnappyCompression()),
		kgo.ProducerLinger(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pr.ProduceSync(ctx, want...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithPools(pools))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for len(recs) < n && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) != n {
		t.Fatalf("polled %d records of %d", len(recs), n)
	}
	return recs, want
}

// TestFetchPoolsSizes: record slices and buffers come empty with the capacity asked for, a
// buffer's from the header's size where the codec gives it, else from the ratio of the
// codec's batches read so far.
func TestFetchPoolsSizes(t *testing.T) {
	var p fetchPools
	for _, n := range []int{1, 3, 1000, 1 << 17, 1<<17 + 1} {
		rs := p.GetRecords(n)
		if len(rs) != 0 || cap(rs) < n {
			t.Fatalf("GetRecords(%d): len %d, cap %d", n, len(rs), cap(rs))
		}
		p.PutRecords(rs[:cap(rs)]) // as the client gives it back
		if again := p.GetRecords(n); len(again) != 0 || cap(again) < n {
			t.Fatalf("GetRecords(%d) after a put: len %d, cap %d", n, len(again), cap(again))
		}
	}

	plain := bytes.Repeat([]byte(`{"team_id":"team-1","event":"$pageview"}`), 500)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		compressed []byte
		codec      kgo.CompressionCodecType
		want       int
	}{
		{"snappy", s2.EncodeSnappy(nil, plain), kgo.CodecSnappy, len(plain)},
		{"zstd", enc.EncodeAll(plain, nil), kgo.CodecZstd, len(plain)},
		// No size in the header, nothing read yet: firstRatio × the compressed size.
		{"xerial", append([]byte("\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"), s2.EncodeSnappy(nil, plain)...), kgo.CodecSnappy, 0},
		{"lz4", make([]byte, 300), kgo.CodecLz4, 300 * firstRatio},
	} {
		if tc.want == 0 {
			tc.want = len(tc.compressed) * firstRatio
		}
		if got := p.decompressedSize(tc.compressed, tc.codec); got != tc.want {
			t.Errorf("%s: decompressed size %d, want %d", tc.name, got, tc.want)
		}
		b := p.GetDecompressBytes(tc.compressed, tc.codec)
		if len(b) != 0 || cap(b) < tc.want {
			t.Errorf("%s: buffer len %d, cap %d for %d bytes", tc.name, len(b), cap(b), tc.want)
		}
	}
	if b := p.GetDecompressBytes(make([]byte, 1<<25), kgo.CodecGzip); b != nil {
		t.Fatalf("a buffer of %d bytes lent past the largest class", cap(b))
	}
}

// TestFetchPoolsLearnRatio: a codec whose header does not give the decompressed size gets
// buffers sized by its batches read so far: the ratio follows a larger one at once and a
// smaller one slowly.
func TestFetchPoolsLearnRatio(t *testing.T) {
	var p fetchPools
	read := func(codec uint8, compressed, uncompressed int) {
		p.OnFetchBatchRead(kgo.BrokerMetadata{}, "in", 0, kgo.FetchBatchMetrics{
			NumRecords: 10, CompressionType: codec, CompressedBytes: compressed, UncompressedBytes: uncompressed})
	}
	const lz4, gzip = 3, 1
	read(lz4, 1000, 9000)
	if got := p.decompressedSize(make([]byte, 100), kgo.CodecLz4); got != 900 {
		t.Fatalf("after a 9× batch: %d bytes for 100, want 900", got)
	}
	if got := p.decompressedSize(make([]byte, 100), kgo.CodecGzip); got != 100*firstRatio {
		t.Fatalf("another codec's ratio used: %d bytes for 100", got)
	}
	read(lz4, 1000, 1000) // one batch of 1×: a sixteenth of the way down
	if got := p.decompressedSize(make([]byte, 100), kgo.CodecLz4); got != 850 {
		t.Fatalf("after a 1× batch: %d bytes for 100, want 850", got)
	}
	read(gzip, 0, 500)  // nothing to learn from
	read(0, 1000, 1000) // uncompressed
	if got := p.decompressedSize(make([]byte, 100), kgo.CodecGzip); got != 100*firstRatio {
		t.Fatalf("learned from a batch without sizes: %d bytes for 100", got)
	}
}

// TestFetchPoolsGrownBuffer: a buffer the codec grew past what was lent comes back a class
// up, where the next batch of that size finds it.
func TestFetchPoolsGrownBuffer(t *testing.T) {
	var p fetchPools
	// 500 compressed bytes of lz4 ask for 2,000 (a buffer of class 11, 2,048 bytes); the
	// codec grew one to 5,000 (class 12).
	grown := make([]byte, 5000)
	p.PutDecompressBytes(grown)
	found := false
	for range 100 { // sync.Pool may drop what it is given (it does at random under -race)
		if b := p.GetDecompressBytes(make([]byte, 500), kgo.CodecLz4); cap(b) == cap(grown) {
			found = true
			break
		}
		p.PutDecompressBytes(grown)
	}
	if !found {
		t.Fatal("a grown buffer a class up never lent for a batch of its size")
	}
}

// TestFetchPoolsClearKeptBack: records the client decoded but kept back (below the offset
// fetched, the batch's first ones) are cleared when the slice comes back, so the pool
// does not pin their bytes; recycled ones are left as they are (already clear).
func TestFetchPoolsClearKeptBack(t *testing.T) {
	var p fetchPools
	rs := p.GetRecords(4)[:4]
	ctx := context.Background()
	rs[0] = kgo.Record{Value: []byte("kept back"), Context: ctx}
	rs[1] = kgo.Record{Value: []byte("kept back"), Context: ctx}
	// rs[2] and rs[3] recycled: zero.
	p.PutRecords(rs)
	for i := range rs {
		if rs[i].Value != nil || rs[i].Context != nil {
			t.Fatalf("record %d not cleared: %+v", i, rs[i])
		}
	}
}
