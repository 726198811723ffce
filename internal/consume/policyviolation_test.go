package consume

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestProducePolicyViolationNotReady: an output topic whose produces a broker's policy
// refuses (POLICY_VIOLATION) is a condition only the operator can fix, as a revoked ACL
// is: the gate must be not ready naming the topic and the error while it lasts, and
// ready again, the record delivered, once the policy lets it through. Before, the record
// was retried with only the 10-second warning and the gate stayed ready.
func TestProducePolicyViolationNotReady(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.PolicyViolation, Count: -1})
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-1")})
	waitFor(t, 20*time.Second, "not ready naming the topic and POLICY_VIOLATION", func() bool {
		why := strings.Join(g.c.NotReady(), "; ")
		return strings.Contains(why, `"`+accTopic+`"`) && strings.Contains(why, "POLICY_VIOLATION")
	})
	refused.Remove()
	collect(t, env.cluster, 1, 30*time.Second, 0)
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
}
