package limit

import (
	"math"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Bit layouts of the packed entry words.
const (
	// thr: generation << genShift | tier << tierShift | held | threshold. One atomic load
	// gives a threshold and whether it is current, so an override swap never shows a check
	// a mix; the tier at the last check and whether the team is held in overflow
	// (hold.go) ride along, as they are read on the same path.
	thresholdBits = 43
	thresholdMask = 1<<thresholdBits - 1
	heldBit       = 1 << thresholdBits
	tierShift     = thresholdBits + 1
	tierMask      = 1<<2 - 1 // numTiers ≤ 4
	genShift      = tierShift + 2
	genMask       = 1<<(64-genShift) - 1

	// unsent[i]: count << epochTagBits | epoch tag. The tag tells which epoch of this
	// slot's parity the count belongs to, so counts never cross an epoch boundary.
	epochTagBits = 16
	epochTagMask = 1<<epochTagBits - 1
)

// readLocal is the low bit of entry.readAt, set when the last read applied was a local
// rebuild (ApplyLocal: the read failed) rather than the shared store's answer: the team then
// stays due for a read until one succeeds. The entry has no spare word for it, and taken
// as a time the bit is at most 1 ns off, which nothing notices: the check path reads
// readAt as it is.
const readLocal = 1

// readStamp is the readAt word of a read applied at unix ns ns, locally or not.
func readStamp(ns int64, local bool) int64 {
	if local {
		return ns | readLocal
	}
	return ns &^ readLocal
}

// readTime is the time of the last read applied, from a readAt word: 0 when never read.
func readTime(at int64) int64 { return at &^ readLocal }

// inlineKey is how many bytes of its team an entry holds in its own 64 bytes.
const inlineKey = 15

// longKey in entry.klen says the team is too long for the bytes that follow the entry;
// the entry is then the head of an entryLong.
const longKey = 0xff

// entry is one cached team. Every word a check reads or writes is atomic: checks on many
// cores and the tick read and write it without a lock. It is exactly 64 bytes, a size
// class whose objects start on a cache line, and holds teams of up to 15 bytes inline, so
// a check's key compare and every word it then reads or writes are on one line. Longer
// teams continue in the bytes allocated after it (entryKey*), or, beyond 127 bytes, in
// a separately allocated string (entryLong). When the team was last seen is kept in its
// index slot (index.go), which the sweep and eviction read without touching the entry.
type entry struct {
	estimate atomic.Uint64    // float64 bits: the global estimate at readAt
	readAt   atomic.Int64     // unix ns of the last applied read; 0 = never read; see readLocal
	flushed  atomic.Int64     // handed to the tick since the last read (tick writes only)
	unsent   [2]atomic.Uint64 // by epoch parity: counted, not yet handed to the tick
	thr      atomic.Uint64    // packed threshold, tier at the last check, overrides generation
	klen     uint8            // len(team), or longKey; set before the entry is published
	key      [inlineKey]byte  // the team, continued past the entry when longer
}

type (
	entryKey31 struct {
		entry
		_ [16]byte
	} // teams of ≤ 31 bytes: 80-byte class
	entryKey63 struct {
		entry
		_ [48]byte
	} // ≤ 63 bytes: 112-byte class
	entryKey127 struct {
		entry
		_ [112]byte
	} // ≤ 127 bytes: 176-byte class
	entryLong struct {
		entry
		team string
	}
)

// newEntry returns an entry whose team is a copy of team: the caller's string may alias a
// reused buffer (a record's bytes).
func newEntry(team string) *entry {
	var e *entry
	switch n := len(team); {
	case n <= inlineKey:
		e = new(entry)
	case n <= inlineKey+16:
		e = &new(entryKey31).entry
	case n <= inlineKey+48:
		e = &new(entryKey63).entry
	case n <= inlineKey+112:
		e = &new(entryKey127).entry
	default:
		x := &entryLong{team: strings.Clone(team)}
		x.klen = longKey
		return &x.entry
	}
	e.klen = uint8(len(team))
	// The entry heads an allocation large enough for its team (above).
	copy(unsafe.Slice(&e.key[0], len(team)), team)
	return e
}

// team returns the entry's team. The string aliases the entry.
func (e *entry) team() string {
	if e.klen == longKey {
		return (*entryLong)(unsafe.Pointer(e)).team
	}
	return unsafe.String(&e.key[0], int(e.klen))
}

// is reports whether the entry is team's.
func (e *entry) is(team string) bool {
	if e.klen != longKey {
		return int(e.klen) == len(team) && unsafe.String(&e.key[0], len(team)) == team
	}
	return (*entryLong)(unsafe.Pointer(e)).team == team
}

// pending is how many records were counted here since the last read: those handed to the
// tick plus those still waiting. Keeping it as a sum spares the per-record path a second
// locked add.
func (e *entry) pending() int64 {
	return e.flushed.Load() + int64(e.unsent[0].Load()>>epochTagBits) + int64(e.unsent[1].Load()>>epochTagBits)
}

// The estimate word of a wall-clock entry is the fleet's view of the team at the last read,
// packed so that a check loads it whole, never one part without the rest:
//
//	bits  0–31  the fleet's sliding-window count (float32)
//	bits 32–47  how fast that count ages out, records per ns (bfloat16)
//	bits 48–63  fleet factor: the fleet's records per record counted here (bfloat16, ≥ 1)
//
// float32 keeps a count exact to 2^24 and within 6e-8 of it beyond; the two rates carry
// three significant digits, an error of 0.4% on what changes between two reads. bfloat16 is
// the top half of a float32: same range, shorter mantissa.
func packView(est, drainPerNs, factor float64) uint64 {
	return uint64(math.Float32bits(float32(est))) | uint64(toBF16(drainPerNs))<<32 | uint64(toBF16(factor))<<48
}

func unpackView(w uint64) (est, drainPerNs, factor float64) {
	return float64(math.Float32frombits(uint32(w))), fromBF16(uint16(w >> 32)), fromBF16(uint16(w >> 48))
}

// toBF16 rounds f to the nearest bfloat16 (ties to even). f is finite.
func toBF16(f float64) uint16 {
	b := math.Float32bits(float32(f))
	return uint16((b + 0x7fff + b>>16&1) >> 16)
}

func fromBF16(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// level is max(0, estimate − drain × elapsed) + factor × pending, at unix ns now: the
// fleet's count at the last read, less what has aged out of the window since, plus what
// the fleet is predicted to have counted since, from what this gate counted. The factor is
// the fleet's records per record seen here (1 for a gate alone; about N for one of N gates
// sharing a team's partitions evenly), so that between reads a gate sees the whole
// fleet's traffic move, not its own 1/N of it: a team crossing its limit is seen crossing
// by every gate at once, and each of N gates admits a 1/N share of what a capped team's
// window frees. Before any read the level is this gate's own count.
//
// For floor after a read of the shared count (not one rebuilt locally) by a gate that
// sees at most half of the team's records (factor 2 or more), the estimate is
// also a floor under the level, which drains only once floor has passed: the tick
// interval, by when the next read of a busy team lands. One of N gates sees every N-th
// record, so its prediction of the others' records is a saw tooth, N records high just
// after one of its own and low just before the next, while the window's old records age
// out smoothly: a team at its threshold would dip under it between this gate's records
// and let some through that the fleet has no room for. A team that sends less than what
// ages out is seen doing so by the next read; through an outage (local reads) the level
// drains as before.
func (e *entry) level(now, floor int64) float64 {
	at := e.readAt.Load()
	if at == 0 {
		return float64(e.pending())
	}
	est, drain, factor := unpackView(e.estimate.Load())
	base := est
	el := now - at
	if el > 0 {
		base -= drain * float64(el)
	}
	lvl := max(base, 0) + factor*float64(e.pending())
	if at&readLocal != 0 || factor < 2 {
		return lvl // rebuilt locally, or most of the team's records seen here: no saw tooth
	}
	if d := el - floor; d > 0 {
		est -= drain * float64(d)
	}
	return max(lvl, est)
}

// slotEpoch is the epoch of an unsent slot's value v, from its tag, seen at current epoch
// cur: the signed distance, as a check timed just after the sweep's clock read can be one
// epoch ahead of cur.
func slotEpoch(cur int64, v uint64) int64 {
	return cur - int64(int16(uint16(uint64(cur)-v)))
}

// addUnsent adds n to the counts waiting for the tick in epoch. It returns what it
// displaced: counts of the epoch two back in the same slot that no sweep collected, which
// only happens when no sweep ran for a whole window.
func (e *entry) addUnsent(epoch, n int64) (displaced int64) {
	slot := &e.unsent[epoch&1]
	tag := uint64(epoch) & epochTagMask
	for {
		v := slot.Load()
		if v&epochTagMask == tag {
			slot.Add(uint64(n) << epochTagBits)
			return 0
		}
		if slot.CompareAndSwap(v, tag|uint64(n)<<epochTagBits) {
			return int64(v >> epochTagBits)
		}
	}
}

// drainUnsent takes every unsent count, adds it to flushed and appends it to counts as of
// current epoch cur. Counts for epochs older than cur−1 are not appended: their sum is
// returned as stale. Only the tick (one goroutine) calls it.
func (e *entry) drainUnsent(counts []Count, cur int64) (_ []Count, stale int64) {
	return e.drain(counts, cur, false)
}

// drain is drainUnsent, for the counts of epochs before cur alone when endedOnly: those of
// windows that have ended, which no check adds to any more.
func (e *entry) drain(counts []Count, cur int64, endedOnly bool) (_ []Count, stale int64) {
	for i := range e.unsent {
		slot := &e.unsent[i]
		v0 := slot.Load()
		seen := int64(v0 >> epochTagBits)
		if seen == 0 {
			continue
		}
		if endedOnly && slotEpoch(cur, v0) >= cur {
			continue // the current epoch's (or, timed just after cur was read, the next's)
		}
		// Add to flushed before taking from unsent, so a concurrent check sees these
		// records twice for an instant rather than not at all.
		e.flushed.Add(seen)
		v := slot.And(epochTagMask) // keep the tag, take the count
		n := int64(v >> epochTagBits)
		e.flushed.Add(n - seen)
		epoch := slotEpoch(cur, v)
		if epoch < cur-1 {
			e.flushed.Add(-n) // never written, so never part of a read
			stale += n
			continue
		}
		counts = append(counts, Count{Team: e.team(), Epoch: epoch, N: n})
	}
	return counts, stale
}
