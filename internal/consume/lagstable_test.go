package consume

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLagRefreshWithoutTheStableEnd: exactly once, the watchdog's lag of a partition not
// polled for a while is measured from the input's last stable offset; when the listing
// of it fails for the partition (its leader moving, say), the lag is left as it was.
// It was measured from the high watermark instead: the records of a transaction an
// upstream producer keeps open, which the gate cannot poll, counted as its work, and an
// idle gate waiting for that transaction to end went on to stall (not ready, restarted).
func TestLagRefreshWithoutTheStableEnd(t *testing.T) {
	t.Parallel()
	const n, open = 10, 5
	env := newEOSEnv(t, 1)
	env.ccfg.WatchInterval = time.Second // the lag refreshed every second, not every 5 s
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.TransactionalID("input-writer"),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(inTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for id := n; id < n+open; id++ {
		if err := prod.ProduceSync(ctx, inputRecord(id, "team-1")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Refreshes that ended after the fault refused a listing of the stable end: the
	// first of them measured the partition without it. Counted by the hook, not by
	// watching one partition's lagAt, so a reassignment (a new partition) under a loaded
	// machine cannot hide the refresh.
	var stable atomic.Pointer[kfake.FaultHandle]
	var after atomic.Int64
	env.before = func(c *Consumer) {
		c.lagRefreshed = func() {
			if f := stable.Load(); f != nil && f.Hits() > 0 {
				after.Add(1)
			}
		}
	}
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "every record below the open transaction committed", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		gc, ok := gi.Commits[inTopic][0]
		return ok && gc.Offset >= n
	})
	stable.Store(env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1,
		When: func(req kmsg.Request) bool { return req.(*kmsg.ListOffsetsRequest).IsolationLevel == 1 }}))
	defer stable.Load().Remove()
	// A refresh comes every watch interval for a partition unpolled for two, and the
	// refused listing is retried until the refresh's deadline (watchRequestTimeout).
	waitFor(t, 90*time.Second, "a lag refresh ended with its stable end refused", func() bool { return after.Load() > 0 })
	p := g.c.owned(0)
	if p == nil {
		t.Fatal("the gate owns no partition 0")
	}
	if lag := p.lag.Load(); lag != 0 {
		t.Errorf("the watchdog's lag %d: the open transaction's records counted as work", lag)
	}
}
