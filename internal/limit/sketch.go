package limit

import (
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capturegate/gate/internal/cpu"
)

// Keys below the fleet floor are counted in a sketch, not cached one entry each.
//
// A key whose records on this gate stay under its floor, SyncFloor × threshold ÷ the
// fleet's size (SetFleetSize), cannot be over its limit: the fleet's count is the sum of
// every gate's, each under SyncFloor ÷ N of the threshold, so under SyncFloor (1%) of it.
// Such a key needs no entry, no write and no read (the local-threshold argument of
// distributed threshold monitoring: Keralapura, Cormode and Ramamirtham, "Communication-
// efficient distributed monitoring of thresholded counts", SIGMOD 2006). It is counted in
// a Count-Min sketch (Cormode and Muthukrishnan, 2005) per window instead, fixed memory
// whatever the key's cardinality, and answered allowed. The first record that brings its
// sketch count over the floor promotes it: it is cached, with the sketch's counts of the
// current and previous windows as its own (written to the store like any count), and read
// at once, as its local pressure is the read floor's. Its sketch count is the sliding
// window's, as a cached key's level: the current window's count, and the last one's
// weighed by how much of it the sliding window still covers.
//
// What it guarantees:
//   - The sketch never undercounts: every record adds to each of a key's counters, and a
//     key's count is the least of them. A key is so promoted no later than its true count
//     reaches the floor; other keys' records sharing its counters only promote it sooner.
//   - The fleet-wide count a read misses of a key over its limit is at most what the gates
//     counted of it before promotion, each under its floor: SyncFloor × threshold. Its
//     carried counts are the sketch's less an estimate of the noise (below, carry): over
//     or under its own by what that estimate misses. What promotions carried is
//     remembered (carriedCounts), so a key demoted or evicted and promoted again is not
//     carried twice, unless its shard remembers a capacity's worth of teams already: then
//     at most the floor, per gate, and upwards only.
//   - The noise: a key's counter in one row holds, besides its own records, those of the
//     keys sharing it; with M records in a window and W counters a row, M ÷ W on average,
//     and the least of four rows is less. With the default width (65,536) and a million
//     records a window that is 15, against a floor in the thousands for a threshold of a
//     million, or 300 for a per-user rule of 30,000.
//   - Memory: 3 windows × 4 rows × width × 4 bytes, 3 MiB a limiter at the default width,
//     allocated once.
//
// The layout is blocked: a key's four counters are on two 64-byte lines chosen by its hash
// (cells), so a check of an untracked key waits for two lines, not four.

const (
	sketchRows     = 4
	sketchLine     = 16             // counters a cache line holds
	sketchRowWidth = sketchLine / 2 // two rows a line
	// DefaultSketchWidth is the counters a row of the sketch has (Config.SketchWidth).
	DefaultSketchWidth = 1 << 16
	// sketchSlots: the current window, the previous one (the sliding window's), and the
	// next one, cleared ahead by the sweep.
	sketchSlots = 3
	noEpoch     = math.MinInt64
)

type sketch struct {
	lines uint64 // lines a slot has: a power of two
	slots [sketchSlots]sketchSlot
}

// sketchSlot is one window's counters. The slots share one array, a line of each slot
// beside the same line of the others (line i of slot k at (3i + k) × 16), so that a check
// reading a key's counts in the current and the previous window waits for lines that are
// neighbours, which the processor fetches together, not for lines far apart.
type sketchSlot struct {
	epoch atomic.Int64 // the window the slot counts; noEpoch while none
	k     uint64       // the slot's index
	c     []atomic.Uint32
}

// line is line li of the slot.
func (sl *sketchSlot) line(li uint64) []atomic.Uint32 {
	at := (li*sketchSlots + sl.k) * sketchLine
	return sl.c[at : at+sketchLine : at+sketchLine]
}

func newSketch(width int) *sketch {
	lines := uint64(max(width*sketchRows/sketchLine, 1))
	for lines&(lines-1) != 0 {
		lines++
	}
	s := &sketch{lines: lines}
	c := make([]atomic.Uint32, lines*sketchSlots*sketchLine)
	for i := range s.slots {
		s.slots[i].c, s.slots[i].k = c, uint64(i)
		s.slots[i].epoch.Store(noEpoch)
	}
	return s
}

// slot is the slot of epoch, or nil when it does not count epoch (not cleared for it yet:
// the sweep clears a slot a window ahead).
func (s *sketch) slot(epoch int64) *sketchSlot {
	sl := &s.slots[uint64(epoch)%sketchSlots]
	if sl.epoch.Load() != epoch {
		return nil
	}
	return sl
}

// cells are the four counters of a key of hash h: two lines (their indexes), two rows in each (a row
// being 8 of a line's 16 counters), and an offset in each row. The hash's low bits chose
// the key's shard and its high half where its table probe starts: the lines are chosen by
// a mix of the whole of it. Two lines, not one: two keys sharing a line share a row's
// counter one time in 8, and all four one time in 4,096 were the four rows on one line,
// often enough among millions of keys for a promoted key's counts, which stay in the
// sketch, to promote a stranger; on two lines it is one time in 4,096 × the lines.
type cells struct {
	line [2]uint64
	off  [sketchRows]uint8
}

func (s *sketch) cells(h uint64) cells {
	x := h * 0x9e3779b97f4a7c15
	x ^= x >> 29
	y := x * 0xbf58476d1ce4e5b9
	y ^= y >> 32
	c := cells{line: [2]uint64{x >> 32 & (s.lines - 1), y & (s.lines - 1)}}
	for r := range sketchRows {
		c.off[r] = uint8(r%2*sketchRowWidth) + uint8(x>>(3*r))&(sketchRowWidth-1)
	}
	return c
}

// prefetch has the processor fetch the lines of the key of hash h in the windows ep and
// ep-1 without waiting for them.
func (s *sketch) prefetch(h uint64, ep int64) {
	c := s.cells(h)
	k, pk := uint64(ep)%sketchSlots, uint64(ep-1)%sketchSlots
	a, b := c.line[0]*sketchSlots*sketchLine, c.line[1]*sketchSlots*sketchLine
	cnt := s.slots[0].c
	cpu.Prefetch4(unsafe.Pointer(&cnt[a+k*sketchLine]), unsafe.Pointer(&cnt[b+k*sketchLine]),
		unsafe.Pointer(&cnt[a+pk*sketchLine]), unsafe.Pointer(&cnt[b+pk*sketchLine]))
}

// setSketchPrefetch sets skPrefetch from the checks since the last sweep: on when the sketch
// answered more than half of them. A per-user rule's checks mostly go to it, and its key's
// sketch lines and its probe of the cache then come from memory together, one wait; a
// team rule's checks mostly hit the cache, and would pay the prefetches and their lines
// in the caches for nothing. Checks and sketch answers are both counted in the routing
// goroutines' tallies (AddTally), so a sweep between two flushes sees them lag alike;
// and with no floor (untrackedFloor 0) the sketch answers none, and nothing is fetched.
// Only the sweep calls it.
func (l *Limiter) setSketchPrefetch() {
	var checks, untracked uint64
	for i := range l.decisions {
		checks += l.decisions[i].allowed.Load() + l.decisions[i].limited.Load()
	}
	for i := range l.shards {
		untracked += l.shards[i].untracked.Load()
	}
	dc, du := checks-l.skSeen[0], untracked-l.skSeen[1]
	l.skSeen = [2]uint64{checks, untracked}
	if on := dc > 0 && 2*du > dc; on != l.skPrefetch.Load() {
		l.skPrefetch.Store(on)
	}
}

// estimate is the key's count in sl: the least of its counters.
func (sl *sketchSlot) estimate(c cells) int64 {
	a, b := sl.line(c.line[0]), sl.line(c.line[1])
	return int64(min(a[c.off[0]].Load(), a[c.off[1]].Load(), b[c.off[2]].Load(), b[c.off[3]].Load()))
}

// add counts n records of the key in sl.
func (sl *sketchSlot) add(c cells, n int64) {
	a, b := sl.line(c.line[0]), sl.line(c.line[1])
	a[c.off[0]].Add(uint32(n))
	a[c.off[1]].Add(uint32(n))
	b[c.off[2]].Add(uint32(n))
	b[c.off[3]].Add(uint32(n))
}

// prepare readies the slots of epochs cur and cur+1, clearing a slot that counted an older
// window. Only the sweep calls it. A check still adding to a slot as it is cleared (one
// that read the slot's epoch a window ago) adds to the new window's counts: an overcount,
// never an undercount.
func (s *sketch) prepare(cur int64) {
	for _, ep := range [2]int64{cur, cur + 1} {
		sl := &s.slots[uint64(ep)%sketchSlots]
		if sl.epoch.Load() == ep {
			continue
		}
		sl.epoch.Store(noEpoch) // checks stop adding before the counts go
		for li := range s.lines {
			clearCounters(sl.line(li))
		}
		sl.epoch.Store(ep)
	}
}

// counts are the key's counts in the windows epoch and epoch−1, 0 for a window the sketch
// does not count.
func (s *sketch) counts(c cells, epoch int64) (cur, prev int64) {
	if sl := s.slot(epoch); sl != nil {
		cur = sl.estimate(c)
	}
	if sl := s.slot(epoch - 1); sl != nil {
		prev = sl.estimate(c)
	}
	return cur, prev
}

// SetFleetSize tells the limiter how many gates share its input (at least 1): each gate's
// part of the floor under which a key is neither cached nor written nor read is SyncFloor
// ÷ n of its threshold, so that the fleet's count of a key under every gate's floor is
// under SyncFloor of it. The tick counts the fleet (internal/tick, fleet.go).
func (l *Limiter) SetFleetSize(n int) {
	n = max(n, 1)
	if int(l.fleetSize.Swap(int64(n))) == n {
		return
	}
	l.setFloor()
}

// FleetSize is the fleet's size as last set (1 until then).
func (l *Limiter) FleetSize() int { return int(l.fleetSize.Load()) }

// maxSketchFloor is the highest untracked floor: half of what a sketch counter holds, so
// that no counter wraps under it.
const maxSketchFloor = math.MaxUint32 / 2

// setFloor computes the untracked floor, in records of a key at the default threshold
// (overridden keys are always cached): 0, nothing untracked, when it is under 2 records,
// no sketch being of use.
func (l *Limiter) setFloor() {
	if l.sk == nil {
		return
	}
	f := int64(l.cfg.SyncFloor * float64(l.cfg.Threshold) / float64(l.fleetSize.Load()))
	if f < 2 {
		f = 0
	}
	// A counter holds 2^32: a floor past half of it (a threshold in bytes, a long window)
	// would let a key's counters wrap under it, the key never promoted nor limited. A
	// lower floor only caches a key sooner.
	f = min(f, maxSketchFloor)
	l.untrackedFloor.Store(f)
}

// readFloorShare is the pressure under which a key this gate has counted but never read is
// not read: SyncFloor ÷ the fleet's size.
func (l *Limiter) readFloorShare() float64 {
	return l.cfg.SyncFloor / float64(l.fleetSize.Load())
}

// checkUntracked answers a check of team, not cached, from the sketch: allowed and counted
// there while its count stays under the floor. It reports false when the team must be
// cached: the sketch is off or not ready for the epoch, the team has an override, or this
// record takes it to its floor. With no floor (under 2 records: a small threshold over a
// large fleet) every key is cached, but a rotating team's keys not cached are still
// handled as on_cardinality says, and counted toward their team's keys: otherwise a team
// minting a key per record would be cached, and written, key by key, and never found.
func (l *Limiter) checkUntracked(ns int64, h uint64, team string, n int64, tally *Tally) (Decision, bool) {
	floor := l.untrackedFloor.Load()
	if floor == 0 && l.card == nil && l.follow == nil {
		return Decision{}, false
	}
	if l.overridden(team) {
		return Decision{}, false
	}
	sp := l.span.Load()
	if sp == nil || ns < sp.start || ns >= sp.end {
		sp = l.spanAt(ns)
	}
	sl := l.sk.slot(sp.epoch)
	if sl == nil {
		return Decision{}, false
	}
	// A rotating team's keys under the floor count as its collapsed key, which ends in
	// ':' (no record's key does) and is checked as any key. Asked first: its keys are
	// fresh, and the sketch's lines need not be read, only added to.
	if l.card != nil && len(team) > 0 && team[len(team)-1] != ':' {
		if r := l.observe(team, h, sp.epoch); r != nil {
			d := l.rotatingCheck(ns, h, r, n, tally)
			// Counted as its own too, not promoted: when the rotation ends, the key's
			// sliding window still holds what it was admitted as the collapsed key.
			// Through a tally, a few of the team's checks later (Tally.deferAdd), when
			// the key's lines have come: the key is counted as the collapsed one
			// meanwhile, and its own count matters only once the rotation ends (then
			// in its entry, should another check have promoted it meanwhile).
			if n > 0 && (!d.Limited || l.cfg.Mode == Divert) {
				if tally != nil {
					tally.deferAdd(l, r, sl, sp.epoch, ns, h, l.sk.cells(h), team, n)
				} else {
					sl.add(l.sk.cells(h), n)
				}
			}
			return d, true
		}
	}
	if floor == 0 {
		// Every key is cached, but a key of a team the rule's primary limit finds rotating
		// (FollowRotation): counted here as under a floor, a counter's worth, and cached
		// with those counts once the rotation ends.
		if l.follow == nil || !l.follow.rotatingKey(team) {
			return Decision{}, false
		}
		floor = maxSketchFloor
	}
	c := l.sk.cells(h)
	// The sliding window's count, as a cached key's level weighs it: a key whose rate
	// stays between half its floor and its floor is neither promoted nor demoted in turn.
	var prev int64
	if psl := l.sk.slot(sp.epoch - 1); psl != nil {
		prev = psl.estimate(c)
	}
	est := l.sliding(sl.estimate(c), prev, ns, sp.end)
	if est+n >= floor {
		return Decision{}, false
	}
	sl.add(c, n)
	if tally != nil {
		tally.count(false)
		tally.untracked++
	} else {
		l.stripe().count(false)
		l.shards[h&l.mask].untracked.Add(1)
	}
	thr := l.cfg.Threshold
	return Decision{Threshold: thr, Level: float64(est), verdict: verdict{Tier: tierOfLevel(float64(est), float64(thr))}}, true
}

// countCached counts n records of key (hash h) of window ep, checked at ns, in its
// entry when it is cached, as a check of it would: a rotating key's add that a Tally held
// back past its rotation's end, the key promoted meanwhile. It reports whether the key was
// cached (the count then in its entry, or dropped with its window when ep is no longer
// one the entry holds).
func (l *Limiter) countCached(h uint64, key string, ep, ns, n int64) bool {
	sh := &l.shards[h&l.mask]
	e, _ := sh.idx.tab.Load().lookup(h, key)
	if e == nil {
		return false
	}
	sp := l.span.Load()
	if sp == nil || ep < sp.epoch-1 || ep > sp.epoch {
		return true // an entry holds two windows' counts: this one's went with its window
	}
	if lost, moved := e.addUnsent(ep, n, &l.highEpoch); moved {
		l.recount(h, key, ns, ep, n)
	} else if lost > 0 {
		sh.displaced.Add(uint64(lost))
	}
	return true
}

// carry gives e, the new entry of team promoted out of the sketch (not yet published), the
// sketch's counts of it in the current and previous windows as its own unsent counts: they
// were counted here and never written. Less the noise: what the least of four counters of
// another line holds, the other keys' records a key's counters hold at this load (the
// count-mean-min correction, Deng and Rafiei 2007), so that a key met for the first time
// at a high load is not carried in with other keys' records. Less what an earlier
// promotion of it carried of those windows (sh.carried): a key promoted, then evicted,
// expired or demoted, and promoted again within two windows finds the same counts in the
// sketch, and would carry them as records again at each return. A team whose override
// predates both windows was never counted in the sketch there and carries nothing; one
// given its override since was, and carries what it was counted. The caller holds sh.mu.
func (l *Limiter) carry(sh *shard, e *entry, h uint64, team string, ns int64) {
	ep := floorDiv(ns, l.windowNs)
	if since, ok := l.overrides.Load().overriddenSince(team); ok && since < (ep-1)*l.windowNs {
		return
	}
	cur, prev := l.sk.ownCounts(h, ep)
	done, known := sh.carried[team]
	if !known {
		done.epoch = ep // nothing carried of team in these windows
	}
	cur = max(cur-done.of(ep), 0)
	prev = max(prev-done.of(ep-1), 0)
	if cur > 0 {
		e.addUnsent(ep, cur, &l.highEpoch)
	}
	if prev > 0 {
		e.addUnsent(ep-1, prev, &l.highEpoch)
	}
	if cur+prev > 0 {
		sh.promoted.Add(1)
		// Remembered for the two windows the sketch holds them, a shard's capacity of
		// teams at most (past it, a team promoted again may carry them twice).
		if known || len(sh.carried) < max(l.cfg.Capacity/len(l.shards), 1) {
			if sh.carried == nil {
				sh.carried = map[string]carriedCounts{}
			}
			sh.carried[strings.Clone(team)] = done.plus(ep, cur, prev)
		}
	}
}

// carriedCounts are what promotions carried of a team out of the sketch: n[i] of window
// epoch−i. Three windows: a promotion carries two, and one timed a window before the
// last (a check whose clock read is older: another routing goroutine's, read before the
// boundary) carries the one before those.
type carriedCounts struct {
	epoch int64
	n     [3]int64
}

// of is what was carried of window w.
func (c carriedCounts) of(w int64) int64 {
	if d := c.epoch - w; d >= 0 && d < int64(len(c.n)) {
		return c.n[d]
	}
	return 0
}

// plus is c and a promotion's carry of cur records of window ep and prev of ep−1: from
// the later of c's newest window and ep, so that a promotion timed before the last one
// does not forget what that one carried of its newer window (carried again at the next
// promotion in it: records written twice).
func (c carriedCounts) plus(ep, cur, prev int64) carriedCounts {
	r := carriedCounts{epoch: max(c.epoch, ep)}
	for i := range r.n {
		w := r.epoch - int64(i)
		r.n[i] = c.of(w)
		switch w {
		case ep:
			r.n[i] += cur
		case ep - 1:
			r.n[i] += prev
		}
	}
	return r
}

// ownCounts are the sketch's counts of the key of hash h in windows ep and ep−1 less the
// noise at this load: what the least of four counters of another line (the hash's
// complement's) holds, never below 0.
func (s *sketch) ownCounts(h uint64, ep int64) (cur, prev int64) {
	cur, prev = s.counts(s.cells(h), ep)
	if cur+prev == 0 {
		return 0, 0
	}
	ncur, nprev := s.counts(s.cells(^h), ep)
	return max(cur-ncur, 0), max(prev-nprev, 0)
}

// overriddenSince reports whether team has an override, and since when (unix ns; 0: at
// the limiter's start).
func (o *overrides) overriddenSince(team string) (int64, bool) {
	if _, ok := o.m[team]; !ok {
		return 0, false
	}
	return o.since[team], true
}

// overridden reports whether team has an override: such a key is always cached, at its
// own threshold, and never counted in the sketch.
func (l *Limiter) overridden(team string) bool {
	_, ok := l.overrides.Load().threshold(team, 0)
	return ok
}

// sliding is the sliding window's count at unix ns ns from a window's count cur and the
// previous window's prev, the window ending at end: as a cached key's level weighs them.
func (l *Limiter) sliding(cur, prev, ns, end int64) int64 {
	return cur + int64(float64(prev)*float64(end-ns)*l.invWindow)
}

// demotable reports whether team, cached as e and under half its floor at epoch cur, may
// go back to the sketch: not with an override (always cached, at its own threshold), nor
// while held, nor while the sketch still holds counts of it from before it was promoted
// (those were carried into its entry and written: back in the sketch, its next promotion
// would carry and write them again), nor while other keys' counts there would promote it
// again at once. After a promotion nothing of the team is added to
// the sketch, so that is two windows at most. The caller holds the shard's mutex.
func (l *Limiter) demotable(e *entry, team string, cur int64) bool {
	if e.thr.Load()&heldBit != 0 {
		return false
	}
	if l.overridden(team) {
		return false
	}
	// The sketch's estimate, not its noise-corrected count: the estimate is what promotes
	// the key again (checkUntracked), and a key demoted while its estimate is at its floor
	// would be promoted at its next record with nothing carried, never reaching the read
	// floor.
	c, p := l.sk.counts(l.sk.cells(maphash.String(l.seed, team)), cur)
	return c+p < max(l.untrackedFloor.Load()/8, 1)
}

// Untracked is what this gate knows of key when it is under its floor, not cached: the
// sketch's count of it over the sliding window (never less than its records, more by the
// sketch's noise) and the floor, in records; ok is false when the key is cached, has an
// override, or the limiter keeps no sketch.
func (l *Limiter) Untracked(now time.Time, key string) (count, floor int64, ok bool) {
	floor = l.untrackedFloor.Load()
	if floor == 0 {
		return 0, 0, false
	}
	h := maphash.String(l.seed, key)
	if e, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, key); e != nil {
		return 0, floor, false
	}
	if l.overridden(key) {
		return 0, floor, false
	}
	ns := now.UnixNano()
	ep := floorDiv(ns, l.windowNs)
	cur, prev := l.sk.counts(l.sk.cells(h), ep)
	return l.sliding(cur, prev, ns, (ep+1)*l.windowNs), floor, true
}
