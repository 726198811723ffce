package spike

import "testing"

// TestLongIncidentIsUnlearnedWhenItEnds: a 4-hour incident at 10 × the team's volume
// (longer than MaxSpike: the team is re-learned at it, as a lasting step up would be),
// then the team's usual volume again: the level comes back down within hours, and an 8 ×
// spike two days on is caught. Re-learning went only upward: the level then fell at its
// half-life (72 h), the threshold 36 × the usual volume at that hour two days on, the spike let
// through whole.
func TestLongIncidentIsUnlearnedWhenItEnds(t *testing.T) {
	c := cfg(t)
	start := int64(3*1440 + 10*60)
	end := start + 4*60
	later := start + 2*1440
	run := runShape(t, c, later+1440, func(e int64) float64 {
		v := daily(1000, e)
		switch {
		case e >= start && e < end:
			v *= 10
		case e >= later && e < later+30:
			v *= 8
		}
		return v
	})
	if run.relearn < start {
		t.Fatalf("the incident was not re-learned (Relearned %d): the test tests nothing", run.relearn)
	}
	if d := run.divertedIn(later+1, later+30); d < 0.9 {
		t.Errorf("an 8 × spike two days after a 4-hour incident: %.1f%% diverted after its first window, want it caught", 100*d)
	}
	if d := run.divertedIn(end, later); d != 0 {
		t.Errorf("after the incident: %.3f%% of the usual volume diverted, want none", 100*d)
	}
}
