package consume

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStartLatestAtLeastOnceStartsAtTheStableEnd: at least once with StartLatest, a
// partition new to the group while an upstream transaction is open was started at its
// high watermark, past the transaction, whose records were then never routed once it
// committed. It starts where a read_committed client does: the last stable offset.
func TestStartLatestAtLeastOnceStartsAtTheStableEnd(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.StartOffset = StartLatest
	var before []*kgo.Record
	for id := range 5 {
		before = append(before, inputRecord(id, "team-1"))
	}
	produceAll(t, producer(t, env.cluster), before)
	up := upstream(t, env.cluster)
	writeInTxn(t, up, 5, 10)
	env.start(t, "a")
	waitFor(t, 20*time.Second, "a start committed", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		_, ok := gi.Commits[inTopic][0]
		return ok
	})
	if err := up.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	out := collect(t, env.cluster, 5, 10*time.Second, 0)
	for id := 5; id < 10; id++ {
		if len(out.ids[id]) == 0 {
			t.Errorf("record %d, of the transaction open at the assignment and committed after, never routed", id)
		}
	}
}
