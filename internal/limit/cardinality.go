package limit

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Identity rotation: a team whose keys under a composite-key limit are fresh on every
// record (a new distinct_id per event, PostHog #83004) is detected, and then counted as
// one key, or its records flagged for the rule's router (Config.OnCardinality).
//
// A key's team is its first part: a composite key's fields are joined with ':' and a
// field's own ':' is escaped (keypart.Append), so the team is what precedes the first
// ':'. Detection is in two stages, so that a check of an ordinary team pays one hash in
// eight of its records under the floor and nothing else:
//
//  1. Candidates. One record in eight under the floor (by its key's hash) adds 8 to its
//     team's count in a sketch of teams per window (sketch.go's, a small one). A team
//     whose count reaches half the bound, with as many records as that at least, becomes
//     a candidate: it could have that many keys. There are at most 2 × the window's
//     records under the floor ÷ the bound of them.
//  2. Distinct keys. Every record under the floor of a candidate updates the candidate's
//     HyperLogLog of its keys for the window (Flajolet et al. 2007; 256 one-byte registers,
//     a standard error of 6.5%). A sweep finding more distinct keys than the bound marks
//     the team rotating, logged and counted once; it stays so until a window ends under
//     the bound. Keys met before the team became a candidate are not in the estimate: a
//     team with 1.5 × the bound keys in a window is detected in it, one with fewer (but
//     more than the bound) in the next window, by 2.5 × the bound keys and two windows
//     (TestRotationFoundWithinTwoWindows).
//
// While a team is rotating, a record of a key of it that is not cached is checked as the team's
// collapsed key, the team followed by ':' (no key a record makes can end so: an empty
// field is missing), at the limiter's threshold: the team is limited as one user would be
// (CardinalityCollapse). Or the check answers limited without counting, flagged Rotating,
// for the router to overflow or tag it. Each record its mode counts is counted as its
// key's own in the sketch too (never promoting it while the team rotates), so that when
// the rotation ends a key's sliding window holds what it sent meanwhile; through a Tally,
// eight of the team's records late, when the key's lines have come from memory, and all
// by AddTally, which a router calls once a batch (to the key's entry instead if the
// rotation ended and another goroutine's check promoted the key meanwhile). Its cached keys,
// those that reached their floor before, are checked as they are; no other key of it is
// promoted while it rotates.

// CardinalityAction is what becomes of a rotating team's records (Config.OnCardinality).
type CardinalityAction uint8

const (
	// CardinalityCollapse counts the team's keys under the floor as one key. The default.
	CardinalityCollapse CardinalityAction = iota
	// CardinalityOverflow answers their checks limited and Rotating: the router sends
	// them to overflow.
	CardinalityOverflow
	// CardinalityTag answers them Rotating, not limited: the router tags them.
	CardinalityTag
)

func (a CardinalityAction) String() string {
	switch a {
	case CardinalityCollapse:
		return "collapse"
	case CardinalityOverflow:
		return "overflow"
	case CardinalityTag:
		return "tag"
	}
	return fmt.Sprintf("CardinalityAction(%d)", uint8(a))
}

// ParseCardinalityAction reads collapse, overflow or tag.
func ParseCardinalityAction(s string) (CardinalityAction, error) {
	switch s {
	case "collapse", "":
		return CardinalityCollapse, nil
	case "overflow":
		return CardinalityOverflow, nil
	case "tag":
		return CardinalityTag, nil
	}
	return 0, fmt.Errorf("%w: on_cardinality %q (want collapse, overflow or tag)", ErrBadConfig, s)
}

// DefaultKeyCardinality is the keys a team may have in a window under a composite-key
// limit before it is taken to be rotating identities (config.RuleLimitConfigs): far more
// users a minute than any team of a per-user rule's usual traffic has, far fewer than a
// team minting a key per event at a few thousand events a second.
const DefaultKeyCardinality = 100_000

// cardSample: one record in cardSample under the floor counts toward its team's
// candidacy, by its key's hash.
const cardSample = 8

const hllRegs = 256

type cardinality struct {
	bound  int64
	action CardinalityAction
	teams  *sketch // records under the floor by team, sampled (cardSample)

	mu    sync.Mutex              // nominations and the sweep's changes to cands
	cands atomic.Pointer[candSet] // nil while there is none (candidates.go)

	detected atomic.Uint64 // teams found rotating
}

// rotation is one candidate team.
type rotation struct {
	team      string
	h         uint64 // the team's hash
	collapsed string // team + ":"
	regs      [2]hll // by epoch parity
	rotating  atomic.Bool
	since     atomic.Int64 // unix ns, when it was found rotating
	distinct  atomic.Int64 // the last estimate of the current window's keys
	lastSeen  int64        // the last epoch the sweep found it at half the bound or more
}

// hll is a window's HyperLogLog of a team's keys: 256 one-byte registers, four a word.
type hll struct {
	epoch atomic.Int64
	w     [hllRegs / 4]atomic.Uint32
}

func (x *hll) add(h uint64) {
	reg := h >> 56
	rank := uint32(bits.LeadingZeros64(h<<8|1<<7) + 1)
	w := &x.w[reg/4]
	shift := 8 * (reg % 4)
	for {
		v := w.Load()
		if v>>shift&0xff >= rank {
			return
		}
		if w.CompareAndSwap(v, v&^(0xff<<shift)|rank<<shift) {
			return
		}
	}
}

func (x *hll) clear(epoch int64) {
	x.epoch.Store(noEpoch)
	for i := range x.w {
		x.w[i].Store(0)
	}
	x.epoch.Store(epoch)
}

// merge adds y's keys to x's: the union's registers are each the larger of the two. x
// must not be shared yet (a load and a store, not a compare-and-swap).
func (x *hll) merge(y *hll) {
	for i := range x.w {
		a, b := x.w[i].Load(), y.w[i].Load()
		var v uint32
		for k := 0; k < 32; k += 8 {
			v |= max(a>>k&0xff, b>>k&0xff) << k
		}
		x.w[i].Store(v)
	}
}

// estimate is the HyperLogLog estimate of the keys added, with the small-range
// correction (linear counting while registers are still empty).
func (x *hll) estimate() int64 {
	var sum float64
	zeros := 0
	for i := range x.w {
		v := x.w[i].Load()
		for k := range 4 {
			r := v >> (8 * k) & 0xff
			sum += math.Ldexp(1, -int(r))
			if r == 0 {
				zeros++
			}
		}
	}
	const m = hllRegs
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(float64(m)/float64(zeros))
	}
	return int64(e)
}

func newCardinality(bound int64, action CardinalityAction) *cardinality {
	return &cardinality{bound: bound, action: action, teams: newSketch(1 << 12)}
}

// teamOf is key's team: the part before its first ':', or the whole key.
func teamOf(key string) string {
	if i := strings.IndexByte(key, ':'); i >= 0 {
		return key[:i]
	}
	return key
}

// collapsedKey reports whether key is a rotating team's collapsed key (ending in ':',
// which no key a record makes does): always cached, checked without the sketch.
func (l *Limiter) collapsedKey(key string) bool {
	return l.card != nil && key != "" && key[len(key)-1] == ':'
}

// observe counts a record of key (hash h, under the floor in epoch ep) toward its team's
// candidacy and keys, and returns the team's rotation when it is rotating.
func (l *Limiter) observe(key string, h uint64, ep int64) *rotation {
	cd := l.card
	cands := cd.cands.Load()
	if cands == nil && h%cardSample != 0 {
		return nil
	}
	var r *rotation
	var team string
	var th uint64
	hashed := false
	if cands != nil {
		r, team, th, hashed = cands.of(key)
	}
	if r != nil {
		if x := &r.regs[ep&1]; x.epoch.Load() == ep {
			x.add(h)
		}
		if r.rotating.Load() {
			return r
		}
		return nil
	}
	if h%cardSample != 0 {
		return nil
	}
	if !hashed {
		team = teamOf(key)
		th = maphash.String(l.seed, team)
	}
	sl := cd.teams.slot(ep)
	if sl == nil {
		return nil
	}
	c := cd.teams.cells(th)
	sl.add(c, cardSample)
	if sl.estimate(c) >= cd.bound/2 {
		l.nominate(team, th, ep)
	}
	return nil
}

// nominate makes team a candidate, unless it is one already. Out of line and locked: a
// team is nominated once a window at most.
func (l *Limiter) nominate(team string, th uint64, ep int64) {
	cd := l.card
	cd.mu.Lock()
	defer cd.mu.Unlock()
	cs := cd.cands.Load()
	if cs != nil && cs.team(team, th) != nil {
		return
	}
	t := strings.Clone(team) // the key may alias a record's buffer
	r := &rotation{team: t, h: th, collapsed: t + ":", lastSeen: ep}
	r.regs[0].epoch.Store(noEpoch)
	r.regs[1].epoch.Store(noEpoch)
	r.regs[ep&1].clear(ep)
	cd.cands.Store(cs.with(r, l.seed))
}

// rotatingCheck answers a check at unix ns ns of a key under the floor of rotating team r.
func (l *Limiter) rotatingCheck(ns int64, h uint64, r *rotation, n int64, tally *Tally) Decision {
	if tally != nil {
		tally.rotated++
	} else {
		l.shards[h&l.mask].rotated.Add(1) // on the key's shard: a rotating team's records are many, on every core
	}
	switch l.card.action {
	case CardinalityCollapse:
		return l.check(time.Unix(0, ns), r.collapsed, maphash.String(l.seed, r.collapsed), n, tally)
	case CardinalityOverflow:
		if tally != nil {
			tally.count(true)
		} else {
			l.stripe().count(true)
		}
		return Decision{Threshold: l.cfg.Threshold, verdict: verdict{Limited: true, Rotating: true}}
	}
	if tally != nil {
		tally.count(false)
	} else {
		l.stripe().count(false)
	}
	return Decision{Threshold: l.cfg.Threshold, verdict: verdict{Rotating: true}}
}

// RotatingTeam is a team found rotating identities under this limiter.
type RotatingTeam struct {
	Team string
	// Keys is the estimate of its distinct keys in the current window.
	Keys   int64
	Since  time.Time
	Action CardinalityAction
}

// RotationEvent is a team that started or stopped rotating, for the tick to log.
type RotationEvent struct {
	RotatingTeam
	Started bool
}

// sweepCardinality readies the windows' registers, estimates each candidate's keys, marks
// and releases rotating teams and drops candidates that no longer are. The sweep's
// goroutine only.
func (l *Limiter) sweepCardinality(ns, cur int64, into *Sweep) {
	cd := l.card
	cd.teams.prepare(cur)
	p := cd.cands.Load()
	if p == nil {
		return
	}
	cd.mu.Lock()
	defer cd.mu.Unlock()
	p = cd.cands.Load()
	keep := make([]*rotation, 0, len(p.list))
	for _, r := range p.list {
		x := &r.regs[cur&1]
		if x.epoch.Load() != cur {
			// A window ended: the team stays a candidate while that window had half the
			// bound of keys or more, rotating while it had more than the bound.
			if prev := &r.regs[(cur-1)&1]; prev.epoch.Load() == cur-1 {
				est := prev.estimate()
				if est >= cd.bound/2 {
					r.lastSeen = cur - 1
				}
				if r.rotating.Load() && est <= cd.bound {
					r.rotating.Store(false)
					into.Rotations = append(into.Rotations, RotationEvent{RotatingTeam{Team: r.team, Keys: est, Since: time.Unix(0, r.since.Load()), Action: cd.action}, false})
				} else if est > cd.bound && !r.rotating.Load() {
					// Over the bound by keys met after the window's last sweep.
					l.startRotation(r, ns, est, into)
				}
			}
			x.clear(cur)
		}
		est := x.estimate()
		r.distinct.Store(est)
		if est > cd.bound && !r.rotating.Load() {
			l.startRotation(r, ns, est, into)
		}
		if r.rotating.Load() || r.lastSeen >= cur-1 {
			keep = append(keep, r)
		}
	}
	switch {
	case len(keep) == 0:
		cd.cands.Store(nil)
	case len(keep) < len(p.list):
		cd.cands.Store(newCandSet(keep, l.seed))
	}
}

// startRotation marks r rotating from unix ns ns, found with est keys in a window, and
// counts and reports it. The sweep's goroutine only.
func (l *Limiter) startRotation(r *rotation, ns, est int64, into *Sweep) {
	r.since.Store(ns)
	r.rotating.Store(true)
	l.card.detected.Add(1)
	into.Rotations = append(into.Rotations, RotationEvent{RotatingTeam{Team: r.team, Keys: est, Since: time.Unix(0, ns), Action: l.card.action}, true})
}

// Rotating lists the teams rotating identities under this limiter now.
func (l *Limiter) Rotating() []RotatingTeam {
	if l.card == nil {
		return nil
	}
	p := l.card.cands.Load()
	if p == nil {
		return nil
	}
	var out []RotatingTeam
	for _, r := range p.list {
		if r.rotating.Load() {
			out = append(out, RotatingTeam{Team: r.team, Keys: r.distinct.Load(), Since: time.Unix(0, r.since.Load()), Action: l.card.action})
		}
	}
	return out
}

// FollowRotation has l, a further limit of a rule whose primary limit (the one that finds
// teams rotating identities) is primary, keep a key of a team primary finds rotating in
// its sketch while the key is not cached, even when l has no floor (a small threshold
// over a large fleet), where it caches every other key: the primary answers such keys as
// on_cardinality says, and l, caching each, cached and wrote to Redis a fresh key per
// record after the primary had stopped (PostHog #83004 on a rule's second limit). Call it
// before l checks a record; it does nothing unless l keeps a sketch and primary bounds
// its keys' cardinality.
func (l *Limiter) FollowRotation(primary *Limiter) {
	if l.sk == nil || l.card != nil || primary == nil || primary == l || primary.card == nil {
		return
	}
	l.follow = primary.card
}

// rotatingKey reports whether key is a key of a team found rotating (not its collapsed
// key, which only the primary limit checks).
func (cd *cardinality) rotatingKey(key string) bool {
	p := cd.cands.Load()
	if p == nil {
		return false
	}
	c, _, _, _ := p.of(key)
	return c != nil && len(key) > len(c.collapsed) && c.rotating.Load()
}

// RotatingFor reports the rotation a check of key would answer by now: key's team (its
// first part) rotating identities, and key neither cached (a user at its floor before the
// rotation is checked as before), nor overridden (always cached), nor a collapsed key. A
// view's question (the team view's, for a user asked about by its key), not a check's.
func (l *Limiter) RotatingFor(key string) (RotatingTeam, bool) {
	if l.card == nil || l.collapsedKey(key) || strings.IndexByte(key, ':') < 0 || l.overridden(key) {
		return RotatingTeam{}, false
	}
	team := teamOf(key)
	for _, rt := range l.Rotating() {
		if rt.Team != team {
			continue
		}
		h := maphash.String(l.seed, key)
		if e, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, key); e != nil {
			return RotatingTeam{}, false
		}
		return rt, true
	}
	return RotatingTeam{}, false
}

// InheritRotation takes over old's teams rotating identities and candidates, with their
// windows' registers: a rules reload builds new limiters for a rule that did not change,
// and a team found rotating must not be let through until the new limiter has counted
// 1.5 × the bound of its keys again. Under a higher bound than old's (max_keys raised), a
// team stays rotating only while its keys in the current window or the last one that ended
// are over the new bound: the operator raised it to let the team through, and a release
// waits for a window's end otherwise (the sweep finds it rotating again if its keys pass
// the new bound). Call it before l checks a record; it does nothing unless both limiters
// bound their keys' cardinality.
func (l *Limiter) InheritRotation(old *Limiter) {
	if l.card == nil || old == nil || old.card == nil {
		return
	}
	// The old limiter's seed, l having hashed nothing yet: a key met again after the
	// reload hashes as it did before it, so the registers taken over count it once. With
	// a seed of its own, every key of a candidate's window seen on both sides of the
	// reload counted twice: a team with 0.5 to 1 × the bound of steady users was taken
	// for rotating, its users limited as one.
	l.adoptSeed(old)
	oldCur := floorDiv(old.clock.Now().UnixNano(), old.windowNs)
	old.card.mu.Lock()
	p := old.card.cands.Load()
	var cands []*rotation
	if p != nil {
		for _, o := range p.list {
			// The team's hash (nominate compares it) and the registers' hashes of the
			// window's keys are this limiter's, its seed the old one's.
			//
			// Under a changed window (a reload of the rule's window alone) an old window's
			// keys are keys of the new window holding it, if one holds it whole: its
			// registers are merged into that window's, so the new limiter neither forgets
			// them (releasing the team at the end of a window that was over the bound) nor
			// keeps them in a window they are not of (a shorter one's: they start afresh).
			// lastSeen is the new window holding the old one's end, so a candidate whose
			// evidence is in old epochs is dropped on the new epochs' schedule.
			r := &rotation{team: o.team, h: maphash.String(l.seed, o.team), collapsed: o.collapsed,
				lastSeen: floorDiv((o.lastSeen+1)*old.windowNs-1, l.windowNs)}
			r.regs[0].epoch.Store(noEpoch)
			r.regs[1].epoch.Store(noEpoch)
			for i := range o.regs {
				e := o.regs[i].epoch.Load()
				if e == noEpoch {
					continue
				}
				start := e * old.windowNs
				k := floorDiv(start, l.windowNs)
				if floorDiv(start+old.windowNs-1, l.windowNs) != k {
					continue // across two of the new windows: in neither whole
				}
				x := &r.regs[k&1]
				if x.epoch.Load() != k {
					x.clear(k)
				}
				x.merge(&o.regs[i])
			}
			// The window that ended counts with the current one, whose keys are those since
			// its first sweep: judged on those alone, a team still minting over the new
			// bound was released by a reload early in a window, let through until its
			// window's count passed the bound again, and found (and logged) anew.
			keys := o.distinct.Load()
			for i := range o.regs {
				if e := o.regs[i].epoch.Load(); e != noEpoch && e >= oldCur-1 {
					keys = max(keys, o.regs[i].estimate())
				}
			}
			r.rotating.Store(o.rotating.Load() && (l.card.bound <= old.card.bound || keys > l.card.bound))
			r.since.Store(o.since.Load())
			r.distinct.Store(o.distinct.Load())
			cands = append(cands, r)
		}
	}
	old.card.mu.Unlock()
	l.card.mu.Lock()
	defer l.card.mu.Unlock()
	if len(cands) > 0 {
		l.card.cands.Store(newCandSet(cands, l.seed))
	}
}
