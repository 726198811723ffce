package limit

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A hold keeps a diverted team diverted (Config.DivertHold, DivertRelease): in Divert mode
// under the wall clock, the first check that finds a team's level at its threshold sets the
// held bit of its entry's thr word, and from then on every check answers Limited without
// looking at the level, until the sweep releases it. The per-record path so reads one bit
// it already loads, and writes it once per hold (with the tier, in one CAS).
//
// The sweep, the tick's one goroutine, keeps what a release needs for each held team in
// holds: since when it is held, when its level was last at or over the release level,
// and the threshold it was held under. A team is released when its level has stayed under
// DivertRelease × its threshold for DivertHold, when its threshold is raised (an
// override) so that its level is under DivertRelease × the new one, or when it leaves the
// cache.
//
// Fleet-wide: while a held team is over the release level, each sweep hands the tick a
// HoldFlag, which the tick writes to the shared store with a TTL of DivertHold; a read of a
// team at normal pressure or above (or held) also fetches that flag, and ApplyHold holds
// the team here too, with the flag's times. The flag's last time over is the latest any
// gate saw, so every gate releases the team within a tick of the flag expiring. With the
// store out of reach each gate holds on its own decision.

// HoldFlag is a held team's state as shared through the store: when it was first held,
// the last time a gate saw it at or over the release level, and the threshold it is held
// under (a gate whose threshold for the team differs ignores the flag: an override
// changed it).
type HoldFlag struct {
	Team      string
	Since     time.Time
	LastOver  time.Time
	Threshold int64
}

// hold is one held team, as the sweep tracks it.
type hold struct {
	since, lastOver int64 // unix ns
	thr             int64
	sweep           uint64 // the last sweep that saw it held
}

// holds is the limiter's held teams. The tick's goroutine changes it; Snapshot reads it.
type holds struct {
	on      bool  // Divert mode, wall clock, a hold or a release level below 1
	fleet   bool  // DivertHold > 0: holds are shared through the store
	holdNs  int64 // DivertHold, or 0
	release float64

	mu    sync.Mutex
	teams map[string]*hold
	sweep uint64
	// prevOverrides is the override set the last sweep saw: a team a check held since
	// was held under its threshold then, which an override swap may have raised since.
	prevOverrides *overrides

	startsLocal, startsFleet                   atomic.Uint64
	releasedCalm, releasedRaised, releasedGone atomic.Uint64
}

// count is how many teams are held here.
func (h *holds) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.teams)
}

func newHolds(cfg Config) *holds {
	on := cfg.Mode == Divert && cfg.Clock == WallClock && (cfg.DivertHold > 0 || cfg.DivertRelease < 1)
	return &holds{
		on:      on,
		fleet:   on && cfg.DivertHold > 0,
		holdNs:  max(cfg.DivertHold.Nanoseconds(), 0),
		release: cfg.DivertRelease,
		teams:   map[string]*hold{},
	}
}

// setHeld sets e's held bit; set is false if it was set already, moved true if e was
// moved or removed (the bit then says nothing: the caller holds the team's current entry).
func setHeld(e *entry) (set, moved bool) {
	for {
		v := e.thr.Load()
		if v&movedBit != 0 {
			return false, true
		}
		if v&heldBit != 0 {
			return false, false
		}
		if e.thr.CompareAndSwap(v, v|heldBit) {
			return true, false
		}
	}
}

func clearHeld(e *entry) {
	for {
		v := e.thr.Load()
		if v&heldBit == 0 || e.thr.CompareAndSwap(v, v&^heldBit) {
			return
		}
	}
}

// sweepHold is the sweep's part for one entry at ns: its threshold thr and level lvl. It
// starts tracking a team a check has just held, releases one that has calmed down, and
// appends the flag to share for one still over the release level. The caller holds the
// entry's shard lock.
func (l *Limiter) sweepHold(ns int64, e *entry, team string, thr int64, lvl float64, into *Sweep) {
	h := l.holds
	if e.thr.Load()&heldBit == 0 {
		return
	}
	over := lvl >= h.release*float64(thr)
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.teams[team]
	if st == nil {
		// Held by a check since the last sweep, under the thresholds of then: compared with
		// thr below, an override raised meanwhile releases it as it would a tracked hold.
		held := thr
		if o := h.prevOverrides; o != nil {
			held, _ = l.effective(o, e, team) // a learned threshold as it is now: it moves only with the tick
		}
		st = &hold{since: ns, lastOver: ns, thr: held}
		h.teams[strings.Clone(team)] = st // team aliases the entry
		h.startsLocal.Add(1)
	}
	st.sweep = h.sweep
	if thr != st.thr {
		raised := thr > st.thr
		st.thr = thr
		if raised && !over {
			l.release(e, team, &h.releasedRaised)
			return
		}
	}
	// Over at a time the clock has stepped back from since: as if now, or the hold would
	// last until the clock is back there as well.
	st.lastOver = min(st.lastOver, ns)
	if over {
		st.lastOver = ns
	} else if ns-st.lastOver >= h.holdNs {
		l.release(e, team, &h.releasedCalm)
		return
	}
	if over && h.fleet {
		into.Holds = append(into.Holds, HoldFlag{Team: team, Since: time.Unix(0, st.since), LastOver: time.Unix(0, ns), Threshold: thr})
	}
}

// release ends team's hold. The caller holds h.mu.
func (l *Limiter) release(e *entry, team string, reason *atomic.Uint64) {
	clearHeld(e)
	delete(l.holds.teams, team)
	reason.Add(1)
}

// endSweepHolds forgets the held teams the sweep did not see: they left the cache
// (evicted or expired), and with them their hold. Called once per sweep, after it.
func (l *Limiter) endSweepHolds() {
	h := l.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	for team, st := range h.teams {
		if st.sweep != h.sweep {
			delete(h.teams, team)
			h.releasedGone.Add(1)
		}
	}
	h.sweep++
	h.prevOverrides = l.overrides.Load()
}

// ApplyHold applies the hold flag a read fetched (Read.Hold) for r's team: the fleet holds
// the team, so this gate does too, with the flag's times. A flag set under a different
// threshold than this gate's (an override changed since) is ignored. Call it after
// ApplyRead, and after ApplyProfile (a first look sets the learned threshold a flag set
// under one is judged by), from the goroutine that sweeps.
func (l *Limiter) ApplyHold(r *Read, f HoldFlag) {
	h := l.holds
	if !h.fleet {
		return
	}
	e := l.lockedEntry(r)
	defer r.sh.mu.Unlock()
	if e == nil {
		return // left the cache since the sweep
	}
	thr := l.threshold(e, r.Team)
	if !l.sameHoldThreshold(e, r.Team, f.Threshold, thr) {
		return
	}
	since, last := f.Since.UnixNano(), f.LastOver.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.teams[r.Team]
	if st == nil {
		if l.lastSweep-last >= h.holdNs {
			// The flag outlived its hold (a SET that reached the store late, a gate whose
			// clock is behind): the next sweep would release the team at once.
			return
		}
		st = &hold{since: since, lastOver: last, thr: thr, sweep: h.sweep}
		h.teams[strings.Clone(r.Team)] = st // r.Team aliases the cache's table
		if set, _ := setHeld(e); set {
			h.startsFleet.Add(1)
		} else {
			h.startsLocal.Add(1) // held by a check since the sweep
		}
		return
	}
	st.since = min(st.since, since)
	st.lastOver = max(st.lastOver, last)
	// The team may have been held on an entry since evicted and made again: hold this one.
	setHeld(e)
}

// sameHoldThreshold reports whether a hold flag set under threshold flag applies to e,
// whose threshold here is thr: the same, or both learned and within spikeFlagSlack of each
// other (gates take up a new fold a window apart at most).
func (l *Limiter) sameHoldThreshold(e *entry, team string, flag, thr int64) bool {
	if flag == thr {
		return true
	}
	if l.adapt == nil {
		return false
	}
	if _, src := l.effective(l.overrides.Load(), e, team); src != SourceLearned {
		return false
	}
	return math.Abs(float64(flag-thr)) <= spikeFlagSlack*float64(thr)
}

// HoldsShared reports whether holds are shared through the store: the tick then writes
// Sweep.Holds and fetches the flags of reads marked Read.Hold.
func (l *Limiter) HoldsShared() bool { return l.holds.fleet }

// DivertHold is how long a hold flag lives in the store: Config.DivertHold.
func (l *Limiter) DivertHold() time.Duration { return time.Duration(l.holds.holdNs) }

// holdState returns team's hold for the team view: since when it is held and when it is
// released if its level stays under the release level; false when it is not held.
func (l *Limiter) holdState(team string) (since, releaseAt time.Time, ok bool) {
	h := l.holds
	if !h.on {
		return since, releaseAt, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.teams[team]
	if st == nil {
		return since, releaseAt, false
	}
	return time.Unix(0, st.since), time.Unix(0, st.lastOver+h.holdNs), true
}
