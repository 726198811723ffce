package consume

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWatchdogIdleAfterTransactionalInput: input written in a transaction ends with its
// commit marker, an offset no poll returns; a gate that has routed and committed every
// record of it is idle, and stays ready and live however long it idles, in both delivery
// modes. Before, the marker counted as lag (the high watermark is one past the last
// record), so the idle gate went not ready past StallNotReady and not live past
// StallRestart: Kubernetes restarted it for want of input.
func TestWatchdogIdleAfterTransactionalInput(t *testing.T) {
	t.Parallel()
	const n = 50
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			env.ccfg.TransactionalID = "gate-" + d.String()
			env.ccfg.StallNotReady = 300 * time.Millisecond
			env.ccfg.StallRestart = 600 * time.Millisecond

			prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.TransactionalID("input-writer"),
				kgo.DefaultProduceTopic(inTopic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := prod.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for id := range n {
				r := inputRecord(id, "team-"+strconv.Itoa(id%7))
				if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if hwm := env.cluster.PartitionInfo(inTopic, 0).HighWatermark; hwm != n+1 {
				t.Fatalf("input high watermark %d, want %d (the records and the commit marker)", hwm, n+1)
			}

			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "every record committed", func() bool {
				gi := env.cluster.GroupInfo(testGroup)
				if gi == nil {
					return false
				}
				gc, ok := gi.Commits[inTopic][0]
				return ok && gc.Offset >= n
			})
			for deadline := time.Now().Add(4 * env.ccfg.StallRestart); time.Now().Before(deadline); {
				if !g.c.Ready() || g.c.Live() != nil {
					t.Fatalf("an idle gate: ready %v (%v), live %v", g.c.Ready(), g.c.NotReady(), g.c.Live())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
