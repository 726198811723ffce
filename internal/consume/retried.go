package consume

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// batchRetries holds, per output partition and error, when brokers began and last
// refused its batches with an error franz-go retries by itself. With the default
// GATE_PRODUCE_RETRIES such an error never reaches a produce promise, and one the
// cluster's metadata gives no reason for (a KAFKA_STORAGE_ERROR on a partition that
// keeps its leader, NOT_ENOUGH_REPLICAS when the gate may not read min.insync.replicas)
// showed nowhere until the two-minute stall line.
type batchRetries struct {
	mu   sync.Mutex
	m    map[string]*retriedPartition
	pace rerouteLog // one warning a minute per partition and error
}

// retriedPartition is one output partition refusing batches with one error.
type retriedPartition struct {
	topic       string
	partition   int32
	err         error
	first, last time.Time
}

// batchRetried is franz-go's word (kgoLogger) that a broker refused a batch of topic's
// partition with err. A retriable error is logged, paced; one that lasts is a not-ready
// reason (retriedProblems). It is not counted in gate_produce_errors_total, which counts
// records failed back to the gate (a batch refused and then failed back would count
// twice). The other errors fail the batch's records back to the gate, which reports
// them there.
func (c *Consumer) batchRetried(topic string, partition int32, err error) {
	if !kerr.IsRetriable(err) {
		return
	}
	now := time.Now()
	key := topic + "\x00" + strconv.Itoa(int(partition)) + "\x00" + errorName(err)
	r := &c.retried
	r.mu.Lock()
	p := r.m[key]
	if p == nil || now.Sub(p.last) > c.stuckAfter() {
		// New, or after a pause long enough to count as a fresh refusal.
		if r.m == nil {
			r.m = map[string]*retriedPartition{}
		}
		p = &retriedPartition{topic: topic, partition: partition, first: now}
		r.m[key] = p
	}
	p.err, p.last = err, now
	r.mu.Unlock()
	if ok, n := r.pace.allow(topic+"\x00"+strconv.Itoa(int(partition)), errorName(err)); ok {
		c.log.Warn("kafka: a broker refuses an output partition's writes with an error the Kafka client retries; its records wait, nothing is committed past them",
			"topic", topic, "partition", partition, "err", err, "batches", n)
	}
}

// retriedProblems returns the not-ready reasons (keyed under problemOutputs, so that
// watchRound clears them once records are acknowledged again) of the output partitions
// whose batches brokers have refused for at least stuckAfter, the last time within it,
// leaving out the topics skip already names. Those refused longer ago are forgotten.
func (c *Consumer) retriedProblems(skip map[string]string) map[string]string {
	now, bound := time.Now(), c.stuckAfter()
	r := &c.retried
	r.mu.Lock()
	defer r.mu.Unlock()
	found := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(r.m)) {
		p := r.m[k]
		if now.Sub(p.last) > bound {
			delete(r.m, k)
			continue
		}
		if now.Sub(p.first) < bound || namesTopic(skip, p.topic) {
			continue
		}
		key := problemOutputs + p.topic + "/retried/" + strconv.Itoa(int(p.partition))
		if _, ok := found[key]; ok {
			continue // one reason a partition: the first error in key order
		}
		found[key] = fmt.Sprintf("kafka: output topic %q: partition %d: the brokers have refused its writes for %s with %v, which the Kafka client retries; "+
			"its records wait and are retried, nothing is committed past them; check the broker leading it (its logs and disks)",
			p.topic, p.partition, now.Sub(p.first).Round(time.Second), p.err)
	}
	return found
}

// namesTopic reports whether problems (keyed under problemOutputs) hold one of topic's.
func namesTopic(problems map[string]string, topic string) bool {
	prefix := problemOutputs + topic + "/"
	for k := range problems {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
