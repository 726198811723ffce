package main

import "math"

// Figures are a run's figures as measured, before rounding (Values; a key is present only
// when its inputs were measured), and those that another statistic stood in for, by key,
// with what stood in and why (Fallbacks): make bench fails on those (Problems).
type Figures struct {
	Values    map[string]float64
	Fallbacks map[string]string
	// NotFinite are the figures that came out NaN or infinite (a share of nothing, a
	// ratio to 0), by key: left out of Values, as results.json holds finite numbers only;
	// make bench fails on those with a goal (Problems).
	NotFinite map[string]float64
}

// Measure computes the figures. Each area's come from a file of their own (hotpath.go,
// route.go, e2e.go, fleet.go, redis.go, spike.go, divert.go, fidelity.go, memory.go).
func Measure(p *Parsed) Figures {
	out := map[string]float64{}
	b := p.Bench
	fellBack := map[string]string{}
	hotpathFigures(b, out, fellBack)
	hotpathProcesses(p, out)
	routeFigures(b, out)
	e2eFigures(b, out)
	pinFigures(p, out)
	catchupFigures(b, out)
	redisFigures(b, out)
	rotationFigures(b, out)
	adaptiveFigures(b, out)
	fleetFigures(b, out)
	spikeFigures(b, out)
	divertFigures(b, out)
	fidelityFigures(p, out)
	memoryFigures(p, out)
	if v, ok := failedTicks(b); ok {
		out["bench_failed_ticks"] = v
	}
	notFinite := map[string]float64{}
	for k, v := range out {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			notFinite[k] = v
			delete(out, k)
		}
	}
	return Figures{Values: out, Fallbacks: fellBack, NotFinite: notFinite}
}

// Results is the figures of results.json: Measure's, rounded (Rounded).
func Results(p *Parsed) map[string]float64 {
	return Measure(p).Rounded()
}

// Rounded is the figures rounded (round), but where that would change whether a goal is
// met (0.00003 is 0 at four decimals, which meets "≤ 0"): such a figure keeps the fewest
// decimals past four that keep its verdict, so that results.json, RESULTS.md and the
// README say what the unrounded figure does.
func (f Figures) Rounded() map[string]float64 {
	out := make(map[string]float64, len(f.Values))
	for k, v := range f.Values {
		out[k] = roundFor(v, goalOf(k))
	}
	return out
}

// roundFor is round(v) if g (nil: no goal) judges it as it judges v, else v with the
// fewest decimals that it does.
func roundFor(v float64, g *goal) float64 {
	r := round(v)
	if g == nil || g.met(r) == g.met(v) {
		return r
	}
	d := 5
	if math.Abs(v) >= 1000 {
		d = 1
	}
	for ; d <= 15; d++ {
		p := math.Pow10(d)
		if r := math.Round(v*p) / p; g.met(r) == g.met(v) {
			return r
		}
	}
	return v
}

// failedTicks sums every benchmark's failed-ticks figure (see the tick benchmarks'
// tickFailures); ok is false when no benchmark reported one.
func failedTicks(s Samples) (float64, bool) {
	sum, ok := 0.0, false
	for _, units := range s {
		for _, v := range units["failed-ticks"] {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}

// round keeps four significant decimals for small figures and whole numbers for large ones.
func round(v float64) float64 {
	if math.Abs(v) >= 1000 {
		return math.Round(v)
	}
	return math.Round(v*1e4) / 1e4
}
