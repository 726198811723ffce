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
	p := newPartition("events", 0)
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
// hold), and a seal's batch goes in offset order even when a gap moved the partition
// past the records it counts (before the gap's batch): before, it went in behind the
// gap's, and the gap's end was committed before the seal's rows were acknowledged.
func TestSealBatchAfterAGap(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0)
	p.out = &outcomeState{from: -1}
	p.out.hold.Store(-1)
	b := p.add(200, 1, 2) // [100, 200), counted and not sealed
	p.out.from, p.out.to, p.out.epoch = 100, 200, 1
	p.out.hold.Store(100)
	b.remaining.Store(0)
	if off, _, ok := p.advance(); ok && off.Offset > 100 {
		t.Fatalf("commit %d offered past the hold at 100", off.Offset)
	}
	p.resumeAt(kgo.EpochOffset{Epoch: 1, Offset: 500}) // records [200, 500) lost
	seal := p.addSeal(p.out.to, p.out.epoch)
	p.out.from = -1
	p.out.hold.Store(-1)
	if seal.end != 200 || len(p.batches) != 3 || p.batches[1] != seal {
		t.Errorf("seal batch ends at %d, %d batches; want it at 200, between the records' and the gap's", seal.end, len(p.batches))
	}
	if off, _, ok := p.advance(); ok && off.Offset > 200 {
		t.Fatalf("commit %d offered before the seal's rows were acknowledged", off.Offset)
	}
	seal.remaining.Store(0)
	if off, _, ok := p.advance(); !ok || off.Offset != 500 {
		t.Fatalf("after the seal: commit %d (%v), want 500", off.Offset, ok)
	}
}

// A rewind below the records counted since the last seal moves the hold back with it:
// what is routed again from there is not committed before it is sealed.
func TestRewindMovesTheHold(t *testing.T) {
	t.Parallel()
	p := newPartition("events", 0)
	p.out = &outcomeState{from: 150, to: 300, epoch: 1}
	p.out.hold.Store(150)
	p.add(300, 1, 3)
	p.resumeAt(kgo.EpochOffset{Epoch: 2, Offset: 120})
	if p.out.hold.Load() != 120 || p.out.from != 120 || p.out.to != 120 {
		t.Errorf("after a rewind to 120: hold %d, from %d, to %d; want 120 each", p.out.hold.Load(), p.out.from, p.out.to)
	}
}
