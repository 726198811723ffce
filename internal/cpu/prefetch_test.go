package cpu

import (
	"testing"
	"unsafe"
)

// Prefetch changes nothing and faults on nothing: not on a live line, nor its last byte,
// nor on nil, where no page is mapped.
func TestPrefetch(t *testing.T) {
	b := []byte("line")
	Prefetch(unsafe.Pointer(&b[0]))
	Prefetch(unsafe.Pointer(&b[len(b)-1]))
	Prefetch(nil)
	Prefetch4(unsafe.Pointer(&b[0]), nil, unsafe.Pointer(&b[len(b)-1]), nil)
	if string(b) != "line" {
		t.Errorf("the prefetched bytes changed: %q", b)
	}
}
