package replay

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/kafkatest"
	"github.com/capturegate/gate/internal/rules"
)

// benchRecords is how many records BenchmarkReplay reads in each turn.
const benchRecords = 1_000_000

// BenchmarkReplay: a replay of 1,000,000 records against a bare consume of the same
// range (a franz-go client that reads every partition to its end and does nothing else),
// in turns, consume first, on the in-process broker and on Apache Kafka (one node, its
// JVM warmed by a consume first). The records: 10,000 teams (a few heavy, most light) of
// 20 users each over ten minutes of record time, on 8 partitions; the replay runs a
// per-user rule and a team rule, as `gate replay -rules -clock event` does (the event
// clock: exact counts, the faster of replay's two), on as many workers as the process has
// processors (gate replay's default), and then on one. It reports each one's records/s and
// the ratio of the first to the consume's (replay_vs_consume_ratio in make bench).
func BenchmarkReplay(b *testing.B) {
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "events"))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		benchReplay(b, kgo.SeedBrokers(c.ListenAddrs()...))
	})
	b.Run("kafka", func(b *testing.B) {
		c := kafkatest.Start(b, kafkatest.Options{Heap: "1g", Throughput: true})
		cl := c.Client(b)
		if _, err := kadm.NewClient(cl).CreateTopic(b.Context(), 8, 1, nil, "events"); err != nil {
			b.Fatal(err)
		}
		benchReplay(b, c.ClientOpts()...)
	})
}

// benchRulesYAML are the rules BenchmarkReplay replays: a per-user rule and a team rule.
const benchRulesYAML = `
rules:
- name: user
  key: json:team_id+distinct_id
  limits: [1m:2000]
  action: overflow
- name: team
  key: json:team_id
  limits: [1m:20000]
  action: overflow
`

// benchEvents are BenchmarkReplay's records: benchRecords events of 10,000 Zipf-spread
// teams of 20 users each, over ten minutes of record time, in time order.
func benchEvents() []*kgo.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.2, 1, 9_999)
	at := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	recs := make([]*kgo.Record, 0, benchRecords)
	for i := range benchRecords {
		team := zipf.Uint64()
		v := fmt.Appendf(nil, `{"team_id":"t%d","distinct_id":"u%d","event":"$pageview","properties":{"$current_url":"https://example.com/p/%d"}}`, team, rng.IntN(20), i%97)
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "t%d", team), Value: v, Topic: "events",
			Timestamp: at.Add(time.Duration(i) * 10 * time.Minute / benchRecords)})
	}
	return recs
}

func benchReplay(b *testing.B, opts ...kgo.Opt) {
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("events"), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	recs := benchEvents()
	for i := 0; i < len(recs); i += 10_000 {
		if err := cl.ProduceSync(b.Context(), recs[i:min(i+10_000, len(recs))]...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	cfg := testConfig(b, map[string]string{"GATE_CLOCK": "event"})
	set := testRules(b, cfg, benchRulesYAML)
	consume := func() {
		n := bareConsume(b, opts)
		if n != benchRecords {
			b.Fatalf("consumed %d records, want %d", n, benchRecords)
		}
	}
	replayed := func(workers int) {
		e := benchEngine(b, cfg, set, workers)
		if _, err := Read(b.Context(), Range{Topic: "events"}, e.RouteAt, nil, opts...); err != nil {
			b.Fatal(err)
		}
		if r := e.Report(20); r.Records != benchRecords || r.Candidates[0].Total.Limited == 0 {
			b.Fatalf("replayed %d records, %d limited", r.Records, r.Candidates[0].Total.Limited)
		}
	}
	consume()                        // warm: the broker's caches (and a JVM's compiler)
	workers := runtime.GOMAXPROCS(0) // gate replay's default
	var tc, tr, t1, cc, cr time.Duration
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		s, c := time.Now(), processCPU()
		consume()
		tc += time.Since(s)
		cc += processCPU() - c
		runtime.GC()
		s, c = time.Now(), processCPU()
		replayed(workers)
		tr += time.Since(s)
		cr += processCPU() - c
		runtime.GC()
		s = time.Now()
		replayed(1)
		t1 += time.Since(s)
	}
	b.StopTimer()
	n := float64(b.N * benchRecords)
	b.ReportMetric(n/tc.Seconds(), "consume-records/s")
	b.ReportMetric(n/tr.Seconds(), "replay-records/s")
	b.ReportMetric(n/t1.Seconds(), "replay1-records/s")
	b.ReportMetric(tc.Seconds()/tr.Seconds(), "replay/consume")
	// The process's CPU a record (the in-process broker's included): what each needs of
	// the machine, whatever its cores.
	b.ReportMetric(float64(cc.Nanoseconds())/n, "consume-cpu-ns/record")
	b.ReportMetric(float64(cr.Nanoseconds())/n, "replay-cpu-ns/record")
	b.Logf("FIGURES replay %s: consume %.0f records/s, replay %.0f records/s (%d workers; one: %.0f), ratio %.3f", b.Name(), n/tc.Seconds(), n/tr.Seconds(), workers, n/t1.Seconds(), tc.Seconds()/tr.Seconds())
}

// benchEngine is an engine replaying set (nil: cfg's GATE_* limits) on workers workers,
// ticking every GATE_TICK_INTERVAL.
func benchEngine(b testing.TB, cfg config.Config, set *rules.Set, workers int) *Engine {
	b.Helper()
	cand, err := NewCandidate("bench", cfg, set)
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(cfg.TickInterval, cand)
	if err != nil {
		b.Fatal(err)
	}
	if n, _ := e.Workers(workers); n != workers {
		b.Fatalf("%d workers, want %d", n, workers)
	}
	return e
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareConsume reads every partition of events from its start to its last stable offset,
// read_committed as replay reads, doing nothing with the records: replay's baseline.
func bareConsume(b *testing.B, opts []kgo.Opt) int {
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(b.Context(), "events")
	if err != nil {
		b.Fatal(err)
	}
	left := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{"events": from})
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(b.Context())
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				n++
				if r.Offset+1 >= left[p.Partition] {
					delete(left, p.Partition)
				}
			}
		})
	}
	return n
}

// BenchmarkEngineWorkers is replay's routing alone, without a broker: BenchmarkReplay's
// million records and rules, already read, through an engine on one worker and on as many
// as the process has processors, in turns. Its ratio is how replay's routing scales with
// processors when nothing else needs them.
func BenchmarkEngineWorkers(b *testing.B) {
	recs := benchEvents()
	cfg := testConfig(b, map[string]string{"GATE_CLOCK": "event"})
	set := testRules(b, cfg, benchRulesYAML)
	route := func(workers int) time.Duration {
		e := benchEngine(b, cfg, set, workers)
		runtime.GC()
		s := time.Now()
		for _, r := range recs {
			e.Route(r)
		}
		if r := e.Report(20); r.Records != benchRecords || r.Candidates[0].Total.Limited == 0 {
			b.Fatalf("replayed %d records, %d limited", r.Records, r.Candidates[0].Total.Limited)
		}
		return time.Since(s)
	}
	n := runtime.GOMAXPROCS(0)
	var t1, tn time.Duration
	for b.Loop() {
		t1 += route(1)
		tn += route(n)
	}
	recsN := float64(b.N * benchRecords)
	b.ReportMetric(recsN/t1.Seconds(), "one-worker-records/s")
	b.ReportMetric(recsN/tn.Seconds(), "workers-records/s")
	b.ReportMetric(t1.Seconds()/tn.Seconds(), "speedup")
	b.Logf("FIGURES replay_engine: one worker %.0f records/s, %d workers %.0f records/s, speedup %.2f", recsN/t1.Seconds(), n, recsN/tn.Seconds(), t1.Seconds()/tn.Seconds())
}

// BenchmarkMerge is the reader's merge in record-time order alone: BenchmarkReplay's
// records on 8 partitions (as a key hash spreads them), added a fetch of 500 records a
// partition at a time and emitted.
func BenchmarkMerge(b *testing.B) {
	recs := benchEvents()
	const parts = 8
	byPart := make([][]*kgo.Record, parts)
	for i, r := range recs {
		p := int32(i * 7919 % parts)
		r.Partition, r.Offset = p, int64(len(byPart[p]))
		byPart[p] = append(byPart[p], r)
	}
	var ranges []PartitionRange
	for p := range parts {
		ranges = append(ranges, PartitionRange{Partition: int32(p), Start: 0, End: int64(len(byPart[p]))})
	}
	n := 0
	for b.Loop() {
		m := newMerge(ranges)
		at := make([]int, parts)
		for !m.done() {
			for p := range parts {
				end := min(at[p]+500, len(byPart[p]))
				m.add(int32(p), byPart[p][at[p]:end])
				at[p] = end
			}
			m.emit(func(*kgo.Record, time.Time) { n++ })
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}
