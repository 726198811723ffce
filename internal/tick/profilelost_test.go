package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveProfileLostInRedis: two gates on one real Redis hold a team's learned
// threshold from its stored profile; the profile is then lost (DEL: an eviction, a restart
// without persistence). Both gates keep the learned threshold through their next looks,
// and the profile is written back from their copy, history and all, not restarted from
// nothing (which would put the team on the static threshold for a day).
func TestAdaptiveProfileLostInRedis(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 2, srv, 24*time.Hour)
	day0 := clk.Now()
	const team = "steady"
	c := srv.Client(t)
	key := ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)
	p := spike.Profile{Epoch: gs[0].l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	if err := c.Set(context.Background(), key, v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	run := func(from, to time.Duration, each func(d time.Duration)) {
		for now := day0.Add(from); now.Before(day0.Add(to)); now = now.Add(tick) {
			for _, g := range gs {
				checkSpread(g, now, tick, team, 300*15/60/2, func(time.Time, limit.Decision) {})
			}
			clk.Set(now.Add(tick))
			tickAll(t, gs...)
			if each != nil {
				each(now.Add(tick).Sub(day0))
			}
		}
	}
	run(0, 5*time.Minute, nil)
	for gi, g := range gs {
		if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceLearned || st.Threshold != 1200 {
			t.Fatalf("gate %d before the loss: threshold %d (%s), want 1200 learned", gi, st.Threshold, st.Source)
		}
	}
	if err := c.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	// Two hours: two looks at least (a fold every 20 minutes).
	run(5*time.Minute, 2*time.Hour+5*time.Minute, func(d time.Duration) {
		for gi, g := range gs {
			if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceLearned {
				t.Fatalf("gate %d %v after the profile was lost: threshold %d (%s), want the learned one kept", gi, d-5*time.Minute, st.Threshold, st.Source)
			}
		}
	})
	got, ok := storedProfile(t, srv, team)
	if !ok || got.Windows < p.Windows {
		t.Errorf("stored profile after the loss: %v, %+v; want the gates' copy written back (%d windows or more)", ok, got, p.Windows)
	}
}
