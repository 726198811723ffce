package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestHangingTransaction: a transaction that holds the group's offsets for two input
// partitions and is never ended, as a broker leaves one when it skips the marker on
// __consumer_offsets (see TestExactlyOnceBrokerRestart). Every exactly-once member then
// waits for those offsets without end, and franz-go says nothing while it does (nor
// starts the member's other partitions: it fetches their offsets together). Once the
// offsets have been unstable for longer than any transaction may stay open, the gate is
// not ready, naming the partitions, the __consumer_offsets partition and the fix. Once
// an operator aborts the transaction it starts by itself and routes every record once.
func TestHangingTransaction(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{}, 3, 3)
	// The blocker: a transactional producer that commits offsets 0 of input partitions
	// 0 and 1 for the gate's group in a transaction open for 10 minutes.
	cl := s.k.Client(t)
	txnID := s.n.Group + "-blocker"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = &txnID
	init.TransactionTimeoutMillis = int32((10 * time.Minute).Milliseconds())
	var ir *kmsg.InitProducerIDResponse
	faulttest.WaitFor(t, time.Minute, "the blocker's producer id", func() bool {
		r, err := init.RequestWith(t.Context(), cl)
		if err == nil {
			err = kerr.ErrorForCode(r.ErrorCode)
		}
		ir = r
		return err == nil
	})
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, ir.ProducerID, ir.ProducerEpoch, s.n.Group
	if r, err := add.RequestWith(t.Context(), cl); err != nil {
		t.Fatalf("AddOffsetsToTxn: %v", err)
	} else if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		t.Fatalf("AddOffsetsToTxn: %v", err)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = txnID, s.n.Group, ir.ProducerID, ir.ProducerEpoch
	commit.Generation, commit.MemberID = -1, ""
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic = s.n.In
	for _, p := range []int32{0, 1} {
		cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset, cp.LeaderEpoch = p, 0, -1
		ct.Partitions = append(ct.Partitions, cp)
	}
	commit.Topics = []kmsg.TxnOffsetCommitRequestTopic{ct}
	r, err := commit.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatalf("TxnOffsetCommit: %v", err)
	}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("TxnOffsetCommit of %s/%d: %v", rt.Topic, rp.Partition, err)
			}
		}
	}

	stop := s.produceLoad()
	// The gate finds the offsets held once they have been unstable for its
	// GATE_TRANSACTION_TIMEOUT and the brokers' abort sweep (30 s): 15 s here, not the
	// 30 s of startGate (above faulttest.RebalanceTimeout), so the gate's rebalance
	// timeout is 12 s (above GATE_REVOKE_TIMEOUT, 10 s). The gate is the group's only
	// member: no rebalance waits on another.
	g := s.startGate("a", "exactly-once", "GATE_TRANSACTION_TIMEOUT", "15s", "GATE_KAFKA_REBALANCE_TIMEOUT", "12s")
	waitReady(t, g) // joined and assigned: ready until the bound passes
	faulttest.WaitFor(t, 3*time.Minute, "/readyz naming the hanging transaction", func() bool {
		code, body := g.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "UNSTABLE_OFFSET_COMMIT") &&
			strings.Contains(body, s.n.In+"/[0 1]") && strings.Contains(body, "__consumer_offsets partition") &&
			strings.Contains(body, "kafka-transactions.sh --bootstrap-server BROKER abort --topic __consumer_offsets --partition ") &&
			strings.Contains(body, "--start-offset START")
	})
	faulttest.WaitFor(t, time.Minute, "an error line naming the hanging transaction", func() bool {
		return strings.Contains(g.Logs(), `"level":"ERROR","msg":"kafka: the committed offsets of input partitions `+s.n.In+`/[0 1] have been unstable`)
	})
	if n := s.outputs(); n != 0 {
		t.Errorf("%d records routed while the offsets were held, want 0", n)
	}

	// The operator aborts it (kafka-transactions.sh abort does this EndTxn).
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, ir.ProducerID, ir.ProducerEpoch, false
	faulttest.WaitFor(t, time.Minute, "the blocker's abort", func() bool {
		r, err := end.RequestWith(t.Context(), cl)
		return err == nil && r.ErrorCode == 0
	})
	waitReady(t, g)
	g.WaitLog(t, time.Minute, "kafka: the group's committed offsets are stable again; the partitions start")
	acked := stop()
	s.waitDrained()
	g.Term(t, time.Minute)
	rep := s.checkConserved("exactly-once", acked, "through a hanging transaction")
	t.Logf("FIGURES real_kafka_hanging_transaction in=%d out=%d lost=%d duplicated=%d", rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra)
}
