package main

import (
	"fmt"
	"os"
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
func docFigures(res map[string]float64) []docFigure {
	n := func(key string, ns ...string) []string {
		var out []string
		for _, s := range ns {
			out = append(out, format(res[key+"_n"+s]))
		}
		return out
	}
	holdRow := func(label, key string) string {
		var base []string
		for _, s := range []string{"1", "2", "4"} {
			base = append(base, format(res[key+"_n"+s+"_baseline"]))
		}
		return "| " + label + " | " + strings.Join(n(key, "1", "2", "4"), " | ") + " | " + strings.Join(base, " / ") + " |"
	}
	// millions is a range of records/s in millions, one decimal, least first.
	millions := func(a, b string) string {
		lo, hi := res[a], res[b]
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
	return []docFigure{
		{"docs/benchmarks.md", "Four real gate processes (`BenchmarkFleetProcessWindow`) hold a capped team at 2 × to " +
			format(res["fleet_process_worst_window"]) + " of its limit, worst window."},
		{"docs/benchmarks.md", holdRow("a minute swinging around the limit (1.33 × 3 s, 0.67 × 3 s): switches", "divert_switches_per_min_swing")},
		{"docs/benchmarks.md", holdRow("a minute steady at 1.2 ×: switches", "divert_switches_steady")},
		{"docs/benchmarks.md", holdRow("a minute at 0.8 ×: records diverted", "divert_diverted_x0.8")},
		{"docs/benchmarks.md", "| 20 s at 2 ×, then 0.3 ×: s from the count under 80 % to the last gate's release (hold 10 s) | " +
			strings.Join(n("divert_release_after_calm_s", "1", "2", "4"), " | ") + " |"},
		{"docs/benchmarks.md", "| same: s between the first and the last gate's release | " +
			strings.Join(n("divert_release_spread_s", "1", "2", "4"), " | ") + " |"},
		{"docs/design.md", "One rule costs what no file costs (" + format(res["route_one_rule_vs_no_file_ratio"]) +
			" ×); three rules cost " + format(res["route_three_rules_vs_one_rule_ratio"]) + " × one"},
		{"docs/design.md", fmt.Sprintf("a gate costs Redis %.2f × what it did", res["redis_cpu_vs_baseline"])},
		{"docs/benchmarks.md", format(res["redis_commands_per_tick_rules3"]) + " commands and " + format(res["redis_writes_per_tick_rules3"]) +
			" counts written a tick, " + format(res["redis_cpu_s_per_million_events_rules3"]) + " CPU-s per million events; " +
			format(res["redis_cpu_rules3_vs_one_rule"]) + " × the one rule's Redis CPU and " + format(res["redis_commands_rules3_vs_one_rule"]) + " × its commands"},
		{"docs/benchmarks.md", "no file " + format(res["route_ns_per_record_no_file"]) + " ns a record, one rule " + format(res["route_ns_per_record_one_rule"]) +
			", three rules " + format(res["route_ns_per_record_three_rules"]) + "; **one rule ÷ no file " + format(res["route_one_rule_vs_no_file_ratio"]) +
			"** (goal ≤ 1.05, " + metOrMissed(res["route_one_rule_vs_no_file_ratio"] <= 1.05) + "), **three rules ÷ one rule " +
			format(res["route_three_rules_vs_one_rule_ratio"]) + "** (goal ≤ 1.2, " + metOrMissed(res["route_three_rules_vs_one_rule_ratio"] <= 1.2) + ")"},
		{"docs/rules.md", "it reads and decides " + millions("replay_records_per_s", "real_kafka_replay_records_per_s") +
			" records a second on its two workers (a per-user rule and a team rule; " +
			millions("replay_one_worker_records_per_s", "real_kafka_replay_one_worker_records_per_s") + " on one)"},
		{"docs/rules.md", fmt.Sprintf("It needs about %.1f µs of CPU a record", res["replay_cpu_ns_per_record"]/1e3)},
	}
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
	docs := map[string]string{}
	for _, f := range docFigures(res) {
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
			t.Errorf("%s does not say what bench/results.json does: want %q", f.file, f.want)
		}
	}
}
