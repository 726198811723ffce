package cpu

import (
	"testing"
	"unsafe"
)

// Prefetch changes nothing and faults on nothing: not on a live line, nor a megabyte past
// the end of what is allocated (where no page need be mapped).
func TestPrefetch(t *testing.T) {
	b := []byte("line")
	Prefetch(unsafe.Pointer(&b[0]))
	Prefetch(unsafe.Add(unsafe.Pointer(&b[0]), 1<<20))
	if string(b) != "line" {
		t.Errorf("the prefetched bytes changed: %q", b)
	}
}
