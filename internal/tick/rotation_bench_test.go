package tick

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// rotation is one gate of BenchmarkRotation: the team rule alone, or a rule per user
// (team_id+distinct_id, as config.RuleLimitConfigs builds it: a sketch under the floor and
// a bound on each team's keys) before it, with its tick and its own redis-server.
type rotation struct {
	team, user *limit.Limiter
	tk         *Ticker
	client     *redis.Client
	cpu        time.Duration // the process's CPU time in this gate's seconds
	tickCPU    time.Duration // the part of it in its ticks
	redisCPU   float64
	records    int64
	// The routing goroutine's tallies, as the router keeps them in its Scratch: added
	// to the limiters once a batch (here, every rotBatch records).
	teamTally, userTally limit.Tally
}

// rotBatch is how many records BenchmarkRotation checks between two AddTally calls, as
// the consumer routes a fetched batch between two flushes of its Scratch.
const rotBatch = 1024

const (
	rotTeams          = 100_000
	rotUsers          = 50
	rotRecordsPerSec  = 20_000
	rotRotatingShare  = 5 // one record in 5 (20%) is the rotating team's, a fresh id each
	rotTeamThreshold  = 300_000
	rotUserThreshold  = 30_000
	rotRotatingTeamID = "team-rotating"
)

func newRotation(b *testing.B, clk clock.Clock, perUser bool) *rotation {
	srv := redistest.Start(b)
	base := limit.Config{Window: time.Minute, SyncInterval: 15 * time.Second}
	tc := base
	tc.Threshold = rotTeamThreshold
	g := &rotation{}
	var err error
	if g.team, err = limit.New(tc, clk, nil); err != nil {
		b.Fatal(err)
	}
	lims := []Limit{{Lim: g.team, KeyPrefix: "gate:rule:team"}}
	if perUser {
		uc := base
		uc.Threshold, uc.SketchWidth = rotUserThreshold, limit.DefaultSketchWidth
		uc.KeyCardinality, uc.OnCardinality = limit.DefaultKeyCardinality, limit.CardinalityCollapse
		if g.user, err = limit.New(uc, clk, nil); err != nil {
			b.Fatal(err)
		}
		lims = append([]Limit{{Lim: g.user, KeyPrefix: "gate:rule:team-user"}}, lims...)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{PoolSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = clients[0].Close() })
	g.client = clients[0]
	if g.tk, err = NewMulti(lims, toUniversal(clients), Config{TickTimeout: time.Minute}, nil, nil); err != nil {
		b.Fatal(err)
	}
	return g
}

// rotLoad is the records of BenchmarkRotation's seconds, the same for every gate: a team
// of 100k by Zipf(1.1) and one of its 50 users, or, one record in five, the rotating team
// with an id never seen before.
type rotLoad struct {
	names []string
	z     *rand.Zipf
	users *rand.Rand
	seq   int
	key   []byte
}

func newRotLoad() *rotLoad {
	return &rotLoad{names: teamNames(rotTeams), z: rand.NewZipf(rand.New(rand.NewPCG(7, 11)), 1.1, 1, rotTeams-1), users: rand.New(rand.NewPCG(3, 5))}
}

// next is the next record's team and user key. The key aliases a buffer the next call
// reuses, as the router's does a record's.
func (r *rotLoad) next(i int) (team, key string) {
	if i%rotRotatingShare == 0 {
		r.seq++
		r.key = strconv.AppendInt(append(append(r.key[:0], rotRotatingTeamID...), ":id-"...), int64(r.seq), 10)
		return rotRotatingTeamID, unsafe.String(&r.key[0], len(r.key))
	}
	team = r.names[r.z.Uint64()]
	r.key = strconv.AppendInt(append(append(r.key[:0], team...), ":user-"...), int64(r.users.IntN(rotUsers)), 10)
	return team, unsafe.String(&r.key[0], len(r.key))
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// second runs one simulated second of load through g at now, then its tick; measured, it
// adds the process's CPU time and the redis-server's to g's.
func (g *rotation) second(b *testing.B, load *rotLoad, now time.Time, measured bool) {
	var cpu0 time.Duration
	var r0 float64
	if measured {
		r0 = redisCPU(b, g.client)
		cpu0 = processCPU()
	}
	for i := range rotRecordsPerSec {
		team, key := load.next(i)
		if i%rotBatch == rotBatch-1 {
			g.flushTallies()
		}
		if g.user != nil {
			// As the router does with a team rule after the user rule (route's
			// prefetchNext): the team's slot is fetched while the user's check waits.
			g.team.Prefetch(team)
		}
		if g.user != nil && g.user.CheckTally(now, key, 1, &g.userTally).Limited {
			continue // the user rule sends it away: the team rule does not check it
		}
		g.team.CheckTally(now, team, 1, &g.teamTally)
	}
	g.flushTallies()
	var t0 time.Duration
	if measured {
		t0 = processCPU()
	}
	if r := runSplitTick(g.tk, context.Background()); r.Errors != 0 {
		b.Fatalf("tick: %+v", r)
	}
	if measured {
		t1 := processCPU()
		g.tickCPU += t1 - t0
		g.cpu += t1 - cpu0
		g.redisCPU += redisCPU(b, g.client) - r0
		g.records += rotRecordsPerSec
	}
}

// flushTallies adds the tallies to the limiters, as the router's Scratch.Flush does.
func (g *rotation) flushTallies() {
	g.team.AddTally(&g.teamTally)
	if g.user != nil {
		g.user.AddTally(&g.userTally)
	}
}

// heapAfterGC is the live heap, collected.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRotation: 20,000 records a second of 100k Zipf(1.1) teams with 50 users each,
// and one team with a fresh distinct_id on every fifth record (20% of the traffic), through
// a gate with a team_id+distinct_id rule before the team rule ("rotation") and one with
// the team rule alone ("team"), each with its own redis-server, on a fake clock (60 s
// windows, 1 s ticks, split as Run splits them).
//
// First the two in lockstep, a simulated second of each in turn, 60 s warm then 120 s
// measured: the process's CPU time per record (the checks and the tick's client side),
// and the redis-server's per million records. rotation_gate_cpu_vs_team_rule and
// rotation_redis_cpu_vs_team_rule are their ratios. Then each alone for 10 simulated
// minutes, its live heap after a collection at every minute: the peak, and the last
// minute's ÷ the third's (rotation_heap_flat: flat is 1).
func BenchmarkRotation(b *testing.B) {
	for b.Loop() {
		start := time.Unix(1_800_000_000, 0).Truncate(time.Hour)
		clk := clock.NewFake(start)
		gs := []*rotation{newRotation(b, clk, false), newRotation(b, clk, true)}
		loads := []*rotLoad{newRotLoad(), newRotLoad()}
		for s := range 180 {
			now := clk.Now()
			for k := range gs {
				i := (s + k) % len(gs) // the first of them rotating
				gs[i].second(b, loads[i], now, s >= 60)
			}
			clk.Advance(time.Second)
		}
		team, rot := gs[0], gs[1]
		perRec := func(g *rotation) float64 { return float64(g.cpu.Nanoseconds()) / float64(g.records) }
		perM := func(g *rotation) float64 { return g.redisCPU / (float64(g.records) / 1e6) }
		b.ReportMetric(perRec(team), "team_gate_cpu_ns/record")
		b.ReportMetric(perRec(rot), "rotation_gate_cpu_ns/record")
		b.ReportMetric(perM(team), "team_redis_cpu_s/Mrecords")
		b.ReportMetric(perM(rot), "rotation_redis_cpu_s/Mrecords")
		b.ReportMetric(perRec(rot)/perRec(team), "gate_cpu_ratio")
		b.ReportMetric(float64(team.tickCPU.Nanoseconds())/float64(team.records), "team_tick_cpu_ns/record")
		b.ReportMetric(float64(rot.tickCPU.Nanoseconds())/float64(rot.records), "rotation_tick_cpu_ns/record")
		b.ReportMetric(perM(rot)/perM(team), "redis_cpu_ratio")
		b.ReportMetric(float64(rot.user.Len()), "rotation_user_keys_cached")
		b.ReportMetric(float64(len(rot.user.Rotating())), "rotation_teams_rotating")

		// Memory: each alone, ten minutes.
		var peaks [2]uint64
		var flat float64
		for k, perUser := range []bool{false, true} {
			gs = nil
			runtime.GC()
			clk := clock.NewFake(start)
			g := newRotation(b, clk, perUser)
			load := newRotLoad()
			base := heapAfterGC()
			var third uint64
			for s := range 600 {
				g.second(b, load, clk.Now(), false)
				clk.Advance(time.Second)
				if (s+1)%60 == 0 {
					h := heapAfterGC() - min(base, heapAfterGC())
					peaks[k] = max(peaks[k], h)
					if s+1 == 180 {
						third = h
					}
					if perUser && s+1 == 600 && third > 0 {
						flat = float64(h) / float64(third)
					}
				}
			}
			runtime.KeepAlive(g)
		}
		b.ReportMetric(float64(peaks[0])/(1<<20), "team_heap_MiB")
		b.ReportMetric(float64(peaks[1])/(1<<20), "rotation_heap_MiB")
		b.ReportMetric(float64(peaks[1])/float64(peaks[0]), "heap_ratio")
		b.ReportMetric(flat, "rotation_heap_flat")
	}
}
