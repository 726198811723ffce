package tick

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTickNowReadsExpectedKeys: a gate that takes partitions over puts the keys of the
// records waiting there in its cache (limit.Limiter.Expect) and has Run make a tick at
// once (TickNow): the fleet's hold of a team is then this gate's before its first record
// of it, where that record was first contact, admitted by this gate's own count (gate c,
// the old way: a tick made now reads nothing of a team it has never counted). A team the
// fleet has under its limit stays allowed; the reads count as primed.
func TestTickNowReadsExpectedKeys(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := holdGates(t, 3, srv)
	a, b, c := gs[0], gs[1], gs[2]
	now := epochStart.Add(500 * time.Millisecond)
	a.l.CheckAt(now, "whale", 610)
	if d := a.l.CheckAt(now, "whale", 1); !d.Held {
		t.Fatalf("gate a at 611: %+v, want held", d)
	}
	a.l.CheckAt(now, "quiet", 5)
	now = epochStart.Add(time.Second)
	clk.Set(now)
	tickAll(t, a) // the counts and the hold flag in Redis

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, g := range []*gate{b, c} {
		done := make(chan struct{})
		go func() { defer close(done); g.tk.Run(ctx) }()
		defer func() { cancel(); <-done }()
	}
	b.l.Expect(now, "whale")
	b.l.Expect(now, "quiet")
	for _, g := range []*gate{b, c} {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := g.tk.TickNow(tctx); err != nil {
			t.Fatalf("TickNow: %v", err)
		}
		tcancel()
	}
	if d := b.l.CheckAt(now, "whale", 1); !d.Held {
		t.Errorf("gate b's first record of the held team, its key expected: %+v, want held", d)
	}
	if d := b.l.CheckAt(now, "quiet", 1); d.Limited {
		t.Errorf("gate b's first record of a quiet team: %+v, want allowed", d)
	}
	if d := c.l.CheckAt(now, "whale", 1); d.Limited {
		t.Errorf("gate c, nothing expected: %+v, want first contact (allowed): the test no longer shows what Expect adds", d)
	}
	if n := testutil.ToFloat64(b.tk.m.reads.WithLabelValues("primed")); n != 2 {
		t.Errorf("gate b's primed reads: %v, want 2", n)
	}
}

// TestTickNowEndsWithItsContext: without Run, TickNow returns its context's error, not
// hanging the caller (a gate routes its records as first contact then).
func TestTickNowEndsWithItsContext(t *testing.T) {
	srv := redistest.Start(t)
	gs, _ := holdGates(t, 1, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := gs[0].tk.TickNow(ctx); err == nil {
		t.Error("TickNow without Run: nil error, want its context's")
	}
}

// TestTickNowSaysItsReadsFailed: with Redis gone, TickNow's tick fails its reads and says
// so (a gate then knows its waiting records go as first contact), where it returned nil.
func TestTickNowSaysItsReadsFailed(t *testing.T) {
	srv := redistest.Start(t)
	gs, _ := holdGates(t, 1, srv)
	g := gs[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.tk.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv.Stop(t)
	g.l.Expect(epochStart, "whale")
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	if err := g.tk.TickNow(tctx); err == nil || tctx.Err() != nil {
		t.Errorf("TickNow with Redis gone: %v (context: %v), want its failed read said", err, tctx.Err())
	}
}

// TestTickNowSaysAScheduledTicksFailedReadOfItsKeys: a tick Run makes may take a mark
// between Expect and TickNow's own tick, its read of the key failing; TickNow's tick then
// read the key again as any due read, failed again, and TickNow said all was read (a
// review): the gate went on priming as if the key had been read.
func TestTickNowSaysAScheduledTicksFailedReadOfItsKeys(t *testing.T) {
	_, g := missedByATick(t)
	tctx := runTicks(t, g)
	if err := g.tk.TickNow(tctx); err == nil || tctx.Err() != nil {
		t.Errorf("TickNow after a tick that took the mark and failed its read: %v (context: %v), want the failed read said", err, tctx.Err())
	}
	// Said once: the next tick now has nothing of it to say (the key's reads since are
	// no longer primed).
	if err := g.tk.TickNow(tctx); err != nil {
		t.Errorf("a second TickNow: %v, want nil", err)
	}
}

// TestTickNowQuietWhenItsTickReadTheKeyAScheduledTickMissed: a scheduled tick took
// Expect's mark and its read failed (a Redis blip), and Redis was back for TickNow's own
// tick, which read the key as a retry and applied the fleet's view: TickNow returns nil,
// where it said the marked key's read failed (the gate then rested its priming for 10 s
// and logged its records as routed unread; a review).
func TestTickNowQuietWhenItsTickReadTheKeyAScheduledTickMissed(t *testing.T) {
	srv, g := missedByATick(t)
	srv.Restart(t)
	tctx := runTicks(t, g)
	err := g.tk.TickNow(tctx)
	st, ok := g.l.Snapshot(epochStart, "whale")
	if !ok || st.ReadAt.IsZero() || st.Local {
		t.Fatalf("TickNow's tick did not read the key from Redis (cached %v, %+v): the test no longer shows the case", ok, st)
	}
	if err != nil {
		t.Errorf("TickNow whose tick read the key a scheduled tick missed: %v, want nil", err)
	}
}

// TestTickNowLeavesOtherTeamsFailuresAside: a tick now whose reads of the keys marked
// were made says nothing of another team's read that failed (on another instance, down):
// the gate would have rested its priming for that. Before, any failed or put off read
// of the tick made TickNow return an error.
func TestTickNowLeavesOtherTeamsFailuresAside(t *testing.T) {
	t.Parallel()
	up, down := redistest.Start(t), redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: fleetWindow, Threshold: 600}, Config{TickInterval: time.Second}, up, down)
	var marked, other string
	for i := 0; marked == "" || other == ""; i++ {
		k := fmt.Sprintf("team-%d", i)
		if InstanceFor(k, 2) == 0 && marked == "" {
			marked = k
		} else if InstanceFor(k, 2) == 1 && other == "" {
			other = k
		}
	}
	now := epochStart.Add(500 * time.Millisecond)
	g.l.CheckAt(now, other, 500) // due for its first read, on the instance that will be down
	down.Stop(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.tk.Run(ctx) }()
	defer func() { cancel(); <-done }()
	g.l.Expect(now, marked)
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	if err := g.tk.TickNow(tctx); err != nil {
		t.Errorf("TickNow, the marked key read and another team's read failed: %v, want nil", err)
	}
	if n := testutil.ToFloat64(g.tk.m.reads.WithLabelValues("primed")); n != 1 {
		t.Errorf("primed reads: %v, want 1", n)
	}
}

// TestTickNowWaitsOutASplitTicksReads: asked between a split tick's write phase and its
// read phase, Run makes the tick now after the read phase, not before it: made early, the
// planned reads would miss other gates' writes and be applied as following them all.
func TestTickNowWaitsOutASplitTicksReads(t *testing.T) {
	srv := redistest.Start(t)
	g := newGate(t, nil, limit.Config{Window: fleetWindow, Threshold: 600}, Config{TickInterval: 200 * time.Millisecond}, srv)
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	asked := make(chan error, 1)
	var once sync.Once
	g.tk.onPhase = func(part int, _ time.Time, ended bool) {
		switch {
		case part == partWrites && ended:
			once.Do(func() {
				note("writes ended, tick now asked")
				go func() {
					err := g.tk.TickNow(ctx)
					note("tick now made")
					asked <- err
				}()
			})
		case part == partReads && !ended:
			note("reads began")
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); g.tk.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case err := <-asked:
		if err != nil {
			t.Fatalf("TickNow: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no tick now within 30 s")
	}
	mu.Lock()
	defer mu.Unlock()
	if i, j := slices.Index(order, "reads began"), slices.Index(order, "tick now made"); i < 0 || j < i {
		t.Errorf("order %q: want the split tick's reads to begin before the tick now is made", order)
	}
}

// missedByATick is a gate whose key "whale" Expect marked and whose tick, Redis stopped
// (srv), took the mark and failed its read.
func missedByATick(t *testing.T) (*redistest.Server, *gate) {
	t.Helper()
	srv := redistest.Start(t)
	gs, _ := holdGates(t, 1, srv)
	g := gs[0]
	srv.Stop(t)
	g.l.Expect(epochStart, "whale")
	if res := g.tk.Tick(context.Background()); res.PrimedMissed != 1 {
		t.Fatalf("a tick with Redis gone after Expect: %d primed reads missed (%+v), want 1", res.PrimedMissed, res)
	}
	return srv, g
}

// runTicks runs g's Run until the test ends, and returns a context for its TickNows (30 s).
func runTicks(t *testing.T, g *gate) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.tk.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(tcancel)
	return tctx
}
