package limit

import (
	"testing"
	"time"
)

// A tally's decisions reach the limiter's counters when it is added, not before; adding
// zeroes it, so nothing is counted twice; under the event clock the clamps ride along.
func TestTallyAddsOnFlush(t *testing.T) {
	l, _, reg := newTest(t, Config{Window: time.Minute, Threshold: 2})
	decisions := func() (allowed, limited float64) {
		return metricValue(t, reg, "gate_limiter_decisions_total", map[string]string{"decision": "allowed"}),
			metricValue(t, reg, "gate_limiter_decisions_total", map[string]string{"decision": "limited"})
	}
	var tl Tally
	for range 5 {
		l.CheckTally(t0, "a", 1, &tl) // allowed, allowed, then limited (threshold 2)
	}
	if a, lim := decisions(); a != 0 || lim != 0 {
		t.Fatalf("before AddTally: allowed %v, limited %v; want nothing counted yet", a, lim)
	}
	l.CheckAt(t0, "b", 1) // CheckAt counts at once
	if a, _ := decisions(); a != 1 {
		t.Fatalf("CheckAt: allowed %v, want 1", a)
	}
	l.AddTally(&tl)
	if a, lim := decisions(); a != 3 || lim != 3 {
		t.Fatalf("after AddTally: allowed %v, limited %v; want 3 and 3", a, lim)
	}
	if tl != (Tally{}) {
		t.Fatalf("AddTally left %+v in the tally, want it zeroed", tl)
	}
	l.AddTally(&tl) // an empty tally adds nothing
	if a, lim := decisions(); a != 3 || lim != 3 {
		t.Fatalf("adding an empty tally: allowed %v, limited %v; want 3 and 3", a, lim)
	}

	ev, _, ereg := newTest(t, eventConfig(10*time.Second, 1000))
	now := t0.Add(time.Minute)
	var et Tally
	ev.CheckEventTally(now, now.Add(-24*time.Hour), "old", 1, &et)
	ev.CheckEventTally(now, now.Add(time.Hour), "future", 1, &et)
	ev.CheckEventTally(now, now, "now", 1, &et)
	if v := metricValue(t, ereg, "gate_limiter_event_time_clamped_total", map[string]string{"reason": "too_old"}); v != 0 {
		t.Fatalf("too_old clamps before AddTally: %v, want 0", v)
	}
	ev.AddTally(&et)
	for reason, want := range map[string]float64{"too_old": 1, "future": 1} {
		if v := metricValue(t, ereg, "gate_limiter_event_time_clamped_total", map[string]string{"reason": reason}); v != want {
			t.Errorf("%s clamps: %v, want %v", reason, v, want)
		}
	}
	if v := metricValue(t, ereg, "gate_limiter_decisions_total", map[string]string{"decision": "allowed"}); v != 3 {
		t.Errorf("event clock allowed decisions: %v, want 3", v)
	}
}
