package consume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/kafkatest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// BenchmarkRealKafka is BenchmarkEndToEnd on Apache Kafka itself (internal/kafkatest,
// one node on loopback, the same for the three runs): records per second from a
// pre-filled input topic, for a bare franz-go pass-through, the gate, and the gate with
// exactly-once delivery, each timed to the same end (timeToSameEnd): from the side's
// start until the broker holds every input record on the outputs and the group's
// commits at the end of every input partition. The pass-through is written as the gate
// works (passthroughBehind): it produces without waiting and commits behind the
// acknowledgements. Each run has topics and a group of its own, and its outputs are read
// back, untimed, for every input record; an untimed pass-through warms the broker's JVM
// first. Run it with a fixed count (make bench: -benchtime 300000x). The broker shares
// the machine's two cores with the client, and so does the redis-server the gate's tick
// syncs with (e2eRedis).
func BenchmarkRealKafka(b *testing.B) {
	c := kafkatest.Start(b, kafkatest.Options{Heap: "1g", Throughput: true})
	r, _ := startE2ERedis(b, -1)
	// A JVM is slow until its code is compiled: a pass-through of 200,000 records, not
	// timed, first, so that the first timed run does not pay for it.
	warm := newBrokerBenchEnv(b, c, "warm-up", 200_000).timeToSameEnd(b, c)
	warm.runPassthroughBehind(b, time.Now())
	warm.drop(b)
	runEndToEnd(b, []string{"passthrough", "gate", "passthrough-eos", "exactly-once"}, e2ePin{}, func(b *testing.B, mode string) *benchEnv {
		return newBrokerBenchEnv(b, c, mode, b.N).with(r).timeToSameEnd(b, c)
	})
}

// BenchmarkRealKafkaReplicated is BenchmarkRealKafka's exactly-once figures on three
// Apache Kafka brokers, every topic (and the transaction and offsets topics) replicated
// three times, as a production cluster runs exactly-once: each transaction's end and
// each acks=all write then wait for the followers. Its sides: the at-least-once
// pass-through, the at-least-once gate (the ratio's base), the exactly-once pass-through
// and the exactly-once gate. The two pass-throughs' ratio is what exactly-once costs a
// franz-go program that does nothing else on the same cluster: the ceiling the gate's own
// ratio is measured against (real_kafka_replicated_passthrough_eos_vs_alo_ratio).
func BenchmarkRealKafkaReplicated(b *testing.B) {
	c := kafkatest.Start(b, kafkatest.Options{Nodes: 3, Heap: "768m", Throughput: true})
	r, _ := startE2ERedis(b, -1)
	warm := newBrokerBenchEnv(b, c, "warm-up", 200_000).timeToSameEnd(b, c)
	warm.runPassthroughBehind(b, time.Now())
	warm.drop(b)
	runEndToEnd(b, []string{"passthrough", "gate", "passthrough-eos", "exactly-once"}, e2ePin{}, func(b *testing.B, mode string) *benchEnv {
		return newBrokerBenchEnv(b, c, mode, b.N).with(r).timeToSameEnd(b, c)
	})
}

// sameEndEvery is how often BenchmarkRealKafka's clock looks at the broker for a run's
// end: a run's time is up to this much (and a look's round trips) late, whichever side.
const sameEndEvery = 2 * time.Millisecond

// timeToSameEnd gives e BenchmarkRealKafka's clock (benchEnv.sameEnd), the same for
// every side, read off the broker with a client of its own, connected before any clock
// starts:
//
//   - The clock stops at the first look (every sameEndEvery) that finds every input
//     record on the outputs, their end offsets summed, and then the group's commits
//     (OffsetFetch, as benchEnv.done reads them) at the end of every input partition.
//   - An at-least-once side (the pass-through, the gate) is asked to stop, its ctx
//     cancelled, at the look that finds every record on the outputs: its graceful stop
//     waits for what is in flight and commits what is acknowledged, as the gate stops.
//     It commits behind its acknowledgements every CommitInterval too, so without the
//     stop its clock would end at its next interval.
//   - Exactly-once is asked once the clock has stopped: its commits are its
//     transactions', with their output, so they cover the input without a stop; and its
//     outputs' end offsets also count its transactions' markers, so they reach the
//     input's count a few records before the last, and a stop there would leave those.
//
// The looks cost the bench process a request or two each, whichever side runs. Before
// its topics are dropped, e's outputs are read back (readBack): the clock counted
// offsets; every input record must be there.
func (e *benchEnv) timeToSameEnd(b *testing.B, c benchBroker) *benchEnv {
	cl := c.Client(b)
	// Connected, and the new topics known to their leader (which, just created, may
	// answer UNKNOWN_TOPIC_OR_PARTITION for a moment).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		_, err := e.outputEnds(cl)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	e.sameEnd = func(b *testing.B, start time.Time, stop func()) time.Duration {
		deadline := time.Now().Add(10 * time.Minute)
		var (
			out     bool
			n       int64
			lastErr error
		)
		for {
			if !out {
				var err error
				if n, err = e.outputEnds(cl); err != nil {
					lastErr = err // looked at again
				} else if out = n >= int64(e.n); out && e.cfg.Delivery != ExactlyOnce {
					stop()
				}
			}
			if out && e.done() {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("no end in 10 minutes: %d of %d records on the outputs (last error %v), commits behind at %v", n, e.n, lastErr, e.behind())
			}
			time.Sleep(sameEndEvery)
		}
		elapsed := time.Since(start)
		stop()
		return elapsed
	}
	drop := e.drop
	e.drop = func(t testing.TB) {
		t.Helper()
		e.readBack(t)
		drop(t)
	}
	return e
}

// outputEnds returns the run's outputs' end offsets summed (their high watermarks: one
// ListOffsets request, to the partitions' leader): the records on them, with
// exactly-once also its transactions' markers.
func (e *benchEnv) outputEnds(cl *kgo.Client) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	for _, topic := range []string{e.acc, e.ovf, e.dlq} {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for p := range int32(3) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = -1 // the end
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("listing %s[%d]'s end: %w", t.Topic, p.Partition, err)
			}
			n += p.Offset
		}
	}
	return n, nil
}

// readBack reads the run's outputs from their start, read_committed, and fails t
// unless every input record (its value's seq) is on them; records there twice are
// logged.
func (e *benchEnv) readBack(t testing.TB) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cfg.Brokers...), kgo.ConsumeTopics(e.acc, e.ovf, e.dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := make([]bool, e.n)
	var got, twice int
	for got < e.n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the outputs back: %d of the %d input records on them after 2 minutes", got, e.n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("reading %s[%d] back: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			seq, ok := recordSeq(r.Value)
			if !ok || seq >= e.n {
				t.Fatalf("%s[%d]@%d is no input record: %.80q", r.Topic, r.Partition, r.Offset, r.Value)
			}
			if seen[seq] {
				twice++
				return
			}
			seen[seq] = true
			got++
		})
	}
	if twice > 0 {
		t.Logf("%d records on the outputs twice", twice)
	}
}

// recordSeq returns the seq of a benchRecords value.
func recordSeq(v []byte) (int, bool) {
	i := bytes.LastIndex(v, []byte(`"seq":`))
	if i < 0 {
		return 0, false
	}
	n, digits := 0, 0
	for _, c := range v[i+len(`"seq":`):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	return n, digits > 0
}

// runPassthroughBehind runs passthroughBehind on e from start until e.sameEnd's end,
// and returns the time to it.
func (e *benchEnv) runPassthroughBehind(b *testing.B, start time.Time) time.Duration {
	return e.runOnClock(b, start, e.passthroughBehind)
}

// runOnClock runs run on BenchmarkRealKafka's clock (e.sameEnd) from start, cancels its
// ctx when the clock stops (an at-least-once side then stops gracefully; an exactly-once
// one's commits are its transactions', so its clock has already stopped), and fails b
// unless run returned nil with the group's commits at the input's end.
func (e *benchEnv) runOnClock(b *testing.B, start time.Time, run func(ctx context.Context) error) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx) }()
	elapsed := e.sameEnd(b, start, cancel)
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	if !e.done() {
		b.Fatalf("commits short of the end after a graceful stop: %v", e.behind())
	}
	return elapsed
}

// passthroughBehind is the bare pass-through BenchmarkRealKafka times: a franz-go
// program written the way the gate's at-least-once path works, with the gate's client
// options. It polls, produces every record to one topic keeping key, value, headers and
// timestamp without waiting (a promise each), and lets a rebalance run (AllowRebalance)
// before it polls again. A poll's records of a partition are a batch, acknowledged once
// its last promise has run; every CommitInterval the offsets up to which each
// partition's batches are acknowledged are committed, asynchronously, off the loop.
// No request of its own in the loop: no commit, no admin request, no wait for a poll's
// acknowledgements. When ctx ends it waits for what is in flight (Flush), commits what
// is acknowledged synchronously and leaves the group; a revoke flushes and commits the
// same way first.
func (e *benchEnv) passthroughBehind(ctx context.Context) error {
	type batch struct {
		end  kgo.EpochOffset // after its last record
		left atomic.Int64    // records not yet acknowledged
	}
	var (
		mu        sync.Mutex // batches, acked, sent
		batches   = map[int32][]*batch{}
		acked     = map[int32]kgo.EpochOffset{} // each partition is acknowledged up to
		sent      = map[int32]int64{}           // and committed (sent to) up to
		commitMu  sync.Mutex                    // commits go out in the order they are made
		produceEr atomic.Pointer[error]
		commitEr  atomic.Pointer[error]
	)
	commit := func(ctx context.Context, cl *kgo.Client, sync bool) {
		commitMu.Lock()
		defer commitMu.Unlock()
		offs := map[int32]kgo.EpochOffset{}
		mu.Lock()
		for p, q := range batches {
			i := 0
			for ; i < len(q) && q[i].left.Load() == 0; i++ {
				acked[p] = q[i].end
			}
			batches[p] = q[i:]
		}
		for p, a := range acked {
			// A sync commit (a revoke's, the last) sends every offset acknowledged, sent
			// before or not: an interval commit the stop gave up may not have reached the
			// broker.
			if a.Offset > sent[p] || sync {
				offs[p] = a
				sent[p] = a.Offset
			}
		}
		mu.Unlock()
		if len(offs) == 0 {
			return
		}
		done := func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if e.commitDone != nil {
				e.commitDone(sync, err)
			}
			if err == nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
							err = fmt.Errorf("committing %s[%d]: %w", t.Topic, p.Partition, perr)
						}
					}
				}
			}
			if err != nil && !sync && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				// The interval commits' end (the stop) gave it up, as the gate's commit
				// loop does its own: nothing failed, and the last commit sends it again.
				return
			}
			if err != nil {
				commitEr.CompareAndSwap(nil, &err)
			}
		}
		req := map[string]map[int32]kgo.EpochOffset{e.in: offs}
		if sync {
			cl.CommitOffsetsSync(ctx, req, done)
		} else {
			cl.CommitOffsets(ctx, req, done)
		}
	}
	bg := context.WithoutCancel(ctx)
	opts := append(e.cfg.clientOpts(), kgo.ConsumeTopics(e.cfg.InputTopic), kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
		if err := cl.Flush(ctx); err != nil {
			commitEr.CompareAndSwap(nil, &err)
		}
		commit(ctx, cl, true)
		mu.Lock()
		for _, p := range revoked[e.in] {
			delete(batches, p)
			delete(acked, p)
			delete(sent, p)
		}
		mu.Unlock()
	}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	commitCtx, stopCommits := context.WithCancel(bg)
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		t := time.NewTicker(e.cfg.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-commitCtx.Done():
				return
			case <-t.C:
				commit(commitCtx, cl, false)
			}
		}
	}()
	var loopErr error
	for ctx.Err() == nil && loopErr == nil {
		fs := cl.PollRecords(ctx, e.cfg.MaxPollRecords)
		if fs.IsClientClosed() {
			loopErr = errors.New("kafka client closed while consuming")
			break
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && loopErr == nil {
				loopErr = fmt.Errorf("fetching %s[%d]: %w", topic, p, err)
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			last := p.Records[len(p.Records)-1]
			bt := &batch{end: kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}}
			bt.left.Store(int64(len(p.Records)))
			mu.Lock()
			batches[p.Partition] = append(batches[p.Partition], bt)
			mu.Unlock()
			for _, in := range p.Records {
				out := &kgo.Record{Topic: e.acc, Key: in.Key, Value: in.Value, Headers: in.Headers, Timestamp: in.Timestamp}
				cl.Produce(bg, out, func(_ *kgo.Record, err error) {
					if err != nil {
						produceEr.CompareAndSwap(nil, &err)
					}
					bt.left.Add(-1)
				})
			}
		})
		cl.AllowRebalance()
		if perr := produceEr.Load(); perr != nil && loopErr == nil {
			loopErr = *perr
		}
	}
	stopCommits()
	<-committed
	if err := cl.Flush(bg); err != nil && loopErr == nil {
		loopErr = err
	}
	if perr := produceEr.Load(); perr != nil && loopErr == nil {
		loopErr = *perr
	}
	commit(bg, cl, true)
	cl.CloseAllowingRebalance()
	if cerr := commitEr.Load(); cerr != nil && loopErr == nil {
		loopErr = *cerr
	}
	return loopErr
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

// passthroughEOS is the bare exactly-once pass-through BenchmarkRealKafka times beside
// the exactly-once gate: a franz-go GroupTransactSession with the gate's client options
// and the gate's transaction policy (Config.TransactionInterval, TransactionMaxRecords):
// a transaction opens with a poll's records and takes further polls until the interval
// has passed or a poll gets nothing for a tenth of it, producing every record to one topic keeping key, value, headers and
// timestamp without waiting (a promise each), then ends (End flushes, commits the
// offsets in the transaction and ends it). A failed produce or End is the run's error.
func (e *benchEnv) passthroughEOS(ctx context.Context) error {
	cfg := e.cfg
	cfg.Delivery, cfg.TransactionalID = ExactlyOnce, cfg.GroupID+"-passthrough"
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	sess, err := kgo.NewGroupTransactSession(append(cfg.clientOpts(), kgo.ConsumeTopics(cfg.InputTopic))...)
	if err != nil {
		return err
	}
	defer sess.Close()
	var produceEr atomic.Pointer[error]
	bg := context.WithoutCancel(ctx)
	produce := func(fs kgo.Fetches) int {
		n := 0
		fs.EachRecord(func(in *kgo.Record) {
			out := &kgo.Record{Topic: e.acc, Key: in.Key, Value: in.Value, Headers: in.Headers, Timestamp: in.Timestamp}
			sess.Produce(bg, out, func(_ *kgo.Record, err error) {
				if err != nil {
					produceEr.CompareAndSwap(nil, &err)
				}
			})
			n++
		})
		return n
	}
	for ctx.Err() == nil {
		fs := sess.PollRecords(ctx, cfg.MaxPollRecords)
		if fs.IsClientClosed() {
			return errors.New("kafka client closed while consuming")
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return err
		}
		start := time.Now()
		n := produce(fs)
		for deadline := start.Add(cfg.TransactionInterval); n < cfg.TransactionMaxRecords && time.Now().Before(deadline) && ctx.Err() == nil; {
			until := quietUntil(time.Now(), deadline, cfg.TransactionInterval)
			pctx, cancel := context.WithDeadline(ctx, until)
			got := produce(sess.PollRecords(pctx, cfg.MaxPollRecords))
			cancel()
			if n += got; got == 0 && !time.Now().Before(until) {
				break // the input went quiet: the gate's policy ends the transaction now
			}
		}
		committed, err := sess.End(bg, kgo.TryCommit)
		if err != nil {
			return fmt.Errorf("ending a transaction: %w", err)
		}
		if perr := produceEr.Load(); perr != nil {
			return *perr
		}
		if !committed {
			return errors.New("a transaction aborted")
		}
	}
	return nil
}
