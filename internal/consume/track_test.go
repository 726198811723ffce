package consume

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResumeAtBackKeepsAwaiting: a rewind below what was routed (a broker's log
// diverged there) still awaits every record routed before the rewind point, and a late
// answer to a commit sent before the rewind does not put the partition's committed
// offset back above it. Before, the rewind forgot the batches in flight, so the next
// commit passed records not yet acknowledged, and a late answer kept the rewind point
// from ever being committed.
func TestResumeAtBackKeepsAwaiting(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0, newMono())
	b1 := p.add(200, 1, 5) // offsets [100, 200): 5 records in flight
	b2 := p.add(300, 1, 3) // [200, 300): 3 records in flight
	_, gen0, _ := p.advance()

	p.resumeAt(kgo.EpochOffset{Epoch: 2, Offset: 250})
	if off, _, ok := p.advance(); ok && off.Offset >= 0 {
		t.Fatalf("commit %d offered with every record still in flight", off.Offset)
	}
	p.markCommitted(300, gen0) // the answer to a commit sent before the rewind
	b1.remaining.Store(0)
	if off, _, ok := p.advance(); !ok || off.Offset != 200 {
		t.Fatalf("after the first batch: commit %d (%v), want 200", off.Offset, ok)
	}
	b2.remaining.Store(0)
	off, gen, ok := p.advance()
	if !ok || off.Offset != 250 || off.Epoch != 2 {
		t.Fatalf("after the cut batch: commit %+v (%v), want offset 250 epoch 2", off, ok)
	}
	p.markCommitted(250, gen)
	if _, _, ok := p.advance(); ok {
		t.Error("offset 250 offered again after it was committed")
	}
}

// With outcomes on, commits stop where the records counted but not sealed begin (the
// hold), and a seal's batch goes in offset order at the first record it counts, ahead
// of the records' batches and of a gap's that moved the partition past them: before, it
// went in behind the gap's, and the gap's end was committed before the seal's rows were
// acknowledged.
func TestSealBatchAfterAGap(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0, newMono())
	p.out = &outcomeState{from: -1}
	p.out.hold.Store(-1)
	b := p.add(200, 1, 2) // [100, 200), counted and not sealed
	p.out.from, p.out.to = 100, 200
	p.out.hold.Store(100)
	b.remaining.Store(0)
	if off, _, ok := p.advance(); ok && off.Offset > 100 {
		t.Fatalf("commit %d offered past the hold at 100", off.Offset)
	}
	p.resumeAt(kgo.EpochOffset{Epoch: 1, Offset: 500}) // records [200, 500) lost
	seal := p.addSeal(p.out.from, nil)
	p.out.from = -1
	p.out.hold.Store(-1)
	if seal.end != 100 || len(p.batches) != 3 || p.batches[0] != seal {
		t.Errorf("seal batch ends at %d, %d batches; want it at 100, ahead of the records' and the gap's", seal.end, len(p.batches))
	}
	if off, _, ok := p.advance(); ok && off.Offset > 100 {
		t.Fatalf("commit %d offered before the seal's rows were acknowledged", off.Offset)
	}
	seal.remaining.Store(0)
	if off, _, ok := p.advance(); !ok || off.Offset != 500 {
		t.Fatalf("after the seal: commit %d (%v), want 500", off.Offset, ok)
	}
}

// A seal's records are not committed before its rows are acknowledged, however long
// those take, though their outputs are: a commit in between, followed by a crash,
// would leave them on the outputs, committed (so never routed again) and in no row.
// Before, the seal's batch went in behind the records' batches, and the first commit
// after the seal covered them. Two seals in flight hold the commits at the first one's
// records until its rows are acknowledged, then at the second's.
func TestCommitWaitsForSealRows(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0, newMono())
	p.out = &outcomeState{from: -1}
	p.out.hold.Store(-1)
	seal := func(from, to int64, epoch int32) *batch {
		b := p.add(to, epoch, int(to-from)) // routed and counted
		p.out.from, p.out.to = from, to
		p.out.hold.Store(from)
		b.remaining.Store(0) // every output acknowledged
		sb := p.addSeal(p.out.from, nil)
		p.out.from = -1
		p.out.hold.Store(-1)
		return sb
	}
	want := func(what string, off int64, epoch int32) {
		t.Helper()
		got, _, _ := p.advance()
		if got.Offset != off || got.Epoch != epoch {
			t.Fatalf("%s: acknowledged up to %d (epoch %d), want %d (epoch %d)", what, got.Offset, got.Epoch, off, epoch)
		}
	}
	first := seal(100, 200, 1)
	want("first seal's rows in flight", -1, -1)
	second := seal(200, 300, 2)
	want("both seals' rows in flight", -1, -1)
	second.remaining.Store(0)
	want("only the second seal's rows acknowledged", -1, -1)
	first.remaining.Store(0)
	want("both acknowledged", 300, 2)

	// The records' batches acknowledged first, before the seal's rows: the commit
	// stays at the seal's first record, with the leader epoch of the record before it.
	third := seal(300, 400, 3)
	want("third seal's rows in flight", 300, 2)
	third.remaining.Store(0)
	want("third acknowledged", 400, 3)

	// A seal's rows acknowledged after the batch before it was popped, the records'
	// outputs after that: the offset offered at the seal is its first record's, with
	// the epoch of the record before it (the popped batch's), not another's.
	before := p.add(450, 4, 1) // [400, 450), counted by an earlier seal
	after := p.add(500, 5, 1)  // [450, 500), this seal's
	fourth := p.addSeal(450, nil)
	before.remaining.Store(0)
	want("the batch before the seal acknowledged", 450, 4)
	fourth.remaining.Store(0)
	want("the seal's rows acknowledged, its records' outputs not", 450, 4)
	after.remaining.Store(0)
	want("everything acknowledged", 500, 5)
}

// A rewind below the records counted since the last seal moves the hold back with it:
// what is routed again from there is not committed before it is sealed.
func TestRewindMovesTheHold(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0, newMono())
	p.out = &outcomeState{from: 150, to: 300}
	p.out.hold.Store(150)
	p.add(300, 1, 3)
	p.resumeAt(kgo.EpochOffset{Epoch: 2, Offset: 120})
	if p.out.hold.Load() != 120 || p.out.from != 120 || p.out.to != 120 {
		t.Errorf("after a rewind to 120: hold %d, from %d, to %d; want 120 each", p.out.hold.Load(), p.out.from, p.out.to)
	}
}

// rowsUnwrittenOf counts the rows in flight of the seals that count records of the
// partitions asked about, each seal once however many of them it covers, and none of a
// seal whose rows were all acknowledged.
func TestRowsUnwrittenOfPartitions(t *testing.T) {
	c := &Consumer{parts: map[int32]*partition{}, out: &outcomes{}}
	p0, p1, p2 := newPartition(inTopic, 0, newMono()), newPartition(inTopic, 1, newMono()), newPartition(inTopic, 2, newMono())
	c.parts[0], c.parts[1], c.parts[2] = p0, p1, p2
	both, own, done := &sealBatch{}, &sealBatch{}, &sealBatch{}
	both.rows.Store(5)
	own.rows.Store(3)
	p0.addSeal(0, both)
	p1.addSeal(0, both)
	p1.addSeal(10, own)
	p2.addSeal(0, done).remaining.Store(0) // acknowledged
	for _, tc := range []struct {
		ids  []int32
		want int64
	}{{[]int32{0}, 5}, {[]int32{1}, 8}, {[]int32{0, 1}, 8}, {[]int32{2}, 0}, {nil, 8}} {
		if got := c.rowsUnwrittenOf(tc.ids); got != tc.want {
			t.Errorf("rowsUnwrittenOf(%v) = %d, want %d", tc.ids, got, tc.want)
		}
	}
}

// addEmpty extends an empty batch already complete rather than adding another: while a
// batch waits on a record being retried, every poll of transaction markers alone added a
// batch behind it, a pile nothing bounded. The commit moves past them all once it
// completes.
func TestAddEmptyExtendsTheLastEmptyBatch(t *testing.T) {
	p := newPartition("in", 0, newMono())
	b := p.add(10, 3, 1)
	p.addEmpty(12, 3)
	p.addEmpty(14, 4)
	if n := len(p.batches); n != 2 {
		t.Fatalf("%d batches after two polls of markers behind a waiting one, want 2", n)
	}
	if off, _, _ := p.advance(); off.Offset != -1 {
		t.Errorf("advanced to %d with a record unacknowledged, want nothing", off.Offset)
	}
	b.remaining.Add(-1)
	if off, _, _ := p.advance(); off.Offset != 14 || off.Epoch != 4 {
		t.Errorf("advanced to %+v, want offset 14, epoch 4: past both polls of markers", off)
	}
	p.addEmpty(16, 4) // nothing waiting: a batch of its own, popped at once
	if off, _, _ := p.advance(); off.Offset != 16 {
		t.Errorf("advanced to %d after markers alone, want 16", off.Offset)
	}
}
