package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// docFigure is a figure a page of docs/ gives, undated, as the current one: want is the
// text the page must hold (its whitespace collapsed) as bench/results.json words it.
type docFigure struct {
	file, want string
}

// docFigures are the undated figures of docs/ that quote a bench figure. A figure dated
// as an older run's ("the `make bench` of …") is history and stays out of this list.
func docFigures(res map[string]float64) (figs []docFigure, missing []string) {
	// get is res[key], noting a key res lacks: read as 0, it would match a page's 0.
	get := func(key string) float64 {
		v, ok := res[key]
		if !ok && !slices.Contains(missing, key) {
			missing = append(missing, key)
		}
		return v
	}
	n := func(key string, ns ...string) []string {
		var out []string
		for _, s := range ns {
			out = append(out, format(get(key+"_n"+s)))
		}
		return out
	}
	holdRow := func(label, key string) string {
		var base []string
		for _, s := range []string{"1", "2", "4"} {
			base = append(base, format(get(key+"_n"+s+"_baseline")))
		}
		return "| " + label + " | " + strings.Join(n(key, "1", "2", "4"), " | ") + " | " + strings.Join(base, " / ") + " |"
	}
	// millions is a range of records/s in millions, one decimal, least first.
	millions := func(a, b string) string {
		lo, hi := get(a), get(b)
		if lo > hi {
			lo, hi = hi, lo
		}
		// One decimal, or two where one would print the two alike ("0.8 to 0.8").
		for d := 1; ; d++ {
			if l, h := fmt.Sprintf("%.*f", d, lo/1e6), fmt.Sprintf("%.*f", d, hi/1e6); l != h || d == 3 {
				return l + " to " + h + " million"
			}
		}
	}
	metOrMissed := func(met bool) string {
		if met {
			return "met"
		}
		return "**missed**"
	}
	figs = []docFigure{
		{"docs/benchmarks.md", "Four real gate processes (`BenchmarkFleetProcessWindow`) hold a capped team at 2 × to " +
			format(get("fleet_process_worst_window")) + " of its limit, worst window."},
		{"docs/benchmarks.md", holdRow("a minute swinging around the limit (1.33 × 3 s, 0.67 × 3 s): switches", "divert_switches_per_min_swing")},
		{"docs/benchmarks.md", holdRow("a minute steady at 1.2 ×: switches", "divert_switches_steady")},
		{"docs/benchmarks.md", holdRow("a minute at 0.8 ×: records diverted", "divert_diverted_x0.8")},
		{"docs/benchmarks.md", "| 20 s at 2 ×, then 0.3 ×: s from the count under 80 % to the last gate's release (hold 10 s) | " +
			strings.Join(n("divert_release_after_calm_s", "1", "2", "4"), " | ") + " |"},
		{"docs/benchmarks.md", "| same: s between the first and the last gate's release | " +
			strings.Join(n("divert_release_spread_s", "1", "2", "4"), " | ") + " |"},
		{"docs/design.md", "One rule costs what no file costs (" + format(get("route_one_rule_vs_no_file_ratio")) +
			" ×); three rules cost " + format(get("route_three_rules_vs_one_rule_ratio")) + " × one"},
		{"docs/design.md", fmt.Sprintf("a gate costs Redis %.2f × what it did", get("redis_cpu_vs_baseline"))},
		{"docs/benchmarks.md", format(get("redis_commands_per_tick_rules3")) + " commands and " + format(get("redis_writes_per_tick_rules3")) +
			" counts written a tick, " + format(get("redis_cpu_s_per_million_events_rules3")) + " CPU-s per million events; " +
			format(get("redis_cpu_rules3_vs_one_rule")) + " × the one rule's Redis CPU and " + format(get("redis_commands_rules3_vs_one_rule")) + " × its commands"},
		{"docs/benchmarks.md", "no file " + format(get("route_ns_per_record_no_file")) + " ns a record, one rule " + format(get("route_ns_per_record_one_rule")) +
			", three rules " + format(get("route_ns_per_record_three_rules")) + "; **one rule ÷ no file " + format(get("route_one_rule_vs_no_file_ratio")) +
			"** (goal ≤ 1.05, " + metOrMissed(get("route_one_rule_vs_no_file_ratio") <= 1.05) + "), **three rules ÷ one rule " +
			format(get("route_three_rules_vs_one_rule_ratio")) + "** (goal ≤ 1.2, " + metOrMissed(get("route_three_rules_vs_one_rule_ratio") <= 1.2) + ")"},
		{"docs/rules.md", "it reads and decides " + millions("replay_records_per_s", "real_kafka_replay_records_per_s") +
			" records a second on its two workers (a per-user rule and a team rule; " +
			millions("replay_one_worker_records_per_s", "real_kafka_replay_one_worker_records_per_s") + " on one)"},
		{"docs/rules.md", fmt.Sprintf("It needs about %.1f µs of CPU a record", get("replay_cpu_ns_per_record")/1e3)},
	}
	return figs, missing
}

// TestDocFiguresFromResults keeps the undated bench figures of docs/ equal to
// bench/results.json, as TestReadmeHeadlineTable does the README's: after `make bench`,
// write each one this test names as the new run gives it (or date it as the older run's
// and take it out of docFigures).
func TestDocFiguresFromResults(t *testing.T) {
	res, err := readResults("../results.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range docProblems(t, res) {
		t.Error(p)
	}
}

// docProblems is what TestDocFiguresFromResults finds wrong with the docs' figures
// against res, one line each.
func docProblems(t *testing.T, res map[string]float64) []string {
	t.Helper()
	var out []string
	docs := map[string]string{}
	figs, missing := docFigures(res)
	for _, k := range missing {
		out = append(out, fmt.Sprintf("bench/results.json has no %s, which docs/ quote", k))
	}
	for _, f := range figs {
		doc, ok := docs[f.file]
		if !ok {
			b, err := os.ReadFile("../../" + f.file)
			if err != nil {
				t.Fatal(err)
			}
			doc = strings.Join(strings.Fields(string(b)), " ")
			docs[f.file] = doc
		}
		if !strings.Contains(doc, f.want) {
			out = append(out, fmt.Sprintf("%s does not say what bench/results.json does: want %q", f.file, f.want))
		}
	}
	return out
}

// TestDocFiguresNeedTheirKeys: a figure the docs quote that results.json lacks fails the
// test, rather than being checked as 0 (the docs' "0 | 0 | 0" of records diverted at 0.8 ×
// matched a results.json without them).
func TestDocFiguresNeedTheirKeys(t *testing.T) {
	res, err := readResults("../results.json")
	if err != nil {
		t.Fatal(err)
	}
	if p := docProblems(t, res); len(p) > 0 {
		t.Fatalf("the committed figures already disagree with docs/: %v", p)
	}
	for _, k := range []string{"divert_diverted_x0.8_n4", "divert_release_spread_s_n2", "redis_cpu_vs_baseline"} {
		less := maps.Clone(res)
		delete(less, k)
		if p := docProblems(t, less); len(p) == 0 {
			t.Errorf("docs/ checked against a results.json without %s (%v in it): no problem found", k, res[k])
		}
	}
}
