package tick

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestStallCountsOnce: Redis stalls (a fork, an fsync, a slow command; here SIGSTOP) while
// a tick's writes are in flight. The client times out and cannot know whether they were
// applied; Redis applies them when it wakes, and the next tick sends them again. Redis must
// hold what was counted, once. Before writes were made safe to repeat: 101 counted, 201
// held. While a batch is in doubt its lane gets no new batch.
func TestStallCountsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	// Generous timeouts for the ticks that must succeed; those made while Redis is stopped
	// wait stallWait (stallCtx).
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{TickTimeout: 10 * time.Second}, srv)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()

	g.l.Check("team", 1)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("first tick = %+v", r)
	}
	g.l.Check("team", 100)
	srv.Pause(t)
	r := g.tk.Tick(stallCtx(ctx, t))
	if r.Errors != 1 || r.Batches[outUnknown] != 1 {
		srv.Resume(t)
		t.Fatalf("tick during the stall = %+v, want 1 error and 1 batch of unknown outcome", r)
	}
	// Still stalled: the batch in doubt is resent as it is, and the new count waits for
	// the next batch rather than going in one numbered after it (a later number applied
	// first would make the resend look like a repeat, and lose it).
	g.l.Check("team", 7)
	clk.Advance(time.Second)
	r = g.tk.Tick(stallCtx(ctx, t))
	srv.Resume(t)
	if r.Errors != 1 || r.Batches[outUnknown] != 1 || r.CarriedWrites != 2 {
		t.Fatalf("second tick during the stall = %+v, want the one batch in doubt resent and the new count kept back", r)
	}
	// Redis runs what it received before the stall once it wakes.
	deadline := time.Now().Add(20 * time.Second)
	for stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team", ep) != 101 {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %d after waking, want the stalled write applied (101)", stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team", ep))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; ; i++ {
		clk.Advance(time.Second)
		r = g.tk.Tick(ctx)
		if r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		if i == 20 {
			t.Fatalf("writes still not confirmed after %d ticks: %+v", i, r)
		}
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team", ep); got != 108 {
		t.Errorf("Redis holds %d, want the 108 counted", got)
	}
	if d := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("duplicate")); d != 1 {
		t.Errorf("duplicate batches = %v, want 1 (the resend found its batch applied)", d)
	}
	// New counts after the resend are written as usual.
	g.l.Check("team", 5)
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick after recovery = %+v", r)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team", ep); got != 113 {
		t.Errorf("Redis holds %d, want 113", got)
	}
}

// A tick or pipeline that takes up to a minute (GATE_TICK_INTERVAL may be that long) lands
// in a bucket of its own, not +Inf: GateTickSlow compares the 99th percentile with
// GATE_TICK_INTERVAL, and histogram_quantile reads no further than the last finite bound
// (4 s before: the alert could not fire from a 5 s interval).
func TestTickDurationMeasuresLongTicks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, 1, false, nil, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m.tickDur.Observe(50)
	m.pipelineDur.WithLabelValues("0").Observe(50)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range fams {
		if f.GetName() != "gate_limiter_tick_duration_seconds" && f.GetName() != "gate_limiter_pipeline_duration_seconds" {
			continue
		}
		found++
		top := f.GetMetric()[0].GetHistogram().GetBucket()
		if last := top[len(top)-1].GetUpperBound(); last < 60 {
			t.Errorf("%s: last finite bucket %gs, want a minute or more", f.GetName(), last)
		}
	}
	if found != 2 {
		t.Errorf("found %d of the two duration histograms among %d families", found, len(fams))
	}
}
