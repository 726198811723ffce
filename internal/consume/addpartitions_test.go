package consume

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPartitionsAddedWhileRunning: partitions added to the input topic while a gate runs
// are assigned and read from their start, GATE_KAFKA_START_OFFSET latest included: each
// of their records was written after the group began reading the topic. The records
// written to them before the gate notices them (here at once after they are added, the
// gate's client refreshing its metadata every 3 s) are routed too, once each. Before,
// with latest, the gate started them at their end as of their assignment, and those
// records were skipped without a word (none counted lost, the commits at the end).
func TestPartitionsAddedWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		start    StartOffset
		delivery Delivery
		protocol GroupProtocol
	}{
		{"earliest", StartEarliest, AtLeastOnce, GroupClassic},
		{"latest", StartLatest, AtLeastOnce, GroupClassic},
		{"latest-exactly-once", StartLatest, ExactlyOnce, GroupClassic},
		{"latest-kip848", StartLatest, AtLeastOnce, GroupConsumer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addPartitionsWhileRunning(t, tc.start, tc.delivery, tc.protocol, 3*time.Second, 30*time.Second)
		})
	}
}

// TestPartitionsAddedPickedUpPromptly: with franz-go's default metadata refresh (every
// 5 minutes), partitions added to the input topic are assigned and routed within
// seconds: the gate watches the topic's partition count and refreshes its metadata once
// it grows. Before, their records waited up to 5 minutes, owned by no gate and in no
// gate's lag.
func TestPartitionsAddedPickedUpPromptly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start StartOffset
	}{
		{"earliest", StartEarliest},
		{"latest", StartLatest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addPartitionsWhileRunning(t, tc.start, AtLeastOnce, GroupClassic, 5*time.Minute, 20*time.Second)
		})
	}
}

// addPartitionsWhileRunning runs a gate on a 2-partition input topic, has it route a
// record of each partition, adds 2 partitions and writes 5 records to each at once: all
// 12 must come out once within the time given, and the group's commits cover them.
func addPartitionsWhileRunning(t *testing.T, start StartOffset, d Delivery, proto GroupProtocol, metadataAge, within time.Duration) {
	t.Helper()
	const before, after = 2, 4
	env := newEnv(t, before)
	env.ccfg.StartOffset = start
	env.ccfg.Delivery = d
	env.ccfg.GroupProtocol = proto
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.MetadataMaxAge(metadataAge))
	ends := endsLookedUp(t, env)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the group's assignment", g.c.Ready)
	if start == StartLatest {
		// The first records after the start: see TestPartitionsAddedReadByAGateStartedAfter.
		waitFor(t, 20*time.Second, "the ends of the first partitions looked up", func() bool { return ends(before) })
	}

	produce := func(from int, parts []int32, each int) int {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var recs []*kgo.Record
		for _, p := range parts {
			for range each {
				r := inputRecord(from, "team-a")
				r.Partition = p
				recs = append(recs, r)
				from++
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing: %v", err)
		}
		return from
	}
	// The group reads the topic: a record routed and committed on each partition.
	n := produce(0, []int32{0, 1}, 1)
	waitCommitted(t, env.cluster, before, 20*time.Second)

	adm := kadm.NewClient(producer(t, env.cluster))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.CreatePartitions(ctx, after-before, inTopic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("adding partitions: %v", err)
	}
	n = produce(n, []int32{2, 3}, 5)

	var opts []kgo.Opt
	if d == ExactlyOnce {
		opts = append(opts, readCommitted())
	}
	o := collect(t, env.cluster, n, within, 500*time.Millisecond, opts...)
	if lost, dup := o.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Errorf("%d records, within %s of adding partitions: not routed %v, routed more than once %v", n, within, lost, dup)
	}
	waitCommitted(t, env.cluster, after, 20*time.Second)
}

// TestPartitionsAddedReadByAGateStartedAfter: with latest, partitions added to the input
// topic while gate a runs, then read by gate b started after (a rolling restart, a
// scale-up), are read from their start: a, which knew the topic before it grew, commits
// their start for the group. Before, b (to which they are no different from the others)
// started them at their end, past every record written to them since they were added.
func TestPartitionsAddedReadByAGateStartedAfter(t *testing.T) {
	t.Parallel()
	const before, after = 2, 4
	env := newEnv(t, before)
	env.ccfg.StartOffset = StartLatest
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.MetadataMaxAge(5*time.Minute))
	ends := endsLookedUp(t, env)
	a := env.start(t, "a")
	waitFor(t, 20*time.Second, "the group's assignment", a.c.Ready)
	// Ready is joined and assigned; where a latest start is, is looked up after: a record
	// produced before that is behind the start (CI once: partition 1 never committed).
	waitFor(t, 20*time.Second, "the ends of the first partitions looked up", func() bool { return ends(before) })
	prod := producer(t, env.cluster)
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "team-a")})
	waitCommitted(t, env.cluster, before, 20*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(prod).CreatePartitions(ctx, after-before, inTopic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("adding partitions: %v", err)
	}
	mp, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	n := 1
	for p := int32(before); p < after; p++ {
		r := inputRecord(n, "team-b")
		r.Partition = p
		if err := mp.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	// a's watch (every 5 s) commits the added partitions' start for the group; then b
	// takes over, a leaving the group. Polled, not slept: on a loaded machine a fixed
	// wait may end before the watch has run.
	waitFor(t, 30*time.Second, "commit of the added partitions' start", func() bool {
		gi := env.cluster.GroupInfo(testGroup)
		if gi == nil {
			return false
		}
		for p := int32(before); p < after; p++ {
			if _, ok := gi.Commits[inTopic][p]; !ok {
				return false
			}
		}
		return true
	})
	b := env.start(t, "b")
	a.stop(t)
	waitFor(t, 20*time.Second, "b's assignment", b.c.Ready)
	for p := int32(before); p < after; p++ {
		r := inputRecord(n, "team-b")
		r.Partition = p
		if err := mp.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	o := collect(t, env.cluster, n, 20*time.Second, 500*time.Millisecond)
	if lost, dup := o.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Errorf("%d records: not routed %v, routed more than once %v", n, lost, dup)
	}
}

// endsLookedUp watches the input's end offset lookups (ListOffsets, latest) the broker
// answers, and returns whether those of partitions 0 to n-1 have all been: a gate
// starting them at StartLatest starts there, and a record produced after starts after.
// The broker answers requests one at a time, so a record produced once it returns true
// is written after the lookups.
func endsLookedUp(t *testing.T, env *gateEnv) func(n int32) bool {
	t.Helper()
	var mu sync.Mutex
	seen := map[int32]bool{}
	env.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range kreq.(*kmsg.ListOffsetsRequest).Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == inTopic && rp.Timestamp == -1 {
					seen[rp.Partition] = true
				}
			}
		}
		return nil, nil, false
	})
	return func(n int32) bool {
		mu.Lock()
		defer mu.Unlock()
		for p := range n {
			if !seen[p] {
				return false
			}
		}
		return true
	}
}
