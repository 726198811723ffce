package limit

import (
	"testing"
	"time"
)

// Found in review of the override generations and the event clock's tiers: each failed
// before its fix.

// TestOverrideGenerationWrapEventClock: when the overrides generation wraps, SetOverrides
// clears every cached threshold so that none taken under an old generation of the same
// number is believed current. Under EventClock the entries are in the windows' tables,
// which it did not clear: a team cached at generation 1 under the default 1000 kept that
// threshold once the wrap made generation 1 current again with an override of 5.
func TestOverrideGenerationWrapEventClock(t *testing.T) {
	for _, clk := range []Clock{WallClock, EventClock} {
		t.Run(clk.String(), func(t *testing.T) {
			cfg := eventConfig(10*time.Second, 1000)
			cfg.Clock = clk
			l, _, _ := newTest(t, cfg)
			now := t0.Add(time.Minute)
			l.CheckEventAt(now, now, "a", 10) // cached at generation 1, threshold 1000
			for range genMask {               // the last swap wraps the generation to 1
				if err := l.SetOverrides(map[string]int64{"a": 5}); err != nil {
					t.Fatal(err)
				}
			}
			if g := l.overrides.Load().gen; g != 1 {
				t.Fatalf("generation %d after %d swaps, want 1 (wrapped)", g, genMask)
			}
			if d := l.CheckEventAt(now, now, "a", 0); d.Threshold != 5 || !d.Limited {
				t.Errorf("override 5, level 10: %+v, want threshold 5, limited", d)
			}
		})
	}
}

// TestEventSweepTierAfterOverrideRaise: the event clock's sweep takes the tier the last
// check stored (found at its record's own progress), but that tier is of the threshold in
// force then. After an override raised a hot team's threshold far over its level, the
// sweep counted it hot and planned it a hot read every tick until its next check.
func TestEventSweepTierAfterOverrideRaise(t *testing.T) {
	l, _, reg := newTest(t, eventConfig(10*time.Second, 100))
	now := t0.Add(time.Minute)
	l.CheckEventAt(now, now, "a", 95)
	l.ApplyRead(mustRead(t, sweep(t, l, now), "a"), 95, 0, now)
	if d := l.CheckEventAt(now, now, "a", 0); d.Tier != Hot {
		t.Fatalf("at 95 of 100: %+v, want hot", d)
	}
	if err := l.SetOverrides(map[string]int64{"a": 100_000}); err != nil {
		t.Fatal(err)
	}
	sw := sweep(t, l, now.Add(time.Second))
	if sw.Tiers != [numTiers]int{Idle: 1} {
		t.Errorf("tiers %v after the raise to 100000 (level 95), want the team idle", sw.Tiers)
	}
	if r := findRead(sw, "a"); r != nil && (r.Tier == Hot || r.Reason == ReadHot) {
		t.Errorf("read planned %+v, want none as hot", *r)
	}
	if v := metricValue(t, reg, "gate_limiter_tier_transitions_total", map[string]string{"from": "hot", "to": "idle"}); v != 1 {
		t.Errorf("hot→idle transitions %v, want 1", v)
	}
	if d := l.CheckEventAt(now.Add(time.Second), now.Add(time.Second), "a", 0); d.Tier != Idle {
		t.Errorf("next check: %+v, want idle", d)
	}
}
