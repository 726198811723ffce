package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestInputEndingInAnAbortedTransactionOnApacheKafka: an input whose last records are an
// upstream transaction's that aborted ends, for a read_committed reader, in a poll of the
// abort marker alone. The group's commit must reach the input's end all the same, in
// both delivery modes (exactly once, in a transaction of the offsets alone, which the
// real transaction coordinator must take), or lag tools and KEDA see the aborted records
// as lag for good. The aborted records are routed by neither.
func TestInputEndingInAnAbortedTransactionOnApacheKafka(t *testing.T) {
	t.Parallel()
	k := startKafka(t, kafkaOpts{})
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			s := scenarioOn(t, k, 1, 1)
			up := s.k.Client(t, kgo.TransactionalID(s.n.Group+"-upstream"), kgo.TransactionTimeout(time.Minute))
			write := func(from, to int, end kgo.TransactionEndTry) {
				t.Helper()
				if err := up.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for id := from; id < to; id++ {
					if err := up.ProduceSync(t.Context(), s.record(id)).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := up.EndTransaction(t.Context(), end); err != nil {
					t.Fatal(err)
				}
			}
			write(0, 10, kgo.TryCommit)
			g := s.startGate("a", delivery)
			s.waitDrained()
			write(10, 15, kgo.TryAbort)
			s.waitDrained() // past the aborted records and their marker
			g.Term(t, time.Minute)
			var opts []kgo.Opt
			if delivery == "exactly-once" {
				opts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
			}
			seen := map[int]int{}
			for _, r := range s.k.ReadAll(t, opts, s.n.Outs()...) {
				for _, h := range r.Headers {
					if h.Key == faulttest.IDHeader {
						id, _ := strconv.Atoi(string(h.Value))
						seen[id]++
					}
				}
			}
			for id := range 15 {
				if aborted := id >= 10; aborted != (seen[id] == 0) {
					t.Errorf("input %d (aborted: %v) routed %d times", id, aborted, seen[id])
				}
			}
		})
	}
}
