package tick

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestProfilesNotWrittenBeforeTheFirstClockCheck: a gate whose clock runs two days ahead
// of Redis's starts (Run) with a team already cached, as a gate that routes records before
// its first tick does, or a rules reload's new tick with its limiters' teams. Its first
// tick looks at the team's profile, finds it due and folds it; the clock check ran only
// after that tick's reads, so the fold was written at the next tick with the offset still
// unmeasured, putting the stored profile's last fold two days ahead, and no gate of the
// fleet folded it for two days (what withholdProfile is for). Run checks the clock before
// its first tick.
func TestProfilesNotWrittenBeforeTheFirstClockCheck(t *testing.T) {
	t.Parallel() // it mostly waits for Run's ticks
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart.Truncate(24 * time.Hour))
	lc := limit.Config{Window: time.Minute, Threshold: 1_000_000, SyncInterval: 15 * time.Second,
		Adaptive: &spike.Config{MinHistory: 24 * time.Hour}}
	g := newGate(t, clk, lc, Config{TickInterval: 200 * time.Millisecond}, srv)
	now := clk.Now()
	const team = "steady"
	stored := storeProfileFoldedTwoDaysAgo(t, srv, g, team, now)
	g.tk.clockCheck.measured = false // as New leaves it: Run's checks measure it
	g.tk.clockCheck.wall = &lateAnswerClock{off: 48 * time.Hour}
	g.l.CheckAt(now, team, 5)
	writes := make(chan struct{}, 100)
	g.tk.onPhase = func(part int, _ time.Time, ended bool) {
		if part == partWrites && ended {
			writes <- struct{}{}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.tk.Run(ctx); close(done) }()
	for range 3 { // the first tick's fold is written by the second tick's writes
		<-writes
	}
	cancel()
	<-done
	if got, ok := storedProfile(t, srv, team); !ok || got.Epoch != stored.Epoch {
		t.Errorf("stored profile %v, epoch %d; want it as the fleet left it (epoch %d), not folded by a clock two days ahead (%d windows ahead)",
			ok, got.Epoch, stored.Epoch, got.Epoch-stored.Epoch)
	}
}

// TestProfilesNotWrittenWhileTheFirstClockCheckUnanswered: a gate whose clock runs two
// days ahead of Redis's starts while Redis does not answer, so its first clock check's
// TIME gets no answer. The offset unmeasured read as 0, and the folds it made once Redis
// answered were written, two days ahead (a review). They are withheld, and said so, until
// a check has TIME's answer; one that finds the clock right lets them be written.
func TestProfilesNotWrittenWhileTheFirstClockCheckUnanswered(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	g.tk.clockCheck.measured = false // as New leaves it: no check has answered yet
	logs := &logBuffer{}
	g.tk.log = slog.New(slog.NewTextHandler(logs, nil))
	now := clk.Now()
	const team = "steady"
	stored := storeProfileFoldedTwoDaysAgo(t, srv, g, team, now)
	g.tk.clockCheck.wall = &lateAnswerClock{off: 48 * time.Hour}
	srv.Pause(t)
	g.tk.checkClock(stallCtx(context.Background(), t)) // Run's first check: no answer
	srv.Resume(t)
	if g.tk.clockCheck.last != (time.Time{}) {
		t.Fatal("the unanswered check was taken as made")
	}
	now = steadyHalfHour(t, g, clk, team, now)
	tick := steadyTick
	if got, ok := storedProfile(t, srv, team); !ok || got.Epoch != stored.Epoch {
		t.Errorf("stored profile %v, epoch %d; want it as the fleet left it (epoch %d): written before any clock check had TIME's answer, by a clock two days ahead",
			ok, got.Epoch, stored.Epoch)
	}
	if n := testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("withheld")); n < 1 {
		t.Errorf("gate_limiter_profile_writes_total{result=withheld} = %v, want 1 or more", n)
	}
	if len(logs.lines("offset to Redis's is not measured yet")) != 1 {
		t.Errorf("the withheld profiles are not said once; log:\n%s", logs.buf.String())
	}

	// A check answered, this host's clock right: the folds are written again.
	g.tk.clockCheck.wall = clock.Real{}
	g.tk.checkClock(context.Background())
	for end := now.Add(3 * time.Hour); ; now = now.Add(tick) {
		if got, ok := storedProfile(t, srv, team); ok && got.Epoch != stored.Epoch {
			break
		}
		if !now.Before(end) {
			t.Fatalf("no fold written in 3 h (of the fake clock) after a clock check found the clock right; log:\n%s", logs.buf.String())
		}
		checkSpread(g, now, tick, team, 300*15/60, func(time.Time, limit.Decision) {})
		clk.Set(now.Add(tick))
		tickAll(t, g)
	}
}

// TestProfilesWrittenWithTIMERefused: a gate whose Redis user may not run TIME (an ACL
// without +time) can never measure its clock; it warns so, and writes the profiles it
// folds, as it did before the clock check withheld them: withheld, a fleet with that ACL
// would never learn a threshold. (An unanswered TIME withholds them until one answers:
// TestProfilesNotWrittenWhileTheFirstClockCheckUnanswered.)
func TestProfilesWrittenWithTIMERefused(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	g.tk.clockCheck.measured = false // as New leaves it
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "default", "-time").Err(); err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	const team = "steady"
	stored := storeProfileFoldedTwoDaysAgo(t, srv, g, team, now)
	g.tk.checkClock(context.Background())
	if g.tk.clockCheck.measured || !g.tk.clockCheck.refused {
		t.Fatalf("clock check with TIME refused: measured %v, refused %v; want refused", g.tk.clockCheck.measured, g.tk.clockCheck.refused)
	}
	tick := 15 * time.Second
	for end := now.Add(3 * time.Hour); ; now = now.Add(tick) {
		if got, ok := storedProfile(t, srv, team); ok && got.Epoch != stored.Epoch {
			break
		}
		if !now.Before(end) {
			t.Fatalf("no fold written in 3 h (of the fake clock) with TIME refused; withheld %v",
				testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("withheld")))
		}
		checkSpread(g, now, tick, team, 300*15/60, func(time.Time, limit.Decision) {})
		clk.Set(now.Add(tick))
		tickAll(t, g)
	}
	if n := testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("withheld")); n != 0 {
		t.Errorf("gate_limiter_profile_writes_total{result=withheld} = %v with TIME refused, want 0", n)
	}
}
