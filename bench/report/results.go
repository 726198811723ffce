package main

import "math"

// Results computes the flat figures; a key is present only when its inputs were measured.
// Each area's figures come from a file of their own (hotpath.go, route.go, e2e.go,
// fleet.go, redis.go, spike.go, divert.go, fidelity.go, memory.go); every figure is
// rounded last.
func Results(p *Parsed) map[string]float64 {
	out := map[string]float64{}
	b := p.Bench
	hotpathFigures(b, out)
	routeFigures(b, out)
	e2eFigures(b, out)
	catchupFigures(b, out)
	redisFigures(b, out)
	adaptiveFigures(b, out)
	fleetFigures(b, out)
	spikeFigures(b, out)
	divertFigures(b, out)
	fidelityFigures(p, out)
	memoryFigures(p, out)
	if v, ok := failedTicks(b); ok {
		out["bench_failed_ticks"] = v
	}
	for k, v := range out {
		out[k] = round(v)
	}
	return out
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
