//go:build race

package tick

// raceEnabled: the race detector makes the sketch's sweep (an atomic store per counter,
// each instrumented) some 200 times slower, so the fleet-fidelity runs of many gates
// (TestRunawayKeyFidelityWithTheSketch's 16 gates: 1 s without it, 270 s with it) run
// their larger fleets without it (make test-norace); their small fleets, the same code,
// still run under it.
const raceEnabled = true
