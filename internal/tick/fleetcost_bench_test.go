package tick

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// BenchmarkFleetRedis runs N gates, each its own limiter, ticker and Redis connection,
// against one real redis-server, and reports what the fleet costs that server. Each gate
// routes 100k records a second of the workload of BenchmarkReadReduction (Zipf 1.1 over
// 100k teams, 60 s window), as every gate of a fleet partitioned by anything but the team
// sees every team; the fleet's load grows with N. One simulated minute (fake clock, one
// epoch) measured after one of warm-up (a cold team's window is written in the next one:
// the first minute would leave out most writes), ticks of all gates concurrent each second
// as in a real fleet.
//
// Reported: redis_cpu (the server's CPU seconds per simulated second: its utilisation),
// redis_cpu_per_gate, gates_per_core (how many such gates one Redis core carries at 50%
// CPU: 0.5 ÷ redis_cpu_per_gate) and tick_p50_ms / tick_p99_ms over every gate's ticks.
// "baseline" writes as the gate did before (INCRBY + EXPIRE per count, every team with
// counts on every tick), for the fleet sizes it finishes in reasonable time.
func BenchmarkFleetRedis(b *testing.B) {
	for _, v := range []struct {
		n        int
		baseline bool
	}{{1, false}, {4, false}, {16, false}, {64, false}, {1, true}} {
		name := fmt.Sprintf("ours/n%d", v.n)
		if v.baseline {
			name = fmt.Sprintf("baseline/n%d", v.n)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				r := fleetRedis(b, v.n, v.baseline)
				b.ReportMetric(r.cpu, "redis_cpu")
				b.ReportMetric(r.cpu/float64(v.n), "redis_cpu_per_gate")
				b.ReportMetric(0.5/(r.cpu/float64(v.n)), "gates_per_core")
				b.ReportMetric(r.p50.Seconds()*1000, "tick_p50_ms")
				b.ReportMetric(r.p99.Seconds()*1000, "tick_p99_ms")
				b.ReportMetric(r.cmds/float64(v.n), "cmds/tick")
			}
		})
	}
}

type fleetRedisRun struct {
	cpu      float64 // redis-server CPU seconds per simulated second
	p50, p99 time.Duration
	cmds     float64 // commands per tick, all gates
}

func fleetRedis(b *testing.B, n int, baseline bool) fleetRedisRun {
	const (
		teams         = 100_000
		recordsPerSec = 100_000
		warm, secs    = 60, 120
	)
	srv := redistest.Start(b)
	var fails tickFailures
	defer fails.report(b)
	clk := clock.NewFake(epochStart)
	names, stream := teamNames(teams), zipfStream(teams, recordsPerSec*(secs-warm))
	lc := limit.Config{Window: time.Minute, SyncInterval: 15 * time.Second, Threshold: 300_000}
	if baseline {
		lc.ColdWriteInterval = writeEveryTick
	}
	gates := benchFleet(b, srv, clk, n, lc, baseline)
	var (
		mu    sync.Mutex
		ticks []time.Duration
		cmds  int
	)
	var cpu0 float64
	for s := range secs {
		if s == warm {
			cpu0 = redisCPU(b, gates[0].c)
			ticks, cmds = ticks[:0], 0
		}
		offerSecond(gates, clk.Now(), names, stream, s, recordsPerSec)
		clk.Advance(time.Second)
		var wg sync.WaitGroup
		// As Run ticks: every gate writes, then every gate reads.
		took := make([]time.Duration, len(gates))
		for _, phase := range []func(*Ticker, context.Context) TickResult{(*Ticker).WritePhase, (*Ticker).ReadPhase} {
			for gi := range gates {
				wg.Go(func() {
					start := time.Now()
					r := phase(gates[gi].tk, context.Background())
					fails.check(b, fmt.Sprintf("gate %d: tick", gi), r)
					mu.Lock()
					took[gi] += time.Since(start)
					cmds += r.Commands
					mu.Unlock()
				})
			}
			wg.Wait()
		}
		ticks = append(ticks, took...)
	}
	cpu := redisCPU(b, gates[0].c) - cpu0
	slices.Sort(ticks)
	return fleetRedisRun{
		cpu:  cpu / (secs - warm),
		p50:  ticks[len(ticks)/2],
		p99:  ticks[len(ticks)*99/100],
		cmds: float64(cmds) / (secs - warm),
	}
}

// BenchmarkAdaptiveFleetCost is BenchmarkFleetRedis's fleet of 4 gates (each routing
// 100k Zipf(1.1) records a second over 100k teams, its own limiter and ticker, one real
// redis-server) run for 20 windows, the last 8 measured, static beside adaptive with every
// team learned (profiles seeded with a day of history at each team's mean rate): in a
// fleet every gate looks at the profile of each team it has cached, and a gate that did not
// fold looks again a window later. Reported: redis_cpu (CPU-s per simulated second),
// redis_cpu_s/Mevents (the fleet's events) and redis_tick_cpu_s/Mevents (the same,
// during the ticks only: see steady.second).
func BenchmarkAdaptiveFleetCost(b *testing.B) {
	for _, v := range []struct {
		name string
		a    *spike.Config
	}{{"static/n4", nil}, {"learned/n4", &spike.Config{}}} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				const measure = 8 // windows of 60 s: a run-to-run spread of 5 % was seen over 4
				cpu, tickCPU, events, set, lost := adaptiveFleet(b, 4, v.a, 12, measure)
				b.ReportMetric(cpu/float64(measure*60), "redis_cpu")
				b.ReportMetric(cpu/(float64(events)/1e6), "redis_cpu_s/Mevents")
				b.ReportMetric(tickCPU/(float64(events)/1e6), "redis_tick_cpu_s/Mevents")
				if set > 0 {
					// Profile writes sent per profile stored: about 2 is the design
					// (wantsFold), one per gate what it was.
					b.ReportMetric((set+lost)/set, "profile_writes/fold")
				}
			}
		})
	}
}

// adaptiveFleet runs n gates for warm + measure windows, and returns what the measured
// windows cost redis-server (CPU seconds; tickCPU those while the gates ticked), the
// events routed in them, and the fleet's profile writes that set a profile and that lost
// the compare-and-set.
func adaptiveFleet(b *testing.B, n int, a *spike.Config, warm, measure int) (cpu, tickCPU float64, events int64, set, lost float64) {
	const (
		teams         = 100_000
		recordsPerSec = 100_000
	)
	srv := redistest.Start(b)
	var fails tickFailures
	defer fails.report(b)
	clk := clock.NewFake(epochStart)
	names, stream := teamNames(teams), zipfStream(teams, recordsPerSec*60)
	gates := benchFleet(b, srv, clk, n, limit.Config{Window: time.Minute, SyncInterval: 15 * time.Second, Threshold: 300_000, Adaptive: a}, false)
	if a != nil {
		seedProfiles(b, gates[0].c, names, n*recordsPerSec*60, gates[0].l.Epoch(clk.Now())-1)
	}
	profileWrites := func() (set, lost float64) {
		for _, g := range gates {
			set += testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("set"))
			lost += testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("lost"))
		}
		return set, lost
	}
	var cpu0, set0, lost0 float64
	for s := range (warm + measure) * 60 {
		if s == warm*60 {
			cpu0 = redisCPU(b, gates[0].c)
			set0, lost0 = profileWrites()
		}
		offerSecond(gates, clk.Now(), names, stream, s, recordsPerSec)
		clk.Advance(time.Second)
		var before float64
		if s >= warm*60 {
			before = redisCPU(b, gates[0].c)
		}
		var wg sync.WaitGroup
		for gi := range gates {
			wg.Go(func() {
				fails.check(b, fmt.Sprintf("gate %d: tick", gi), gates[gi].tk.Tick(context.Background()))
			})
		}
		wg.Wait()
		if s >= warm*60 {
			tickCPU += redisCPU(b, gates[0].c) - before
			events += int64(n * recordsPerSec)
		}
	}
	set, lost = profileWrites()
	return redisCPU(b, gates[0].c) - cpu0, tickCPU, events, set - set0, lost - lost0
}

// fleetMember is one gate of a benchmark's fleet.
type fleetMember struct {
	l  *limit.Limiter
	tk *Ticker
	c  *redis.Client
}

// benchFleet is n gates on srv, each its own limiter (lc, on clk), tick, connection and
// writer name; baseline makes their ticks write as the gate did before writeScript. The
// connections close when b ends.
func benchFleet(b *testing.B, srv *redistest.Server, clk clock.Clock, n int, lc limit.Config, baseline bool) []fleetMember {
	b.Helper()
	gates := make([]fleetMember, n)
	for i := range gates {
		l, tk, c := benchGate(b, srv, lc, clk, 10*time.Second, fmt.Sprintf("g%d", i))
		if baseline {
			tk.writes = &baselineWrites{}
		}
		gates[i] = fleetMember{l, tk, c}
	}
	return gates
}

// zipfStream is n draws of Zipf(1.1) over teams, the same on every call.
func zipfStream(teams, n int) []int32 {
	stream := make([]int32, n)
	z := rand.NewZipf(rand.New(rand.NewPCG(7, 11)), 1.1, 1, uint64(teams-1))
	for i := range stream {
		stream[i] = int32(z.Uint64())
	}
	return stream
}

// offerSecond has every gate check perSec records of second s at now, in parallel, each
// reading the one stream from its own offset.
func offerSecond(gates []fleetMember, now time.Time, names []string, stream []int32, s, perSec int) {
	var wg sync.WaitGroup
	for gi := range gates {
		wg.Go(func() {
			off := (gi*7919 + s*perSec) % len(stream)
			for i := range perSec {
				gates[gi].l.CheckAt(now, names[stream[(off+i)%len(stream)]], 1)
			}
		})
	}
	wg.Wait()
}
