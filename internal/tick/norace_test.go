//go:build !race

package tick

const raceEnabled = false
