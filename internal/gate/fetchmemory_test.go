package gate

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/redistest"
)

// compressedEvent is a JSON event of about size bytes whose text, words drawn from a
// few dozen, compresses about 4.4 times with snappy, as JSON events do.
func compressedEvent(id, size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 32)
	for i := range words {
		b := make([]byte, 3+r.IntN(8))
		for j := range b {
			b[j] = byte('a' + r.IntN(26))
		}
		words[i] = string(b)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `{"team_id":"team-%d","seq":%d,"text":"`, id%7, id)
	for sb.Len() < size {
		sb.WriteString(words[r.IntN(len(words))])
		sb.WriteByte(' ')
	}
	sb.WriteString(`"}`)
	return []byte(sb.String())
}

// liveHeap is the heap still in use once collected.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC() // what a sync.Pool kept goes at the second
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestFetchMaxBytesBoundsCompressedBacklog: a backlog of 1 MB events, snappy-compressed
// (one a batch, about 4.4 times), and the accepted topic refusing every write (no leader),
// as in an output outage. The gate stops polling once its producer buffer is full, and
// what it holds is what docs/operations.md's sizing says: up to twice
// GATE_MAX_BUFFERED_BYTES for the records in flight, plus per broker the poll being routed
// and the fetch the client buffers meanwhile, each GATE_KAFKA_FETCH_MAX_BYTES as fetched
// and the compression ratio times that once decompressed. Before, no variable bounded a
// fetch (franz-go's 50 MiB, compressed), so that memory grew with the backlog's
// compression whatever GATE_MAX_BUFFERED_BYTES said: here each partition's 1 MiB of
// batches, 4 events, twice over 16 partitions, 145 MiB behind the 8 MiB buffer (18 MiB
// now). Once the topic takes writes again every event is written once and committed.
func TestFetchMaxBytesBoundsCompressedBacklog(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations: memory is measured without it")
	}
	const (
		parts    = 16
		n        = 200
		size     = 1_000_000
		buffered = 8 << 20 // GATE_MAX_BUFFERED_BYTES
		fetch    = 1 << 20 // GATE_KAFKA_FETCH_MAX_BYTES
	)
	srv := redistest.Start(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "events"),
		kfake.SeedTopics(3, "events_accepted", "events_overflow", "events_dead_letter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)

	var raw, compressed atomic.Int64
	pcl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ProducerBatchMaxBytes(1_048_588),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.WithHooks(batchSizes{&raw, &compressed}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for id := range n {
		rec := &kgo.Record{Topic: "events", Partition: -1, Key: []byte(strconv.Itoa(id)), Value: compressedEvent(id, size)}
		pcl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing the backlog: %v", err)
			}
		})
	}
	if err := pcl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pcl.Close()
	ratio := float64(raw.Load()) / float64(compressed.Load())

	refused := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events_accepted", Err: kerr.NotLeaderForPartition, Count: -1})
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS":         strings.Join(kc.ListenAddrs(), ","),
		"GATE_REDIS_URLS":            srv.URL(),
		"GATE_MAX_BUFFERED_BYTES":    strconv.Itoa(buffered),
		"GATE_KAFKA_FETCH_MAX_BYTES": strconv.Itoa(fetch),
		"GATE_COMMIT_INTERVAL":       "100ms",
	})
	log := slog.New(slog.DiscardHandler)
	// Before New: its client joins the group and fetches at once.
	base := liveHeap()
	g, err := New(cfg, log, Options{Writer: "fetch-memory"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { g.RunOverrides(runCtx) })
	wg.Go(func() {
		if err := g.Consumer.Run(runCtx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); g.CloseRedis(log) })

	waitFor(t, "the producer buffer to fill", func() bool {
		return gauge(t, g, "gate_kafka_buffered_produce_bytes") > buffered-size
	})
	// The client fetches what it will while routing waits: one fetch buffered (franz-go
	// holds one a broker until it is polled), waited for, not slept for.
	waitFor(t, "the client to hold a fetch not yet polled", func() bool {
		return gauge(t, g, "gate_kafka_buffered_fetch_bytes") > 0
	})
	held := liveHeap() - base
	// Records in flight, the poll and the fetch, and the gate's own (its team cache, its
	// metrics: 14 MiB).
	bound := 2*buffered + 2*fetch*ratio + 16<<20
	t.Logf("backlog compressed %.2f times; held %.1f MiB while the output refused writes (bound %.1f MiB)",
		ratio, float64(held)/(1<<20), bound/(1<<20))
	if float64(held) > bound {
		t.Errorf("held %.1f MiB behind a full producer buffer of %d MiB with GATE_KAFKA_FETCH_MAX_BYTES=%d: want at most %.1f MiB",
			float64(held)/(1<<20), buffered>>20, fetch, bound/(1<<20))
	}

	refused.Remove()
	waitFor(t, "every event written and committed", func() bool {
		var written int64
		for p := range int32(3) {
			written += kc.PartitionInfo("events_accepted", p).HighWatermark
		}
		gi := kc.GroupInfo(cfg.GroupID)
		if written != n || gi == nil {
			return false
		}
		var committed int64
		for p := range int32(parts) {
			committed += gi.Commits["events"][p].Offset
		}
		return committed == n
	})
}

// batchSizes adds up the produced batches' sizes before and after compression.
type batchSizes struct{ raw, compressed *atomic.Int64 }

func (b batchSizes) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	b.raw.Add(int64(m.UncompressedBytes))
	b.compressed.Add(int64(m.CompressedBytes))
}

// gauge is the value of the gauge name (the sum of its series).
func gauge(t *testing.T, g *Gate, name string) float64 {
	t.Helper()
	mfs, err := g.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetGauge().GetValue()
			}
		}
	}
	return v
}
