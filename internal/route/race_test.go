//go:build race

package route

// raceEnabled: the race detector adds allocations, so allocation counts are not checked.
const raceEnabled = true
