package outcome

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzAppendJSONIsEncodingJSON is TestAppendJSONIsEncodingJSON for any strings, counts
// and times a row may hold (a key is a record's field, any bytes a producer wrote): the
// hand-written encoder writes what encoding/json writes, byte for byte, and Decode reads
// it back as encoding/json would.
func FuzzAppendJSONIsEncodingJSON(f *testing.F) {
	f.Add("g/1/2", "g", "42", "42", "", "accepted", "allowed", int64(3), int64(9), int64(0), int64(time.Minute), "static", false)
	f.Add("g/1/2", "g\"<>&", "t\x00\n\\é\u2028", "bad\xffutf8", "r", "topic:x", "forced", int64(-1), int64(1<<62), int64(7), int64(123), "override", true)
	f.Fuzz(func(t *testing.T, id, gate, team, key, rule, outcome, reason string, records, size, threshold, span int64, source string, folded bool) {
		r := Row{Schema: SchemaVersion, ID: id, Gate: gate, IntervalStart: t0, IntervalEnd: t0.Add(time.Duration(span)),
			Team: team, Key: key, Rule: rule, Outcome: outcome, Reason: reason, Records: records, Bytes: size,
			Threshold: threshold, ThresholdSource: source, Folded: folded}
		want, err := json.Marshal(&r)
		if err != nil {
			return // a time encoding/json refuses (a year past 9999): no row the gate writes
		}
		got := AppendJSON(nil, &r)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
		}
		var back Row
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		d, err := Decode(got)
		if err != nil {
			t.Fatalf("Decode(%s): %v", got, err)
		}
		if d != back {
			t.Fatalf("Decode(%s) = %+v, want %+v", got, d, back)
		}
	})
}
