package route

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// routed is what a test keeps of a routed record: where it went, why, and the gate's
// headers.
type routed struct {
	route            Route
	reason, rule     string
	limitHdr, whyHdr string
}

func routedOf(o Outcome, out *kgo.Record) routed {
	return routed{o.Route, o.Reason, o.Rule, string(headerValue(out, HeaderOverflowLimit)), string(headerValue(out, HeaderOverflowReason))}
}

// decisionsFixture is a rule of two limits, a minute's no record reaches and an hour's of
// 3, and five records of one team at offsets 10 to 14: routed once, the first three are
// accepted and the last two go to overflow over the hour's limit.
func decisionsFixture(t *testing.T) (*ruleFixture, []*kgo.Record) {
	t.Helper()
	f := newRuleFixture(t, Config{}, ruleSpec{
		Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow},
		[]limit.Config{{Window: time.Minute, Threshold: 100}, {Window: time.Hour, Threshold: 3}},
	})
	var recs []*kgo.Record
	for i := range 5 {
		rec := input(`{"team_id":"a"}`, "")
		rec.Offset = int64(10 + i)
		recs = append(recs, rec)
	}
	return f, recs
}

func routeAll(r *Router, recs []*kgo.Record, s *Scratch) []routed {
	var got []routed
	for _, rec := range recs {
		var out kgo.Record
		got = append(got, routedOf(r.RouteInto(t0, rec, s, &out), &out))
	}
	return got
}

// The records of an aborted exactly-once transaction, routed again (Scratch.Replay) with
// the partition's Decisions, go where they went the first time, with the same headers
// (the hour's limit named), though their team's level now holds all five: judged afresh,
// as a replay without them is, every one goes to overflow.
func TestDecisionsReplayWhereRecordsWent(t *testing.T) {
	f, recs := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	first := routeAll(f.r, recs, s)
	want := []Route{Accepted, Accepted, Accepted, Overflow, Overflow}
	for i, g := range first {
		if g.route != want[i] {
			t.Fatalf("first attempt, record %d: %s, want %s (all: %v)", i, g.route, want[i], first)
		}
	}
	if first[3].limitHdr != "1h0m0s" {
		t.Fatalf("first attempt's overflow names limit %q, want the hour's", first[3].limitHdr)
	}
	if d.Len() != 5 {
		t.Errorf("decisions held for %d offsets, want 5", d.Len())
	}

	s.Replay = true
	if again := routeAll(f.r, recs, s); !slices.Equal(again, first) {
		t.Errorf("replayed with its decisions:\n got %v\nwant %v", again, first)
	}
	if again := routeAll(f.r, recs, &Scratch{Replay: true}); slices.ContainsFunc(again, func(g routed) bool { return g.route != Overflow }) {
		t.Errorf("replayed without them, judged afresh: %v, want every record to overflow (the levels hold the first attempt's counts)", again)
	}
	if n := f.counts("team")["a"]; n != 5 {
		t.Errorf("the team counted %d, want 5: replays count nothing", n)
	}

	// The group committed past offset 12: only 13 and 14 can be routed again, and
	// they keep theirs.
	d.DropBelow(13)
	if again := routeAll(f.r, recs[3:], s); !slices.Equal(again, first[3:]) {
		t.Errorf("offsets 13 and 14 after the commit of 13: %v, want %v", again, first[3:])
	}
	if again := routeAll(f.r, recs[:1], s); again[0].route != Overflow {
		t.Errorf("offset 10, no longer held: %v, want judged afresh (overflow)", again)
	}
	// A broker's loss from offset 14: the record there is another, judged afresh.
	d.DropFrom(14)
	if again := routeAll(f.r, recs[4:], s); again[0].route != Overflow || d.Len() != 1 {
		t.Errorf("offset 14 after the loss: %v (%d held), want judged afresh, 13 still held", again, d.Len())
	}
}

// Decisions made by one router are not another's: after a reload (a new Router), the
// records held are judged afresh, and a record routed for the first time by the new
// router starts them again.
func TestDecisionsOfAnotherRouterAreJudgedAfresh(t *testing.T) {
	f, recs := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	routeAll(f.r, recs, s)
	g, _ := decisionsFixture(t) // the reloaded rules: limiters of their own, nothing counted
	s.Replay = true
	for i, got := range routeAll(g.r, recs, s) {
		if got.route != Accepted {
			t.Errorf("record %d through the new router: %s, want judged afresh by its empty limiters (accepted)", i, got.route)
		}
	}
	s.Replay = false
	routeAll(g.r, recs[:1], s)
	if d.Len() != 1 {
		t.Errorf("after the new router's first record, %d offsets held, want 1", d.Len())
	}
}

// A decision keeps its flags and its first limit over up to the fifteenth (index 14);
// past it the replay takes the decision made now.
func TestDecisionByte(t *testing.T) {
	for over := -1; over < 20; over++ {
		for flags := range 8 {
			v := limit.Decision{Threshold: 9}
			v.Limited, v.Held, v.Rotating = flags&1 != 0, flags&2 != 0, flags&4 != 0
			b := decisionByte(v, over)
			d := Decisions{rules: 1, b: []byte{b}}
			now := limit.Decision{Threshold: 7}
			got, gotOver := d.replay(0, now, -1)
			switch {
			case over >= 15:
				if b != decisionUnkept || got != now || gotOver != -1 {
					t.Errorf("over %d: byte %#x, replayed %+v %d, want unkept: the decision of now", over, b, got, gotOver)
				}
			case got.Limited != v.Limited || got.Held != v.Held || got.Rotating != v.Rotating || gotOver != over || got.Threshold != 7:
				t.Errorf("over %d, flags %03b: replayed %+v %d, want %+v %d with the threshold of now", over, flags, got, gotOver, v, over)
			}
		}
	}
}

// Keeping decisions allocates nothing once a partition's Decisions has held a
// transaction's records: a committed transaction's are forgotten (DropBelow), their room
// kept for the next; replaying them allocates nothing either. (The records are accepted:
// an overflow record's header slice is its own allocation, TestRouteAllocs.)
func TestDecisionsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	f := newRuleFixture(t, Config{}, ruleSpec{
		Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow},
		[]limit.Config{{Window: time.Minute, Threshold: limit.MaxThreshold}},
	})
	_, recs := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	var out kgo.Record
	routeAll(f.r, recs, s) // the room for five records
	d.DropBelow(15)
	if n := testing.AllocsPerRun(100, func() {
		for _, rec := range recs {
			f.r.RouteInto(t0, rec, s, &out)
		}
		d.DropBelow(15)
	}); n != 0 {
		t.Errorf("%v allocations per transaction of five records", n)
	}
	routeAll(f.r, recs, s)
	s.Replay = true
	if n := testing.AllocsPerRun(100, func() {
		for _, rec := range recs {
			f.r.RouteInto(t0, rec, s, &out)
		}
	}); n != 0 {
		t.Errorf("%v allocations per five records replayed", n)
	}
	if d.Len() != 5 {
		t.Errorf("%d offsets held, want 5", d.Len())
	}
	// Records over a limit, their decisions kept: room once, then none.
	var limited limit.Decision
	limited.Limited = true
	over := func() {
		for off := range int64(100) {
			d.routing(f.r, off)
			d.note(0, limited, 0)
		}
		d.DropBelow(100)
	}
	over()
	if n := testing.AllocsPerRun(100, over); n != 0 {
		t.Errorf("%v allocations per transaction of 100 records over a limit", n)
	}
}

// The decisions a partition keeps take 8 bytes and a byte a rule for each record a rule
// was over for, whatever the offsets between records: 1,000 records 4,000 offsets apart
// (a compacted input, an upstream's aborted records skipped), of which 997 over the
// hour's limit of 3, hold 997 offsets and bytes. Before, every offset between two records
// took a byte a rule: 4 MB here, 2 GB for a default transaction of such records.
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
	if len(d.offs) != records-3 || len(d.b) != (records-3)*len(f.r.rules) {
		t.Errorf("%d records routed, %d offsets apart, %d over: %d offsets and %d bytes held, want %d of each",
			records, apart, records-3, len(d.offs), len(d.b), records-3)
	}
	if d.Len() != (records-1)*apart+1 {
		t.Errorf("the span held: %d offsets, want %d", d.Len(), (records-1)*apart+1)
	}
}

// A record far past the one routed before it (10,000 offsets on) leaves the decisions
// held before it: the fixture's five records (10..14: three accepted, two to overflow),
// then one of another team at 10,000, replayed go where they went. Before, a gap of more
// than 4,096 offsets started the decisions afresh from the far record, and the five were
// judged afresh against levels holding their own counts: all to overflow.
func TestDecisionsHeldAcrossAGap(t *testing.T) {
	f, recs := decisionsFixture(t)
	var d Decisions
	s := &Scratch{Decisions: &d}
	first := routeAll(f.r, recs, s)
	far := input(`{"team_id":"z"}`, "")
	far.Offset = 10_000
	var out kgo.Record
	f.r.RouteInto(t0, far, s, &out)
	s.Replay = true
	if again := routeAll(f.r, recs, s); !slices.Equal(again, first) {
		t.Errorf("replayed after a record 10,000 offsets on:\n got %v\nwant %v", again, first)
	}
}

// A transaction's decisions that took more room than keepDecisions are given back once
// it commits, their offsets counted with their bytes: 20,000 records over a rule's limit
// take 20,000 bytes and 160,000 of offsets. Before, only the bytes were weighed, and a
// one-rule partition kept up to eight times keepDecisions in offsets.
func TestDecisionsGiveBackALargeTransactionsRoom(t *testing.T) {
	f, _ := decisionsFixture(t)
	var d Decisions
	var limited limit.Decision
	limited.Limited = true
	const records = 20_000
	for off := range int64(records) {
		d.routing(f.r, off)
		d.note(0, limited, 0)
	}
	if len(d.offs) != records {
		t.Fatalf("%d records held, want %d", len(d.offs), records)
	}
	d.DropBelow(records)
	if cap(d.offs) != 0 || cap(d.b) != 0 {
		t.Errorf("after the commit, room kept for %d offsets and %d bytes, want none", cap(d.offs), cap(d.b))
	}
}
