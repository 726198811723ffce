package limit

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"
)

// A shard's index is an open-addressing hash table (linear probing) whose slots are the
// entries themselves (entry.go, 64 bytes each), so that a check finds its team, and every
// word it then reads or writes, on one cache line: with a slot pointing to an entry
// elsewhere, a check of a team not in the core's caches waited for two lines, one after
// the other, which cost it about half again a bare map's lookup (docs/benchmarks.md).
//
// A check reads the table without any lock: a lock's reader count is a locked write, to a
// line every core checking that shard shares, on every lookup. Inserts, removals, walks
// and rebuilds happen under the shard's mutex.
//
// A slot is written once: empty → live → deleted. Its team's bytes never change once it is
// published (by its state word, stored last), so a lookup compares them without a lock
// and strings taken from them (table.team) stay valid; a deleted slot is reused only by
// a new table.
//
// Growing (or clearing deleted slots) builds a new table, copies each live entry into it
// and publishes it with one atomic store. Entries move, so a check may hold one that is
// being copied: the copy marks each word checks write (the unsent counts, the thr word)
// moved before reading it, and a check's write returns what the word held, mark included.
// A write that finds the mark landed in a copy nobody reads any more: the check takes the
// shard's mutex, which the rebuild holds until the new table is published, looks its team
// up again and writes there. A write before the mark is in what the rebuild copied. No
// count is lost or counted twice. Removing an entry (eviction, idle expiry) marks it the
// same way, so a check counting into it meanwhile caches the team again rather than
// losing the record. A check that only reads a moved entry decides on it as it was a
// moment earlier, which is what a check running a moment earlier would have done.
//
// The tick plans reads under the shard's mutex and applies them later; it finds an entry
// moved since by following the old copy's state word (moved, and the new slot's index) to
// the table that replaced the old one (Limiter.lockedEntry).
type table struct {
	ents []entry
	// arena holds the teams longer than inlineKey bytes, each as its length (a uvarint)
	// then its bytes, where its entry's key says (entry.arenaRef). A team is appended
	// under the shard's mutex before its slot is published and its bytes never change,
	// so a lookup reads them without a lock and strings taken from them (table.team)
	// stay valid. Full, it is replaced by a larger copy: a lookup still holding the old
	// one finds in it every team published before the swap. nil until a long team is
	// inserted. One slice for the table's long teams, where a string each cost its
	// header in a per-slot list and its own allocation rounded up to a size class
	// (30 to 40 bytes a team: docs/benchmarks.md).
	arena atomic.Pointer[[]byte]
	// arenaUsed is how many bytes of *arena are written; under the shard's mutex.
	arenaUsed int
	// next is the table that replaced this one, set under the shard's mutex before any
	// entry is moved to it: an entry moved is next.ents[state & stateIndex].
	next *table
}

// The state word of a slot (entry.state).
const (
	stateLive    = 1 << 31 // published: its team and words are set
	stateDeleted = 1 << 30 // removed, or moved to table.next: lookups go past it
	stateMoved   = 1 << 29 // moved to table.next, to the slot in stateIndex
	// While live: when the team was last seen, in seconds since the limiter's base (17
	// years). Once moved: the index of its slot in the next table.
	seenMask   = 1<<29 - 1
	stateIndex = seenMask
)

// minTableSize is the smallest table. A shard's table is ½ to ¾ full, its deleted slots
// counted: 85 to 128 bytes a team, more while teams expired or evicted since the last
// rebuild still hold their slots.
const minTableSize = 8

func newTable(size int) *table {
	return &table{ents: make([]entry, size)}
}

// start is where the probe for hash h starts: the high half of the hash, scaled to the
// table's size (the low bits chose the shard). Sizes need not be powers of two, which
// keeps every table between half and three quarters full, and so its memory per team
// bounded.
func (t *table) start(h uint64) uint64 { return (h >> 32) * uint64(len(t.ents)) >> 32 }

// after is the slot after i.
func (t *table) after(i uint64) uint64 {
	if i++; i == uint64(len(t.ents)) {
		return 0
	}
	return i
}

// lookup returns team's entry and its state word as read, or nil. Lock-free.
func (t *table) lookup(h uint64, team string) (*entry, uint32) {
	for i := t.start(h); ; i = t.after(i) {
		e := &t.ents[i]
		st := e.state.Load()
		if st == 0 {
			return nil, 0
		}
		if st&stateDeleted != 0 {
			continue
		}
		// A short team's compare is written here, not in a function: with the long
		// teams' case beside it such a function is too large to inline, and every probe
		// would pay a call (it was inlined before the arena).
		if e.klen != longKey {
			if int(e.klen) == len(team) && unsafe.String(&e.key[0], len(team)) == team {
				return e, st
			}
		} else if t.isLong(e, h, team) {
			return e, st
		}
	}
}

// isLong reports whether e, the entry of a long team, is team's, whose hash is h. The
// tag rejects almost every other long team without a look at the arena.
func (t *table) isLong(e *entry, h uint64, team string) bool {
	off, tag := e.arenaRef()
	return len(team) > inlineKey && tag == arenaTag(h) && t.arenaTeam(off) == team
}

// team returns the team of e, an entry of t. The string aliases the entry when the team is
// short, the arena when it is long (neither's bytes ever change).
func (t *table) team(e *entry) string {
	if e.klen != longKey {
		return unsafe.String(&e.key[0], int(e.klen))
	}
	off, _ := e.arenaRef()
	return t.arenaTeam(off)
}

// arenaTeam is the team at off in t's arena.
func (t *table) arenaTeam(off uint64) string {
	a := *t.arena.Load()
	n, k := binary.Uvarint(a[off:])
	return unsafe.String(&a[off+uint64(k)], int(n))
}

// minArena is the smallest arena, in bytes: a shard's first long team does not take
// more, nor a tiny table much less.
const minArena = 256

// setTeam writes team, whose hash is h, into e, a slot of t not yet published. The
// caller holds the shard's mutex. A long team is copied into the arena: the caller's
// bytes may alias a buffer it reuses (a record's).
func (t *table) setTeam(e *entry, h uint64, team string) {
	if len(team) <= inlineKey {
		e.klen = uint8(len(team))
		copy(e.key[:], team)
		return
	}
	e.klen = longKey
	e.setArenaRef(t.appendArena(team), arenaTag(h))
}

// appendArena appends team to t's arena, growing it if full, and returns its offset.
// The caller holds the shard's mutex.
func (t *table) appendArena(team string) uint64 {
	size := arenaSize(team)
	if p := t.arena.Load(); p == nil || t.arenaUsed+size > len(*p) {
		t.growArena(size)
	}
	a := *t.arena.Load()
	off := t.arenaUsed
	k := binary.PutUvarint(a[off:], uint64(len(team)))
	copy(a[off+k:], team)
	t.arenaUsed += size
	return uint64(off)
}

// arenaSize is how many bytes team takes in an arena.
func arenaSize(team string) int { return uvarintLen(uint64(len(team))) + len(team) }

// growArena replaces t's arena by one with room for need more bytes, at least a quarter
// larger: a byte is copied four times on average over the table's life, and the arena's
// spare room stays a fraction of it. The caller holds the shard's mutex.
func (t *table) growArena(need int) {
	var old []byte
	if p := t.arena.Load(); p != nil {
		old = *p
	}
	a := make([]byte, max(minArena, len(old)+len(old)/4, t.arenaUsed+need))
	copy(a, old[:t.arenaUsed])
	t.arena.Store(&a)
}

// arenaTag is the part of a long team's hash its entry keeps (entry.arenaRef): the bits
// above those choosing the shard (the low ones), most of them independent of where the
// probe starts (the high half), so a neighbour's tag matches by chance one time in
// millions.
func arenaTag(h uint64) uint64 { return h >> 8 & (1<<arenaTagBits - 1) }

func uvarintLen(n uint64) int {
	k := 1
	for ; n >= 0x80; n >>= 7 {
		k++
	}
	return k
}

// index is a shard's table and its bookkeeping. Only tab is read without the shard's mutex.
type index struct {
	tab  atomic.Pointer[table]
	live int // entries in tab; under the shard's mutex
	used int // live and deleted entries in tab; under the shard's mutex
	// seed hashes teams again when a rebuild places them (the limiter's).
	seed maphash.Seed
	// event: the entries count event-time windows, whose unsent[1] is not a count but the
	// previous window's (entry.markMoved).
	event bool
	// onMove, when set, is told of each entry a rebuild moves, under the shard's mutex
	// (the learned state is keyed by entry).
	onMove func(old, new *entry)
}

func (x *index) init(seed maphash.Seed, event bool) {
	x.seed, x.event = seed, event
	x.tab.Store(newTable(minTableSize))
}

// presize replaces the index's table, empty, by one that holds n entries at a load of ½
// (as a rebuild leaves it) without growing. Only for an index nothing uses yet.
func (x *index) presize(n int) {
	if size := 2 * n; size > minTableSize && x.used == 0 {
		x.tab.Store(newTable(size))
	}
}

// len returns how many entries the index holds. The caller holds the shard's mutex.
func (x *index) len() int { return x.live }

// reserve takes an empty slot for team, whose hash is h and which is not in the index,
// writes the team into it and returns it, not yet published: the caller sets what else a
// new entry starts with, then publishes it (publish). The caller holds the shard's mutex.
func (x *index) reserve(h uint64, team string) *entry {
	t := x.tab.Load()
	if (x.used+1)*4 > len(t.ents)*3 { // keep the load, deleted slots included, ≤ ¾
		t = x.rebuild(t)
	}
	for i := t.start(h); ; i = t.after(i) {
		if e := &t.ents[i]; e.state.Load() == 0 {
			t.setTeam(e, h, team)
			return e
		}
	}
}

// publish makes e, reserved, visible to lookups, as seen at seen. The caller holds the
// shard's mutex.
func (x *index) publish(e *entry, seen uint32) {
	e.state.Store(stateLive | seen&seenMask) // after every other word of the entry
	x.live++
	x.used++
}

// rebuild publishes a copy of t without its deleted entries, at a load of ½, and returns
// it. The caller holds the shard's mutex.
func (x *index) rebuild(t *table) *table {
	nt := newTable(max(minTableSize, 2*x.live))
	t.next = nt
	arenaOff := t.copyArena(nt)
	for i := range t.ents {
		e := &t.ents[i]
		st := e.state.Load()
		if st&stateLive == 0 || st&stateDeleted != 0 {
			continue
		}
		team := t.team(e)
		h := maphash.String(x.seed, team)
		j := nt.start(h)
		for nt.ents[j].state.Load() != 0 {
			j = nt.after(j)
		}
		ne := &nt.ents[j]
		if e.klen == longKey {
			ne.klen = longKey
			ne.setArenaRef(arenaOff[i], arenaTag(h))
		} else {
			nt.setTeam(ne, h, team)
		}
		e.moveTo(ne, x.event)
		// One swap takes the seen second and ends the old copy: a check touching it later
		// fails its CAS, and finds the new copy once the table is published (touch).
		old := e.state.Swap(stateLive | stateDeleted | stateMoved | uint32(j))
		ne.state.Store(stateLive | old&seenMask)
		if x.onMove != nil {
			x.onMove(e, ne)
		}
	}
	x.tab.Store(nt)
	x.used = x.live
	return nt
}

// copyArena copies the live long teams of t into the arena of nt, its replacement, and
// returns where each now is, by its slot in t (nil when t has none). They go in the
// order of t's arena, the order they were first cached in (under a skewed load the
// busiest first, and so on few lines), not in the order of nt's slots, which scatters
// them: a check of a 16-byte team took about a sixth longer (docs/benchmarks.md).
// The new arena has room for an eighth more, and grows from there: room for half more,
// as the new table has for teams (and growth by half) cost 64-byte teams 10 bytes a
// team more on average (docs/benchmarks.md). The caller holds the shard's mutex.
func (t *table) copyArena(nt *table) []uint64 {
	if t.arenaUsed == 0 {
		return nil
	}
	type long struct {
		off  uint64
		slot int
	}
	var longs []long
	n := 0
	for i := range t.ents {
		e := &t.ents[i]
		if st := e.state.Load(); st&stateLive != 0 && st&stateDeleted == 0 && e.klen == longKey {
			off, _ := e.arenaRef()
			longs = append(longs, long{off, i})
			n += arenaSize(t.arenaTeam(off))
		}
	}
	if len(longs) == 0 {
		return nil
	}
	slices.SortFunc(longs, func(a, b long) int { return cmp.Compare(a.off, b.off) })
	nt.growArena(n + n/8)
	offs := make([]uint64, len(t.ents))
	for _, l := range longs {
		offs[l.slot] = nt.appendArena(t.arenaTeam(l.off))
	}
	return offs
}

// remove deletes e, an entry of the index's table, marking it moved so that a check
// counting into it from now on counts again in the team's next entry, and returns its
// unsent words as they were when marked: the counts the caller hands to the tick, those
// added since being counted again elsewhere. The caller holds the shard's mutex.
func (x *index) remove(e *entry) (unsent [2]uint64) {
	unsent, _ = e.markMoved(x.event)
	e.state.Or(stateDeleted)
	x.live--
	return unsent
}

// all calls f for every entry, with when it was last seen and its team, from a random
// slot on, until f returns false. The caller holds the shard's mutex; f may remove the
// entry it is given.
//
// It goes a block of slots at a time, first loading the state of each slot in the block,
// then calling f for each: f is long, and one entry at a time the core waited for each
// entry's line in turn (the sweep spent most of its time on the first read of each
// entry); the block's loads, independent and short, wait for their lines together.
func (x *index) all(f func(seen uint32, e *entry, team string) bool) {
	const block = 16
	t := x.tab.Load()
	n := uint64(len(t.ents))
	off := rand.Uint64N(n)
	// The loads' sum is kept alive: a load whose value is unused, atomic or not, is
	// compiled away (checked in the disassembly).
	var touched uint32
	defer runtime.KeepAlive(&touched)
	for lo := uint64(0); lo < n; lo += block {
		hi := min(lo+block, n)
		for k := lo; k < hi; k++ {
			touched += t.ents[(off+k)%n].state.Load()
		}
		for k := lo; k < hi; k++ {
			e := &t.ents[(off+k)%n]
			if st := e.state.Load(); st&stateLive != 0 && st&stateDeleted == 0 {
				if !f(st&seenMask, e, t.team(e)) {
					return
				}
			}
		}
	}
}
