package main

// Routing one record without a rules file, with one rule and with three, in turns
// (internal/route BenchmarkRouteTurns): the one routing path's goals.

// The benchmark the figures come from (without the -GOMAXPROCS suffix).
const benchRouteTurns = "BenchmarkRouteTurns"

// routeFigures puts BenchmarkRouteTurns' figures, each the median over its runs (make
// bench runs it in several processes): each run's ratios are of its own medians, the
// three measured side by side.
func routeFigures(b Samples, out map[string]float64) {
	for _, k := range []struct{ unit, key string }{
		{"1rule/nofile", "route_one_rule_vs_no_file_ratio"},
		{"3rules/1rule", "route_three_rules_vs_one_rule_ratio"},
		{"json_ns/record", "route_ns_per_record_no_file"},
		{"json_1rule_ns/record", "route_ns_per_record_one_rule"},
		{"json_3rules_ns/record", "route_ns_per_record_three_rules"},
	} {
		if v, ok := b.Median(benchRouteTurns, k.unit); ok {
			out[k.key] = v
		}
	}
}

// routeSources is RESULTS.md's word on where the route_* figures come from.
func routeSources(p *Parsed) string {
	runs, procs := p.Runs(benchRouteTurns), p.Processes(benchRouteTurns)
	how := "not measured"
	switch {
	case runs == 0:
	case runs == procs:
		how = count(runs, "run", "runs") + ", each in a process of its own; medians over the runs"
	default:
		how = count(runs, "run", "runs") + " in " + count(procs, "process", "processes") + "; medians over the runs"
	}
	return "`route_*` from `BenchmarkRouteTurns` (internal/route: one cached JSON record routed without a rules file, with the team rule alone and with three rules, in turns on one goroutine as a partition worker routes; " + how + ")"
}
