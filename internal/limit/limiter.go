package limit

import (
	"fmt"
	"hash/maphash"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/cpu"
)

// evictionSample is how many entries a full shard looks at to choose the least recently
// seen one to evict (sampled LRU, as Redis does): exact LRU would need a list touched
// under a lock on every check.
const evictionSample = 8

// evictionScan is how many entries a full shard looks at, at most, for one that may be
// evicted (evictOne).
const evictionScan = 64

// Decision is the answer to one check.
//
// Its flags are a struct of their own (verdict, whose fields read as Decision's) so that
// Decision has at most four fields: the compiler keeps a struct of up to four in registers,
// and one of five, built by a check in memory byte by byte, was copied out whole on
// return, a load the byte stores could not be forwarded to (about 10 of the 60 ns a check
// of a cached team took on AMD EPYC).
type Decision struct {
	verdict
	// Threshold is the team's limit per window (its override, or the default).
	Threshold int64
	// Level is the team's level the decision was made on, before this record counted.
	Level float64
}

type verdict struct {
	// Limited is true when the team's level had reached its threshold, or the team is
	// held in overflow (Held).
	Limited bool
	// Held is true when the team is held in overflow (Config.DivertHold): it is limited
	// whatever its level, until the tick releases it.
	Held bool
	// Tier is the team's pressure tier at this check.
	Tier Tier
	// Rotating is true when the key's team is rotating identities (cardinality.go) and the
	// limiter's OnCardinality is overflow (Limited too) or tag: the router sends it to
	// overflow or tags it, saying why.
	Rotating bool
}

// Limiter answers, for each record, whether its team is over its limit, from local state
// only. It is safe for concurrent use by any number of goroutines.
type Limiter struct {
	cfg       Config
	clock     clock.Clock
	seed      maphash.Seed
	shards    []shard
	mask      uint64
	holdsOn   bool // holds.on, beside the other words every check reads
	windowNs  int64
	invWindow float64          // 1 / windowNs: the check multiplies rather than divides
	base      int64            // unix ns; seen (index slots) counts seconds from here
	decisions []decisionStripe // checks answered, striped (see stripe)
	span      atomic.Pointer[epochSpan]
	// readFloor is how long a shared read's estimate is a floor under the level
	// (entry.level): the tick interval as the sweeps measure it, to 10 ms. Read by every
	// check, so it sits with the words they read and changes only when the interval does.
	readFloor atomic.Int64
	count     atomic.Int64 // cached teams, against Capacity
	overrides atomic.Pointer[overrides]
	ovrMu     sync.Mutex // serialises SetOverrides
	holds     *holds     // teams held in overflow (hold.go)
	adapt     *adaptive  // learned thresholds (adaptive.go); nil in static mode

	// Keys below the fleet floor (sketch.go): counted in sk, not cached. sk is nil when
	// every key is cached (Config.SketchWidth < 0, adaptive thresholds, the event clock).
	sk *sketch
	// skPrefetch: the sketch answered most checks since the last sweep, so a check has
	// the processor fetch the key's sketch lines before it looks the key up
	// (setSketchPrefetch).
	skPrefetch     atomic.Bool
	skSeen         [2]uint64    // checks and sketch answers at the last sweep; the sweep's alone
	fleetSize      atomic.Int64 // gates sharing the input, ≥ 1 (SetFleetSize)
	untrackedFloor atomic.Int64 // records of a key at the default threshold; 0: none untracked
	card           *cardinality // teams rotating identities (cardinality.go); nil without a bound
	// follow is the rotating teams of the rule's primary limit, for a further limit of the
	// rule (FollowRotation); nil otherwise.
	follow *cardinality

	// EventClock only (ring is nil otherwise): one cache per window, in a ring indexed by
	// epoch modulo its length, which covers every window MaxEventAge reaches, and what
	// tables already dropped had counted, for the metrics.
	ring     []atomic.Pointer[epochTable]
	ringMu   sync.Mutex // serialises creating and retiring tables
	maxAgeNs int64
	retired  retiredCounters

	// Figures from the last sweep, for the metrics.
	swept struct {
		tiers   [numTiers]atomic.Int64
		queued  atomic.Uint64 // reads planned, all sweeps
		expired atomic.Uint64 // entries expired idle, all sweeps
	}
	// lastSweep is the unix ns of the last Sweep (0: none yet), for ColdWriteInterval.
	// Only the tick's goroutine, which alone sweeps, reads and writes it.
	lastSweep int64
	// sweepGap is the time between the last two sweeps: the tick interval, as it runs.
	sweepGap int64
	// highEpoch is the latest epoch a check counted in or a sweep ran in (wall clock): an
	// unsent count whose tag reads later than the clock's epoch is one counted before the
	// clock stepped back when its epoch is no later than this, and otherwise one left
	// unswept for longer than the tag can tell (entry.addUnsent, unsentEpoch). Written
	// when a check's epoch span changes and by the sweep; read on those rare paths only.
	highEpoch atomic.Int64
	// afterViewEstimate, when set (by tests), runs in ApplyLocal between its stores of
	// the view's estimate and its read time, under the shard's mutex: where a check
	// racing the tick can find the entry.
	afterViewEstimate func()
}

// shard is one independently locked part of the cache. A check reads its index without
// the lock (index.go) and writes only its team's entry there, and rare counters on a line
// of their own, so that the lines every check reads stay shared between cores.
type shard struct {
	idx index
	_   [64 - unsafe.Sizeof(index{})%64]byte

	// Written by checks, rarely.
	displaced   atomic.Uint64 // stale counts overwritten in an entry (no sweep for a window)
	transitions [numTiers * numTiers]atomic.Uint32

	// Under mu: inserts, removals, rebuilds, sweeps, the tick's applies (Read).
	mu      sync.Mutex
	orphans []Count             // counts of entries evicted for capacity, for the next sweep
	learned map[*entry]*learned // adaptive mode: the shard's part of adaptive.teams
	misses  atomic.Uint64
	evicted atomic.Uint64
	// untracked: checks answered from the sketch; promoted: teams cached out of it with
	// counts; demoted: teams the sweep returned to it (sketch.go).
	untracked, promoted, demoted atomic.Uint64
	rotated                      atomic.Uint64 // checks of rotating teams' keys (cardinality.go)
	// overfull: inserts into a full cache that evicted nothing, every team looked at
	// being one that could be over its limit.
	overfull atomic.Uint64
	// carried: what promotions out of the sketch carried of each team, by window, for the
	// windows the sketch still holds (carry, carriedCounts); under mu.
	carried map[string]carriedCounts
	// expect: the teams Expect marked, not yet planned for a read; under mu.
	expect map[string]struct{}
	_      [64]byte // keep neighbouring shards' hot words off this shard's lines
}

// epochSpan caches the current epoch and its bounds, so a check finds its epoch with two
// comparisons instead of a 64-bit division.
type epochSpan struct{ epoch, start, end int64 }

type overrides struct {
	gen uint64
	m   map[string]int64
	// since is when each key's override appeared (unix ns; 0: at the limiter's start):
	// before it, the sketch may have counted the key (carry).
	since map[string]int64
}

// threshold is team's threshold under o: its override, or def; and whether it is an
// override.
func (o *overrides) threshold(team string, def int64) (int64, bool) {
	if t, ok := o.m[team]; ok {
		return t, true
	}
	return def, false
}

// initShard readies sh, a shard of the wall-clock cache or (event) of a window's.
func (l *Limiter) initShard(sh *shard, event bool) {
	sh.idx.init(l.seed, event)
	if l.adapt != nil {
		sh.idx.onMove = func(old, new *entry) { l.movedLearned(sh, old, new) }
	}
}

// New returns a Limiter. clk may be nil for the wall clock. reg may be nil; otherwise the
// limiter's metrics (gate_limiter_*) are registered on it.
func New(cfg Config, clk clock.Clock, reg prometheus.Registerer) (*Limiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real{}
	}
	// The seed in use is l.seed alone (InheritState may replace it): cfg keeps what was
	// asked for.
	seed := cfg.HashSeed
	if seed == (maphash.Seed{}) {
		seed = maphash.MakeSeed()
	}
	l := &Limiter{
		cfg:      cfg,
		clock:    clk,
		seed:     seed,
		shards:   make([]shard, cfg.Shards),
		mask:     uint64(cfg.Shards - 1),
		windowNs: cfg.Window.Nanoseconds(),
		base:     clk.Now().UnixNano(),
		// A separate allocation: its own lines, off the limiter's read-mostly words.
		decisions: make([]decisionStripe, decisionStripes),
	}
	l.invWindow = 1 / float64(l.windowNs)
	l.holds = newHolds(cfg)
	l.holdsOn = l.holds.on
	if cfg.Adaptive != nil {
		l.adapt = newAdaptive(*cfg.Adaptive)
	}
	// Not with learned thresholds, which learn from every key's shared counts, nor the
	// event clock, whose windows are cached apart.
	if cfg.SketchWidth > 0 && cfg.Adaptive == nil && cfg.Clock == WallClock {
		l.sk = newSketch(cfg.SketchWidth)
		l.sk.prepare(floorDiv(clk.Now().UnixNano(), cfg.Window.Nanoseconds()))
		if cfg.KeyCardinality > 0 {
			l.card = newCardinality(cfg.KeyCardinality, cfg.OnCardinality)
			l.card.teams.prepare(floorDiv(clk.Now().UnixNano(), cfg.Window.Nanoseconds()))
		}
	}
	l.fleetSize.Store(1)
	l.setFloor()
	for i := range l.shards {
		l.initShard(&l.shards[i], false)
	}
	since := make(map[string]int64, len(cfg.Overrides)) // all at the start: 0
	for k := range cfg.Overrides {
		since[k] = 0
	}
	l.overrides.Store(&overrides{gen: 1, m: maps.Clone(cfg.Overrides), since: since})
	if cfg.Clock == EventClock {
		l.maxAgeNs = cfg.MaxEventAge.Nanoseconds()
		// Windows a check may count in: MaxEventAge back, one ahead (future skew), one
		// for a clock read late, and spare so a table is never replaced while in use.
		l.ring = make([]atomic.Pointer[epochTable], (cfg.MaxEventAge+MaxFutureSkew)/cfg.Window+4)
	}
	if reg != nil {
		if err := reg.Register(newCollector(l)); err != nil {
			return nil, fmt.Errorf("registering limiter metrics: %w", err)
		}
	}
	return l, nil
}

// Config returns the limiter's configuration with defaults filled in.
func (l *Limiter) Config() Config { return l.cfg }

// Clock returns the limiter's clock.
func (l *Limiter) Clock() clock.Clock { return l.clock }

// Check counts n records for team at the current time and says whether the team is
// limited. It does no I/O and, for a cached team, allocates nothing.
func (l *Limiter) Check(team string, n int64) Decision {
	return l.CheckAt(l.clock.Now(), team, n)
}

// CheckAt is Check at a time the caller read, so a worker routing a batch of records can
// read the clock once per batch.
func (l *Limiter) CheckAt(now time.Time, team string, n int64) Decision {
	return l.check(now, team, maphash.String(l.seed, team), n, nil)
}

// CheckTally is CheckAt counting its decision in t, which the calling goroutine owns, rather
// than in the limiter's counters: a worker routing a batch adds its tally to them once a
// batch (AddTally), sparing every check a locked add (tally.go).
func (l *Limiter) CheckTally(now time.Time, team string, n int64, t *Tally) Decision {
	return l.check(now, team, maphash.String(l.seed, team), n, t)
}

// CheckTallyHashed is CheckTally of team whose hash h the caller made already, with
// maphash.String(l.Seed(), team): a router that hashed a record's team for its outcome row
// (outcome.Agg.Touch, of the same seed) spares the check its own.
func (l *Limiter) CheckTallyHashed(now time.Time, team string, h uint64, n int64, t *Tally) Decision {
	return l.check(now, team, h, n, t)
}

// Seed returns the seed of the hash keys are looked up by (Config.HashSeed).
func (l *Limiter) Seed() maphash.Seed { return l.seed }

// check is CheckTally, counting in the limiter's counters when tally is nil (CheckAt). The
// wrappers only pass its result on: one that kept the Decision to count it after the call
// had the compiler store it in byte-sized parts and load it back whole, a store the load
// cannot be forwarded from, which cost more than a check's lookup (15 ns on AMD EPYC).
func (l *Limiter) check(now time.Time, team string, h uint64, n int64, tally *Tally) Decision {
	ns := now.UnixNano()
	// More than any threshold counts as any threshold: a count of 2^47 would reach the
	// unsent word's moved bit, and a sketch's count plus a cost near 2^63 overflowed, read
	// as under the key's floor (clamped only where the entry counted it, a key under its
	// floor was admitted, and its sketch counters lost a record). A negative cost counts
	// nothing, as an entry takes only n > 0: the sketch's 32-bit counters took −1 as
	// 2^32 − 1 records.
	n = min(max(n, 0), MaxThreshold)
	if l.skPrefetch.Load() && !l.collapsedKey(team) {
		// The lookup and the sketch's lines then miss the caches together, not one
		// after the other. The window from the span, as checkUntracked has it: a
		// division costs more than the prefetches. Not for a rotating team's collapsed
		// key, checked from checkUntracked for each of the team's keys: always cached, it
		// would fetch four lines for nothing.
		sp := l.span.Load()
		if sp == nil || ns < sp.start || ns >= sp.end {
			sp = l.spanAt(ns)
		}
		l.sk.prefetch(h, sp.epoch)
	}
	sh := &l.shards[h&l.mask]
	t := sh.idx.tab.Load()
	e, st := t.lookup(h, team)
	if e == nil {
		if l.sk != nil {
			if d, ok := l.checkUntracked(ns, h, team, n, tally); ok {
				return d
			}
		}
		e = l.insert(h, team, ns)
	} else if sn := l.seenAt(ns); st&seenMask != sn {
		l.touch(sh, t, e, st, sn, h, team)
	}

	thr, tw := l.thresholdWord(e, team)
	for tw&movedBit != 0 { // moved or removed since the lookup: the insert waits out a rebuild
		e = l.insert(h, team, ns)
		thr, tw = l.thresholdWord(e, team)
	}
	fthr := float64(thr)
	lvl := e.level(ns, l.readFloor.Load())
	d := Decision{verdict: verdict{Limited: lvl >= fthr, Tier: tierOfLevel(lvl, fthr)}, Threshold: thr, Level: lvl}
	// A held team is limited whatever its level; one reaching its threshold now is held
	// (below, with the tier, in one CAS). Both only read the word already loaded.
	// The level is read again before a hold starts: a read being applied stores the new
	// estimate an instant before it takes what it includes out of pending, and a check in
	// that instant sees those records twice (each as 1 / share of the fleet's), harmless
	// for one record's decision but not for a hold that lasts a window, fleet-wide.
	hold := d.Limited && l.holdsOn && tw&heldBit == 0 && e.level(ns, l.readFloor.Load()) >= fthr
	if tw&heldBit != 0 || hold {
		d.Limited, d.Held = true, true
	}
	if n > 0 && (!d.Limited || l.cfg.Mode == Divert) {
		sp := l.span.Load()
		if sp == nil || ns < sp.start || ns >= sp.end {
			sp = l.spanAt(ns)
		}
		if lost, moved := e.addUnsent(sp.epoch, n, &l.highEpoch); moved {
			l.recount(h, team, ns, sp.epoch, n)
		} else if lost > 0 {
			sh.displaced.Add(uint64(lost))
		}
	}
	if tally != nil {
		tally.count(d.Limited)
	} else {
		l.stripe().count(d.Limited)
	}
	if old := Tier(tw >> tierShift & tierMask); old != d.Tier || hold {
		if markWord(sh, e, tw, old, d.Tier, hold) {
			l.holdMoved(h, team, ns)
		}
	}
	return d
}

// recount adds n records of epoch for team, whose entry was moved or removed as a check
// counted them, to its current entry. Out of line: it only happens when a check races a
// rebuild or a removal of its shard.
func (l *Limiter) recount(h uint64, team string, ns, epoch, n int64) {
	for {
		e := l.insert(h, team, ns)
		lost, moved := e.addUnsent(epoch, n, &l.highEpoch)
		if !moved {
			if lost > 0 {
				l.shards[h&l.mask].displaced.Add(uint64(lost))
			}
			return
		}
	}
}

// holdMoved holds team, whose entry was moved or removed as a check held it, in its
// current entry.
func (l *Limiter) holdMoved(h uint64, team string, ns int64) {
	for {
		if _, moved := setHeld(l.insert(h, team, ns)); !moved {
			return
		}
	}
}

// markWord records in e's thr word, last read as tw, the tier a check found (new, the
// word holding old) and, if hold, that the team is now held. Out of line: a check rarely
// changes either. It reports whether the hold is yet to be set, e having been moved or
// removed meanwhile (a tier alone is left: the team's next check marks it).
func markWord(sh *shard, e *entry, tw uint64, old, new Tier, hold bool) (moved bool) {
	nw := tw&^(tierMask<<tierShift) | uint64(new)<<tierShift
	if hold {
		nw |= heldBit
	}
	if e.thr.CompareAndSwap(tw, nw) {
		if old != new {
			sh.transitions[old*numTiers+new].Add(1)
		}
		return false
	}
	if hold {
		_, moved = setHeld(e) // raced with another check or an override swap: the hold must stick
	}
	return moved
}

// touch records in e, team's entry in table t whose state word read st, that the team was
// seen at sn. When the shard publishes a new table meanwhile, the entry in the new one is
// updated too, so the update is not lost to the copy.
func (l *Limiter) touch(sh *shard, t *table, e *entry, st, sn uint32, h uint64, team string) {
	for e.state.CompareAndSwap(st, st&^seenMask|sn) {
		nt := sh.idx.tab.Load()
		if nt == t {
			return
		}
		t = nt
		if e, st = t.lookup(h, team); e == nil || st&seenMask == sn {
			return
		}
	}
}

// spanAt returns the epoch span holding ns, and makes it the cached one.
func (l *Limiter) spanAt(ns int64) *epochSpan {
	ep := floorDiv(ns, l.windowNs)
	sp := &epochSpan{epoch: ep, start: ep * l.windowNs, end: (ep + 1) * l.windowNs}
	raiseTo(&l.highEpoch, ep)
	l.span.Store(sp)
	return sp
}

// raiseTo raises a to v if it is lower.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// insert adds team to its shard of the wall-clock cache (see insertIn).
func (l *Limiter) insert(h uint64, team string, ns int64) *entry {
	return l.insertIn(l.shards, nil, h, team, ns)
}

// insertIn adds team to its shard of shards: the wall-clock cache, or under EventClock
// the cache of window tbl (nil otherwise). When the cache is full it first evicts the
// least recently seen of a sample of the shard's teams; the evicted team's unsent counts
// go to the shard's orphans, so the next sweep still writes them. It returns nil when tbl
// was retired meanwhile: the caller looks its window up again.
func (l *Limiter) insertIn(shards []shard, tbl *epochTable, h uint64, team string, ns int64) *entry {
	sh := &shards[h&l.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if tbl != nil && tbl.dead.Load() {
		return nil // retired (empty) under this lock: an entry added now would never be swept
	}
	if e, _ := sh.idx.tab.Load().lookup(h, team); e != nil {
		return e
	}
	sh.misses.Add(1)
	return l.insertLocked(shards, tbl, h, team, ns)
}

// insertLocked is insertIn's insert of team, not cached, into its shard of shards, whose
// mutex the caller holds.
func (l *Limiter) insertLocked(shards []shard, tbl *epochTable, h uint64, team string, ns int64) *entry {
	idx := h & l.mask
	sh := &shards[idx]
	// Capacity bounds each window's cache under EventClock: a new window fills while the
	// last one's entries are still cached, and must not evict its own.
	n := l.count.Add(1)
	if tbl != nil {
		n = tbl.count.Add(1)
	}
	if n > int64(l.cfg.Capacity) {
		if sh.idx.len() > 0 {
			l.evictOne(sh, tbl, ns)
		} else {
			// This shard is empty: evict from another. TryLock only, as we hold a shard
			// lock: waiting could deadlock with an insert doing the same the other way.
			for i := 1; i < len(shards); i++ {
				other := &shards[(idx+uint64(i))&l.mask]
				if other.mu.TryLock() {
					if other.idx.len() > 0 {
						l.evictOne(other, tbl, ns)
						other.mu.Unlock()
						break
					}
					other.mu.Unlock()
				}
			}
		}
	}
	// reserve copies the team (a long one into the table's arena): its bytes may alias a
	// reused buffer (a record's).
	e := sh.idx.reserve(h, team)
	if tbl != nil {
		l.seedPrev(e, tbl.epoch, h, team)
	}
	if l.sk != nil {
		l.carry(sh, e, h, team, ns)
	}
	sh.idx.publish(e, l.seenAt(ns))
	return e
}

// evictOne removes the least recently seen of a sample of sh's teams. The caller holds
// sh.mu. The evicted team's unsent counts go to sh's orphans, for the next sweep. tbl is
// the window sh belongs to under EventClock, nil otherwise.
func (l *Limiter) evictOne(sh *shard, tbl *epochTable, ns int64) {
	var victim *entry
	var vteam string
	var vseen uint32
	var vlvl float64
	i := 0
	sh.idx.all(func(seen uint32, e *entry, team string) bool { // from a random slot: a random sample
		i++
		// A team that could be over its limit is never evicted: at half its threshold or
		// more, or held. Evicted, it would start again from nothing.
		var lvl float64
		if tbl != nil {
			// A window's entry of the event clock: the highest level a check in the
			// window can find, its count and the whole of the window before's (a check
			// weighs that by its record's own progress through the window, which a
			// lagging partition or a replay holds near its start, whatever the wall clock).
			lvl = e.evLevel(0)
		} else {
			lvl = e.level(ns, l.readFloor.Load())
		}
		if e.thr.Load()&heldBit != 0 || lvl >= tierNormal*float64(l.threshold(e, team)) {
			return i < evictionScan
		}
		// A key Expect marked waits for its read (a takeover's backlog): uncounted and
		// seen now, it was the first choice among the keys of its second, its read lost.
		if len(sh.expect) > 0 {
			if _, ok := sh.expect[team]; ok {
				return i < evictionScan
			}
		}
		// The least recently seen, and of keys seen in the same second the lowest: a
		// cache smaller than a second's keys saw them all at once, and a victim chosen by
		// where the sample began took a team at 3 × its limit with its level every few
		// records, its level never reaching half its threshold to protect it
		// (TestCapacityKeepsTheHotKeyOfASecond).
		if victim == nil || seen < vseen || seen == vseen && lvl < vlvl {
			victim, vteam, vseen, vlvl = e, team, seen, lvl
		}
		return i < evictionScan && (i < evictionSample || victim == nil)
	})
	if victim == nil {
		// Every team looked at could be over its limit: the cache grows past its capacity
		// rather than forget one. Such teams each hold half a threshold of the window's
		// records at least, so there are no more than 2 × records a window ÷ threshold.
		sh.overfull.Add(1)
		return
	}
	unsent := sh.idx.remove(victim)
	l.count.Add(-1)
	sh.evicted.Add(1)
	if l.adapt != nil {
		l.forgetLearned(sh, victim, vteam, ns, nil)
	}
	if tbl != nil {
		tbl.count.Add(-1)
		if n := int64(unsent[0]); n > 0 { // the event clock's count, as marked
			sh.orphans = append(sh.orphans, Count{Team: vteam, Epoch: tbl.epoch, N: n})
		}
		return
	}
	var stale int64
	sh.orphans, stale = removedCounts(sh.orphans, vteam, floorDiv(ns, l.windowNs), &l.highEpoch, unsent)
	sh.displaced.Add(uint64(stale))
}

// seenAt converts unix ns to the coarse seconds kept in index slots.
// It stops at the state word's room for it (17 years): a gate running longer sees every
// team as seen then, and expires none for being idle.
func (l *Limiter) seenAt(ns int64) uint32 {
	if ns <= l.base {
		return 0
	}
	return uint32(min((ns-l.base)/int64(time.Second), seenMask))
}

// threshold returns e's threshold, team's, under the current overrides, refreshing e's
// cached copy when the overrides changed since it was taken.
func (l *Limiter) threshold(e *entry, team string) int64 {
	t, _ := l.thresholdWord(e, team)
	return t
}

// thresholdWord is threshold, and e's thr word holding it: with movedBit set when e was
// moved or removed, the threshold then being computed afresh.
func (l *Limiter) thresholdWord(e *entry, team string) (int64, uint64) {
	o := l.overrides.Load()
	v := e.thr.Load()
	if v>>genShift == o.gen {
		return int64(v & thresholdMask), v
	}
	return l.refreshThreshold(e, team, o)
}

// refreshThreshold stores e's threshold under overrides o's generation. The learned
// threshold is read again once it is stored: the tick's change of it (setLearned) landing
// between the read and the store found the word of the old generation and left it to
// this refresh (storeThreshold), which stored the value from before the change under the
// new generation, where no later check looked again (a review: a team learned at the
// floor checked at the static threshold until its learned value or the overrides next
// changed).
func (l *Limiter) refreshThreshold(e *entry, team string, o *overrides) (int64, uint64) {
	t, _ := l.effective(o, e, team) // override, learned, default
	for {
		v := e.thr.Load()
		if v&movedBit != 0 {
			return t, v // a copy no longer read
		}
		nv := o.gen<<genShift | v&(tierMask<<tierShift|heldBit) | uint64(t) // keeps the tier and hold
		if v != nv && !e.thr.CompareAndSwap(v, nv) {
			continue
		}
		t2, _ := l.effective(o, e, team)
		if t2 == t || l.overrides.Load() != o {
			// Unchanged; or a newer set, whose checks refresh the word again.
			return t2, nv
		}
		t = t2
	}
}

// SetOverrides replaces every per-team threshold at once. Checks after it returns use the
// new set; a check running during the swap uses one set or the other. A nil or empty map
// clears the overrides. An invalid threshold rejects the whole set and keeps the old one.
func (l *Limiter) SetOverrides(m map[string]int64) error {
	for team, t := range m {
		if err := checkThreshold(t); err != nil {
			return fmt.Errorf("setting override for team %q: %w", team, err)
		}
	}
	l.ovrMu.Lock()
	defer l.ovrMu.Unlock()
	gen := l.overrides.Load().gen + 1
	if gen > genMask {
		// The generation wraps: clear every cached threshold so that none taken under an
		// old generation of the same number is ever believed current. Once per 2^17 − 1 swaps.
		gen = 1 // 0 never matches: a new entry's thr word is 0
		clearThresholds(l.shards)
		// Under EventClock the entries are in the windows' tables, not in l.shards: each
		// table in the ring, under ringMu so none is made or dropped meanwhile (one made
		// after starts with thr words of 0).
		l.ringMu.Lock()
		for i := range l.ring {
			if tbl := l.ring[i].Load(); tbl != nil && !tbl.dead.Load() {
				clearThresholds(tbl.shards)
			}
		}
		l.ringMu.Unlock()
	}
	old := l.overrides.Load()
	since := make(map[string]int64, len(m))
	now := l.clock.Now().UnixNano()
	for k := range m {
		t, ok := old.since[k]
		if !ok {
			t = now
		}
		since[k] = t
	}
	l.overrides.Store(&overrides{gen: gen, m: maps.Clone(m), since: since})
	return nil
}

// clearThresholds clears the cached threshold and generation of every entry of shards,
// keeping its tier and hold: its next use computes the threshold afresh.
func clearThresholds(shards []shard) {
	for i := range shards {
		sh := &shards[i]
		sh.mu.Lock()
		sh.idx.all(func(_ uint32, e *entry, _ string) bool {
			for v := e.thr.Load(); !e.thr.CompareAndSwap(v, v&(tierMask<<tierShift|heldBit)); v = e.thr.Load() {
			} // keeps the tier and hold
			return true
		})
		sh.mu.Unlock()
	}
}

// Overrides returns a copy of the current per-team thresholds.
func (l *Limiter) Overrides() map[string]int64 { return maps.Clone(l.overrides.Load().m) }

// Threshold returns team's threshold: its override, else (Config.Adaptive) its learned
// threshold while it is cached here, else the default.
func (l *Limiter) Threshold(team string) int64 {
	t, _ := l.ThresholdOf(team)
	return t
}

// ThresholdOf is Threshold with where it comes from: team's override, its learned
// threshold, or the default. A lookup, for a caller's cold path (an outcome row's first
// record), never a check's.
func (l *Limiter) ThresholdOf(team string) (int64, Source) {
	o := l.overrides.Load()
	if t, ok := o.threshold(team, l.cfg.Threshold); ok {
		return t, SourceOverride
	}
	if l.adapt != nil {
		h := maphash.String(l.seed, team)
		if e, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, team); e != nil {
			return l.effective(o, e, team)
		}
	}
	return l.cfg.Threshold, SourceStatic
}

// Epoch returns the epoch that t falls in: floor(unix time / window).
func (l *Limiter) Epoch(t time.Time) int64 { return floorDiv(t.UnixNano(), l.windowNs) }

// Len returns how many teams are cached.
func (l *Limiter) Len() int { return int(l.count.Load()) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Expect marks key for a read at the next sweep whatever its level (ReadPrimed; a team
// never read is otherwise read only once its own count reaches the sync floor), putting
// it in the cache, uncounted, if it is not there: a gate that takes partitions over with
// records waiting has their keys read before it routes them (the tick's TickNow), so that
// a team the fleet holds or has over its limit is not admitted, up to its whole
// threshold, by this gate's own count of the backlog. A key cached already is marked too
// (never read, or read at a level the fleet has since left behind: a gate taking over a
// dead peer's partitions had met the team on its own), unless a read of it was applied
// within the last tick interval. It reports whether it marked key. Until its read is
// planned, the sweep does not demote the key to the sketch nor the capacity evict it. It changes no count, and an
// insert here is no cache miss. Not under the event clock, whose reads are by each
// record's window (nothing is done).
func (l *Limiter) Expect(now time.Time, key string) bool {
	if l.ring != nil {
		return false
	}
	ns := now.UnixNano()
	h := maphash.String(l.seed, key)
	sh := &l.shards[h&l.mask]
	// Under the mutex, insert and mark: a sweep between them would find the key unmarked
	// and could demote it, its mark then lost.
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, _ := sh.idx.tab.Load().lookup(h, key); e == nil {
		l.insertLocked(l.shards, nil, h, key, ns)
	} else if at := e.readAt.Load(); at != 0 && at&readLocal == 0 && ns-readTime(at) < max(l.readFloor.Load(), 0) {
		return false // read within the last tick: the fleet's count as of then
	}
	if sh.expect == nil {
		sh.expect = map[string]struct{}{}
	}
	sh.expect[strings.Clone(key)] = struct{}{} // by name, as the sweep finds it; key may alias a record's buffer
	return true
}

// prefetchKeys is how many cached keys a limiter holds before Prefetch fetches anything:
// fewer, and their slots (64 bytes each, a table ½ to ¾ full) fit in a core's own cache
// (1 MiB of L2 on the machines measured), where a check finds its line anyway and a
// prefetch would only cost the key's hash.
const prefetchKeys = 1 << 14

// Prefetch has the processor fetch the slot where a check of key looks first, without
// waiting for it, when the limiter caches enough keys that the slot is likely to be out
// of the core's caches (prefetchKeys); otherwise it does nothing. The router calls it for
// a later rule's key before an earlier rule's check, so that the two checks wait for
// memory together rather than one after the other (a per-user rule before a team rule,
// each missing the caches under a fleet's key count). It changes nothing a check
// decides or counts. Not under the event clock, whose cache is a table a window.
func (l *Limiter) Prefetch(key string) {
	if l.count.Load() < prefetchKeys || l.ring != nil {
		return
	}
	l.PrefetchHashed(maphash.String(l.seed, key))
}

// PrefetchHashed is Prefetch of a key whose hash (by Seed) the caller has: for the
// router's one JSON reader, which hashes its key as soon as it finds it, well before the
// check (route's touchAhead), whatever the count of keys: the hash, Prefetch's cost, is
// paid for the check anyway, and the slot's line then comes while the rest of the value
// is read. It changes nothing a check decides or counts.
func (l *Limiter) PrefetchHashed(h uint64) {
	if l.ring != nil {
		return
	}
	t := l.shards[h&l.mask].idx.tab.Load()
	cpu.Prefetch(unsafe.Pointer(&t.ents[t.start(h)]))
}
