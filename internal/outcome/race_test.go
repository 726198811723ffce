//go:build race

package outcome

// raceEnabled: the race detector adds allocations, so allocation counts are not checked.
const raceEnabled = true
