package consume

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Output topics' own batch limits. A broker refuses a produce batch larger than its
// topic's max.message.bytes (MESSAGE_TOO_LARGE, for the whole batch), and an output topic
// may set one below GATE_KAFKA_MAX_MESSAGE_BYTES, the brokers' message.max.bytes, up to
// which the producer would fill its batches. Every batch over the topic's limit would be
// refused, and each of its records, small as it is, produced again alone (retry.go), one
// round trip at a time: under load, a stream of produce errors and a record routed a
// round trip. So the preflight reads the output topics' max.message.bytes, and the
// producer's batches to each stay within it (a record larger than it alone is refused by
// the client at once, with the same error, and goes to dead letter).

// The limits are read again every DefaultTopicConfigInterval (rereadBatchLimits): franz-go
// asks for a partition's limit once, when it first produces to it, so a limit an operator
// raises to let larger records through still sends them to dead letter, and one lowered
// has every full batch refused, until the gate restarts, and the gate says so.

// DefaultTopicConfigInterval is how often the output and rule topics' max.message.bytes
// are read again (Config.TopicConfigInterval).
const DefaultTopicConfigInterval = time.Minute

// minBatchMaxBytes is the smallest batch limit franz-go takes.
const minBatchMaxBytes = 512

// batchLimits holds the max.message.bytes of the output topics, read at preflight and,
// for a rule topic a reload brings, before the reloaded rules are put in use
// (CheckTopics).
type batchLimits struct {
	mu sync.RWMutex
	m  map[string]int32
}

func (l *batchLimits) get(topic string) (int32, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.m[topic]
	return n, ok
}

// merge adds m's limits to l's, replacing those of the same topics, and returns the
// topics whose limit it set anew or changed.
func (l *batchLimits) merge(m map[string]int32) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]int32, len(m))
	}
	var changed []string
	for t, n := range m {
		if old, ok := l.m[t]; !ok || old != n {
			changed = append(changed, t)
		}
		l.m[t] = n
	}
	return changed
}

// forget drops topic's limit: a topic deleted and created again is another topic, its
// limit read anew (checkRuleTopics), and, unread, GATE_KAFKA_MAX_MESSAGE_BYTES.
func (l *batchLimits) forget(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, topic)
}

// batchMaxBytes is the producer's batch limit for topic as a broker counts it (franz-go
// is given ClientBatchLimit of it, kgo.ProducerBatchMaxBytesFn, asked when the client
// first produces to a partition of it): GATE_KAFKA_MAX_MESSAGE_BYTES, or the topic's
// max.message.bytes when the preflight read a smaller one.
func (c *Consumer) batchMaxBytes(topic string) int32 {
	limit := c.cfg.MaxMessageBytes
	if n, ok := c.batchLimits.get(topic); ok && n < limit {
		limit = max(n, minBatchMaxBytes)
	}
	return limit
}

// ClientBatchLimit is what franz-go is given (kgo.ProducerBatchMaxBytesFn) for batches
// within maxMessageBytes, a topic's max.message.bytes. A broker compares that with a batch
// as its log holds it (Kafka's sizeInBytes: the 61-byte header and the records); franz-go
// compares its limit with the batch and the length the produce request writes before it,
// never less than one byte (one for a record alone in its batch on the produce versions
// of Kafka 2.4 and later; four before, and until the client has learned a broker's
// version). Given the topic's limit as it is, it refused a batch of exactly that size: a
// record at the topic's limit, which an input topic of the same limit took, went to dead
// letter as rejected by a topic that never saw it. One byte more lets that batch through,
// and never one over the limit. Capped at franz-go's BrokerMaxWriteBytes default, which
// the gate keeps.
func ClientBatchLimit(maxMessageBytes int32) int32 {
	return min(maxMessageBytes+1, max(maxMessageBytes, clientMaxWriteBytes))
}

// clientMaxWriteBytes is franz-go's BrokerMaxWriteBytes default (Kafka's
// socket.request.max.bytes): it refuses a batch limit above it.
const clientMaxWriteBytes = 100 << 20

// TopicBatchMaxBytes is the batch limit of a producer of cl's own to topic, as the
// gate's to its output topics (batchMaxBytes): limit (GATE_KAFKA_MAX_MESSAGE_BYTES), or
// topic's max.message.bytes when that is lower, read with cl (DESCRIBE_CONFIGS). gate
// redrive writes the input topic with it: a batch over the topic's limit is refused
// whole, MESSAGE_TOO_LARGE for records the topic took one by one. err says why the
// topic's limit was not read; limit is returned with it.
func TopicBatchMaxBytes(ctx context.Context, cl *kgo.Client, topic string, limit int32) (int32, error) {
	ns, errs, err := topicConfig(ctx, cl, []string{topic}, "max.message.bytes")
	if err == nil {
		err = errs[topic]
	}
	if err != nil {
		return limit, fmt.Errorf("reading the max.message.bytes of %s: %w", topic, err)
	}
	if n, ok := ns[topic]; ok && n > 0 && n < int64(limit) {
		return max(int32(n), minBatchMaxBytes), nil
	}
	return limit, nil
}

// readBatchLimits reads the max.message.bytes of topics for batchMaxBytes, with cl. The
// outcomes topic is left to its rows' own bound, which they learn from its refusals
// (outcomes.go). A topic the gate may not describe (DESCRIBE_CONFIGS), or an answer that
// does not come, leaves the gate's own limit for it: its batches over the topic's are
// refused as before. It must run before the first record to a topic is produced: the
// client asks for a partition's limit once, at its first record.
func (c *Consumer) readBatchLimits(ctx context.Context, cl *kgo.Client, topics []string) {
	topics = slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return t == c.cfg.OutcomesTopic })
	if len(topics) == 0 {
		return
	}
	ns, errs, err := topicConfig(ctx, cl, topics, "max.message.bytes")
	c.mergeBatchLimits(ns, errs, err)
}

// mergeBatchLimits takes the max.message.bytes read of the output topics (ns, and errs
// and err as topicConfig returns them) for batchMaxBytes, and says a limit new or changed
// below the gate's own.
func (c *Consumer) mergeBatchLimits(ns map[string]int64, errs map[string]error, err error) {
	if err != nil {
		c.log.Debug("kafka: could not read the output topics' max.message.bytes; batches up to GATE_KAFKA_MAX_MESSAGE_BYTES", "err", err)
		return
	}
	for t, err := range errs {
		c.log.Debug("kafka: could not read an output topic's max.message.bytes; batches up to GATE_KAFKA_MAX_MESSAGE_BYTES",
			"topic", t, "err", err)
	}
	limits := make(map[string]int32)
	for t, n := range ns {
		if n <= 0 || n > math.MaxInt32 {
			continue
		}
		limits[t] = int32(n)
	}
	// Said once a topic and limit: a preflight retried, or a reload naming a topic the
	// gate knows, says nothing new.
	for _, t := range c.batchLimits.merge(limits) {
		if n := limits[t]; n < c.cfg.MaxMessageBytes {
			c.log.Info("kafka: output topic's max.message.bytes is below GATE_KAFKA_MAX_MESSAGE_BYTES; the producer's batches to it stay within it",
				"topic", t, "max_message_bytes", n, "gate_max_message_bytes", c.cfg.MaxMessageBytes)
		}
	}
}

// rereadBatchLimits reads the max.message.bytes (and cleanup.policy, checkCompacted) of
// the output topics and of the rule topics in use (not those marked missing:
// checkRuleTopics learns them anew when they come back) again, with cl, and warns, once a change, of each topic whose batch limit
// (batchMaxBytes) changed: the client keeps the limit it asked for at its first record to
// each partition (kgo.ProducerBatchMaxBytesFn), so the change takes effect when the gate
// restarts. Having the client learn the topic anew instead (purged, as for a topic
// created again, relearnTopic) would restart the partitions' sequence numbers under the
// producer's id, which the brokers refuse as out of order: a transaction aborted, or
// the idempotent producer's records renumbered, for a change a rolling restart applies
// cleanly. A partition the client first produces to after the change gets the new limit.
func (c *Consumer) rereadBatchLimits(ctx context.Context, cl *kgo.Client) {
	topics := c.writtenTopics() // the outcomes topic's left out by readBatchLimits
	if len(topics) == 0 {
		return
	}
	before := c.batchLimitsOf(topics)
	// cleanup.policy in the same request: a topic made compacted while the gate runs
	// (checkCompacted).
	settings, errs, err := topicSettings(ctx, cl, slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return t == c.cfg.OutcomesTopic }),
		"max.message.bytes", "cleanup.policy")
	c.mergeBatchLimits(intSetting(settings, "max.message.bytes"), errs, err)
	if err == nil {
		c.checkCompacted(ctx, settings)
	}
	c.sayBatchLimitChanges(topics, before)
}

// batchLimitsOf is the batch limit (batchMaxBytes) of each of topics.
func (c *Consumer) batchLimitsOf(topics []string) []int32 {
	out := make([]int32, len(topics))
	for i, t := range topics {
		out[i] = c.batchMaxBytes(t)
	}
	return out
}

// sayBatchLimitChanges warns of each of topics whose batch limit is no longer before's
// (batchLimitsOf, before the limits were read again).
func (c *Consumer) sayBatchLimitChanges(topics []string, before []int32) {
	for i, t := range topics {
		if now := c.batchMaxBytes(t); now != before[i] {
			c.log.Warn("kafka: an output topic's max.message.bytes changed; the producer keeps the limit it had until the gate restarts (restart the gates to apply it)",
				"topic", t, "batch_limit_in_use", before[i], "batch_limit_new", now)
		}
	}
}
