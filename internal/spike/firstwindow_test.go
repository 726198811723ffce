package spike

import (
	"testing"
	"time"
)

// TestUnusualFirstWindowIsNotTheLevel: a team whose first window is a queue's flush at 50 ×
// its usual volume, then its usual volume: once learned, its threshold is the factor times
// what it usually sends, not times the flush, and a 10 × spike on day 3 is caught. The
// first window was the level, followed at the level's half-life (72 h): the threshold
// 16 to 24 × the factor times the usual volume a day on, 3 to 6 × four days on, a 10 ×
// spike let through whole.
func TestUnusualFirstWindowIsNotTheLevel(t *testing.T) {
	c := cfg(t)
	start := int64(3*60 + 7) // 03:07 UTC on day 0
	spike := int64(2*1440 + 14*60)
	flush := 50.0
	usualOf := func(e int64) float64 {
		switch {
		case e < start:
			return 0
		case e == start:
			return flush * daily(1000, e)
		case e >= spike && e < spike+60:
			return 10 * daily(1000, e)
		}
		return daily(1000, e)
	}
	// The thresholds of the day after each run's end, from the profile at its end.
	for _, days := range []int64{1, 2, 4} {
		end := start + days*1440 + 60
		run := runShape(t, c, end, usualOf)
		for h := int64(0); h < 24; h += 3 {
			e := end + h*60
			thr, ok := c.Threshold(&run.p, e)
			if r := thr / (c.Factor * daily(1000, e)); !ok || r > 2 {
				t.Errorf("%d days on, %s later: threshold %.0f, %.2f × the factor times the usual volume (learned %v), want at most 2 ×", days, time.Duration(h)*time.Hour, thr, r, ok)
			}
		}
	}
	run := runShape(t, c, spike+1440, usualOf)
	if d := run.divertedIn(spike+1, spike+60); d < 0.99 {
		t.Errorf("a 10 × spike on day 3: %.1f%% diverted after its first window, want it all", 100*d)
	}
}
