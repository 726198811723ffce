package route

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

const (
	topicIn       = "events_raw"
	topicAccepted = "events_accepted"
	topicOverflow = "events_overflow"
	topicDead     = "events_dead_letter"
	eventsDir     = "../../testdata/events"
)

var t0 = time.Date(2024, 6, 10, 6, 0, 0, 0, time.UTC)

type fixture struct {
	r   *Router
	lim *limit.Limiter
	clk *clock.Fake
	reg *prometheus.Registry
}

// newFixture returns a router on a fresh limiter (fake clock at t0) and registry. cfg's
// topics default to the test topics.
func newFixture(t testing.TB, cfg Config, lcfg limit.Config) *fixture {
	t.Helper()
	if cfg.AcceptedTopic == "" {
		cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic = topicAccepted, topicOverflow, topicDead
	}
	f := &fixture{clk: clock.NewFake(t0), reg: prometheus.NewRegistry()}
	var err error
	if f.lim, err = limit.New(lcfg, f.clk, f.reg); err != nil {
		t.Fatal(err)
	}
	if f.r, err = New(cfg, f.lim, f.reg); err != nil {
		t.Fatal(err)
	}
	return f
}

// counts returns the records the limiter counted per team since the last sweep.
func (f *fixture) counts() map[string]int64 {
	var sw limit.Sweep
	f.lim.Sweep(f.clk.Now(), &sw)
	m := make(map[string]int64)
	for _, c := range sw.Counts {
		m[c.Team] += c.N
	}
	return m
}

// counter returns the value of the counter name{route, reason} in reg (0 if absent).
func counter(t testing.TB, reg *prometheus.Registry, name, route, reason string) float64 {
	t.Helper()
	return metric(t, reg, name, map[string]string{"route": route, "reason": reason})
}

// metric returns the value of the first counter name in reg whose labels include want
// (0 if none).
func metric(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func input(value, key string, hdrs ...string) *kgo.Record {
	rec := &kgo.Record{
		Topic: topicIn, Partition: 3, Offset: 1234, LeaderEpoch: 5,
		Timestamp: time.Date(2024, 6, 10, 5, 59, 58, 123456789, time.UTC),
		Value:     []byte(value),
	}
	if key != "" {
		rec.Key = []byte(key)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: hdrs[i], Value: []byte(hdrs[i+1])})
	}
	return rec
}

// checkOutput checks what every output record must be: a new record on topic with the
// input's value (the same bytes), timestamp and headers in order (the input's slice,
// capped, or a new one), followed by exactly gate (key, value pairs), and no partition or
// context set.
func checkOutput(t testing.TB, in, out *kgo.Record, topic string, gate ...string) {
	t.Helper()
	if out == nil || out == in {
		t.Fatalf("output record %p, input %p: want a new record", out, in)
	}
	if out.Topic != topic {
		t.Errorf("topic %q, want %q", out.Topic, topic)
	}
	if !bytes.Equal(out.Value, in.Value) || (len(in.Value) > 0 && &out.Value[0] != &in.Value[0]) {
		t.Errorf("value is not the input's bytes")
	}
	if !out.Timestamp.Equal(in.Timestamp) || out.Timestamp != in.Timestamp {
		t.Errorf("timestamp %v, want %v", out.Timestamp, in.Timestamp)
	}
	if out.Partition != 0 || out.Context != nil || out.Offset != 0 {
		t.Errorf("partition %d, offset %d, context %v: want them unset", out.Partition, out.Offset, out.Context)
	}
	want := slices.Clone(in.Headers)
	for i := 0; i+1 < len(gate); i += 2 {
		want = append(want, kgo.RecordHeader{Key: gate[i], Value: []byte(gate[i+1])})
	}
	if !slices.EqualFunc(out.Headers, want, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
	}) {
		t.Errorf("headers %s, want %s", fmtHeaders(out.Headers), fmtHeaders(want))
	}
	// Shared only as fill shares it: when the gate adds no header, and capped, so that an
	// append (a retry's header) copies it instead of writing into the input's array.
	if len(in.Headers) > 0 && len(out.Headers) > 0 && &out.Headers[0] == &in.Headers[0] {
		if len(gate) > 0 {
			t.Errorf("output with the gate's headers shares the input's header slice")
		} else if cap(out.Headers) != len(out.Headers) {
			t.Errorf("output shares the input's header slice with room for %d more: an append would write into the input's", cap(out.Headers)-len(out.Headers))
		}
	}
}

func fmtHeaders(h []kgo.RecordHeader) string {
	var b strings.Builder
	for _, x := range h {
		fmt.Fprintf(&b, "[%s=%q]", x.Key, x.Value)
	}
	return b.String()
}

// eventCases is what json:team_id makes of each file in testdata/events: a team for an
// accepted record, a reason for a dead letter. Every file must be listed.
var eventCases = map[string]struct{ team, reason string }{
	"team_id_int.json":        {"2", ReasonAllowed},
	"team_id_string.json":     {"42", ReasonAllowed},
	"team_id_float.json":      {"-4.20e1", ReasonAllowed},
	"team_id_escaped.json":    {`te"am`, ReasonAllowed},
	"team_id_unicode.json":    {"équipe-東京-🚀", ReasonAllowed},
	"nested_properties.json":  {"7", ReasonAllowed},
	"large_team_id_last.json": {"123456", ReasonAllowed},
	"duplicate_team_id.json":  {"", ReasonAmbiguousTeam},
	"invalid_utf8.json":       {"t\xff\xfeam", ReasonAllowed},
	"identify_team_1001.json": {"1001", ReasonAllowed},
	"team_id_big_int.json":    {"9007199254740993", ReasonAllowed},
	"team_id_too_long.json":   {"", ReasonKeyTooLong},
	"team_id_missing.json":    {"", ReasonFieldMissing},
	"team_id_null.json":       {"", ReasonFieldMissing},
	"team_id_bool.json":       {"", ReasonFieldType},
	"team_id_object.json":     {"", ReasonFieldType},
	"team_id_empty.json":      {"", ReasonFieldEmpty},
	"top_level_array.json":    {"", ReasonNotJSON},
	"truncated.json":          {"", ReasonNotJSON},
	"trailing_garbage.json":   {"", ReasonNotJSON},
	"not_json.txt":            {"", ReasonNotJSON},
	"empty.json":              {"", ReasonNotJSON},
	"binary.bin":              {"", ReasonNotJSON},
}

func readEvents(t testing.TB) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(eventsDir)
	if err != nil {
		t.Fatalf("reading sample events: %v", err)
	}
	m := make(map[string][]byte)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(eventsDir, e.Name()))
		if err != nil {
			t.Fatalf("reading sample event: %v", err)
		}
		m[e.Name()] = b
	}
	return m
}

func TestSampleEvents(t *testing.T) {
	t.Parallel()
	events := readEvents(t)
	for name := range eventCases {
		if _, ok := events[name]; !ok {
			t.Errorf("eventCases lists %s, not in %s", name, eventsDir)
		}
	}
	for _, validate := range []bool{true, false} {
		t.Run(fmt.Sprintf("validate=%v", validate), func(t *testing.T) {
			sampleEvents(t, events, validate)
		})
	}
}

// laxCases are the sample events that route differently without GATE_VALIDATE_JSON: the
// team is readable, so the record is routed though the value is not valid JSON. None now:
// trailing_garbage.json, two events in one record, was routed as team 2's one record,
// team 3's uncounted (a review); more than white space after the object is not_json.
var laxCases = map[string]struct{ team, reason string }{}

func sampleEvents(t *testing.T, events map[string][]byte, validate bool) {
	f := newFixture(t, Config{ValidateJSON: validate}, limit.Config{})
	var s Scratch
	for name, value := range events {
		want, ok := eventCases[name]
		if !ok {
			t.Errorf("%s/%s: no entry in eventCases", eventsDir, name)
			continue
		}
		if lax, ok := laxCases[name]; ok && !validate {
			want.team, want.reason = lax.team, lax.reason
		}
		in := &kgo.Record{Topic: topicIn, Partition: 1, Offset: 99, Key: []byte("k"), Value: value,
			Headers: []kgo.RecordHeader{{Key: "token", Value: []byte("phc")}}}
		out, o := f.r.Route(t0, in, &s)
		if o.Reason != want.reason || o.Team != want.team {
			t.Errorf("%s: reason %q team %q, want %q %q", name, o.Reason, o.Team, want.reason, want.team)
			continue
		}
		if want.reason == ReasonAllowed {
			checkOutput(t, in, out, topicAccepted)
			continue
		}
		if o.Route != DeadLetter || o.Team != "" {
			t.Errorf("%s: route %v team %q", name, o.Route, o.Team)
		}
		// The detail's wording is tested in TestTeamJSON.
		detail := string(headerValue(out, HeaderErrorDetail))
		if detail == "" {
			t.Errorf("%s: no %s header", name, HeaderErrorDetail)
		}
		checkOutput(t, in, out, topicDead, HeaderError, want.reason, HeaderErrorDetail, detail, HeaderSource, "events_raw/1/99")
	}
}

func headerValue(rec *kgo.Record, key string) []byte {
	for _, h := range rec.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// A value nested far deeper than maxDepth (8 MB of '[', past Go's 1 GB stack limit were
// gjson.Valid to recurse through it) is dead-lettered at once.
func TestDeepValue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, limit.Config{})
	in := input(`{"team_id":1,"a":`+strings.Repeat("[", 8<<20), "")
	out, o := f.r.Route(t0, in, nil)
	if o.Reason != ReasonNotJSON || string(headerValue(out, HeaderErrorDetail)) != "value nests deeper than 10000 levels" {
		t.Errorf("%+v, detail %q", o, headerValue(out, HeaderErrorDetail))
	}
}

func TestOutputRecord(t *testing.T) {
	t.Parallel()
	const value = `{"team_id":2,"event":"$pageview"}`
	hdrs := []string{"token", "phc_1", "event", "$pageview", "token", "dup"}
	tests := []struct {
		name    string
		cfg     Config
		in      *kgo.Record
		topic   string
		key     string // the output's key; "" means nil
		gate    []string
		outcome Outcome
	}{
		{"accepted keeps key", Config{}, input(value, "k1", hdrs...), topicAccepted, "k1", nil,
			Outcome{Route: Accepted, Reason: ReasonAllowed, Team: "2", Enforced: Accepted, EnforcedReason: ReasonAllowed}},
		{"accepted no headers no key", Config{}, input(value, ""), topicAccepted, "", nil,
			Outcome{Route: Accepted, Reason: ReasonAllowed, Team: "2", Enforced: Accepted, EnforcedReason: ReasonAllowed}},
		{"overflow drops key", Config{ForceOverflow: []string{"2"}}, input(value, "k1", hdrs...), topicOverflow, "",
			[]string{HeaderOverflowReason, ReasonForced},
			Outcome{Route: Overflow, Reason: ReasonForced, Team: "2", Enforced: Overflow, EnforcedReason: ReasonForced}},
		{"overflow keeps key", Config{ForceOverflow: []string{"2"}, OverflowKeepKey: true}, input(value, "k1"), topicOverflow, "k1",
			[]string{HeaderOverflowReason, ReasonForced},
			Outcome{Route: Overflow, Reason: ReasonForced, Team: "2", Enforced: Overflow, EnforcedReason: ReasonForced}},
		{"dead letter keeps key", Config{}, input(`{"team_id":true}`, "k1", hdrs...), topicDead, "k1",
			[]string{HeaderError, ReasonFieldType, HeaderErrorDetail, `json field "team_id" is a boolean, want a string or a number`,
				HeaderSource, "events_raw/3/1234"},
			Outcome{Route: DeadLetter, Reason: ReasonFieldType, Enforced: DeadLetter, EnforcedReason: ReasonFieldType}},
		{"dead letter empty value", Config{}, input("", ""), topicDead, "",
			[]string{HeaderError, ReasonNotJSON, HeaderErrorDetail, "value is empty", HeaderSource, "events_raw/3/1234"},
			Outcome{Route: DeadLetter, Reason: ReasonNotJSON, Enforced: DeadLetter, EnforcedReason: ReasonNotJSON}},
		{"dry run dead letter goes to accepted unchanged", Config{DryRun: true}, input("nope", "k1", hdrs...), topicAccepted, "k1", nil,
			Outcome{Route: Accepted, Reason: ReasonDryRun, Enforced: DeadLetter, EnforcedReason: ReasonNotJSON}},
		{"dry run forced goes to accepted unchanged", Config{DryRun: true, ForceOverflow: []string{"2"}}, input(value, "k1", hdrs...), topicAccepted, "k1", nil,
			Outcome{Route: Accepted, Reason: ReasonDryRun, Team: "2", Enforced: Overflow, EnforcedReason: ReasonForced}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.cfg, limit.Config{})
			inHdrs := slices.Clone(tt.in.Headers)
			out, o := f.r.Route(t0, tt.in, nil)
			checkOutput(t, tt.in, out, tt.topic, tt.gate...)
			if string(out.Key) != tt.key || (tt.key == "") != (out.Key == nil) {
				t.Errorf("key %q, want %q", out.Key, tt.key)
			}
			if tt.key != "" && &out.Key[0] != &tt.in.Key[0] {
				t.Errorf("key is a copy, want the input's bytes")
			}
			o.Decision = limit.Decision{}
			if o != tt.outcome {
				t.Errorf("outcome %+v, want %+v", o, tt.outcome)
			}
			if !slices.EqualFunc(tt.in.Headers, inHdrs, func(a, b kgo.RecordHeader) bool {
				return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
			}) {
				t.Errorf("input headers changed")
			}
			if tt.in.Topic != topicIn {
				t.Errorf("input topic changed to %q", tt.in.Topic)
			}
		})
	}
}

// Divert mode: a heavy team over a small threshold overflows, whole, from its
// threshold-th record on, and every record counts; another team is unaffected.
// Cap mode: the same, but only accepted records count.
func TestRateLimited(t *testing.T) {
	t.Parallel()
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			const threshold, sent = 10, 25
			f := newFixture(t, Config{}, limit.Config{Threshold: threshold, Mode: mode})
			var s Scratch
			for i := range sent {
				in := input(`{"team_id":"heavy","i":`+fmt.Sprint(i)+`}`, "k")
				out, o := f.r.Route(t0, in, &s)
				if i < threshold {
					if o.Route != Accepted || o.Reason != ReasonAllowed || o.Decision.Limited {
						t.Fatalf("record %d: %+v, want allowed", i, o)
					}
					checkOutput(t, in, out, topicAccepted)
					continue
				}
				if o.Route != Overflow || o.Reason != ReasonRateLimited || !o.Decision.Limited || o.Decision.Threshold != threshold {
					t.Fatalf("record %d: %+v, want rate limited", i, o)
				}
				checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonRateLimited)
				if out.Key != nil {
					t.Errorf("record %d: overflow kept the key", i)
				}
			}
			if _, o := f.r.Route(t0, input(`{"team_id":"light"}`, ""), &s); o.Reason != ReasonAllowed {
				t.Errorf("another team: %+v", o)
			}
			want := map[string]int64{"heavy": sent, "light": 1}
			if mode == limit.Cap {
				want["heavy"] = threshold
			}
			if got := f.counts(); !mapsEqual(got, want) {
				t.Errorf("limiter counts %v, want %v", got, want)
			}
			if got := counter(t, f.reg, "gate_records_total", "overflow", ReasonRateLimited); got != sent-threshold {
				t.Errorf("gate_records_total overflow/rate_limited = %v, want %d", got, sent-threshold)
			}
			if got := counter(t, f.reg, "gate_records_total", "accepted", ReasonAllowed); got != threshold+1 {
				t.Errorf("gate_records_total accepted/allowed = %v, want %d", got, threshold+1)
			}
		})
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A forced team always overflows with reason forced. Its records count in Divert mode
// (every record counts there) and not in Cap mode (only accepted records count).
func TestForcedOverflow(t *testing.T) {
	t.Parallel()
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Config{ForceOverflow: []string{"9", "phc_x:u1"}}, limit.Config{Threshold: 100, Mode: mode})
			var s Scratch
			for range 5 {
				in := input(`{"team_id":9}`, "k", "h", "v")
				out, o := f.r.Route(t0, in, &s)
				if o.Route != Overflow || o.Reason != ReasonForced || o.Team != "9" || o.Decision.Threshold != 100 {
					t.Fatalf("forced: %+v", o)
				}
				checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonForced)
			}
			if _, o := f.r.Route(t0, input(`{"team_id":10}`, ""), &s); o.Reason != ReasonAllowed {
				t.Errorf("unforced team: %+v", o)
			}
			want := map[string]int64{"9": 5, "10": 1}
			if mode == limit.Cap {
				delete(want, "9")
			}
			if got := f.counts(); !mapsEqual(got, want) {
				t.Errorf("limiter counts %v, want %v", got, want)
			}
			if got := counter(t, f.reg, "gate_records_total", "overflow", ReasonForced); got != 5 {
				t.Errorf("gate_records_total overflow/forced = %v, want 5", got)
			}
		})
	}
	// A composite key is matched whole.
	f := newFixture(t, Config{KeyFrom: mustKeyFrom(t, "json:token+distinct_id"), ForceOverflow: []string{"phc_x:u1"}}, limit.Config{})
	if _, o := f.r.Route(t0, input(`{"token":"phc_x","distinct_id":"u1"}`, ""), &Scratch{}); o.Reason != ReasonForced {
		t.Errorf("forced composite key: %+v", o)
	}
}

// A record whose team field appears twice is dead-lettered as ambiguous_team, counts
// toward no team, and in dry run is accepted and counted as diverted.
func TestAmbiguousTeam(t *testing.T) {
	t.Parallel()
	const value = `{"team_id":"a","event":"$pageview","team_id":"b"}`
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Config{DryRun: dry}, limit.Config{})
			in := input(value, "k", "h", "v")
			out, o := f.r.Route(t0, in, &Scratch{})
			if o.Enforced != DeadLetter || o.EnforcedReason != ReasonAmbiguousTeam || o.Team != "" {
				t.Fatalf("outcome %+v", o)
			}
			if got := f.counts(); len(got) != 0 {
				t.Errorf("limiter counted %v", got)
			}
			if dry {
				checkOutput(t, in, out, topicAccepted)
				if got := counter(t, f.reg, "gate_dry_run_diverted_total", "dead_letter", ReasonAmbiguousTeam); got != 1 {
					t.Errorf("gate_dry_run_diverted_total dead_letter/ambiguous_team = %v, want 1", got)
				}
				return
			}
			checkOutput(t, in, out, topicDead, HeaderError, ReasonAmbiguousTeam,
				HeaderErrorDetail, `json field "team_id" appears more than once`, HeaderSource, "events_raw/3/1234")
			if got := counter(t, f.reg, "gate_records_total", "dead_letter", ReasonAmbiguousTeam); got != 1 {
				t.Errorf("gate_records_total dead_letter/ambiguous_team = %v, want 1", got)
			}
		})
	}
}

// Composite teams whose joined values would read the same are distinct teams: each
// counts on its own, and GATE_FORCE_OVERFLOW names one by its encoded key.
func TestCompositeTeamsDistinct(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{KeyFrom: mustKeyFrom(t, "json:token+distinct_id"), ForceOverflow: []string{"phc:user%3A1"}},
		limit.Config{Threshold: 100})
	var s Scratch
	if _, o := f.r.Route(t0, input(`{"token":"phc","distinct_id":"user:1"}`, ""), &s); o.Reason != ReasonForced || o.Team != "phc:user%3A1" {
		t.Errorf("forced composite team: %+v", o)
	}
	if _, o := f.r.Route(t0, input(`{"token":"phc:user","distinct_id":"1"}`, ""), &s); o.Reason != ReasonAllowed || o.Team != "phc%3Auser:1" {
		t.Errorf("other composite team: %+v", o)
	}
	want := map[string]int64{"phc:user%3A1": 1, "phc%3Auser:1": 1}
	if got := f.counts(); !mapsEqual(got, want) {
		t.Errorf("limiter counts %v, want %v", got, want)
	}
}

// Dry run: every record goes to accepted unchanged, the limiter is checked as when
// enforcing, and what enforcement would have done shows in the outcome and the metrics.
func TestDryRun(t *testing.T) {
	t.Parallel()
	const threshold = 3
	f := newFixture(t, Config{DryRun: true, ForceOverflow: []string{"f"}}, limit.Config{Threshold: threshold})
	var s Scratch
	for i := range 2 * threshold {
		in := input(`{"team_id":"heavy"}`, "k", "h", "v")
		out, o := f.r.Route(t0, in, &s)
		checkOutput(t, in, out, topicAccepted)
		if string(out.Key) != "k" {
			t.Errorf("record %d: key %q, want kept", i, out.Key)
		}
		limited := i >= threshold
		if o.Route != Accepted || o.Decision.Limited != limited || o.Team != "heavy" {
			t.Errorf("record %d: %+v", i, o)
		}
		wantReason, wantEnf, wantEnfReason := ReasonAllowed, Accepted, ReasonAllowed
		if limited {
			wantReason, wantEnf, wantEnfReason = ReasonDryRun, Overflow, ReasonRateLimited
		}
		if o.Reason != wantReason || o.Enforced != wantEnf || o.EnforcedReason != wantEnfReason {
			t.Errorf("record %d: reason %q enforced %v %q, want %q %v %q", i, o.Reason, o.Enforced, o.EnforcedReason,
				wantReason, wantEnf, wantEnfReason)
		}
	}
	for _, v := range []string{`{"team_id":"f"}`, `{"team_id":"f"}`, `not json`, `{"team_id":null}`} {
		in := input(v, "")
		out, o := f.r.Route(t0, in, &s)
		checkOutput(t, in, out, topicAccepted)
		if o.Route != Accepted || o.Reason != ReasonDryRun {
			t.Errorf("%s: %+v", v, o)
		}
	}
	if got, want := f.counts(), map[string]int64{"heavy": 2 * threshold, "f": 2}; !mapsEqual(got, want) {
		t.Errorf("limiter counts %v, want %v", got, want)
	}
	for _, c := range []struct {
		name, route, reason string
		want                float64
	}{
		{"gate_records_total", "accepted", ReasonAllowed, threshold},
		{"gate_records_total", "accepted", ReasonDryRun, threshold + 4},
		{"gate_records_total", "overflow", ReasonRateLimited, 0},
		{"gate_records_total", "dead_letter", ReasonNotJSON, 0},
		{"gate_dry_run_diverted_total", "overflow", ReasonRateLimited, threshold},
		{"gate_dry_run_diverted_total", "overflow", ReasonForced, 2},
		{"gate_dry_run_diverted_total", "dead_letter", ReasonNotJSON, 1},
		{"gate_dry_run_diverted_total", "dead_letter", ReasonFieldMissing, 1},
	} {
		if got := counter(t, f.reg, c.name, c.route, c.reason); got != c.want {
			t.Errorf("%s{route=%q,reason=%q} = %v, want %v", c.name, c.route, c.reason, got, c.want)
		}
	}
	// A record the broker refused has nowhere to go but the dead-letter topic, dry run or not.
	if out := f.r.DeadLetter(input("x", ""), "", "too large"); out.Topic != topicDead {
		t.Errorf("DeadLetter in dry run: topic %q", out.Topic)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{KeyFrom: mustKeyFrom(t, "header:team"), ForceOverflow: []string{"f"}}, limit.Config{Threshold: 1})
	var s Scratch
	for _, in := range []*kgo.Record{
		input("", "", "team", "a"), // allowed
		input("", "", "team", "a"), // rate limited
		input("", "", "team", "f"), // forced
		input("", "", "team", ""),  // field empty
		input("", ""),              // header missing
		input("", "", "team", strings.Repeat("x", 300)),
	} {
		f.r.Route(t0, in, &s)
	}
	f.r.DeadLetter(input("", ""), "message_too_large", "")
	f.r.CountDeadLettered()
	want := map[[2]string]float64{
		{"accepted", ReasonAllowed}:          1,
		{"overflow", ReasonRateLimited}:      1,
		{"overflow", ReasonForced}:           1,
		{"dead_letter", ReasonFieldEmpty}:    1,
		{"dead_letter", ReasonHeaderMissing}: 1,
		{"dead_letter", ReasonKeyTooLong}:    1,
		{"dead_letter", ReasonRejected}:      1,
	}
	// Every label set exists from the start, at zero if unused.
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, fam := range fams {
		series[fam.GetName()] = len(fam.GetMetric())
	}
	if series["gate_records_total"] != int(numReasons-1) || series["gate_dry_run_diverted_total"] != 12 {
		t.Errorf("series: %v", series)
	}
	for c := reasonAllowed; c < numReasons; c++ {
		k := [2]string{c.route().String(), c.String()}
		if got := counter(t, f.reg, "gate_records_total", k[0], k[1]); got != want[k] {
			t.Errorf("gate_records_total%v = %v, want %v", k, got, want[k])
		}
	}
}

func TestDeadLetterMethod(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, limit.Config{})
	in := input(`{"team_id":2}`, "k", "h", "v")
	in.Topic, in.Partition, in.Offset = "raw", 11, 1<<40
	out := f.r.DeadLetter(in, "", "message too large for topic events_accepted")
	checkOutput(t, in, out, topicDead, HeaderError, ReasonRejected,
		HeaderErrorDetail, "message too large for topic events_accepted", HeaderSource, "raw/11/1099511627776")
	if string(out.Key) != "k" {
		t.Errorf("key %q", out.Key)
	}
	out = f.r.DeadLetter(in, "message_too_large", "")
	checkOutput(t, in, out, topicDead, HeaderError, "message_too_large", HeaderErrorDetail, "", HeaderSource, "raw/11/1099511627776")
	// Built, not counted: the caller counts a dead letter once it is written.
	if got := counter(t, f.reg, "gate_records_total", "dead_letter", ReasonRejected); got != 0 {
		t.Errorf("dead_letter/rejected = %v after building two, want 0", got)
	}
	f.r.CountDeadLettered()
	if got := counter(t, f.reg, "gate_records_total", "dead_letter", ReasonRejected); got != 1 {
		t.Errorf("dead_letter/rejected = %v after one counted, want 1", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	lim, err := limit.New(limit.Config{}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := Config{AcceptedTopic: "a", OverflowTopic: "o", DeadLetterTopic: "d"}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no topics", Config{}, []string{"accepted topic: required", "overflow topic: required", "dead-letter topic: required"}},
		{"no overflow", with(func(c *Config) { c.OverflowTopic = "" }), []string{"overflow topic: required"}},
		{"same accepted and overflow", with(func(c *Config) { c.OverflowTopic = "a" }),
			[]string{`accepted and overflow topics are both "a": they must differ`}},
		{"same overflow and dead letter", with(func(c *Config) { c.DeadLetterTopic = "o" }),
			[]string{`overflow and dead-letter topics are both "o"`}},
		{"all the same", Config{AcceptedTopic: "x", OverflowTopic: "x", DeadLetterTopic: "x"},
			[]string{"accepted and overflow", "accepted and dead-letter", "overflow and dead-letter"}},
		{"bad topic character", with(func(c *Config) { c.DeadLetterTopic = "dead letter" }), []string{`dead-letter topic: "dead letter": character ' ' not allowed`}},
		{"dot topic", with(func(c *Config) { c.AcceptedTopic = ".." }), []string{`accepted topic: "..": not a legal topic name`}},
		{"long topic", with(func(c *Config) { c.AcceptedTopic = strings.Repeat("a", 250) }), []string{"longer than 249 characters"}},
		{"negative max key", with(func(c *Config) { c.MaxKeyBytes = -1 }), []string{"max key bytes -1: must be positive"}},
		{"empty forced team", with(func(c *Config) { c.ForceOverflow = []string{"1", ""} }), []string{"force overflow: team 2 of 2 is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tt.cfg, lim, nil)
			if err == nil || r != nil {
				t.Fatalf("New: %v, %v; want an error", r, err)
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("error %v does not wrap ErrBadConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to contain %q", err, w)
				}
			}
		})
	}
	if _, err := New(ok, nil, nil); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "no limiter") {
		t.Errorf("nil limiter: %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(ok, lim, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ok, lim, reg); err == nil || !strings.Contains(err.Error(), "registering route metrics") {
		t.Errorf("second router on one registry: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	forced := []string{"1"}
	f := newFixture(t, Config{ForceOverflow: forced}, limit.Config{})
	c := f.r.Config()
	if c.KeyFrom.String() != DefaultKeyFrom || c.MaxKeyBytes != DefaultMaxKeyBytes {
		t.Errorf("defaults: key from %q, max key bytes %d", c.KeyFrom, c.MaxKeyBytes)
	}
	// Neither the caller's slice nor the returned one reaches the router's.
	forced[0] = "2"
	c.ForceOverflow[0] = "3"
	if _, o := f.r.Route(t0, input(`{"team_id":1}`, ""), nil); o.Reason != ReasonForced {
		t.Errorf("team 1 after the caller changed its slices: %+v", o)
	}
	if got := f.r.Config().ForceOverflow; !slices.Equal(got, []string{"1"}) {
		t.Errorf("ForceOverflow %q", got)
	}
	if fmt.Sprint(Accepted, Overflow, DeadLetter, Route(9)) != "accepted overflow dead_letter Route(9)" {
		t.Errorf("Route names: %v", []Route{Accepted, Overflow, DeadLetter, 9})
	}
}

// Route from many goroutines at once, each with its own Scratch (run with -race).
func TestRouteConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{KeyFrom: mustKeyFrom(t, "json:team_id+distinct_id")}, limit.Config{Threshold: 1000})
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var s Scratch
			for i := range each {
				in := input(fmt.Sprintf(`{"team_id":%d,"distinct_id":"u%d"}`, i%7, w), "")
				out, o := f.r.Route(t0, in, &s)
				if want := fmt.Sprintf("%d:u%d", i%7, w); o.Team != want || out.Topic != topicAccepted {
					t.Errorf("worker %d record %d: team %q topic %q, want %q", w, i, o.Team, out.Topic, want)
					return
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, n := range f.counts() {
		total += n
	}
	if total != workers*each {
		t.Errorf("limiter counted %d records, want %d", total, workers*each)
	}
}

// TestRedrivenDeadLetterOneReason: a dead letter re-driven into the input topic after a
// fix carries the gate-error, gate-error-detail and gate-source of its first failure;
// when it fails again, its new dead letter carries one of each, the new failure's, after
// the input's other headers. Before, the stale three came first, so a reader taking the
// first header of a name (Go readers, kcat's first line) saw the old reason and offset.
func TestRedrivenDeadLetterOneReason(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, limit.Config{})
	in := input(`{"team":2}`, "k1", "trace", "t1",
		HeaderError, ReasonNotJSON, HeaderErrorDetail, "value is not valid JSON", HeaderSource, "events_raw/0/7",
		"gate-original-timestamp", "1600000000000")
	var s Scratch
	var out kgo.Record
	if o := f.r.RouteInto(time.Now(), in, &s, &out); o.Reason != ReasonFieldMissing {
		t.Fatalf("reason %s, want %s", o.Reason, ReasonFieldMissing)
	}
	want := []string{"trace", "gate-original-timestamp", HeaderError, HeaderErrorDetail, HeaderSource}
	var got []string
	for _, h := range out.Headers {
		got = append(got, h.Key)
	}
	if !slices.Equal(got, want) || string(headerValue(&out, HeaderError)) != ReasonFieldMissing ||
		string(headerValue(&out, HeaderSource)) != "events_raw/3/1234" {
		t.Errorf("headers %s, want %v with the new failure's values", fmtHeaders(out.Headers), want)
	}
	rej := f.r.DeadLetter(in, "", "topic accepted rejected the record")
	if vs := headerValues(rej, HeaderError); !slices.Equal(vs, []string{ReasonRejected}) {
		t.Errorf("DeadLetter: gate-error %q, want only %s", vs, ReasonRejected)
	}
}

// DeadLetterReasons, what gate redrive -reason takes, is every reason routed to the
// dead-letter topic and no other (derived from the reasons' routes, so a reason added
// there is in it): the gate-error values docs/operations.md lists.
func TestDeadLetterReasonsAreTheDeadLetterRoutes(t *testing.T) {
	want := []string{ReasonNotJSON, ReasonFieldMissing, ReasonFieldType, ReasonFieldEmpty, ReasonAmbiguousTeam,
		ReasonKeyTooLong, ReasonHeaderMissing, ReasonKeyMissing, ReasonRejected}
	if got := DeadLetterReasons(); !slices.Equal(got, want) {
		t.Errorf("DeadLetterReasons() = %v, want the dead-letter routes' reasons %v", got, want)
	}
}
