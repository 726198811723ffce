package limit

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// Under EventClock a record is counted and judged in the window (epoch) of its own
// timestamp. Each window has its own cache of teams (an epochTable), so partitions read at
// different lags never mix: a record stamped in window E is judged on E's and E−1's counts
// only, however far ahead or behind the other partitions are.
//
// An entry of window E reuses the wall-clock entry's words:
//
//	estimate   the fleet's count of E at the last read (float64 bits)
//	readAt     wall ns of that read; 0 = never read; readLocal set: it failed (ApplyLocal)
//	flushed    handed to the tick since that read
//	unsent[0]  counted here, not yet handed to the tick (a plain count: one window per entry)
//	unsent[1]  the fleet's count of E−1 (float64 bits): as read with E, or, before the
//	           first read, this gate's view of E−1 when the entry was made
//	thr        as under WallClock
//
// and the level at a time t in E is the sliding-window estimate of the reference design,
// in event time: count(E−1) × (1 − progress(t)) + count(E), where count is the last read
// plus what this gate counted since.

// epochTable is the cache of one window under EventClock.
type epochTable struct {
	epoch  int64
	shards []shard
	count  atomic.Int64 // entries, against Capacity
	// dead is set, under every shard lock, when the sweep drops the table for being
	// empty: an insert that finds it set looks the window up again (see insertIn).
	dead atomic.Bool
}

// retiredCounters keeps the counters of dropped tables, so the metrics never go back.
type retiredCounters struct {
	misses, evicted, displaced, overfull atomic.Uint64
	transitions                          [numTiers * numTiers]atomic.Uint64
}

// add keeps the counters of sh, a shard of a table being dropped.
func (r *retiredCounters) add(sh *shard) {
	r.misses.Add(sh.misses.Load())
	r.evicted.Add(sh.evicted.Load())
	r.displaced.Add(sh.displaced.Load())
	r.overfull.Add(sh.overfull.Load())
	for j := range sh.transitions {
		r.transitions[j].Add(uint64(sh.transitions[j].Load()))
	}
}

func (e *entry) evPending() int64 { return e.flushed.Load() + int64(e.unsent[0].Load()&^movedBit) }

// evCount is the entry's count of its own window: the last read plus what was counted here
// since.
func (e *entry) evCount() float64 {
	var c float64
	if e.readAt.Load() != 0 {
		c = math.Float64frombits(e.estimate.Load())
	}
	return c + float64(e.evPending())
}

func (e *entry) evPrev() float64 { return math.Float64frombits(e.unsent[1].Load()) }

// evLevel is the level at progress (0..1) through the entry's window.
func (e *entry) evLevel(progress float64) float64 {
	return e.evPrev()*(1-progress) + e.evCount()
}

// evDrain moves the unsent count to flushed and returns it. Only the tick calls it, under
// the shard's lock.
func (e *entry) evDrain() int64 {
	seen := int64(e.unsent[0].Load() &^ movedBit)
	if seen == 0 {
		return 0
	}
	// flushed first: a concurrent check sees these records twice for an instant rather
	// than not at all.
	e.flushed.Add(seen)
	v := int64(e.unsent[0].Swap(0))
	e.flushed.Add(v - seen)
	return v
}

// CheckEventAt counts n records for team at time at (a record's own timestamp) and says
// whether the team is limited in at's window, under EventClock; now is the wall clock,
// read by the caller. at is clamped into [now − MaxEventAge, now] when it is older than
// that or more than MaxFutureSkew ahead (counted in gate_limiter_event_time_clamped_total);
// a zero at counts as now. Under WallClock it is CheckAt(now, team, n): at is ignored.
// Like CheckAt it does no I/O and, for a team already cached in at's window, allocates
// nothing.
func (l *Limiter) CheckEventAt(now, at time.Time, team string, n int64) Decision {
	return l.checkEvent(now, at, team, n, nil)
}

// ClampEventTime is at as a check under EventClock counts it: now − MaxEventAge for a
// time older than that, now for one more than MaxFutureSkew ahead, else at itself (a zero
// at too); under WallClock, at. A caller checking one record against several limiters
// (each limit of a rule, each rule) passes it to every check after the first: checked at
// the clamped time, a limiter counts the record where the first did and counts no clamp,
// so that gate_limiter_event_time_clamped_total, added up over the limiters, counts
// records, once each.
func (l *Limiter) ClampEventTime(now, at time.Time) time.Time {
	if l.ring == nil || at.IsZero() {
		return at
	}
	if ns, clamp := l.eventNs(now, at); clamp != clampNone {
		return time.Unix(0, ns)
	}
	return at
}

// Why a check under EventClock counted a record at another time than its own (eventNs).
const (
	clampNone   = iota
	clampTooOld // older than MaxEventAge: counted that old
	clampFuture // more than MaxFutureSkew ahead: counted now
)

// eventNs is the time, in Unix ns, a check at wall time now counts a record of event
// time at in (now for a zero at), and whether and why it clamped at. The one rule for
// checkEvent and ClampEventTime.
func (l *Limiter) eventNs(now, at time.Time) (int64, int) {
	switch {
	case at.IsZero():
		return now.UnixNano(), clampNone
	case at.Before(now.Add(-l.cfg.MaxEventAge)):
		return now.UnixNano() - l.maxAgeNs, clampTooOld
	case at.After(now.Add(MaxFutureSkew)):
		return now.UnixNano(), clampFuture
	}
	return at.UnixNano(), clampNone
}

// CheckEventTally is CheckEventAt counting its decision, and a clamped timestamp, in t
// rather than in the limiter's counters (see CheckTally).
func (l *Limiter) CheckEventTally(now, at time.Time, team string, n int64, t *Tally) Decision {
	return l.checkEvent(now, at, team, n, t)
}

// checkEvent is CheckEventTally, counting in the limiter's counters when t is nil.
func (l *Limiter) checkEvent(now, at time.Time, team string, n int64, t *Tally) Decision {
	if l.ring == nil {
		return l.check(now, team, maphash.String(l.seed, team), n, t)
	}
	var own Tally
	st := t
	if st == nil {
		st = &own
	}
	wall := now.UnixNano()
	ns, clamp := l.eventNs(now, at)
	switch clamp {
	case clampTooOld:
		st.tooOld++
	case clampFuture:
		st.future++
	}
	ep := floorDiv(ns, l.windowNs)
	h := maphash.String(l.seed, team)
	var e *entry
	var sh *shard
	var thr int64
	var tw uint64
	for e == nil {
		tbl := l.table(ep)
		sh = &tbl.shards[h&l.mask]
		t := sh.idx.tab.Load()
		var st uint32
		if e, st = t.lookup(h, team); e == nil {
			e = l.insertIn(tbl.shards, tbl, h, team, wall) // nil: tbl was just dropped
		} else if sn := l.seenAt(wall); st&seenMask != sn {
			l.touch(sh, t, e, st, sn, h, team)
		}
		if e != nil {
			if thr, tw = l.thresholdWord(e, team); tw&movedBit != 0 {
				e = nil // moved or removed since the lookup: look again
			}
		}
	}

	fthr := float64(thr)
	lvl := e.evLevel(float64(ns-ep*l.windowNs) * l.invWindow)
	d := Decision{verdict: verdict{Limited: lvl >= fthr, Tier: tierOfLevel(lvl, fthr)}, Threshold: thr, Level: lvl}
	if n > 0 && (!d.Limited || l.cfg.Mode == Divert) {
		// As the wall clock's check: more than any threshold counts as any threshold. A
		// cost of 2^62 or more reached the count word's moved bit, and the check looped
		// for good recounting in the same entry.
		n = min(n, MaxThreshold)
		if r := e.unsent[0].Add(uint64(n)); r&movedBit != 0 && evMoved(sh, e, r, n) {
			l.recountEvent(ep, h, team, n, wall)
		}
	}
	st.count(d.Limited)
	if t == nil {
		l.AddTally(&own)
	}
	if old := Tier(tw >> tierShift & tierMask); old != d.Tier &&
		e.thr.CompareAndSwap(tw, tw&^(tierMask<<tierShift)|uint64(d.Tier)<<tierShift) {
		sh.transitions[old*numTiers+d.Tier].Add(1)
	}
	return d
}

// recountEvent adds n records for team in window ep, whose entry was moved or removed as
// a check counted them, to its current entry. Out of line: it only happens when a check
// races a rebuild or a removal of its shard.
func (l *Limiter) recountEvent(ep int64, h uint64, team string, n, wall int64) {
	for {
		tbl := l.table(ep)
		if e := l.insertIn(tbl.shards, tbl, h, team, wall); e != nil {
			if r := e.unsent[0].Add(uint64(n)); r&movedBit == 0 || !evMoved(&tbl.shards[h&l.mask], e, r, n) {
				return
			}
		}
	}
}

// evMoved says whether e, in shard sh, was moved or removed before a check's add of n
// records to its count, which returned r, holding the moved bit: else the add carried
// the count into the bit (2^20 checks of MaxThreshold in one window), and n is taken
// out again and counted as displaced, the team being far over any threshold.
func evMoved(sh *shard, e *entry, r uint64, n int64) bool {
	if (r-uint64(n))&movedBit != 0 {
		return true
	}
	e.unsent[0].Add(-uint64(n))
	sh.displaced.Add(uint64(n))
	return false
}

// table returns window ep's cache, making it if needed.
func (l *Limiter) table(ep int64) *epochTable {
	if t := l.ring[floorMod(ep, int64(len(l.ring)))].Load(); t != nil && t.epoch == ep && !t.dead.Load() {
		return t
	}
	l.ringMu.Lock()
	defer l.ringMu.Unlock()
	slot := &l.ring[floorMod(ep, int64(len(l.ring)))]
	old := slot.Load()
	switch {
	case old != nil && old.epoch == ep && !old.dead.Load():
		return old
	case old != nil && old.epoch > ep && !old.dead.Load():
		// ep is a whole ring older than a window in use: only a check whose clock read
		// is far behind the sweep's gets here. Count it in the newer window rather than
		// drop a table in use.
		return old
	}
	t := &epochTable{epoch: ep, shards: make([]shard, len(l.shards))}
	// Sized for the window before's entries: a window's keys are mostly the last one's,
	// and a table grown from the smallest up to them was rebuilt a dozen times over,
	// each time under its shard's mutex, at every window's start (in a replay, the
	// rebuilds were an eighth of its time). A burst of keys sizes one window only: the
	// next is sized by the count of this one.
	perShard := 0
	if prev := l.tableIfAny(ep - 1); prev != nil {
		perShard = int(prev.count.Load()) / len(t.shards)
	}
	for i := range t.shards {
		l.initShard(&t.shards[i], true)
		t.shards[i].idx.presize(perShard)
	}
	if old != nil && !old.dead.Load() {
		l.retire(old) // older than any record may be: the sweep drops such tables first
	}
	slot.Store(t)
	return t
}

// tableIfAny returns window ep's cache if there is one.
func (l *Limiter) tableIfAny(ep int64) *epochTable {
	if t := l.ring[floorMod(ep, int64(len(l.ring)))].Load(); t != nil && t.epoch == ep && !t.dead.Load() {
		return t
	}
	return nil
}

// seedPrev sets a new entry's count of the window before its own from this gate's entry of
// that window, if any, so a team over its limit at the end of a window is not let through
// at the start of the next while its first read is on the way; and its tier, so that the
// first check's tier change (gate_limiter_tier_transitions_total) is from the tier the team
// was in, not from idle at every window's start. The caller holds a lock of window ep's
// table, never one of ep−1's: the lookup is lock-free. e is not yet published.
func (l *Limiter) seedPrev(e *entry, ep int64, h uint64, team string) {
	pt := l.tableIfAny(ep - 1)
	if pt == nil {
		return
	}
	if pe, _ := pt.shards[h&l.mask].idx.tab.Load().lookup(h, team); pe != nil {
		e.unsent[1].Store(math.Float64bits(pe.evCount()))
		e.thr.Store(pe.thr.Load() & (tierMask << tierShift)) // the threshold is looked up afresh
	}
}

// retire drops table t: its counters go to l.retired, its entries leave the count of
// cached teams, and their unsent counts are lost (t is older than any record may be, so
// they would be stale anyway). A check counting into one of them as it goes counts again
// as a late check does (recountEvent, table): in the window now in t's ring slot if that
// is newer, else in a new table of t's window, which the next sweep retires the same way.
// The caller holds l.ringMu.
func (l *Limiter) retire(t *epochTable) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		t.dead.Store(true)
		var lost uint64
		sh.idx.all(func(_ uint32, e *entry, _ string) bool {
			lost += sh.idx.remove(e)[0]
			l.count.Add(-1)
			t.count.Add(-1)
			return true
		})
		for _, c := range sh.orphans {
			lost += uint64(c.N)
		}
		sh.orphans = nil
		l.retired.add(sh)
		l.retired.displaced.Add(lost)
		sh.mu.Unlock()
	}
}

// OldestEpoch is the oldest epoch whose counts the tick still writes at now: the previous
// one under WallClock; under EventClock, the one MaxEventAge back, less one for checks
// whose clock read lags the tick's.
func (l *Limiter) OldestEpoch(now time.Time) int64 {
	if l.ring == nil {
		return l.Epoch(now) - 1
	}
	return floorDiv(now.UnixNano()-l.maxAgeNs, l.windowNs) - 1
}

// KeyLifetime is how long the shared store must keep a window's count after the window
// starts: two windows under WallClock (a read needs the current and previous ones), three
// with learned thresholds (the fold of window F reads its count during F+2, possibly at
// its end: a read put off, Redis out at the window's edge; a count gone reads as 0, and
// the fold learns the window as silent); under EventClock, MaxEventAge more, as a record
// that old still reads its window.
func (l *Limiter) KeyLifetime() time.Duration {
	if l.adapt != nil {
		return 3 * l.cfg.Window
	}
	if l.ring == nil {
		return 2 * l.cfg.Window
	}
	return 2*l.cfg.Window + l.cfg.MaxEventAge
}

// sweepEvent is Sweep under EventClock: every window's cache is swept in turn. An entry
// is read only while checks still use it (seen within half a sync interval, at least 2 s):
// once every partition has moved past its window, its view matters no more, except as the
// seed of the next window's entries.
func (l *Limiter) sweepEvent(now time.Time, into *Sweep, cw coldWrites) {
	ns := now.UnixNano()
	oldest := l.OldestEpoch(now)
	nowSeen := l.seenAt(ns)
	// A window's entry is needed while partitions are in that window, and as the seed of
	// the next window's: two windows idle is plenty, and keeps at most a few windows of
	// each team cached.
	idleSecs := idleSeconds(max(min(l.cfg.IdleTimeout, 2*l.cfg.Window), 2*time.Second))
	liveSecs := uint32(max(l.cfg.SyncInterval/2/time.Second, 2))
	rp := l.readPolicy()
	// The windows' tables by epoch: a team is counted in the tiers once, in its newest
	// window (as Snapshot and Top show it), not once for every window that still caches it.
	var tables []*epochTable
	for i := range l.ring {
		if tbl := l.ring[i].Load(); tbl != nil && !tbl.dead.Load() && tbl.epoch >= oldest {
			tables = append(tables, tbl)
		}
	}
	slices.SortFunc(tables, func(a, b *epochTable) int { return cmp.Compare(a.epoch, b.epoch) })
	for i := range l.ring {
		tbl := l.ring[i].Load()
		if tbl == nil || tbl.dead.Load() {
			continue
		}
		if tbl.epoch < oldest {
			l.ringMu.Lock()
			if l.ring[i].CompareAndSwap(tbl, nil) {
				l.retire(tbl)
			}
			l.ringMu.Unlock()
			continue
		}
		// How far the wall clock is through the window: 1 for windows past.
		progress := min(max(float64(ns-tbl.epoch*l.windowNs)*l.invWindow, 0), 1)
		newer := tables[sort.Search(len(tables), func(j int) bool { return tables[j].epoch > tbl.epoch }):]
		entries := 0
		for j := range tbl.shards {
			sh := &tbl.shards[j]
			sh.mu.Lock()
			tab := sh.idx.tab.Load()
			sh.idx.all(func(seen uint32, e *entry, team string) bool {
				drain := func() {
					if n := e.evDrain(); n > 0 {
						into.Counts = append(into.Counts, Count{Team: team, Epoch: tbl.epoch, N: n})
					}
				}
				idle := nowSeen - min(seen, nowSeen)
				// Kept while a read has the team at half its threshold or more in this
				// window, as under the wall clock (sweepWall): a window longer than the idle
				// timeout would otherwise meet the team again as first contact. A window's
				// count only grows, so the kept view errs high; its table's retirement
				// (MaxEventAge on) ends it.
				if idle >= idleSecs && (e.readAt.Load() == 0 ||
					e.evLevel(progress) < tierNormal*float64(l.threshold(e, team))) {
					if n := int64(sh.idx.remove(e)[0]); n > 0 { // as marked: see index.remove
						into.Counts = append(into.Counts, Count{Team: team, Epoch: tbl.epoch, N: n})
					}
					l.count.Add(-1)
					tbl.count.Add(-1)
					into.Expired++
					return true
				}
				was := e.thr.Load()
				thr := l.threshold(e, team)
				fthr := float64(thr)
				p := e.evLevel(progress) / fthr
				tier := TierOf(p)
				if int64(was&thresholdMask) == thr {
					// The tier the last check found, at its record's own progress: of
					// this threshold.
					tier = max(tier, Tier(was>>tierShift&tierMask))
				} else if w := e.thr.Load(); w&movedBit == 0 {
					// Found under another threshold (an override changed since): replaced
					// by this one's, or a team raised far over its level would be read
					// as hot, and counted so, until its next check.
					if old := Tier(w >> tierShift & tierMask); old != tier &&
						e.thr.CompareAndSwap(w, w&^(tierMask<<tierShift)|uint64(tier)<<tierShift) {
						sh.transitions[old*numTiers+tier].Add(1)
					}
				}
				if len(newer) == 0 || !l.inNewerWindow(newer, team) {
					into.Tiers[tier]++
				}
				reason, due := rp.due(ns, e.readAt.Load(), p, tier, e.evPending(), fthr)
				due = due && idle <= liveSecs
				// A window that has ended gets no more counts here: write what it holds.
				if cw.drain(team, p, int64(e.unsent[0].Load()&^movedBit), fthr, due) != drainNone || progress >= 1 {
					drain()
				} else {
					into.Held++
				}
				pend := e.flushed.Load()
				if idle > liveSecs {
					return true
				}
				if due {
					into.Reads = append(into.Reads, Read{
						Team: team, Epoch: tbl.epoch, Pressure: p, Tier: tier, Reason: reason,
						e: e, tab: tab, sh: sh, flushed: pend,
					})
				}
				return true
			})
			entries += sh.idx.len()
			into.Counts = append(into.Counts, sh.orphans...)
			clear(sh.orphans)
			sh.orphans = sh.orphans[:0]
			sh.mu.Unlock()
		}
		into.Entries += entries
		into.Fullest = max(into.Fullest, entries)
		if entries == 0 && tbl.epoch < floorDiv(ns, l.windowNs)-1 {
			l.dropIfEmpty(i, tbl)
		}
	}
	into.Overfull = l.eventOverfull()
}

// inNewerWindow reports whether team is cached in one of tables, the windows newer than
// the one a sweep is visiting it in: its tier is then counted in the newest of them, not
// here. The nearest first (a team sending steadily is in the next window), each lookup
// lock-free (the caller holds a lock of an older window's table, as seedPrev's caller does).
func (l *Limiter) inNewerWindow(tables []*epochTable, team string) bool {
	h := maphash.String(l.seed, team)
	for _, t := range tables {
		if e, _ := t.shards[h&l.mask].idx.tab.Load().lookup(h, team); e != nil {
			return true
		}
	}
	return false
}

// eventOverfull is the inserts into a full window's cache that could evict nothing, over
// every window the event clock kept, live or dropped: each table's counter once (under
// ringMu, as the tables are dropped).
func (l *Limiter) eventOverfull() uint64 {
	l.ringMu.Lock()
	defer l.ringMu.Unlock()
	n := l.retired.overfull.Load()
	for i := range l.ring {
		t := l.ring[i].Load()
		if t == nil || t.dead.Load() {
			continue
		}
		for j := range t.shards {
			n += t.shards[j].overfull.Load()
		}
	}
	return n
}

// dropIfEmpty drops table tbl, in ring slot i, if it is still empty once every shard lock
// is held: an insert racing the drop either lands before it (and the table is kept) or
// sees dead and looks its window up again.
func (l *Limiter) dropIfEmpty(i int, tbl *epochTable) {
	l.ringMu.Lock()
	defer l.ringMu.Unlock()
	for j := range tbl.shards {
		tbl.shards[j].mu.Lock()
	}
	empty := true
	for j := range tbl.shards {
		if tbl.shards[j].idx.len() > 0 || len(tbl.shards[j].orphans) > 0 {
			empty = false
		}
	}
	if empty {
		tbl.dead.Store(true)
		l.ring[i].CompareAndSwap(tbl, nil)
		for j := range tbl.shards {
			l.retired.add(&tbl.shards[j])
		}
	}
	for j := range tbl.shards {
		tbl.shards[j].mu.Unlock()
	}
}

// applyReadEvent is ApplyRead under EventClock: curr and prev are the fleet's counts of
// the read's window and the one before.
func (l *Limiter) applyReadEvent(r *Read, e *entry, curr, prev int64, now time.Time) Applied {
	ns := now.UnixNano()
	var a Applied
	if at := e.readAt.Load(); at != 0 {
		a.Staleness = time.Duration(ns - readTime(at))
	}
	old := e.evCount()
	// This gate's count of the window, less what the read already includes, against the
	// fleet's: negative when other gates counted traffic this one did not see.
	a.Drift = (old - float64(curr) - float64(e.evPending()-r.flushed)) / float64(l.threshold(e, r.Team))
	// The fleet's count of E−1 only grows; a seed taken from this gate's own view may be
	// ahead of a read by counts not yet written.
	if p := float64(prev); p > e.evPrev() {
		e.unsent[1].Store(math.Float64bits(p))
	}
	e.estimate.Store(math.Float64bits(float64(curr)))
	e.readAt.Store(readStamp(ns, false))
	e.flushed.Add(-r.flushed)
	return a
}

// applyLocalEvent is ApplyLocal under EventClock: what was handed to the tick joins the
// window's count, as if the read had returned it, and the entry stays due for a read.
func (l *Limiter) applyLocalEvent(r *Read, e *entry, now time.Time) {
	var c float64
	if e.readAt.Load() != 0 {
		c = math.Float64frombits(e.estimate.Load())
	}
	e.estimate.Store(math.Float64bits(c + float64(r.flushed)))
	e.readAt.Store(readStamp(now.UnixNano(), true))
	e.flushed.Add(-r.flushed)
}

// eventEntries calls f for the newest window's entry of every cached team (all teams when
// team is empty, else only that team), with the wall clock's progress through it.
func (l *Limiter) eventEntries(now time.Time, team string, f func(e *entry, team string, progress float64)) {
	ns := now.UnixNano()
	type found struct {
		e  *entry
		ep int64
	}
	newest := make(map[string]found)
	var h uint64
	if team != "" {
		h = maphash.String(l.seed, team)
	}
	for i := range l.ring {
		tbl := l.ring[i].Load()
		if tbl == nil || tbl.dead.Load() {
			continue
		}
		visit := func(e *entry, team string) {
			if f, ok := newest[team]; !ok || f.ep < tbl.epoch {
				newest[team] = found{e, tbl.epoch}
			}
		}
		if team != "" {
			if e, _ := tbl.shards[h&l.mask].idx.tab.Load().lookup(h, team); e != nil {
				visit(e, team)
			}
			continue
		}
		for j := range tbl.shards {
			sh := &tbl.shards[j]
			sh.mu.Lock()
			sh.idx.all(func(_ uint32, e *entry, team string) bool { visit(e, team); return true })
			sh.mu.Unlock()
		}
	}
	for t, fe := range newest {
		f(fe.e, t, min(max(float64(ns-fe.ep*l.windowNs)*l.invWindow, 0), 1))
	}
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
