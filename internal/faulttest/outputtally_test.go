package faulttest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOutputTallyCountsDeadLettersWithoutTheirID: dead letters the gate stripped of their
// headers are told apart by the input position they name (gate-source), as Check tells
// them; they all counted as one record, their id "" alike. A copy of one counts once, and
// a record with neither header counts each time.
func TestOutputTallyCountsDeadLettersWithoutTheirID(t *testing.T) {
	dead := func(src string) *kgo.Record {
		r := &kgo.Record{Topic: "dead", Value: []byte("not json")}
		if src != "" {
			r.Headers = []kgo.RecordHeader{{Key: sourceHeader, Value: []byte(src)}}
		}
		return r
	}
	withID := &kgo.Record{Topic: "acc", Value: []byte(`{"team_id":"t1"}`), Headers: []kgo.RecordHeader{{Key: IDHeader, Value: []byte("7")}}}
	outputs := []*kgo.Record{dead("in/0/1"), dead("in/0/2"), dead("in/1/1"), dead("in/0/1"), dead(""), dead(""), withID, withID}
	got := OutputTally(outputs, map[string]string{"dead": "dead_letter", "acc": "accepted"})
	if n := got[""]["dead_letter"]; n != 5 {
		t.Errorf("dead letters counted %d, want 5 (three positions, one copy, two with no header at all)", n)
	}
	if n := got["t1"]["accepted"]; n != 1 {
		t.Errorf("accepted counted %d, want 1 (one record, twice)", n)
	}
}
