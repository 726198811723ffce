//go:build !amd64

package cpu

import "unsafe"

// Prefetch does nothing elsewhere than amd64: the line is fetched when it is read.
func Prefetch(unsafe.Pointer) {}
