package consume

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLagRefreshedOnAnIdleGateStartsTheStallClock: an idle gate is no stalled one, and
// the records that end its idling have waited no longer than since they came. When a
// partition's lag is measured from the input's end (it was not polled for a while) and
// finds records an idle gate has not polled yet (here its fetches fail; a leader moving,
// a rebalance), the stall is counted from then. It was counted from the gate's last
// progress, before it idled: the idle time was a stall at once, the gate not ready and
// not live however briefly the records had waited. And it is started before the lag is
// set, not after: a Stalled read between the two (a probe; here the lagRefreshed hook,
// which reads it there) counted the idle time, for an instant.
func TestLagRefreshedOnAnIdleGateStartsTheStallClock(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	// The lag refreshed every second, not every 5 s.
	env.ccfg.WatchInterval = time.Second
	var came atomic.Int64 // when the records the gate cannot fetch were produced (Unix ns)
	var mu sync.Mutex
	var early []string       // stalls read as the lag was set, longer than the records had been there
	var checked atomic.Int64 // lag refreshes that found the records
	env.before = func(c *Consumer) {
		c.lagRefreshed = func() {
			at := came.Load()
			if at == 0 {
				return
			}
			s := c.Stalled()
			there := time.Since(time.Unix(0, at)) // read after s, as in the test below
			if !c.hasWork() {
				return // a refresh before the records came: nothing found
			}
			checked.Add(1)
			if s > there {
				mu.Lock()
				early = append(early, fmt.Sprintf("stalled %s as the lag was set, the records there %s", s.Round(time.Millisecond), there.Round(time.Millisecond)))
				mu.Unlock()
			}
		}
	}
	g := env.start(t, "a")
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 1)
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	// Idle: the lag is measured from the input's end, and there is none.
	p := g.c.owned(0)
	at := p.lagAt.Load()
	waitFor(t, 40*time.Second, "the idle partition's lag measured from the input's end", func() bool { return p.lagAt.Load() > at })
	if lag := p.lag.Load(); lag != 0 {
		t.Fatalf("an idle partition's lag: %d", lag)
	}

	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	defer hold.Remove()
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	came.Store(time.Now().UnixNano())
	produceTo(t, prod, 0, 1, 10)
	waitFor(t, 40*time.Second, "the records not polled counted as lag", func() bool { return p.lag.Load() > 0 })
	stalled, waited := g.c.Stalled(), time.Since(time.Unix(0, came.Load()))
	if stalled > waited {
		t.Errorf("stalled %v: counted from before the records came %v ago (the gate's idle time)", stalled, waited)
	}
	waitFor(t, 20*time.Second, "the lag refresh that found the records ended", func() bool { return checked.Load() > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("the idle time counted as the lag was set, before the stall clock started (%d times): %s", len(early), early[0])
	}
}
