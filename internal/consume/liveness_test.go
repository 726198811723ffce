package consume

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// trickle produces input records, a few every 5 ms, until the test ends, so that the
// gates always have a transaction open; it returns how many it produced so far.
func trickle(t *testing.T, env *gateEnv) func() int {
	t.Helper()
	cl := producer(t, env.cluster)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu sync.Mutex
		n  int
		wg sync.WaitGroup
	)
	wg.Go(func() {
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			mu.Lock()
			recs := make([]*kgo.Record, 5)
			for i := range recs {
				recs[i] = inputRecord(n, "team-"+strconv.Itoa(n%7))
				n++
			}
			mu.Unlock()
			_ = cl.ProduceSync(ctx, recs...).FirstErr()
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// crashPeer joins the group as a new member (a static one, so that closing does not
// leave the group: a pod that dies without leaving) and dies as soon as it has joined.
// The next peer's join then waits for the dead one's session to time out.
func crashPeer(t *testing.T, env *gateEnv, name string) {
	t.Helper()
	joined := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(append(testClientOpts(),
		kgo.SeedBrokers(env.cluster.ListenAddrs()...),
		kgo.ConsumerGroup(testGroup), kgo.ConsumeTopics(inTopic),
		kgo.InstanceID(name), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(joined) }) }),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if cl.PollFetches(context.Background()).IsClientClosed() {
				return
			}
		}
	}()
	select {
	case <-joined:
	case <-time.After(30 * time.Second):
		t.Fatalf("peer %s never joined", name)
	}
	cl.Close()
}

// TestExactlyOnceSurvivesCrashLoopingPeer: a peer crash-loops (joins, dies without
// leaving, restarts under a new member id), so every join waits out the dead member's
// session, longer than the healthy gate's transaction timeout. The broker aborts the
// healthy gate's transactions and fences it each time; it recovers, and since a
// rebalance caused each fence, none counts toward the limit that stops a gate: it keeps
// running and routes everything. Before, its Run stopped after the sixth fence.
func TestExactlyOnceSurvivesCrashLoopingPeer(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 4)
	env.ccfg.TransactionTimeout = 300 * time.Millisecond // below the peer's 1s session, on purpose
	g := env.start(t, "healthy")
	produced := trickle(t, env)
	waitFor(t, 20*time.Second, "the healthy gate's first commits", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) > 0
	})
	fences := func() float64 {
		return testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("group_churn")) +
			testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("slow_transaction"))
	}
	// Until the gate has been fenced more often than the limit, bounded.
	cycles := 0
	for ; fences() <= maxRecoveries && cycles < 60; cycles++ {
		crashPeer(t, env, "peer-"+strconv.Itoa(cycles))
		select {
		case err := <-g.done:
			t.Fatalf("the healthy gate stopped after %d peer crashes and %v fences: %v", cycles+1, fences(), err)
		default:
		}
	}
	if fences() <= maxRecoveries {
		t.Fatalf("only %v fences in %d peer crashes: the test did not test", fences(), cycles)
	}
	// Everything produced so far is routed, once, by the healthy gate alone.
	n := produced()
	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	t.Logf("%d peer crashes, %v fences recovered (group churn), %v counted; %d records once each",
		cycles, testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("group_churn")),
		testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("slow_transaction")), n)
}
