package main

import (
	"strings"
	"testing"
)

// RESULTS.md shows the fidelity chart when one was drawn, and says there is none when
// not: never "No chart yet" beside a drawn chart.
func TestChartTextFromTheRun(t *testing.T) {
	res := map[string]float64{"fleet_admitted_over_threshold": 1}
	drawn := Markdown(res, Machine{}, Run{Chart: "fidelity.svg"})
	if !strings.Contains(drawn, "the gate beside the baselines](fidelity.svg)\n") || strings.Contains(drawn, "No chart") {
		t.Errorf("with a chart drawn:\n%s", drawn)
	}
	none := Markdown(res, Machine{}, Run{})
	if !strings.Contains(none, "No chart in this run: `BenchmarkFidelity/ours` reported no `series_cap_window_*` points.") || strings.Contains(none, "](") {
		t.Errorf("with no chart drawn:\n%s", none)
	}
}

// markdownOf is RESULTS.md for raw, and its rounded figures.
func markdownOf(t *testing.T, raw string) (string, map[string]float64) {
	t.Helper()
	p, err := Parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	f := Measure(p)
	res := f.Rounded()
	return Markdown(res, Machine{}, Run{Fallbacks: f.Fallbacks, Problems: RunProblems(p, f), Input: p}), res
}

// The runs and processes RESULTS.md and the README name are those counted in the input,
// each test binary's output starting with its "goos:" line.
func TestProcessesCounted(t *testing.T) {
	md, res := markdownOf(t, fullRaw(t))
	for _, s := range []string{
		"the parallel check and the bare maps: medians of 16 runs, 15 of them interleaved, each in a process of its own) and, for the ratios the goal reads, `BenchmarkCheckBesideMap` (the check and the maps in turns of a million lookups, in 16 processes: the median of their ratios)",
		"in turns on one goroutine as a partition worker routes; 5 runs, each in a process of its own; medians over the runs)",
		"| `hotpath_beside_map_processes` | 16 |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q:\n%s", s, md)
		}
	}
	if tab := ReadmeTable(res, "x"); !strings.Contains(tab, "(the two in turns; median of 16 processes) | 1.2497 | ≤ 1.5 | yes |") {
		t.Errorf("README table:\n%s", tab)
	}

	// Three processes, the check beside the map and BenchmarkCheck in each, one of them
	// running BenchmarkCheck twice (-count 2), none in a part.
	var in strings.Builder
	for i := range 3 {
		in.WriteString("goos: linux\npkg: github.com/capturegate/gate/internal/limit\n")
		for range 1 + i/2 {
			in.WriteString("BenchmarkCheck/zipf100k/parallel/divert-batchclock-2 \t 30000000\t 40 ns/op\nBenchmarkCheck/zipf100k/parallel/baremap-2 \t 30000000\t 30 ns/op\n")
		}
		in.WriteString("BenchmarkCheckBesideMap-2 \t 1\t 1 ns/op\t 40 check_ns/op\t 1.3 check_vs_map\t 1.2 check_vs_map_copied\t 33 map_copied_ns/op\t 30 map_ns/op\n")
	}
	md, res = markdownOf(t, in.String())
	if !strings.Contains(md, "the parallel check and the bare maps: medians of 4 runs in 3 processes) and, for the ratios the goal reads, `BenchmarkCheckBesideMap` (the check and the maps in turns of a million lookups, in 3 processes:") {
		t.Errorf("RESULTS.md:\n%s", md)
	}
	if tab := ReadmeTable(res, "x"); !strings.Contains(tab, "(the two in turns; median of 3 processes) | 1.3 |") {
		t.Errorf("README table:\n%s", tab)
	}

	// Without BenchmarkCheckBesideMap: the fallback, said as such.
	md, _ = markdownOf(t, edit(t, fullRaw(t), `^BenchmarkCheckBesideMap-2 .*\n`, ""))
	if !strings.Contains(md, "and, for the ratios the goal reads, not `BenchmarkCheckBesideMap`, which is missing from this run: the one-after-the-other medians stand in (a fallback)") {
		t.Errorf("RESULTS.md:\n%s", md)
	}
}

// Where the end-to-end client and broker ran is what their runs said: each logs where it
// was bound, or that binding fell back and why (internal/consume e2ePin).
func TestBindingFromTheRun(t *testing.T) {
	full := fullRaw(t)
	const bound = "the client bound to one CPU with GOMAXPROCS 1 as the chart runs the gate by default and the broker to another"
	md, res := markdownOf(t, full)
	if res["e2e_runs_bound"] != 24 || res["e2e_runs_not_bound"] != 0 || !strings.Contains(md, bound) ||
		!strings.Contains(md, "| `e2e_gate_cpu_s_per_million_records` | 1.1 | — | — | the bench process's CPU (user + system) per million records, bound to one CPU with GOMAXPROCS 1 (the chart's default), the broker in a process of its own bound to another; mean over the runs |") {
		t.Errorf("bound: %v\n%s", res, md)
	}

	// Every run fell back, as a run with one CPU usable says (-test.v: the log line
	// between the name and the figures).
	notBound := edit(t, full, `^(BenchmarkEndToEnd/[\w-]+-2 .*)\n--- BENCH: .*\n .*client bound to CPU.*\n`,
		"    bench_test.go:137: client and broker not bound to CPUs of their own: 1 CPU usable\n$1\n")
	md, res = markdownOf(t, notBound)
	for _, s := range []string{
		"so the CPU figures are the client's alone, the client and the broker not bound to CPUs of their own: binding them fell back in every run (1 CPU usable), so the two shared the cores;",
		"per million records, not bound to a CPU (binding fell back: 1 CPU usable), the broker in a process of its own; mean over the runs |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q:\n%s", s, md)
		}
	}
	if res["e2e_runs_bound"] != 0 || res["e2e_runs_not_bound"] != 24 || strings.Contains(md, "bound to one CPU") {
		t.Errorf("not bound: %v\n%s", res, md)
	}
	if tab := ReadmeTable(res, "x"); !strings.Contains(tab, "(medians; client and broker not bound to CPUs of their own)") {
		t.Errorf("README table:\n%s", tab)
	}

	// Some bound, some not.
	mixed := edit(t, full, `client bound to CPU 0 \(GOMAXPROCS 1\), broker to CPU 1\n(BenchmarkEndToEnd/passthrough-pooled)`,
		"client and broker not bound to CPUs of their own: binding the bench process to CPU 0: operation not permitted\n$1")
	md, _ = markdownOf(t, mixed)
	if !strings.Contains(md, "the client bound to one CPU with GOMAXPROCS 1 and the broker to another in 18 of the 24 runs; in the others binding them fell back (binding the bench process to CPU 0: operation not permitted)") {
		t.Errorf("mixed:\n%s", md)
	}

	// An output that says neither (before the runs said it) claims neither.
	md, res = markdownOf(t, edit(t, full, `^.*client bound to CPU.*\n`, ""))
	if _, ok := res["e2e_runs_bound"]; ok || strings.Contains(md, bound) || !strings.Contains(md, "whether the client and the broker were bound to CPUs of their own is not in the benchmark output") {
		t.Errorf("neither said: %v\n%s", res, md)
	}
}
