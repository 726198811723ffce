package tick

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestProfilesNotWrittenWithTheClockOff: a gate whose clock runs two days ahead of
// Redis's (and of the fleet's, which last folded a team's profile two days before this
// gate's now) finds the profile due and folds it, with the counts of windows that have
// not happened. The fold is not written, and said so: the stored profile keeps its last
// fold, and the fleet, finding it due, goes on learning. Written, it put the profile's
// last fold two days ahead, and no gate of the fleet folded it for two days (a review).
func TestProfilesNotWrittenWithTheClockOff(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	logs := &logBuffer{}
	g.tk.log = slog.New(slog.NewTextHandler(logs, nil))
	now := clk.Now()
	const team = "steady"
	stored := storeProfileFoldedTwoDaysAgo(t, srv, g, team, now)
	g.tk.clockCheck.wall = &lateAnswerClock{off: 48 * time.Hour}
	g.tk.checkClock(context.Background())
	steadyHalfHour(t, g, clk, team, now)
	if got, ok := storedProfile(t, srv, team); !ok || got.Epoch != stored.Epoch {
		t.Errorf("stored profile %v, %+v; want it as the fleet left it (epoch %d), not folded by a clock two days ahead", ok, got, stored.Epoch)
	}
	if n := testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("withheld")); n < 1 {
		t.Errorf("gate_limiter_profile_writes_total{result=withheld} = %v, want 1 or more", n)
	}
	if !strings.Contains(logs.buf.String(), "learned profiles it folds are not written") {
		t.Errorf("the withheld profiles are not said; log:\n%s", logs.buf.String())
	}
}

// storeProfileFoldedTwoDaysAgo stores team's learned profile as a fleet left it, last folded two
// days before now (a day of windows, level 300 a minute), and returns it.
func storeProfileFoldedTwoDaysAgo(t *testing.T, srv *redistest.Server, g *gate, team string, now time.Time) spike.Profile {
	t.Helper()
	stored := spike.Profile{Epoch: g.l.Epoch(now.Add(-48 * time.Hour)), Windows: 1440, Level: 300}
	v, _ := stored.MarshalBinary()
	if err := srv.Client(t).Set(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	return stored
}

// steadyHalfHour has g's team send 300 records a minute, spread, from now for 30
// minutes, g ticking every 15 s (steadyTick) of clk; it returns the time it ended at.
func steadyHalfHour(t *testing.T, g *gate, clk *clock.Fake, team string, now time.Time) time.Time {
	t.Helper()
	for end := now.Add(30 * time.Minute); now.Before(end); now = now.Add(steadyTick) {
		checkSpread(g, now, steadyTick, team, 300*15/60, func(time.Time, limit.Decision) {})
		clk.Set(now.Add(steadyTick))
		tickAll(t, g)
	}
	return now
}

// steadyTick is steadyHalfHour's tick interval.
const steadyTick = 15 * time.Second
