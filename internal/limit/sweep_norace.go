//go:build !race

package limit

import "sync/atomic"

// clearCounters zeroes c, one atomic store a counter: a check that loaded the slot's
// epoch before the sweep marked it cleared may still be adding to it (sketch.prepare).
func clearCounters(c []atomic.Uint32) {
	for i := range c {
		c[i].Store(0)
	}
}
