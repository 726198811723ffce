//go:build race

package limit

// raceEnabled: the race detector changes what the heap holds and runs a check some ten
// times slower, so the heap measurements (TestMemoryPerTeam and its like, a goroutine
// each, nothing to race) run without it (make test-norace).
const raceEnabled = true
