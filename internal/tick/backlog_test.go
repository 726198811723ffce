package tick

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestBacklogFitsTheTickTimeout: a backlog larger than Redis answers within the client's
// timeouts (150,000 teams counted at once, each due for a write and, at a read floor of
// one record, for reads: a per-user rule when a third gate joined the demo, or the counts
// kept through an outage) was sent whole every tick, and every tick timed out: nothing
// written or read for as long as it lasted (0 writes in 30 ticks here; over a minute in
// the demo, a team at twice its limit let through), writes in doubt resent whole and
// failed reads due again. The tick fits its key budget to what Redis answers in time
// (fitBudget): the backlog is written, and reads are made, tick by tick.
func TestBacklogFitsTheTickTimeout(t *testing.T) {
	t.Parallel()
	const teams, ticks = 150_000, 20
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	// The client's timeouts short, the tick's long: a pipeline's replies must come within
	// 40 ms, as GATE_REDIS_READ_TIMEOUT bounds a gate's (250 ms).
	g := newGateWith(t, clk, limit.Config{Window: time.Minute, Threshold: 300, SyncInterval: time.Second},
		Config{KeyPrefix: "t", TickTimeout: 10 * time.Second},
		RedisOptions{ReadTimeout: 40 * time.Millisecond, WriteTimeout: 40 * time.Millisecond, DialTimeout: 5 * time.Second}, srv)
	logs := g.withLog()
	for i := range teams {
		g.l.Check("u"+strconv.Itoa(i), 1)
	}
	writes, reads, failed := 0, 0, 0
	for i := range ticks {
		clk.Advance(time.Second)
		for j := i % 10; j < teams; j += 10 { // a tenth of the teams again each tick
			g.l.Check("u"+strconv.Itoa(j), 1)
		}
		r := g.tk.Tick(context.Background())
		writes, reads = writes+r.Writes, reads+r.Reads
		if r.Errors > 0 {
			failed++
		}
	}
	t.Logf("%d ticks: %d counts written, %d reads made, %d ticks failed", ticks, writes, reads, failed)
	if writes < teams || reads == 0 || failed == ticks {
		t.Errorf("%d ticks wrote %d counts (the backlog %d) and made %d reads, %d of them failed: the backlog is sent whole and times out",
			ticks, writes, teams, reads, failed)
	}
	if len(logs.lines("redis ticks time out with this many keys")) == 0 {
		t.Errorf("no line saying the ticks carry fewer keys; log:\n%s", logs.buf.String())
	}
}
