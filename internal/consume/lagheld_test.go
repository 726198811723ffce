package consume

import (
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLagGrowsWhilePollingIsHeld: while the gate polls nothing (here its records wait
// for the accepted topic, which refuses them: nothing new is polled while records await
// a retry), the input goes on growing, and so must gate_partition_lag_records and the
// watchdog's lag: the chart's GateConsumerLagGrowing fires on the lag's growth. They were
// measured only from polls, and stood still at what the last poll saw for as long as
// the hold lasted, an output outage's backlog showing as none.
func TestLagGrowsWhilePollingIsHeld(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = time.Second // the lag refreshed every second, not every 5 s
	g := env.start(t, "a")
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 10)
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer fault.Remove()
	produceTo(t, prod, 0, 10, 1)
	waitFor(t, 20*time.Second, "a record awaiting its retry", func() bool { return g.c.retry.pending.Load() > 0 })
	const more = 50
	produceTo(t, prod, 0, 11, more)
	lag := func() float64 { return testutil.ToFloat64(g.c.m.lag.WithLabelValues("0")) }
	waitFor(t, 40*time.Second, "the lag to count the records written while polling is held", func() bool {
		return lag() >= more && g.c.owned(0).lag.Load() >= more
	})
}

// TestLagOfAPartitionAssignedWhileFetchingIsHeld: a partition assigned to a gate whose
// fetching is held (offset commits failing; a peer left meanwhile) is polled by no one,
// and its lag was measured only once a poll had: gate_partition_lag_records had no
// series for it, and the watchdog no lag, however far its input grew for as long as the
// hold lasted. It is measured from the group's committed offset, where its next poll
// starts.
func TestLagOfAPartitionAssignedWhileFetchingIsHeld(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	env.ccfg.WatchInterval = time.Second // the lag refreshed every second, not every 5 s
	env.ccfg.CommitInterval = 100 * time.Millisecond
	env.ccfg.ShutdownTimeout = time.Second
	a := env.start(t, "a")
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "each gate owning one partition", func() bool {
		return len(a.c.snapshot(nil)) == 1 && len(b.c.snapshot(nil)) == 1
	})
	moved := int32(1) // b's partition
	if a.c.owned(1) != nil {
		moved = 0
	}
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 5)
	produceTo(t, prod, 1, 5, 5)
	waitCommitted(t, env.cluster, 2, 20*time.Second)

	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	defer fault.Remove()
	produceTo(t, prod, 1-moved, 10, 1) // routed, acknowledged, not committed
	waitFor(t, 20*time.Second, "a's fetching held after failed commits", func() bool {
		return slices.Contains(a.c.live.Load().PauseFetchTopics(), inTopic)
	})
	b.stop(t)
	waitFor(t, 30*time.Second, "b's partition assigned to a", func() bool { return a.c.owned(moved) != nil })
	const more = 50
	produceTo(t, prod, moved, 11, more)
	label := strconv.Itoa(int(moved))
	// From b's last commit (5), not from the partition's start (0: 55).
	waitFor(t, 60*time.Second, "the lag of the partition a was assigned while held to be the records written since b's last commit", func() bool {
		p := a.c.owned(moved)
		return testutil.ToFloat64(a.c.m.lag.WithLabelValues(label)) == more && p != nil && p.lag.Load() == more
	})
	// A poll would have handed its records to the producer: a batch, acknowledged or not.
	p := a.c.owned(moved)
	p.mu.Lock()
	polled := len(p.batches) > 0 || p.acked.Offset >= 0
	p.mu.Unlock()
	if polled {
		t.Fatal("a polled the partition: its lag was not measured for want of a poll")
	}
}

// TestLagRefreshedWithABrokerDown: the input's ends listed while one broker does not
// answer (a *kadm.ShardErrors) still measure the partitions the others lead; the whole
// listing was dropped, and with one broker down no partition's lag moved.
func TestLagRefreshedWithABrokerDown(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p := range int32(2) {
		if err := c.MoveTopicPartition(inTopic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = time.Second // the lag refreshed every second, not every 5 s
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	g := env.start(t, "a")
	prod := partProducer(t, c)
	produceTo(t, prod, 0, 0, 5)
	produceTo(t, prod, 1, 5, 5)
	waitCommitted(t, c, 2, 20*time.Second)

	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer fault.Remove()
	produceTo(t, prod, 0, 10, 1)
	waitFor(t, 20*time.Second, "a record awaiting its retry", func() bool { return g.c.retry.pending.Load() > 0 })
	var down atomic.Bool
	down.Store(true)
	defer down.Store(false)
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() == 1 && down.Load() {
			return nil, errors.New("broker 1 does not answer"), true // the connection closed
		}
		return nil, nil, false
	})
	const more = 50
	produceTo(t, prod, 0, 11, more)
	waitFor(t, 60*time.Second, "partition 0's lag, led by the broker that answers, to count the records written while held", func() bool {
		return testutil.ToFloat64(g.c.m.lag.WithLabelValues("0")) >= more
	})
}

// startOf: where a partition no poll has measured starts, as the gate's next poll of it
// will: the group's commit, else the first offset for a gate starting at the earliest;
// not known when the group's offsets could not be fetched or say nothing certain.
func TestStartOfAnUnpolledPartition(t *testing.T) {
	c := &Consumer{cfg: Config{InputTopic: inTopic}}
	committed := kadm.OffsetResponses{inTopic: {
		0: {Offset: kadm.Offset{Topic: inTopic, Partition: 0, At: 7}},
		1: {Offset: kadm.Offset{Topic: inTopic, Partition: 1, At: -1}},
		2: {Offset: kadm.Offset{Topic: inTopic, Partition: 2}, Err: kerr.UnknownServerError},
	}}
	starts := kadm.ListedOffsets{inTopic: {
		0: {Topic: inTopic, Partition: 0, Offset: 2},
		1: {Topic: inTopic, Partition: 1, Offset: 3},
		2: {Topic: inTopic, Partition: 2, Offset: 4},
		3: {Topic: inTopic, Partition: 3, Offset: 5},
	}}
	for _, tc := range []struct {
		name      string
		part      int32
		committed kadm.OffsetResponses
		starts    kadm.ListedOffsets
		want      int64
		ok        bool
	}{
		{"committed", 0, committed, starts, 7, true},
		{"nothing committed, starting at the earliest", 1, committed, starts, 3, true},
		{"not in the group's offsets, starting at the earliest", 3, committed, starts, 5, true},
		{"nothing committed, starting at the latest", 1, committed, nil, 0, false},
		{"the partition's commit failed", 2, committed, starts, 0, false},
		{"the group's offsets not fetched", 0, nil, starts, 0, false},
	} {
		got, ok := c.startOf(tc.part, tc.committed, tc.starts)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: startOf = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// A refresh's measure is dropped when a poll measured the partition after the refresh
// read it (a poll's is the newer), and a partition no poll has measured keeps neither
// position nor time from it: the next refresh measures it from the committed offset
// again. Before, a poll landing between the refresh's reads left the partition measured
// from 0, or from a commit behind where the poll had read to, and an idle partition
// kept that lag (no empty poll measures it), holding the gate as one with work.
func TestLagRefreshYieldsToAPoll(t *testing.T) {
	c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: inTopic, GroupID: "g", Gate: "g"}, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := newPartition(inTopic, 0, newMono())
	c.parts[0] = p
	lag := func() float64 { return testutil.ToFloat64(c.m.lag.WithLabelValues("0")) }

	c.setLagRefreshed(p, 0, 55, 55, 5) // never polled: from the commit
	if lag() != 50 || p.lag.Load() != 50 || p.lagAt.Load() != 0 || p.next.Load() != 0 {
		t.Errorf("unpolled: lag %v (watchdog %d), lagAt %d, next %d: want 50, 50, and neither position nor time kept",
			lag(), p.lag.Load(), p.lagAt.Load(), p.next.Load())
	}
	c.setLag(p, 60, 60, 58) // a poll read to 58
	at := p.lagAt.Load()
	c.setLagRefreshed(p, 0, 70, 70, 5) // read before that poll: dropped
	if lag() != 2 || p.lag.Load() != 2 || p.next.Load() != 58 || p.lagAt.Load() != at {
		t.Errorf("after a poll: lag %v (watchdog %d), next %d: want the poll's 2 and 58", lag(), p.lag.Load(), p.next.Load())
	}
	c.setLagRefreshed(p, at, 70, 70, 5) // measured by polls: from where they left it
	if lag() != 12 || p.lag.Load() != 12 || p.next.Load() != 58 || p.lagAt.Load() == at {
		t.Errorf("refreshed after polls: lag %v (watchdog %d), next %d, lagAt moved %v: want 12, from 58, lagAt moved",
			lag(), p.lag.Load(), p.next.Load(), p.lagAt.Load() != at)
	}
	c.setLag(p, 80, 80, 79)
	c.setLagRefreshed(p, at, 90, 90, 5) // read before the last poll: dropped
	if lag() != 1 || p.next.Load() != 79 {
		t.Errorf("after a second poll: lag %v, next %d: want the poll's 1 and 79", lag(), p.next.Load())
	}
}
