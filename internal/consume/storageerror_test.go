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

// TestRetriedProduceErrorReported: at least once with the default GATE_PRODUCE_RETRIES,
// an output topic whose batches a broker refuses with a retriable error the cluster's
// metadata gives no reason for (KAFKA_STORAGE_ERROR on partitions that keep their
// leader). Within seconds the gate must warn naming the topic, the partition and the
// error, and once it lasts two watch intervals be not ready saying why; ready again, the record delivered, once the broker takes writes.
// Before, the gate stayed ready until the two-minute stall line.
func TestRetriedProduceErrorReported(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = 200 * time.Millisecond
	logs := &syncBuffer{}
	env.logs = logs
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.KafkaStorageError, Count: -1})
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-1")})
	waitFor(t, 20*time.Second, "a warning naming the topic, partition and error", func() bool {
		for _, line := range logLines(t, logs.String()) {
			if line["level"] == "WARN" && line["topic"] == accTopic && line["partition"] != nil &&
				strings.Contains(line["err"].(string), "KAFKA_STORAGE_ERROR") {
				return true
			}
		}
		return false
	})
	waitFor(t, 20*time.Second, "not ready naming the topic and KAFKA_STORAGE_ERROR", func() bool {
		why := strings.Join(g.c.NotReady(), "; ")
		return strings.Contains(why, `"`+accTopic+`"`) && strings.Contains(why, "KAFKA_STORAGE_ERROR")
	})
	refused.Remove()
	collect(t, env.cluster, 1, 30*time.Second, 0)
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
}
