package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// An adaptive limiter's count of window F is read when its profile is folded, in window
// F+2 (ApplyProfile), and that read may come late in F+2: a Redis outage over the window's
// edge, reads put off over the tick's budget, a team met mid-window. The counter must
// still be there at the end of F+2: a counter gone reads as 0, and the fold learns a
// window the team sent in as silent (and with it every window of the fold's period).
// Before, it lived 2 × the window plus the margin from its creation, as a static one: a
// count written at F's first tick was gone 30 s into F+2. A static limiter's counters
// keep 2 × the window.
func TestAdaptiveCountersOutliveTheirFold(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, time.Hour)
	static := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1_000_000}, Config{KeyPrefix: "static"}, srv)
	ctx := context.Background()
	rdb := srv.Client(t)
	start := clk.Now() // a window's start
	clk.Advance(time.Second)
	for _, g := range []*gate{gs[0], static} {
		g.l.CheckAt(clk.Now(), "t", 10)
		if r := g.tk.Tick(ctx); r.Errors != 0 {
			t.Fatalf("tick: %+v", r)
		}
	}
	ep := gs[0].l.Epoch(clk.Now())
	ttl, err := rdb.PTTL(ctx, Key(DefaultKeyPrefix, "t", ep)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if lives, want := clk.Now().Sub(start)+ttl, 3*time.Minute; lives < want {
		t.Errorf("an adaptive limiter's count of window F lives %s from F's start, want at least %s: its fold, in F+2, reads 0 after that", lives, want)
	}
	sttl, err := rdb.PTTL(ctx, Key("static", "t", ep)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*time.Minute + KeyTTLMargin; sttl <= 2*time.Minute || sttl > want {
		t.Errorf("a static limiter's counter expires in %s, want within (2m, %s]", sttl, want)
	}
}

// TestCountersOutliveTheirWindowWhenTheWriterIsAhead: a gate whose clock runs a window or
// more ahead of Redis's (and of the fleet's) writes its counts of window W during W−1, and the
// first write of a key sets its TTL: from then, 2 × the window and the margin, the key
// was gone 30 s after W ended, while the fleet still reads W through W+1 (the sliding
// estimate's previous window): every team's count of W lost to the fleet for most of a
// window, for one gate's clock. A gate that has measured its clock ahead of Redis's (the
// clock check) gives the keys it creates that much longer, so each lives until its
// window's start + its lifetime + the margin by Redis's clock, whoever created it.
func TestCountersOutliveTheirWindowWhenTheWriterIsAhead(t *testing.T) {
	srv := redistest.Start(t)
	const window = time.Minute
	ctx := context.Background()
	// A second into a window, by a clock between one and two windows ahead: the window
	// begins over a window after the write by Redis's.
	now := time.Now()
	ahead := clock.NewFake(now.Truncate(window).Add(2*window + time.Second))
	g := newGate(t, ahead, limit.Config{Window: window, Threshold: 1_000_000}, Config{KeyPrefix: "ahead"}, srv)
	g.tk.clockCheck.wall = &lateAnswerClock{off: ahead.Now().Sub(now)}
	g.tk.checkClock(ctx)
	g.l.CheckAt(ahead.Now(), "t", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick: %+v, want one write", r)
	}
	ep := g.l.Epoch(ahead.Now())
	ttl, err := srv.Client(t).PTTL(ctx, Key("ahead", "t", ep)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// By the real clock, Redis's (and the fleet's).
	expires := time.Now().Add(ttl)
	begins := time.Unix(0, ep*int64(window))
	// Less a second: the clock check measures the offset to within half its round trip.
	if want := begins.Add(2*window + KeyTTLMargin - time.Second); expires.Before(want) {
		t.Errorf("a counter created a window early by a gate whose clock is ahead expires %s after its window began (by Redis's clock), want at least %s: the fleet reads it until its window's end + a window",
			expires.Sub(begins).Round(time.Second), want.Sub(begins).Round(time.Second))
	}
}

// TestCreatedEarlyIsBounded: the time a gate ahead of Redis's clock adds to the counters it
// creates (createdEarly) is bounded by their own lifetime. A host whose clock is a day
// ahead (booted before its time service set it) gave each counter it created a day more:
// a new set of keys every window, each kept a day, Redis's memory for its counters grown
// by a day's windows (1,440 at a minute), and its counts read by the fleet a day on, of
// traffic a day old. A gate up to a lifetime ahead still has its counters outlive their
// window (TestCountersOutliveTheirWindowWhenTheWriterIsAhead).
func TestCreatedEarlyIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	const window = time.Minute
	ctx := context.Background()
	now := time.Now()
	ahead := clock.NewFake(now.Add(24 * time.Hour))
	g := newGate(t, ahead, limit.Config{Window: window, Threshold: 1_000_000}, Config{KeyPrefix: "dayahead"}, srv)
	g.tk.clockCheck.wall = &lateAnswerClock{off: ahead.Now().Sub(now)}
	g.tk.checkClock(ctx)
	g.l.CheckAt(ahead.Now(), "t", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick: %+v, want one write", r)
	}
	ttl, err := srv.Client(t).PTTL(ctx, Key("dayahead", "t", g.l.Epoch(ahead.Now()))).Result()
	if err != nil {
		t.Fatal(err)
	}
	lifetime := g.tk.limits[0].ttl
	if most := 2*lifetime + KeyTTLMargin; ttl > most {
		t.Errorf("a counter created by a gate a day ahead of Redis's clock expires in %s, want at most %s (twice its lifetime and the margin)",
			ttl.Round(time.Second), most)
	}
}
