package consume

import (
	"context"
	"flag"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tick"
)

const benchParts = 4

// e2eProfile, when set, writes a CPU profile of each BenchmarkEndToEnd and
// BenchmarkRealKafka run's timed part (its setup left out) to <prefix>-<mode>.pprof.
var e2eProfile = flag.String("e2e-cpuprofile", "", "write a CPU profile of each end-to-end run's timed part to `prefix`-<mode>.pprof")

// outcomesFirst runs each of BenchmarkOutcomes' gates with outcomes before the same gate
// without; unset, after it.
var outcomesFirst = flag.Bool("outcomes-first", false, "BenchmarkOutcomes: run each gate with outcomes before the same gate without")

// BenchmarkEndToEnd measures records per second through franz-go's kfake broker, from a
// pre-filled input topic to every offset committed, for the whole gate (at-least-once,
// the default, and exactly-once) and for a bare franz-go consume→produce→commit
// pass-through with the same client settings (recycling its input into franz-go's pools
// as the gate does, the gate's CPU goal's baseline, and plain), and the bench process's
// CPU seconds per million records. Run it with a fixed count (-benchtime 1000000x, as
// make bench does): each op is one record. A run's time includes joining the group and
// starting up, so compare the four within one run.
//
// The gate runs as it does in production: its tick syncs the limiter with a real
// redis-server every second (e2eRedis; skipped without redis-server), so the gate's
// figures include the tick's sweeps and pipelines, and the server's own CPU per million
// records is reported apart (redis-cpu-s/Mrecords).
//
// The broker runs in a process of its own (kfakeProc), so the CPU figure is the client's,
// and the two are bound to CPUs of their own (pinE2E): the client to one, with GOMAXPROCS
// 1, as the chart runs the gate by default (its 500m CPU request gives GOMAXPROCS 1), the
// broker to another, as a real one runs on other machines. Left to share two cores, the
// client's CPU per record followed the broker's work and where the scheduler put the
// threads as much as the client's own: the same gate 1.10 to 1.81 CPU-s per million in
// twelve runs (bound: 1.03 to 1.35 in sixteen, both sides' CPU per record about a fifth
// lower at the same throughput). BenchmarkEndToEndSharedCores still measures it that way.
func BenchmarkEndToEnd(b *testing.B) {
	k, r, pin := startE2EBroker(b, true)
	// The gate right after the pass-through its CPU goal is against, the pooled one.
	runEndToEnd(b, []string{"passthrough-pooled", "gate", "passthrough", "exactly-once"}, pin,
		func(b *testing.B, mode string) *benchEnv { return newBrokerBenchEnv(b, k, mode, b.N).with(r) })
}

// BenchmarkEndToEndSameClock is BenchmarkRealKafka's four sides on its clock, on kfake
// (in a process of its own, sharing the cores with the client): the pass-through that
// produces without waiting per poll and commits behind its acknowledgements, the gate,
// the exactly-once pass-through with the gate's transaction policy, the exactly-once
// gate, then the two gates writing outcome rows (GATE_OUTCOMES_TOPIC:
// outcomes_short_run_vs_off_ratio and outcomes_short_run_eos_vs_off_ratio), each timed
// from its start to the same end read off the broker (timeToSameEnd).
// Its ratios are the in-process broker's beside Apache Kafka's (kfake_* in
// bench/results.json): BenchmarkEndToEnd's pass-through waits for each poll's
// acknowledgements, a baseline for CPU, not for throughput.
func BenchmarkEndToEndSameClock(b *testing.B) {
	k, r, _ := startE2EBroker(b, false)
	// Each gate writing outcomes right after the same gate without: their ratios
	// compare neighbours on a machine that drifts.
	runEndToEnd(b, []string{"passthrough", "gate", "gate-outcomes", "passthrough-eos", "exactly-once", "exactly-once-outcomes"}, e2ePin{}, func(b *testing.B, mode string) *benchEnv {
		return newBrokerBenchEnv(b, k, mode, b.N).with(r).timeToSameEnd(b, k)
	})
}

// BenchmarkOutcomes is the gate with outcomes off and on (GATE_OUTCOMES_TOPIC), in each
// delivery mode, each "on" run right after its "off", on BenchmarkEndToEndSameClock's
// broker and clock, over runs of some seconds (make bench: 4,000,000 records a run):
// outcomes_pairs_vs_off_ratio and outcomes_eos_vs_off_ratio (outcomes_vs_off_ratio is
// BenchmarkOutcomesTurns': a pair a process is too few). The gates seal as the gate does by default, every
// GATE_OUTCOMES_FLUSH_INTERVAL (10 s): a run of 4,000,000 records (3 s or so) ends
// before its first periodic seal, so its rows are all written at its graceful stop and
// awaited (its clock stops at the commits, which wait for them), a seal of every team
// the run saw for 4,000,000 records where a gate at that rate seals every 10 s, some 14
// million records: the rows' cost a record is counted three to four times over. The
// same clock's runs of 300,000 records give that shutdown's cost alone
// (outcomes_short_run_vs_off_ratio).
//
// Which of a pair runs first alternates between runs (-outcomes-first; make bench runs it
// six times, three each way): a pair's second run was slower for being second. In nine
// processes running gate, outcomes, outcomes, gate (4,000,000 records each) the first
// pairs' ratios (outcomes second) averaged 0.91 and the second pairs' (outcomes first)
// 0.99, every single run anywhere from 0.6 to 1.2 times its neighbour.
func BenchmarkOutcomes(b *testing.B) {
	modes := []string{"gate", "gate-outcomes", "exactly-once", "exactly-once-outcomes"}
	if *outcomesFirst {
		modes = []string{"gate-outcomes", "gate", "exactly-once-outcomes", "exactly-once"}
	}
	k, r, _ := startE2EBroker(b, false)
	runEndToEnd(b, modes, e2ePin{}, func(b *testing.B, mode string) *benchEnv {
		return newBrokerBenchEnv(b, k, mode, b.N).with(r).timeToSameEnd(b, k)
	})
}

// BenchmarkEndToEndSharedCores is BenchmarkEndToEnd's pass-through and gate with the
// client and the broker left to share every core, GOMAXPROCS the machine's: what a test
// on one small machine sees, the broker's work and the scheduler's placing of both
// processes' threads in the client's CPU time.
func BenchmarkEndToEndSharedCores(b *testing.B) {
	k, r, _ := startE2EBroker(b, false)
	runEndToEnd(b, []string{"passthrough", "gate"}, e2ePin{},
		func(b *testing.B, mode string) *benchEnv { return newBrokerBenchEnv(b, k, mode, b.N).with(r) })
}

// startE2EBroker starts the end-to-end benches' kfake process and the redis-server the
// gate's tick syncs with, binding this process to a CPU and the two others to another
// when pin is set (pinE2E), and warms up: the first run in a process pays for growing its
// heap (page faults, system CPU) and the broker's for its own, so an untimed pass-through
// of 200,000 records runs first, that the pass-through, timed first, does not pay for
// what the others reuse. pinned says where each process was bound, or why not (its zero
// value when pin is not set).
func startE2EBroker(b *testing.B, pin bool) (_ *kfakeProc, _ *e2eRedis, pinned e2ePin) {
	brokerCPU := -1
	if pin {
		brokerCPU, pinned = pinE2E(b)
	}
	k := startKfakeProc(b, brokerCPU)
	r, where := startE2ERedis(b, brokerCPU)
	if pinned.bound {
		pinned.line += ", " + where
	}
	if pinned.bound {
		// As in each run (runEndToEnd): the benchmark runner sets it for each benchmark.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	warm := newBrokerBenchEnv(b, k, "warm-up", 200_000)
	warm.runPassthrough(b, false)
	return k, r, pinned
}

// e2ePin is where an end-to-end benchmark's client and broker run: each bound to a CPU of
// its own (bound), or not (bound false): line, when not empty, says which and, when they
// could not be bound, why. Each run logs it (runEndToEnd), and bench/report reads it,
// saying so in RESULTS.md ("client bound to CPU", "client and broker not bound to CPUs of
// their own"): a run whose binding fell back is not measured as the goal's figure is.
type e2ePin struct {
	bound bool
	line  string
}

// pinE2E binds this process to the first CPU it may use until b's cleanup, and returns
// the CPU for the broker, the second, and a line saying so. With fewer than two CPUs (or
// not on Linux) it binds nothing and returns -1 and a line saying why: client and broker
// then share.
// GOMAXPROCS is the caller's to set, in each benchmark: the benchmark runner sets it
// (-test.cpu) for each.
func pinE2E(b *testing.B) (int, e2ePin) {
	cpus, err := usableCPUs()
	if err == nil && len(cpus) < 2 {
		err = fmt.Errorf("%d CPU usable", len(cpus))
	}
	if err != nil {
		return -1, e2ePin{line: fmt.Sprintf("client and broker not bound to CPUs of their own: %v", err)}
	}
	old, err := pinProcess(cpus[0])
	if err != nil {
		b.Fatalf("binding the bench process to CPU %d: %v", cpus[0], err)
	}
	b.Cleanup(func() {
		if err := unpinProcess(old); err != nil {
			b.Errorf("unbinding the bench process: %v", err)
		}
	})
	return cpus[1], e2ePin{bound: true, line: fmt.Sprintf("client bound to CPU %d (GOMAXPROCS 1), broker to CPU %d", cpus[0], cpus[1])}
}

// runEndToEnd runs modes as sub-benchmarks: the pass-through ("passthrough"), the same
// recycling its input into franz-go's pools as the gate does ("passthrough-pooled"), an
// exactly-once pass-through with the gate's transaction policy ("passthrough-eos",
// BenchmarkRealKafka's only), the gate ("gate") and the gate with exactly-once delivery
// ("exactly-once"), the two gates
// with their tick on the environment's redis-server (benchEnv.redis), each on an
// environment of b.N records that newEnv makes for the mode and drops after it (so that
// the broker holds only the run's records: a kfake process holding every run before
// grows its heap and its collector's work run after run, on the cores the client runs
// on), and reports records/s and the process's CPU seconds (user + system, every
// thread) per million records over the timed part, with the bytes allocated per record
// and the garbage collector's cycles per million records; a gate run adds the
// redis-server's CPU seconds per million records over the same span (its own process:
// not in the bench process's), its tick's ticks, Redis commands per million records and
// failed ticks (failed-ticks, which bench/report sums as the tick benchmarks'). Each run
// logs pin's line (where the client, the broker and redis-server were bound, or why not:
// pinE2E); bound, each run has GOMAXPROCS 1.
func runEndToEnd(b *testing.B, modes []string, pin e2ePin, newEnv func(b *testing.B, mode string) *benchEnv) {
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			if pin.line != "" && b.N > 1 { // not the runner's first call, of one record
				b.Log(pin.line)
			}
			if pin.bound {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			}
			env := newEnv(b, mode)
			batches := new(produceBatches)
			env.cfg.ClientOpts = append(env.cfg.ClientOpts, kgo.WithHooks(batches))
			// A gate at least once: the plain modes, and any whose env brings a rules file.
			aloGate := mode == "gate" || mode == "gate-outcomes" || env.rules != nil
			gate := aloGate || mode == "exactly-once" || mode == "exactly-once-outcomes"
			if gate {
				env.redis.flush(b)
			}
			runtime.GC()
			stopProfile := startE2EProfile(b, mode)
			b.ResetTimer()
			var redis0 float64
			if gate { // before the bench process's CPU is read: the INFO call is not the gate's
				redis0 = env.redis.cpu(b)
			}
			cpu0 := processCPU(b)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			start := time.Now()
			var elapsed time.Duration
			var reg *prometheus.Registry
			switch {
			case aloGate:
				elapsed, reg = env.runGate(b, start)
			case mode == "exactly-once" || mode == "exactly-once-outcomes":
				env.cfg.Delivery, env.cfg.TransactionalID = ExactlyOnce, env.cfg.GroupID
				elapsed, reg = env.runGate(b, start)
			case mode == "passthrough-eos":
				elapsed = env.runOnClock(b, start, env.passthroughEOS)
			default:
				if env.sameEnd != nil {
					elapsed = env.runPassthroughBehind(b, start)
					break
				}
				env.runPassthrough(b, mode == "passthrough-pooled")
				elapsed = time.Since(start)
			}
			cpu := processCPU(b) - cpu0
			var redisCPU float64
			if gate {
				redisCPU = env.redis.cpu(b) - redis0
			}
			runtime.ReadMemStats(&ms1)
			b.StopTimer()
			// What the garbage collector's work follows: bytes allocated, and its cycles.
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N), "alloc-B/record")
			b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(b.N)*1e6, "gc/Mrecords")
			stopProfile()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(cpu.Seconds()/float64(b.N)*1e6, "cpu-s/Mrecords")
			b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "gomaxprocs")
			if gate {
				f := figuresOf(b, reg)
				b.ReportMetric(redisCPU/float64(b.N)*1e6, "redis-cpu-s/Mrecords")
				b.ReportMetric(f.ticks, "ticks")
				b.ReportMetric(f.commands/float64(b.N)*1e6, "redis-cmds/Mrecords")
				b.ReportMetric(f.errors, "failed-ticks")
				if env.out != "" { // what the outcome rows' cost follows: rows a record
					b.ReportMetric(f.outcomeRows/float64(b.N)*1e6, "outcome-rows/Mrecords")
				}
				if f.txns > 0 {
					b.ReportMetric(f.txns/float64(b.N)*1e6, "txns/Mrecords")
				}
			}
			if n := batches.n.Load(); n > 0 {
				b.ReportMetric(float64(batches.records.Load())/float64(n), "records/batch")
				b.ReportMetric(float64(batches.reqs.Load())/float64(b.N)*1e6, "requests/Mrecords")
			}
			env.drop(b)
		})
	}
}

// produceBatches counts the batches the client wrote and the records in them
// (kgo.HookProduceBatchWritten), and its produce requests (kgo.HookBrokerWrite):
// franz-go's cost a record follows how many records a batch and a request carry.
type produceBatches struct {
	n, records, reqs atomic.Int64
}

func (p *produceBatches) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	p.n.Add(1)
	p.records.Add(int64(m.NumRecords))
}

func (p *produceBatches) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == 0 { // Produce
		p.reqs.Add(1)
	}
}

// processCPU returns the user and system CPU time this process has used, all threads.
func processCPU(b *testing.B) time.Duration {
	d, err := cpuUsed()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// cpuUsed is processCPU for a caller without a b (a client hook's).
func cpuUsed() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// startE2EProfile starts a CPU profile of mode's timed part when -e2e-cpuprofile is
// set, and returns what stops it.
func startE2EProfile(b *testing.B, mode string) func() {
	if *e2eProfile == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s-%s.pprof", *e2eProfile, mode))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

type benchEnv struct {
	cfg Config
	n   int
	// in, acc, ovf and dlq are the run's topics; out its outcomes topic, if any.
	in, acc, ovf, dlq, out string
	// ends are the input partitions' end offsets once filled (they do not move).
	ends map[int32]int64
	// behind lists the input partitions whose committed offset is short of its end.
	behind func() []string
	// drop deletes the run's topics and group from the broker.
	drop func(testing.TB)
	// redis is the server the gate's tick syncs with (with); a gate run needs one.
	redis *e2eRedis
	// rules, when set, makes the gate's router and the limits its tick syncs (a rules
	// file's); unset, the gate has no rules file and one limit.
	rules func(b *testing.B, e *benchEnv, reg prometheus.Registerer) (*route.Router, []tick.Limit)
	// sameEnd, when set (BenchmarkRealKafka: timeToSameEnd), is every mode's clock: it
	// waits for the run's end, read off the broker the same way whichever side runs,
	// calls stop to ask the side to stop, and returns the time since start; the
	// pass-through is then runPassthroughBehind. Unset, each side has its own end
	// (runGate's, runPassthrough's).
	sameEnd func(b *testing.B, start time.Time, stop func()) time.Duration
	// commitDone, when set (a test's), is told each of passthroughBehind's commits
	// ending, before the pass-through looks at its result.
	commitDone func(sync bool, err error)
}

// with gives e the redis-server its gate runs sync with, and returns e.
func (e *benchEnv) with(r *e2eRedis) *benchEnv {
	e.redis = r
	return e
}

// benchBroker is what the end-to-end benches need of a broker: kfakeProc and Apache
// Kafka (kafkatest.Cluster) both have it.
type benchBroker interface {
	Addrs() []string
	Client(t testing.TB, opts ...kgo.Opt) *kgo.Client
	Admin(t testing.TB) *kadm.Client
	CreateTopic(t testing.TB, topic string, partitions int32, configs ...string)
}

// newBrokerBenchEnv creates a run's topics on c (input benchParts partitions, outputs
// 3), fills the input with n JSON events over 10k teams, Zipf-spread, about 200 bytes
// each, and returns the run's settings.
func newBrokerBenchEnv(b *testing.B, c benchBroker, name string, n int) *benchEnv {
	b.Helper()
	return newBrokerBenchEnvOf(b, c, name, n, benchRecords)
}

// newBrokerBenchEnvOf is newBrokerBenchEnv with the input's records from gen (as
// benchRecords makes them: n records on topic, given in chunks to each).
func newBrokerBenchEnvOf(b *testing.B, c benchBroker, name string, n int, gen func(topic string, n int, each func([]*kgo.Record))) *benchEnv {
	b.Helper()
	run := fmt.Sprintf("bench-%s-%d-%d", name, n, time.Now().UnixNano())
	e := &benchEnv{n: n, in: run + ".in", acc: run + ".acc", ovf: run + ".ovf", dlq: run + ".dlq"}
	c.CreateTopic(b, e.in, benchParts)
	outs := []string{e.acc, e.ovf, e.dlq}
	if strings.HasSuffix(name, "-outcomes") { // a gate writing outcome rows
		e.out = run + ".outcomes"
		outs = append(outs, e.out)
	}
	for _, t := range outs {
		c.CreateTopic(b, t, 3)
	}
	prod := c.Client(b, kgo.ProducerLinger(5*time.Millisecond))
	gen(e.in, n, func(recs []*kgo.Record) {
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatalf("filling the input: %v", err)
		}
	})
	adm := c.Admin(b)
	ends, err := adm.ListEndOffsets(context.Background(), e.in)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		b.Fatal(err)
	}
	e.ends = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { e.ends[o.Partition] = o.Offset })
	cfg, err := Config{
		Brokers: c.Addrs(), InputTopic: e.in, GroupID: run, OutcomesTopic: e.out, Gate: "bench",
		OutcomesFlushInterval: DefaultOutcomesFlushInterval, // as the gate has it (GATE_OUTCOMES_FLUSH_INTERVAL)
		ClientOpts:            []kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)},
	}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	e.cfg = cfg
	e.behind = func() []string {
		os, err := adm.FetchOffsets(context.Background(), run)
		if err != nil {
			return []string{err.Error()}
		}
		var behind []string
		for p, end := range e.ends {
			o, ok := os.Lookup(e.in, p)
			if end > 0 && (!ok || o.At != end) {
				behind = append(behind, fmt.Sprintf("%d:%d/%d", p, o.At, end))
			}
		}
		return behind
	}
	e.drop = func(t testing.TB) {
		t.Helper()
		ctx := context.Background()
		resp, err := adm.DeleteTopics(ctx, append([]string{e.in}, outs...)...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("deleting the run's topics: %v", err)
		}
		// The group is a few bytes: one the broker will not delete yet (a member not
		// gone) is left.
		if _, err := adm.DeleteGroup(ctx, run); err != nil { // the response's error as well
			t.Logf("the run's group %s not deleted: %v", run, err)
		}
	}
	return e
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

// runGate runs the gate, its tick on e.redis, until every input record is done (below;
// e.sameEnd's end when set), stops it as the gate stops (the consumer, then the tick,
// which makes its final flush), and returns the time to done and the run's metrics.
func (e *benchEnv) runGate(b *testing.B, start time.Time) (time.Duration, *prometheus.Registry) {
	if e.redis == nil {
		b.Fatal("a gate run without a redis-server for its tick (benchEnv.with)")
	}
	reg := prometheus.NewRegistry()
	var r *route.Router
	var stopTick func()
	if e.rules != nil {
		var lims []tick.Limit
		r, lims = e.rules(b, e, reg)
		stopTick = e.redis.startTickOf(b, lims, reg)
	} else {
		// One hash seed for the limiter and the outcome aggregates, as a gate has it.
		seed := maphash.MakeSeed()
		e.cfg.HashSeed = seed
		lim, err := limit.New(limit.Config{HashSeed: seed}, nil, reg)
		if err != nil {
			b.Fatal(err)
		}
		stopTick = e.redis.startTick(b, lim, reg)
		kf, _ := route.ParseKeyFrom("json:team_id")
		if r, err = route.New(route.Config{KeyFrom: kf, AcceptedTopic: e.acc, OverflowTopic: e.ovf, DeadLetterTopic: e.dlq}, lim, reg); err != nil {
			b.Fatal(err)
		}
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
	// With sameEnd, its end instead.
	var elapsed time.Duration
	if e.sameEnd != nil {
		elapsed = e.sameEnd(b, start, cancel)
	} else {
		done := e.ackedAll
		if e.cfg.Delivery == ExactlyOnce {
			done = func(*Consumer) bool { return e.done() }
		}
		for !done(c) {
			time.Sleep(time.Millisecond)
		}
		elapsed = time.Since(start)
	}
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	stopTick()
	if !e.done() {
		b.Fatalf("commits short of the end after a graceful stop: %v", e.behind())
	}
	return elapsed, reg
}

// runPassthrough is what a careful user would write without the gate: poll, produce
// every record to one topic keeping key, value, headers and timestamp, wait for the
// acknowledgements, commit, allow rebalances — with the gate's client options. pooled
// lends the client the gate's pools (fetchPools) and recycles each poll's records once
// produced, as the gate does: the pass-through a user would write after reading
// franz-go's kgo.WithPools.
func (e *benchEnv) runPassthrough(b *testing.B, pooled bool) {
	opts := append(e.cfg.clientOpts(), kgo.ConsumeTopics(e.cfg.InputTopic))
	if pooled {
		opts = append(opts, kgo.WithPools(new(fetchPools)))
	}
	cl, err := kgo.NewClient(opts...)
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
		if pooled {
			fs.EachRecord((*kgo.Record).Recycle)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
		cl.AllowRebalance()
	}
}
