package consume

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestExactlyOnceIdleTransactionalIDExpired: a gate whose partitions had no input for
// longer than the brokers' transactional.id.expiration.ms (7 days by default: a staging
// or seasonal topic) has its transactional id expired; its next transaction's produce is
// refused INVALID_PRODUCER_ID_MAPPING, which the gate took for another live instance's
// fence within the transaction timeout and exited on (status 1, on Apache Kafka too). It
// maps the id again under a new session and routes on.
func TestExactlyOnceIdleTransactionalIDExpired(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.BrokerConfigs(map[string]string{"transactional.id.expiration.ms": "300"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := newEnv(t, 1)
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.Delivery = ExactlyOnce
	g := env.start(t, "a")
	prod := producer(t, c)
	produceAll(t, prod, teamInputs("team-1", 0, 10))
	collect(t, c, 10, 30*time.Second, 0, readCommitted())
	// Idle until the brokers have expired the gate's transactional id: polled, not slept.
	adm := kadm.NewClient(prod)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := adm.DescribeTransactions(t.Context(), "gate-a")
		if err == nil {
			if _, ok := d["gate-a"]; !ok || d["gate-a"].Err != nil {
				break
			}
		} else {
			t.Fatalf("describing the gate's transactional id: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the transactional id did not expire in 30 s")
		}
	}
	produceAll(t, prod, teamInputs("team-1", 10, 20))
	out := collect(t, c, 20, 30*time.Second, 0, readCommitted())
	if lost, dup := out.conservation(20); len(lost)+len(dup) > 0 {
		t.Errorf("after the id expired: lost %v, duplicated %v", lost, dup)
	}
	select {
	case err := <-g.done:
		g.cancel = nil
		t.Fatalf("the gate stopped: %v", err)
	default:
	}
}
