package consume

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

const benchParts = 4

// BenchmarkEndToEnd measures records per second through the in-process broker, from a
// pre-filled input topic to every offset committed, for the whole gate (at-least-once,
// the default, and exactly-once) and for a bare franz-go consume→produce→commit
// pass-through with the same client settings. Run it with a fixed count (-benchtime
// 1000000x, as make bench does): each op is one record. A run's time includes joining the
// group and starting up, longer for the gate, which weighs on short runs. Compare the
// three within one run; the broker shares the machine with the client, so absolute rates
// are low.
func BenchmarkEndToEnd(b *testing.B) {
	runEndToEnd(b, func(b *testing.B, _ string) *benchEnv { return newBenchEnv(b, b.N) })
}

// runEndToEnd runs the pass-through, the gate and the gate with exactly-once delivery
// as sub-benchmarks, each on an environment of b.N records that newEnv makes for the
// mode, and reports records/s.
func runEndToEnd(b *testing.B, newEnv func(b *testing.B, mode string) *benchEnv) {
	for _, mode := range []string{"passthrough", "gate", "exactly-once"} {
		b.Run(mode, func(b *testing.B) {
			env := newEnv(b, mode)
			b.ResetTimer()
			start := time.Now()
			var elapsed time.Duration
			switch mode {
			case "gate":
				elapsed = env.runGate(b, start)
			case "exactly-once":
				env.cfg.Delivery, env.cfg.TransactionalID = ExactlyOnce, env.cfg.GroupID
				elapsed = env.runGate(b, start)
			default:
				env.runPassthrough(b)
				elapsed = time.Since(start)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

type benchEnv struct {
	cfg Config
	n   int
	// in, acc, ovf and dlq are the run's topics.
	in, acc, ovf, dlq string
	// ends are the input partitions' end offsets once filled (they do not move).
	ends map[int32]int64
	// behind lists the input partitions whose committed offset is short of its end.
	behind func() []string
}

// newBenchEnv starts a broker and fills the input topic with n JSON events over 10k
// teams, Zipf-spread, about 200 bytes each.
func newBenchEnv(b *testing.B, n int) *benchEnv {
	b.Helper()
	c := newCluster(b, benchParts)
	prod := producer(b, c)
	benchRecords(inTopic, n, func(recs []*kgo.Record) { produceAll(b, prod, recs) })
	cfg, err := Config{
		Brokers: c.ListenAddrs(), InputTopic: inTopic, GroupID: testGroup,
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)},
	}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	ends := map[int32]int64{}
	for p := range int32(benchParts) {
		ends[p] = c.PartitionInfo(inTopic, p).HighWatermark
	}
	return &benchEnv{cfg: cfg, n: n, in: inTopic, acc: accTopic, ovf: ovfTopic, dlq: dlqTopic, ends: ends,
		behind: func() []string { return committedBehind(c, benchParts) }}
}

// benchRecords are n JSON events over 10k teams, Zipf-spread, about 200 bytes each, on
// topic, in chunks of 10,000.
func benchRecords(topic string, n int, each func([]*kgo.Record)) {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	const chunk = 10_000
	for lo := 0; lo < n; lo += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := lo; i < min(lo+chunk, n); i++ {
			v := fmt.Appendf(nil, `{"team_id":"team-%d","event":"$pageview","distinct_id":"user-%d","properties":{"$current_url":"https://example.com/a/b","$browser":"Firefox","seq":%d}}`, z.Uint64(), i%5000, i)
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: v})
		}
		each(recs)
	}
}

// done reports whether the group's commits reach the end of every input partition.
func (e *benchEnv) done() bool { return len(e.behind()) == 0 }

// ackedAll reports whether c has every input record acknowledged.
func (e *benchEnv) ackedAll(c *Consumer) bool {
	for p := range int32(benchParts) {
		hwm := e.ends[p]
		if hwm == 0 {
			continue
		}
		c.partsMu.Lock()
		st := c.parts[p]
		c.partsMu.Unlock()
		if st == nil {
			return false
		}
		off, _, _ := st.advance()
		if off.Offset != hwm {
			return false
		}
	}
	return true
}

func (e *benchEnv) runGate(b *testing.B, start time.Time) time.Duration {
	reg := prometheus.NewRegistry()
	lim, err := limit.New(limit.Config{}, nil, reg)
	if err != nil {
		b.Fatal(err)
	}
	kf, _ := route.ParseKeyFrom("json:team_id")
	r, err := route.New(route.Config{KeyFrom: kf, AcceptedTopic: e.acc, OverflowTopic: e.ovf, DeadLetterTopic: e.dlq}, lim, reg)
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(e.cfg, r, nil, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	// At-least-once: done when every input record is acknowledged on its output: the
	// gate commits asynchronously, every CommitInterval, off the records' path, and
	// waiting for the next interval would time the interval, not the gate. The commits
	// are checked after. Exactly-once: done when the commits reach the end, as they are
	// the records' path (each poll's transaction commits them with its output).
	done := e.ackedAll
	if e.cfg.Delivery == ExactlyOnce {
		done = func(*Consumer) bool { return e.done() }
	}
	for !done(c) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	if !e.done() {
		b.Fatalf("commits short of the end after a graceful stop: %v", e.behind())
	}
	return elapsed
}

// runPassthrough is what a careful user would write without the gate: poll, produce
// every record to one topic keeping key, value, headers and timestamp, wait for the
// acknowledgements, commit, allow rebalances — with the gate's client options.
func (e *benchEnv) runPassthrough(b *testing.B) {
	cl, err := kgo.NewClient(e.cfg.clientOpts()...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.CloseAllowingRebalance()
	ctx := context.Background()
	for !e.done() {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := cl.PollRecords(pctx, e.cfg.MaxPollRecords)
		cancel()
		var failed error
		fs.EachRecord(func(in *kgo.Record) {
			out := &kgo.Record{Topic: e.acc, Key: in.Key, Value: in.Value, Headers: in.Headers, Timestamp: in.Timestamp}
			cl.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					failed = err
				}
			})
		})
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if failed != nil {
			b.Fatal(failed)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
		cl.AllowRebalance()
	}
}
