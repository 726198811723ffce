package limit

import (
	"testing"
	"time"
)

// A gate whose clock is ten days off (a host booted before its time service set it), either
// way, looks at a team whose profile the fleet has learned: the stored profile is the
// team's, used as it is, and neither folded nor replaced. It was taken for a profile of
// other windows, and a fresh one of a single window written over it (a review).
func TestClockOffAWeekLeavesTheFleetsProfile(t *testing.T) {
	for _, off := range []time.Duration{-10 * 24 * time.Hour, 10 * 24 * time.Hour} {
		l := adaptiveLimiter(t, Config{})
		stored := learnedProfile(l, 1000, l.Epoch(adaptT0)) // the fleet's learned profile
		now := adaptT0.Add(off)                             // this gate's clock
		const team = "t"
		l.CheckAt(now, team, 1)
		var sw Sweep
		l.Sweep(now, &sw)
		looked := false
		for i := range sw.Reads {
			r := &sw.Reads[i]
			if r.Team != team || !r.Profile {
				continue
			}
			looked = true
			l.ApplyRead(r, 1000, 1000, now)
			if w, write := l.ApplyProfile(r, stored, true, 1000, now); write {
				t.Errorf("clock off by %v: the gate writes a profile of %d windows (epoch %d) over the fleet's learned one (%d windows, epoch %d)", off, w.Profile.Windows, w.Profile.Epoch, stored.Windows, stored.Epoch)
			}
		}
		if !looked {
			t.Fatalf("clock off by %v: the sweep read no profile of %s", off, team)
		}
		if st, ok := l.Snapshot(now, team); !ok || st.Source != SourceLearned {
			t.Errorf("clock off by %v: the team's threshold is %v's, want the stored profile's (learned)", off, st.Source)
		}
	}
}
