package main

// What Redis pays: the commands, reads saved and its CPU for the tick's writes, the
// writes as before, three rules, and adaptive thresholds (internal/tick
// BenchmarkReadReduction, BenchmarkAdaptiveCost, BenchmarkAdaptiveFleetCost).

// Benchmark names the figures come from (without the -GOMAXPROCS suffix).
const (
	benchReadOurs = "BenchmarkReadReduction/ours"
	benchReadRef  = "BenchmarkReadReduction/reference"
	benchReadBase = "BenchmarkReadReduction/baseline"
)

// redisFigures puts BenchmarkReadReduction's figures: reads saved, commands per tick and
// Redis CPU, ours beside the reference cadence, the writes as before, no holds and three
// rules.
func redisFigures(b Samples, out map[string]float64) {
	if v, ok := b.Mean(benchReadOurs, "read_reduction"); ok {
		out["sync_read_reduction"] = v
	}
	if v, ok := b.Mean(benchReadOurs, "cmds/tick"); ok {
		out["redis_commands_per_tick"] = v
	}
	if v, ok := b.Mean("BenchmarkReadReduction/nohold", "cmds/tick"); ok {
		out["redis_commands_per_tick_nohold"] = v
	}
	if v, ok := b.Mean("BenchmarkReadReduction/nohold", "redis_cpu_s/Mevents"); ok {
		out["redis_cpu_s_per_million_events_nohold"] = v
	}
	for _, k := range []struct{ unit, key string }{{"cmds/tick", "redis_commands_per_tick_rules3"}, {"writes/tick", "redis_writes_per_tick_rules3"}, {"redis_cpu_s/Mevents", "redis_cpu_s_per_million_events_rules3"}} {
		if v, ok := b.Mean("BenchmarkReadReduction/rules3", k.unit); ok {
			out[k.key] = v
		}
	}
	// Against the one rule run in lockstep beside the three (rulesBesideOne).
	for _, k := range []struct{ unit, key string }{{"redis_cpu_s/Mevents", "redis_cpu_rules3_vs_one_rule"}, {"cmds/tick", "redis_commands_rules3_vs_one_rule"}} {
		if r, ok := b.Mean("BenchmarkReadReduction/rules3", k.unit); ok {
			if o, ok := b.Mean("BenchmarkReadReduction/rules3", "one_rule_"+k.unit); ok && o > 0 {
				out[k.key] = r / o
			}
		}
	}
	if v, ok := b.Mean(benchReadBase, "cmds/tick"); ok {
		out["redis_commands_per_tick_baseline"] = v
	}
	if v, ok := b.Mean(benchReadOurs, "redis_cpu_s/Mevents"); ok {
		out["redis_cpu_s_per_million_events"] = v
	}
	if v, ok := b.Mean(benchReadBase, "redis_cpu_s/Mevents"); ok {
		out["redis_cpu_s_per_million_events_baseline"] = v
	}
	if o, ok1 := out["redis_cpu_s_per_million_events"]; ok1 {
		if base, ok2 := out["redis_cpu_s_per_million_events_baseline"]; ok2 && base > 0 {
			out["redis_cpu_vs_baseline"] = o / base
		}
	}
	if v, ok := b.Mean(benchReadRef, "read_reduction"); ok {
		out["sync_read_reduction_reference"] = v
	}
}

// adaptiveFigures puts the Redis CPU of adaptive thresholds beside static ones.
func adaptiveFigures(b Samples, out map[string]float64) {
	// Adaptive thresholds (issue 22): BenchmarkAdaptiveCost, three variants in lockstep in
	// one process. The goals are on the server's CPU during the ticks: its idle time
	// between them grows with how long the benchmark takes to simulate a second, which
	// the adaptive variants take longer to, not with what they ask of Redis.
	// Each figure twice: during the ticks (no prefix, the goals') and the whole process's.
	measures := []struct{ prefix, unit string }{{"", "redis_tick_cpu_s/Mevents"}, {"process_", "redis_cpu_s/Mevents"}}
	for _, m := range measures {
		for variant, key := range map[string]string{"static": "_adaptive_static", "adaptive": "_adaptive", "learned": "_adaptive_learned"} {
			if v, ok := b.Mean("BenchmarkAdaptiveCost", variant+"_"+m.unit); ok {
				out["redis_"+m.prefix+"cpu_s_per_million_events"+key] = v
			}
		}
		if st, ok := out["redis_"+m.prefix+"cpu_s_per_million_events_adaptive_static"]; ok && st > 0 {
			for _, v := range []string{"", "_learned"} {
				if x, ok := out["redis_"+m.prefix+"cpu_s_per_million_events_adaptive"+v]; ok {
					out["redis_"+m.prefix+"cpu_adaptive"+v+"_vs_static"] = x / st
				}
			}
		}
		st, ok1 := b.Mean("BenchmarkAdaptiveFleetCost/static/n4", m.unit)
		lv, ok2 := b.Mean("BenchmarkAdaptiveFleetCost/learned/n4", m.unit)
		if ok1 && ok2 && st > 0 {
			out["redis_"+m.prefix+"cpu_s_per_million_events_adaptive_fleet_static"] = st
			out["redis_"+m.prefix+"cpu_s_per_million_events_adaptive_fleet"] = lv
			out["redis_"+m.prefix+"cpu_adaptive_fleet_vs_static"] = lv / st
		}
	}
}

// rotationFigures puts BenchmarkRotation's ratios (a user rule before the team rule under
// identity rotation, against the team rule alone) and BenchmarkFleetUserRule's worst
// window.
func rotationFigures(b Samples, out map[string]float64) {
	for _, k := range []struct{ unit, key string }{
		{"redis_cpu_ratio", "rotation_redis_cpu_vs_team_rule"},
		{"gate_cpu_ratio", "rotation_gate_cpu_vs_team_rule"},
		{"heap_ratio", "rotation_heap_vs_team_rule"},
		{"rotation_heap_flat", "rotation_heap_flat"},
		{"rotation_gate_cpu_ns/record", "rotation_gate_cpu_ns_per_record"},
		{"team_gate_cpu_ns/record", "rotation_team_gate_cpu_ns_per_record"},
	} {
		if v, ok := b.Mean("BenchmarkRotation", k.unit); ok {
			out[k.key] = v
		}
	}
	if v, ok := b.Farthest("BenchmarkFleetUserRule", "worst_window", 1); ok {
		out["fleet_user_rule_admitted_worst_window"] = v
	}
}
