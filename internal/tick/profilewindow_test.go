package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveProfileOfAnotherWindowStartsOver: an adaptive rule's first limit keeps its
// profile at {prefix}:{team}:profile whatever its window, so a rule whose first window
// changed (1m to 1h, or its limits reordered) finds the profile the old window learned:
// volumes per minute, taken as volumes per hour. The team, at its usual 300 a minute,
// was held to 4 × 300 an hour and diverted, and the profile, whose last fold (in minutes
// since 1970) lay far ahead of the hour's windows, was never folded again until it
// expired a week on. A profile whose last fold is further from now than a profile lives
// (ProfileTTL), in this limit's windows, was not learned over them: the team starts
// learning afresh, on the static threshold, as a renamed rule's would, and its profile is
// replaced by one of this window.
func TestAdaptiveProfileOfAnotherWindowStartsOver(t *testing.T) {
	srv := redistest.Start(t)
	day0 := epochStart.Truncate(24 * time.Hour)
	clk := clock.NewFake(day0)
	lc := limit.Config{Window: time.Hour, Threshold: 1_000_000, SyncInterval: 15 * time.Second,
		Adaptive: &spike.Config{MinHistory: 24 * time.Hour}}
	g := newGate(t, clk, lc, Config{TickInterval: 15 * time.Second}, srv)
	const team = "steady"
	// As the rule's minute window left it: learned over a day of minutes, 300 a minute.
	minute := spike.Profile{Epoch: day0.Unix()/60 - 1, Windows: 1440, Level: 300}
	v, _ := minute.MarshalBinary()
	if err := srv.Client(t).Set(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	limited := 0
	for now := day0; now.Before(day0.Add(3 * time.Hour)); now = now.Add(tick) {
		checkSpread(g, now, tick, team, 300*15/60, func(_ time.Time, d limit.Decision) {
			if d.Limited {
				limited++
			}
		})
		clk.Set(now.Add(tick))
		tickAll(t, g)
	}
	st, _ := g.l.Snapshot(clk.Now(), team)
	if limited != 0 || st.Source != limit.SourceStatic {
		t.Errorf("300 a minute under an hour's window, after a minute window's profile: %d checks limited, threshold %d (%s); want none limited, the static threshold", limited, st.Threshold, st.Source)
	}
	if p, ok := storedProfile(t, srv, team); !ok || p.Epoch >= minute.Epoch || p.Epoch < day0.Unix()/3600 {
		t.Errorf("stored profile after 3 hours: %v, %+v; want one of the hour's windows in place of the minute's", ok, p)
	}
}
