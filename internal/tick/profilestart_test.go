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
	stored := spike.Profile{Epoch: g.l.Epoch(now.Add(-48 * time.Hour)), Windows: 1440, Level: 300}
	v, _ := stored.MarshalBinary()
	if err := srv.Client(t).Set(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
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
