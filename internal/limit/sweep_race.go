//go:build race

package limit

import (
	"sync/atomic"
	"unsafe"
)

// clearCounters is the race build's: the same zeroes, written with plain stores that the
// race detector does not see (go:norace). Seen, each counter's atomic store made the
// detector keep state for its address: a sweep of the default sketch is half a million
// counters a window, and the packages whose tests run limiters on a fake clock through
// many windows took 40 to 150 times as long under -race as without (internal/limit:
// 269 s against 7). The stores race only with checks adding to a slot the sweep has
// already marked as counting no window (the build without the detector stores
// atomically, clearCounters in sweep_norace.go), so the detector has nothing to find here.
//
//go:norace
func clearCounters(c []atomic.Uint32) {
	clear(unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(c))), len(c)))
}
