//go:build !amd64

package outcome

// prefetch does nothing elsewhere than amd64: the slot is read when the record is counted.
func prefetch(*slot) {}
