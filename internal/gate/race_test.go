//go:build race

package gate

// raceEnabled: the race detector adds allocations, so memory is not measured under it.
const raceEnabled = true
