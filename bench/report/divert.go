package main

// Divert holds: topic switches of a team around its limit (internal/tick
// BenchmarkDivertSwitches).

// The benchmark the figures come from (without the -GOMAXPROCS suffix).
const benchSwitches = "BenchmarkDivertSwitches"

// divertFigures puts BenchmarkDivertSwitches' figures, with holds and without.
func divertFigures(b Samples, out map[string]float64) {
	// Divert holds: every metric of BenchmarkDivertSwitches/ours as divert_<metric>, the
	// baseline's (divert before holds) as divert_<metric>_baseline.
	for _, sub := range []string{"ours", "baseline"} {
		name := benchSwitches + "/" + sub
		for unit := range b[name] {
			if unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
				continue
			}
			v, _ := b.Mean(name, unit)
			key := "divert_" + unit
			if sub != "ours" {
				key += "_baseline"
			}
			out[key] = v
		}
	}
}
