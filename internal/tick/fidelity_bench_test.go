package tick

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// slidingLogDivertLua is slidingLogLua for Divert mode: every record enters the log,
// allowed or not, as the limiter counts every record in Divert mode.
const slidingLogDivertLua = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local n = redis.call('ZCARD', key)
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, window)
return limit - n
`

// fidThreshold is every team's limit per fleetWindow in the fidelity scenarios: 10
// records per tick at 1 ×, small enough that the Lua baseline (one EVALSHA per record)
// stays within a few tens of seconds for all scenarios.
const fidThreshold = 600

// fidBackground are the rates (× limit) of the teams that run alongside the hot one in
// every scenario and never exceed 80% of their limit.
var fidBackground = []float64{0.3, 0.6, 0.78}

// fidInstance is one limiter instance of a fleet under test.
type fidInstance interface {
	limited(at time.Time, team string) bool
	// writePhase and readPhase are the two halves of a tick (Ticker.Run's): the fleet's
	// ticks are aligned, every instance writes, then every instance reads.
	writePhase(tb testing.TB)
	readPhase(tb testing.TB)
}

type fidOurs struct {
	g     *gate
	fails *tickFailures
}

func (o fidOurs) limited(at time.Time, team string) bool { return o.g.l.CheckAt(at, team, 1).Limited }

func (o fidOurs) writePhase(tb testing.TB) {
	o.fails.check(tb, "tick's write phase", o.g.tk.WritePhase(context.Background()))
}

func (o fidOurs) readPhase(tb testing.TB) {
	o.fails.check(tb, "tick's read phase", o.g.tk.ReadPhase(context.Background()))
}

// fidLua is the exact synchronous sliding-log limiter: one EVALSHA per record, with the
// fake clock's time as now.
type fidLua struct {
	env    *fidEnv
	script *redis.Script
}

func (l fidLua) limited(at time.Time, team string) bool {
	l.env.seq++
	left, err := l.script.EvalSha(context.Background(), l.env.lua, []string{"fid:" + team},
		at.UnixMilli(), fleetWindow.Milliseconds(), fidThreshold, l.env.seq).Int64()
	if err != nil {
		panic(err)
	}
	return left <= 0
}

func (fidLua) writePhase(testing.TB) {}
func (fidLua) readPhase(testing.TB)  {}

// fidEnv holds what the scenarios share: the Redis every fleet syncs through, one private
// Redis per instance for the local-only baseline, and the Lua baseline's connection.
type fidEnv struct {
	fails        tickFailures // ours, reference and local's
	shared       *redistest.Server
	private      []*redistest.Server
	lua          *redis.Client
	capScript    *redis.Script
	divertScript *redis.Script
	seq          int64
	scenario     int
}

func newFidEnv(tb testing.TB) *fidEnv {
	e := &fidEnv{shared: redistest.Start(tb)}
	clients, err := Dial([]string{e.shared.URL()}, RedisOptions{PoolSize: 1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	e.lua = clients[0]
	tb.Cleanup(func() { _ = e.lua.Close() })
	e.capScript, e.divertScript = redis.NewScript(slidingLogLua), redis.NewScript(slidingLogDivertLua)
	for _, s := range []*redis.Script{e.capScript, e.divertScript} {
		if err := s.Load(context.Background(), e.lua).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// fleet returns n instances of baseline on a fresh fake clock.
func (e *fidEnv) fleet(tb testing.TB, baseline string, n int, mode limit.Mode) ([]fidInstance, *clock.Fake) {
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: fleetWindow, Threshold: fidThreshold, Mode: mode, SyncInterval: fleetWindow / 4}
	sc := Config{TickInterval: fleetWindow / 60}
	var out []fidInstance
	for i := range n {
		switch baseline {
		case "ours":
			out = append(out, fidOurs{newGate(tb, clk, lc, sc, e.shared), &e.fails})
		case "reference":
			ref := lc
			ref.HotEveryTick, ref.PendingReadShare = new(false), -1
			out = append(out, fidOurs{newGate(tb, clk, ref, sc, e.shared), &e.fails})
		case "local":
			// Local-only: each instance syncs with a Redis of its own, so it enforces the
			// whole limit on what it sees alone, with the same windows and decay as ours.
			for len(e.private) <= i {
				e.private = append(e.private, redistest.Start(tb))
			}
			out = append(out, fidOurs{newGate(tb, clk, lc, sc, e.private[i]), &e.fails})
		case "lua":
			s := e.capScript
			if mode == limit.Divert {
				s = e.divertScript
			}
			out = append(out, fidLua{e, s})
		default:
			tb.Fatalf("unknown baseline %q", baseline)
		}
	}
	return out, clk
}

// fidTeam is one team's traffic and what the fleet answered it.
type fidTeam struct {
	name string
	x    float64 // offered rate, × its limit per window
	acc  float64 // fractional records carried to the next tick
	rr   int     // next instance, round robin
	log  []int64 // unix ms of the offered records in the exact sliding window

	maxCount          int // most records ever in the exact sliding window
	offered, limited  int // all ticks
	tickOff, tickLim  int // last tick
	armed             bool
	crossAt           time.Time // first record offered with ≥ threshold already in the window, once armed
	crossed, detected bool
	afterOff, afterLm int // records at or after crossAt in the last tick
	leak              int // accepted at or after crossAt until detected
	detectTicks       float64
}

// fidSim runs one scenario: a fleet, a clock, teams.
type fidSim struct {
	tb    testing.TB
	insts []fidInstance
	clk   *clock.Fake
	now   time.Time
	teams []*fidTeam
	recs  []fidRec
}

type fidRec struct {
	at   time.Time
	team *fidTeam
	inst int
}

const fidTick = fleetWindow / 60

func (e *fidEnv) sim(tb testing.TB, baseline string, n int, mode limit.Mode, hotX float64) *fidSim {
	e.scenario++
	insts, clk := e.fleet(tb, baseline, n, mode)
	s := &fidSim{tb: tb, insts: insts, clk: clk, now: epochStart}
	prefix := fmt.Sprintf("%s-%d", baseline, e.scenario)
	s.teams = append(s.teams, &fidTeam{name: prefix + "-hot", x: hotX})
	for i, x := range fidBackground {
		s.teams = append(s.teams, &fidTeam{name: fmt.Sprintf("%s-bg%d", prefix, i), x: x})
	}
	return s
}

func (s *fidSim) hot() *fidTeam { return s.teams[0] }

// step offers one tick of every team's traffic, each team's records spread evenly over
// the tick and round robin over the instances, then ticks every instance.
func (s *fidSim) step() {
	s.recs = s.recs[:0]
	for _, t := range s.teams {
		t.acc += t.x * fidThreshold / 60
		k := int(t.acc + 1e-9)
		t.acc -= float64(k)
		for j := range k {
			s.recs = append(s.recs, fidRec{s.now.Add(time.Duration(j) * fidTick / time.Duration(k)), t, t.rr % len(s.insts)})
			t.rr++
		}
		t.tickOff, t.tickLim, t.afterOff, t.afterLm = k, 0, 0, 0
	}
	slices.SortStableFunc(s.recs, func(a, b fidRec) int { return a.at.Compare(b.at) })
	win := fleetWindow.Milliseconds()
	for _, r := range s.recs {
		t, ms := r.team, r.at.UnixMilli()
		i := 0
		for i < len(t.log) && t.log[i] <= ms-win {
			i++
		}
		t.log = append(t.log[i:], ms)
		before := len(t.log) - 1
		t.maxCount = max(t.maxCount, len(t.log))
		if t.armed && !t.crossed && before >= fidThreshold {
			t.crossed, t.crossAt = true, r.at
		}
		lim := s.insts[r.inst].limited(r.at, t.name)
		t.offered++
		if lim {
			t.limited++
			t.tickLim++
		}
		if t.crossed && !t.detected {
			t.afterOff++
			if lim {
				t.afterLm++
			} else {
				t.leak++
			}
		}
	}
	s.now = s.now.Add(fidTick)
	for _, t := range s.teams {
		if t.crossed && !t.detected && t.afterOff > 0 && float64(t.afterLm) >= 0.9*float64(t.afterOff) {
			t.detected = true
			t.detectTicks = float64(s.now.Sub(t.crossAt)) / float64(fidTick)
		}
	}
	s.clk.Set(s.now)
	for _, in := range s.insts {
		in.writePhase(s.tb)
	}
	for _, in := range s.insts {
		in.readPhase(s.tb)
	}
}

// falseOverflow is how many records of the background teams were limited, counting only
// teams whose exact sliding-window count never exceeded 80% of the limit.
func (s *fidSim) falseOverflow() int {
	n := 0
	for _, t := range s.teams[1:] {
		if float64(t.maxCount) <= 0.8*fidThreshold {
			n += t.limited
		} else {
			s.tb.Logf("%s reached %d records in a window, over 80%% of %d: not counted", t.name, t.maxCount, fidThreshold)
		}
	}
	return n
}

func fidSuffix(n int, x float64) string {
	return fmt.Sprintf("_n%d_x%s", n, strconv.FormatFloat(x, 'g', -1, 64))
}

// runFidelity runs every scenario for baseline and returns the figures by metric name.
func (e *fidEnv) runFidelity(tb testing.TB, baseline string) map[string]float64 {
	m := map[string]float64{}
	falseOverflow := 0

	// Cap: admitted per window ÷ threshold, windows 2..7.
	for _, sc := range []struct {
		n int
		x float64
	}{{4, 2}, {1, 2}, {2, 2}, {8, 2}, {4, 1.2}, {4, 5}, {4, 10}, {16, 1.2}, {16, 2}, {16, 10}} {
		s := e.sim(tb, baseline, sc.n, limit.Cap, sc.x)
		var sum, worst float64
		const windows = 8
		for w := range windows {
			before := s.hot().offered - s.hot().limited
			for range 60 {
				s.step()
			}
			if w < 2 {
				continue
			}
			r := float64(s.hot().offered-s.hot().limited-before) / fidThreshold
			if sc.n == 4 && sc.x == 2 {
				// The series bench/report draws (bench/fidelity.svg), steady windows only.
				m[fmt.Sprintf("series_cap_window_%02d", w)] = r
			}
			sum += r
			if math.Abs(r-1) > math.Abs(worst-1) || w == 2 {
				worst = r
			}
		}
		mean := sum / (windows - 2)
		falseOverflow += s.falseOverflow()
		if sc.n == 4 && sc.x == 2 {
			m["fleet_admitted_over_threshold"], m["fleet_admitted_worst_window"] = mean, worst
		}
		m["cap_admitted_over_threshold"+fidSuffix(sc.n, sc.x)] = mean
		m["cap_admitted_worst_window"+fidSuffix(sc.n, sc.x)] = worst
	}

	// Divert, step: 3 windows at 0.5 ×, then up to 4 windows at x.
	for _, sc := range []struct {
		n int
		x float64
	}{{4, 5}, {1, 5}, {8, 5}, {4, 1.2}, {4, 2}, {16, 1.2}, {16, 2}, {16, 10}} {
		s := e.sim(tb, baseline, sc.n, limit.Divert, 0.5)
		for range 3 * 60 {
			s.step()
		}
		h := s.hot()
		h.x, h.armed = sc.x, true
		for range 4 * 60 {
			s.step()
		}
		falseOverflow += s.falseOverflow()
		detect := h.detectTicks
		if !h.detected && h.crossed {
			// Never 90% diverted: report the ticks from the crossing to the end of the run,
			// a lower bound.
			detect = float64(s.now.Sub(h.crossAt)) / float64(fidTick)
			tb.Logf("%s: %d instances, step to %g ×: never 90%% diverted in %.0f ticks", baseline, sc.n, sc.x, detect)
		}
		leak := float64(h.leak) / fidThreshold
		if sc.n == 4 && sc.x == 5 {
			m["divert_detect_ticks"], m["divert_leak_over_threshold"] = detect, leak
		}
		m["divert_detect_ticks"+fidSuffix(sc.n, sc.x)] = detect
		m["divert_leak_over_threshold"+fidSuffix(sc.n, sc.x)] = leak
	}

	// Divert, steady: held at 1.2 × for 8 windows, share diverted in windows 2..7.
	for _, n := range []int{4, 1, 8, 16} {
		s := e.sim(tb, baseline, n, limit.Divert, 1.2)
		for range 2 * 60 {
			s.step()
		}
		h := s.hot()
		off, lim := h.offered, h.limited
		for range 6 * 60 {
			s.step()
		}
		share := float64(h.limited-lim) / float64(h.offered-off)
		falseOverflow += s.falseOverflow()
		if n == 4 {
			m["divert_share_steady"] = share
		}
		m["divert_share_steady"+fidSuffix(n, 1.2)] = share
	}
	m["false_overflow_below_80pct"] = float64(falseOverflow)
	return m
}

// BenchmarkFidelity measures how exactly a fleet enforces a team's limit (issue 6,
// Fidelity): several instances, each with its own tick, sharing one real Redis, a fake
// clock, window 10 s, tick = window / 60, sync interval = window / 4. Sub-benchmarks: ours,
// reference (ours without every-tick reads of hot teams or pending-triggered reads),
// local (each instance alone) and lua (the exact synchronous sliding-log limiter, one
// EVALSHA per record, the fake clock's time as now). It is a simulation, not a timing:
// run it with -benchtime 1x; any other benchtime skips it.
func BenchmarkFidelity(b *testing.B) {
	if f := flag.Lookup("test.benchtime"); f == nil || f.Value.String() != "1x" {
		b.Skip("a simulation on a fake clock: run with -benchtime 1x")
	}
	env := newFidEnv(b)
	for _, baseline := range []string{"ours", "reference", "local", "lua"} {
		b.Run(baseline, func(b *testing.B) {
			var m map[string]float64
			for b.Loop() {
				m = env.runFidelity(b, baseline)
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, cmp.Compare)
			for _, k := range keys {
				b.ReportMetric(m[k], k)
			}
			env.fails.report(b) // each baseline's own
		})
	}
}
