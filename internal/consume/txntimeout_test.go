package consume

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTransactionTimeoutRefusalReadsTheBrokersMaximumAgain: exactly once, the brokers
// refusing GATE_TRANSACTION_TIMEOUT (above their transaction.max.timeout.ms), a gate
// that could not read their maximum at first (DESCRIBE_CONFIGS denied: an ACL granted
// later by an operator answering the refusal, or not yet on the broker when the gate
// started, as in a CI run on Apache Kafka) names it once it can, at its next retry.
// Before, every retry said "unknown: the gate may not read it".
func TestTransactionTimeoutRefusalReadsTheBrokersMaximumAgain(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var denied atomic.Bool
	denied.Store(true)
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !denied.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.DescribeConfigsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, res := range r.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, kerr.ClusterAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	env := newEnv(t, 1)
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.TransactionTimeout = 45 * time.Second
	env.before = func(c *Consumer) { c.txn.timeoutRetry = 200 * time.Millisecond }
	g := env.start(t, "a")
	names := func(want string) func() bool {
		return func() bool {
			return slices.ContainsFunc(g.c.NotReady(), func(s string) bool { return strings.Contains(s, want) })
		}
	}
	waitFor(t, 30*time.Second, "not ready, the brokers' maximum unknown", names("transaction.max.timeout.ms (unknown"))
	denied.Store(false)
	waitFor(t, 30*time.Second, "not ready, the brokers' maximum named", names("transaction.max.timeout.ms (5s)"))
}
