package limit

import (
	"math"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Bit layouts of the packed entry words.
const (
	// thr: generation << thresholdBits | threshold. One atomic load gives a threshold and
	// whether it is current, so an override swap never shows a check a mix.
	thresholdBits = 44
	thresholdMask = 1<<thresholdBits - 1
	genMask       = 1<<(64-thresholdBits) - 1

	// unsent[i]: count << epochTagBits | epoch tag. The tag tells which epoch of this
	// slot's parity the count belongs to, so counts never cross an epoch boundary.
	epochTagBits = 16
	epochTagMask = 1<<epochTagBits - 1
)

// entry is one cached team. Every field is atomic: checks on many cores and the tick read
// and write it without a lock. It is kept to 72 bytes (the 80-byte size class) because
// there are hundreds of thousands of them.
type entry struct {
	team     string
	estimate atomic.Uint64    // float64 bits: the global estimate at readAt
	readAt   atomic.Int64     // unix ns of the last applied read; 0 = never read
	flushed  atomic.Int64     // handed to the tick since the last read (tick writes only)
	unsent   [2]atomic.Uint64 // by epoch parity: counted, not yet handed to the tick
	thr      atomic.Uint64    // packed threshold and overrides generation
	seen     atomic.Uint32    // last check, in seconds since the limiter's base
	tier     atomic.Uint32    // tier at the last check
}

// pending is how many records were counted here since the last read: those handed to the
// tick plus those still waiting. Keeping it as a sum spares the per-record path a second
// locked add.
func (e *entry) pending() int64 {
	return e.flushed.Load() + int64(e.unsent[0].Load()>>epochTagBits) + int64(e.unsent[1].Load()>>epochTagBits)
}

// level is max(0, estimate − leak × elapsed) + pending, at unix ns now.
func (e *entry) level(now int64, leakPerNs float64) float64 {
	var lvl float64
	if at := e.readAt.Load(); at != 0 {
		est := math.Float64frombits(e.estimate.Load())
		if el := now - at; el > 0 {
			est -= leakPerNs * float64(el)
		}
		if est > 0 {
			lvl = est
		}
	}
	return lvl + float64(e.pending())
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
	for i := range e.unsent {
		slot := &e.unsent[i]
		seen := int64(slot.Load() >> epochTagBits)
		if seen == 0 {
			continue
		}
		// Add to flushed before taking from unsent, so a concurrent check sees these
		// records twice for an instant rather than not at all.
		e.flushed.Add(seen)
		v := slot.And(epochTagMask) // keep the tag, take the count
		n := int64(v >> epochTagBits)
		e.flushed.Add(n - seen)
		// Signed distance: a check timed just after the sweep's clock read can be one
		// epoch ahead of cur.
		epoch := cur - int64(int16(uint16(uint64(cur)-v)))
		if epoch < cur-1 {
			e.flushed.Add(-n) // never written, so never part of a read
			stale += n
			continue
		}
		counts = append(counts, Count{Team: e.team, Epoch: epoch, N: n})
	}
	return counts, stale
}

// Entries carry their team's bytes inline when they fit, and the cache's map key points at
// them: looking a team up then compares bytes on the same cache lines the check reads next,
// one cache miss instead of two, at the same memory as a separately allocated key.
type (
	entryKey16 struct {
		key [16]byte
		entry
	}
	entryKey32 struct {
		key [32]byte
		entry
	}
	entryKey48 struct {
		key [48]byte
		entry
	}
	entryKey64 struct {
		key [64]byte
		entry
	}
)

// newEntry returns an entry whose team is a copy of team: the caller's string may alias a
// reused buffer (a record's bytes).
func newEntry(team string) *entry {
	var e *entry
	var key []byte
	switch n := len(team); {
	case n <= 16:
		x := new(entryKey16)
		e, key = &x.entry, x.key[:n]
	case n <= 32:
		x := new(entryKey32)
		e, key = &x.entry, x.key[:n]
	case n <= 48:
		x := new(entryKey48)
		e, key = &x.entry, x.key[:n]
	case n <= 64:
		x := new(entryKey64)
		e, key = &x.entry, x.key[:n]
	default:
		e = new(entry)
		e.team = strings.Clone(team)
		return e
	}
	copy(key, team)
	e.team = unsafe.String(unsafe.SliceData(key), len(key))
	return e
}
