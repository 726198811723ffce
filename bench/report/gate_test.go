package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fullRaw is testdata/full.txt: synthetic output of every benchmark the report reads,
// each goal met.
func fullRaw(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/full.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// edit returns raw with each line matching re replaced by repl (regexp.ReplaceAllString's
// $1 and so on); it fails the test when re matches no line.
func edit(t *testing.T, raw, re, repl string) string {
	t.Helper()
	rx := regexp.MustCompile("(?m)" + re)
	if !rx.MatchString(raw) {
		t.Fatalf("no line of the input matches %q", re)
	}
	return rx.ReplaceAllString(raw, repl)
}

// gateCase is an input the gate must refuse, and what its stderr must name.
type gateCase struct {
	name, raw string
	want      []string // each a line of the report's stderr, without "report: "
}

func gateCases(t *testing.T) []gateCase {
	full := fullRaw(t)
	return []gateCase{{
		// A part that did not run: BenchmarkRealKafka's lines are not in the input.
		name: "missing figure",
		raw:  edit(t, full, `^BenchmarkRealKafka(Replicated)?/.*\n`, ""),
		want: []string{
			"not measured: real_kafka_e2e_vs_passthrough_ratio (goal ≥ 0.9): not in the benchmark output",
			"not measured: real_kafka_eos_vs_alo_ratio (goal ≥ 0.85): not in the benchmark output",
			"not measured: real_kafka_eos_vs_eos_passthrough_ratio (goal ≥ 0.9): not in the benchmark output",
			"not measured: real_kafka_replicated_eos_vs_alo_ratio (goal ≥ 0.85): not in the benchmark output",
			"not measured: real_kafka_replicated_eos_vs_eos_passthrough_ratio (goal ≥ 0.9): not in the benchmark output",
		},
	}, {
		name: "missed goal",
		raw:  edit(t, full, `^(BenchmarkFleetProcessWindow-2 .*) 1\.002 worst_window`, "$1 1.05 worst_window"),
		want: []string{"goal missed: fleet_process_worst_window = 1.05, goal within [0.97, 1.03]: above by 0.02"},
	}, {
		// 0.00003 is 0 at four decimals, which meets "≤ 0": the unrounded figure does not.
		name: "rounds to the goal",
		raw:  edit(t, full, `^(BenchmarkCatchUp-2 .*) 0 false_overflow_event`, "$1 0.00003 false_overflow_event"),
		want: []string{"goal missed: catchup_false_overflow_event = 0.00003, goal ≤ 0: over by 0.00003"},
	}, {
		// No BenchmarkCheckBesideMap: BenchmarkCheck's sequential ratio stands in.
		name: "fallback",
		raw:  edit(t, full, `^BenchmarkCheckBesideMap-2 .*\n`, ""),
		want: []string{
			"fallback: hotpath_vs_map_copied_ratio = " + format(round(seqRatio(t, full, benchMapCopied))) + ": BenchmarkCheck's ratio of medians, one after the other, stands in: no BenchmarkCheckBesideMap check_vs_map_copied in the input",
			"fallback: hotpath_vs_map_ratio = " + format(round(seqRatio(t, full, benchMapParallel))) + ": BenchmarkCheck's ratio of medians, one after the other, stands in: no BenchmarkCheckBesideMap check_vs_map in the input",
		},
	}, {
		// Without Java: the real-Kafka benchmarks skip (run.sh runs them with -test.v,
		// which prints why), and the part exits 0.
		name: "skipped",
		raw: edit(t, edit(t, full, `^BenchmarkRealKafka/.*\n`, ""), `^=== bench part: real-kafka\n`,
			"=== bench part: real-kafka\nBenchmarkRealKafka\n    testing.go:31: kafkatest: java not found on PATH; skipping (set CI=true to make this a failure)\n--- SKIP: BenchmarkRealKafka\n"),
		want: []string{
			"benchmark skipped: BenchmarkRealKafka in part real-kafka: testing.go:31: kafkatest: java not found on PATH; skipping (set CI=true to make this a failure)",
			"not measured: real_kafka_e2e_vs_passthrough_ratio (goal ≥ 0.9): not in the benchmark output",
			"not measured: real_kafka_eos_vs_alo_ratio (goal ≥ 0.85): not in the benchmark output",
			"not measured: real_kafka_eos_vs_eos_passthrough_ratio (goal ≥ 0.9): not in the benchmark output",
		},
	}, {
		// Spike protection's learner: the onsets' share over its goal, an import's
		// figure at the team's peak after the learner accepted it, a spike over the floor
		// in four never detected.
		name: "spike goals missed",
		raw: edit(t, full, `^(BenchmarkSpikeTrace-2 .*) 0\.004 adaptive_onset_diverted_share\t 0 adaptive_peak_false_overflow_settled(.*) 0\.02 adaptive_undetected_spike_share_over_floor`,
			"$1 0.0051 adaptive_onset_diverted_share\t 206612 adaptive_peak_false_overflow_settled$2 0.25 adaptive_undetected_spike_share_over_floor"),
		want: []string{
			"goal missed: adaptive_onset_diverted_share = 0.0051, goal ≤ 0.005: over by 0.0001",
			"goal missed: adaptive_peak_false_overflow_settled = 206612, goal = 0: off by 206612",
			"goal missed: adaptive_undetected_spike_share_over_floor = 0.25, goal ≤ 0.1: over by 0.15",
		},
	}, {
		// A trace from before the learner-derived onsets and the undetected share.
		name: "spike figures missing",
		raw:  edit(t, full, `^(BenchmarkSpikeTrace-2 .*)\t 4 adaptive_import_accepted_night_max(.*)\t 0\.02 adaptive_undetected_spike_share_over_floor`, "$1$2"),
		want: []string{
			"not measured: adaptive_import_accepted_night_max (goal ≤ 7): not in the benchmark output",
			"not measured: adaptive_undetected_spike_share_over_floor (goal ≤ 0.1): not in the benchmark output",
		},
	}, {
		name: "failed part",
		raw:  edit(t, full, `^(real-kafka-latency +\d+ s)$`, "$1  FAILED"),
		want: []string{"part failed: real-kafka-latency (bench/run.sh)"},
	}, {
		// A share of nothing (0 ÷ 0) and a ratio to 0, as go test prints them: named, not
		// a report that dies on results.json ("json: unsupported value: NaN") having
		// written nothing, nor +Inf meeting "≥ 0.9".
		name: "not a number",
		raw: edit(t, edit(t, full, `^(BenchmarkCatchUp-2 .*) 0 false_overflow_event`, "$1 NaN false_overflow_event"),
			`^(BenchmarkSpikeTrace-2 .*\t) *[0-9.]+ adaptive_spike_recall\t`, "$1 +Inf adaptive_spike_recall\t"),
		want: []string{
			"not a number: adaptive_spike_recall = +Inf (goal ≥ 0.9): left out of results.json",
			"not a number: catchup_false_overflow_event = NaN (goal ≤ 0): left out of results.json",
		},
	}, {
		// BenchmarkFidelity's figures the same: not "not in the benchmark output".
		name: "fidelity not a number",
		raw:  edit(t, full, `^(BenchmarkFidelity/ours-2 .*\t) *[0-9.]+ divert_detect_ticks\t`, "$1 NaN divert_detect_ticks\t"),
		want: []string{"not a number: divert_detect_ticks = NaN (goal ≤ 3): left out of results.json"},
	}}
}

// seqRatio is the check's median over the map's, BenchmarkCheck's, in raw.
func seqRatio(t *testing.T, raw, mapBench string) float64 {
	p, err := Parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := p.Bench.medianRatio(benchHotParallel, mapBench, "ns/op")
	if !ok {
		t.Fatalf("no %s in the input", mapBench)
	}
	return r
}

// TestGatePassesFull: the input with every figure and every goal met is no problem.
func TestGatePassesFull(t *testing.T) {
	p, err := Parse(strings.NewReader(fullRaw(t)))
	if err != nil {
		t.Fatal(err)
	}
	f := Measure(p)
	if probs := Problems(p, f); len(probs) > 0 {
		t.Errorf("problems in testdata/full.txt:\n%s", strings.Join(probs, "\n"))
	}
	for _, r := range goalRows() {
		if _, ok := f.Values[r.key]; !ok {
			t.Errorf("testdata/full.txt has no %s", r.key)
		}
	}
}

// TestGateProblems: each input fails the gate, its problem named, and only that.
func TestGateProblems(t *testing.T) {
	for _, c := range gateCases(t) {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse(strings.NewReader(c.raw))
			if err != nil {
				t.Fatal(err)
			}
			got := Problems(p, Measure(p))
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestRoundingKeepsAMiss: a figure rounding would make meet its goal keeps the decimals
// that miss it, in results.json and RESULTS.md alike; one that meets it either way is
// rounded as ever.
func TestRoundingKeepsAMiss(t *testing.T) {
	f := Figures{Values: map[string]float64{
		"catchup_false_overflow_event": 0.0000312,
		"sync_read_reduction":          0.9499962, // ≥ 0.95: 0.95 at four decimals
		"tick_p99_ms_1m_teams":         1000.3,    // ≤ 1000: 1000 as a whole number
		"catchup_false_overflow_wall":  0.0000312, // no goal
		"hotpath_vs_map_ratio":         1.23456,
	}}
	res := f.Rounded()
	for k, w := range map[string]float64{
		"catchup_false_overflow_event": 0.00003,
		"sync_read_reduction":          0.949996,
		"tick_p99_ms_1m_teams":         1000.3,
		"catchup_false_overflow_wall":  0,
		"hotpath_vs_map_ratio":         1.2346,
	} {
		if res[k] != w {
			t.Errorf("%s = %v, want %v", k, res[k], w)
		}
	}
	md := Markdown(res, Machine{}, Run{})
	for _, s := range []string{
		"| `catchup_false_overflow_event` | 0.00003 | ≤ 0 | no |",
		"- `catchup_false_overflow_event` = 0.00003, goal ≤ 0: over by 0.00003.",
		"| `sync_read_reduction` | 0.949996 | ≥ 0.95 | no |",
		"| `tick_p99_ms_1m_teams` | 1000.3 | ≤ 1000 | no |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q:\n%s", s, md)
		}
	}
}

// RESULTS.md says which figures came from a fallback, and lists the run's problems.
func TestMarkdownNamesRunProblems(t *testing.T) {
	c := gateCases(t)[3] // fallback
	p, err := Parse(strings.NewReader(c.raw))
	if err != nil {
		t.Fatal(err)
	}
	f := Measure(p)
	md := Markdown(f.Rounded(), Machine{}, Run{Fallbacks: f.Fallbacks, Problems: RunProblems(p, f)})
	for _, s := range []string{
		"## Problems with this run\n\n`make bench` failed on each of these",
		"- " + c.want[0] + "\n",
		"| ≤ 1.5 | yes | **fallback**: BenchmarkCheck's ratio of medians, one after the other, stands in: no BenchmarkCheckBesideMap check_vs_map in the input (the figure meant: ÷ bare sharded map",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q:\n%s", s, md)
		}
	}
}

// TestMainExitStatus runs the command itself (this test binary, re-executed, runs main)
// on each input: it writes results.json and RESULTS.md, then exits gateStatus with a line
// on stderr for each problem; on the full input it exits 0 and prints nothing there.
func TestMainExitStatus(t *testing.T) {
	if args := os.Getenv("BENCH_REPORT_MAIN"); args != "" {
		os.Args = append([]string{"report"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	cases := append([]gateCase{{name: "full", raw: fullRaw(t)}}, gateCases(t)...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := func(name string) string { return filepath.Join(dir, name) }
			cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitStatus$")
			cmd.Env = append(os.Environ(), "BENCH_REPORT_MAIN="+strings.Join([]string{
				"-json", out("results.json"), "-md", out("RESULTS.md"), "-svg", out("fidelity.svg"), "-readme-file", out("README.md")}, "\n"))
			cmd.Stdin = strings.NewReader(c.raw)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			status := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"results.json", "RESULTS.md", "fidelity.svg"} {
				if _, err := os.Stat(out(f)); err != nil {
					t.Errorf("not written: %v", err)
				}
			}
			if len(c.want) == 0 {
				if status != 0 || stderr.Len() > 0 {
					t.Errorf("exit status %d, stderr:\n%s", status, &stderr)
				}
				// The chart drawn, linked from RESULTS.md beside it.
				if md, err := os.ReadFile(out("RESULTS.md")); err != nil || !bytes.Contains(md, []byte("the gate beside the baselines](fidelity.svg)\n")) {
					t.Errorf("RESULTS.md does not link the chart drawn (%v):\n%s", err, md)
				}
				return
			}
			if status != gateStatus {
				t.Errorf("exit status %d, want %d; stderr:\n%s", status, gateStatus, &stderr)
			}
			var lines []string
			for _, w := range c.want {
				lines = append(lines, "report: "+w)
			}
			want := strings.Join(lines, "\n") + "\n"
			if got := stderr.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "problem(s): the run does not pass") {
				t.Errorf("stderr:\n%s\nwant it to start:\n%s", got, want)
			}
		})
	}
}

// runMain runs the command (this test binary, re-executed as in TestMainExitStatus) on
// raw, writing into a temporary directory, and returns that directory and its stderr.
func runMain(t *testing.T, raw string) (dir, stderr string) {
	t.Helper()
	dir = t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitStatus$")
	cmd.Env = append(os.Environ(), "BENCH_REPORT_MAIN="+strings.Join([]string{
		"-json", out("results.json"), "-md", out("RESULTS.md"), "-svg", out("fidelity.svg"), "-readme-file", out("README.md")}, "\n"))
	cmd.Stdin = strings.NewReader(raw)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	_ = cmd.Run()
	return dir, errb.String()
}

// TestMachineFromTheRun: RESULTS.md's machine line (and so the README's "Measured by
// make bench on ...") names the processor, CPUs and Go version the benchmarks ran on, as
// bench/run.sh's machine line and go test's cpu lines give them, not those of the machine
// that re-derives the report from bench/raw.txt.gz.
func TestMachineFromTheRun(t *testing.T) {
	raw := edit(t, edit(t, fullRaw(t), `^machine: .*$`, "machine: Test CPU 9000 @ 1.00GHz, 96 CPUs, go1.99.7"), `^cpu: .*$`, "cpu: Test CPU 9000 @ 1.00GHz")
	dir, stderr := runMain(t, raw)
	md, err := os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr)
	}
	if want := "\nMachine: Test CPU 9000 @ 1.00GHz, 96 CPUs, go1.99.7, "; !bytes.Contains(md, []byte(want)) {
		t.Errorf("RESULTS.md lacks %q:\n%s", want, md[:min(len(md), 600)])
	}
	// run.sh's started line dates the run: a report re-derived later keeps the run's date.
	dir, stderr = runMain(t, edit(t, raw, `^(machine: .*)$`, "$1\nstarted: 2001-02-03 04:05 UTC"))
	md, err = os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr)
	}
	if want := "\nMachine: Test CPU 9000 @ 1.00GHz, 96 CPUs, go1.99.7, 2001-02-03 04:05 UTC, "; !bytes.Contains(md, []byte(want)) {
		t.Errorf("with run.sh's started line, RESULTS.md lacks %q:\n%s", want, md[:min(len(md), 600)])
	}
	// Without run.sh's line, go test's cpu line names the processor.
	dir, stderr = runMain(t, edit(t, raw, `^machine: .*\n`, ""))
	md, err = os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr)
	}
	if want := "\nMachine: Test CPU 9000 @ 1.00GHz, "; !bytes.Contains(md, []byte(want)) {
		t.Errorf("without the machine line, RESULTS.md lacks %q:\n%s", want, md[:min(len(md), 600)])
	}
}

// A figure that meets its goal by less than go test's rounding of what it printed is not
// shown met: 1.0304 misses ≤ 1.03 but prints as 1.030, and was judged met (a review);
// 1000.49 prints as 1000 against ≤ 1000. One clear of the rounding is met, as is a count
// of 0 against ≤ 0.
func TestGoalAtItsLimitAfterRoundingIsNotShownMet(t *testing.T) {
	for _, c := range []struct {
		key      string
		measured float64
		shown    bool
	}{
		{"fleet_process_worst_window", 1.0304, false},
		{"fleet_process_worst_window", 1.028, true},
		{"tick_p99_ms_1m_teams", 1000.49, false},
		{"tick_p99_ms_1m_teams", 998, true},
		{"bench_failed_ticks", 0, true},
	} {
		// What go test prints of it, read back as the report reads raw.txt.
		var r testing.BenchmarkResult
		r.N = 1
		r.Extra = map[string]float64{"x": c.measured}
		f := strings.Fields(r.String())
		printed, err := strconv.ParseFloat(f[slices.Index(f, "x")-1], 64)
		if err != nil {
			t.Fatal(err)
		}
		missed := GoalsMissed(Figures{Values: map[string]float64{c.key: printed}})
		if shown := len(missed) == 0; shown != c.shown {
			t.Errorf("%s measured %v, printed %v: shown met %v, want %v (%q)", c.key, c.measured, printed, shown, c.shown, missed)
		}
	}
}

// TestMedianAndFarthestKeepNotANumber: a run that printed NaN or +Inf for a figure whose
// key is a median over the runs (route_*, hotpath_vs_map_ratio) or the run farthest from 1
// (the worst windows) makes the figure not a number, which fails make bench, as a mean's
// does: the median and the farthest skipped it, and the other runs' figure met the goal.
func TestMedianAndFarthestKeepNotANumber(t *testing.T) {
	for _, c := range []struct{ key, raw string }{
		{"route_one_rule_vs_no_file_ratio",
			"BenchmarkRouteTurns \t 1\t 1 ns/op\t NaN 1rule/nofile\n" +
				"BenchmarkRouteTurns \t 1\t 1 ns/op\t 1.000 1rule/nofile\n" +
				"BenchmarkRouteTurns \t 1\t 1 ns/op\t 1.010 1rule/nofile\n"},
		{"route_one_rule_vs_no_file_ratio",
			"BenchmarkRouteTurns \t 1\t 1 ns/op\t 1.000 1rule/nofile\n" +
				"BenchmarkRouteTurns \t 1\t 1 ns/op\t 1.010 1rule/nofile\n" +
				"BenchmarkRouteTurns \t 1\t 1 ns/op\t +Inf 1rule/nofile\n"},
		{"fleet_process_worst_window",
			"BenchmarkFleetProcessWindow-2 \t 1\t 1 ns/op\t 1.001 worst_window\n" +
				"BenchmarkFleetProcessWindow-2 \t 1\t 1 ns/op\t NaN worst_window\n"},
	} {
		p, err := Parse(strings.NewReader(c.raw))
		if err != nil {
			t.Fatal(err)
		}
		f := Measure(p)
		if v, ok := f.Values[c.key]; ok {
			t.Errorf("%s = %v from runs one of which printed no number:\n%s", c.key, v, c.raw)
		}
		want := "not a number: " + c.key
		if !slices.ContainsFunc(Problems(p, f), func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no %q among the problems: %q", want, Problems(p, f))
		}
	}
}
