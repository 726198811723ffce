package main

// Spike protection's learner on a trace of teams (internal/spike BenchmarkSpikeTrace).

// The benchmark the figures come from (without the -GOMAXPROCS suffix).
const benchSpike = "BenchmarkSpikeTrace"

// spikeFigures puts every metric of BenchmarkSpikeTrace under its own name.
func spikeFigures(b Samples, out map[string]float64) {
	for unit := range b[benchSpike] {
		if unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
			continue
		}
		v, _ := b.Mean(benchSpike, unit)
		out[unit] = v
	}
}
