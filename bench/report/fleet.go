package main

import "fmt"

// The tick at scale: a fleet's Redis cost, gate processes sharing a limit, a million teams
// in one gate, a tick of every team, and a fleet replaying a backlog (internal/tick
// BenchmarkFleetRedis, BenchmarkMillionTeams, BenchmarkTick, BenchmarkCatchUp;
// internal/faulttest BenchmarkFleetProcessWindow).

// Benchmark names the figures come from (without the -GOMAXPROCS suffix).
const (
	benchCatchUp      = "BenchmarkCatchUp"
	benchTickStandalo = "BenchmarkTick/standalone"
)

// fleetRedisSizes are BenchmarkFleetRedis/ours' fleet sizes (ours/n<size>), all of which
// gates_per_redis_core is the least over.
var fleetRedisSizes = []int{1, 4, 16, 64}

// catchupFigures puts the shares falsely limited while replaying a backlog.
func catchupFigures(b Samples, out map[string]float64) {
	if v, ok := b.Mean(benchCatchUp, "false_overflow_event"); ok {
		out["catchup_false_overflow_event"] = v
	}
	if v, ok := b.Mean(benchCatchUp, "false_overflow_wall"); ok {
		out["catchup_false_overflow_wall"] = v
	}
}

// fleetFigures puts the fleet's and the million teams' figures.
func fleetFigures(b Samples, out map[string]float64) {
	// The fleet's Redis cost: every fleet size's figures, and the gates one core carries:
	// the least over every fleet size, put only when each was measured (a size missing,
	// its sub-benchmark renamed or not run, would leave the least of the others standing
	// for the goal's figure).
	gpc, sizes := 0.0, 0
	for _, n := range fleetRedisSizes {
		name := fmt.Sprintf("BenchmarkFleetRedis/ours/n%d", n)
		if v, ok := b.Mean(name, "gates_per_core"); ok {
			out[fmt.Sprintf("fleet_gates_per_redis_core_n%d", n)] = v
			if sizes == 0 || v < gpc {
				gpc = v
			}
			sizes++
		}
		if v, ok := b.Mean(name, "redis_cpu"); ok {
			out[fmt.Sprintf("fleet_redis_cpu_n%d", n)] = v
		}
		if v, ok := b.Mean(name, "tick_p50_ms"); ok {
			out[fmt.Sprintf("fleet_tick_p50_ms_n%d", n)] = v
		}
		if v, ok := b.Mean(name, "tick_p99_ms"); ok {
			out[fmt.Sprintf("fleet_tick_p99_ms_n%d", n)] = v
		}
	}
	if sizes == len(fleetRedisSizes) {
		out["gates_per_redis_core"] = gpc
	}
	if v, ok := b.Mean("BenchmarkFleetRedis/baseline/n1", "gates_per_core"); ok {
		out["gates_per_redis_core_baseline"] = v
	}
	if v, ok := b.Farthest("BenchmarkFleetProcessWindow", "worst_window", 1); ok {
		out["fleet_process_worst_window"] = v
	}
	if v, ok := b.Mean("BenchmarkMillionTeams", "tick_p99_ms"); ok {
		out["tick_p99_ms_1m_teams"] = v
	}
	if v, ok := b.Mean("BenchmarkMillionTeams", "bytes_per_team"); ok {
		out["bytes_per_entity_1m_teams"] = v
	}
	if v, ok := b.Mean(benchTickStandalo, "cmds/tick"); ok {
		out["tick_all_teams_commands_per_tick"] = v
	}
}
