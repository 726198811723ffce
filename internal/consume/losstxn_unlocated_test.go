package consume

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unlocatedLoss has the broker answer partition 0's next out-of-range fetch as a log
// truncated at end whose divergence it cannot locate: the gate's lookup of the log end
// (ListOffsets, latest, partition 0 alone) says end, and its question where the leader
// epoch of its last record ended (OffsetForLeaderEpoch, no current epoch: the gate's,
// not the client's own validation) is answered with no epoch. Each is answered so once;
// the counters say how many of them were.
func unlocatedLoss(t *testing.T, env *gateEnv, end int64) (ends, epochs *atomic.Int32) {
	t.Helper()
	ends, epochs = new(atomic.Int32), new(atomic.Int32)
	oor := env.cluster.Fault(kfakeOutOfRangeOnce(0))
	partition0 := func(topic string, p int32) bool { return topic == inTopic && p == 0 }
	env.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ListOffsetsRequest)
		if oor.Hits() == 0 || len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 ||
			!partition0(req.Topics[0].Topic, req.Topics[0].Partitions[0].Partition) || req.Topics[0].Partitions[0].Timestamp != -1 {
			env.cluster.KeepControl()
			return nil, nil, false
		}
		ends.Add(1)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = inTopic
		sp := kmsg.NewListOffsetsResponseTopicPartition()
		sp.Partition, sp.Offset, sp.LeaderEpoch, sp.Timestamp = 0, end, 0, -1
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	env.cluster.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
		if oor.Hits() == 0 || len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 ||
			!partition0(req.Topics[0].Topic, req.Topics[0].Partitions[0].Partition) || req.Topics[0].Partitions[0].CurrentLeaderEpoch != -1 {
			env.cluster.KeepControl()
			return nil, nil, false
		}
		epochs.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = inTopic
		sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		sp.Partition, sp.LeaderEpoch, sp.EndOffset = 0, -1, -1 // the leader knows nothing of the epoch
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	return ends, epochs
}

// TestUnlocatedBrokerLossInOpenTransactionJudgedAfresh: partition 0's offsets 50..79 are
// in an open transaction (its last commit 50) when a fetch at 80 is out of range and the
// broker says its log ends at 65, with no end for the leader epoch of the gate's last
// record: a broker's loss whose divergence cannot be located (gap.unlocated), met in
// the transaction (gapInTxn). The 15 records at 65..79 are counted lost and reported
// once (cause broker), the transaction aborts, and the partition is read again from 50.
// Any record the transaction routed may be another now: here the first routing of
// 50..79 was team hot's (threshold 1: to overflow), every later one team cold's (under
// its limit). All 30 are judged afresh, accepted; 65..79, past the log end, are counted
// again (the new log's records), 50..64 are not (they may be the same records). Without
// forgetDecisions the records at 50..64 took the kept decisions (route.Decisions) of
// the old ones at their offsets: team hot's, to overflow. The loss line says where the
// log diverged is unknown, as outside a transaction; before, it read as a located loss's,
// its offsets as if the records below them were the ones the gate had read.
func TestUnlocatedBrokerLossInOpenTransactionJudgedAfresh(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue, func(env *gateEnv) {
		env.lcfg.Overrides = map[string]int64{"hot": 1}
		env.wrap = func(r Router) Router { return &newLogRouter{Router: r, from: 50, to: 80, seen: map[int64]int{}} }
		env.logs, env.logLevel = logs, slog.LevelDebug
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gate's log:\n%s", logs.String())
		}
	})
	spy := g.c.router.(*newLogRouter).Router.(*spyRouter)
	aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
	ends, epochs := unlocatedLoss(t, env, 65)
	produceTo(t, prod, 0, 200, 10) // offsets 80..89: partition 0 fetched at 80
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "broker") > 0 })
	if ends.Load() != 1 || epochs.Load() != 1 {
		t.Fatalf("the broker answered %d log end lookups as truncated at 65 and %d epoch questions with no epoch, want 1 each",
			ends.Load(), epochs.Load())
	}
	stop() // the input goes quiet: the transaction ends
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 90
	})
	out := collect(t, env.cluster, 50+30+10, 20*time.Second, 300*time.Millisecond, readCommitted())
	g.stop(t)

	if n := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")); n <= aborted {
		t.Errorf("no transaction aborted: the one the loss was met in committed")
	}
	spy.mu.Lock()
	var once []int
	for id := 100; id < 130; id++ {
		if spy.ids[id] < 2 {
			once = append(once, id)
		}
	}
	spy.mu.Unlock()
	if len(once) > 0 {
		t.Errorf("ids %v (offsets 50..79) routed once: the partition was not read again from its last commit (50)", once)
	}
	var over []int
	for id := 100; id < 130; id++ {
		if topics := out.ids[id]; len(topics) != 1 || topics[0] != accTopic {
			over = append(over, id)
		}
	}
	if len(over) > 0 {
		t.Errorf("the records at offsets 50..79 read again (team cold, under its limit): ids %v not accepted once (read_committed): "+
			"given the kept decisions of the first routing (team hot, over its limit)", over)
	}
	if st, ok := g.lim.Snapshot(time.Now(), "cold"); !ok || st.Pending != 15 {
		t.Errorf("team cold counted %v (known %v), want 15: offsets 65..79, past the log end, only", st.Pending, ok)
	}
	if st, ok := g.lim.Snapshot(time.Now(), "hot"); !ok || st.Pending != 30 {
		t.Errorf("team hot counted %v (known %v), want 30: the first routing of 50..79, once", st.Pending, ok)
	}
	if got := lostMetric(t, g.reg, 0, "broker"); got != 15 {
		t.Errorf("gate_records_lost_total{cause=broker} = %v, want 15 (offsets 65..79, once)", got)
	}
	line := checkLossLine(t, logs, 0, "broker", 65, 80)
	if msg, _ := line["msg"].(string); !containsAll(msg, "in a transaction still open", "where the log diverged is unknown") {
		t.Errorf("loss line %q: want it to say the transaction was open and where the log diverged is unknown", msg)
	}
}
