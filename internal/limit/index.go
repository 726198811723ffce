package limit

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
)

// A shard's index is an open-addressing hash table (linear probing) whose slots are
// atomics, so that a check finds its team without taking any lock: a lock's reader count
// is a locked write, to a line every core checking that shard shares, on every lookup.
// Inserts, deletes and walks happen under the shard's mutex; growing builds a new table
// and publishes it with one atomic store, and a check still probing the old one finds
// what it held when it started, as if its lookup had run a moment earlier.
//
// A slot goes empty → live → deleted (tombstone) → live again, or back to empty when the
// slot after it is empty. It holds the high half of the team's hash (the half that chose
// the slot; the low half chose the shard) beside the entry pointer, so a probe compares
// team bytes only when the hashes agree, and touches no other team's entry. The same word
// holds when the team was last seen, in seconds, which the sweep and eviction read without
// touching entries and a check rewrites at most once a second. The word is stored before
// the pointer is published; a lookup loads the pointer first, and always compares the team
// itself, so a slot being reused under it can cost it a miss (it then takes the mutex and
// looks again) but never a wrong entry.
type table struct {
	mask  uint64 // len(slots) − 1
	slots []slot
}

type slot struct {
	tag atomic.Uint64 // hash's high half | seen (seconds since the limiter's base)
	e   atomic.Pointer[entry]
}

const seenMask = 1<<32 - 1

// slotTag is the tag word of a team of hash h last seen at seen.
func slotTag(h uint64, seen uint32) uint64 { return h&^seenMask | uint64(seen) }

// tombstone marks a deleted slot: probes go past it, inserts may reuse it.
var tombstone = new(entry)

const minTableSize = 8

func newTable(size int) *table {
	return &table{mask: uint64(size - 1), slots: make([]slot, size)}
}

// start is where the probe for hash h starts. The low bits of the hash chose the shard,
// so the table uses the high ones.
func (t *table) start(h uint64) uint64 { return (h >> 32) & t.mask }

// lookup returns team's entry, its slot and the slot's tag word as read, or nil. Lock-free.
func (t *table) lookup(h uint64, team string) (*entry, *slot, uint64) {
	hi := h &^ seenMask
	for i := t.start(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		e := s.e.Load()
		if e == nil {
			return nil, nil, 0
		}
		if w := s.tag.Load(); w&^seenMask == hi && e != tombstone && e.is(team) {
			return e, s, w
		}
	}
}

// index is a shard's table and its bookkeeping. Only tab is read without the shard's mutex.
type index struct {
	tab  atomic.Pointer[table]
	live int // entries in tab; under the shard's mutex
	used int // live entries and tombstones in tab; under the shard's mutex
}

func (x *index) init() { x.tab.Store(newTable(minTableSize)) }

// len returns how many entries the index holds. The caller holds the shard's mutex.
func (x *index) len() int { return x.live }

// insert adds e, whose team has hash h and is not in the index, as seen at seen. The
// caller holds the shard's mutex.
func (x *index) insert(h uint64, seen uint32, e *entry) {
	t := x.tab.Load()
	if uint64(x.used+1)*4 > (t.mask+1)*3 { // keep the load, tombstones included, ≤ ¾
		t = x.rebuild(t)
	}
	for i := t.start(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		old := s.e.Load()
		if old == nil || old == tombstone {
			s.tag.Store(slotTag(h, seen))
			s.e.Store(e) // publishes the entry: after its tag
			x.live++
			if old == nil {
				x.used++
			}
			return
		}
	}
}

// rebuild publishes a copy of t without its tombstones, twice as large if its live
// entries need it, and returns it. The caller holds the shard's mutex.
func (x *index) rebuild(t *table) *table {
	size := max(minTableSize, 1<<bits.Len(uint(x.live*2+1))) // load ≤ ½ after rebuilding
	nt := newTable(size)
	for i := range t.slots {
		s := &t.slots[i]
		if e := s.e.Load(); e != nil && e != tombstone {
			w := s.tag.Load()
			j := nt.start(w)
			for nt.slots[j].e.Load() != nil {
				j = (j + 1) & nt.mask
			}
			nt.slots[j].tag.Store(w)
			nt.slots[j].e.Store(e)
		}
	}
	x.tab.Store(nt)
	x.used = x.live
	return nt
}

// remove deletes e, whose team has hash h, if the index holds it, and reports whether it
// did. The caller holds the shard's mutex.
func (x *index) remove(h uint64, e *entry) bool {
	t := x.tab.Load()
	for i := t.start(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch s.e.Load() {
		case nil:
			return false
		case e:
			if t.slots[(i+1)&t.mask].e.Load() == nil {
				// No probe goes on past the next slot: this one can end probes too.
				s.e.Store(nil)
				x.used--
			} else {
				s.e.Store(tombstone)
			}
			x.live--
			return true
		}
	}
}

// all calls f for every entry, with its hash (high half only) and when it was last seen,
// from a random slot on, until f returns false. The caller holds the shard's mutex; f may
// remove the entry it is given.
//
// It goes a block of slots at a time, first loading a word of each entry in the block,
// then calling f for each. Entries are scattered over the heap and f is long: one entry
// at a time, the core waited for each entry's cache line in turn (the sweep spent most
// of its time on the first read of each entry); the block's loads, independent and
// short, wait for their lines together.
func (x *index) all(f func(h uint64, seen uint32, e *entry) bool) {
	const block = 16
	t := x.tab.Load()
	off := rand.Uint64()
	n := t.mask + 1
	// The loads' sum is kept alive: a load whose value is unused, atomic or not, is
	// compiled away (checked in the disassembly).
	var touched uint64
	defer runtime.KeepAlive(&touched)
	for lo := uint64(0); lo < n; lo += block {
		hi := min(lo+block, n)
		for k := lo; k < hi; k++ {
			if e := t.slots[(off+k)&t.mask].e.Load(); e != nil && e != tombstone {
				touched += e.thr.Load()
			}
		}
		for k := lo; k < hi; k++ {
			s := &t.slots[(off+k)&t.mask]
			if e := s.e.Load(); e != nil && e != tombstone {
				if w := s.tag.Load(); !f(w&^seenMask, uint32(w), e) {
					return
				}
			}
		}
	}
}
