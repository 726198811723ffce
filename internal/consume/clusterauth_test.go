package consume

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterAuthorizationProblemSaysWhatToGrant: a broker that refuses the idempotent
// producer its id (CLUSTER_AUTHORIZATION_FAILED: no IDEMPOTENT_WRITE on the cluster, as
// Kafka before 2.8 wants, or an ACL revoked) fails every produce, and franz-go keeps that
// refusal until the client is made again. The gate is not ready saying what to grant and
// that it must restart. Before, it said to create the topic or grant WRITE on it: neither
// helps, and the gate stayed stuck after the right ACL was granted.
func TestClusterAuthorizationProblemSaysWhatToGrant(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	// Its record is never produced: the stop gives it up after a second, not 10.
	env.ccfg.ShutdownTimeout = time.Second
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(1, "t")}) // before the refusals begin
	env.cluster.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		resp := req.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	g := env.start(t, "a")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "not ready naming the cluster ACL", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), "; "), "CLUSTER_AUTHORIZATION_FAILED")
	})
	why := strings.Join(g.c.NotReady(), "; ")
	for _, want := range []string{"IDEMPOTENT_WRITE", "restart"} {
		if !strings.Contains(why, want) {
			t.Errorf("not ready for %q; want it to say %s", why, want)
		}
	}
	if strings.Contains(why, "create the topic") {
		t.Errorf("not ready for %q: a missing topic is not the fault", why)
	}
}

// TestClusterAuthorizationProblemStaysWhenRecordsGivenUp: at least once, the refusal of
// the producer's id (CLUSTER_AUTHORIZATION_FAILED), which franz-go keeps until the client
// is made again, keeps the gate not ready after the records that failed were given up
// with their partition (moved to another gate): every produce of its still fails. Before,
// the gate turned ready, no longer saying to grant IDEMPOTENT_WRITE and restart, until
// its next record failed.
func TestClusterAuthorizationProblemStaysWhenRecordsGivenUp(t *testing.T) {
	t.Parallel()
	env := newMovingEnv(t)
	// b's record is never produced: its stop gives it up after a second, not 10.
	env.ccfg.ShutdownTimeout = time.Second
	env.cluster.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		resp := req.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	a := env.startA(t)
	produceToPartition0(t, env.cluster, inputRecord(0, "t"), kgo.DisableIdempotentWrite())
	waitFor(t, 20*time.Second, "a not ready naming the cluster ACL", func() bool {
		return strings.Contains(strings.Join(a.c.NotReady(), "; "), "IDEMPOTENT_WRITE")
	})

	b := env.startB(t)
	defer b.stop(t)
	waitFor(t, 20*time.Second, "partition 0 moved to b", func() bool {
		return b.c.owned(0) != nil && a.c.owned(0) == nil && a.c.owned(1) != nil
	})
	waitFor(t, 10*time.Second, "a gave the record up (nothing awaits a retry)", func() bool { return a.c.retry.pending.Load() == 0 })
	time.Sleep(time.Second)
	if why := strings.Join(a.c.NotReady(), "; "); !strings.Contains(why, "IDEMPOTENT_WRITE") {
		t.Fatalf("a, whose client still refuses every produce, says nothing of it: not ready for %q", why)
	}
}
