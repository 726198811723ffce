package route

import (
	"slices"

	"github.com/capturegate/gate/internal/limit"
)

// Decisions is one input partition's record of what each rule's limits decided for the
// records an open exactly-once transaction routed, so that those records, routed again
// after the transaction aborts (Scratch.Replay), go where they went the first time.
//
// Why: a replayed record is not counted again (the limiter counted it on its first
// attempt), but judged afresh its team's level holds the first attempt's counts of every
// record of the transaction, those after it included: a team near its limit had the
// records the first attempt accepted sent to overflow (threshold 150, 200 records in an
// aborted transaction: none accepted), and in cap mode the share of its window spent on
// them was never used. The first attempt's decisions are the ones its counts stand for.
//
// Invariant: for every offset in [from, to), and only those, it holds the decision of
// each of router's rules for the record at that offset as RouteInto made it when the
// record was first routed with this Decisions: a record a rule was over (or tagged, its
// team rotating) for is in offs, with its rules' bytes in b; any other record of the span
// had every rule not over, or not checked. RouteInto replays them only for a record in
// that span routed by that router: a record outside it, or after the rules were
// reloaded, is judged afresh, as before. So it takes 8 bytes and a byte a rule for each
// record a rule was over for, whatever the offsets between records (a compacted input,
// an upstream's aborted records). A Decisions belongs to one partition and is used by one
// goroutine at a time.
type Decisions struct {
	router   *Router
	from, to int64   // the offsets held; to == from when none
	rules    int     // bytes a record in b: the router's rules
	offs     []int64 // the records a rule was over for, ascending
	b        []byte  // their decisions, rules bytes each, in offs' order
	// cur is the index in offs of the record being routed or replayed (-1: it is not
	// there), off its offset.
	cur int
	off int64
}

// Reset forgets every decision: the transaction that routed them committed, and its
// records are never routed again. The room of a small transaction's is kept for the
// next; a large one's is given back, so that a partition does not keep its largest.
func (d *Decisions) Reset() {
	d.router, d.from, d.to = nil, 0, 0
	if cap(d.b)+8*cap(d.offs) > keepDecisions {
		d.offs, d.b = nil, nil
	} else {
		d.offs, d.b = d.offs[:0], d.b[:0]
	}
}

// keepDecisions is the most bytes of decisions (their offsets and bytes) Reset keeps
// room for.
const keepDecisions = 64 << 10

// DropBelow forgets the decisions of offsets below off: the group committed past them.
func (d *Decisions) DropBelow(off int64) {
	switch {
	case off >= d.to:
		d.Reset()
	case off > d.from:
		k, _ := slices.BinarySearch(d.offs, off)
		d.offs = d.offs[:copy(d.offs, d.offs[k:])]
		d.b = d.b[:copy(d.b, d.b[k*d.rules:])]
		d.from = off
	}
}

// DropFrom forgets the decisions of offsets from off on: the partition's log diverged
// there (a broker's loss), and the records now at those offsets are others.
func (d *Decisions) DropFrom(off int64) {
	switch {
	case off <= d.from:
		d.Reset()
	case off < d.to:
		k, _ := slices.BinarySearch(d.offs, off)
		d.offs, d.b = d.offs[:k], d.b[:k*d.rules]
		d.to = off
	}
}

// Len returns how many offsets it holds decisions for.
func (d *Decisions) Len() int { return int(d.to - d.from) }

// routing makes the record at off, routed by r for the first time, the record being
// routed. A record that does not follow the ones held (another router, an offset not
// past them) starts them afresh from it.
func (d *Decisions) routing(r *Router, off int64) {
	if d.router != r || off < d.to || d.to == d.from {
		d.router, d.rules, d.from = r, len(r.rules), off
		d.offs, d.b = d.offs[:0], d.b[:0]
	}
	d.to, d.cur, d.off = off+1, -1, off
}

// note keeps rule i's decision d (over: the index of its first limit over, or -1) for
// the record being routed, when there is one to keep.
func (d *Decisions) note(i int, dec limit.Decision, over int) {
	v := decisionByte(dec, over)
	if v == 0 {
		return
	}
	if d.cur < 0 { // the record's first decision to keep: its room, every rule not over
		d.cur = len(d.offs)
		d.offs = append(d.offs, d.off)
		n := len(d.b)
		d.b = slices.Grow(d.b, d.rules)[:n+d.rules]
		clear(d.b[n:])
	}
	d.b[d.cur*d.rules+i] = v
}

// replaying reports whether the record at off, routed again by r, has its decisions
// held, and makes it the record being routed.
func (d *Decisions) replaying(r *Router, off int64) bool {
	if d.router != r || off < d.from || off >= d.to {
		return false
	}
	d.cur = -1
	if k, ok := slices.BinarySearch(d.offs, off); ok {
		d.cur = k
	}
	return true
}

// replay returns rule i's decision for the record being replayed: dec (the decision
// made now, its threshold and level those of now) with the first routing's verdict, and
// its first limit over. A decision the first routing could not keep is dec itself.
func (d *Decisions) replay(i int, dec limit.Decision, over int) (limit.Decision, int) {
	var v byte
	if d.cur >= 0 {
		v = d.b[d.cur*d.rules+i]
	}
	if v == decisionUnkept {
		return dec, over
	}
	dec.Limited, dec.Held, dec.Rotating = v&decisionLimited != 0, v&decisionHeld != 0, v&decisionRotating != 0
	return dec, int(v>>decisionOverShift) - 1
}

// A decision in a byte: its verdict's flags, and its first limit over + 1 in the top
// four bits (0: none). Zero is a rule not over: under its limits, or not checked.
const (
	decisionLimited   = 1 << 0
	decisionHeld      = 1 << 1
	decisionRotating  = 1 << 2
	decisionOverShift = 4
	// decisionUnkept is a decision with its first limit over past the fifteenth: the
	// replay judges it afresh.
	decisionUnkept = 0xff
)

func decisionByte(d limit.Decision, over int) byte {
	if over >= 1<<(8-decisionOverShift)-1 {
		return decisionUnkept
	}
	v := byte(over+1) << decisionOverShift
	if d.Limited {
		v |= decisionLimited
	}
	if d.Held {
		v |= decisionHeld
	}
	if d.Rotating {
		v |= decisionRotating
	}
	return v
}
