package tick

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// tickFailures counts the ticks a benchmark saw fail. A slow machine can miss a tick's
// deadline (the read timeouts): a benchmark then counts the tick, logs the first, and goes
// on, reporting the count as failed-ticks (bench/report sums them: a figure measured
// beside failed ticks is suspect), so that one slow tick does not stop make bench. A test
// fails at once.
type tickFailures struct {
	mu sync.Mutex
	n  int
}

// check notes r, the result of what, if it failed.
func (f *tickFailures) check(tb testing.TB, what string, r TickResult) {
	if r.Errors == 0 {
		return
	}
	if _, bench := tb.(*testing.B); !bench {
		tb.Fatalf("%s failed: %+v", what, r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		tb.Logf("%s failed (counted as failed-ticks; the benchmark goes on): %+v", what, r)
	}
	f.n++
}

// report reports the count as b's failed-ticks, and starts counting afresh for the next
// benchmark that shares f.
func (f *tickFailures) report(b *testing.B) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b.ReportMetric(float64(f.n), "failed-ticks")
	f.n = 0
}

func teamNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("team-%d", i)
	}
	return names
}

// BenchmarkTick measures one tick when 100k teams all counted records since the last one:
// 100k writes (in the write script's batches) plus the reads due, against real Redis on
// loopback: one standalone instance, and a 3-primary Redis Cluster (one pipeline that the
// cluster client splits per node; one MGET per lane). What it measures is how long such a
// tick takes, so the tick's deadline is 10 s, not the gate's 3/4 of a second, which a
// 3-node cluster on two cores missed.
func BenchmarkTick(b *testing.B) {
	slow := RedisOptions{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	b.Run("standalone", func(b *testing.B) {
		srv := redistest.Start(b)
		clients, err := Dial([]string{srv.URL()}, slow)
		if err != nil {
			b.Fatal(err)
		}
		defer clients[0].Close()
		benchTick(b, toUniversal(clients), Config{TickTimeout: 10 * time.Second})
	})
	b.Run("cluster3", func(b *testing.B) {
		cl := redistest.StartCluster(b, 3, 0)
		cc, err := DialCluster(cl.URLs(), slow)
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		benchTick(b, []redis.UniversalClient{cc}, Config{Mode: ModeCluster, TickTimeout: 10 * time.Second})
	})
}

func benchTick(b *testing.B, inst []redis.UniversalClient, cfg Config) {
	const teams = 100_000
	clk := clock.NewFake(epochStart)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, clk, nil)
	if err != nil {
		b.Fatal(err)
	}
	tk, err := New(l, inst, cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	names := teamNames(teams)
	var cmds, writes, reads int
	var fails tickFailures
	defer fails.report(b)
	for b.Loop() {
		b.StopTimer()
		now := clk.Advance(time.Second)
		for i, t := range names {
			l.CheckAt(now, t, int64(1+i%20))
		}
		b.StartTimer()
		r := tk.Tick(context.Background())
		fails.check(b, "tick", r)
		cmds += r.Commands
		writes += r.Writes
		reads += r.Reads
	}
	b.ReportMetric(float64(cmds)/float64(b.N), "cmds/tick")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/tick")
	b.ReportMetric(float64(reads)/float64(b.N), "reads/tick")
}

// BenchmarkReadReduction runs 100k teams of Zipf traffic through one gate for two windows
// (60 s window, 15 s sync interval, 1 s tick, fake clock, real Redis) and reports how many
// reads the pressure tiers make against reading every cached team every sync interval:
// read_reduction = 1 − tiered ÷ every-team (goal ≥ 0.95). "reference" is the reference
// design's cadence (no every-tick reads of hot teams, no pending-triggered reads), "ours"
// the defaults. It also reports what the tick costs Redis: commands per tick, and the
// redis-server's CPU time (INFO cpu, user + sys, before and after) per million events
// counted. "baseline" is "ours" with the writes the gate made before they were made safe
// to repeat and before cold teams' writes were spread out: INCRBY + EXPIRE per count,
// every team with counts on every tick (baselineWrites, ColdWriteInterval < 0), in the
// same run.
func BenchmarkReadReduction(b *testing.B) {
	off := false
	for _, v := range []struct {
		name     string
		cfg      limit.Config
		baseline bool
	}{
		{"ours", limit.Config{}, false},
		// Divert holds off (issue 24): what the holds' flags cost, in the same run.
		{"nohold", limit.Config{DivertHold: -1, DivertRelease: 1}, false},
		{"baseline", limit.Config{}, true},
		{"reference", limit.Config{HotEveryTick: &off, PendingReadShare: -1}, false},
		// Three rules (issue 37): the team, each user within it, and an event type; one tick.
		{"rules3", limit.Config{}, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				var rr readRun
				if v.name == "rules3" {
					rr = rulesBesideOne(b, v.cfg)
				} else {
					rr = readReduction(b, v.cfg, v.baseline)
				}
				b.ReportMetric(1-float64(rr.reads)/float64(rr.everyTeam), "read_reduction")
				b.ReportMetric(float64(rr.reads)/float64(rr.ticks), "reads/tick")
				b.ReportMetric(float64(rr.cmds)/float64(rr.ticks), "cmds/tick")
				b.ReportMetric(float64(rr.writes)/float64(rr.ticks), "writes/tick")
				b.ReportMetric(rr.cpu/(float64(rr.events)/1e6), "redis_cpu_s/Mevents")
			}
		})
	}
}

// rulesBesideOne runs BenchmarkReadReduction's "rules3" gate (three rules) and "ours"
// (one, the team) in lockstep, each with its own redis-server, a simulated second of each
// in turn (the first of them alternating), and reports the one rule's Redis CPU and
// commands beside the three's: whatever else the machine does then falls on both alike,
// where the two measured one after the other moved 1.69 to 1.92 apart between runs of
// make bench. It returns the three rules' run.
func rulesBesideOne(b *testing.B, cfg limit.Config) readRun {
	var fails tickFailures
	defer fails.report(b)
	o := steadyOpts{warm: 60, measure: 120, split: true}
	one := newSteady(b, cfg, o, &fails)
	o.rules = true
	three := newSteady(b, cfg, o, &fails)
	gs := []*steady{one, three}
	for s := range o.warm + o.measure {
		for k := range gs {
			gs[(s+k)%len(gs)].second(s)
		}
	}
	base, rr := one.result(), three.result()
	b.ReportMetric(base.cpu/(float64(base.events)/1e6), "one_rule_redis_cpu_s/Mevents")
	b.ReportMetric(float64(base.cmds)/float64(base.ticks), "one_rule_cmds/tick")
	return rr
}

type readRun struct {
	reads, everyTeam, cmds, ticks, writes int
	events                                int64
	cpu                                   float64 // redis-server CPU seconds, the measured seconds
	tickCPU                               float64 // the same, during the ticks (see steady.second)
	reasons                               map[limit.ReadReason]int
	folds                                 int
}

// redisCPU returns the server's CPU time so far, user + sys, in seconds.
func redisCPU(b testing.TB, c redis.Cmdable) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %q: %v", line, err)
				}
				total += f
			}
		}
	}
	return total
}

func readReduction(b *testing.B, cfg limit.Config, baseline bool) readRun {
	// Two windows measured after one of warm-up: a cold team's counts of a window are
	// written in the next one (ColdWriteInterval), so the first window writes less than
	// the steady state, and the last one measured writes its predecessor's. The baseline
	// ticks in one pipeline, as the gate did then.
	return steadyRun(b, cfg, steadyOpts{warm: 60, measure: 120, baseline: baseline, split: !baseline})
}

// runSplitTick runs one tick as Run does, a write phase then a read phase, and adds up what
// the two did.
func runSplitTick(tk *Ticker, ctx context.Context) TickResult {
	w := tk.WritePhase(ctx)
	r := tk.ReadPhase(ctx)
	w.Reads, w.FailedReads = r.Reads, r.FailedReads
	w.Commands += r.Commands
	w.Errors += r.Errors
	return w
}

// BenchmarkAdaptiveCost is BenchmarkReadReduction's workload (100k Zipf(1.1) teams, 100k
// events a second, 60 s window, real redis-server, fake clock) run for 4 windows past
// spike.MinFoldEvery (24 windows), then 8 measured: a fleet with no profile looks at every
// team at once, has nothing to fold yet, and looks again MinFoldEvery later; that look,
// the first fold of every team, is then behind. Three variants, each a gate with its own
// redis-server, run in lockstep in one process: "static"; "adaptive", a fleet that starts
// with no profile (a day of MinHistory: every threshold is still the static one), where
// what is measured is the profiles' upkeep alone (looks in the read MGETs, folds and
// their compare-and-sets); and "learned", a fleet whose profiles in Redis already hold a
// day of history at each team's mean rate (the steady state): the upkeep plus what learned
// thresholds change in the tick's own reads and writes. Reported for each, over the
// measured windows: <variant>_redis_tick_cpu_s/Mevents (the server's CPU during the
// ticks, see steady.second), <variant>_redis_cpu_s/Mevents (all of it, idle time
// included), cmds/tick and reads/tick.
func BenchmarkAdaptiveCost(b *testing.B) {
	variants := []struct {
		name   string
		a      *spike.Config
		seeded bool
	}{
		{"static", nil, false},
		{"adaptive", &spike.Config{}, false},
		{"learned", &spike.Config{}, true},
	}
	for b.Loop() {
		// Ticks in one pipeline (Tick), as when these figures were first measured.
		warm := int(spike.MinFoldEvery/time.Minute) + 4
		o := steadyOpts{warm: warm * 60, measure: 8 * 60}
		var fails tickFailures
		gs := make([]*steady, len(variants))
		for i, v := range variants {
			vo := o
			vo.seeded = v.seeded
			gs[i] = newSteady(b, limit.Config{Adaptive: v.a}, vo, &fails)
		}
		// In lockstep, a simulated second of each in turn (the first of them rotating):
		// whatever else the machine does falls on the three alike, where three
		// processes' figures taken side by side moved 0.80-1.14 apart.
		for s := range o.warm + o.measure {
			for k := range gs {
				gs[(s+k)%len(gs)].second(s)
			}
		}
		for i, v := range variants {
			rr := gs[i].result()
			mev := float64(rr.events) / 1e6
			b.ReportMetric(rr.tickCPU/mev, v.name+"_redis_tick_cpu_s/Mevents")
			b.ReportMetric(rr.cpu/mev, v.name+"_redis_cpu_s/Mevents")
			b.ReportMetric(float64(rr.cmds)/float64(rr.ticks), v.name+"_cmds/tick")
			b.ReportMetric(float64(rr.reads)/float64(rr.ticks), v.name+"_reads/tick")
		}
		fails.report(b)
	}
}

// steadyOpts is what steadyRun runs: seconds of warm-up and measured, and how it ticks.
type steadyOpts struct {
	warm, measure int
	baseline      bool // writes as before writeScript, every team on every tick
	split         bool // tick as Run does (a write phase, then a read phase); else Tick
	seeded        bool // every team's profile holds a day of history (seedProfiles)
	// rules runs three limiters in the one tick, as a gate with three rules: the team
	// (threshold 300,000), team:user (each event one of its team's 50 users; 30,000) and
	// the team's merge events (1 in 20 events; 3,000), each under its own key prefix.
	rules bool
}

// steadyRun runs BenchmarkReadReduction's workload (100k Zipf(1.1) teams, 100k events a
// second, 60 s window, 15 s sync interval, real redis-server, fake clock) for o.warm +
// o.measure seconds and measures the last o.measure.
func steadyRun(b *testing.B, cfg limit.Config, o steadyOpts) readRun {
	var fails tickFailures
	defer fails.report(b)
	g := newSteady(b, cfg, o, &fails)
	for s := range o.warm + o.measure {
		g.second(s)
	}
	return g.result()
}

// steady is one gate (a limiter, or three with o.rules, its tick and its own
// redis-server) running steadyRun's workload a simulated second at a time, so that
// several can run in lockstep in one process (BenchmarkAdaptiveCost).
type steady struct {
	b               *testing.B
	o               steadyOpts
	clk             *clock.Fake
	l, user, merges *limit.Limiter
	tk              *Ticker
	client          *redis.Client
	names, users    []string
	z               *rand.Zipf
	userRNG         *rand.Rand
	key             []byte
	reasons         bool // reads by reason, in the log
	fails           *tickFailures
	cpu0            float64
	rr              readRun
}

const (
	steadyTeams         = 100_000
	steadyRecordsPerSec = 100_000
)

func newSteady(b *testing.B, cfg limit.Config, o steadyOpts, fails *tickFailures) *steady {
	srv := redistest.Start(b)
	g := &steady{b: b, o: o, fails: fails, clk: clock.NewFake(epochStart)}
	cfg.Window, cfg.SyncInterval, cfg.Threshold = time.Minute, 15*time.Second, 300_000
	if o.baseline {
		cfg.ColdWriteInterval = writeEveryTick // as the gate wrote before: every team, every tick
	}
	g.l, g.tk, g.client = benchGate(b, srv, cfg, g.clk, 5*time.Second, "")
	if o.rules {
		mk := func(thr int64, sketch int) *limit.Limiter {
			c := cfg
			c.Threshold, c.SketchWidth = thr, sketch
			x, err := limit.New(c, g.clk, nil)
			if err != nil {
				b.Fatal(err)
			}
			return x
		}
		// As the gate builds them (config.RuleLimitConfigs): the user rule's key has two
		// parts and the merges rule a match, so both count their keys under the floor in
		// a sketch (track: above_floor, their default).
		g.user, g.merges = mk(30_000, limit.DefaultSketchWidth), mk(3_000, limit.DefaultSketchWidth)
		var err error
		g.tk, err = NewMulti([]Limit{{Lim: g.l, KeyPrefix: "gate:rule:team"}, {Lim: g.user, KeyPrefix: "gate:rule:team-user"}, {Lim: g.merges, KeyPrefix: "gate:rule:merges"}},
			[]redis.UniversalClient{g.client}, Config{TickTimeout: time.Minute}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		clockChecked(g.tk)
	}
	g.users = make([]string, 50)
	for i := range g.users {
		g.users[i] = ":user-" + strconv.Itoa(i)
	}
	g.userRNG = rand.New(rand.NewPCG(3, 5))
	if o.baseline {
		g.tk.writes = &baselineWrites{}
	}
	g.names = teamNames(steadyTeams)
	g.z = rand.NewZipf(rand.New(rand.NewPCG(7, 11)), 1.1, 1, steadyTeams-1)
	if o.seeded {
		seedProfiles(b, g.client, g.names, steadyRecordsPerSec*60, g.l.Epoch(g.clk.Now())-1)
	}
	g.reasons = os.Getenv("GATETEST_BENCH_REASONS") != ""
	g.rr.reasons = map[limit.ReadReason]int{}
	return g
}

// second runs simulated second s: its records checked, the clock advanced, one tick.
// From s = o.warm on it counts what the tick did, and the redis-server CPU time the tick
// took (tickCPU): what the server spent between the tick's first command and its last
// reply, which leaves out its idle time while the benchmark checks the next second's
// records. That time (the server's cron, active expiry on a real clock) grows with how
// long the benchmark takes to simulate a second, not with what the tick asks: a gate
// does its checks in real time.
func (g *steady) second(s int) {
	b, o, rr := g.b, g.o, &g.rr
	if s == o.warm {
		g.cpu0 = redisCPU(b, g.client)
	}
	now := g.clk.Now()
	for i := range steadyRecordsPerSec {
		team := g.names[g.z.Uint64()]
		g.l.CheckAt(now, team, 1)
		if o.rules {
			g.key = append(append(g.key[:0], team...), g.users[g.userRNG.IntN(len(g.users))]...)
			g.user.CheckAt(now, string(g.key), 1)
			if i%20 == 0 {
				g.merges.CheckAt(now, team, 1)
			}
		}
	}
	g.clk.Advance(time.Second)
	var before float64
	if s >= o.warm {
		before = redisCPU(b, g.client)
	}
	var r TickResult
	if o.split {
		r = runSplitTick(g.tk, context.Background())
	} else {
		r = g.tk.Tick(context.Background())
	}
	g.fails.check(b, "tick", r)
	if s < o.warm {
		return
	}
	rr.tickCPU += redisCPU(b, g.client) - before
	if g.reasons {
		for _, r := range g.tk.limits[0].sweep.Reads {
			rr.reasons[r.Reason]++
			if r.Fold {
				rr.folds++
			}
		}
	}
	rr.events += steadyRecordsPerSec
	rr.reads += r.Reads
	rr.writes += r.Writes
	rr.cmds += r.Commands
	rr.ticks++
	if s%15 == 14 {
		rr.everyTeam += g.l.Len() // every cached team, once per sync interval
		if o.rules {
			rr.everyTeam += g.user.Len() + g.merges.Len()
		}
	}
}

// result is what the measured seconds did and cost.
func (g *steady) result() readRun {
	rr := g.rr
	rr.cpu = redisCPU(g.b, g.client) - g.cpu0
	if g.reasons {
		g.b.Logf("reads by reason %v, folds %d", rr.reasons, rr.folds)
	}
	if os.Getenv("GATETEST_BENCH_COMMANDSTATS") != "" {
		g.b.Log(g.client.Info(context.Background(), "commandstats").Val())
	}
	return rr
}

// seedProfiles stores for each team a profile of a day of history at its mean count per
// window under Zipf(1.1) over the teams (rand.Zipf's: P(k) ∝ (1 + k)^−1.1), folded up to
// epoch.
func seedProfiles(b *testing.B, c *redis.Client, names []string, perWindow int, epoch int64) {
	var norm float64
	for k := range names {
		norm += math.Pow(float64(1+k), -1.1)
	}
	ctx := context.Background()
	pipe := c.Pipeline()
	for k, team := range names {
		p := spike.Profile{Epoch: epoch, Windows: 1440, Level: float32(float64(perWindow) * math.Pow(float64(1+k), -1.1) / norm)}
		v, _ := p.MarshalBinary()
		pipe.Set(ctx, ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL)
		if pipe.Len() == 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchGate is one gate for the benchmarks: a limiter on clk, and a tick to srv named
// writer, with one connection whose reads and writes wait up to ioTimeout, its deadline a
// minute (the benchmarks measure cost, not timeouts). The connection closes when b ends.
func benchGate(b *testing.B, srv *redistest.Server, cfg limit.Config, clk clock.Clock, ioTimeout time.Duration, writer string) (*limit.Limiter, *Ticker, *redis.Client) {
	b.Helper()
	l, err := limit.New(cfg, clk, nil)
	if err != nil {
		b.Fatal(err)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{ReadTimeout: ioTimeout, WriteTimeout: ioTimeout, PoolSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = clients[0].Close() })
	tk, err := New(l, toUniversal(clients), Config{TickTimeout: time.Minute, Writer: writer}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	clockChecked(tk)
	return l, tk, clients[0]
}
