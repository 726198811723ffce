//go:build !amd64

package cpu

import "unsafe"

// Prefetch does nothing elsewhere than amd64: the line is fetched when it is read.
func Prefetch(unsafe.Pointer) {}

// Prefetch4 does nothing elsewhere than amd64.
func Prefetch4(_, _, _, _ unsafe.Pointer) {}
