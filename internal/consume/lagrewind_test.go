package consume

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLagRefreshAfterAnAbortedTransaction: exactly once, an aborted transaction's
// records are polled again, and until they are they are the partition's lag, however
// long the poll takes (here its fetches fail): measured again from the input's end, it
// counts them. It was measured from past them, where their poll had left it: 0 on a gate
// that had caught up, the gate with records to route again taken for idle by the
// watchdog (never stalled, ready and live), and gate_partition_lag_records showing none.
func TestLagRefreshAfterAnAbortedTransaction(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.WatchInterval = time.Second // the lag refreshed every second, not every 5 s
	g := env.start(t, "a")
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 1)
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer refused.Remove()
	const more = 10
	produceTo(t, prod, 0, 1, more)
	waitFor(t, 20*time.Second, "the records routed and refused", func() bool { return refused.Hits() > 0 })
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	defer hold.Remove()
	aborted := func() float64 { return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) }
	waitFor(t, 20*time.Second, "the transaction aborted", func() bool { return aborted() > 0 })
	n := aborted()
	p := g.c.owned(0)
	at := p.lagAt.Load()
	waitFor(t, 40*time.Second, "the lag measured from the input's end", func() bool { return p.lagAt.Load() > at })
	if aborted() != n {
		t.Fatalf("transactions aborted %v, then %v: records were polled again", n, aborted())
	}
	if lag, series := p.lag.Load(), testutil.ToFloat64(g.c.m.lag.WithLabelValues("0")); lag < more || series < more {
		t.Errorf("the aborted transaction's %d records to route again: lag %d, gate_partition_lag_records %v", more, lag, series)
	}
	if !g.c.hasWork() {
		t.Error("the watchdog takes the gate for idle")
	}
}
