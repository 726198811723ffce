package consume

import (
	"testing"
	"time"

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
