package tick

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestStaleCountInDoubtIsNotResent: a batch in doubt holds a count whose epoch goes stale
// beside a live one. The stale count is dropped (and counted so), so the batch's resend
// must not write it: it did, and the metric counted as dropped a count Redis then held.
func TestStaleCountInDoubtIsNotResent(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(5 * time.Second))
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: 10 * time.Second, Threshold: 1000}, Config{}, srv)
	ctx := context.Background()
	ep := g.l.Epoch(clk.Now())

	// One batch (one instance, one lane) with a count of epoch ep and one of ep+1.
	g.l.Check("team-old", 4)
	clk.Advance(10 * time.Second)
	g.l.Check("team-new", 3)
	srv.Stop(t)
	if r := g.tk.Tick(ctx); r.Batches[outUnknown] != 1 || r.CarriedWrites != 2 {
		t.Fatalf("tick with Redis down = %+v, want one batch of 2 counts in doubt", r)
	}
	// Epoch ep is no longer written; ep+1 still is.
	clk.Advance(10 * time.Second)
	srv.Restart(t)
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Dropped != 4 || r.Batches[outApplied] != 1 {
		t.Fatalf("tick after the restart = %+v, want the 4 stale records dropped and the batch applied", r)
	}
	if r.Writes != 1 {
		t.Errorf("tick after the restart wrote %d counts, want the live one only", r.Writes)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-old", ep); got != 0 {
		t.Errorf("stale epoch written: %d, though counted dropped", got)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-new", ep+1); got != 3 {
		t.Errorf("team-new holds %d, want the 3 counted", got)
	}
	if got := testutil.ToFloat64(g.tk.m.dropped.WithLabelValues("stale_epoch")); got != 4 {
		t.Errorf("dropped{reason=stale_epoch} = %v, want 4", got)
	}
}

// TestStaleKeptBatchIsNotReplayed: Redis loses a confirmed batch whose counts are all of an
// epoch no longer written. Nothing is sent again, so nothing is reported replayed: the
// metric and the warning said a batch was replayed with none of its counts.
func TestStaleKeptBatchIsNotReplayed(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(5 * time.Second))
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: 10 * time.Second, Threshold: 1000}, Config{Writer: "w1"}, srv)
	logs := g.withLog()
	ctx := context.Background()
	ep := g.l.Epoch(clk.Now())

	g.l.Check("team-old", 4)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("first tick = %+v", r)
	}
	// Two epochs on (still within KeepConfirmed's ticks), Redis loses everything.
	clk.Advance(20 * time.Second)
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g.l.Check("team-new", 2)
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Writes != 1 || r.Batches[outReplayed] != 0 || r.Replayed != 0 {
		t.Fatalf("tick after the loss = %+v, want the new count written and nothing replayed", r)
	}
	if got := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("replayed")); got != 0 {
		t.Errorf("batches{outcome=replayed} = %v, want 0: no count was sent again", got)
	}
	if w := logs.lines("level=WARN"); len(w) != 0 {
		t.Errorf("warnings = %q, want none", w)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-old", ep); got != 0 {
		t.Errorf("stale epoch written again: %d", got)
	}
}
