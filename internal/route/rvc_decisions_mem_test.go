package route

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The decisions a partition keeps take a byte a rule and record (docs/design.md: "at most
// GATE_TRANSACTION_MAX_RECORDS × the rules bytes"). With offsets apart (a compacted input,
// or read_committed skipping an upstream transaction's aborted records), routing fills
// every offset between two records up to maxDecisionGap with a byte a rule: 1,000
// records 4,000 offsets apart take 4 MB for one rule, where the bound says 1,000 bytes;
// a transaction of 500,000 (the default) such records, 2 GB a rule.
func TestDecisionsMemoryBoundedByRecords(t *testing.T) {
	f, _ := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	const records, apart = 1000, 4000
	for i := range records {
		rec := input(`{"team_id":"b"}`, "")
		rec.Offset = int64(i * apart)
		var out kgo.Record
		f.r.RouteInto(t0, rec, s, &out)
	}
	rules := len(f.r.rules)
	if got, bound := len(d.b), records*rules; got > bound {
		t.Errorf("%d records routed (%d offsets apart): decisions hold %d bytes (%d offsets), want at most %d (a byte a rule and record)",
			records, apart, got, d.Len(), bound)
	}
}
