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
