package tick

import (
	"context"
	"testing"
	"time"

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
