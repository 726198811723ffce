package route

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// RouteInto counts in its Scratch; Flush adds the counts to the metrics of the router that
// counted them (records by reason, the primary limit's decisions), once, and a Scratch
// used with another router first flushes what it holds to the one before.
func TestScratchFlush(t *testing.T) {
	a := newFixture(t, Config{}, limit.Config{Threshold: 2})
	b := newFixture(t, Config{}, limit.Config{Threshold: 2})
	decisions := func(f *fixture, d string) float64 {
		t.Helper()
		return metric(t, f.reg, "gate_limiter_decisions_total", map[string]string{"decision": d})
	}
	var s Scratch
	var out kgo.Record
	for range 5 {
		a.r.RouteInto(t0, input(`{"team_id":"t"}`, ""), &s, &out)
	}
	if got := counter(t, a.reg, "gate_records_total", "accepted", ReasonAllowed); got != 0 {
		t.Fatalf("before Flush: accepted/allowed = %v, want 0 (counted in the Scratch)", got)
	}
	s.Flush()
	s.Flush() // a second flush adds nothing
	if got := counter(t, a.reg, "gate_records_total", "accepted", ReasonAllowed); got != 2 {
		t.Errorf("accepted/allowed = %v, want 2", got)
	}
	if got := counter(t, a.reg, "gate_records_total", "overflow", ReasonRateLimited); got != 3 {
		t.Errorf("overflow/rate_limited = %v, want 3", got)
	}
	if al, li := decisions(a, "allowed"), decisions(a, "limited"); al != 2 || li != 3 {
		t.Errorf("decisions: allowed %v, limited %v; want 2 and 3", al, li)
	}

	// Counted for a, then routed through b (a rules reload swaps routers): a gets its own.
	a.r.RouteInto(t0, input(`{"team_id":"u"}`, ""), &s, &out)
	b.r.RouteInto(t0, input(`{"team_id":"u"}`, ""), &s, &out)
	if got := counter(t, a.reg, "gate_records_total", "accepted", ReasonAllowed); got != 3 {
		t.Errorf("after switching routers: a's accepted/allowed = %v, want 3", got)
	}
	if got := counter(t, b.reg, "gate_records_total", "accepted", ReasonAllowed); got != 0 {
		t.Errorf("before Flush: b's accepted/allowed = %v, want 0", got)
	}
	s.Flush()
	if got := counter(t, b.reg, "gate_records_total", "accepted", ReasonAllowed); got != 1 {
		t.Errorf("b's accepted/allowed = %v, want 1", got)
	}
	if al := decisions(b, "allowed"); al != 1 {
		t.Errorf("b's allowed decisions = %v, want 1", al)
	}

	// Without a Scratch, and through Route, the counts are in the metrics on return.
	a.r.RouteInto(t0, input(`{"team_id":"v"}`, ""), nil, &out)
	a.r.Route(t0, input(`{"team_id":"w"}`, ""), &s)
	if got := counter(t, a.reg, "gate_records_total", "accepted", ReasonAllowed); got != 5 {
		t.Errorf("RouteInto(nil Scratch) and Route: accepted/allowed = %v, want 5", got)
	}
}

// A held Scratch (Hold, exactly once) keeps its record counts past Flush until Release:
// Release(true) adds them to the metrics of the router that counted them, once;
// Release(false) drops them (an aborted transaction's). The limiters' decisions are
// added at Flush either way, and a switch of routers gives the one before what it held.
func TestScratchHoldRelease(t *testing.T) {
	a := newFixture(t, Config{}, limit.Config{Threshold: 100})
	b := newFixture(t, Config{}, limit.Config{Threshold: 100})
	accepted := func(f *fixture) float64 {
		t.Helper()
		return counter(t, f.reg, "gate_records_total", "accepted", ReasonAllowed)
	}
	var s Scratch
	s.Hold()
	var out kgo.Record
	route := func(f *fixture, n int) {
		for range n {
			f.r.RouteInto(t0, input(`{"team_id":"t"}`, ""), &s, &out)
		}
	}
	route(a, 3)
	s.Flush()
	if got := accepted(a); got != 0 {
		t.Fatalf("held, after Flush: accepted/allowed = %v, want 0", got)
	}
	if got := metric(t, a.reg, "gate_limiter_decisions_total", map[string]string{"decision": "allowed"}); got != 3 {
		t.Errorf("held, after Flush: allowed decisions = %v, want 3", got)
	}
	s.Release(false)
	route(a, 2)
	s.Flush()
	s.Release(true)
	s.Release(true) // a second release adds nothing
	if got := accepted(a); got != 2 {
		t.Errorf("after a dropped release and a kept one: accepted/allowed = %v, want 2", got)
	}

	route(a, 1)
	s.Flush()
	route(b, 4) // a rules reload swaps routers: a gets what was held for it
	if got := accepted(a); got != 3 {
		t.Errorf("after switching routers: a's accepted/allowed = %v, want 3", got)
	}
	s.Flush()
	if got := accepted(b); got != 0 {
		t.Errorf("held: b's accepted/allowed = %v, want 0", got)
	}
	s.Release(true)
	if got := accepted(b); got != 4 {
		t.Errorf("released: b's accepted/allowed = %v, want 4", got)
	}
}
