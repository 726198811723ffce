package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The README's headline figures sit between these markers. `make bench` rewrites what is
// between them from the new results; `go run ./bench/report -readme` prints it from
// bench/results.json; TestReadmeHeadlineTable fails when they differ.
const (
	readmeBegin = "<!-- bench headline: generated from bench/results.json by `go run ./bench/report -readme`, checked by bench/report TestReadmeHeadlineTable -->\n"
	readmeEnd   = "<!-- end bench headline -->"
)

// headline is one row of the README's table: a key of results.json and what it means to
// a reader; how, if set, ends the label in brackets with what results.json says of how
// the figure was measured in the run. Its goal, if any, is the one rows or fidelityRows
// give the key.
type headline struct {
	key, label string
	how        func(res map[string]float64) string
}

var headlines = []headline{
	{"hotpath_serial_ns_per_op", "per-record check, one goroutine (ns)", nil},
	{"hotpath_ns_per_op", "per-record check, two goroutines, Zipf over 100k teams (ns)", nil},
	{"hotpath_vs_map_ratio", "check ÷ a bare sharded-map lookup of the same keys", hotpathVsMapHow},
	{"hotpath_vs_sync_lua_speedup", "check speed ÷ one Redis Lua call per record (×)", nil},
	{"e2e_gate_records_per_s", "whole gate, records/s (franz-go's kfake broker, a process of its own)", nil},
	{"e2e_vs_passthrough_ratio", "whole gate ÷ a bare consume→produce→commit pass-through", nil},
	{"e2e_cpu_vs_passthrough_ratio", "whole gate's CPU per record ÷ the pass-through's", pinHow},
	{"e2e_exactly_once_vs_at_least_once", "exactly-once ÷ at-least-once throughput", nil},
	{"sync_read_reduction", "Redis reads saved by pressure tiers (100k teams)", nil},
	{"redis_cpu_vs_baseline", "Redis CPU per gate ÷ the old writes (100k Zipf teams)", nil},
	{"gates_per_redis_core", "gates one Redis core carries at 50 % CPU", nil},
	{"tick_p99_ms_1m_teams", "a million teams in one gate: tick p99 (ms)", nil},
	{"bytes_per_entity_1m_teams", "a million teams in one gate: heap per team (bytes)", nil},
	{"bytes_per_entity", "heap per cached team (bytes)", nil},
	{"fleet_admitted_over_threshold", "cap, 4 gates, a team at 2 × its limit: admitted ÷ threshold", nil},
	{"divert_detect_ticks", "divert, 4 gates, a team jumps 0.5 → 5 ×: ticks to divert it", nil},
	{"divert_detect_ticks_n16_x1.2", "divert, 16 gates, a team jumps 0.5 → 1.2 ×: ticks to divert it", nil},
	{"cap_admitted_worst_window_n16_x10", "cap, 16 gates, a team at 10 × its limit: worst window ÷ threshold", nil},
	{"fleet_process_worst_window", "cap, 4 gate processes, a team at 2 ×: worst window ÷ threshold", nil},
	{"divert_switches_per_min_swing_n4", "divert, 4 gates, a team swinging around its limit: topic switches in a minute, 4 partitions", nil},
	{"divert_switches_per_min_swing_n4_baseline", "the same without divert holds", nil},
	{"false_overflow_below_80pct", "records of teams under 80 % of their limit sent to overflow", nil},
	{"catchup_false_overflow_event", "replaying 10 windows at 10 ×, event clock: share falsely limited", nil},
	{"catchup_false_overflow_wall", "the same replay, wall clock: share falsely limited", nil},
}

// ReadmeTable is the README's table of headline figures from res, without the markers,
// under a line naming the run that measured them (run: RunOf of its RESULTS.md), so that
// no figure in the README is without its machine and date.
func ReadmeTable(res map[string]float64, run string) string {
	goals := map[string]*goal{}
	for _, r := range append(append([]row(nil), rows...), fidelityRows...) {
		goals[r.key] = r.goal
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Measured by `make bench` on %s.\n\n", cmp.Or(run, "an unrecorded machine"))
	sb.WriteString("| figure | latest | goal | met |\n|---|---:|---|---|\n")
	for _, h := range headlines {
		val, goalText, met := "not measured", "—", "—"
		v, ok := res[h.key]
		if ok {
			val = format(v)
		}
		if g := goals[h.key]; g != nil {
			goalText = g.text
			if ok {
				met = g.verdict(v)
			}
		}
		label := h.label
		if h.how != nil {
			label += " (" + h.how(res) + ")"
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", label, val, goalText, met)
	}
	// The table shows a few goals; the run's verdict is on them all, which a reader of
	// the table alone did not see (one missed in the table, eleven in the run).
	// A figure met by less than the rounding of what go test printed (goal.undecided) is
	// not counted met: make bench fails on it.
	var missed, unshown []string
	measured := 0
	for _, r := range goalRows() {
		v, ok := res[r.key]
		if !ok {
			continue
		}
		measured++
		switch r.goal.verdict(v) {
		case "no":
			missed = append(missed, "`"+r.key+"`")
		case notShown:
			unshown = append(unshown, "`"+r.key+"`")
		}
	}
	met := measured - len(missed) - len(unshown)
	switch {
	case met == measured:
		fmt.Fprintf(&sb, "\nThe run meets every one of the %d goals it measured.\n", measured)
	case len(unshown) == 0:
		fmt.Fprintf(&sb, "\nThe run meets %d of the %d goals it measured; it misses %d, each beside its goal in bench/RESULTS.md: %s.\n",
			met, measured, len(missed), strings.Join(missed, ", "))
	default:
		fmt.Fprintf(&sb, "\nThe run meets %d of the %d goals it measured;", met, measured)
		if len(missed) > 0 {
			fmt.Fprintf(&sb, " it misses %d, each beside its goal in bench/RESULTS.md: %s;", len(missed), strings.Join(missed, ", "))
		}
		fmt.Fprintf(&sb, " %d are met by less than the rounding of the figures go test printed, not shown met: %s.\n", len(unshown), strings.Join(unshown, ", "))
	}
	return sb.String()
}

// RunOf is the run that RESULTS.md (md) reports: its machine line without the load.
func RunOf(md string) string {
	for _, line := range strings.Split(md, "\n") {
		if m, ok := strings.CutPrefix(line, "Machine: "); ok {
			m, _, _ = strings.Cut(m, ", load average")
			return strings.TrimSuffix(m, ".")
		}
	}
	return ""
}

// readRun is RunOf the RESULTS.md at path ("" when it cannot be read).
func readRun(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return RunOf(string(b))
}

// readResults reads a results.json.
func readResults(path string) (map[string]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res map[string]float64
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// readmeBlock returns what doc holds between the markers, and where it starts and ends.
func readmeBlock(doc string) (block string, i, j int, err error) {
	i, j = strings.Index(doc, readmeBegin), strings.Index(doc, readmeEnd)
	if i < 0 || j < i+len(readmeBegin) {
		return "", 0, 0, fmt.Errorf("no headline table between %q and %q", strings.TrimSpace(readmeBegin), readmeEnd)
	}
	i += len(readmeBegin)
	return doc[i:j], i, j, nil
}

// spliceReadme puts table between the markers of doc.
func spliceReadme(doc, table string) (string, error) {
	_, i, j, err := readmeBlock(doc)
	if err != nil {
		return "", err
	}
	return doc[:i] + table + doc[j:], nil
}

// updateReadme rewrites the headline table of the README at path, if it has the markers;
// it reports whether it did.
func updateReadme(path string, res map[string]float64, run string) (bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, _, _, err := readmeBlock(string(b)); err != nil {
		return false, nil
	}
	doc, err := spliceReadme(string(b), ReadmeTable(res, run))
	if err != nil || doc == string(b) {
		return false, err
	}
	return true, os.WriteFile(path, []byte(doc), 0o644)
}
