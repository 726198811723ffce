// Package cpu holds what the hot path asks of the processor that Go does not say.
//
// Guarantees: Prefetch never faults, blocks or changes memory, whatever the address (a
// prefetch of an address that is not mapped is dropped by the processor), and costs a
// call; on processors without an implementation here it does nothing.
package cpu
