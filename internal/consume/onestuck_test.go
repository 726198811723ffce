package consume

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOneOutputPartitionLeaderless: one partition of the accepted topic loses its leader
// while its other partitions take writes, and input keeps coming. The records keyed to
// that partition wait (the client retries them; nothing is committed past them), and
// after two watch intervals (10 s by default) /readyz names the topic and partition, as
// it does when every output partition is down; once the leader is back they are
// delivered, the gate ready again, and every input record is on an output topic once.
// Before, the output watch asked the cluster only when no output record at all had been
// acknowledged for 10 s: the other partitions' acknowledgements kept it quiet, and the
// gate stayed ready with nothing said, its commits frozen, until the producer's buffer
// filled (GATE_MAX_BUFFERED_RECORDS, 50,000 by default).
func TestOneOutputPartitionLeaderless(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	// Outputs found stuck after 2 s, not 10.
	env.ccfg.WatchInterval = time.Second
	env.ccfg.ProduceRetries = 0 // the default: the client retries in order
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)

	// Partition 0 of accepted: no leader in the metadata (LEADER_NOT_AVAILABLE), and a
	// produce that reaches the old one refused.
	down := env.cluster.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: accTopic, Partitions: []int32{0}, Err: kerr.LeaderNotAvailable, Count: -1},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Partitions: []int32{0}, Err: kerr.NotLeaderForPartition, Count: -1},
	)
	cl := producer(t, env.cluster)
	stop := make(chan struct{})
	sent := make(chan int, 1)
	stopInput := sync.OnceValue(func() int { close(stop); return <-sent })
	t.Cleanup(func() { stopInput() }) // before the producer's own cleanup closes it
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			recs := make([]*kgo.Record, 10)
			for i := range recs {
				recs[i] = inputRecord(n, "team-"+strconv.Itoa(n%5))
				n++
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("producing input: %v", err)
				return
			}
		}
	}()
	// kfake's metadata for a faulted partition has leader 0 and no replicas (a real
	// broker's, leader -1), so the line says replicas rather than leader: what matters
	// here is that the partition is named, and only it.
	waitNotReady(t, g, 40*time.Second, `the accepted topic's partition 0 named`, func(why string) bool {
		return strings.Contains(why, `output topic "accepted": partitions 0 have`)
	})
	down.Remove()
	n := stopInput()
	waitFor(t, 30*time.Second, "ready once the partition has a leader again", g.c.Ready)
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestOneOutputPartitionRefusedBoundsHeldInput: one of the accepted topic's 12
// partitions refuses every write (NOT_ENOUGH_REPLICAS, retried by the client without
// end) while the other 11 take theirs. The input records the gate keeps in memory, those
// of the polls not yet wholly acknowledged, stay within GATE_MAX_BUFFERED_RECORDS and the
// poll being routed, as the documented sizing says; once the partition takes writes
// again every record is delivered once and committed. Before, an acknowledged record was
// kept until every record of its poll was: each poll kept all its records for the one or
// two sent to the refused partition, so the gate read on until that partition alone
// filled the producer's buffer, keeping some 12 times GATE_MAX_BUFFERED_RECORDS input
// records (with 100 output partitions, 100 times: an OOM kill, and the replay of it all).
func TestOneOutputPartitionRefusedBoundsHeldInput(t *testing.T) {
	t.Parallel()
	const parts, n, buffered, poll = 2, 4000, 200, 20
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 0
	env.ccfg.MaxBufferedRecords = buffered
	env.ccfg.MaxPollRecords = poll
	prod := producer(t, env.cluster)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(prod).CreatePartitions(ctx, 9, accTopic); err != nil {
		t.Fatal(err)
	}
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	g := env.start(t, "a")
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, prod, recs)

	// Until the gate has stopped reading: at its bound first (a gate slow to join, on a
	// loaded machine, would otherwise leave the loop below at 0 held, checking nothing),
	// then its held input no longer growing.
	waitFor(t, 60*time.Second, "the gate to stop reading at its bound of held input", g.c.inputFull)
	var held, most int64
	for quiet := 0; quiet < 25; {
		time.Sleep(100 * time.Millisecond)
		h := heldInput(g.c)
		if h > held {
			held, quiet = h, 0
		} else {
			quiet++
		}
		most = max(most, h)
	}
	if most > buffered+poll {
		t.Errorf("held the input records of polls not wholly acknowledged: %d, want at most %d (GATE_MAX_BUFFERED_RECORDS %d and a poll of %d)",
			most, buffered+poll, buffered, poll)
	}
	refused.Remove()
	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	t.Logf("held at most %d input records while one output partition refused writes", most)
}

// heldInput counts the input records of c's polls not yet wholly acknowledged (each
// batch's records from the previous batch's end, the first's from the last offset
// acknowledged), which the gate keeps in memory until they are.
func heldInput(c *Consumer) int64 {
	var held int64
	for _, p := range c.snapshot(nil) {
		p.mu.Lock()
		prev := max(p.acked.Offset, 0)
		for _, b := range p.batches {
			if !b.seal && b.remaining.Load() > 0 {
				held += b.end - prev
			}
			prev = b.end
		}
		p.mu.Unlock()
	}
	return held
}

// TestRetriedProduceLogNamesPartition: with GATE_PRODUCE_RETRIES set, one output
// partition answering NOT_LEADER_OR_FOLLOWER fails its records back to the gate, which
// retries them and says so: the line names the topic and the partition, the error being
// about one partition. Before, it named the topic only, leaving on-call to guess which
// of its partitions (and so which broker) refused.
func TestRetriedProduceLogNamesPartition(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	env := newEnv(t, parts)
	env.ccfg.ProduceRetries = 1
	env.ccfg.Jitter = shortJitter
	var logs logSink
	env.logs = &logs
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Partitions: []int32{1}, Err: kerr.NotLeaderForPartition, Count: -1})
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	g := env.start(t, "a")
	const msg = "produce failed; retrying"
	waitFor(t, 20*time.Second, "the retry logged", func() bool { return strings.Contains(logs.String(), msg) })
	refused.Remove()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, msg) {
			continue
		}
		var l struct {
			Topic     string `json:"topic"`
			Partition *int32 `json:"partition"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Topic != accTopic || l.Partition == nil || *l.Partition != 1 {
			t.Errorf("the retry line names topic %q, partition %v; want %q and 1: %s", l.Topic, l.Partition, accTopic, line)
		}
	}
}
