package faulttest_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// badCase is one input record and where README "What happens to a record" says it goes.
type badCase struct {
	name    string
	rec     *kgo.Record // Topic and the id header are set by the test
	route   string      // accepted, overflow or dead_letter
	reason  string      // gate-error of a dead letter
	dropped bool        // dead letter without its value (gate-dropped)
}

// nested returns a JSON object nesting depth levels, team_id after them at the top.
func nested(depth int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"p":`)
	b.WriteString(strings.Repeat(`{"a":[`, depth/2))
	b.WriteString("1")
	b.WriteString(strings.Repeat(`]}`, depth/2))
	b.WriteString(`,"team_id":"deep"}`)
	return b.Bytes()
}

func headers(n, size int) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, n)
	for i := range hs {
		hs[i] = kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: bytes.Repeat([]byte{'v'}, size)}
	}
	return hs
}

// TestBadInputRecords sends each kind of bad record through real gate processes and
// checks it lands in its documented place with its reason, that the records around
// them are unaffected, and that each gate commits past them (it never stops on one).
func TestBadInputRecords(t *testing.T) {
	needGate(t)
	t.Parallel()
	const huge = 10 << 20
	tenMB := []byte(`{"team_id":"big","pad":"` + strings.Repeat("x", huge) + `"}`)
	byKeyFrom := []struct {
		keyFrom string
		cases   []badCase
	}{
		{"json:team_id", []badCase{
			{name: "good", rec: &kgo.Record{Key: []byte("k"), Value: []byte(`{"team_id":"t1"}`)}, route: "accepted"},
			{name: "empty value", rec: &kgo.Record{Value: []byte{}}, route: "dead_letter", reason: "not_json"},
			{name: "null value", rec: &kgo.Record{Key: []byte("k")}, route: "dead_letter", reason: "not_json"},
			{name: "not JSON", rec: &kgo.Record{Value: []byte("hello")}, route: "dead_letter", reason: "not_json"},
			{name: "JSON array", rec: &kgo.Record{Value: []byte(`[{"team_id":"t1"}]`)}, route: "dead_letter", reason: "not_json"},
			{name: "truncated JSON, team readable", rec: &kgo.Record{Value: []byte(`{"team_id":"t1","x":[1,2`)}, route: "accepted"},
			{name: "10 MB value", rec: &kgo.Record{Key: []byte("big"), Value: tenMB}, route: "dead_letter", reason: "rejected", dropped: true},
			{name: "nested 9,000 levels", rec: &kgo.Record{Value: nested(9_000)}, route: "accepted"},
			{name: "nested 20,000 levels", rec: &kgo.Record{Value: nested(20_000)}, route: "dead_letter", reason: "not_json"},
			{name: "invalid UTF-8 in the team", rec: &kgo.Record{Value: []byte("{\"team_id\":\"t\xff\xfe\"}")}, route: "accepted"},
			{name: "invalid UTF-8 elsewhere", rec: &kgo.Record{Value: []byte("{\"team_id\":\"t1\",\"x\":\"\xc3\x28\"}")}, route: "accepted"},
			{name: "team true", rec: &kgo.Record{Value: []byte(`{"team_id":true}`)}, route: "dead_letter", reason: "field_type"},
			{name: "team object", rec: &kgo.Record{Value: []byte(`{"team_id":{"id":1}}`)}, route: "dead_letter", reason: "field_type"},
			{name: "team array", rec: &kgo.Record{Value: []byte(`{"team_id":[1]}`)}, route: "dead_letter", reason: "field_type"},
			{name: "team number", rec: &kgo.Record{Value: []byte(`{"team_id":42}`)}, route: "accepted"},
			{name: "team null", rec: &kgo.Record{Value: []byte(`{"team_id":null}`)}, route: "dead_letter", reason: "field_missing"},
			{name: "team absent", rec: &kgo.Record{Value: []byte(`{"team":"t1"}`)}, route: "dead_letter", reason: "field_missing"},
			{name: "team empty", rec: &kgo.Record{Value: []byte(`{"team_id":""}`)}, route: "dead_letter", reason: "field_empty"},
			{name: "team 300 bytes", rec: &kgo.Record{Value: []byte(`{"team_id":"` + strings.Repeat("t", 300) + `"}`)}, route: "dead_letter", reason: "key_too_long"},
			{name: "null key", rec: &kgo.Record{Value: []byte(`{"team_id":"t1"}`)}, route: "accepted"},
			{name: "5,000 small headers", rec: &kgo.Record{Value: []byte(`{"team_id":"t1"}`), Headers: headers(5_000, 8)}, route: "accepted"},
			// 5,000 headers of 250 bytes: 1.3 MB, more than any output topic takes.
			{name: "5,000 large headers", rec: &kgo.Record{Value: []byte(`{"team_id":"t1"}`), Headers: headers(5_000, 250)}, route: "dead_letter", reason: "rejected", dropped: true},
		}},
		{"key", []badCase{
			{name: "key", rec: &kgo.Record{Key: []byte("team-k"), Value: []byte("anything")}, route: "accepted"},
			{name: "null key", rec: &kgo.Record{Value: []byte(`{"team_id":"t1"}`)}, route: "dead_letter", reason: "key_missing"},
			{name: "empty key", rec: &kgo.Record{Key: []byte{}, Value: []byte(`{"team_id":"t1"}`)}, route: "dead_letter", reason: "key_missing"},
		}},
		{"header:team", []badCase{
			{name: "header", rec: &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "team", Value: []byte("t1")}}}, route: "accepted"},
			{name: "no header", rec: &kgo.Record{Value: []byte("x")}, route: "dead_letter", reason: "header_missing"},
			{name: "empty header", rec: &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "team", Value: nil}}}, route: "dead_letter", reason: "field_empty"},
		}},
	}

	// The broker takes records up to 30 MB, so the 10 MB one reaches the input; the gates
	// send batches of at most GATE_KAFKA_MAX_MESSAGE_BYTES (default 1048588), so it is
	// rejected for good on every output topic.
	var topics []string
	for i := range byKeyFrom {
		topics = append(topics, fmt.Sprintf("in%d", i), fmt.Sprintf("acc%d", i), fmt.Sprintf("ovf%d", i), fmt.Sprintf("dlq%d", i))
	}
	c := faulttest.NewCluster(t, kfake.SeedTopics(1, topics...), kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(30 << 20)}))
	rs := redistest.Start(t)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(30<<20), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	type gateRun struct {
		g     *faulttest.Gate
		in    string
		cases []badCase
	}
	var runs []gateRun
	for i, k := range byKeyFrom {
		in := fmt.Sprintf("in%d", i)
		g := faulttest.StartGate(t, gateBin, k.keyFrom, map[string]string{
			"GATE_KAFKA_BROKERS":           strings.Join(c.ListenAddrs(), ","),
			"GATE_REDIS_URLS":              rs.URL(),
			"GATE_HTTP_ADDR":               "127.0.0.1:0",
			"GATE_GROUP_ID":                "bad-" + strconv.Itoa(i),
			"GATE_KEY_FROM":                k.keyFrom,
			"GATE_INPUT_TOPIC":             in,
			"GATE_ACCEPTED_TOPIC":          fmt.Sprintf("acc%d", i),
			"GATE_OVERFLOW_TOPIC":          fmt.Sprintf("ovf%d", i),
			"GATE_DEAD_LETTER_TOPIC":       fmt.Sprintf("dlq%d", i),
			"GATE_COMMIT_INTERVAL":         "100ms",
			"GATE_TICK_INTERVAL":           "100ms",
			"GATE_SYNC_INTERVAL":           "1s",
			"GATE_WINDOW":                  "10s",
			"GATE_REDIS_PREFIX":            "bad" + strconv.Itoa(i),
			"GATE_KAFKA_MAX_MESSAGE_BYTES": "1048588",
		})
		runs = append(runs, gateRun{g, in, k.cases})
		// One record at a time, in order, so each case has a known offset.
		for j, bc := range k.cases {
			r := bc.rec
			r.Topic = in
			r.Headers = append([]kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(j))}}, r.Headers...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := prod.ProduceSync(ctx, r).FirstErr()
			cancel()
			if err != nil {
				t.Fatalf("%s: producing %q: %v", k.keyFrom, bc.name, err)
			}
		}
	}

	for i, run := range runs {
		faulttest.WaitFor(t, 60*time.Second, run.g.Name+" commits past every bad record", func() bool {
			gi := c.GroupInfo("bad-" + strconv.Itoa(i))
			return gi != nil && gi.Commits[run.in][0].Offset == int64(len(run.cases))
		})
		outs := []string{fmt.Sprintf("acc%d", i), fmt.Sprintf("ovf%d", i), fmt.Sprintf("dlq%d", i)}
		rep := faulttest.Conservation(t, c, []kgo.Opt{kgo.FetchMaxBytes(64 << 20)}, run.in, outs...)
		t.Logf("%s: %s", run.g.Name, rep)
		recordFigures(t.Name()+"/"+run.g.Name, rep)
		if !rep.OK() {
			t.Errorf("%s: %s", run.g.Name, rep)
		}
		all := faulttest.ReadTopics(t, c, 60*time.Second, []kgo.Opt{kgo.FetchMaxBytes(64 << 20)}, outs...)
		for j, bc := range run.cases {
			id := strconv.Itoa(j)
			at := rep.OutputAt[id]
			if len(at) != 1 {
				continue // reported above
			}
			var out *kgo.Record
			for _, r := range all {
				if r.Topic == at[0].Topic && r.Offset == at[0].Offset {
					out = r
				}
			}
			checkBadCase(t, run.g.Name, bc, run.in, int64(j), i, out)
		}
		if run.g.Exited() {
			t.Errorf("gate %s exited on bad input:\n%s", run.g.Name, run.g.Logs())
		}
	}
}

func checkBadCase(t *testing.T, gate string, bc badCase, in string, off int64, i int, out *kgo.Record) {
	t.Helper()
	name := gate + "/" + bc.name
	wantTopic := map[string]string{"accepted": "acc", "overflow": "ovf", "dead_letter": "dlq"}[bc.route] + strconv.Itoa(i)
	if out.Topic != wantTopic {
		errHdr, _ := faulttest.Header(out, "gate-error")
		t.Errorf("%s: went to %s (gate-error %q), want %s", name, out.Topic, errHdr, wantTopic)
		return
	}
	errHdr, _ := faulttest.Header(out, "gate-error")
	if errHdr != bc.reason {
		t.Errorf("%s: gate-error %q, want %q", name, errHdr, bc.reason)
	}
	if bc.route == "dead_letter" {
		if src, _ := faulttest.Header(out, "gate-source"); src != fmt.Sprintf("%s/0/%d", in, off) {
			t.Errorf("%s: gate-source %q, want %s/0/%d", name, src, in, off)
		}
		if detail, _ := faulttest.Header(out, "gate-error-detail"); detail == "" {
			t.Errorf("%s: no gate-error-detail", name)
		}
	}
	dropped, hasDropped := faulttest.Header(out, "gate-dropped")
	switch {
	case bc.dropped:
		if len(out.Value) != 0 || !hasDropped || !strings.Contains(dropped, "value_bytes="+strconv.Itoa(len(bc.rec.Value))) {
			t.Errorf("%s: %d-byte value, gate-dropped %q: want no value and its size", name, len(out.Value), dropped)
		}
	case hasDropped:
		t.Errorf("%s: gate-dropped %q on a record kept whole", name, dropped)
	case !bytes.Equal(out.Value, bc.rec.Value):
		t.Errorf("%s: value changed (%d bytes, want %d)", name, len(out.Value), len(bc.rec.Value))
	}
	if bc.route == "accepted" {
		if !bytes.Equal(out.Key, bc.rec.Key) {
			t.Errorf("%s: key %q, want %q", name, out.Key, bc.rec.Key)
		}
		if len(out.Headers) != len(bc.rec.Headers) {
			t.Errorf("%s: %d headers, want the input's %d", name, len(out.Headers), len(bc.rec.Headers))
		}
	}
}
