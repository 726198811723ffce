package consume

import (
	"math/bits"
	"sync"
)

// slabs keeps the slabs of records in flight (routeWork: one []failed per partition's
// poll) for reuse once every record of one is done, so that the gate allocates no
// in-flight state per record in the steady state.
//
// Those slabs were most of what the gate allocated beyond the Kafka client: 208 bytes a
// record, a third of the bench process's allocations per record (BenchmarkEndToEnd's
// alloc-B/record), and the garbage collector's work follows allocation.
//
// Invariant: a slab is put back only by whoever takes its batch's remaining count to
// zero (ackBatch), when each of its records has been acknowledged, skipped or left
// unrouted, so none is in the client's hands, queued for a retry or still being
// routed. It is cleared first: a kept slab must not keep its records' input (their
// fetch buffers) alive. Slabs of a partition revoked or lost with records in flight never
// reach zero and are left to the garbage collector.
type slabs struct {
	classes [slabClasses]sync.Pool // class k holds slabs of capacity 1 << k
}

// slabClasses bounds the pooled sizes: 1 << 15 records, past the largest poll of one
// partition at the default GATE_MAX_POLL_RECORDS (10,000). A larger slab is allocated
// and dropped as before.
const slabClasses = 16

// get returns a slab of n zeroed records in flight.
func (s *slabs) get(n int) []failed {
	k := bits.Len(uint(n - 1))
	if n <= 0 || k >= slabClasses {
		return make([]failed, n)
	}
	if p, ok := s.classes[k].Get().(*[]failed); ok {
		return (*p)[:n]
	}
	return make([]failed, n, 1<<k)
}

// put clears fs and keeps it for get. Only fs[:len(fs)] was used (get gave a cleared
// slab, and only that much of it): the rest is still clear, and a slab is mostly larger
// than its poll (up to twice), clearing it all would be most of put's cost.
func (s *slabs) put(fs []failed) {
	c := cap(fs)
	k := bits.Len(uint(c - 1))
	if c == 0 || c != 1<<k || k >= slabClasses {
		return
	}
	clear(fs)
	fs = fs[:c]
	s.classes[k].Put(&fs)
}

// ackBatch counts n of b's records as done (acknowledged, skipped, or not routed); the
// call that completes b recycles its input records (their memory goes back to the
// client's pools, pools.go) and puts its slab back. Nothing may read a record of b's
// slab, nor its input, after its own ackBatch: another partition's routing may be
// filling it already.
func (c *Consumer) ackBatch(b *batch, n int64) {
	if b.remaining.Add(-n) == 0 && b.slab != nil && !b.keep.Load() {
		fs := b.slab
		b.slab = nil
		for i := range fs {
			if in := fs[i].in; in != nil { // nil: left unrouted (never polled again as is)
				in.Recycle()
			}
		}
		c.slabs.put(fs)
	}
}
