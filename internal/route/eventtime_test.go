package route

import (
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

func TestEventTimeFrom(t *testing.T) {
	ts := time.Date(2024, 6, 10, 5, 50, 0, 0, time.UTC)
	rec := func(v string) *kgo.Record { return &kgo.Record{Value: []byte(v), Timestamp: ts} }
	want := time.Date(2024, 6, 10, 5, 40, 0, 0, time.UTC)
	cases := []struct {
		from string
		rec  *kgo.Record
		want time.Time
		ok   bool
	}{
		{"timestamp", rec(`{}`), ts, true},
		{"", &kgo.Record{}, time.Time{}, false},
		{"json:ts", rec(`{"ts":"2024-06-10T05:40:00Z"}`), want, true},
		{"json:ts", rec(`{"ts":"2024-06-10T07:40:00.000+02:00"}`), want, true},
		{"json:ts", rec(`{"ts":1717998000}`), want, true},
		{"json:ts", rec(`{"ts":1717998000.5}`), want.Add(500 * time.Millisecond), true},
		{"json:ts", rec(`{"ts":1717998000000}`), want, true},
		{"json:ts", rec(`{"ts":1717998000000000}`), want, true},
		{"json:ts", rec(`{"ts":1717998000000000000}`), want, true},
		{"json:meta.at", rec(`{"meta":{"at":1717998000123}}`), want.Add(123 * time.Millisecond), true},
		// RFC 3339 as the RFC allows it (section 5.6): "t" and "z" in lower case, a space
		// for the "T", and a leap second, the next second's start as in Unix time.
		{"json:ts", rec(`{"ts":"2024-06-10t05:40:00z"}`), want, true},
		{"json:ts", rec(`{"ts":"2024-06-10 07:40:00.25+02:00"}`), want.Add(250 * time.Millisecond), true},
		{"json:ts", rec(`{"ts":"2016-12-31T23:59:60Z"}`), time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"json:ts", rec(`{"ts":"2016-12-31t23:59:60.5z"}`), time.Date(2017, 1, 1, 0, 0, 0, 5e8, time.UTC), true},
		{"json:ts", rec(`{"ts":"2024-06-10T05:40:60Z"}`), time.Time{}, false}, // not at a minute's end
		// A leap second in a zone whose offset is not whole hours ends a UTC minute at
		// another local minute (RFC 3339 section 5.7); :59:60 there ends none.
		{"json:ts", rec(`{"ts":"2017-01-01T05:29:60+05:30"}`), time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"json:ts", rec(`{"ts":"2016-12-31T20:29:60.5-03:30"}`), time.Date(2017, 1, 1, 0, 0, 0, 5e8, time.UTC), true},
		{"json:ts", rec(`{"ts":"2017-01-01T05:59:60+05:30"}`), time.Time{}, false},
		{"json:ts", rec(`{"ts":"2024-06-10x05:40:00Z"}`), time.Time{}, false},
		{"json:ts", rec(`{"ts":"2024-06-10T05:40:00"}`), time.Time{}, false}, // no zone
		{"json:ts", rec(`{"team_id":"a"}`), time.Time{}, false},
		{"json:ts", rec(`{"ts":"yesterday"}`), time.Time{}, false},
		{"json:ts", rec(`{"ts":-5}`), time.Time{}, false},
		{"json:ts", rec(`{"ts":true}`), time.Time{}, false},
		{"json:ts", rec(``), time.Time{}, false},
	}
	for _, c := range cases {
		f, err := ParseEventTimeFrom(c.from)
		if err != nil {
			t.Fatalf("ParseEventTimeFrom(%q): %v", c.from, err)
		}
		got, ok := f.time(c.rec)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("%s on %q: %v, %v; want %v, %v", c.from, c.rec.Value, got, ok, c.want, c.ok)
		}
	}
	for _, bad := range []string{"json:", "header:ts", "json:a+b", "json:a..b", "now"} {
		if _, err := ParseEventTimeFrom(bad); err == nil {
			t.Errorf("ParseEventTimeFrom(%q): no error", bad)
		}
	}
	if f, _ := ParseEventTimeFrom("json:meta.at"); f.String() != "json:meta.at" {
		t.Errorf("String() = %q", f.String())
	}
}

// Under the event clock a record is judged in its own window: a backlog from ten minutes
// ago does not count against the team's current window, and a record whose time field is
// unreadable is judged at its record timestamp and counted in the metric.
func TestRouteEventClock(t *testing.T) {
	from, _ := ParseEventTimeFrom("json:ts")
	f := newFixture(t, Config{EventTimeFrom: from},
		limit.Config{Window: time.Minute, Threshold: 100, Clock: limit.EventClock, MaxEventAge: time.Hour})
	now := t0
	old := now.Add(-10 * time.Minute).Unix()
	for i := range 100 { // the whole limit, ten minutes ago
		_, o := f.r.Route(now, input(`{"team_id":"acme","ts":`+itoa(old)+`}`, ""), nil)
		if o.Route != Accepted {
			t.Fatalf("backlog record %d: %s (%s)", i, o.Route, o.Reason)
		}
	}
	_, o := f.r.Route(now, input(`{"team_id":"acme","ts":`+itoa(old+1)+`}`, ""), nil)
	if o.Route != Overflow {
		t.Errorf("101st record of the old window: %s, want overflow", o.Route)
	}
	_, o = f.r.Route(now, input(`{"team_id":"acme","ts":`+itoa(now.Unix())+`}`, ""), nil)
	if o.Route != Accepted {
		t.Errorf("a record of the current window: %s (level %.0f), want accepted", o.Route, o.Decision.Level)
	}
	// No ts field: judged at the record timestamp (two seconds before t0).
	_, o = f.r.Route(now, input(`{"team_id":"acme"}`, ""), nil)
	if o.Route != Accepted {
		t.Errorf("a record without ts: %s, want accepted", o.Route)
	}
	if unreadable := metric(t, f.reg, "gate_event_time_unreadable_total", nil); unreadable != 1 {
		t.Errorf("gate_event_time_unreadable_total = %v, want 1", unreadable)
	}
	counts := map[int64]int64{}
	var sw limit.Sweep
	f.lim.Sweep(now, &sw)
	for _, c := range sw.Counts {
		counts[c.Epoch] += c.N
	}
	if counts[f.lim.Epoch(time.Unix(old, 0))] != 101 || counts[f.lim.Epoch(now)] != 1 || counts[f.lim.Epoch(now)-1] != 1 {
		t.Errorf("counts by epoch %v, want 101 ten minutes back, 1 now and 1 the minute before", counts)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Kafka's "no timestamp" is -1 ms (RecordBatch.NO_TIMESTAMP: a batch up-converted from
// message format v0, or a client that sent none), which franz-go decodes as
// time.Unix(0, -1e6), never the zero time.Time. Under the event clock such a record must
// be handled as an unset timestamp (judged now, counted unreadable), not as a time of
// 1969 clamped to GATE_MAX_EVENT_AGE and judged in a window a quarter hour old.
func TestRecordWithoutTimestampJudgedNow(t *testing.T) {
	f := newFixture(t, Config{},
		limit.Config{Window: time.Minute, Threshold: 2, Clock: limit.EventClock, MaxEventAge: 15 * time.Minute})
	now := t0
	for i := range 2 { // the team's whole limit, in the current window
		rec := input(`{"team_id":"acme"}`, "")
		rec.Timestamp = now
		if _, o := f.r.Route(now, rec, nil); o.Route != Accepted {
			t.Fatalf("record %d: %s", i, o.Route)
		}
	}
	rec := input(`{"team_id":"acme"}`, "")
	rec.Timestamp = time.Unix(0, -1*int64(time.Millisecond)) // franz-go's decoding of timestamp -1
	_, o := f.r.Route(now, rec, nil)
	if o.Route != Overflow {
		t.Errorf("record without a timestamp, team at its limit now: %s (level %.0f), want overflow", o.Route, o.Decision.Level)
	}
	if got := metric(t, f.reg, "gate_event_time_unreadable_total", nil); got != 1 {
		t.Errorf("gate_event_time_unreadable_total = %v, want 1", got)
	}
	var sw limit.Sweep
	f.lim.Sweep(now, &sw)
	for _, c := range sw.Counts {
		if c.Epoch != f.lim.Epoch(now) {
			t.Errorf("%d record(s) counted in epoch %d (%v before now), want every one in the current epoch %d",
				c.N, c.Epoch, now.Sub(time.Unix(c.Epoch*60, 0)), f.lim.Epoch(now))
		}
	}
}

// A Unix time as a float past 2262 (beyond what nanoseconds since 1970 hold in an int64)
// is a time far in the future, as the same value written as an integer is: clamped to now
// and counted in gate_limiter_event_time_clamped_total{reason="future"}, not taken for an
// unreadable field and judged at the record timestamp.
func TestEventTimeFarFutureFloat(t *testing.T) {
	from, _ := ParseEventTimeFrom("json:ts")
	for _, ts := range []string{"9999999999", "9999999999.5", "9999999999999.5", "99999999999999999999"} {
		got, ok := from.time(input(`{"ts":`+ts+`}`, ""))
		if !ok || got.Year() < 2262 {
			t.Errorf("ts %s: %v, %v; want a time after 2262, readable", ts, got, ok)
		}
	}
	f := newFixture(t, Config{EventTimeFrom: from},
		limit.Config{Window: time.Minute, Threshold: 100, Clock: limit.EventClock, MaxEventAge: time.Hour})
	now := t0 // the record timestamp is two seconds before, in the minute before
	f.r.Route(now, input(`{"team_id":"acme","ts":9999999999.5}`, ""), nil)
	if got := metric(t, f.reg, "gate_event_time_unreadable_total", nil); got != 0 {
		t.Errorf("gate_event_time_unreadable_total = %v, want 0", got)
	}
	if got := metric(t, f.reg, "gate_limiter_event_time_clamped_total", map[string]string{"reason": "future"}); got != 1 {
		t.Errorf("gate_limiter_event_time_clamped_total{reason=future} = %v, want 1", got)
	}
	var sw limit.Sweep
	f.lim.Sweep(now, &sw)
	for _, c := range sw.Counts {
		if c.Epoch != f.lim.Epoch(now) {
			t.Errorf("counted in epoch %d, want the current one %d", c.Epoch, f.lim.Epoch(now))
		}
	}
}

// A time field before 1970 is no event time, as a negative Unix time is not: most often
// it is a producer's unset value, Go's zero time.Time marshalled as
// "0001-01-01T00:00:00Z". Such a record is judged at its record timestamp and counted in
// gate_event_time_unreadable_total, not judged at the wall clock uncounted (the zero
// time) nor clamped to GATE_MAX_EVENT_AGE (a time before 1970): during a catch-up, the
// first put a lagging partition's records in the current window, the very false
// overflow the event clock is for, with no metric saying why.
func TestEventTimeBefore1970IsUnreadable(t *testing.T) {
	from, _ := ParseEventTimeFrom("json:ts")
	for _, ts := range []string{`"0001-01-01T00:00:00Z"`, `"1969-12-31T23:59:59Z"`, `"0000-01-01T00:00:00+01:00"`} {
		if got, ok := from.time(input(`{"ts":`+ts+`}`, "")); ok {
			t.Errorf("ts %s: %v, readable; want unreadable", ts, got)
		}
	}
	f := newFixture(t, Config{EventTimeFrom: from},
		limit.Config{Window: time.Minute, Threshold: 2, Clock: limit.EventClock, MaxEventAge: time.Hour})
	now := t0
	for i := range 2 { // the team's whole limit, in the current window
		if _, o := f.r.Route(now, input(`{"team_id":"acme","ts":`+itoa(now.Unix())+`}`, ""), nil); o.Route != Accepted {
			t.Fatalf("record %d: %s", i, o.Route)
		}
	}
	// A record of a partition ten minutes behind whose producer left the time unset.
	rec := input(`{"team_id":"acme","ts":"0001-01-01T00:00:00Z"}`, "")
	rec.Timestamp = now.Add(-10 * time.Minute)
	if _, o := f.r.Route(now, rec, nil); o.Route != Accepted {
		t.Errorf("record stamped ten minutes ago, time field unset: %s (level %.0f), want accepted in its own window",
			o.Route, o.Decision.Level)
	}
	if got := metric(t, f.reg, "gate_event_time_unreadable_total", nil); got != 1 {
		t.Errorf("gate_event_time_unreadable_total = %v, want 1", got)
	}
	var sw limit.Sweep
	f.lim.Sweep(now, &sw)
	counts := map[int64]int64{}
	for _, c := range sw.Counts {
		counts[c.Epoch] += c.N
	}
	if want := f.lim.Epoch(rec.Timestamp); counts[want] != 1 || counts[f.lim.Epoch(now)] != 2 {
		t.Errorf("counts by epoch %v, want 1 in epoch %d (the record timestamp's) and 2 in the current %d",
			counts, want, f.lim.Epoch(now))
	}
}

// A time of exactly 0 (the Unix epoch: a number 0, "1970-01-01T00:00:00Z", a record
// timestamp of 0 ms) is no event time either: it is the zero value a producer's unset
// integer or epoch-based date marshals to. Before, it was read as 1970, clamped to
// GATE_MAX_EVENT_AGE and counted in a window that old, out of the current one's limit,
// under too_old, while a time one second earlier was taken as unset.
func TestEventTimeZeroIsUnset(t *testing.T) {
	from, _ := ParseEventTimeFrom("json:ts")
	for _, ts := range []string{`0`, `0.0`, `-0`, `0e3`, `"1970-01-01T00:00:00Z"`, `"1970-01-01T01:00:00+01:00"`} {
		if got, ok := from.time(input(`{"ts":`+ts+`}`, "")); ok {
			t.Errorf("ts %s: %v, readable; want unreadable", ts, got)
		}
	}
	for _, ts := range []string{`1`, `"1970-01-01T00:00:00.000000001Z"`} { // the first instant after: a time
		if _, ok := from.time(input(`{"ts":`+ts+`}`, "")); !ok {
			t.Errorf("ts %s: unreadable; want a time", ts)
		}
	}
	rec := input(`{"team_id":"acme"}`, "")
	rec.Timestamp = time.UnixMilli(0)
	if got, ok := (EventTimeFrom{}).time(rec); ok {
		t.Errorf("record timestamp 0: %v, readable; want unreadable", got)
	}
	f := newFixture(t, Config{EventTimeFrom: from},
		limit.Config{Window: time.Minute, Threshold: 100, Clock: limit.EventClock, MaxEventAge: time.Hour})
	now := t0
	rec = input(`{"team_id":"acme","ts":0}`, "")
	rec.Timestamp = now.Add(-10 * time.Minute)
	if _, o := f.r.Route(now, rec, nil); o.Route != Accepted {
		t.Fatalf("record with ts 0: %s", o.Route)
	}
	if got := metric(t, f.reg, "gate_event_time_unreadable_total", nil); got != 1 {
		t.Errorf("gate_event_time_unreadable_total = %v, want 1", got)
	}
	var sw limit.Sweep
	f.lim.Sweep(now, &sw)
	if want := f.lim.Epoch(rec.Timestamp); len(sw.Counts) != 1 || sw.Counts[0].Epoch != want {
		t.Errorf("counts %+v, want the record in epoch %d (its record timestamp's)", sw.Counts, want)
	}
}

// A record whose event time is clamped (older than GATE_MAX_EVENT_AGE, or too far ahead)
// is one record in gate_limiter_event_time_clamped_total, however many limiters check it:
// the dashboard's and the docs' "records clamped" add the series up over the rule and
// limit labels the gate gives each limiter. Before, every limit of every rule that checked
// the record counted it: two rules of two limits each showed 4 records clamped for 1.
func TestEventTimeClampedOncePerRecord(t *testing.T) {
	from, _ := ParseEventTimeFrom("json:ts")
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clk := clock.NewFake(t0)
			var rules []Rule
			for _, name := range []string{"team", "team-event"} {
				ru := Rule{Name: name, Key: mustKey(t, "json:team_id"), Action: ActionOverflow}
				if name == "team-event" {
					ru.Key = mustKey(t, "json:team_id+event")
				}
				for _, w := range []time.Duration{time.Minute, time.Hour} {
					l, err := limit.New(limit.Config{Window: w, Threshold: 1000, Mode: mode, Clock: limit.EventClock, MaxEventAge: 15 * time.Minute},
						clk, prometheus.WrapRegistererWith(prometheus.Labels{"rule": name, "limit": w.String()}, reg))
					if err != nil {
						t.Fatal(err)
					}
					ru.Limiters = append(ru.Limiters, l)
				}
				rules = append(rules, ru)
			}
			r, err := NewRules(Config{AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead, EventTimeFrom: from}, rules, reg)
			if err != nil {
				t.Fatal(err)
			}
			var s Scratch
			for _, ts := range []time.Time{t0.Add(-time.Hour), t0.Add(time.Minute), t0} {
				if _, o := r.Route(t0, input(`{"team_id":"acme","event":"e","ts":`+itoa(ts.Unix())+`}`, ""), &s); o.Route != Accepted {
					t.Fatalf("record at %v: %s (%s)", ts, o.Route, o.Reason)
				}
			}
			// What the dashboard's panel shows: sum by (reason) over every series.
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			sum := map[string]float64{}
			for _, fam := range fams {
				if fam.GetName() != "gate_limiter_event_time_clamped_total" {
					continue
				}
				for _, m := range fam.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "reason" {
							sum[l.GetValue()] += m.GetCounter().GetValue()
						}
					}
				}
			}
			if sum["too_old"] != 1 || sum["future"] != 1 {
				t.Errorf("sum by (reason) (gate_limiter_event_time_clamped_total) = %v, want too_old 1 and future 1: one record each", sum)
			}
			// The records still count where they were clamped to, in every limit.
			for _, ru := range rules {
				for _, l := range ru.Limiters {
					var sw limit.Sweep
					l.Sweep(t0, &sw)
					byEpoch := map[int64]int64{}
					for _, c := range sw.Counts {
						byEpoch[c.Epoch] += c.N
					}
					want := map[int64]int64{l.Epoch(t0.Add(-15 * time.Minute)): 1}
					want[l.Epoch(t0)] += 2
					if !maps.Equal(byEpoch, want) {
						t.Errorf("rule %s, %s limit: counts by epoch %v, want %v", ru.Name, l.Config().Window, byEpoch, want)
					}
				}
			}
		})
	}
}
