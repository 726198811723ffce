package limit

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

// Adaptive thresholds (Config.Adaptive, issue 22): each team's threshold is learned from
// its own history by internal/spike, from a profile shared by the whole fleet through the
// store. The per-record path is unchanged: the entry's thr word caches the effective
// threshold (override > learned > static), and a learned change is written into it by the
// tick's goroutine, keeping its generation, tier and held bit.
//
// The tick's goroutine keeps, for each cached team it has looked up, a learned state: the
// profile as last fetched (128 bytes), when to look at it next, the threshold and
// baseline it gives, and what this gate counted of the last three windows (who writes a
// fold). It is dropped when the team leaves the cache (expired or evicted).
//
// Who folds, and when. A team's profile is folded once every period windows, period being
// a function of the profile alone (spike.Config.FoldPeriod, NextFold), so every gate
// agrees on it: every spike.MinFoldEvery for a team whose learned threshold is above the
// floor, up to every spike.MaxFoldEvery for a team far under it (its threshold is the
// floor whatever its exact baseline). The window folded is the one two back (E−2 is final during E), standing for
// every window since the last fold (spike.FoldScheduled). Every gate that has the team cached
// looks at its profile, and the count of that window, in the window the next fold becomes
// final (F+2), and folds it: the same counts into the same profile, the same result on
// every gate. A gate writes its fold with probability min(1, 2 × its share of the window
// folded), so that a fleet writes it about twice, not once per gate, with a
// compare-and-set on the profile's epoch (a lost race is harmless). Should no gate write
// it, the next fold folds the stored profile over both periods.

const (
	// spikeFlagSlack: a hold flag set under a learned threshold is taken by a gate whose
	// learned threshold differs by up to this share. Gates refresh a team's profile in the
	// same window, not at the same instant, so two thresholds learned a fold apart differ
	// slightly; an override (or a team's threshold leaving the learned one) differs more.
	spikeFlagSlack = 0.125
)

// adaptive is the limiter's learned thresholds.
type adaptive struct {
	cfg       spike.Config
	minPeriod int64 // spike.MinFoldEvery in windows
	// teams is every cached team's learned state, for lookups without the shard's mutex
	// (a check's threshold refresh, the team view); the sweep, which holds it, looks in
	// its shard's copy (shard.learned), a plain map: sync.Map's trie cost the sweep a
	// quarter of its time at 100k teams (BenchmarkAdaptiveCost).
	teams sync.Map   // *entry → *learned
	rng   *rand.Rand // the tick's goroutine only

	started, ended, relearned atomic.Uint64
	spiking                   atomic.Int64
}

// learned is one team's learned state on this gate.
type learned struct {
	// The tick's goroutine only.
	prof spike.Profile
	next int64 // the epoch of the next look at the profile
	part int64 // the part of the day thr was computed for (spike.Config.ThresholdPart)
	// own is what this gate handed to the tick of each of the last three windows (by
	// epoch mod 3, tagged as entry.unsent is), complete from epoch ownFrom on, so that a fold knows this gate's share of the window it folds
	// (wantsFold).
	own     [3]uint64
	ownFrom int64
	// Read by checks (thr, on an override swap) and the team view.
	thr      atomic.Int64  // learned threshold; 0 while the team has too little history
	base     atomic.Uint64 // float64 bits of the baseline in that hour
	since    atomic.Int64  // unix ns the current spike started; 0 none
	spikeThr atomic.Int64  // the threshold the current spike started over
	// From the profile: the window of its last spike ended by re-learning, and when its
	// current spike (as the fleet's folds saw it) ends by re-learning, unix ns; 0 none.
	relearned atomic.Int64
	spikeEnds atomic.Int64
	// relearnedEnded is the profile's Relearned that last ended a spike here: one
	// re-learning ends one spike, not every spike started after it.
	relearnedEnded atomic.Int64
	pattern        atomic.Uint32 // the profile's pattern hours (spike.Profile.Pattern)
}

func newAdaptive(c spike.Config) *adaptive {
	return &adaptive{cfg: c, minPeriod: max(int64(spike.MinFoldEvery/c.Window), 1), rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// of returns e's learned state, nil when it has none.
func (a *adaptive) of(e *entry) *learned {
	if v, ok := a.teams.Load(e); ok {
		return v.(*learned)
	}
	return nil
}

// addOwn adds n records of epoch to what this gate handed to the tick. A slot is tagged
// as the entry's unsent slots are (count << epochTagBits | epoch tag).
func (ls *learned) addOwn(epoch, n int64) {
	o := &ls.own[floorMod(epoch, 3)]
	tag := uint64(epoch) & epochTagMask
	if *o&epochTagMask != tag {
		*o = tag
	}
	*o += uint64(n) << epochTagBits
}

// ownOf is what this gate handed to the tick of epoch; ok is false when it does not know
// it all: the epoch came before this state was made, or a later epoch has its slot (a
// check timed just after a sweep's clock read can count one epoch ahead).
func (ls *learned) ownOf(epoch int64) (n int64, ok bool) {
	if epoch < ls.ownFrom {
		return 0, false
	}
	switch o := ls.own[floorMod(epoch, 3)]; {
	case o&epochTagMask == uint64(epoch)&epochTagMask:
		return int64(o >> epochTagBits), true
	case o != 0 && slotEpoch(epoch, o) > epoch:
		return 0, false
	}
	return 0, true // nothing handed over in that epoch
}

// wantsFold rolls whether this gate writes the fold of e's profile it made, of epoch f whose
// shared count was count, the read of epoch f+2 having found prev for f+1: with probability
// min(1, 2 × this gate's share of the team's traffic), so that a fleet writes a fold about
// twice, not once per gate. The share is this gate's own count of f against the fleet's
// when it knows it (ls.ownOf), else of f+1 (f was silent), else the fleet factor's. The
// factor alone is no measure for most teams: its running ratio weighs a read as an eighth
// of a threshold's records, so a team sending a few dozen a window keeps the share it
// started with, 1, and every gate wrote every fold of it (BenchmarkAdaptiveFleetCost: 4
// writes a fold, 3 of them lost). Own counts are what went to the tick, and the shared
// ones can lack what a write has not landed yet: a share errs high, towards a write.
func (a *adaptive) wantsFold(e *entry, ls *learned, f, count, prev int64) bool {
	share := 1.0
	if own, ok := ls.ownOf(f); ok && count > 0 {
		share = min(float64(own)/float64(count), 1)
	} else if own, ok := ls.ownOf(f + 1); ok && prev > 0 {
		share = min(float64(own)/float64(prev), 1)
	} else if e.readAt.Load() != 0 {
		_, _, factor := unpackView(e.estimate.Load())
		share = 1 / factor
	}
	return share >= 0.5 || a.rng.Float64() < 2*share
}

// rebase keeps the view of a team under its learned threshold from going stale between
// reads, without one: such a team is read seldom (syncPressure), and a level is the
// last read's estimate, which ages out within a window, plus this gate's counts since,
// which only a read takes out. Once the last read is a window old, the view is rebuilt
// from this gate's own counts since it: the fleet's rate (pending × the fleet factor, over
// the time since) over one window, ageing out at that rate. The fleet factor is kept, as
// measured by the last read; the next read measures it again (a look at the team's profile
// reads it every fold period at least). The read time is put just before the window's
// start, so that the next read measures the fleet's share over the time since, not from an
// estimate the store never held. ls is e's learned state (nil: none); it returns e's level.
func (l *Limiter) rebase(e *entry, ls *learned, ns int64, thr int64, lvl float64) float64 {
	at := e.readAt.Load()
	if ls == nil || at == 0 || at&readLocal != 0 || ns-at < l.windowNs || ls.thr.Load() != thr {
		return lvl
	}
	_, _, factor := unpackView(e.estimate.Load())
	flushed := e.flushed.Load()
	pending := e.pending()
	rate := factor * float64(pending) / float64(ns-at) // the fleet's records per ns
	from := floorDiv(ns, l.windowNs)*l.windowNs - 1
	// The level is then rate × window: the estimate holds it less what stays pending (the
	// records not yet handed to the tick, which the level adds as ever).
	est := max(rate*float64(l.windowNs)-factor*float64(pending-flushed), 0)
	e.estimate.Store(packView(est+rate*float64(ns-from), rate, factor))
	e.readAt.Store(readStamp(from, false))
	e.flushed.Add(-flushed)
	return e.level(ns, l.readFloor.Load())
}

// syncPressure is what the sweep's sync policy (reads, cold writes) goes by for e, whose
// learned state is ls, threshold thr, level lvl, pressure p and tier tier. A team under its
// learned threshold is at 1/Factor of it when at its baseline: by its pressure, every team
// would be read every few windows and written every tick, which would cost the store
// several times what static thresholds do (BenchmarkAdaptiveCost). What brings a team near
// its threshold is its level above its baseline, so that is its pressure here: (level −
// baseline) / (threshold − baseline). A team under half of that is read at the low tier's
// cadence but not for the pending or cold-write shares (its own noise, a sliding window of
// a few dozen records for most teams, would read it every few ticks); one under a tenth of
// it (quiet) is synced as an idle team under the sync floor: not read at a cadence, nor for the pending or
// cold-write shares (of a threshold it is nowhere near), nor for TTL (rebase keeps its view
// current, and the looks at its profile read it, which keeps its fleet share measured). A
// team not learned yet goes by its pressure, but under the sync floor it is not read for
// TTL either: its looks read it. A team never read yet goes by its pressure.
func (l *Limiter) syncPressure(ls *learned, e *entry, thr int64, lvl, p float64, tier Tier) (sp float64, st Tier, sthr float64, quiet bool) {
	if ls == nil || e.readAt.Load() == 0 {
		return p, tier, float64(thr), false
	}
	if ls.thr.Load() != thr {
		return p, tier, float64(thr), p < l.readFloorShare()
	}
	base := math.Float64frombits(ls.base.Load())
	gap := float64(thr) - base
	if gap <= 0 {
		return p, tier, float64(thr), false
	}
	sp = max(lvl-base, 0) / gap
	switch st = TierOf(sp); st {
	case Idle:
		return 0, Idle, math.Inf(1), true // under the sync floor: no cadence reads either
	case Low:
		// A team's own noise (a sliding window of a few dozen records, for most teams)
		// puts it here often: its cadence reads it, the pending share does not.
		return sp, st, math.Inf(1), false
	}
	return sp, st, float64(thr), false
}

// SpikeEvent is a spike's start or end, for the tick to log and count.
type SpikeEvent struct {
	Team    string
	Started bool // false: ended
	// Since is when the spike started; At when this event happened.
	Since, At time.Time
	// Threshold is the learned threshold the spike started over; Baseline the team's
	// baseline at At.
	Threshold int64
	Baseline  float64
	// Relearned: the spike ended because it lasted spike.Config.MaxSpike, and the team
	// was re-learned at its new volume; NewThreshold is its learned threshold now.
	Relearned    bool
	NewThreshold int64
}

// sweepLearned is the sweep's part of adaptive thresholds for one cached entry at ns in
// epoch cur, of part of the day part (spike.Config.ThresholdPart), whose effective
// threshold is thr and level lvl: it moves the learned threshold to a new part's season,
// tracks spikes, and says whether to look at the profile with this sweep's read of the
// team, and whether to fetch the count of epoch cur−2 to fold it. The caller holds the
// entry's shard lock.
func (l *Limiter) sweepLearned(ls *learned, ns, cur, part int64, e *entry, team string, thr int64, lvl float64, into *Sweep) (look, fold bool) {
	if ls == nil {
		return true, true
	}
	if part != ls.part {
		l.setLearned(e, team, ls, cur)
		// The team's threshold now, the new part's: trackSpike compares it with the
		// learned one, and the one read before would end a spike at every hour's edge.
		thr = l.threshold(e, team)
	}
	l.trackSpike(ns, e, team, ls, thr, lvl, into)
	if cur >= ls.next {
		return true, true
	}
	return false, false
}

// trackSpike starts a spike when a team whose threshold is its learned one reaches it, and
// ends it when the team is released: with holds, when it is no longer held and under its
// threshold; otherwise when its level is under DivertRelease × the threshold. A spike the
// fleet's folds ended by re-learning the team at its new volume (it lasted MaxSpike) ends
// here with the next sweep, whatever the level: the team is then judged by its new
// threshold, a spike of its own if it is over that.
func (l *Limiter) trackSpike(ns int64, e *entry, team string, ls *learned, thr int64, lvl float64, into *Sweep) {
	lt := ls.thr.Load()
	since := ls.since.Load()
	held := e.thr.Load()&heldBit != 0
	if since == 0 {
		if lt > 0 && thr == lt && (lvl >= float64(lt) || held) {
			ls.since.Store(ns)
			ls.spikeThr.Store(lt)
			l.adapt.started.Add(1)
			l.adapt.spiking.Add(1)
			into.Spikes = append(into.Spikes, SpikeEvent{Team: team, Started: true, Since: time.Unix(0, ns), At: time.Unix(0, ns), Threshold: lt, Baseline: math.Float64frombits(ls.base.Load())})
		}
		return
	}
	if l.relearnedSince(ls, since) {
		l.endSpike(team, ls, ns, into)
		return
	}
	st := float64(ls.spikeThr.Load())
	var over bool
	if l.holds.on {
		over = held || lvl >= st
	} else {
		over = lvl >= l.cfg.DivertRelease*st
	}
	if over && thr == lt {
		return
	}
	l.endSpike(team, ls, ns, into)
}

// endSpike ends ls's spike at ns; into may be nil (an eviction: counted, not logged).
func (l *Limiter) endSpike(team string, ls *learned, ns int64, into *Sweep) {
	since := ls.since.Swap(0)
	if since == 0 {
		return
	}
	l.adapt.ended.Add(1)
	l.adapt.spiking.Add(-1)
	relearned := l.relearnedSince(ls, since)
	if relearned {
		l.adapt.relearned.Add(1)
		ls.relearnedEnded.Store(ls.relearned.Load())
	}
	if into != nil {
		into.Spikes = append(into.Spikes, SpikeEvent{Team: team, Since: time.Unix(0, since), At: time.Unix(0, ns), Threshold: ls.spikeThr.Load(), Baseline: math.Float64frombits(ls.base.Load()),
			Relearned: relearned, NewThreshold: ls.thr.Load()})
	}
}

// relearnedSince reports whether ls's profile ended a spike by re-learning the team at
// its new volume, at or after since (unix ns) less a fold period: the fleet's folds see a
// spike start up to a fold period before or after this gate does, as a fold takes its
// period's windows at the rate of its last.
func (l *Limiter) relearnedSince(ls *learned, since int64) bool {
	rl := ls.relearned.Load()
	return rl != 0 && rl > ls.relearnedEnded.Load() && rl*l.windowNs >= since-int64(spike.MaxFoldEvery)
}

// forgetLearned drops e's learned state: e, team's entry, left the cache. The caller
// holds sh.mu, sh being e's shard.
func (l *Limiter) forgetLearned(sh *shard, e *entry, team string, ns int64, into *Sweep) {
	delete(sh.learned, e)
	if v, ok := l.adapt.teams.LoadAndDelete(e); ok {
		l.endSpike(team, v.(*learned), ns, into)
	}
}

// movedLearned keys old's learned state, if any, by new: a rebuild of sh's table moved the
// entry. The caller holds sh.mu.
func (l *Limiter) movedLearned(sh *shard, old, new *entry) {
	ls, ok := sh.learned[old]
	if !ok {
		return
	}
	// New before old goes: a check looking without the mutex finds one or the other.
	l.adapt.teams.Store(new, ls)
	l.adapt.teams.Delete(old)
	delete(sh.learned, old)
	sh.learned[new] = ls
}

// setLearned recomputes ls's threshold and baseline for epoch cur from its profile, and
// writes a changed threshold into e's thr word.
func (l *Limiter) setLearned(e *entry, team string, ls *learned, cur int64) {
	a := l.adapt
	var thr int64
	if t, ok := a.cfg.Threshold(&ls.prof, cur); ok && !math.IsNaN(t) {
		// Clamped as a float: a float64 beyond int64 (or +Inf) converts to MinInt64.
		thr = int64(min(max(math.Ceil(t), 1), MaxThreshold))
	}
	ls.part = a.cfg.ThresholdPart(cur)
	ls.base.Store(math.Float64bits(a.cfg.Baseline(&ls.prof, cur)))
	ls.relearned.Store(ls.prof.Relearned)
	ls.pattern.Store(ls.prof.Pattern)
	var ends int64
	if ep, ok := a.cfg.SpikeEnds(&ls.prof); ok {
		ends = ep * l.windowNs
	}
	ls.spikeEnds.Store(ends)
	if ls.thr.Swap(thr) != thr {
		l.storeThreshold(e, team)
	}
}

// storeThreshold writes e's effective threshold into its thr word, keeping the generation,
// tier and held bit. A word of an older generation is left alone: the next check refreshes
// it (refreshThreshold), from the learned threshold already stored.
func (l *Limiter) storeThreshold(e *entry, team string) {
	for {
		o := l.overrides.Load()
		v := e.thr.Load()
		if v>>genShift != o.gen {
			return
		}
		t, _ := l.effective(o, e, team)
		nv := v&^uint64(thresholdMask) | uint64(t)
		if nv == v || e.thr.CompareAndSwap(v, nv) {
			return
		}
	}
}

// Source says where a team's threshold comes from.
type Source uint8

// Threshold sources, by precedence.
const (
	SourceStatic   Source = iota // the default threshold (GATE_THRESHOLD)
	SourceLearned                // learned from the team's history (Config.Adaptive)
	SourceOverride               // an override
)

// String returns the source's name as the team view shows it.
func (s Source) String() string {
	switch s {
	case SourceLearned:
		return "learned"
	case SourceOverride:
		return "override"
	}
	return "static"
}

// effective is e's threshold, team's, under overrides o: its override, else its learned
// threshold, else the default; and where it comes from.
func (l *Limiter) effective(o *overrides, e *entry, team string) (int64, Source) {
	t, ok := o.threshold(team, l.cfg.Threshold)
	if ok {
		return t, SourceOverride
	}
	if l.adapt != nil {
		if ls := l.adapt.of(e); ls != nil {
			if lt := ls.thr.Load(); lt > 0 {
				return lt, SourceLearned
			}
		}
	}
	return t, SourceStatic
}

// ProfileTTL is how long a team's profile outlives its last fold in the store: a team
// silent for a week starts learning again. A gate's copy of a profile the store lost is
// written back only while younger than this (ApplyProfile).
const ProfileTTL = 7 * 24 * time.Hour

// ProfileWrite is a team's profile folded by this gate, for the tick to write to the store
// if the stored one is still at epoch Old (absent when !Exists).
type ProfileWrite struct {
	Team    string
	Old     int64
	Exists  bool
	Profile spike.Profile
}

// Adaptive returns the learner's configuration, or nil in static mode. The tick then
// fetches profiles for reads marked Read.Profile and hands them to ApplyProfile.
func (l *Limiter) Adaptive() *spike.Config {
	if l.adapt == nil {
		return nil
	}
	c := l.adapt.cfg
	return &c
}

// ApplyProfile applies the profile a read fetched (Read.Profile) for r's team: p as stored
// (found false: none), and count, the team's shared count of window r.Epoch−2 (Read.Fold).
// When the profile is due for a fold and r.Fold is set, this gate folds it and returns the
// write for the tick to send with its next pipeline. A profile not found that this gate
// still holds a copy of (the store lost it) is kept, and returned to be written back. The team's learned threshold is then
// that of the profile. Call it from the goroutine that sweeps, after ApplyRead.
func (l *Limiter) ApplyProfile(r *Read, p spike.Profile, found bool, count int64, now time.Time) (ProfileWrite, bool) {
	a := l.adapt
	if a == nil || r.e == nil {
		return ProfileWrite{}, false
	}
	// Under the shard's mutex: the learned state is keyed by entry, which a rebuild moves
	// under it.
	e := l.lockedEntry(r)
	defer r.sh.mu.Unlock()
	if e == nil {
		return ProfileWrite{}, false // the team left the cache since the sweep
	}
	ls := l.learnedFor(r.sh, e, r.Epoch)
	cur := r.Epoch
	f := cur - 2
	// restore: the store lost the profile (an eviction, a restart without persistence, a
	// failover) while this gate holds a copy younger than ProfileTTL. The copy is the
	// fleet's profile (or a fold past it): it is kept, folded if due, and written back
	// where none is, rather than the team starting over from nothing (the static threshold
	// for MinHistory). A copy older than ProfileTTL is a profile that expired: start over.
	restore := false
	old := p.Epoch // the stored profile's, for the compare-and-set
	ttl := int64(ProfileTTL) / l.windowNs
	young := ls.prof.Windows > 0 && cur-ls.prof.Epoch < ttl
	// foreign: the stored profile was learned over other windows. Its key is the team's
	// under the limiter's prefix, which a rule's first limit keeps when its window changes
	// (or its limits are reordered), and its Epoch counts that window's: one whose last
	// fold is a year or more from now, either way, in this limiter's windows, is no
	// profile of theirs (two adaptive windows, each dividing an hour, differ by 2% at
	// least: their epochs now, by a year and more). Read as one, a minute's volumes held
	// the team to them per hour. It is started over, as a renamed rule's is, and replaced
	// (the compare-and-set on its epoch) at the fold.
	//
	// skewed: a stored profile's last fold is further from now than a profile lives (the
	// store expires it a week after), by less than that: this gate's clock is off by a
	// week or more (a host booted before its time service set it), or the clock of the
	// gate that folded it last was. It is the team's profile, used as it is, and neither
	// folded nor replaced here: taken for another window's, a gate whose clock was off
	// wrote a fresh profile over every learned one it looked at (a review).
	year := int64(365*24*time.Hour) / l.windowNs
	foreign := found && (p.Epoch-cur >= year || cur-p.Epoch >= year)
	if found && !foreign && (p.Epoch-cur >= ttl || cur-p.Epoch >= ttl) {
		ls.prof, ls.next = p, cur+a.minPeriod
		l.setLearned(e, r.Team, ls, l.Epoch(now))
		return ProfileWrite{}, false
	}
	switch {
	case !found || foreign:
		p = spike.Profile{}
		if young {
			p, restore = ls.prof, true
		}
	case young && p.Windows < ls.prof.Windows && !a.cfg.Learned(&p) && a.cfg.Learned(&ls.prof):
		// Lost, and started over since by a gate that held no copy (one that met the team
		// after the loss, before this gate's look): a profile still being learned where this
		// gate's copy, with more history, is learned. The copy is kept and set over it,
		// or the team would be back on the static threshold for MinHistory.
		p, restore = ls.prof, true
	}
	var w ProfileWrite
	var write bool
	switch {
	case p.Windows > 0 && a.cfg.NextFold(&p, r.Team) > f:
		// Not due: someone folded it, or its period has not passed. A copy restored is
		// written back as it is.
		if restore {
			w, write = ProfileWrite{Team: r.Team, Old: old, Exists: found, Profile: p}, true
		}
	case !found && !restore && count == 0:
		// No history, and nothing two windows back (a team just met, or a fleet just
		// started): a profile started at 0 would take hours to learn the team. Look again
		// a fold period on. (Not sooner: a key met once, under a per-user adaptive rule
		// one per distinct_id a team mints, would leave a 7-day profile in Redis each. A
		// team sending in bursts shorter than the period has left the cache by then, and
		// is not learned: docs/design.md.)
		ls.next = cur + a.minPeriod
		l.setLearned(e, r.Team, ls, l.Epoch(now))
		return w, false
	case r.Fold:
		// Every gate looking folds (the same counts into the same profile: the same
		// result); about one or two of the fleet write it.
		w = ProfileWrite{Team: r.Team, Old: old, Exists: found}
		a.cfg.FoldScheduled(&p, f, float64(count))
		w.Profile, write = p, a.wantsFold(e, ls, f, count, r.prev) || restore
	default:
		// Due, without the count to fold: look again next window.
		ls.prof, ls.next = p, cur+1
		l.setLearned(e, r.Team, ls, l.Epoch(now))
		return w, false
	}
	ls.prof = p
	ls.next = a.cfg.NextFold(&p, r.Team) + 2
	l.setLearned(e, r.Team, ls, l.Epoch(now))
	return w, write
}

// RefuseProfile says the profile a read fetched for r's team (Read.Profile) could not be
// read: one of a newer schema, or corrupt. This gate does not fold it, keeps what it had
// learned, and looks at it again a fold period on, as at a team with no history, not at
// every sweep. Call it from the goroutine that sweeps, after ApplyRead.
func (l *Limiter) RefuseProfile(r *Read) {
	if l.adapt == nil || r.e == nil {
		return
	}
	e := l.lockedEntry(r)
	defer r.sh.mu.Unlock()
	if e == nil {
		return
	}
	l.learnedFor(r.sh, e, r.Epoch).next = r.Epoch + l.adapt.minPeriod
}

// learnedFor returns e's learned state, made if need be in epoch ep. A state made now knows
// this gate's counts from epoch ep+2 on: the sweep before it may have handed over counts
// of ep, and of ep+1 (timed just after its clock read). The caller holds sh.mu, sh being
// e's shard, and e is cached.
func (l *Limiter) learnedFor(sh *shard, e *entry, ep int64) *learned {
	if ls := l.adapt.of(e); ls != nil {
		return ls
	}
	ls := &learned{next: math.MinInt64, ownFrom: ep + 2}
	l.adapt.teams.Store(e, ls)
	if sh.learned == nil {
		sh.learned = make(map[*entry]*learned)
	}
	sh.learned[e] = ls
	return ls
}
