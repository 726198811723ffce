package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// make bench is a gate: the report writes its files whatever the run measured, then
// exits with gateStatus, naming each problem on stderr, when the run is not one whose
// figures can stand as the gate's:
//
//   - a part of bench/run.sh failed, or a benchmark printed "--- FAIL:";
//   - a benchmark was skipped ("--- SKIP:", as the real-Kafka ones are without Java):
//     the part did not run, whatever its exit status;
//   - a figure with a goal is not in the input: the benchmark behind it did not run;
//   - a figure with a goal came out NaN or infinite (Figures.NotFinite);
//   - a figure came from a fallback (Figures.Fallbacks): another statistic stood in for it;
//   - a goal is missed, judged on the unrounded figure.

// gateStatus is the report's exit status when Problems finds any (1 is a report that
// could not be written).
const gateStatus = 3

// Problems lists, one line each, what fails make bench in this run: the run's own
// problems (RunProblems), then each goal missed.
func Problems(p *Parsed, f Figures) []string {
	return append(RunProblems(p, f), GoalsMissed(f)...)
}

// RunProblems lists, one line each, the parts that failed, the benchmarks that failed or
// were skipped, the figures with a goal that were not measured and those that came from a
// fallback: all but the goals missed.
func RunProblems(p *Parsed, f Figures) []string {
	var out []string
	for _, l := range p.Parts {
		if name, ok := strings.CutSuffix(l, "FAILED"); ok {
			out = append(out, fmt.Sprintf("part failed: %s (bench/run.sh)", strings.Fields(name)[0]))
		}
	}
	for _, e := range p.Failed {
		out = append(out, "benchmark failed: "+e.describe())
	}
	for _, e := range p.Skipped {
		out = append(out, "benchmark skipped: "+e.describe())
	}
	for _, r := range goalRows() {
		_, notFinite := f.NotFinite[r.key]
		if _, ok := f.Values[r.key]; !ok && !notFinite {
			out = append(out, fmt.Sprintf("not measured: %s (goal %s): not in the benchmark output", r.key, r.goal.text))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.NotFinite)) {
		if g := goalOf(k); g != nil {
			out = append(out, fmt.Sprintf("not a number: %s = %v (goal %s): left out of results.json", k, f.NotFinite[k], g.text))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Fallbacks)) {
		out = append(out, fmt.Sprintf("fallback: %s = %s: %s", k, format(roundFor(f.Values[k], goalOf(k))), f.Fallbacks[k]))
	}
	return out
}

// GoalsMissed lists, one line each, the goals the figures miss, each judged on the figure
// as measured, not as rounded; and those a figure meets by less than go test's rounding of
// what it printed (goal.undecided), which it does not show met.
func GoalsMissed(f Figures) []string {
	var out []string
	for _, r := range goalRows() {
		v, ok := f.Values[r.key]
		switch {
		case !ok:
		case !r.goal.met(v):
			out = append(out, fmt.Sprintf("goal missed: %s = %s, goal %s: %s", r.key, format(roundFor(v, r.goal)), r.goal.text, r.goal.by(v)))
		case r.goal.undecided(v):
			out = append(out, fmt.Sprintf("goal not shown met: %s = %v, goal %s: within the rounding of the figures go test printed (±%s); measure it again", r.key, v, r.goal.text, format(printedError(v))))
		}
	}
	return out
}

func (e Event) describe() string {
	s := e.Bench
	if e.Part != "" {
		s += " in part " + e.Part
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}
