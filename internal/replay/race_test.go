//go:build race

package replay

// raceEnabled: the race detector makes a replay some 17 times slower; the tests that
// replay the same traffic many times to compare run a part of it under the detector and
// the whole without it (make test-norace).
const raceEnabled = true
