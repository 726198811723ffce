package consume

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommitPastAMarkerKeepsItsEpoch: an upstream transaction's marker written after a
// leader change (a new leader epoch) was committed past with the last data record's
// epoch, and the next gate's client, validating that offset, took it for the broker's
// loss (gate_records_lost_total{cause="broker"} 1; with GATE_ON_DATA_LOSS=stop the
// partition stopped). The commit carries the marker's epoch.
func TestCommitPastAMarkerKeepsItsEpoch(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	up := upstream(t, env.cluster)
	writeInTxn(t, up, 0, 5)
	// A leader change between the transaction's records and its commit.
	if err := env.cluster.MoveTopicPartition(inTopic, 0, env.cluster.LeaderFor(inTopic, 0)); err != nil {
		t.Fatal(err)
	}
	if err := up.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	a := env.start(t, "a")
	collect(t, env.cluster, 5, 30*time.Second, 0)
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	a.stop(t)
	b := env.start(t, "b")
	// b validates the committed offset before it fetches: once it has routed a record
	// written after, the validation is done.
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(5, "team-1")})
	collect(t, env.cluster, 6, 30*time.Second, 0)
	if got := lostMetric(t, b.reg, 0, "broker"); got != 0 {
		t.Errorf("gate b counted %v records lost by the broker, want 0 (nothing was lost)", got)
	}
	b.stop(t)
}
