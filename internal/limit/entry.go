package limit

import (
	"encoding/binary"
	"math"
	"sync/atomic"
)

// Bit layouts of the packed entry words.
const (
	// thr: moved | generation << genShift | tier << tierShift | held | threshold. One atomic load
	// gives a threshold and whether it is current, so an override swap never shows a check
	// a mix; the tier at the last check and whether the team is held in overflow
	// (hold.go) ride along, as they are read on the same path.
	thresholdBits = 43
	thresholdMask = 1<<thresholdBits - 1
	heldBit       = 1 << thresholdBits
	tierShift     = thresholdBits + 1
	tierMask      = 1<<2 - 1 // numTiers ≤ 4
	genShift      = tierShift + 2
	genMask       = 1<<(63-genShift) - 1 // the top bit is movedBit

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

// inlineKey is how many bytes of its team an entry holds in its own 64 bytes: the whole
// team up to that length. A longer team is in its table's arena (table.arena), and the
// entry's key holds where (arenaRef).
const inlineKey = 11

// A long team's entry key: its offset in the arena in the first arenaOffBytes bytes
// (a terabyte), a tag of its hash in the rest (arenaTag).
const (
	arenaOffBytes = 5
	arenaTagBits  = (inlineKey - arenaOffBytes) * 8
)

// arenaRef returns where a long team's entry says its team is in the table's arena, and
// the tag of its hash: two loads of eight bytes, the second overlapping the first.
func (e *entry) arenaRef() (off, tag uint64) {
	return binary.LittleEndian.Uint64(e.key[:8]) & (1<<(8*arenaOffBytes) - 1),
		binary.LittleEndian.Uint64(e.key[inlineKey-8:]) >> (64 - arenaTagBits)
}

// setArenaRef writes off and tag into a long team's entry, not yet published.
func (e *entry) setArenaRef(off, tag uint64) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], off)
	binary.LittleEndian.PutUint64(b[8:], tag)
	copy(e.key[:arenaOffBytes], b[:])
	copy(e.key[arenaOffBytes:], b[8:])
}

// longKey in entry.klen says the team is longer than inlineKey.
const longKey = 0xff

// movedBit, in an unsent or thr word, says the entry was moved to a new table or removed
// (index.go): a check that finds it in what its write returned writes again in the team's
// current entry. Counts never reach it (2^47 records in a window), nor does the thr word's
// generation (genMask).
const movedBit = 1 << 63

// entry is one cached team, a slot of its shard's table (index.go). Every word a check
// reads or writes is atomic: checks on many cores and the tick read and write it without
// a lock. It is exactly 64 bytes, and a table's slots start on a cache line (a large
// allocation is page-aligned), so a check's key compare and every word it then reads or
// writes are on one line.
type entry struct {
	estimate atomic.Uint64    // float64 bits: the global estimate at readAt
	readAt   atomic.Int64     // unix ns of the last applied read; 0 = never read; see readLocal
	flushed  atomic.Int64     // handed to the tick since the last read (tick writes only)
	unsent   [2]atomic.Uint64 // by epoch parity: counted, not yet handed to the tick
	thr      atomic.Uint64    // packed threshold, tier at the last check, overrides generation
	state    atomic.Uint32    // live, deleted, moved; when last seen (index.go)
	klen     uint8            // len(team), or longKey; set before the entry is published
	key      [inlineKey]byte  // the team, or its first bytes
}

// markMoved marks the words checks write (the unsent counts, the thr word) moved and
// returns what they held before. Under EventClock (event) unsent[1] is no count but the
// previous window's, written under the shard's mutex only, and is left as it is.
func (e *entry) markMoved(event bool) (unsent [2]uint64, thr uint64) {
	unsent[0] = e.unsent[0].Or(movedBit)
	if event {
		unsent[1] = e.unsent[1].Load()
	} else {
		unsent[1] = e.unsent[1].Or(movedBit)
	}
	return unsent, e.thr.Or(movedBit)
}

// moveTo marks e moved and copies it into ne, not yet published: its counts as they were
// when marked, so a check's write either is in the copy or finds the mark. The caller
// holds the shard's mutex, under which alone the tick writes the other words.
func (e *entry) moveTo(ne *entry, event bool) {
	unsent, thr := e.markMoved(event)
	ne.unsent[0].Store(unsent[0])
	ne.unsent[1].Store(unsent[1])
	ne.thr.Store(thr)
	ne.estimate.Store(e.estimate.Load())
	ne.readAt.Store(e.readAt.Load())
	ne.flushed.Store(e.flushed.Load())
}

// unsentCount is the count in an unsent word of a wall-clock entry.
func unsentCount(v uint64) int64 { return int64(v &^ movedBit >> epochTagBits) }

// pending is how many records were counted here since the last read: those handed to the
// tick plus those still waiting. Keeping it as a sum spares the per-record path a second
// locked add.
func (e *entry) pending() int64 {
	return e.flushed.Load() + unsentCount(e.unsent[0].Load()) + unsentCount(e.unsent[1].Load())
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
	return float64(math.Float32frombits(uint32(w))), fromBF16(uint16(w >> 32)), fromBF16(uint16(w>>48) &^ 0x8000)
}

// viewLocal is the fleet factor's sign bit in the estimate word (a factor is at least 1),
// set in a view a failed read rebuilt from this gate's counts (ApplyLocal), whose level
// takes factor 1, as readLocal says in readAt. Both are set: a check loads readAt, then
// the estimate, and ApplyLocal stores the estimate first, so that a check between the
// two stores takes the new, local view with the last read's time (drained by longer
// than it was: lower, for an instant) rather than the last read's estimate as of now,
// undrained, with factor 1 (TestCheckBetweenAFailedReadsStores).
const viewLocal = 1 << 63

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
	w := e.estimate.Load()
	est, drain, factor := unpackView(w)
	base := est
	el := now - at
	if el > 0 {
		base -= drain * float64(el)
	}
	// Local by either word: a check between a read's two stores finds one of them new
	// (viewLocal).
	local := at&readLocal != 0 || w&viewLocal != 0
	if local {
		factor = 1 // rebuilt from this gate's counts: the view keeps the last read's factor for the next one (ApplyLocal)
	}
	lvl := max(base, 0) + factor*float64(e.pending())
	if local || factor < 2 {
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

// unsentEpoch is the epoch a sweep at current epoch cur counts the unsent word v in: its
// tag's, read as slotEpoch does, when that is cur, the epoch before or the one after. A
// tag that reads later than that was either counted before the clock stepped back (its
// epoch no later than high, the latest any check or sweep saw: highEpoch), those records
// then counted now, in cur; or left unswept for more windows than the tag tells (a clock
// jump forward, a suspend), and its epoch is unknown: it returns math.MinInt64, stale.
func unsentEpoch(cur int64, high *atomic.Int64, v uint64) int64 {
	epoch := slotEpoch(cur, v)
	if epoch <= cur+1 {
		return epoch
	}
	if epoch <= high.Load() {
		return cur
	}
	return math.MinInt64
}

// addUnsent adds n to the counts waiting for the tick in epoch. It returns what it
// displaced: counts of an earlier epoch in the same slot that no sweep collected, which
// only happens when no sweep ran for a whole window (or for longer than the tag tells,
// which may make them read later than epoch); and whether e was moved (or removed) before
// n was added, n then being in no entry the tick reads: the caller counts it again in the
// team's current entry. Counts of a later epoch in the slot, no later than high (the
// limiter's highEpoch), were counted before the clock stepped back: they are kept, now
// of epoch, with n. n is not added to a full count (unsentFull): it is returned as
// displaced then.
func (e *entry) addUnsent(epoch, n int64, high *atomic.Int64) (displaced int64, moved bool) {
	slot := &e.unsent[epoch&1]
	tag := uint64(epoch) & epochTagMask
	for {
		v := slot.Load()
		if v&movedBit != 0 {
			return 0, true
		}
		if v&epochTagMask == tag {
			if v >= unsentFull {
				return n, false // full: the team is far over any threshold (unsentFull)
			}
			d := uint64(n) << epochTagBits
			if r := slot.Add(d); r&movedBit != 0 {
				return addedPastFull(slot, r, d, n)
			}
			return 0, false
		}
		nv, lost := tag|uint64(n)<<epochTagBits, int64(v>>epochTagBits)
		if ve := slotEpoch(epoch, v); lost > 0 && ve > epoch && ve <= high.Load() {
			nv, lost = nv+v&^epochTagMask, 0 // the clock stepped back: counted now
			if nv >= unsentFull {
				nv, lost = v&^epochTagMask|tag, n // full (unsentFull): the earlier counts alone
			}
		}
		if slot.CompareAndSwap(v, nv) {
			return lost, false
		}
	}
}

// unsentFull is the least unsent word whose count is full: 2^46 records, 8 × the
// largest threshold (MaxThreshold). A check adds at most MaxThreshold, so a full count
// is never added to, and one under it leaves room for 8 checks racing past the test
// before the count could reach the word's moved bit (2^47 records); checks of a huge
// cost in divert mode did within a tick (17 of MaxThreshold), and the team's every check
// then took the entry for one moved and looped for good, counting in the same entry.
// What is not added is counted as displaced: the team's level is far over its threshold
// either way.
const unsentFull = 1 << (46 + epochTagBits)

// addedPastFull is addUnsent's add of d (n records) whose result r has the moved bit:
// the entry was moved or removed (moved), or the add itself carried the count into the
// bit, checks racing past unsentFull, and it is taken out again (n displaced).
func addedPastFull(slot *atomic.Uint64, r, d uint64, n int64) (displaced int64, moved bool) {
	if (r-d)&movedBit != 0 {
		return 0, true
	}
	slot.Add(-d)
	return n, false
}

// removedCounts appends to counts, as team's, the counts in unsent, a removed entry's
// unsent words as they were when it was marked (index.remove), as of current epoch cur:
// as drain does, but only what was counted before the mark, what checks added since
// being counted again in the team's next entry.
func removedCounts(counts []Count, team string, cur int64, high *atomic.Int64, unsent [2]uint64) (_ []Count, stale int64) {
	for _, v := range unsent {
		n := unsentCount(v)
		if n == 0 {
			continue
		}
		if epoch := unsentEpoch(cur, high, v); epoch >= cur-1 {
			counts = append(counts, Count{Team: team, Epoch: epoch, N: n})
		} else {
			stale += n
		}
	}
	return counts, stale
}

// drain takes every unsent count, adds it to flushed and appends it to counts, as team's,
// as of current epoch cur; only the counts of epochs before cur when endedOnly: those of
// windows that have ended, which no check adds to any more. Counts for epochs older than
// cur−1, or of no epoch the tag can tell, are not appended: their sum is returned as stale
// (see unsentEpoch, which high is for). Only the tick (one goroutine) calls it, under the
// shard's mutex.
func (e *entry) drain(counts []Count, team string, cur int64, high *atomic.Int64, endedOnly bool) (_ []Count, stale int64) {
	for i := range e.unsent {
		slot := &e.unsent[i]
		v0 := slot.Load()
		seen := unsentCount(v0)
		if seen == 0 {
			continue
		}
		if endedOnly && unsentEpoch(cur, high, v0) >= cur {
			continue // the current epoch's (or, timed just after cur was read, the next's)
		}
		// Add to flushed before taking from unsent, so a concurrent check sees these
		// records twice for an instant rather than not at all.
		e.flushed.Add(seen)
		v := slot.And(epochTagMask | movedBit) // keep the tag and mark, take the count
		n := unsentCount(v)
		e.flushed.Add(n - seen)
		epoch := unsentEpoch(cur, high, v)
		if epoch < cur-1 {
			e.flushed.Add(-n) // never written, so never part of a read
			stale += n
			continue
		}
		counts = append(counts, Count{Team: team, Epoch: epoch, N: n})
	}
	return counts, stale
}
