package consume

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAtLeastOnceSkipsAbortedInput: records an upstream producer wrote in a transaction
// it aborted are not data, and no reader of read_committed ever sees them; at least
// once the gate read uncommitted and routed them (5 aborted records of 10 reached
// accepted, counted against their team's limit), and records of a transaction still
// open before it committed. It reads committed in both delivery modes, and commits past
// the marker that ends the last transaction.
func TestAtLeastOnceSkipsAbortedInput(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	up := upstream(t, env.cluster)
	write := func(from int, end kgo.TransactionEndTry) {
		writeInTxn(t, up, from, from+5)
		if err := up.EndTransaction(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
	write(0, kgo.TryAbort)
	write(5, kgo.TryCommit)
	g := env.start(t, "a")
	collect(t, env.cluster, 5, 30*time.Second, 0)
	// Committed past the commit marker that ends the input (read_committed returns it
	// with its records): a commit one short of it reads as a record of lag for good.
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	g.stop(t)
	out := collectAll(t, env.cluster)
	for id := range 10 {
		if got := len(out.ids[id]); (id < 5) != (got == 0) {
			t.Errorf("input %d (aborted: %v) routed %d times", id, id < 5, got)
		}
	}
}

// TestInputEndingInAnAbortedTransactionIsCommitted: an input whose last records are an
// aborted upstream transaction's ends in a poll of only its abort marker (read_committed
// drops the records). The commit must reach the marker's end all the same, in both
// modes: one stopping before the aborted records reads, in lag tools (and KEDA, and the
// gate's own lag, measured to the last stable offset), as records the gate never routes.
func TestInputEndingInAnAbortedTransactionIsCommitted(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			if d == ExactlyOnce {
				env.ccfg.TransactionalID = "g-0"
			}
			up := upstream(t, env.cluster)
			writeInTxn(t, up, 0, 5)
			if err := up.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			g := env.start(t, "a")
			collect(t, env.cluster, 5, 30*time.Second, 0)
			waitCommitted(t, env.cluster, 1, 20*time.Second)
			// Then a transaction aborted: a poll of its marker alone.
			writeInTxn(t, up, 5, 10)
			if err := up.EndTransaction(t.Context(), kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			waitCommitted(t, env.cluster, 1, 20*time.Second)
			if lag := testutil.ToFloat64(g.c.m.lag.WithLabelValues("0")); lag != 0 {
				t.Errorf("lag %v past the aborted transaction, want 0", lag)
			}
			g.stop(t)
			out := collectAll(t, env.cluster)
			for id := range 10 {
				if got := len(out.ids[id]); (id >= 5) != (got == 0) {
					t.Errorf("input %d (aborted: %v) routed %d times", id, id >= 5, got)
				}
			}
		})
	}
}
