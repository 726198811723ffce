package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// gates_per_redis_core is the least over BenchmarkFleetRedis/ours' fleet sizes 1 to 64: a
// size missing from the input (its sub-benchmark renamed, or not run) leaves the figure
// not measured, which fails make bench, rather than the least of the others standing for
// it; and a size that measures 0 gates a core is that least, not skipped.
func TestGatesPerRedisCoreEverySize(t *testing.T) {
	full := fullRaw(t)
	f := Measure(mustParse(t, full))
	if v, ok := f.Values["gates_per_redis_core"]; !ok || v != 72.84 {
		t.Fatalf("gates_per_redis_core = %v (present %v), want 72.84, the least of the four sizes", v, ok)
	}

	// n64 renamed: the three others meet the goal (≥ 64) without it.
	p := mustParse(t, edit(t, full, `^BenchmarkFleetRedis/ours/n64-2 `, "BenchmarkFleetRedis/ours/gates64-2 "))
	f = Measure(p)
	if v, ok := f.Values["gates_per_redis_core"]; ok {
		t.Errorf("gates_per_redis_core = %v without BenchmarkFleetRedis/ours/n64: want it not measured", v)
	}
	if got, want := RunProblems(p, f), "not measured: gates_per_redis_core (goal ≥ 64): not in the benchmark output"; !slices.Contains(got, want) {
		t.Errorf("run problems = %q, want %q among them", got, want)
	}
	if md := Markdown(f.Rounded(), Machine{}, Run{Input: p}); !strings.Contains(md, "| `gates_per_redis_core` | not measured | ≥ 64 | — |") {
		t.Errorf("RESULTS.md does not say gates_per_redis_core was not measured")
	}

	// One size at 0 gates a core: the least is 0, a goal missed.
	f = Measure(mustParse(t, edit(t, full, `^(BenchmarkFleetRedis/ours/n1-2 \t 1\t 1 ns/op\t) 72\.84 gates_per_core`, "$1 0 gates_per_core")))
	if v, ok := f.Values["gates_per_redis_core"]; !ok || v != 0 {
		t.Errorf("gates_per_redis_core = %v (present %v) with n1 at 0 gates a core, want 0", v, ok)
	}
	if got, want := GoalsMissed(f), "goal missed: gates_per_redis_core = 0, goal ≥ 64: short by 64"; !slices.Contains(got, want) {
		t.Errorf("goals missed = %q, want %q among them", got, want)
	}
}

func mustParse(t *testing.T, raw string) *Parsed {
	t.Helper()
	p, err := Parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// RESULTS.md shows every figure of results.json: BenchmarkFleetRedis' per-size figures,
// whose least is gates_per_redis_core, in the Speed table, though their keys start with
// fleet_ as BenchmarkFidelity's do; and the Fidelity section's every-scenario table holds
// BenchmarkFidelity's scenarios (_n<instances>_x<rate>) only, not BenchmarkDivertSwitches'
// figures, which the Speed table has.
func TestResultsMarkdownShowsEveryFigure(t *testing.T) {
	res := Measure(mustParse(t, fullRaw(t))).Rounded()
	md := Markdown(res, Machine{}, Run{})
	speed, fid, ok := strings.Cut(md, "\n## Fidelity\n")
	if !ok {
		t.Fatal("RESULTS.md has no Fidelity section")
	}
	for _, n := range fleetRedisSizes {
		for _, k := range []string{"fleet_gates_per_redis_core_n%d", "fleet_redis_cpu_n%d", "fleet_tick_p50_ms_n%d", "fleet_tick_p99_ms_n%d"} {
			key := fmt.Sprintf(k, n)
			if _, ok := res[key]; !ok {
				t.Fatalf("testdata/full.txt gives no %s", key)
			}
			if !strings.Contains(speed, "| `"+key+"` | "+format(res[key])+" |") {
				t.Errorf("RESULTS.md's Speed table lacks %s = %v", key, res[key])
			}
		}
	}
	for _, key := range []string{"divert_switches_per_min_swing_n4", "divert_switches_per_min_swing_n4_baseline", "divert_diverted_x0.8_n4", "divert_release_after_calm_s_n4"} {
		if strings.Contains(fid, "`"+key+"`") {
			t.Errorf("RESULTS.md's Fidelity section lists %s, a BenchmarkDivertSwitches figure, as a scenario", key)
		}
		if !strings.Contains(speed, "| `"+key+"` |") {
			t.Errorf("RESULTS.md's Speed table lacks %s", key)
		}
	}
	if !strings.Contains(fid, "| `cap_admitted_over_threshold_n4_x2` |") {
		t.Errorf("RESULTS.md's Fidelity section lacks the scenario cap_admitted_over_threshold_n4_x2:\n%s", fid)
	}
}

// The worst-window figures are the run farthest from 1, not the runs' mean: with -count 2
// (or a second iteration), a run at 0.95 and one at 1.05 made 1, the goal met (a review).
func TestWorstWindowIsTheWorstRun(t *testing.T) {
	raw := "BenchmarkFleetProcessWindow-2 \t 1\t 1 ns/op\t 0.95 worst_window\n" +
		"BenchmarkFleetProcessWindow-2 \t 1\t 1 ns/op\t 1.05 worst_window\n" +
		"BenchmarkFleetUserRule-2 \t 1\t 1 ns/op\t 1.01 worst_window\n" +
		"BenchmarkFleetUserRule-2 \t 1\t 1 ns/op\t 0.90 worst_window\n"
	f := Measure(mustParse(t, raw))
	for key, want := range map[string]float64{"fleet_process_worst_window": 0.95, "fleet_user_rule_admitted_worst_window": 0.90} {
		if v, ok := f.Values[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v, the run farthest from 1", key, v, ok, want)
		}
		if missed := GoalsMissed(f); !slices.ContainsFunc(missed, func(s string) bool { return strings.HasPrefix(s, "goal missed: "+key+" ") }) {
			t.Errorf("goals missed = %q, want %s among them", missed, key)
		}
	}
}
