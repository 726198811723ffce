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

// docs/design.md: "A record is judged afresh ... when more than 4,096 offsets lay between
// it and the record routed before it (a compacted input)". It is the other way round: a
// record past such a gap starts the Decisions again (routing), and every record held
// before it, of the same transaction, loses its decisions. The fixture's five records
// (10..14: three accepted, two to overflow), then one of another team at 10,000:
// replayed, 10..12 go to overflow, judged afresh against levels holding all five.
func TestDecisionsGapForgetsTheRecordsBeforeIt(t *testing.T) {
	f, recs := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	first := routeAll(f.r, recs, s)
	far := input(`{"team_id":"z"}`, "")
	far.Offset = 10_000
	var out kgo.Record
	f.r.RouteInto(t0, far, s, &out)
	s.Replay = true
	again := routeAll(f.r, recs, s)
	for i := range recs {
		if again[i].route != first[i].route {
			t.Errorf("offset %d, before the gap: replayed %s, first %s (decisions held for %d offsets)", recs[i].Offset, again[i].route, first[i].route, d.Len())
		}
	}
}
