package limit

import (
	"testing"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveProfileLostInStoreKeepsLocalCopy: the store loses a learned team's profile
// (an eviction, a Redis restart without persistence, a failover to a replica that had not
// got it). The gate still holds the profile it last looked at: its next look, finding no
// profile, keeps that copy (folded if due) and writes it back for the fleet, rather than
// starting the team over from nothing, which would put it back on the static threshold for
// GATE_ADAPTIVE_MIN_HISTORY (a day). Whether the window looked at was busy or silent.
func TestAdaptiveProfileLostInStoreKeepsLocalCopy(t *testing.T) {
	for _, count := range []int64{1000, 0} {
		l := adaptiveLimiter(t, Config{})
		now := adaptT0
		const team = "t"
		l.CheckAt(now, team, 1)
		learn(t, l, now, team, 1000)
		if d := l.CheckAt(now, team, 0); d.Threshold != 4000 {
			t.Fatalf("learned: threshold %d, want 4000", d.Threshold)
		}
		// The team's next looks, each finding its profile gone from the store.
		var looks, restored int
		for i := 0; i < 150 && looks < 3; i++ {
			now = now.Add(time.Minute)
			l.CheckAt(now, team, 1)
			var sw Sweep
			l.Sweep(now, &sw)
			for j := range sw.Reads {
				r := &sw.Reads[j]
				if r.Team != team || !r.Profile {
					continue
				}
				looks++
				l.ApplyRead(r, 1, 1, now)
				w, write := l.ApplyProfile(r, spike.Profile{}, false, count, now)
				if write {
					if w.Exists || w.Profile.Windows < 1440 {
						t.Errorf("count %d, look %d: write %+v, want the gate's copy (%d windows or more) set where none is", count, looks, w, 1440)
					} else {
						restored++
					}
				}
				if d := l.CheckAt(now, team, 0); d.Threshold != 4000 {
					st, _ := l.Snapshot(now, team)
					t.Fatalf("count %d, look %d at the profile lost in the store: threshold %d (%s), want the learned 4000 kept", count, looks, d.Threshold, st.Source)
				}
			}
		}
		if looks == 0 {
			t.Fatalf("count %d: no look at the profile in 150 windows", count)
		}
		if restored == 0 {
			t.Errorf("count %d: %d looks found the profile lost, none wrote the gate's copy back", count, looks)
		}
	}
}
