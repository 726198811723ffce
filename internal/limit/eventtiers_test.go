package limit

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Under the event clock a team is cached once per window it was seen in, and a past
// window's entry is kept while a read found the team at half its threshold or more (until
// GATE_MAX_EVENT_AGE retires the window): gate_limiter_tier_entities, "teams per tier",
// must count each team once, in the tier of its newest window, as the team view shows it.
// Before, a team steadily at 90 % of its limit for six minutes was counted hot 6 times,
// once for every window it had been seen in.
func TestEventSweepTiersCountTeamsOnce(t *testing.T) {
	l, clk, reg := newTest(t, eventConfig(time.Minute, 100))
	var sw *Sweep
	for s := range 6 * 60 { // six windows, a second at a time, a team at 90 % of its limit
		now := t0.Add(time.Duration(s) * time.Second)
		clk.Set(now)
		if s%2 == 0 {
			l.CheckEventAt(now, now, "steady", 3) // 90 a minute
		}
		sw = sweep(t, l, now)
		for i := range sw.Reads {
			l.ApplyLocal(&sw.Reads[i], now) // one gate: its own counts are the fleet's
		}
	}
	// A second team, in one window only: once too.
	now := t0.Add(6*60*time.Second - time.Second)
	l.CheckEventAt(now, now, "once", 1)
	sw = sweep(t, l, now)
	total := 0
	for _, n := range sw.Tiers {
		total += n
	}
	if total != 2 || sw.Tiers[Hot] != 1 {
		t.Errorf("tiers %v (idle, low, normal, hot) for 2 teams, one at 90%% of its limit: want 2 teams in all, 1 hot", sw.Tiers)
	}
	if v := metricValue(t, reg, "gate_limiter_tier_entities", map[string]string{"tier": "hot"}); v != 1 {
		t.Errorf("gate_limiter_tier_entities{tier=hot} = %v, want 1", v)
	}
	if sw.Entries < 2 {
		t.Errorf("entries %d: the windows' caches hold the teams", sw.Entries)
	}
}

// A team's entry in a new window starts from the tier it was last found in, in the window
// before: gate_limiter_tier_transitions_total counts changes of a team's tier, not the
// start of every window. Before, a team steadily at 90 % of its limit was counted going
// from idle to hot at every window's start (5 times in six minutes).
func TestEventTierTransitionsAcrossWindows(t *testing.T) {
	l, clk, reg := newTest(t, eventConfig(time.Minute, 100))
	for s := range 6 * 60 {
		now := t0.Add(time.Duration(s) * time.Second)
		clk.Set(now)
		if s%2 == 0 {
			l.CheckEventAt(now, now, "steady", 3)
		}
		sw := sweep(t, l, now)
		for i := range sw.Reads {
			l.ApplyLocal(&sw.Reads[i], now)
		}
	}
	// The first window's ramp, idle to hot through every tier, once; then none.
	for _, c := range []struct {
		from, to string
		want     float64
	}{{"idle", "low", 1}, {"low", "normal", 1}, {"normal", "hot", 1}, {"idle", "hot", 0}, {"hot", "idle", 0}} {
		if v := transitions(t, reg, c.from, c.to); v != c.want {
			t.Errorf("gate_limiter_tier_transitions_total{from=%s,to=%s} = %v, want %v", c.from, c.to, v, c.want)
		}
	}
}

// transitions is gate_limiter_tier_transitions_total{from,to}, 0 when never counted.
func transitions(t *testing.T, reg *prometheus.Registry, from, to string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != "gate_limiter_tier_transitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["from"] == from && labels["to"] == to {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
