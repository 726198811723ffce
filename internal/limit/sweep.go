package limit

import (
	"hash/maphash"
	"math"
	"time"
)

// Count is a number of records counted for a team in one epoch, to be added to the
// shared store.
type Count struct {
	Team  string
	Epoch int64
	N     int64
}

// ReadReason says why a team is due for a read.
type ReadReason uint8

// Why a team is read.
const (
	ReadFirst   ReadReason = iota // never read, and above the sync floor
	ReadPending                   // counted PendingReadShare of its threshold since its last read
	ReadHot                       // hot, and HotEveryTick is on
	ReadCadence                   // its tier's interval has passed
	ReadTTL                       // its view is older than TTL
	ReadRetry                     // its last read failed (ApplyLocal): due until one succeeds
	ReadProfile                   // its learned profile is due for a look (Config.Adaptive)
	ReadPrimed                    // marked by Expect: read whatever its level
	// NumReadReasons is how many reasons there are: those above are 0 to NumReadReasons-1
	// (the tick makes each one's series at the start).
	NumReadReasons
)

var readReasonNames = [NumReadReasons]string{"first", "pending", "hot", "cadence", "ttl", "retry", "profile", "primed"}

// String returns the reason's name as used in metrics.
func (r ReadReason) String() string {
	if r < NumReadReasons {
		return readReasonNames[r]
	}
	return "unknown"
}

// Read is a team due for a read of its global view: the shared counts of Epoch and
// Epoch−1, handed back with ApplyRead. Under EventClock, Epoch is the window of the
// entry read: a team may be read in several windows at once when its partitions lag
// differently.
type Read struct {
	Team     string
	Epoch    int64
	Pressure float64 // when planned; the tick reads higher pressure first when over budget
	Tier     Tier
	Reason   ReadReason
	// Hold asks the tick to fetch the team's hold flag with the read and hand it to
	// ApplyHold (Limiter.HoldsShared).
	Hold bool
	// Fresh, set by the tick, says the read was made after every gate of the fleet wrote
	// its counts of the tick's boundary (ticks aligned, reads after writes): it misses none
	// of the other gates' counts up to there, and what they counted since is what this
	// gate's records since, scaled by its fleet factor, stand for. Otherwise each other
	// gate's last write is on average half a tick old (fleetFactor's unseen part).
	Fresh bool
	// Refused, set by the tick, says Redis refuses the fleet's writes: the read holds the
	// other gates' counts only as this gate's fleet factor predicts them (FleetFactor),
	// so the factor is kept as it was, not learned from it. Learned from reads that grew
	// as the factor said, it ran away (a factor of 4 was 1,024 within 20 s).
	Refused bool
	// Profile asks the tick to fetch the team's learned profile with the read and hand it
	// to ApplyProfile (Config.Adaptive); Fold to fetch its shared count of Epoch−2 too, to
	// fold it.
	Profile, Fold bool

	// The entry the read was planned for, its table and shard (lockedEntry).
	e       *entry
	tab     *table
	sh      *shard
	flushed int64 // e.flushed when planned: the counts the read will include
	prev    int64 // the shared count of Epoch−1 the read found (ApplyRead), for ApplyProfile
}

// Sweep is what one sweep found: the counts to write and the teams to read.
type Sweep struct {
	// Counts drained from every team since the last sweep, for the current and previous
	// epochs only (under EventClock, for every epoch from OldestEpoch on).
	Counts []Count
	// Reads due now, in no particular order.
	Reads []Read
	// Stale is how many counted records were dropped because their epoch was older than
	// the previous one (no sweep ran for a whole window), or too old for their epoch tag
	// to tell (unsentEpoch).
	Stale int64
	// Entries is how many teams are cached after the sweep; Tiers splits them by tier
	// (under EventClock, where Entries adds up every window's cache, each team once, in
	// its newest window's tier).
	Entries int
	// Fullest is how many teams the fullest cache the capacity bounds holds after the
	// sweep, as gate_limiter_cache_fullest_entries: Entries under the wall clock; under
	// the event clock, which gives each window a cache of its own, the fullest window's.
	Fullest int
	Tiers   [numTiers]int
	// Expired is how many teams the sweep expired for being idle.
	Expired int
	// Demoted is how many teams the sweep returned to the sketch of keys below the fleet
	// floor (sketch.go).
	Demoted int
	// Held is how many cold teams kept their counts for a later sweep
	// (Config.ColdWriteInterval).
	Held int
	// Holds are the held teams still over their release level, whose hold flags the tick
	// writes to the shared store (Config.DivertHold).
	Holds []HoldFlag
	// Spikes are the spikes that started or ended in this sweep (Config.Adaptive), for the
	// tick to log and count.
	Spikes []SpikeEvent
	// Rotations are the teams found rotating identities, or no longer, in this sweep
	// (Config.KeyCardinality), for the tick to log.
	Rotations []RotationEvent
	// Overfull is how many inserts so far found the cache full with nothing it may evict
	// (gate_limiter_cache_overfull_total), for the tick to log when it grows.
	Overfull uint64
}

func (s *Sweep) reset() {
	// A sweep that once held a great many counts or reads (a start, a backlog) would
	// otherwise keep that memory for good: let go of it when the last sweep used little.
	if c := cap(s.Counts); c > 1<<16 && len(s.Counts) < c/8 {
		s.Counts = nil
	}
	if c := cap(s.Reads); c > 1<<16 && len(s.Reads) < c/8 {
		s.Reads = nil
	}
	clear(s.Counts)
	clear(s.Reads)
	clear(s.Holds)
	clear(s.Spikes)
	clear(s.Rotations)
	*s = Sweep{Counts: s.Counts[:0], Reads: s.Reads[:0], Holds: s.Holds[:0], Spikes: s.Spikes[:0], Rotations: s.Rotations[:0]}
}

// Sweep drains every team's unsent counts, finds the teams due for a read and expires the
// idle ones. The tick calls it once per tick; into is reused between calls to spare
// allocations. A sweep visits every cached team, which costs a few milliseconds at
// hundreds of thousands of teams and keeps all of this work off the per-record path.
func (l *Limiter) Sweep(now time.Time, into *Sweep) { l.sweep(now, into, false) }

// SweepAll is Sweep handing every count to the tick, cold teams' too: for the final flush.
func (l *Limiter) SweepAll(now time.Time, into *Sweep) { l.sweep(now, into, true) }

func (l *Limiter) sweep(now time.Time, into *Sweep, all bool) {
	into.reset()
	cw := l.coldWrites(now.UnixNano(), all)
	if l.ring != nil {
		l.sweepEvent(now, into, cw)
	} else {
		l.sweepWall(now, into, cw)
		into.Fullest = into.Entries
	}
	if l.lastSweep != 0 {
		l.sweepGap = max(now.UnixNano()-l.lastSweep, 0) // a clock stepped back: no gap
		// To 10 ms, and stored only on change: every check reads its line, and a tick's
		// jitter of a few µs would otherwise write it every tick.
		if f := time.Duration(l.sweepGap).Round(10 * time.Millisecond).Nanoseconds(); l.readFloor.Load() != f {
			l.readFloor.Store(f)
		}
	}
	l.lastSweep = now.UnixNano()
	if l.holds.on {
		l.endSweepHolds()
	}
	for t := range numTiers {
		l.swept.tiers[t].Store(int64(into.Tiers[t]))
	}
	l.swept.queued.Add(uint64(len(into.Reads)))
	l.swept.expired.Add(uint64(into.Expired))
}

// coldWrites is when a sweep hands a team's counts to the tick: always, unless the team
// is cold (Config.ColdWriteInterval), and then once per interval, at a phase set by the
// team's hash, so that each sweep writes a share of the cold teams.
type coldWrites struct {
	seed       maphash.Seed // the limiter's: a team's phase is its hash's
	every      int64        // ns; 0: every sweep
	prev, now  int64        // the last sweep's time and this one's
	share      float64
	everything bool
	// endedOnly: at its phase point a cold team hands over the counts of windows that
	// have ended, not yet those of the current one (Config.ColdWriteInterval).
	endedOnly bool
}

func (l *Limiter) coldWrites(ns int64, all bool) coldWrites {
	cw := coldWrites{seed: l.seed, prev: l.lastSweep, now: ns, share: l.cfg.ColdWriteShare, everything: all}
	if l.cfg.ColdWriteInterval > 0 && l.lastSweep != 0 {
		cw.every = l.cfg.ColdWriteInterval.Nanoseconds()
		// An interval shorter than the window asks for a cold team's current counts
		// sooner than the window's end; the event clock's windows are per record.
		cw.endedOnly = l.cfg.ColdWriteInterval >= l.cfg.Window && l.ring == nil
	}
	return cw
}

// What a sweep hands to the tick of one team's counts.
type drainKind uint8

const (
	drainNone  drainKind = iota // nothing: a cold team between its phase points
	drainEnded                  // the windows that have ended: a cold team at its phase point
	drainAll                    // every count
)

// drain says what of a team's counts go to the tick in this sweep: its pressure p, counts
// waiting unsent, threshold thr, and whether it is due for a read (the read must include
// them).
func (cw *coldWrites) drain(team string, p float64, unsent int64, thr float64, due bool) drainKind {
	if cw.every == 0 || cw.everything || due || TierOf(p) != Idle || float64(unsent) >= cw.share*thr {
		return drainAll
	}
	off := int64(maphash.String(cw.seed, team) % uint64(cw.every))
	if cw.endedOnly {
		// The interval is the window: its point is in the first three quarters of each
		// window, and every sweep from there to the window's end hands over the windows
		// that have ended (the first one takes them, the rest find nothing). A point near
		// the window's end, crossed by a sweep that came a little late, was seen only
		// after the next boundary, where the last window's counts are stale (and the
		// next window's checks displace them): lost to a tick's jitter. Nor is a point
		// past the window's last sweep waited for: when the next sweep, as far off as this
		// one was from the last, give or take half of that (a tick's jitter), may be in
		// the next window, where the ended one's counts go stale, this one hands them over.
		// Under a window of a few ticks, or one the tick does not divide, the sweeps fall
		// at the same offsets of a window (0 s and 1 s of a 2 s one), and a team whose
		// point was past the last of them never handed its counts over: the next window
		// of the same parity displaced them, never written.
		if pos := cw.now - floorDiv(cw.now, cw.every)*cw.every; pos < off/4*3 && pos+(cw.now-cw.prev)*3/2 < cw.every {
			return drainNone
		}
		return drainEnded
	}
	// Its phase point, one per interval, fell between the last sweep and this one.
	if floorDiv(cw.now+off, cw.every) == floorDiv(cw.prev+off, cw.every) {
		return drainNone
	}
	return drainAll
}

func (l *Limiter) sweepWall(now time.Time, into *Sweep, cw coldWrites) {
	ns := now.UnixNano()
	cur := floorDiv(ns, l.windowNs)
	raiseTo(&l.highEpoch, cur)
	var part int64 // the part of the day learned thresholds are for (spike.Config.ThresholdPart)
	if l.adapt != nil {
		part = l.adapt.cfg.ThresholdPart(cur)
	}
	nowSeen := l.seenAt(ns)
	idleSecs := idleSeconds(l.cfg.IdleTimeout)
	rp := l.readPolicy()
	// A cached key whose level falls under half its floor goes back to the sketch
	// (sketch.go): the fleet's count of it is then far under what could matter. Half, so a
	// key near its floor is not promoted and demoted in turn.
	var demoteUnder float64
	if l.sk != nil {
		l.sk.prepare(cur)
		demoteUnder = float64(l.untrackedFloor.Load()) / 2
		l.setSketchPrefetch()
	}
	if l.card != nil {
		l.sweepCardinality(ns, cur, into)
	}

	for i := range l.shards {
		sh := &l.shards[i]
		// Under the shard's mutex, which inserts, the tick's applies and checks racing a
		// rebuild or a removal also take: other checks go on.
		sh.mu.Lock()
		for team, c := range sh.carried {
			if c.epoch < cur-1 { // its windows are past any promotion's now (carry)
				delete(sh.carried, team)
			}
		}
		tab := sh.idx.tab.Load()
		sh.idx.all(func(seen uint32, e *entry, team string) bool {
			thr := l.threshold(e, team)
			fthr := float64(thr)
			// The level counts unsent records as pending: draining them changes neither it
			// nor whether a read is due.
			lvl := e.level(ns, l.readFloor.Load())
			// A team the fleet's count says could be over its limit (at half its threshold
			// or more after a read, or held) is kept however long it is idle, as a full
			// cache keeps it (evictOne): under a window longer than the idle timeout (an
			// hour or a day of GATE_LIMITS), one dropped came back as first contact and was
			// admitted until it had sent its sync floor again, however far over its limit
			// the window held it. Its level drains as the window ages out (its reads go
			// on), and it expires then. A team never read is judged on its own counts,
			// which drain only once a read is applied: its idleness decides.
			// Marked by Expect: its read is planned below whatever its level, and it stays
			// cached for it, however long it was idle (Expect does not touch it: a key
			// idle past the timeout as it was marked was dropped here, the mark with it,
			// and its backlog's first records met as first contact).
			expected := false
			if len(sh.expect) > 0 {
				_, expected = sh.expect[team]
			}
			if l.cfg.IdleTimeout > 0 && nowSeen-min(seen, nowSeen) >= idleSecs && !expected &&
				e.thr.Load()&heldBit == 0 && (e.readAt.Load() == 0 || lvl < tierNormal*fthr) {
				unsent := sh.idx.remove(e)
				l.count.Add(-1)
				into.Expired++
				var stale int64
				into.Counts, stale = removedCounts(into.Counts, team, cur, &l.highEpoch, unsent)
				into.Stale += stale
				if l.adapt != nil {
					l.forgetLearned(sh, e, team, ns, into)
				}
				return true
			}
			if lvl < demoteUnder && !expected && l.demotable(e, team, cur) {
				unsent := sh.idx.remove(e)
				l.count.Add(-1)
				sh.demoted.Add(1)
				var stale int64
				into.Counts, stale = removedCounts(into.Counts, team, cur, &l.highEpoch, unsent)
				into.Stale += stale
				into.Demoted++
				return true
			}
			var ls *learned
			if l.adapt != nil {
				ls = sh.learned[e]
				lvl = l.rebase(e, ls, ns, thr, lvl)
			}
			p := lvl / fthr
			tier := TierOf(p)
			into.Tiers[tier]++
			// What the sync policy goes by: the pressure, its tier and the threshold the
			// pending and cold-write shares are of; for a learned team, its pressure above
			// its baseline (syncPressure).
			sp, stier, sthr, quiet := p, tier, fthr, false
			if l.adapt != nil {
				sp, stier, sthr, quiet = l.syncPressure(ls, e, thr, lvl, p, tier)
			}
			reason, due := rp.due(ns, e.readAt.Load(), sp, stier, e.pending(), sthr)
			if expected {
				reason, due = ReadPrimed, true
			}
			if quiet && reason == ReadTTL {
				due = false // its profile looks read it (sweepLearned)
			}
			wp := sp // a learned team under half its way to its threshold is written as a cold one
			if math.IsInf(sthr, 1) {
				wp = 0
			}
			if k := cw.drain(team, wp, e.pending()-e.flushed.Load(), sthr, due); k == drainNone {
				into.Held++
			} else {
				var stale int64
				n0 := len(into.Counts)
				into.Counts, stale = e.drain(into.Counts, team, cur, &l.highEpoch, k == drainEnded)
				into.Stale += stale
				if ls != nil {
					for _, c := range into.Counts[n0:] {
						ls.addOwn(c.Epoch, c.N)
					}
				}
				if k == drainEnded && e.pending() > e.flushed.Load() {
					into.Held++ // the current window's, for its next point
				}
			}
			// What a read planned now will account for: everything handed to the tick this
			// tick or before. Records counted from here on stay pending after it.
			pend := e.flushed.Load()
			if l.holds.on {
				l.sweepHold(ns, e, team, thr, lvl, into)
			}
			var look, fold bool
			if l.adapt != nil {
				look, fold = l.sweepLearned(ls, ns, cur, part, e, team, thr, lvl, into)
			}
			if !due && look {
				due, reason = true, ReadProfile // a look is a read: it keeps the fleet share of a quiet team
			}
			if due {
				into.Reads = append(into.Reads, Read{
					Team: team, Epoch: cur, Pressure: p, Tier: tier, Reason: reason,
					// The fleet may hold a team this gate sees at normal pressure or above,
					// or knows nothing of yet: a gate that starts, or meets a team, while
					// the fleet holds it must not send it back to the accepted topic. In
					// adaptive mode, its first look at the team's profile too (no learned
					// state yet): its pressure is the static threshold's until then, and
					// the tick judges the flag by the learned one the look sets.
					Hold:    l.holds.fleet && (tier >= Normal || reason == ReadFirst || reason == ReadPrimed || reason == ReadRetry || e.thr.Load()&heldBit != 0 || (look && ls == nil)),
					Profile: look, Fold: fold,
					e: e, tab: tab, sh: sh, flushed: pend,
				})
			}
			return true
		})
		into.Entries += sh.idx.len()
		into.Overfull += sh.overfull.Load()
		for _, c := range sh.orphans {
			if c.Epoch < cur-1 {
				into.Stale += c.N
				continue
			}
			into.Counts = append(into.Counts, c)
		}
		clear(sh.orphans)
		sh.orphans = sh.orphans[:0]
		clear(sh.expect) // every one still cached was planned above
		sh.mu.Unlock()
	}
}

// readPolicy is when a cached team is due for a read, as the configuration says; both
// clocks' sweeps ask it.
type readPolicy struct {
	share, floor float64
	ttl          int64
	cadence      [numTiers]int64
}

func (l *Limiter) readPolicy() readPolicy {
	// The pending share, as the sync floor, is of the fleet's count, the sum of the gates':
	// each gate's part of it is the share ÷ the fleet's size. A gate whose view of a team
	// predicts too little of the others' traffic (a first read's fleet factor is 1) would
	// otherwise wait for its own records to reach the whole share, N × it fleet-wide.
	rp := readPolicy{share: l.cfg.PendingReadShare / float64(l.fleetSize.Load()), floor: l.readFloorShare(), ttl: l.cfg.TTL.Nanoseconds()}
	for t := range numTiers {
		rp.cadence[t] = l.cfg.cadence(t).Nanoseconds()
	}
	return rp
}

// due says whether, and why, a team is read at ns: its view was read at at (entry.readAt:
// 0, never; readLocal set, the last read failed), its pressure is p and tier tier, and
// pending records were counted here since. A team whose last read failed is due whatever
// its pressure, as it was when that read was planned: it may have met the fleet's traffic
// only then. Its first successful read clears that, and the cadence takes over.
func (rp *readPolicy) due(ns, at int64, p float64, tier Tier, pending int64, thr float64) (ReadReason, bool) {
	switch {
	case at == 0:
		return ReadFirst, p >= rp.floor
	case at&readLocal != 0:
		return ReadRetry, true
	case readTime(at) > ns:
		// Read at a time the clock has stepped back from since: how old the view is, and
		// how much of it has aged out, is unknown (entry.level ages none of it).
		return ReadTTL, true
	case rp.share > 0 && float64(pending) >= rp.share*thr:
		return ReadPending, true
	case tier == Hot && rp.cadence[Hot] == 0:
		return ReadHot, true
	case ns-at >= rp.ttl && rp.ttl > 0:
		return ReadTTL, true
	case tier == Idle && p < rp.floor:
		return 0, false
	}
	return ReadCadence, ns-at >= rp.cadence[tier]
}

// Applied is what one applied read changed, for the tick's metrics.
type Applied struct {
	// Drift is (local level − global estimate) / threshold just before the read: how far
	// this instance's view had strayed from the fleet's. Negative when other instances
	// counted traffic this one did not see.
	Drift float64
	// Staleness is how old the replaced view was (0 if the team had never been read).
	Staleness time.Duration
}

// ApplyLocal is what the tick calls instead of ApplyRead when a planned read failed (Redis
// down, timed out, an error reply for the team): the team's view is rebuilt from this
// instance's own knowledge, its current level, which then drains like any estimate.
// Without it, records counted during an outage would pile up as pending and never drain,
// and a team well within its limit would end up limited: the limiter must fail open.
//
// The read is not counted as made: the team stays due, and every Sweep plans it again
// (reason ReadRetry) until a read of it is applied with ApplyRead, which replaces the view
// with the fleet's and hands the team back to its tier's cadence. A gate that meets a team
// during a blip of the shared store so learns of the fleet's traffic on the next tick, not
// a cadence later. Through a long outage every team whose read failed is due on every
// tick: the tick's read budget, nearest the limit first, bounds that.
func (l *Limiter) ApplyLocal(r *Read, now time.Time) {
	e := l.lockedEntry(r)
	defer r.sh.mu.Unlock()
	if e == nil {
		return // left the cache since the sweep
	}
	if l.ring != nil {
		l.applyLocalEvent(r, e, now)
		return
	}
	ns := now.UnixNano()
	thr := float64(l.threshold(e, r.Team))
	// The level less what is still unsent: those records stay pending. From here the view
	// drains as the reference design's leaky bucket does (threshold / window), and counts
	// only this gate's records (a local view's level takes factor 1: entry.level): with
	// the store out of reach nothing says how the fleet moves, and the limiter fails open.
	est := e.level(ns, l.readFloor.Load()) - float64(e.pending()-e.flushed.Load())
	// The fleet factor the last read learned is kept in the view, unused by its level: a
	// failed read learns none, and the reads after it need it. While Redis refuses every
	// gate's writes, a read that answers is grown by this gate's refused counts scaled by
	// it (FleetFactor; a refused read keeps the factor it finds); reset to 1 by one read
	// that failed meanwhile, each gate counted its own refused records alone and a fleet of
	// 4 admitted 4 × a team's limit for the rest of the refusal
	// (TestFleetRefusingWritesKeepsLimitThroughAFailedRead).
	factor := 1.0
	if e.readAt.Load() != 0 {
		_, _, factor = unpackView(e.estimate.Load())
	}
	// The estimate first, marked local (viewLocal): a check between the two stores takes
	// this local view, factor 1, drained from the last read's time, lower than it is for
	// an instant; stored the other way round, such a check took the last read's estimate
	// as of now, undrained (a team at half its limit read at 1.02 × it, limited, and
	// perhaps held for a window).
	e.estimate.Store(packView(max(est, 0), thr/float64(l.windowNs), max(factor, 1)) | viewLocal)
	if l.afterViewEstimate != nil {
		l.afterViewEstimate()
	}
	e.readAt.Store(readStamp(ns, true))
	e.flushed.Add(-r.flushed)
}

// ApplyRead applies a read planned by Sweep: curr and prev are the team's shared counts in
// r.Epoch and r.Epoch−1, as read at now. The team's estimate becomes
// prev × (1 − progress) + curr, where progress is how far now is into r.Epoch; applied
// after r.Epoch ended, curr × (1 − progress into the window now) when that is the next
// one, else 0 (the windows read have slid out). Its
// pending count drops by what the shared counts now include (the counts the same tick
// wrote before reading), keeping records counted while the read was in flight. A team whose
// last read failed (ApplyLocal) is no longer due for that once this is applied. Apply each
// planned read at most once (ApplyRead or ApplyLocal), before the next Sweep: a read
// accounts for the counts drained up to the sweep that planned it.
//
// When some of those counts were not written (the store refused the writes but answered
// the read), the caller adds them to curr and prev, by epoch, as the store would hold
// them: the read then keeps them in the level instead of dropping them, under either
// clock.
func (l *Limiter) ApplyRead(r *Read, curr, prev int64, now time.Time) Applied {
	e := l.lockedEntry(r)
	defer r.sh.mu.Unlock()
	if e == nil {
		return Applied{} // left the cache since the sweep
	}
	if l.ring != nil {
		return l.applyReadEvent(r, e, curr, prev, now)
	}
	r.prev = prev
	ns := now.UnixNano()
	// A read planned before a boundary and applied after it (a tick interval that does
	// not divide the window, its reads a quarter tick after the sweep; a tick held past
	// the boundary) holds windows that have ended: r.Epoch's count is the previous
	// window's now, sliding out through this one, and drains at its own rate, not the
	// window's before it (5 times too fast after a window of 5 × the traffic); two
	// windows on, nothing of it is left. The fleet factor still weighs the read as of
	// r.Epoch, the counts it holds.
	epoch, vc, vp := r.Epoch, curr, prev
	if cur := floorDiv(ns, l.windowNs); cur > epoch {
		vc, vp = 0, 0
		if cur == epoch+1 {
			vp = curr
		}
		epoch = cur
	}
	progress := float64(ns-epoch*l.windowNs) / float64(l.windowNs)
	progress = min(max(progress, 0), 1)
	est := float64(vp)*(1-progress) + float64(vc)

	thr := float64(l.threshold(e, r.Team))
	local := e.level(ns, l.readFloor.Load())
	factor, unseen := l.fleetFactor(e, r, curr, prev, est, ns, thr)
	var a Applied
	a.Drift = (local - est) / thr
	if at := e.readAt.Load(); at != 0 {
		a.Staleness = time.Duration(ns - readTime(at))
	}
	// Estimate before readAt, pending last: a check racing this sees our writes twice for an
	// instant rather than not at all.
	// The estimate ages out at prev / window: the rate the sliding-window estimate falls at
	// through the rest of the window when nothing more comes in.
	e.estimate.Store(packView(est+unseen, float64(vp)/float64(l.windowNs), factor))
	e.readAt.Store(readStamp(ns, false))
	e.flushed.Add(-r.flushed)
	return a
}

// FleetFactor is the fleet factor of r's team as of its last read (fleetFactor): the
// fleet's records per record counted here, about N for one of N gates sharing the team
// evenly. It is 1 before a read and under EventClock, whose view has none; a failed read
// (ApplyLocal) keeps the last one learned. The tick scales by it this gate's counts Redis
// refuses, which stand for the other gates' refused alike.
func (l *Limiter) FleetFactor(r *Read) float64 {
	if l.ring != nil || r.e == nil || r.e.readAt.Load() == 0 {
		return 1
	}
	_, _, f := unpackView(r.e.estimate.Load())
	return max(f, 1)
}

// lockedEntry locks r's shard and returns the entry r was planned for, where it is now: a
// rebuild since may have moved it to a newer table (its old copy says where); nil when
// the team left the cache (evicted or expired) since the sweep, a new entry of the same
// team not being the one whose counts the read accounts for. The caller unlocks r.sh.mu.
func (l *Limiter) lockedEntry(r *Read) *entry {
	r.sh.mu.Lock()
	e, t := r.e, r.tab
	for {
		st := e.state.Load()
		if st&stateDeleted == 0 {
			r.e, r.tab = e, t
			return e
		}
		if st&stateMoved == 0 || t.next == nil {
			return nil
		}
		e, t = &t.next.ents[st&stateIndex], t.next
	}
}

// fleetMass is how many records, as a share of the threshold, the fleet factor's running
// ratio remembers: the last read's ratio is weighed as fleetMass × threshold records of
// the fleet's traffic, so a team near its limit (a threshold's worth a window) settles
// on a new share within about 1/8 of a window, and a read that saw only a handful of
// records moves it little.
const fleetMass = 1.0 / 8

// maxFleetFactor bounds the fleet factor: a gate that sees one record in 1024 of a team's
// predicts no more than that.
const maxFleetFactor = 1024

// fleetFactor is the fleet's records per record counted here, as of the read being
// applied (curr and prev in r.Epoch, estimate est, at ns), and what the other gates have
// counted but not yet written, which the read could not see.
//
// The factor is kept as this gate's share of the team's traffic, a running ratio:
// share' = (share × M + own) / (M + fleet), where own is what this gate wrote since the
// last read (r.flushed), fleet what the whole fleet added meanwhile, and M = fleetMass ×
// threshold. Between two reads in one epoch the fleet's part is exact: the growth of the
// shared count of r.Epoch, the last read's count being its estimate (less what it added
// as unseen) less prev × (1 − its progress). Across one epoch boundary it is as exact:
// all of curr, and prev's growth since the last read, whose count of that epoch was its
// estimate less the epoch before's drain over the rest of it. Otherwise (the first read,
// one after a failed read, one a window or more after the last) it is the estimate's
// share of the time since, at most a window: the same in a steady fleet. A gate alone
// stays at 1.
//
// Every gate writes once a tick. A fresh read (r.Fresh: the fleet's ticks aligned, every
// write before any read) misses nothing the others counted up to the tick's boundary. An
// unaligned one sees each other gate's counts as of its last tick: on average half a tick
// of the other gates' traffic is missing from it, (1 − share) × the fleet's rate × half
// the tick interval. Added to the estimate, it spares a team crossing its limit half a
// tick of records admitted by gates that read before the others wrote.
func (l *Limiter) fleetFactor(e *entry, r *Read, curr, prev int64, est float64, ns int64, thr float64) (factor, unseen float64) {
	at := e.readAt.Load()
	if at == 0 {
		// The first read: the window holds the fleet's traffic from before this gate met
		// the team, so nothing says yet what share of it is this gate's.
		return 1, 0
	}
	win := float64(l.windowNs)
	lastEst, lastDrain, lastFactor := unpackView(e.estimate.Load())
	if r.Refused {
		// What the others counted is in the read as this factor predicted it (and nothing
		// of theirs is unseen): kept, as a read holds nothing to learn it from.
		return max(lastFactor, 1), 0
	}
	share := 1 / lastFactor // as the last read measured it: a failed read (ApplyLocal) keeps it
	dt := float64(ns - readTime(at))
	if dt <= 0 {
		return lastFactor, 0
	}
	// The counter grew between the two reads, but dt is between their applies, which wait
	// for every pipeline of their ticks: after a tick held to its deadline by a slow node
	// and a quick one, dt is a fraction of the time the growth took. Reads of a busy team
	// are a tick apart at least: a rate is taken over no less.
	rateDt := max(dt, float64(l.sweepGap))
	// What the read could not see: none when it follows every gate's writes; otherwise
	// half a tick of the other gates' traffic.
	gap := float64(l.sweepGap) / 2
	if r.Fresh {
		gap = 0
	}
	var fleet float64
	start := r.Epoch * l.windowNs
	switch c := min((1-share)*gap/rateDt, 0.5); {
	case at&readLocal == 0 && at >= start:
		// The growth since the last read, whose estimate held its unseen part: (1 − share)
		// × the fleet's rate × half a tick, which at the fleet's rate now (exact in a
		// steady fleet) makes fleet = grown + c × fleet.
		grown := float64(curr) - (lastEst - float64(prev)*(1-float64(at-start)/win))
		fleet = max(grown/(1-c), 0)
	case at&readLocal == 0 && readTime(at) >= start-l.windowNs:
		// The last read was in the epoch before, prev's now: what that epoch's count was
		// then is the last estimate less what of the epoch before it was left (its drain,
		// the view's, times the rest of that epoch); the growth is prev's since, and all
		// of curr. The estimate's share of the time since, as an epoch boundary once took,
		// counted the last window's records, seen at that read, as grown when none came:
		// each read of a team idle since cut every gate's share (a lone gate's to 0.56 at
		// the first boundary), and its next burst counted 1 / share times a record.
		then := lastEst - lastDrain*float64(start-readTime(at))
		grown := float64(curr) + max(float64(prev)-then, 0)
		fleet = max(grown/(1-c), 0)
	default:
		fleet = est * min(dt, win) / win
	}
	m := fleetMass * thr
	share = (share*m + float64(r.flushed)) / (m + fleet)
	share = min(max(share, 1.0/maxFleetFactor), 1)
	// The other gates' part of the fleet's rate, over what the read could not see.
	return 1 / share, (1 - share) * fleet / rateDt * gap
}

// idleSeconds is how many whole seconds apart a team's seen and the sweep's now (both
// counted in whole seconds, truncated: seenAt) must be for the team to have been idle for
// d: a second more than d rounded up, as a team seen late in a second and swept early in
// a later one has been idle up to a second less than the difference says. A team is thus
// expired up to a second after d rounded up to a second (its sweep, a tick later), never
// before d.
func idleSeconds(d time.Duration) uint32 {
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return uint32(min(s+1, math.MaxUint32))
}
