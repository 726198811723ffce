package consume

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLagRefreshAtLeastOnceStopsAtTheStableEnd: at least once reads read_committed too,
// so an upstream transaction kept open is not pollable work: the lag refresh of a
// partition not polled measured to the high watermark and counted it, the watchdog then
// taking the gate for stalled.
func TestLagRefreshAtLeastOnceStopsAtTheStableEnd(t *testing.T) {
	t.Parallel()
	const n = 10
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = time.Second
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-1")
	}
	produceAll(t, producer(t, env.cluster), recs)
	writeInTxn(t, upstream(t, env.cluster), n, n+5) // left open
	var refreshed atomic.Int64
	env.before = func(c *Consumer) { c.lagRefreshed = func() { refreshed.Add(1) } }
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "committed below the open transaction", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		gc, ok := gi.Commits[inTopic][0]
		return ok && gc.Offset >= n
	})
	waitFor(t, 30*time.Second, "a lag refresh", func() bool { return refreshed.Load() > 0 })
	p := g.c.owned(0)
	if p == nil {
		t.Fatal("no partition 0")
	}
	if lag := p.lag.Load(); lag != 0 {
		t.Errorf("the watchdog's lag %d: the open upstream transaction's records counted as work (hasWork=%v)", lag, g.c.hasWork())
	}
}
