package cpu

import "unsafe"

// Prefetch has the processor fetch the cache line at p into its caches, without waiting
// for it (PREFETCHT0, which retires at once): where a load whose value is kept holds the
// instructions after it from retiring until the line comes, a prefetch issued some
// hundred nanoseconds before the line is read lets the work between run meanwhile.
//
//go:noescape
func Prefetch(p unsafe.Pointer)

// Prefetch4 is Prefetch of four lines in one call: a call costs more than a prefetch.
//
//go:noescape
func Prefetch4(a, b, c, d unsafe.Pointer)
