package tick

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestHungFirstInstanceSkipsNoTick: with instance 0 of two hung (SIGSTOP: it keeps its
// connections and answers nothing), Run still starts a tick at every boundary. The fleet
// count and the clock check ask instance 0 after the read phase; each waited a deadline
// of its own, a whole TickTimeout past the tick's, so the next boundary had passed when
// the loop came round and Run skipped it: the teams on the healthy instance were written
// every other interval.
func TestHungFirstInstanceSkipsNoTick(t *testing.T) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t)}
	const interval = 400 * time.Millisecond
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{srvs[0].Client(t), srvs[1].Client(t)}, Config{TickInterval: interval, KeyPrefix: "hung"}, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	boundaries := make(chan time.Time, 1000)
	tk.onPhase = func(part int, boundary time.Time, ended bool) {
		if part == partWrites && !ended {
			boundaries <- boundary
		}
	}
	srvs[0].Pause(t)
	defer srvs[0].Resume(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tk.Run(ctx); close(done) }()
	var ticks []time.Time
	for len(ticks) < 12 {
		ticks = append(ticks, <-boundaries)
	}
	cancel()
	srvs[0].Resume(t) // the final flush asks it too
	<-done
	skipped := 0
	for i := 1; i < len(ticks); i++ {
		skipped += int(ticks[i].Sub(ticks[i-1])/interval) - 1
	}
	// A loaded machine may miss a boundary now and then; the fault missed every other.
	if skipped > 3 {
		t.Errorf("Run skipped %d boundaries in %d ticks with instance 0 hung, want none: %v", skipped, len(ticks), ticks)
	}
}
