package consume

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStartOffset: a new consumer group with StartLatest routes only the records written
// after it joined, one with StartEarliest (the default) those written before as well.
func TestStartOffset(t *testing.T) {
	t.Parallel()
	const parts, before = 2, 20
	for _, tc := range []struct {
		name  string
		start StartOffset
	}{
		{"earliest", StartEarliest},
		{"latest", StartLatest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, parts)
			env.ccfg.StartOffset = tc.start
			prod := producer(t, env.cluster)
			var old []*kgo.Record
			for id := range before {
				old = append(old, inputRecord(id, "team-"+strconv.Itoa(id%3)))
			}
			produceAll(t, prod, old) // acknowledged: in the log before the group exists

			g := env.start(t, tc.name)
			waitFor(t, 20*time.Second, "the group's assignment", g.c.Ready)

			// Write new records until one comes out: the consumer has then found its
			// start offset on the partition written to, whenever it did.
			seen := map[int]int{} // id -> times seen on any output
			out, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...),
				kgo.ConsumeTopics(accTopic, ovfTopic, dlqTopic),
				kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
				kgo.FetchMaxWait(50*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			poll := func(d time.Duration) {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				out.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					id, err := strconv.Atoi(header(r, idHeader))
					if err != nil {
						t.Errorf("output record without a test id: %v", r.Headers)
						return
					}
					seen[id]++
				})
			}
			newSeen := func() bool {
				for id := range seen {
					if id >= before {
						return true
					}
				}
				return false
			}
			next := before
			deadline := time.Now().Add(20 * time.Second)
			for !newSeen() {
				if time.Now().After(deadline) {
					t.Fatalf("no record written after the group joined was routed within 20s; seen %v", seen)
				}
				produceAll(t, prod, []*kgo.Record{inputRecord(next, "team-new")})
				next++
				poll(200 * time.Millisecond)
			}
			// Let the rest arrive: with earliest, every old record (waited for, with a
			// generous deadline); with latest, a while for one that should not come.
			window := 2 * time.Second
			if tc.start == StartEarliest {
				window = 20 * time.Second
			}
			for end := time.Now().Add(window); time.Now().Before(end); {
				if tc.start == StartEarliest && len(seen) == next {
					break
				}
				poll(100 * time.Millisecond)
			}
			g.stop(t)

			var oldSeen int
			for id := range before {
				if seen[id] > 0 {
					oldSeen++
				}
			}
			switch tc.start {
			case StartEarliest:
				if oldSeen != before {
					t.Errorf("earliest: %d of the %d records written before the group joined were routed, want all", oldSeen, before)
				}
			case StartLatest:
				if oldSeen != 0 {
					t.Errorf("latest: %d of the %d records written before the group joined were routed, want none", oldSeen, before)
				}
			}
		})
	}
}

// TestStartOffsetConfig: the zero value is StartEarliest, and a value that is neither is
// refused.
func TestStartOffsetConfig(t *testing.T) {
	t.Parallel()
	base := Config{Brokers: []string{"x:9092"}, InputTopic: "in", GroupID: "g"}
	if c, err := base.withDefaults(); err != nil || c.StartOffset != StartEarliest || c.StartOffset.String() != "earliest" {
		t.Errorf("default start offset %v (%v), want earliest", c.StartOffset, err)
	}
	base.StartOffset = 7
	if _, err := base.withDefaults(); err == nil || !strings.Contains(err.Error(), "unknown start offset StartOffset(7)") {
		t.Errorf("start offset 7: error %v", err)
	}
}

// TestStartLatestKeptWhenTheFirstOwnerLeavesUnread: a new group with StartLatest whose
// first gate leaves before it has read anything of its partitions (a pod rolled, or
// crash-looping, in a fleet's first minutes) keeps where the group started them: the
// records written after the group joined are routed by the next owner, and none written
// before. Kafka's own consumers start such a partition at the log's end as of the next
// owner's join, past the records written in between; the gate commits the start at
// assignment instead.
func TestStartLatestKeptWhenTheFirstOwnerLeavesUnread(t *testing.T) {
	t.Parallel()
	const parts, before, after = 2, 10, 10
	for _, tc := range deliveryModes() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.newEnv(t, parts)
			env.ccfg.StartOffset = StartLatest
			prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			rec := func(id int) *kgo.Record {
				r := inputRecord(id, "team-"+strconv.Itoa(id%3))
				r.Partition = int32(id) % parts
				return r
			}
			var old, recs []*kgo.Record
			for id := range before {
				old = append(old, rec(id))
			}
			for id := before; id < before+after; id++ {
				recs = append(recs, rec(id))
			}
			produceAll(t, prod, old) // in the log before the group exists

			a := env.start(t, "a")
			waitFor(t, 20*time.Second, "gate a's assignment", a.c.Ready)
			a.stop(t) // assigned both partitions, read nothing of them
			produceAll(t, prod, recs)
			b := env.start(t, "b")
			waitFor(t, 20*time.Second, "gate b's assignment", b.c.Ready)
			out := collect(t, env.cluster, after, 30*time.Second, time.Second, tc.opts...)
			b.stop(t)
			out.checkStartLatest(t, before, after)
		})
	}
}

// TestStartLatestCommitRefusedAtAssignment: the start commit at the assignment (latest.go)
// refused is logged once, with the error, and the gate goes on: it routes what is
// written from then on and commits it. Exactly once, the first transaction then commits
// where it began before producing any of its records (commitTxnStarts), so that an
// abort still hands its next owner that start.
func TestStartLatestCommitRefusedAtAssignment(t *testing.T) {
	t.Parallel()
	const before, after = 5, 5
	for _, tc := range deliveryModes() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.newEnv(t, 1)
			env.ccfg.StartOffset = StartLatest
			logs := &syncBuffer{}
			env.logs = logs
			var commits atomic.Int64
			env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				env.cluster.KeepControl()
				if commits.Add(1) == 1 {
					return refuseOffsetCommit(req, kerr.TopicAuthorizationFailed), nil, true
				}
				return nil, nil, false
			})
			// The gate looks the end up for its commit, then franz-go for its start (the
			// group having no offset): records produced before the second are behind it.
			var lookups atomic.Int64
			env.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				env.cluster.KeepControl()
				for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
					for _, rp := range rt.Partitions {
						if rt.Topic == inTopic && rp.Timestamp == -1 {
							lookups.Add(1)
						}
					}
				}
				return nil, nil, false
			})
			prod := producer(t, env.cluster)
			var old, recs []*kgo.Record
			for id := range before {
				old = append(old, inputRecord(id, "team-a"))
			}
			for id := before; id < before+after; id++ {
				recs = append(recs, inputRecord(id, "team-a"))
			}
			produceAll(t, prod, old)

			br := &blockingRouter{from: before, blocked: make(chan struct{}), release: make(chan struct{})}
			env.wrap = func(r Router) Router { br.Router = r; return br }
			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "the gate's assignment", g.c.Ready)
			const warn = "kafka: committing where the group starts partitions it has no offset for failed"
			if n := strings.Count(logs.String(), warn); n != 1 || !strings.Contains(logs.String(), "TOPIC_AUTHORIZATION_FAILED") {
				t.Fatalf("the refused start commit logged %d times (want 1, with the error):\n%s", n, logs.String())
			}
			if gi := env.cluster.GroupInfo(testGroup); gi != nil && len(gi.Commits[inTopic]) > 0 {
				t.Fatalf("an offset committed though the start commit was refused: %v", gi.Commits[inTopic])
			}
			waitFor(t, 20*time.Second, "franz-go's lookup of where it starts the partition", func() bool { return lookups.Load() >= 2 })
			produceAll(t, prod, recs)
			select {
			case <-br.blocked:
			case <-time.After(20 * time.Second):
				t.Fatal("the gate never routed the new records")
			}
			if tc.name == "exactly-once" {
				// Held in the first transaction, whose start is committed already.
				gi := env.cluster.GroupInfo(testGroup)
				if c, ok := gi.Commits[inTopic][0]; !ok || c.Offset != before {
					t.Errorf("exactly once, the first transaction's start: committed %v (found %v), want offset %d", c, ok, before)
				}
			}
			close(br.release)
			out := collect(t, env.cluster, after, 30*time.Second, 500*time.Millisecond, tc.opts...)
			if lost, dup := out.conservation(before + after); len(dup) > 0 || !slices.Equal(lost, []int{0, 1, 2, 3, 4}) {
				t.Errorf("routed: not %v (want the %d written before the group joined), more than once %v", lost, before, dup)
			}
			waitFor(t, 20*time.Second, "the routed records committed", func() bool {
				gi := env.cluster.GroupInfo(testGroup)
				return gi != nil && gi.Commits[inTopic][0].Offset == before+after
			})
			g.stop(t)
		})
	}
}

// checkStartLatest fails t unless o, the outputs of a group started with StartLatest
// after records 0 to before-1 were written, holds none of those and each of the after
// records written since exactly once.
func (o *outputs) checkStartLatest(t *testing.T, before, after int) {
	t.Helper()
	var oldSeen, missing []int
	for id := range before {
		if len(o.ids[id]) > 0 {
			oldSeen = append(oldSeen, id)
		}
	}
	for id := before; id < before+after; id++ {
		switch n := len(o.ids[id]); {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			t.Errorf("record %d, written after the group joined, routed %d times", id, n)
		}
	}
	if len(oldSeen) > 0 {
		t.Errorf("%d of the %d records written before the group joined were routed: %v", len(oldSeen), before, head(oldSeen))
	}
	if len(missing) > 0 {
		t.Errorf("%d of the %d records written after the group joined were never routed: %v", len(missing), after, head(missing))
	}
}

// deliveryModes are the two delivery modes a test runs in: an environment of each, and
// the options its outputs are read with (read_committed, exactly once).
func deliveryModes() []struct {
	name   string
	newEnv func(*testing.T, int32) *gateEnv
	opts   []kgo.Opt
} {
	return []struct {
		name   string
		newEnv func(*testing.T, int32) *gateEnv
		opts   []kgo.Opt
	}{
		{"at-least-once", func(t *testing.T, n int32) *gateEnv { return newEnv(t, n) }, nil},
		{"exactly-once", newEOSEnv, []kgo.Opt{readCommitted()}},
	}
}
