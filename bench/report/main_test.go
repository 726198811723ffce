package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	f, err := os.Open("testdata/sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.CPU != "Intel(R) Xeon(R) Processor" {
		t.Errorf("cpu = %q", p.CPU)
	}
	if got := p.Bench[benchHotParallel]["ns/op"]; len(got) != 1 || got[0] != 38.74 {
		t.Errorf("hot path ns/op = %v", got)
	}
	if got := p.Bench[benchE2EGate]["records/s"]; len(got) != 3 {
		t.Errorf("gate runs = %v, want 3", got)
	}
	res := Results(p)
	want := map[string]float64{
		"hotpath_ns_per_op":           38.74,
		"hotpath_allocs_per_op":       0,
		"hotpath_vs_map_ratio":        round(38.74 / 52.63),
		"hotpath_vs_map_copied_ratio": round(38.74 / 52.21),
		// No BenchmarkCheckBesideMap in the sample: the sequential medians stand in.
		"hotpath_vs_map_ratio_sequential":        round(38.74 / 52.63),
		"hotpath_vs_map_copied_ratio_sequential": round(38.74 / 52.21),
		"hotpath_serial_ns_per_op":               57.45,
		"sync_lua_checks_per_s":                  8132,
		"hotpath_vs_sync_lua_speedup":            round(1e9 / 57.45 / 8132),
		"e2e_gate_records_per_s":                 math.Round((1073633.0 + 1076166 + 1137112) / 3),
		"e2e_passthrough_records_per_s":          math.Round((957041.0 + 1118720 + 1099597) / 3),
		"e2e_vs_passthrough_ratio":               round((1073633.0 + 1076166 + 1137112) / (957041.0 + 1118720 + 1099597)),
		// Two exactly-once runs against three at-least-once ones: a ratio of the means.
		"e2e_exactly_once_records_per_s":    math.Round((987654.0 + 904977) / 2),
		"e2e_exactly_once_vs_at_least_once": round((987654.0 + 904977) / 2 / ((1073633.0 + 1076166 + 1137112) / 3)),
		"sync_read_reduction":               0.9989,
		"redis_commands_per_tick":           34193,
		"tick_all_teams_commands_per_tick":  200283,
		"bytes_per_entity":                  92.2,
		"bytes_per_entity_16b_teams":        137.5,
		"bytes_per_entity_36b_teams":        162.6,
		// Run i of the gate against run i of the pass-through: the least, the greatest.
		"e2e_vs_passthrough_ratio_worst_run":        round(1076166.0 / 1118720),
		"e2e_gate_cpu_s_per_million_records":        round((1.65 + 1.80 + 1.61) / 3),
		"e2e_passthrough_cpu_s_per_million_records": round((1.50 + 1.60 + 1.40) / 3),
		// The pass-through recycling its input into franz-go's pools, two runs: the CPU
		// goal's baseline. The goal's figure: medians (1.65 of the gate's runs, 1.25 of
		// the pooled pass-through's).
		"e2e_passthrough_pooled_cpu_s_per_million_records": round((1.20 + 1.30) / 2),
		"e2e_cpu_vs_passthrough_ratio":                     round(1.65 / ((1.20 + 1.30) / 2)),
		"e2e_cpu_vs_passthrough_ratio_of_means":            round((1.65 + 1.80 + 1.61) / 3 / ((1.20 + 1.30) / 2)),
		// Run i of the gate against run i of the pooled pass-through: 1.65/1.20, 1.80/1.30.
		"e2e_cpu_vs_passthrough_ratio_worst_run":        round(1.80 / 1.30),
		"e2e_passthrough_pooled_alloc_bytes_per_record": 310,
		// The plain pass-through, no goal: medians, 1.65 ÷ 1.50.
		"e2e_cpu_vs_unpooled_passthrough_ratio": round(1.65 / 1.50),
		// redis-server's CPU over the gate's runs, mean.
		"e2e_redis_cpu_s_per_million": round((0.05 + 0.06 + 0.04) / 3),
		// Two from the tick benchmarks, one from a gate run's tick.
		"bench_failed_ticks": 3,
	}
	for k, w := range want {
		if g, ok := res[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if len(res) != len(want) {
		t.Errorf("got %d keys, want %d: %v", len(res), len(want), res)
	}
	md := Markdown(res, Machine{GoVersion: "go1.26", CPU: "x", CPUs: 2, Date: "today"}, Run{})
	for _, s := range []string{"| `hotpath_vs_map_ratio` | 0.7361 | ≤ 1.5 | yes |", "| `e2e_vs_passthrough_ratio` | 1.0351 | ≥ 0.9 | yes |",
		"| `e2e_exactly_once_records_per_s` | 946316 | — | — |", "| `e2e_exactly_once_vs_at_least_once` | 0.8637 | — | — |", "| `sync_read_reduction_reference` | not measured |", "Not measured in this run (`BenchmarkFidelity` missing"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

func TestParseMissing(t *testing.T) {
	p, err := Parse(strings.NewReader("BenchmarkSyncLua-2\n    synclua_bench_test.go:1: a log line between the name and the figures\n   10\t  100 ns/op\t 5000 checks/s\nBenchmarkX\nnot figures\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	if len(res) != 1 || res["sync_lua_checks_per_s"] != 5000 {
		t.Errorf("results = %v", res)
	}
	if _, ok := res["hotpath_vs_sync_lua_speedup"]; ok {
		t.Error("speedup without the hot path")
	}
}

// The exactly-once figure is reported on its own; its ratio needs the at-least-once one.
func TestExactlyOnceAlone(t *testing.T) {
	p, err := Parse(strings.NewReader("BenchmarkEndToEnd/exactly-once-2 \t 200000 \t 2500 ns/op \t 400000 records/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	if len(res) != 1 || res["e2e_exactly_once_records_per_s"] != 400000 {
		t.Errorf("results = %v, want only e2e_exactly_once_records_per_s", res)
	}
}

func TestFidelity(t *testing.T) {
	f, err := os.Open("testdata/fidelity.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	want := map[string]float64{
		"fleet_admitted_over_threshold":           1.01,
		"fleet_admitted_worst_window":             1.04,
		"divert_detect_ticks":                     2.32,
		"divert_leak_over_threshold":              0.0667,
		"divert_share_steady":                     1,
		"false_overflow_below_80pct":              0,
		"cap_admitted_over_threshold_n4_x2":       1.01,
		"fleet_admitted_over_threshold_reference": 1.053,
		"divert_detect_ticks_reference":           4.32,
		"fleet_admitted_worst_window_local":       2,
		"divert_share_steady_local":               0,
		"divert_leak_over_threshold_local":        3.36,
		"divert_detect_ticks_lua":                 0.32,
		"cap_admitted_over_threshold_n4_x2_lua":   1,
	}
	for k, w := range want {
		if g, ok := res[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	for _, k := range []string{"divert_detect_ticks_local", "ns/op", "ns/op_lua"} {
		if v, ok := res[k]; ok {
			t.Errorf("%s = %v, want absent (not finite, or not a fidelity figure)", k, v)
		}
	}
	if len(res) != 4*7-1 { // the local +Inf left out
		t.Errorf("got %d keys, want %d: %v", len(res), 4*7-1, res)
	}
	md := Markdown(res, Machine{GoVersion: "go1.26", CPU: "x", CPUs: 2, Date: "today"}, Run{})
	for _, s := range []string{
		"| `fleet_admitted_over_threshold` | within [0.97, 1.03] | 1.01 | yes | 1.053 | 2 | 1 |",
		"| `fleet_admitted_worst_window` | within [0.97, 1.03] | 1.04 | no | 1.085 | 2 | 1 |",
		"| `divert_detect_ticks` | ≤ 3 | 2.32 | yes | 4.32 | — | 0.32 |",
		"| `false_overflow_below_80pct` | = 0 | 0 | yes |",
		"| `cap_admitted_over_threshold_n4_x2` | 1.01 | 1.053 | 2 | 1 |",
		"## Goals missed\n\n- `fleet_admitted_worst_window` = 1.04, goal within [0.97, 1.03]: above by 0.01.",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	if strings.Contains(md, "| `cap_admitted_over_threshold_n4_x2_lua`") {
		t.Errorf("a baseline's figure listed as a scenario of its own:\n%s", md)
	}
}

// The fidelity chart's points stay out of results.json and are drawn.
func TestFidelitySeriesDrawn(t *testing.T) {
	in := strings.Join([]string{
		"BenchmarkFidelity/ours-2 1 100 ns/op 1.01 fleet_admitted_over_threshold 0.99 series_cap_window_02 1.02 series_cap_window_03",
		"BenchmarkFidelity/local-2 1 100 ns/op 2 fleet_admitted_over_threshold 2.01 series_cap_window_02 1.98 series_cap_window_03",
	}, "\n")
	p, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	for k := range res {
		if strings.HasPrefix(k, "series_") {
			t.Errorf("results.json would hold chart point %s", k)
		}
	}
	if res["fleet_admitted_over_threshold"] != 1.01 || res["fleet_admitted_over_threshold_local"] != 2 {
		t.Errorf("figures %v", res)
	}
	if len(p.Series["ours"]) != 2 || len(p.Series["local"]) != 2 {
		t.Fatalf("series %v", p.Series)
	}
	for _, name := range []string{"f.svg", "f.png"} {
		path := filepath.Join(t.TempDir(), name)
		if err := drawFidelity(p.Series, path); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
}

// The catch-up scenario's two shares are reported as measured; event must be 0.
func TestCatchUp(t *testing.T) {
	p, err := Parse(strings.NewReader("BenchmarkCatchUp-2 \t 1 \t 7000000000 ns/op \t 0 false_overflow_event \t 0.8286 false_overflow_wall \t 190800 records\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	if v, ok := res["catchup_false_overflow_event"]; !ok || v != 0 {
		t.Errorf("catchup_false_overflow_event = %v, %v; want 0", v, ok)
	}
	if res["catchup_false_overflow_wall"] != 0.8286 {
		t.Errorf("catchup_false_overflow_wall = %v, want 0.8286", res["catchup_false_overflow_wall"])
	}
	md := Markdown(res, Machine{}, Run{})
	if !strings.Contains(md, "| `catchup_false_overflow_event` | 0 | ≤ 0 | yes |") {
		t.Errorf("markdown lacks the catch-up row met:\n%s", md)
	}
}

// TestHotPathMedian: the hot path and the bare map run several times, interleaved (make
// bench runs them fifteen more times after the main run); their figures are the medians, so
// one slow run, as a noisy machine gives now and then, does not move the ratio.
func TestHotPathMedian(t *testing.T) {
	var in strings.Builder
	for _, v := range [][2]float64{{38, 29}, {39, 28}, {61, 30}, {37, 45}, {40, 29}, {38, 28}} {
		in.WriteString("BenchmarkCheck/zipf100k/parallel/baremap-2 \t 40000000\t " + strconv.FormatFloat(v[1], 'f', -1, 64) + " ns/op\n")
		in.WriteString("BenchmarkCheck/zipf100k/parallel/divert-batchclock-2 \t 30000000\t " + strconv.FormatFloat(v[0], 'f', -1, 64) + " ns/op\n")
	}
	p, err := Parse(strings.NewReader(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	if g, w := res["hotpath_ns_per_op"], 38.5; g != w {
		t.Errorf("hotpath_ns_per_op = %v, want the median %v", g, w)
	}
	if g, w := res["hotpath_vs_map_ratio"], round(38.5/29); g != w {
		t.Errorf("hotpath_vs_map_ratio = %v, want %v (medians 38.5 ÷ 29)", g, w)
	}
	if m, _ := (Samples{}).Median("none", "ns/op"); m != 0 {
		t.Errorf("median of nothing = %v", m)
	}

	// With BenchmarkCheckBesideMap's processes the goal reads the median of their
	// ratios, and the sequential one stays beside it.
	for _, r := range []string{"1.30", "1.35", "2.10"} {
		in.WriteString("BenchmarkCheckBesideMap-2 \t 1\t 1 ns/op\t 40 check_ns/op\t " + r + " check_vs_map\t 1.2 check_vs_map_copied\t 33 map_copied_ns/op\t 30 map_ns/op\n")
	}
	if p, err = Parse(strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	res = Results(p)
	for k, w := range map[string]float64{
		"hotpath_vs_map_ratio":             1.35,
		"hotpath_vs_map_copied_ratio":      1.2,
		"hotpath_vs_map_ratio_sequential":  round(38.5 / 29),
		"hotpath_beside_map_ns_per_op":     40,
		"hotpath_beside_map_map_ns_per_op": 30,
	} {
		if g := res[k]; g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// TestSharedCores: BenchmarkEndToEndSharedCores's runs give the shared-core figures,
// apart from BenchmarkEndToEnd's (the bound runs), whose goal they do not touch.
func TestSharedCores(t *testing.T) {
	in := `BenchmarkEndToEnd/passthrough-2 	 1000000	 1000 ns/op	 1.3 cpu-s/Mrecords	 1.000 gomaxprocs	 900000 records/s
BenchmarkEndToEnd/passthrough-pooled-2 	 1000000	 1000 ns/op	 1.0 cpu-s/Mrecords	 1.000 gomaxprocs	 900000 records/s
BenchmarkEndToEnd/gate-2 	 1000000	 1000 ns/op	 1.1 cpu-s/Mrecords	 1.000 gomaxprocs	 950000 records/s
BenchmarkEndToEndSharedCores/passthrough-2 	 1000000	 1000 ns/op	 1.2 cpu-s/Mrecords	 2.000 gomaxprocs	 1000000 records/s
BenchmarkEndToEndSharedCores/gate-2 	 1000000	 1000 ns/op	 1.8 cpu-s/Mrecords	 2.000 gomaxprocs	 1200000 records/s
`
	p, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	for k, w := range map[string]float64{
		"e2e_cpu_vs_passthrough_ratio":                        round(1.1 / 1.0),
		"e2e_client_gomaxprocs":                               1,
		"e2e_shared_cores_cpu_vs_passthrough_ratio":           round(1.8 / 1.2),
		"e2e_shared_cores_cpu_vs_passthrough_ratio_worst_run": round(1.8 / 1.2),
		"e2e_shared_cores_vs_passthrough_ratio":               round(1.2),
		"e2e_shared_cores_gate_cpu_s_per_million_records":     1.8,
	} {
		if g := res[k]; g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// TestAdaptiveCost: the three variants of BenchmarkAdaptiveCost come from one line (one
// process, in lockstep); the goals are on the CPU during the ticks, the process's whole
// CPU is reported beside them; the fleet's likewise from its two lines.
func TestAdaptiveCost(t *testing.T) {
	in := `BenchmarkAdaptiveCost-2 	 1	 248770051051 ns/op	 0.0646 adaptive_redis_cpu_s/Mevents	 0.0580 adaptive_redis_tick_cpu_s/Mevents	 0 failed-ticks	 0.0650 learned_redis_cpu_s/Mevents	 0.0590 learned_redis_tick_cpu_s/Mevents	 0.0700 static_redis_cpu_s/Mevents	 0.0500 static_redis_tick_cpu_s/Mevents
BenchmarkAdaptiveFleetCost/static/n4-2 	 1	 1 ns/op	 0 failed-ticks	 0.0400 redis_cpu_s/Mevents	 0.0300 redis_tick_cpu_s/Mevents
BenchmarkAdaptiveFleetCost/learned/n4-2 	 1	 1 ns/op	 0 failed-ticks	 0.0440 redis_cpu_s/Mevents	 0.0320 redis_tick_cpu_s/Mevents
`
	p, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	for k, w := range map[string]float64{
		"redis_cpu_s_per_million_events_adaptive_static":        0.05,
		"redis_cpu_adaptive_vs_static":                          round(0.058 / 0.05),
		"redis_cpu_adaptive_learned_vs_static":                  round(0.059 / 0.05),
		"redis_process_cpu_s_per_million_events_adaptive":       0.0646,
		"redis_process_cpu_adaptive_vs_static":                  round(0.0646 / 0.07),
		"redis_process_cpu_adaptive_learned_vs_static":          round(0.065 / 0.07),
		"redis_cpu_s_per_million_events_adaptive_fleet":         0.032,
		"redis_cpu_adaptive_fleet_vs_static":                    round(0.032 / 0.03),
		"redis_process_cpu_adaptive_fleet_vs_static":            round(0.044 / 0.04),
		"redis_process_cpu_s_per_million_events_adaptive_fleet": 0.044,
	} {
		if g := res[k]; g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// TestRouteTurns: BenchmarkRouteTurns's runs (make bench: five, each a process of its own)
// give the routing figures as the medians over the runs, the ratios beside their goals.
func TestRouteTurns(t *testing.T) {
	in := `BenchmarkRouteTurns-2   	      20	         1.020 1rule/nofile	         1.150 3rules/1rule	      1010 json_1rule_ns/record	      1160 json_3rules_ns/record	      990 json_ns/record
BenchmarkRouteTurns-2   	      20	         1.300 1rule/nofile	         1.050 3rules/1rule	      1300 json_1rule_ns/record	      1370 json_3rules_ns/record	      1000 json_ns/record
BenchmarkRouteTurns-2   	      20	         1.040 1rule/nofile	         1.250 3rules/1rule	      1040 json_1rule_ns/record	      1300 json_3rules_ns/record	      1000 json_ns/record
`
	p, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	want := map[string]float64{
		"route_one_rule_vs_no_file_ratio":     1.04,
		"route_three_rules_vs_one_rule_ratio": 1.15,
		"route_ns_per_record_no_file":         1000,
		"route_ns_per_record_one_rule":        1040,
		"route_ns_per_record_three_rules":     1300,
	}
	for k, w := range want {
		if g, ok := res[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want the median %v", k, g, ok, w)
		}
	}
	if len(res) != len(want) {
		t.Errorf("got %d keys, want %d: %v", len(res), len(want), res)
	}
	md := Markdown(res, Machine{}, Run{})
	for _, s := range []string{
		"| `route_one_rule_vs_no_file_ratio` | 1.04 | ≤ 1.05 | yes |",
		"| `route_three_rules_vs_one_rule_ratio` | 1.15 | ≤ 1.2 | yes |",
		"| `route_ns_per_record_three_rules` | 1300 | — | — |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	// The real benchmark's line, as BenchmarkRouteTurns prints it (-benchtime 3x).
	p, err = Parse(strings.NewReader("BenchmarkRouteTurns-2   	       3	         0.9020 1rule/nofile	         1.472 3rules/1rule	      1862 json_1rule_ns/record	      2741 json_3rules_ns/record	      2064 json_ns/record\n"))
	if err != nil {
		t.Fatal(err)
	}
	if res := Results(p); res["route_three_rules_vs_one_rule_ratio"] != 1.472 || res["route_ns_per_record_no_file"] != 2064 {
		t.Errorf("from the benchmark's own line: %v", res)
	}
}
