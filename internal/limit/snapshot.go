package limit

import (
	"cmp"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// TeamState is one cached team as this gate sees it, for operators: the per-team view
// and the top-N list. Reading it changes nothing a check or the tick relies on.
type TeamState struct {
	Team string
	// Threshold is the team's limit per window; Override says it comes from an override
	// (GATE_OVERRIDES or the live set) rather than the default.
	Threshold int64
	Override  bool
	// Level is the local level now: the last global estimate less what aged out since it
	// was read, plus the records counted here since then, each as 1 / FleetShare of the
	// fleet's.
	Level float64
	// Estimate is the fleet-wide estimate at the last read, ReadAt when it was read (zero:
	// never read, the level is local counts only). Local: that read failed (Redis out of
	// reach), and Estimate is this gate's own rebuild then (ApplyLocal: the last estimate
	// aged, and its own counts), not the fleet's.
	Estimate float64
	ReadAt   time.Time
	Local    bool
	// Pending is what this gate counted since the last read.
	Pending int64
	// FleetShare is this gate's share of the team's traffic as its reads measured it (1:
	// alone, or not measured yet): the level counts each record here as 1 / FleetShare of
	// the fleet's. Local, the level counts them as 1 each, and FleetShare is what the last
	// read that answered measured, kept for the next one.
	FleetShare float64
	Tier       Tier
	Limited    bool
	// UnderIn is how long, were the team to send nothing more, its level takes to drain
	// under its threshold (0 when it is not limited).
	UnderIn time.Duration
	// HeldSince is when the team was first held in overflow (Config.DivertHold), here or
	// by the fleet; zero when it is not held. ReleaseAt is when its hold ends if its level
	// stays under the release level from now on: while the team is over it, a hold
	// later each tick.
	HeldSince time.Time
	ReleaseAt time.Time
	// Source is where Threshold comes from: an override, the learned threshold, or the
	// default (static; in adaptive mode also too little history yet, or not looked up yet).
	// Adaptive thresholds (Config.Adaptive): Adaptive is set in that mode;
	// Learned is the learned threshold (0: none yet), Baseline the team's usual volume in
	// this window (0: none yet), SpikeSince when its current spike started (zero: none),
	// SpikeEnds when that spike ends by re-learning the team at its new volume if it lasts
	// (spike.Config.MaxSpike; zero: no spike), Relearned when a spike last ended so
	// (zero: never), PatternHours the hours of the day (UTC) learned as a daily pattern
	// (a nightly import: spike.Profile.Pattern), whose thresholds follow their highest
	// windows.
	Adaptive     bool
	Source       Source
	Learned      int64
	Baseline     float64
	SpikeSince   time.Time
	SpikeEnds    time.Time
	Relearned    time.Time
	PatternHours []int
}

// Pressure is Level / Threshold.
func (s TeamState) Pressure() float64 { return s.Level / float64(s.Threshold) }

// Under EventClock the state is that of the newest window the team was seen in, at the
// wall clock's progress through it (the end, for a window past), and UnderIn is 0: how
// soon a team is under depends on its partitions' event time, not the wall clock.

// Snapshot returns team's state at now, or false when the team is not cached on this
// gate (never seen, evicted or expired). It does not add the team, count anything or mark
// it seen.
func (l *Limiter) Snapshot(now time.Time, team string) (TeamState, bool) {
	if l.ring != nil {
		var s TeamState
		var ok bool
		if team != "" {
			l.eventEntries(now, team, func(e *entry, team string, p float64) { s, ok = l.eventState(e, team, p), true })
		}
		return s, ok
	}
	h := maphash.String(l.seed, team)
	e, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, team)
	if e == nil {
		return TeamState{}, false
	}
	return l.state(now, e, team), true
}

// Top returns the n cached teams limited at now (over their limit, or held in overflow
// under Config.DivertHold, whose level may have fallen far below it: every record of theirs
// is still sent away) and then with the highest pressure (level / threshold), each part
// highest pressure first. It visits every cached team, taking each shard's mutex in turn: an
// operator's query, not something to call per record.
func (l *Limiter) Top(now time.Time, n int) []TeamState {
	if n <= 0 {
		return nil
	}
	var all []TeamState
	if l.ring != nil {
		l.eventEntries(now, "", func(e *entry, team string, p float64) { all = append(all, l.eventState(e, team, p)) })
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		type cached struct {
			e    *entry
			team string
		}
		var es []cached
		sh.idx.all(func(_ uint32, e *entry, team string) bool {
			es = append(es, cached{e, team})
			return true
		})
		sh.mu.Unlock()
		for _, c := range es {
			all = append(all, l.state(now, c.e, c.team))
		}
	}
	slices.SortFunc(all, func(a, b TeamState) int {
		if a.Limited != b.Limited {
			if a.Limited {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.Pressure(), a.Pressure()); c != 0 {
			return c
		}
		return cmp.Compare(a.Team, b.Team)
	})
	return all[:min(n, len(all))]
}

// Pressing returns the cached keys held, or whose level at now is at least minLevel or
// their threshold, at most n of them, the highest pressure (level ÷ threshold) first:
// what a rules reload has the new limiters of a changed rule read before they are used
// (internal/gate). Unlike Top it builds no TeamState for the keys it leaves out, and so
// costs a cache of 300,000 keys a walk, not a slice of them all. Nil under the event
// clock.
func (l *Limiter) Pressing(now time.Time, minLevel float64, n int) []string {
	if l.ring != nil || n <= 0 {
		return nil
	}
	ns := now.UnixNano()
	type key struct {
		team string
		p    float64
	}
	var found []key
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.idx.all(func(_ uint32, e *entry, team string) bool {
			thr := float64(l.threshold(e, team))
			lvl := e.level(ns, l.readFloor.Load())
			if e.thr.Load()&heldBit != 0 || lvl >= thr || lvl >= minLevel {
				found = append(found, key{strings.Clone(team), lvl / thr}) // team is the table's
			}
			return true
		})
		sh.mu.Unlock()
	}
	slices.SortFunc(found, func(a, b key) int { return cmp.Or(cmp.Compare(b.p, a.p), strings.Compare(a.team, b.team)) })
	out := make([]string, 0, min(n, len(found)))
	for _, k := range found[:min(n, len(found))] {
		out = append(out, k.team)
	}
	return out
}

func (l *Limiter) state(now time.Time, e *entry, team string) TeamState {
	ns := now.UnixNano()
	thr, src := l.effective(l.overrides.Load(), e, team)
	ok := src == SourceOverride
	fthr := float64(thr)
	leak := fthr * l.invWindow // per ns
	lvl := e.level(ns, l.readFloor.Load())
	est, _, factor := unpackView(e.estimate.Load())
	s := TeamState{
		Team:       team,
		Threshold:  thr,
		Override:   ok,
		Level:      lvl,
		Estimate:   est,
		Pending:    e.pending(),
		FleetShare: 1,
		Tier:       tierOfLevel(lvl, fthr),
		Limited:    lvl >= fthr,
		Source:     src,
	}
	if at := e.readAt.Load(); at != 0 {
		s.ReadAt, s.Local = time.Unix(0, readTime(at)), at&readLocal != 0
		s.FleetShare = 1 / factor
	}
	if l.adapt != nil {
		s.Adaptive = true
		if ls := l.adapt.of(e); ls != nil {
			s.Learned = ls.thr.Load()
			s.Baseline = math.Float64frombits(ls.base.Load())
			if since := ls.since.Load(); since != 0 {
				s.SpikeSince = time.Unix(0, since)
				// The fleet's folds may not have seen it yet: MaxSpike from here, at most.
				ends := since + int64(l.adapt.cfg.MaxSpike)
				if e := ls.spikeEnds.Load(); e != 0 {
					ends = min(ends, e)
				}
				s.SpikeEnds = time.Unix(0, ends)
			}
			if rl := ls.relearned.Load(); rl != 0 {
				s.Relearned = time.Unix(0, rl*l.windowNs)
			}
			for m := ls.pattern.Load(); m != 0; m &= m - 1 {
				s.PatternHours = append(s.PatternHours, bits.TrailingZeros32(m))
			}
		}
	}
	if since, rel, ok := l.holdState(team); ok {
		s.HeldSince, s.ReleaseAt, s.Limited = since, rel, true
	}
	if s.Limited && leak > 0 && lvl > fthr {
		s.UnderIn = l.underIn(ns, e, lvl, fthr, leak)
	}
	return s
}

// underIn is how long e's level lvl, over threshold thr, takes to drain under it if the
// team sends nothing more. After a read of the fleet's counts the level is the sliding
// window's, prev × (1 − progress) + curr: it falls at the view's drain (prev / window) to
// the end of the epoch, where what is left, the epoch's own count, becomes the previous
// epoch's and ages out over the next window, so a team far over its limit in divert mode
// (every record counted) is under within two windows, not at threshold / window (65 s for
// the demo's team at 7.5 × a 10 s window's threshold). A level rebuilt from this gate's
// own counts (a failed read: ApplyLocal) drains at leak, threshold / window, as does one never
// read yet, until its first read. At most the longest Duration: a level millions of times
// its threshold (bytes counted against a small override) would wrap to a negative wait.
func (l *Limiter) underIn(ns int64, e *entry, lvl, thr, leak float64) time.Duration {
	wait := (lvl - thr) / leak
	if at := e.readAt.Load(); at != 0 && at&readLocal == 0 {
		_, drain, _ := unpackView(e.estimate.Load())
		toEnd := float64((floorDiv(ns, l.windowNs)+1)*l.windowNs - ns)
		if left := lvl - drain*toEnd; left <= thr {
			wait = (lvl - thr) / drain // drain > 0: it takes lvl past thr before the end
		} else {
			wait = toEnd + float64(l.windowNs)*(left-thr)/left
		}
	}
	if w := math.Ceil(wait); w < math.MaxInt64 {
		return time.Duration(w)
	}
	return time.Duration(math.MaxInt64)
}

func (l *Limiter) eventState(e *entry, team string, progress float64) TeamState {
	thr, ok := l.overrides.Load().threshold(team, l.cfg.Threshold)
	lvl := e.evLevel(progress)
	s := TeamState{
		Team:       team,
		Threshold:  thr,
		Override:   ok,
		Level:      lvl,
		Estimate:   math.Float64frombits(e.estimate.Load()),
		Pending:    e.evPending(),
		FleetShare: 1,
		Tier:       tierOfLevel(lvl, float64(thr)),
		Limited:    lvl >= float64(thr),
	}
	if ok {
		s.Source = SourceOverride
	}
	if at := e.readAt.Load(); at != 0 {
		s.ReadAt, s.Local = time.Unix(0, readTime(at)), at&readLocal != 0
	}
	return s
}
