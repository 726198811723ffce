package limit

import (
	"fmt"
	"testing"
	"time"
)

// At the default ColdWriteInterval (one window), under a window of a few ticks or one the
// tick does not divide (the configuration allows any window longer than the tick), a cold
// team's counts of each window reach the tick, by the end of the window after their own.
// A cold team hands the windows that have ended over from its phase point on, which is in
// the first three quarters of the window; the sweeps of aligned ticks fall at the same
// offsets of a window (0 s and 1 s of a 2 s one), and a team whose point was past the
// last of them was never at it in that window: its counts stayed in its entry until a
// check two windows on displaced them, never written, and in its level meanwhile.
func TestColdCountsOfAShortWindowReachTheTick(t *testing.T) {
	for _, c := range []struct{ window, tick time.Duration }{
		{2 * time.Second, time.Second},
		{3 * time.Second, time.Second},
		{5 * time.Second, 2 * time.Second},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.window, c.tick), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: c.window, Threshold: 1_000_000})
			const teams = 300
			counted := map[string]int64{}
			written := map[string]int64{}
			now := t0
			var stale int64
			for s := range 30 {
				for i := range teams {
					l.CheckAt(now.Add(100*time.Millisecond), fmt.Sprintf("t%d", i), 1)
					counted[fmt.Sprintf("t%d", i)]++
				}
				now = now.Add(c.tick)
				sw := sweep(t, l, now.Add(time.Duration(s%3)*100*time.Millisecond)) // a tick on time, or up to 0.2 s late
				stale += sw.Stale
				for _, cnt := range sw.Counts {
					written[cnt.Team] += cnt.N
				}
			}
			var displaced uint64
			for i := range l.shards {
				displaced += l.shards[i].displaced.Load()
			}
			if stale != 0 || displaced != 0 {
				t.Errorf("%d counts dropped as stale and %d displaced in an entry, never handed to the tick; want none", stale, displaced)
			}
			allHandedOver(t, l, now, counted, written)
		})
	}
}
