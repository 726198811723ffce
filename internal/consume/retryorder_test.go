package consume

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRetriesKeepKeyOrderThroughARebalance: with the producer's buffer full behind a
// refused record A, the next record of its key, B, waits in the client's Produce; a
// rebalance cancels the routing context, the client fails B at once and A only at its
// next attempt, and the retry queue, in the order of the failures, wrote B before A, both
// committed (a review: accepted order [1 0]). The retries go in the order the records
// were read.
func TestRetriesKeepKeyOrderThroughARebalance(t *testing.T) {
	env := newEnv(t, 1)
	env.ccfg.ProduceRetries = 0 // the default: the client retries A for ever
	env.ccfg.MaxBufferedRecords = 1
	env.ccfg.Jitter = shortJitter
	var c *Consumer
	env.before = func(cc *Consumer) {
		if c == nil {
			c = cc
		}
	}
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	a := env.start(t, "a")
	waitFor(t, 20*time.Second, "gate a ready", a.c.Ready)
	recs := teamInputs("team-1", 0, 2)
	for _, r := range recs {
		r.Key = []byte("same-key")
	}
	produceAll(t, producer(t, env.cluster), recs)
	waitFor(t, 20*time.Second, "A refused, B handed to the client behind it", func() bool { return c.outstanding.Load() == 2 && fault.Hits() > 2 })
	env.start(t, "b") // a rebalance: b gets nothing of the one partition
	waitFor(t, 20*time.Second, "A and B failed", func() bool { return c.retry.pending.Load() >= 2 })
	fault.Remove()
	out := collect(t, env.cluster, 2, 30*time.Second, 500*time.Millisecond)
	var order []int
	for _, r := range out.recs[accTopic] {
		id, _ := strconv.Atoi(header(r, idHeader))
		order = append(order, id)
	}
	if fmt.Sprint(order) != "[0 1]" {
		t.Fatalf("key same-key written in the order %v, want [0 1], as read", order)
	}
}
