package limit

import (
	"sync/atomic"
	"unsafe"
)

// Tally counts one goroutine's decisions (CheckTally, CheckEventTally) in plain words, until
// AddTally adds them to the limiter's counters (gate_limiter_decisions_total and the event
// clock's clamps) and zeroes it. A worker routing a fetched batch keeps one and adds it
// once a batch: every check would otherwise make a locked add to a line of the limiter's,
// the one write of a check that is not to the team's own entry, and two workers whose
// stacks hash to one stripe would share that line on every record. The counters then lag
// the checks by at most a batch; nothing is lost as long as each tally is added before it
// is dropped. A Tally belongs to one limiter and is not safe for concurrent use.
type Tally struct {
	allowed, limited uint64
	// EventClock: timestamps clamped for being older than MaxEventAge, or too far ahead.
	tooOld, future uint64
	// untracked: checks answered from the sketch (gate_limiter_untracked_checks_total),
	// added with the decisions, of which they are a part; rotated, those of a rotating
	// team's keys (gate_limiter_rotation_records_total), a fifth of every record under
	// the rotation, each a locked add when counted at once.
	untracked, rotated uint64
	// deferred: a rotating team's keys' own sketch counts (checkUntracked), added
	// rotDefer checks of the team later, when the lines the check had fetched ahead
	// (sketch.prefetch) have come: a fresh key's lines are in no cache, and an add at once
	// waited for them on every fifth record of the rotation. ndeferred counts
	// those queued since the last AddTally; the last rotDefer of them are in deferred.
	deferred  [rotDefer]deferredAdd
	ndeferred uint32
}

// rotDefer is how many of a rotating team's keys' sketch adds a Tally holds back: enough
// checks for the lines of the first to arrive from memory before it is added.
const rotDefer = 8

// deferKey is the longest key whose add a Tally holds back (its bytes are copied: the
// key a check is given aliases a record's buffer); a longer key's is made at once.
const deferKey = 64

// deferredAdd is n records of a rotating team's key (its hash h, cells c, bytes key) to
// add to its own count in sl, while sl counts window ep: in the sketch while the team
// rotates, and to the key's entry if the rotation has ended and another goroutine's
// check has since promoted the key (the promotion's carry read the sketch without them).
type deferredAdd struct {
	l    *Limiter
	r    *rotation
	sl   *sketchSlot
	ep   int64
	ns   int64 // the check's time
	h    uint64
	n    int64
	c    cells
	klen uint8
	key  [deferKey]byte
}

// apply adds d: to the key's entry when its team's rotation has ended and the key is
// cached (countCached), else to the sketch, unless its slot has since been cleared for
// another window (a Tally held over two windows): what it counted is then gone with the
// window.
func (d *deferredAdd) apply() {
	if !d.r.rotating.Load() && d.l.countCached(d.h, unsafe.String(&d.key[0], int(d.klen)), d.ep, d.ns, d.n) {
		return
	}
	if d.sl.epoch.Load() == d.ep {
		d.sl.add(d.c, d.n)
	}
}

// deferAdd queues n records of key (hash h, cells c), a key of the rotating team r
// counted in sl (window ep) at ns, adding the one queued rotDefer adds ago. A key longer
// than deferKey is added at once.
func (t *Tally) deferAdd(l *Limiter, r *rotation, sl *sketchSlot, ep, ns int64, h uint64, c cells, key string, n int64) {
	if len(key) > deferKey || len(key) == 0 {
		sl.add(c, n)
		return
	}
	d := &t.deferred[t.ndeferred%rotDefer]
	if t.ndeferred >= rotDefer {
		d.apply()
	}
	d.l, d.r, d.sl, d.ep, d.ns, d.h, d.n, d.c = l, r, sl, ep, ns, h, n, c
	d.klen = uint8(copy(d.key[:], key))
	t.ndeferred++
}

// Discard zeroes t, dropping its decision counts but adding the sketch counts it held back:
// for a pass of checks whose decisions an earlier pass counted (a cap rule's counting pass
// after its asking one), whose records still count.
func (t *Tally) Discard() {
	if t.ndeferred != 0 {
		t.applyDeferred()
	}
	t.reset()
}

// empty reports whether t holds nothing: no count and no add held back.
func (t *Tally) empty() bool {
	return t.allowed|t.limited|t.tooOld|t.future|t.untracked|t.rotated == 0 && t.ndeferred == 0
}

// reset zeroes t's counts and drops its held-back adds, clearing only the entries used
// (their pointers would keep a reloaded rule set's limiters alive): the queue is most of a
// Tally's 1.2 KB, and a cap rule's counting pass resets one for every record.
func (t *Tally) reset() {
	clear(t.deferred[:min(t.ndeferred, rotDefer)])
	t.allowed, t.limited, t.tooOld, t.future, t.untracked, t.rotated, t.ndeferred = 0, 0, 0, 0, 0, 0, 0
}

// applyDeferred adds every queued sketch add.
func (t *Tally) applyDeferred() {
	for i := range min(t.ndeferred, rotDefer) {
		t.deferred[i].apply()
	}
}

func (t *Tally) count(limited bool) {
	if limited {
		t.limited++
	} else {
		t.allowed++
	}
}

// AddTally adds t to the limiter's counters and zeroes it.
func (l *Limiter) AddTally(t *Tally) {
	if t.empty() {
		return
	}
	t.applyDeferred()
	st := l.stripe()
	addNonZero(&st.allowed, t.allowed)
	addNonZero(&st.limited, t.limited)
	addNonZero(&st.tooOld, t.tooOld)
	addNonZero(&st.future, t.future)
	addNonZero(&l.shards[0].untracked, t.untracked) // summed over the shards (metrics.go)
	addNonZero(&l.shards[0].rotated, t.rotated)
	t.reset()
}

// addNonZero adds n to a, sparing the locked add when n is 0 (the clamps, mostly).
func addNonZero(a *atomic.Uint64, n uint64) {
	if n != 0 {
		a.Add(n)
	}
}

// decisionStripes is how many lines the decision counters are spread over.
const decisionStripes = 64

// decisionStripe is one line of decision counters. Every CheckAt adds to one, every
// AddTally to one: counters per shard would be written by every core checking any team of
// the shard, a line bouncing between cores on every check; a goroutine keeps to its own
// stripe (stripe), whose line then stays in its core's cache.
type decisionStripe struct {
	allowed atomic.Uint64
	limited atomic.Uint64
	// EventClock: timestamps clamped for being older than MaxEventAge, or too far ahead.
	tooOld atomic.Uint64
	future atomic.Uint64
	_      [128 - 32]byte // a line pair: adjacent-line prefetch pairs lines
}

// stripe returns the calling goroutine's decision stripe, chosen by where its stack is: the
// one cheap thing that tells goroutines apart. Goroutines sharing a stripe (or a goroutine
// whose stack moved) cost contention, never a lost count.
//
// The address is taken in units of 2 KiB, the smallest goroutine stack (runtime stackMin),
// each stack being aligned to its power-of-two size: no two live goroutines share a unit,
// and Fibonacci hashing spreads neighbouring units (stacks allocated one after the other,
// as RunParallel's or a worker pool's are) over distinct stripes. Units of 8 KiB, as once
// used here, put up to four fresh 2 KiB stacks on one stripe: two workers started together
// then shared a line on every check, which doubled the check's cost on two cores. A
// goroutine whose stack grew may use a few stripes by call depth: harmless, as the units
// are still its own.
func (l *Limiter) stripe() *decisionStripe {
	var b byte
	return &l.decisions[stripeOf(uintptr(unsafe.Pointer(&b)))]
}

// stripeOf is the decision stripe of a goroutine whose stack holds address sp.
func stripeOf(sp uintptr) uint64 {
	return uint64(sp) >> 11 * 0x9e3779b97f4a7c15 >> 58 // 2 KiB units, Fibonacci-hashed
}

// count counts one decision.
func (st *decisionStripe) count(limited bool) {
	if limited {
		st.limited.Add(1)
	} else {
		st.allowed.Add(1)
	}
}
