package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestLostWritesWarnedOnceAMinute: a Redis that keeps losing what it acknowledged (its
// lane's sequence key evicted tick after tick, under an allkeys-* policy and another
// tenant's pressure) was warned of once a tick, the one Redis warning not paced, and the
// line named a failover or a restart only. It is warned of once a minute at most, with
// how many lines it left out, and names an eviction too.
func TestLostWritesWarnedOnceAMinute(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100000, ColdWriteInterval: writeEveryTick}, Config{KeyPrefix: "t"}, srv)
	logs := g.withLog()
	ctx := context.Background()
	adm := srv.Client(t)
	ep := g.l.Epoch(clk.Now())
	for s := range 12 {
		for range 100 {
			g.l.Check("team", 1)
		}
		clk.Advance(time.Second)
		g.tk.Tick(ctx)
		if s >= 2 { // every key but the counter: the lane's sequence key
			keys, err := adm.Keys(ctx, "t*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if k != Key("t", "team", ep) {
					adm.Del(ctx, k)
				}
			}
		}
	}
	lines := logs.lines("redis lost writes it had acknowledged")
	if len(lines) != 1 {
		t.Fatalf("%d lines of lost writes in 12 ticks, want one (a minute's); log:\n%s", len(lines), logs.buf.String())
	}
	if len(logs.lines("its sequence key evicted")) == 0 {
		t.Errorf("the line does not name an eviction; log:\n%s", logs.buf.String())
	}
}
