package consume

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
