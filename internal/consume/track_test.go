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
