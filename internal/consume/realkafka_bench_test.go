package consume

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/kafkatest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// BenchmarkRealKafka is BenchmarkEndToEnd on Apache Kafka itself (internal/kafkatest,
// one node on loopback, the same for the three runs): records per second from a
// pre-filled input topic to every offset committed, for a bare franz-go pass-through,
// the gate, and the gate with exactly-once delivery. Each run has topics and a group of
// its own; an untimed pass-through warms the broker's JVM first. Run it with a fixed
// count (make bench: -benchtime 300000x). The broker shares the machine's two cores
// with the client, and so does the redis-server the gate's tick syncs with (e2eRedis).
func BenchmarkRealKafka(b *testing.B) {
	c := kafkatest.Start(b, kafkatest.Options{Heap: "1g", Throughput: true})
	r, _ := startE2ERedis(b, -1)
	// A JVM is slow until its code is compiled: a pass-through of 200,000 records, not
	// timed, first, so that the first timed run does not pay for it.
	warm := newBrokerBenchEnv(b, c, "warm-up", 200_000)
	warm.runPassthrough(b, false)
	warm.drop(b)
	runEndToEnd(b, []string{"passthrough", "gate", "exactly-once"}, e2ePin{}, func(b *testing.B, mode string) *benchEnv { return newBrokerBenchEnv(b, c, mode, b.N).with(r) })
}

// BenchmarkRealKafkaLatency measures, on Apache Kafka itself, how long a record takes
// from its produce to being readable on the accepted topic (read_committed with
// exactly-once delivery), at a fixed 2,000 records a second, well below what one gate
// routes, for 15 seconds after a 5-second warm-up: p50 and p99 in milliseconds, for
// each delivery mode. The latency includes the producer's acknowledgement, the gate's
// fetch (GATE_KAFKA_FETCH_MAX_WAIT 500 ms, the default, when a partition is idle: at
// this rate they rarely are), its produce and, with exactly-once, the end of its
// transaction. Run it with -benchtime 1x.
func BenchmarkRealKafkaLatency(b *testing.B) {
	c := kafkatest.Start(b, kafkatest.Options{Throughput: true})
	for _, delivery := range []Delivery{AtLeastOnce, ExactlyOnce} {
		b.Run(delivery.String(), func(b *testing.B) {
			for range b.N {
				p50, p99 := realLatency(b, c, delivery)
				b.ReportMetric(p50, "p50_ms")
				b.ReportMetric(p99, "p99_ms")
			}
		})
	}
}

func realLatency(b *testing.B, c *kafkatest.Cluster, delivery Delivery) (p50, p99 float64) {
	const (
		rate    = 2000
		warmUp  = 5 * time.Second
		measure = 15 * time.Second
	)
	run := fmt.Sprintf("latency-%s-%d", delivery, time.Now().UnixNano())
	in, acc, ovf, dlq := run+".in", run+".acc", run+".ovf", run+".dlq"
	c.CreateTopic(b, in, benchParts)
	for _, t := range []string{acc, ovf, dlq} {
		c.CreateTopic(b, t, 3)
	}
	cfg := Config{Brokers: c.Addrs(), InputTopic: in, GroupID: run, Delivery: delivery,
		OutputTopics: []string{acc, ovf, dlq},
		// The gate's defaults but for how often at-least-once commits, which does not
		// delay a record.
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(500 * time.Millisecond)}}
	if delivery == ExactlyOnce {
		cfg.TransactionalID = run
	}
	reg := prometheus.NewRegistry()
	lim, err := limit.New(limit.Config{Threshold: 1e9}, nil, reg)
	if err != nil {
		b.Fatal(err)
	}
	kf, _ := route.ParseKeyFrom("json:team_id")
	r, err := route.New(route.Config{KeyFrom: kf, AcceptedTopic: acc, OverflowTopic: ovf, DeadLetterTopic: dlq}, lim, reg)
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(cfg, r, nil, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			b.Error(err)
		}
	}()

	// The reader: every accepted record's delay from its produce (its timestamp, kept by
	// the gate) to its fetch.
	var (
		mu     sync.Mutex
		delays []float64
	)
	// On a millisecond, as Kafka keeps timestamps: a record produced at or after it has
	// a timestamp at or after it.
	measureFrom := time.Now().Add(warmUp).Truncate(time.Millisecond)
	// All three outputs: a record limited or dead-lettered would otherwise look lost.
	// None is, at this threshold; elsewhere counts those that were.
	var elsewhere int
	readOpts := []kgo.Opt{kgo.ConsumeTopics(acc, ovf, dlq), kgo.FetchMaxWait(10 * time.Millisecond)}
	if delivery == ExactlyOnce {
		readOpts = append(readOpts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	reader := c.Client(b, readOpts...)
	rctx, rcancel := context.WithCancel(context.Background())
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for rctx.Err() == nil {
			fs := reader.PollFetches(rctx)
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				if rec.Timestamp.Before(measureFrom) {
					return
				}
				mu.Lock()
				delays = append(delays, float64(now.Sub(rec.Timestamp))/float64(time.Millisecond))
				if rec.Topic != acc {
					elsewhere++
				}
				mu.Unlock()
			})
		}
	}()

	prod := c.Client(b, kgo.ProducerLinger(0))
	tick := time.NewTicker(time.Second / 100)
	defer tick.Stop()
	end := measureFrom.Add(measure)
	measured := 0
	for i := 0; time.Now().Before(end); {
		<-tick.C
		for range rate / 100 {
			now := time.Now()
			if !now.Before(measureFrom) {
				measured++
			}
			rec := &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%d", i%64), Timestamp: now,
				Value: fmt.Appendf(nil, `{"team_id":"team-%d","seq":%d}`, i%100, i)}
			prod.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Errorf("producing: %v", err)
				}
			})
			i++
		}
	}
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	// Everything produced is read within a few seconds.
	deadline := time.Now().Add(30 * time.Second)
	want := measured
	for {
		mu.Lock()
		n := len(delays)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rcancel()
	<-readDone
	mu.Lock()
	defer mu.Unlock()
	if len(delays) < want || elsewhere > 0 {
		b.Fatalf("read %d of the %d records produced in the measured seconds, %d of them not on the accepted topic", len(delays), want, elsewhere)
	}
	slices.Sort(delays)
	return delays[len(delays)/2], delays[len(delays)*99/100]
}
