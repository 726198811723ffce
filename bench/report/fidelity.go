package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Fleet fidelity: several limiter instances sharing a Redis on a fake clock, ours beside
// three baselines (internal/tick BenchmarkFidelity).

// benchFidelity has one sub-benchmark per limiter: ours, then the baselines.
const benchFidelity = "BenchmarkFidelity"

// fidelityBaselines are BenchmarkFidelity's sub-benchmarks besides ours; their figures go
// under <key>_<baseline>.
var fidelityBaselines = []string{"reference", "local", "lua"}

// isFidelity reports whether key is one the Fidelity section shows: a fidelityRows key,
// a scenario's (fidelityScenario), or a baseline's of either. Not every fleet_, cap_ or
// divert_ key is (BenchmarkFleetRedis' fleet_*_n<size>, BenchmarkDivertSwitches'
// divert_*): those go in the Speed table.
func isFidelity(key string) bool {
	for _, b := range fidelityBaselines {
		if k, ok := strings.CutSuffix(key, "_"+b); ok {
			key = k
			break
		}
	}
	return fidelityScenario.MatchString(key) || slices.ContainsFunc(fidelityRows, func(r row) bool { return r.key == key })
}

// fidelityScenario matches BenchmarkFidelity's scenario keys, ours:
// <metric>_n<instances>_x<rate × limit>.
var fidelityScenario = regexp.MustCompile(`^(cap|divert)_.+_n\d+_x[0-9.]+$`)

// seriesPrefix starts the BenchmarkFidelity metrics that are chart points, window number
// after it, rather than figures.
const seriesPrefix = "series_cap_window_"

// point is one window of a series.
type point struct {
	window int
	value  float64
}

// fidelityFigures puts every metric of BenchmarkFidelity/ours under its own name, each
// baseline's under <name>_<baseline>, and collects the chart's series into p.Series.
func fidelityFigures(p *Parsed, out map[string]float64) {
	b := p.Bench
	for _, sub := range append([]string{"ours"}, fidelityBaselines...) {
		for unit := range b[benchFidelity+"/"+sub] {
			if unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
				continue
			}
			v, _ := b.Mean(benchFidelity+"/"+sub, unit)
			if w, ok := strings.CutPrefix(unit, seriesPrefix); ok {
				// A point of the chart's series, not a figure of results.json. (A figure
				// that is not finite goes to Measure, which fails make bench on it.)
				if n, err := strconv.Atoi(w); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
					p.Series[sub] = append(p.Series[sub], point{n, v})
				}
				continue
			}
			key := unit
			if sub != "ours" {
				key += "_" + sub
			}
			out[key] = v
		}
	}
}

// fidelity is RESULTS.md's Fidelity section: the keys, ours beside the baselines,
// then the extra scenarios the same way; chart is the chart's path relative to RESULTS.md,
// "" when none was drawn.
func fidelity(res map[string]float64, chart string) string {
	var sb strings.Builder
	sb.WriteString("\n## Fidelity\n\n")
	if _, ok := res["fleet_admitted_over_threshold"]; !ok {
		sb.WriteString("Not measured in this run (`BenchmarkFidelity` missing from the input).\n")
		return sb.String()
	}
	sb.WriteString("From `BenchmarkFidelity` (internal/tick, `-benchtime 1x`): a simulation on a fake clock, several limiter instances, each with its own tick, sharing one real redis-server; window 10 s, tick = window / 60, sync interval = window / 4, threshold 600 records per window, each team's records spread evenly over each tick and round robin over the instances, three teams at 0.3, 0.6 and 0.78 × their limit alongside the hot one. ")
	sb.WriteString("Baselines, same scenarios, same run: `reference` is our limiter with the reference design's cadence (`HotEveryTick` off, `PendingReadShare` −1); `local` is each instance on its own (our limiter syncing with a Redis of its own, so it enforces the whole limit on what it alone sees); `lua` is the exact synchronous sliding-log limiter, one EVALSHA per record on the shared Redis, the fake clock's time as now (in divert mode every record enters the log, as the limiter counts every record). ")
	sb.WriteString("Detection is measured from the first record offered with the exact sliding-window count already at the threshold, to the end of the first tick in which ≥ 90% of the team's records since then were diverted, so the exact limiter scores the rest of its crossing tick (< 1). When a limiter never gets there, the figure is the ticks from the crossing to the end of the run (240 ticks after the step): a lower bound.\n\n")
	if chart != "" {
		sb.WriteString("![Admitted per window over threshold, cap mode, 4 instances, one team at 2x its limit: the gate beside the baselines](" + chart + ")\n\n")
	} else {
		sb.WriteString("No chart in this run: `BenchmarkFidelity/ours` reported no `" + seriesPrefix + "*` points.\n\n")
	}
	sb.WriteString("| key | goal | ours | met | reference | local | lua | scenario |\n|---|---|---:|---|---:|---:|---:|---|\n")
	cell := func(k string) string {
		if v, ok := res[k]; ok {
			return format(v)
		}
		return "—"
	}
	for _, r := range fidelityRows {
		met := "—"
		if v, ok := res[r.key]; ok {
			met = r.goal.verdict(v)
		}
		fmt.Fprintf(&sb, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", r.key, r.goal.text, cell(r.key), met,
			cell(r.key+"_reference"), cell(r.key+"_local"), cell(r.key+"_lua"), r.note)
	}
	var extra []string
	for k := range res {
		if fidelityScenario.MatchString(k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		sb.WriteString("\nEvery scenario (`_n<instances>_x<rate × limit>`; the divert steps start from 0.5 ×):\n\n")
		sb.WriteString("| metric | ours | reference | local | lua |\n|---|---:|---:|---:|---:|\n")
		for _, k := range extra {
			fmt.Fprintf(&sb, "| `%s` | %s | %s | %s | %s |\n", k, cell(k), cell(k+"_reference"), cell(k+"_local"), cell(k+"_lua"))
		}
	}
	return sb.String()
}
