package route

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

// multiFixture is a router over a per-minute and a per-hour limit.
type multiFixture struct {
	r         *Router
	min, hour *limit.Limiter
	clk       *clock.Fake
}

func newMultiFixture(t testing.TB, cfg Config, mode limit.Mode, minThr, hourThr int64) *multiFixture {
	t.Helper()
	cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic = topicAccepted, topicOverflow, topicDead
	f := &multiFixture{clk: clock.NewFake(t0)}
	reg := prometheus.NewRegistry()
	var err error
	if f.min, err = limit.New(limit.Config{Window: time.Minute, Threshold: minThr, Mode: mode}, f.clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1m0s"}, reg)); err != nil {
		t.Fatal(err)
	}
	if f.hour, err = limit.New(limit.Config{Window: time.Hour, Threshold: hourThr, Mode: mode}, f.clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1h0m0s"}, reg)); err != nil {
		t.Fatal(err)
	}
	if f.r, err = NewMulti(cfg, []*limit.Limiter{f.min, f.hour}, reg); err != nil {
		t.Fatal(err)
	}
	return f
}

func sweepCounts(l *limit.Limiter, now time.Time) map[string]int64 {
	var sw limit.Sweep
	l.Sweep(now, &sw)
	m := make(map[string]int64)
	for _, c := range sw.Counts {
		m[c.Team] += c.N
	}
	return m
}

// A team under its minute limit but over its hour limit overflows, and the overflow
// record names the hour limit.
func TestSeveralLimitsHourLimitOverflows(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Config{}, limit.Divert, 1000, 30)
	var s Scratch
	// 10 records a minute: far under 1000 a minute, over 30 an hour after 4 minutes.
	overflowed := 0
	for m := range 6 {
		for i := range 10 {
			in := input(fmt.Sprintf(`{"team_id":"t","i":%d}`, i), "k")
			out, o := f.r.Route(f.clk.Now(), in, &s)
			if o.Route == Accepted {
				checkOutput(t, in, out, topicAccepted)
				continue
			}
			overflowed++
			if o.Reason != ReasonRateLimited || o.Decision.Threshold != 30 || !o.Decision.Limited {
				t.Fatalf("minute %d record %d: %+v, want rate limited by the hour limit", m, i, o)
			}
			checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonRateLimited, HeaderOverflowLimit, "1h0m0s")
		}
		f.clk.Advance(time.Minute)
	}
	if overflowed == 0 || overflowed > 30 {
		t.Errorf("%d of 60 overflowed, want some and at most 30", overflowed)
	}
	if d := f.min.Check("t", 0); d.Limited {
		t.Errorf("minute limit limited: %+v", d)
	}
}

// The minute limit over names the minute window.
func TestSeveralLimitsMinuteLimitNamed(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Config{}, limit.Divert, 5, 1000)
	var s Scratch
	for i := range 8 {
		in := input(`{"team_id":"t"}`, "k")
		out, o := f.r.Route(t0, in, &s)
		if i < 5 {
			if o.Route != Accepted {
				t.Fatalf("record %d: %+v, want accepted", i, o)
			}
			continue
		}
		if o.Route != Overflow || o.Decision.Threshold != 5 {
			t.Fatalf("record %d: %+v, want rate limited by the minute limit", i, o)
		}
		checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonRateLimited, HeaderOverflowLimit, "1m0s")
	}
	want := map[string]int64{"t": 8} // divert: every record counts in every limit
	if got := sweepCounts(f.min, t0); !mapsEqual(got, want) {
		t.Errorf("minute counts %v, want %v", got, want)
	}
	if got := sweepCounts(f.hour, t0); !mapsEqual(got, want) {
		t.Errorf("hour counts %v, want %v", got, want)
	}
}

// In cap mode a record counts in every limit when none is over, and in none otherwise.
func TestSeveralLimitsCapCountsOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	f := newMultiFixture(t, Config{}, limit.Cap, 1000, 4)
	var s Scratch
	accepted := 0
	for range 10 {
		in := input(`{"team_id":"t"}`, "k")
		out, o := f.r.Route(t0, in, &s)
		if o.Route == Accepted {
			accepted++
			continue
		}
		checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonRateLimited, HeaderOverflowLimit, "1h0m0s")
	}
	if accepted != 4 {
		t.Errorf("accepted %d, want 4 (the hour threshold)", accepted)
	}
	want := map[string]int64{"t": 4}
	if got := sweepCounts(f.min, t0); !mapsEqual(got, want) {
		t.Errorf("minute counts %v, want %v: only accepted records count", got, want)
	}
	if got := sweepCounts(f.hour, t0); !mapsEqual(got, want) {
		t.Errorf("hour counts %v, want %v", got, want)
	}
}

// A forced team counts as with one limit, in each limit; its header names no limit.
func TestSeveralLimitsForced(t *testing.T) {
	t.Parallel()
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		f := newMultiFixture(t, Config{ForceOverflow: []string{"9"}}, mode, 1000, 1000)
		in := input(`{"team_id":9}`, "k")
		out, o := f.r.Route(t0, in, &Scratch{})
		if o.Reason != ReasonForced {
			t.Fatalf("%s: %+v, want forced", mode, o)
		}
		checkOutput(t, in, out, topicOverflow, HeaderOverflowReason, ReasonForced)
		want := map[string]int64{"9": 1}
		if mode == limit.Cap {
			want = map[string]int64{}
		}
		for _, l := range []*limit.Limiter{f.min, f.hour} {
			if got := sweepCounts(l, t0); !mapsEqual(got, want) {
				t.Errorf("%s: counts %v, want %v", mode, got, want)
			}
		}
	}
}

func TestNewMultiRejectsMixedModes(t *testing.T) {
	a, _ := limit.New(limit.Config{}, nil, nil)
	b, _ := limit.New(limit.Config{Mode: limit.Cap, Window: time.Hour}, nil, nil)
	cfg := Config{AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead}
	if _, err := NewMulti(cfg, []*limit.Limiter{a, b}, nil); err == nil {
		t.Error("limits of different modes accepted")
	}
	if _, err := NewMulti(cfg, nil, nil); err == nil {
		t.Error("no limiter accepted")
	}
}

// A cap rule of two limits asks each limit twice for a record it admits (checkLimits:
// once without counting, once counting); gate_limiter_decisions_total must still count
// one decision a record, as for a divert rule or a rule of one limit.
// In cap mode a rule of several limits asks each without counting, then counts in each:
// one decision a record and limit in gate_limiter_decisions_total, not two (it was two).
func TestCapSeveralLimitsDecisionsOnce(t *testing.T) {
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewFake(t0)
			reg0, reg1 := prometheus.NewRegistry(), prometheus.NewRegistry()
			l0, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Mode: mode}, clk, reg0)
			if err != nil {
				t.Fatal(err)
			}
			l1, err := limit.New(limit.Config{Window: time.Hour, Threshold: 1000, Mode: mode}, clk, reg1)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRules(Config{AcceptedTopic: topicAccepted, OverflowTopic: topicOverflow, DeadLetterTopic: topicDead},
				[]Rule{{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow, Limiters: []*limit.Limiter{l0, l1}}},
				prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			var s Scratch
			var out kgo.Record
			for range 5 {
				r.RouteInto(clk.Now(), event("t1", "u", "e"), &s, &out)
			}
			s.Flush()
			for i, reg := range []*prometheus.Registry{reg0, reg1} {
				if a := metric(t, reg, "gate_limiter_decisions_total", map[string]string{"decision": "allowed"}); a != 5 {
					t.Errorf("limit %d: %v allowed decisions for 5 records, want 5", i, a)
				}
			}
		})
	}
}
