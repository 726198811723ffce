//go:build !race

package outcome

const raceEnabled = false
