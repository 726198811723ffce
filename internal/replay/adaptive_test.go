package replay

import (
	"strings"
	"testing"
	"time"
)

// TestReplayLearnsThresholds: with learned thresholds, replay learns each team's as a
// fleet started at the range's start would (the wall clock's limiter, its view rebuilt
// every tick from the store in memory, its profile folded there). A team steady at 60 a
// minute for three hours, then at 600 for ten minutes: the static threshold (1,000)
// lets the burst through; the learned one (4 × 60 = 240) limits most of it, once the
// team has GATE_ADAPTIVE_MIN_HISTORY (1h) of history. Before that, no key is limited.
func TestReplayLearnsThresholds(t *testing.T) {
	recs := steady(nil, "steady", 0, 3*time.Hour, 60)
	recs = steady(recs, "steady", 3*time.Hour, 3*time.Hour+10*time.Minute, 600)
	replayWith := func(mode string) *Report {
		cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "1000", "GATE_LIMIT_MODE": "divert",
			"GATE_THRESHOLD_MODE": mode, "GATE_ADAPTIVE_MIN_HISTORY": "1h"})
		return replayRecords(t, mode, cfg, recs, 5)
	}
	static := replayWith("static")
	if n := static.Candidates[0].Total.Limited; n != 0 || len(static.Notes) != 0 {
		t.Errorf("static: %d limited, notes %q; want none", n, static.Notes)
	}
	learned := replayWith("adaptive")
	c := learned.Candidates[0]
	if len(c.Keys) == 0 || c.Keys[0].Key != "steady" {
		t.Fatalf("adaptive: keys %+v, want steady limited", c.Keys)
	}
	k := c.Keys[0]
	if !k.FirstLimited.After(start.Add(3*time.Hour-time.Minute)) || k.Limited < 4000 || k.Threshold >= 1000 {
		t.Errorf("adaptive: steady limited %d from %s at threshold %d; want most of the burst (6,000 less ~240 a minute) from 3h on, under a learned threshold", k.Limited, k.FirstLimited, k.Threshold)
	}
	t.Logf("adaptive: steady limited %d from %s, threshold at its peak %d, peak ratio %.2f", k.Limited, k.FirstLimited, k.Threshold, k.PeakRatio)
	if len(learned.Notes) != 1 || !strings.Contains(learned.Notes[0], "too short for a fair answer") {
		t.Errorf("notes %q: want the range called too short (3h against 1h + a day)", learned.Notes)
	}
}

// TestReplayProfileExpiresAfterAWeekSilent: the fleet's store drops a team's profile a
// week (limit.ProfileTTL) after its last fold, and a team silent longer starts learning
// again, its static threshold until it has GATE_ADAPTIVE_MIN_HISTORY of history anew.
// Replay kept every profile for ever: the team below, back after eight days silent with a
// burst its old learned threshold (4 × 60) limits, was limited where a fleet lets it by.
// Silent six days, the profile stays and the burst is limited, as by a fleet.
func TestReplayProfileExpiresAfterAWeekSilent(t *testing.T) {
	for _, c := range []struct {
		silent  time.Duration
		limited bool
	}{{8 * 24 * time.Hour, false}, {6 * 24 * time.Hour, true}} {
		recs := steady(nil, "pausing", 0, 3*time.Hour, 60)
		back := 3*time.Hour + c.silent
		recs = steady(recs, "pausing", back, back+10*time.Minute, 600)
		cfg := testConfig(t, map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "1000", "GATE_LIMIT_MODE": "divert",
			"GATE_THRESHOLD_MODE": "adaptive", "GATE_ADAPTIVE_MIN_HISTORY": "1h"})
		r := replayRecords(t, "adaptive", cfg, recs, 5)
		if n := r.Candidates[0].Total.Limited; (n > 0) != c.limited {
			t.Errorf("back after %s silent: %d of the burst's 6,000 limited, want limited %v (the profile %s)", c.silent, n, c.limited,
				map[bool]string{true: "kept", false: "expired a week after its last fold"}[c.limited])
		}
	}
}
