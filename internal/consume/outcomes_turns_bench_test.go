package consume

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	turnRecords = flag.Int("outcomes-turn-records", 1_000_000, "BenchmarkOutcomesTurns: the records of each turn that are timed")
	turnWarm    = flag.Int("outcomes-turn-warm", 300_000, "BenchmarkOutcomesTurns: the records each turn's gate routes before its clock starts")
)

// BenchmarkOutcomesTurns is the gate at least once without outcomes and with them
// (GATE_OUTCOMES_TOPIC) in turns, on one kfake process and redis-server, the
// outcomes_vs_off_ratio of make bench. A round runs each gate once, each on an input of
// its own (-outcomes-turn-warm + -outcomes-turn-records records, as BenchmarkOutcomes
// makes them); the round after starts with the other; -benchtime Nx is the rounds. It
// reports the median of the rounds' on ÷ off in records/s (on/off) and in the bench
// process's CPU a record (cpu_on/off), each gate's median records/s, and logs every
// round.
//
// Why turns: a pair of long runs (BenchmarkOutcomes, one pair a process) moves with the
// shared VM's minute: the same gate ran 722,033 and 993,216 records/s a minute apart, and
// six pairs scattered from 0.80 to 1.12, wider than the few per cent in question. Turns
// of about a second put both gates in the same minute, and the median of a dozen rounds
// leaves out those a neighbour took.
//
// What a turn times: from the moment its gate has produced -outcomes-turn-warm records to
// BenchmarkOutcomes' end (timeToSameEnd: every record on the outputs, then the graceful
// stop, whose seal's rows the outcomes gate writes and awaits before its last commit).
// The warm-up is untimed because a gate's first records after its start are not its
// rate: the group's join is the same for both gates and, timed, pulls the ratio toward 1;
// and each key's first record in a seal makes the key's row, which a gate running at this
// rate does once a GATE_OUTCOMES_FLUSH_INTERVAL (10 s, some 15 million records) and a
// turn timed from its start did once in a million (0.86 against 0.88 warm here). The
// stop's seal stays timed: a seal of every key a turn routed is counted some ten times
// over, against outcomes.
func BenchmarkOutcomesTurns(b *testing.B) { benchOutcomesTurns(b, "gate-outcomes") }

// BenchmarkOutcomesTurnsSameGate is BenchmarkOutcomesTurns with the gate without outcomes
// in both turns: what the method gives two equal gates, its own bias (on/off 1 without
// one; outcomes_turns_same_gate_ratio).
func BenchmarkOutcomesTurnsSameGate(b *testing.B) { benchOutcomesTurns(b, "gate") }

// benchOutcomesTurns is BenchmarkOutcomesTurns with the gate without outcomes in the
// first turn of each pair and mode in the second.
func benchOutcomesTurns(b *testing.B, mode string) {
	k, r, _ := startE2EBroker(b, false)
	modes := []string{"gate", mode}
	var ratios, cpuRatios []float64
	rates := make([][]float64, len(modes))
	round := 0
	for b.Loop() {
		var t [2]turn
		for j := range modes {
			i := (round + j) % len(modes)
			t[i] = runTurn(b, k, r, modes[i])
			rates[i] = append(rates[i], t[i].rate)
		}
		ratios = append(ratios, t[1].rate/t[0].rate)
		cpuRatios = append(cpuRatios, t[1].cpu/t[0].cpu)
		b.Logf("round %d (turn %d first): %.0f and %.0f records/s, on/off %.4f, CPU a record on/off %.4f",
			round, round%len(modes), t[0].rate, t[1].rate, t[1].rate/t[0].rate, t[1].cpu/t[0].cpu)
		round++
	}
	b.ReportMetric(median(ratios), "on/off")
	b.ReportMetric(median(cpuRatios), "cpu_on/off")
	b.ReportMetric(median(rates[0]), "off_records/s")
	b.ReportMetric(median(rates[1]), "on_records/s")
	b.ReportMetric(float64(len(ratios)), "rounds")
	b.ReportMetric(0, "ns/op")
}

// turn is what runTurn measured: records/s, and the bench process's CPU seconds a record
// (user and system, every thread) over the same span.
type turn struct{ rate, cpu float64 }

// runTurn runs the gate of mode (runEndToEnd's "gate" or "gate-outcomes") over a new
// input and measures it from its warm mark (warmMark) to its end.
func runTurn(b *testing.B, k *kfakeProc, r *e2eRedis, mode string) turn {
	b.StopTimer()
	defer b.StartTimer()
	env := newBrokerBenchEnv(b, k, mode, *turnWarm+*turnRecords).with(r).timeToSameEnd(b, k)
	mark := &warmMark{after: int64(*turnWarm)}
	if *e2eProfile != "" {
		mark.profile = fmt.Sprintf("%s-%s-%d.pprof", *e2eProfile, mode, time.Now().UnixNano())
	}
	env.cfg.ClientOpts = append(env.cfg.ClientOpts, kgo.WithHooks(mark))
	env.redis.flush(b)
	runtime.GC()
	start := time.Now()
	elapsed, _ := env.runGate(b, start)
	cpuEnd := processCPU(b)
	at := mark.at.Load()
	if at == 0 {
		b.Fatalf("%s: the gate produced fewer than %d records", mode, mark.after)
	}
	if f := mark.file.Load(); f != nil {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed -= time.Unix(0, at).Sub(start)
	cpu := cpuEnd - time.Duration(mark.cpu.Load())
	env.drop(b)
	n := float64(*turnRecords)
	return turn{rate: n / elapsed.Seconds(), cpu: cpu.Seconds() / n}
}

// warmMark notes when the gate's client has buffered its after-th record to produce
// (kgo.HookProduceRecordBuffered; at the first batch fetched when after is 0), and the
// bench process's CPU time then, and starts a CPU profile there when profile is set. The
// hook runs on the client's goroutines: at is stored last, so that a reader that finds
// it set finds cpu and file set too.
type warmMark struct {
	after   int64
	profile string
	n       atomic.Int64
	once    atomic.Bool
	file    atomic.Pointer[os.File] // the profile's, once started
	at, cpu atomic.Int64            // Unix ns; ns
}

func (m *warmMark) OnProduceRecordBuffered(*kgo.Record) {
	if m.after > 0 && m.n.Add(1) == m.after {
		m.mark()
	}
}

func (m *warmMark) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	if m.after == 0 {
		m.mark()
	}
}

func (m *warmMark) mark() {
	if !m.once.CompareAndSwap(false, true) {
		return
	}
	at := time.Now().UnixNano()
	cpu, err := cpuUsed()
	if err != nil {
		panic(err) // a hook has no b to fail
	}
	m.cpu.Store(int64(cpu))
	if m.profile != "" {
		f, err := os.Create(m.profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			panic(fmt.Sprintf("profiling the turn: %v", err))
		}
		m.file.Store(f)
	}
	m.at.Store(at)
}

// median returns the median of v, which it sorts.
func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
