package consume

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOutputWatchSeesRecordsAwaitingTheGatesRetry: with GATE_PRODUCE_RETRIES set, an
// output topic refusing every write (NOT_ENOUGH_REPLICAS: its min.insync.replicas above
// its replicas) fails its records back to the gate, which holds them for its own backoff
// (up to 5 s) between attempts. The gate stays not ready, naming the topic, for as long
// as the refusal lasts, and delivers every record once it ends. Before, the output watch
// counted only the records in the client's buffer, none most of the time: it cleared the
// problem whenever a round fell in a backoff, logging "output partitions take writes
// again" while none did, and the gate flapped ready and not ready.
func TestOutputWatchSeesRecordsAwaitingTheGatesRetry(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 50
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 1
	env.ccfg.WatchInterval = 300 * time.Millisecond
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	prod := producer(t, env.cluster)
	setTopicConfig(t, env.cluster, "min.insync.replicas", "2", accTopic)
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	g := env.start(t, "a")
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%5))
	}
	produceAll(t, prod, recs)

	named := func(why string) bool { return strings.Contains(why, `output topic "accepted"`) }
	waitNotReady(t, g, 40*time.Second, `the accepted topic named`, named)
	// Ten watch intervals and more, several of the gate's backoffs: named all along.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if why := strings.Join(g.c.NotReady(), "; "); !named(why) {
			t.Fatalf("while the accepted topic still refuses every write, not ready because %q (retrying %d, buffered %d): want it named", why, g.c.retry.pending.Load(), g.c.producerBuffered())
		}
	}
	refused.Remove()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitFor(t, 30*time.Second, "ready once the topic takes writes", g.c.Ready)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}
