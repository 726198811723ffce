package consume

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSlabBackOnlyWhenBatchDone: a batch's slab goes back to the pool only with the
// acknowledgement that completes the batch, and cleared, so that a kept slab holds no
// input record; before that the batch still holds it, contents intact.
func TestSlabBackOnlyWhenBatchDone(t *testing.T) {
	c := &Consumer{}
	p := newPartition("in", 0)
	in := &kgo.Record{Value: []byte(`{"team_id":"t"}`)}
	b := p.add(3, 0, 3)
	fs := c.slabs.get(3)
	b.slab = fs
	for i := range fs {
		fs[i].b, fs[i].in = b, in
	}
	c.ackBatch(b, 1)
	c.ackBatch(b, 1)
	if b.slab == nil || fs[0].in != in || fs[2].b != b {
		t.Fatal("slab put back, or cleared, with a record of its batch still in flight")
	}
	c.ackBatch(b, 1)
	if b.slab != nil {
		t.Fatal("slab still held by a completed batch")
	}
	for i := range fs[:cap(fs)] {
		if fs[:cap(fs)][i].in != nil || fs[:cap(fs)][i].b != nil {
			t.Fatalf("slab put back holding record %d", i)
		}
	}
}

// TestSlabUnroutedCompletesBatch: records left unrouted count as done, so a batch whose
// routing stopped midway gives its slab back once the routed ones are acknowledged.
func TestSlabUnroutedCompletesBatch(t *testing.T) {
	c := &Consumer{}
	p := newPartition("in", 0)
	recs := []*kgo.Record{{Offset: 10}, {Offset: 11}, {Offset: 12}, {Offset: 13}}
	b := p.add(14, 0, len(recs))
	b.slab = c.slabs.get(len(recs))
	c.unroute(work{p: p, recs: recs}, b, 1) // 11, 12, 13 not routed
	if b.slab == nil {
		t.Fatal("slab put back while record 10 is in flight")
	}
	c.ackBatch(b, 1)
	if b.slab != nil {
		t.Fatal("slab not put back once the routed record was acknowledged")
	}
}

// TestSlabSizes: get gives n zeroed records; slabs of a pooled class come back at their
// class's capacity, others are not kept.
func TestSlabSizes(t *testing.T) {
	var s slabs
	for _, n := range []int{1, 2, 3, 500, 10_000, 1 << 15, 1<<15 + 1} {
		fs := s.get(n)
		if len(fs) != n {
			t.Fatalf("get(%d): len %d", n, len(fs))
		}
		if n <= 1<<15 && cap(fs)&(cap(fs)-1) != 0 {
			t.Fatalf("get(%d): capacity %d is not a class", n, cap(fs))
		}
		fs[n-1].attempts = 7
		s.put(fs)
		if again := s.get(n); again[n-1].attempts != 0 {
			t.Fatalf("get(%d) after put: a record not zeroed", n)
		}
	}
}
