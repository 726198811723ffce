package main

import (
	"slices"
	"strings"
	"testing"
)

// The gate's CPU goal is against the pass-through that lends franz-go the gate's pools
// (passthrough-pooled), the best franz-go loop; the plain one's ratio is beside it, with
// no goal, and redis-server's CPU over the gate's runs (its tick) is apart, with none.
func TestE2ECPUBaseline(t *testing.T) {
	const runs = `BenchmarkEndToEnd/passthrough-pooled-2 	 1000000	 1000 ns/op	 1.00 cpu-s/Mrecords	 1.000 gomaxprocs	 900000 records/s
BenchmarkEndToEnd/gate-2 	 1000000	 1000 ns/op	 1.20 cpu-s/Mrecords	 0 failed-ticks	 1.000 gomaxprocs	 950000 records/s	 0.030 redis-cpu-s/Mrecords	 4.000 ticks
BenchmarkEndToEnd/passthrough-2 	 1000000	 1000 ns/op	 1.10 cpu-s/Mrecords	 1.000 gomaxprocs	 1000000 records/s
BenchmarkEndToEnd/passthrough-pooled-2 	 1000000	 1000 ns/op	 1.04 cpu-s/Mrecords	 1.000 gomaxprocs	 900000 records/s
BenchmarkEndToEnd/gate-2 	 1000000	 1000 ns/op	 1.17 cpu-s/Mrecords	 0 failed-ticks	 1.000 gomaxprocs	 950000 records/s	 0.050 redis-cpu-s/Mrecords	 4.000 ticks
BenchmarkEndToEnd/passthrough-2 	 1000000	 1000 ns/op	 1.12 cpu-s/Mrecords	 1.000 gomaxprocs	 1000000 records/s
BenchmarkEndToEnd/passthrough-pooled-2 	 1000000	 1000 ns/op	 0.98 cpu-s/Mrecords	 1.000 gomaxprocs	 900000 records/s
BenchmarkEndToEnd/gate-2 	 1000000	 1000 ns/op	 1.30 cpu-s/Mrecords	 0 failed-ticks	 1.000 gomaxprocs	 950000 records/s	 0.040 redis-cpu-s/Mrecords	 4.000 ticks
BenchmarkEndToEnd/passthrough-2 	 1000000	 1000 ns/op	 1.08 cpu-s/Mrecords	 1.000 gomaxprocs	 1000000 records/s
`
	p, err := Parse(strings.NewReader(runs))
	if err != nil {
		t.Fatal(err)
	}
	f := Measure(p)
	res := f.Rounded()
	// Medians: the gate 1.20, the pooled pass-through 1.00, the plain one 1.10.
	for k, w := range map[string]float64{
		"e2e_cpu_vs_passthrough_ratio":                     round(1.20 / 1.00),
		"e2e_cpu_vs_passthrough_ratio_of_means":            round((1.20 + 1.17 + 1.30) / (1.00 + 1.04 + 0.98)),
		"e2e_cpu_vs_passthrough_ratio_worst_run":           round(1.30 / 0.98),
		"e2e_cpu_vs_unpooled_passthrough_ratio":            round(1.20 / 1.10),
		"e2e_passthrough_pooled_cpu_s_per_million_records": round((1.00 + 1.04 + 0.98) / 3),
		"e2e_passthrough_cpu_s_per_million_records":        round((1.10 + 1.12 + 1.08) / 3),
		"e2e_gate_cpu_s_per_million_records":               round((1.20 + 1.17 + 1.30) / 3),
		"e2e_redis_cpu_s_per_million":                      round((0.03 + 0.05 + 0.04) / 3),
		"bench_failed_ticks":                               0,
	} {
		if g, ok := res[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	// The pooled ratio of the means is the goal's _of_means now: not a key of its own.
	if v, ok := res["e2e_cpu_vs_passthrough_pooled_ratio"]; ok {
		t.Errorf("e2e_cpu_vs_passthrough_pooled_ratio = %v: replaced by e2e_cpu_vs_passthrough_ratio_of_means", v)
	}
	if g := goalOf("e2e_cpu_vs_passthrough_ratio"); g == nil || g.text != "≤ 1.15" {
		t.Errorf("e2e_cpu_vs_passthrough_ratio's goal = %v, want ≤ 1.15", g)
	}
	for _, k := range []string{"e2e_cpu_vs_unpooled_passthrough_ratio", "e2e_redis_cpu_s_per_million"} {
		if g := goalOf(k); g != nil {
			t.Errorf("%s has a goal, %s: it has none", k, g.text)
		}
		if !slices.ContainsFunc(rows, func(r row) bool { return r.key == k }) {
			t.Errorf("%s has no row in the table", k)
		}
	}
	// 1.20 misses the goal: judged against the pooled pass-through, where the plain one
	// gives 1.09.
	if got, want := GoalsMissed(f), "goal missed: e2e_cpu_vs_passthrough_ratio = 1.2, goal ≤ 1.15: over by 0.05"; !slices.Contains(got, want) {
		t.Errorf("goals missed = %q, want %q among them", got, want)
	}
	md := Markdown(res, Machine{}, Run{Input: p})
	for _, s := range []string{
		"| `e2e_cpu_vs_passthrough_ratio` | 1.2 | ≤ 1.15 | no | gate (its tick included) ÷ the pooled pass-through",
		"| `e2e_cpu_vs_unpooled_passthrough_ratio` | 1.0909 | — | — |",
		"| `e2e_redis_cpu_s_per_million` | 0.04 | — | — |",
		"per million records, the gate's tick syncing with a real redis-server every second included, ",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q:\n%s", s, md)
		}
	}

	// Without the pooled pass-through the goal's figure is not measured, and make bench
	// says so: the plain pass-through does not stand in for it.
	p, err = Parse(strings.NewReader(edit(t, runs, `^BenchmarkEndToEnd/passthrough-pooled-2 .*\n`, "")))
	if err != nil {
		t.Fatal(err)
	}
	f = Measure(p)
	if v, ok := f.Values["e2e_cpu_vs_passthrough_ratio"]; ok {
		t.Errorf("e2e_cpu_vs_passthrough_ratio = %v without the pooled pass-through", v)
	}
	if _, ok := f.Values["e2e_cpu_vs_unpooled_passthrough_ratio"]; !ok {
		t.Error("e2e_cpu_vs_unpooled_passthrough_ratio missing")
	}
	if got, want := RunProblems(p, f), "not measured: e2e_cpu_vs_passthrough_ratio (goal ≤ 1.15): not in the benchmark output"; !slices.Contains(got, want) {
		t.Errorf("run problems = %q, want %q among them", got, want)
	}

	// A gate run without its tick (before the end-to-end gate had one) does not say it
	// had one.
	md, _ = markdownOf(t, edit(t, runs, `\t [0-9.]+ redis-cpu-s/Mrecords`, ""))
	if strings.Contains(md, "redis-server every second included") || strings.Contains(md, "e2e_redis_cpu_s_per_million` | 0") {
		t.Errorf("RESULTS.md claims a tick the runs did not report:\n%s", md)
	}
}

// BenchmarkRealKafka's figures are ratios of the means over the runs, each side timed to
// the same end (internal/consume timeToSameEnd); the lines are two runs of it on a 2-core
// VM, 2026-11-28.
func TestRealKafkaRatios(t *testing.T) {
	const runs = `BenchmarkRealKafka/passthrough-2         	  300000	      3497 ns/op	       758.9 alloc-B/record	         1.522 cpu-s/Mrecords	        20.00 gc/Mrecords	         2.000 gomaxprocs	      3125 records/batch	    287427 records/s	       110.0 requests/Mrecords
BenchmarkRealKafka/gate-2                	  300000	      3392 ns/op	       537.0 alloc-B/record	         1.498 cpu-s/Mrecords	         0 failed-ticks	        16.67 gc/Mrecords	         2.000 gomaxprocs	      3226 records/batch	    305842 records/s	       230.0 redis-cmds/Mrecords	         0.09190 redis-cpu-s/Mrecords	       103.3 requests/Mrecords	         2.000 ticks
BenchmarkRealKafka/exactly-once-2        	  300000	      6103 ns/op	       758.9 alloc-B/record	         2.432 cpu-s/Mrecords	         0 failed-ticks	        26.67 gc/Mrecords	         2.000 gomaxprocs	      1538 records/batch	    169414 records/s	       290.0 redis-cmds/Mrecords	         0.1664 redis-cpu-s/Mrecords	       223.3 requests/Mrecords	         2.000 ticks
BenchmarkRealKafka/passthrough-2         	  300000	      2236 ns/op	       772.6 alloc-B/record	         1.265 cpu-s/Mrecords	        26.67 gc/Mrecords	         2.000 gomaxprocs	      3488 records/batch	    451637 records/s	        96.67 requests/Mrecords
BenchmarkRealKafka/gate-2                	  300000	      2253 ns/op	       578.9 alloc-B/record	         1.330 cpu-s/Mrecords	         0 failed-ticks	        13.33 gc/Mrecords	         2.000 gomaxprocs	      2970 records/batch	    472339 records/s	       160.0 redis-cmds/Mrecords	         0.05766 redis-cpu-s/Mrecords	       113.3 requests/Mrecords	         1.000 ticks
BenchmarkRealKafka/exactly-once-2        	  300000	      3444 ns/op	       698.5 alloc-B/record	         2.041 cpu-s/Mrecords	         0 failed-ticks	        26.67 gc/Mrecords	         2.000 gomaxprocs	      2703 records/batch	    297875 records/s	       280.0 redis-cmds/Mrecords	         0.1299 redis-cpu-s/Mrecords	       123.3 requests/Mrecords	         2.000 ticks
`
	checkFigures(t, runs, map[string]float64{
		"real_kafka_passthrough_records_per_s":  round((287427. + 451637) / 2),
		"real_kafka_gate_records_per_s":         round((305842. + 472339) / 2),
		"real_kafka_exactly_once_records_per_s": round((169414. + 297875) / 2),
		"real_kafka_e2e_vs_passthrough_ratio":   round((305842. + 472339) / (287427 + 451637)),
		"real_kafka_cpu_vs_passthrough_ratio":   round((1.498 + 1.330) / (1.522 + 1.265)),
		"real_kafka_eos_vs_alo_ratio":           round((169414. + 297875) / (305842 + 472339)),
	})
	// The ratio's note says what its clocks are: the same end for both sides.
	for _, r := range rows {
		if r.key == "real_kafka_e2e_vs_passthrough_ratio" {
			for _, s := range []string{"one clock for both", "every input record on the outputs", "commits"} {
				if !strings.Contains(r.note, s) {
					t.Errorf("real_kafka_e2e_vs_passthrough_ratio's note %q does not say %q", r.note, s)
				}
			}
			return
		}
	}
	t.Error("real_kafka_e2e_vs_passthrough_ratio has no row")
}

// BenchmarkRealKafkaReplicated's ceiling: the two pass-throughs' ratio is what
// exactly-once costs a franz-go program that does nothing else on the three brokers, beside
// the gate's own ratio; the lines are two runs of it on a 2-core VM, 2026-11-29.
func TestRealKafkaReplicatedCeiling(t *testing.T) {
	const runs = `BenchmarkRealKafkaReplicated/passthrough-2         	  300000	      4553 ns/op	       762.1 alloc-B/record	         1.514 cpu-s/Mrecords	        20.00 gc/Mrecords	         2.000 gomaxprocs	      3125 records/batch	    226729 records/s	       320.0 requests/Mrecords
BenchmarkRealKafkaReplicated/gate-2                	  300000	      4363 ns/op	       656.6 alloc-B/record	         2.027 cpu-s/Mrecords	         0 failed-ticks	        20.00 gc/Mrecords	         2.000 gomaxprocs	      2344 records/batch	    238730 records/s	       296.7 redis-cmds/Mrecords	         0.1388 redis-cpu-s/Mrecords	       426.7 requests/Mrecords	         2.000 ticks
BenchmarkRealKafkaReplicated/passthrough-eos-2     	  300000	      7348 ns/op	       751.2 alloc-B/record	         2.310 cpu-s/Mrecords	        23.33 gc/Mrecords	         2.000 gomaxprocs	      3125 records/batch	    136991 records/s	       370.0 requests/Mrecords
BenchmarkRealKafkaReplicated/exactly-once-2        	  300000	      5158 ns/op	       613.3 alloc-B/record	         1.868 cpu-s/Mrecords	         0 failed-ticks	        16.67 gc/Mrecords	         2.000 gomaxprocs	      3061 records/batch	    201513 records/s	       266.7 redis-cmds/Mrecords	         0.09986 redis-cpu-s/Mrecords	       326.7 requests/Mrecords	         3.000 ticks
BenchmarkRealKafkaReplicated/passthrough-2         	  300000	      4466 ns/op	       771.3 alloc-B/record	         1.697 cpu-s/Mrecords	        23.33 gc/Mrecords	         2.000 gomaxprocs	      2857 records/batch	    226849 records/s	       350.0 requests/Mrecords
BenchmarkRealKafkaReplicated/gate-2                	  300000	      5398 ns/op	       636.8 alloc-B/record	         2.371 cpu-s/Mrecords	         0 failed-ticks	        16.67 gc/Mrecords	         2.000 gomaxprocs	      2655 records/batch	    194505 records/s	       286.7 redis-cmds/Mrecords	         0.1634 redis-cpu-s/Mrecords	       376.7 requests/Mrecords	         3.000 ticks
BenchmarkRealKafkaReplicated/passthrough-eos-2     	  300000	      5552 ns/op	       775.0 alloc-B/record	         1.745 cpu-s/Mrecords	        23.33 gc/Mrecords	         2.000 gomaxprocs	      3226 records/batch	    180279 records/s	       310.0 requests/Mrecords
BenchmarkRealKafkaReplicated/exactly-once-2        	  300000	      6552 ns/op	       624.0 alloc-B/record	         2.242 cpu-s/Mrecords	         0 failed-ticks	        20.00 gc/Mrecords	         2.000 gomaxprocs	      2419 records/batch	    161820 records/s	       310.0 redis-cmds/Mrecords	         0.1745 redis-cpu-s/Mrecords	       413.3 requests/Mrecords	         3.000 ticks
`
	checkFigures(t, runs, map[string]float64{
		"real_kafka_replicated_passthrough_records_per_s":    round((226729. + 226849) / 2),
		"real_kafka_replicated_e2e_vs_passthrough_ratio":     round((238730. + 194505) / (226729 + 226849)),
		"real_kafka_replicated_passthrough_eos_vs_alo_ratio": round((136991. + 180279) / (226729 + 226849)),
		"real_kafka_replicated_eos_vs_alo_ratio":             round((201513. + 161820) / (238730 + 194505)),
		"real_kafka_replicated_eos_vs_eos_passthrough_ratio": round((201513. + 161820) / (136991 + 180279)),
	})
}

// checkFigures checks the figures the report derives from a benchmark's output lines.
func checkFigures(t *testing.T, lines string, want map[string]float64) {
	t.Helper()
	p, err := Parse(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	res := Measure(p).Rounded()
	for k, w := range want {
		if g, ok := res[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}

// BenchmarkRotationGate's figure: the per-user rule's whole gate ÷ the team rule's, CPU per
// record, ratio of the means; the lines' figures are a run of it on a 2-core VM, 2026-11-29
// (one line each, twice).
func TestRotationWholeGate(t *testing.T) {
	const runs = `BenchmarkRotationGate/rotation-team-rule-2         	 1000000	       988.3 ns/op	       1.631 cpu-s/Mrecords	   1011835 records/s
BenchmarkRotationGate/rotation-user-rule-2         	 1000000	      1750 ns/op	       2.491 cpu-s/Mrecords	    571549 records/s
BenchmarkRotationGate/rotation-team-rule-2         	  300000	      1172 ns/op	       1.815 cpu-s/Mrecords	    853315 records/s
BenchmarkRotationGate/rotation-user-rule-2         	  300000	      2121 ns/op	       2.906 cpu-s/Mrecords	    471370 records/s
`
	checkFigures(t, runs, map[string]float64{
		"rotation_whole_gate_team_rule_cpu_s_per_million": round((1.631 + 1.815) / 2),
		"rotation_whole_gate_user_rule_cpu_s_per_million": round((2.491 + 2.906) / 2),
		"rotation_whole_gate_cpu_vs_team_rule":            round((2.491 + 2.906) / (1.631 + 1.815)),
	})
}
