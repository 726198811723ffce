package limit

import (
	"hash/maphash"
	"strings"
)

// InheritState takes over what old knows of each key it caches: a rules reload builds new
// limiters for a rule whose name, key and cost did not change, each limit from the old
// one of the same Redis keys and window, and one that knew nothing let a team far over
// its limit, even held, through until its tick read the team again (for as long as the
// store was out of reach). The thresholds may differ: what is taken over is counts, not
// verdicts. Each key's threshold is looked up afresh at its next check, and a hold is
// kept under the threshold it was held under, which l's first sweep compares with l's (a
// threshold raised so that the team's level is under its release level releases it, as
// an override raised does); until then, at most a tick, the team stays held. A hold is
// taken over only where both limiters hold (divert mode). Each key keeps its last read
// of the fleet's count (the estimate, when it was read, the fleet factor, whether the
// read failed and must be made again), what old counted of it since that read, and its
// hold (since when, when it was last over its release level, the threshold it is held
// under), so a check of l limits the team as a check of old would have.
//
// What old counted is kept in flushed, never in unsent: old's tick writes it to the store
// (its last tick and final flush), and l's must not write it again. In flushed it stays in
// the level, and l's first read of the team takes it out as it does its own writes. What
// of it old's tick has not written by then (Redis refusing writes; or the two ticks
// overlap for a tick) that tick shares once retired, and l's tick adds to the read
// (tick.Unwritten), as it adds its own refused counts: only records old counted after
// its tick last shared what it holds are missing from the level until the next read.
//
// Call it before l checks a record, and after l's overrides are set (a hold is released
// when the team's threshold rose above its level); old may be in use meanwhile: each of
// its shards is copied under the shard's mutex, which its tick's sweeps and applies take,
// so a key's read and its counts are copied as of one moment. l takes old's seed (as
// InheritRotation does, for the same reason: l has hashed nothing yet), and each key is
// seen now. Under the event clock each window's cache is taken over so (inheritEvent).
// With learned thresholds on either side, or a different window or clock, it does
// nothing: the keys start afresh there, as before. It reports whether it took old's keys
// over.
func (l *Limiter) InheritState(old *Limiter) bool {
	if old == nil || (l.ring == nil) != (old.ring == nil) || l.adapt != nil || old.adapt != nil || l.windowNs != old.windowNs {
		return false
	}
	if l.ring != nil {
		l.inheritEvent(old)
		return true
	}
	l.adoptSeed(old)
	// The tick interval as old's sweeps measured it: the floor the estimate is under the
	// level for (entry.level), until l's own sweeps measure it.
	l.readFloor.Store(old.readFloor.Load())
	holds := l.holds.on && old.holds.on
	keep := uint64(tierMask << tierShift) // the tier at the last check; the threshold is looked up afresh
	if holds {
		keep |= heldBit
	}
	ns := l.clock.Now().UnixNano()
	seen := l.seenAt(ns)
	cur := floorDiv(ns, l.windowNs)
	raiseTo(&l.highEpoch, old.highEpoch.Load())
	for i := range old.shards {
		osh := &old.shards[i]
		osh.mu.Lock()
		if len(old.shards) == len(l.shards) {
			// The same seed and mask: old's shard i is l's shard i.
			l.shards[i].idx.presize(osh.idx.len())
		}
		osh.idx.all(func(_ uint32, oe *entry, team string) bool {
			// flushed and what unsent holds of the windows a sweep still writes (drain):
			// what old counted since its last read.
			counted := oe.flushed.Load()
			for j := range oe.unsent {
				if v := oe.unsent[j].Load(); unsentCount(v) > 0 && unsentEpoch(cur, &old.highEpoch, v) >= cur-1 {
					counted += unsentCount(v)
				}
			}
			thr := oe.thr.Load()
			h := maphash.String(l.seed, team)
			sh := &l.shards[h&l.mask]
			sh.mu.Lock()
			if e, _ := sh.idx.tab.Load().lookup(h, team); e == nil {
				e = sh.idx.reserve(h, team) // copies team, which aliases old's table
				e.estimate.Store(oe.estimate.Load())
				e.readAt.Store(oe.readAt.Load())
				e.flushed.Store(counted)
				e.thr.Store(thr & keep)
				sh.idx.publish(e, seen)
				l.count.Add(1)
			}
			sh.mu.Unlock()
			if holds && thr&heldBit != 0 {
				old.holds.mu.Lock()
				st := old.holds.teams[team]
				var cp hold
				if st != nil {
					cp = *st
				} else {
					// Held by a check since old's last sweep, the team has no state there
					// yet: started here under old's threshold, which l's first sweep
					// compares with its own (started there from the held bit, it would be
					// l's, and a limit raised past the team's release level would not
					// release it).
					cp = hold{since: ns, lastOver: ns, thr: old.threshold(oe, team)}
				}
				old.holds.mu.Unlock()
				l.holds.mu.Lock()
				if st == nil {
					l.holds.startsLocal.Add(1) // as the first sweep to see a hold counts it
				}
				cp.sweep = l.holds.sweep
				l.holds.teams[strings.Clone(team)] = &cp
				l.holds.mu.Unlock()
			}
			return true
		})
		osh.mu.Unlock()
	}
	return true
}

// inheritEvent is InheritState under the event clock: each window's cache that a record
// may still be counted in is copied into l's cache of the same window, each key with its
// last read of the window's count and of the one before, and what old counted since, in
// flushed (old's tick writes it). Without it a reload let a team far over its limit
// through until l's first read of it in each window, and for as long as the store was out
// of reach.
func (l *Limiter) inheritEvent(old *Limiter) {
	l.adoptSeed(old)
	keep := uint64(tierMask << tierShift) // the tier at the last check; the threshold is looked up afresh
	now := l.clock.Now()
	seen := l.seenAt(now.UnixNano())
	oldest := l.OldestEpoch(now)
	for i := range old.ring {
		ot := old.ring[i].Load()
		if ot == nil || ot.dead.Load() || ot.epoch < oldest {
			continue
		}
		tbl := l.table(ot.epoch)
		for j := range ot.shards {
			osh := &ot.shards[j]
			osh.mu.Lock()
			if len(ot.shards) == len(tbl.shards) {
				// The same seed and mask: old's shard j is l's shard j.
				tbl.shards[j].idx.presize(osh.idx.len())
			}
			osh.idx.all(func(_ uint32, oe *entry, team string) bool {
				h := maphash.String(l.seed, team)
				sh := &tbl.shards[h&l.mask]
				sh.mu.Lock()
				if e, _ := sh.idx.tab.Load().lookup(h, team); e == nil {
					e = sh.idx.reserve(h, team) // copies team, which aliases old's table
					e.estimate.Store(oe.estimate.Load())
					e.readAt.Store(oe.readAt.Load())
					e.flushed.Store(oe.evPending())
					e.unsent[1].Store(oe.unsent[1].Load())
					e.thr.Store(oe.thr.Load() & keep)
					sh.idx.publish(e, seen)
					l.count.Add(1)
					tbl.count.Add(1)
				}
				sh.mu.Unlock()
				return true
			})
			osh.mu.Unlock()
		}
	}
}

// adoptSeed has l hash keys with old's seed. Only before l has hashed a key: a key then
// hashes as it did in old, which is what InheritRotation's registers and InheritState's
// copied entries need.
func (l *Limiter) adoptSeed(old *Limiter) {
	l.seed = old.seed
	for i := range l.shards {
		l.shards[i].idx.seed = old.seed
	}
}
