package consume

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRetryAloneWaitsForAnEarlierFailureOfItsRound: records A and B of one key are both
// awaiting a retry, A after a transient failure, B after the broker refused the batch it
// was in (so it is retried alone). In their round A is produced, B waits for A's answer
// before it goes alone, and A fails again meanwhile. B must then follow A into the next
// round: before, it was produced alone all the same, and the key's records were written
// B then A (a review's reading, [1 0] here).
func TestRetryAloneWaitsForAnEarlierFailureOfItsRound(t *testing.T) {
	env := newEnv(t, 1)
	env.ccfg.ProduceRetries = 1 // A's failure reaches the gate rather than being retried for ever
	env.ccfg.MaxBufferedRecords = 1
	env.ccfg.Jitter = shortJitter
	var c *Consumer
	env.before = func(cc *Consumer) {
		if c == nil {
			c = cc
		}
	}
	// A is told from B by its size: a kilobyte and more that no compression shrinks.
	pad := make([]byte, 3000)
	if _, err := rand.Read(pad); err != nil {
		t.Fatal(err)
	}
	a, b := inputRecord(0, "team-1"), inputRecord(1, "team-1")
	a.Value = fmt.Appendf(nil, `{"team_id":"team-1","seq":0,"pad":%q}`, base64.StdEncoding.EncodeToString(pad))
	a.Key, b.Key = []byte("same-key"), []byte("same-key")
	holdsA := func(req kmsg.Request) bool {
		p, ok := req.(*kmsg.ProduceRequest)
		if !ok {
			return false
		}
		n := 0
		for _, tp := range p.Topics {
			for _, pp := range tp.Partitions {
				n += len(pp.Records)
			}
		}
		return n > 2000
	}
	// A fails until it was produced again once (its round's produce fails too); B's
	// first batch is refused for good, once.
	failA := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(req kmsg.Request) bool {
			return holdsA(req) && (c == nil || testutil.ToFloat64(c.m.retries) < 2)
		}})
	env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.InvalidRecord, Count: 1,
		When: func(req kmsg.Request) bool { return !holdsA(req) }})
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "gate a ready", g.c.Ready)
	produceAll(t, producer(t, env.cluster), []*kgo.Record{a, b})
	out := collect(t, env.cluster, 2, 30*time.Second, 500*time.Millisecond)
	if failA.Hits() < 2 {
		t.Fatalf("A's produces failed %d times, want its first and its round's", failA.Hits())
	}
	var order []int
	for _, r := range out.recs[accTopic] {
		id, _ := strconv.Atoi(header(r, idHeader))
		order = append(order, id)
	}
	if fmt.Sprint(order) != "[0 1]" {
		t.Fatalf("key same-key written in the order %v, want [0 1], as read (%v produces retried)", order, testutil.ToFloat64(c.m.retries))
	}
}
