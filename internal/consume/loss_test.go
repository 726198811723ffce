package consume

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/route"
)

// Records that vanish before the gate reads them (see docs/design.md, "Guarantees", and
// loss.go): retention deleting below a lagging gate's position, a
// group away longer than the retention, a broker that lost records. The gate cannot
// route them; it must say how many, from where, and go on or stop as told.

// syncBuffer is a buffer a logger and a test can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLines returns the lines of a gate's JSON log, each decoded, in order, failing the
// test on a line that is not JSON. The tests' one reader of a log: a bufio.Scanner left
// at its default buffer stops at the first line over 64 KB (franz-go logs a large
// group's assignment on one) and says so only through Err, which the scanners each test
// had kept did not all ask: the lines after it were never seen.
func logLines(t testing.TB, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line not JSON: %v: %s", err, l)
		}
		out = append(out, line)
	}
	return out
}

// lastLine returns the last line of logs whose msg is msg, or nil.
func lastLine(t testing.TB, logs string, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, l := range logLines(t, logs) {
		if l["msg"] == msg {
			found = l
		}
	}
	return found
}

// lossLines returns the JSON log lines that report lost records (those with a
// lost_records attribute).
func lossLines(t *testing.T, logs *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range logLines(t, logs.String()) {
		if _, ok := line["lost_records"]; ok {
			out = append(out, line)
		}
	}
	return out
}

// checkLossLine checks that logs hold exactly one loss report, an error naming the
// partition, the cause, the offsets [from, to) and their count.
func checkLossLine(t *testing.T, logs *syncBuffer, part int32, cause string, from, to int64) map[string]any {
	t.Helper()
	lines := lossLines(t, logs)
	if len(lines) != 1 {
		t.Fatalf("%d log lines report lost records, want 1: %v", len(lines), lines)
	}
	l := lines[0]
	want := map[string]any{
		"level": "ERROR", "topic": inTopic, "partition": float64(part), "cause": cause,
		"offsets": fmt.Sprintf("[%d, %d)", from, to), "lost_records": float64(to - from),
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("loss line: %s = %v, want %v (line %v)", k, l[k], v, l)
		}
	}
	t.Logf("reported: %v", l)
	return l
}

// lostMetric is gate_records_lost_total for the input topic's partition and cause, as
// scraped from reg (0 when the series does not exist).
func lostMetric(t *testing.T, reg *prometheus.Registry, part int32, cause string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gate_records_lost_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["topic"] == inTopic && labels["partition"] == strconv.Itoa(int(part)) && labels["cause"] == cause {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// partProducer writes input records to the partition each names.
func partProducer(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTo writes input records ids from, from+1, ... from+n-1 to partition part, in
// that order (so at consecutive offsets).
func produceTo(t *testing.T, cl *kgo.Client, part int32, from, n int) {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = inputRecord(from+i, "team-"+strconv.Itoa((from+i)%5))
		recs[i].Partition = part
	}
	produceAll(t, cl, recs)
}

// idRange returns ids from, ..., to-1.
func idRange(from, to int) []int {
	var ids []int
	for id := from; id < to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// routed returns the ids among want seen on the outputs, and the ids seen more than once.
func (o *outputs) routed(want []int) (seen, dup []int) {
	for _, id := range want {
		switch n := len(o.ids[id]); {
		case n == 1:
			seen = append(seen, id)
		case n > 1:
			seen = append(seen, id)
			dup = append(dup, id)
		}
	}
	return seen, dup
}

// TestRetentionDeletesBelowPosition: a running gate falls behind on partition 0 (its
// fetches fail), records are written past its position, and retention deletes the
// first 70 of them. The gate reports exactly those 70 (one error line with their
// offsets, gate_records_lost_total{cause="retention"} = 70), resumes at the log start
// and routes everything else once. Before: franz-go resumed at the log start in
// silence.
func TestRetentionDeletesBelowPosition(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, first, more, deleted = 2, 50, 100, 70
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			logs := &syncBuffer{}
			env.logs = logs
			prod := partProducer(t, env.cluster)
			produceTo(t, prod, 0, 0, first)     // ids 0..49 at offsets 0..49
			produceTo(t, prod, 1, first, first) // ids 50..99
			g := env.start(t, "a")
			waitCommitted(t, env.cluster, parts, 20*time.Second)

			// Partition 0 falls behind at offset 50: its fetches fail until released.
			pos := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
			hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
				Err: kerr.NotLeaderForPartition, Count: -1})
			// Two fetches refused: none started before the fault is still waiting at the
			// broker for records to come.
			waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
			produceTo(t, prod, 0, 100, more) // ids 100..199 at offsets 50..149
			produceTo(t, prod, 1, 200, more) // ids 200..299, routed meanwhile
			if err := env.cluster.DeleteRecords(inTopic, 0, pos+deleted); err != nil {
				t.Fatal(err)
			}
			hold.Remove()

			total := 2*first + 2*more
			out := collect(t, env.cluster, total-deleted, 30*time.Second, 300*time.Millisecond, tc.opts...)
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			g.stop(t)

			lost, dup := out.conservation(total)
			if want := idRange(100, 100+deleted); !slices.Equal(lost, want) || len(dup) > 0 {
				t.Errorf("not routed %v (want exactly the %d deleted, %v), duplicated %v", lost, deleted, head(want), head(dup))
			}
			if got := lostMetric(t, g.reg, 0, "retention"); got != deleted {
				t.Errorf("gate_records_lost_total{partition=0,cause=retention} = %v, want %d", got, deleted)
			}
			if got := lostMetric(t, g.reg, 1, "retention") + lostMetric(t, g.reg, 0, "broker"); got != 0 {
				t.Errorf("other gate_records_lost_total series sum to %v, want 0", got)
			}
			checkLossLine(t, logs, 0, "retention", pos, pos+deleted)
			t.Logf("deleted %d records below the gate's position %d; counted %v", deleted, pos, lostMetric(t, g.reg, 0, "retention"))
		})
	}
}

// TestCommittedBelowLogStart: the group is away while records are written and retention
// deletes all of partition 0's (its committed offset is then below the log start).
// The gate that comes back reports those 60, commits past the gap although nothing
// follows it, and a gate started after it reports nothing. Before: nothing reported,
// and the commit stayed below the log start, so every restart met the gap again.
func TestCommittedBelowLogStart(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, first, more = 2, 50, 60
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			logs := &syncBuffer{}
			env.logs = logs
			prod := partProducer(t, env.cluster)
			produceTo(t, prod, 0, 0, first)
			produceTo(t, prod, 1, first, first)
			a := env.start(t, "a")
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			a.stop(t)

			pos := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
			produceTo(t, prod, 0, 100, more) // ids 100..159 at offsets 50..109: all deleted
			produceTo(t, prod, 1, 200, more) // ids 200..259
			end := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
			if err := env.cluster.DeleteRecords(inTopic, 0, end); err != nil {
				t.Fatal(err)
			}

			b := env.start(t, "a") // the same instance back (exactly-once: the same transactional id)
			waitFor(t, 20*time.Second, "the loss counted", func() bool { return lostMetric(t, b.reg, 0, "retention") > 0 })
			out := collect(t, env.cluster, 2*first+more, 30*time.Second, 300*time.Millisecond, tc.opts...)
			waitCommitted(t, env.cluster, parts, 20*time.Second) // partition 0 at its log start, 110
			b.stop(t)
			kept := append(idRange(0, 2*first), idRange(200, 200+more)...)
			if seen, dup := out.routed(kept); len(seen) != len(kept) || len(dup) > 0 {
				t.Errorf("%d of the %d records kept routed, duplicated %v", len(seen), len(kept), head(dup))
			}
			if seen, _ := out.routed(idRange(100, 100+more)); len(seen) > 0 {
				t.Errorf("deleted records routed: %v", head(seen))
			}
			if got := lostMetric(t, b.reg, 0, "retention"); got != more {
				t.Errorf("gate_records_lost_total{partition=0,cause=retention} = %v, want %d", got, more)
			}
			checkLossLine(t, logs, 0, "retention", pos, end)

			// The next gate starts past the gap: nothing lost to report.
			logs2 := &syncBuffer{}
			env.logs = logs2
			c := env.start(t, "a")
			produceTo(t, prod, 0, 300, 1) // routed only once the gate has fetched partition 0
			out = collect(t, env.cluster, 2*first+more+1, 30*time.Second, 0, tc.opts...)
			if len(out.ids[300]) != 1 {
				t.Fatalf("record 300, written after the restart, routed %d times", len(out.ids[300]))
			}
			c.stop(t)
			if got := lostMetric(t, c.reg, 0, "retention"); got != 0 {
				t.Errorf("the next gate counted %v lost records again, want 0", got)
			}
			if lines := lossLines(t, logs2); len(lines) > 0 {
				t.Errorf("the next gate reported a loss again: %v", lines)
			}
		})
	}
}

// TestDataLossStop: with OnDataLoss = stop, the gate that meets the gap stops the
// partition there: nothing of it is routed past the gap or committed, the consumer is
// not ready and says which partition and what to do, the loss is still counted, and
// the other partition goes on. Before: the gap was skipped in silence.
func TestDataLossStop(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, first, more, deleted = 2, 50, 100, 60
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			env.ccfg.OnDataLoss = DataLossStop
			logs := &syncBuffer{}
			env.logs = logs
			prod := partProducer(t, env.cluster)
			produceTo(t, prod, 0, 0, first)
			produceTo(t, prod, 1, first, first)
			a := env.start(t, "a")
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			a.stop(t)

			pos := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
			produceTo(t, prod, 0, 100, more) // ids 100..199 at offsets 50..149
			produceTo(t, prod, 1, 200, more) // ids 200..299
			if err := env.cluster.DeleteRecords(inTopic, 0, pos+deleted); err != nil {
				t.Fatal(err) // ids 100..159 gone, 160..199 left behind the gap
			}

			b := env.start(t, "a")
			want := fmt.Sprintf("partition %s/0 stopped at offset %d", inTopic, pos)
			waitFor(t, 20*time.Second, "not ready, naming the partition", func() bool {
				return strings.Contains(strings.Join(b.c.NotReady(), "; "), want)
			})
			if b.c.Ready() {
				t.Error("ready with a partition stopped at a gap")
			}
			why := strings.Join(b.c.NotReady(), "; ")
			for _, s := range []string{fmt.Sprintf("[%d, %d)", pos, pos+deleted), "GATE_ON_DATA_LOSS"} {
				if !strings.Contains(why, s) {
					t.Errorf("not ready because %q, want it to say %q", why, s)
				}
			}
			out := collect(t, env.cluster, 2*first+more, 30*time.Second, 500*time.Millisecond, tc.opts...)
			waitFor(t, 20*time.Second, "partition 1 committed", func() bool {
				behind := committedBehind(env.cluster, parts)
				return len(behind) == 1 && strings.HasPrefix(behind[0], "0:")
			})
			b.stop(t)
			if seen, _ := out.routed(idRange(100+deleted, 100+more)); len(seen) > 0 {
				t.Errorf("%d records of the stopped partition routed past the gap, e.g. %v", len(seen), head(seen))
			}
			if seen, dup := out.routed(idRange(200, 200+more)); len(seen) != more || len(dup) > 0 {
				t.Errorf("partition 1: %d of %d routed, %d duplicated", len(seen), more, len(dup))
			}
			if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; !ok || gc.Offset != pos {
				t.Errorf("partition 0 committed at %v, want it left at %d", gc.Offset, pos)
			}
			if got := lostMetric(t, b.reg, 0, "retention"); got != deleted {
				t.Errorf("gate_records_lost_total{partition=0,cause=retention} = %v, want %d", got, deleted)
			}
			l := checkLossLine(t, logs, 0, "retention", pos, pos+deleted)
			if msg, _ := l["msg"].(string); !strings.Contains(msg, "GATE_ON_DATA_LOSS=stop") {
				t.Errorf("loss line %q does not say the partition stopped (GATE_ON_DATA_LOSS=stop)", msg)
			}
		})
	}
}

// commitOffset commits off for partition part of the input topic on behalf of the
// (empty) test group, as an administrator would.
func commitOffset(t *testing.T, c *kfake.Cluster, part int32, off kgo.EpochOffset) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = testGroup
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = inTopic, c.TopicInfo(inTopic).TopicID // v10+ names topics by id
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = part, off.Offset, off.Epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("committing %v: %v", off, err)
			}
		}
	}
}

// TestCommittedAboveLogEnd: the group's committed offset, 1000, is past partition 0's
// end, 50, as after a broker lost the records the group had read (truncation, an
// unclean leader election). With the commit's leader epoch franz-go finds where the
// log ends and reports an *kgo.ErrDataLoss; without it the fetch is out of range above
// the log end. Either way the gate reports offsets [50, 1000) lost by the broker,
// resumes at the log end and routes what is written there, once, and nothing below it.
// Before: the ErrDataLoss was a warning ("fetch failed"), and without the epoch
// franz-go restarted at the log start and routed the partition again.
func TestCommittedAboveLogEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		for _, epoch := range []int32{-1, 0} {
			t.Run(fmt.Sprintf("%s/epoch=%d", tc.name, epoch), func(t *testing.T) {
				t.Parallel()
				const parts, first, committed, after = 2, 50, 1000, 20
				env := newEnv(t, parts)
				env.ccfg.Delivery = tc.d
				logs := &syncBuffer{}
				env.logs = logs
				prod := partProducer(t, env.cluster)
				produceTo(t, prod, 0, 0, first) // offsets 0..49, below the commit: read before
				commitOffset(t, env.cluster, 0, kgo.EpochOffset{Epoch: epoch, Offset: committed})
				commitOffset(t, env.cluster, 1, kgo.EpochOffset{Epoch: -1, Offset: 0})

				g := env.start(t, "a")
				waitFor(t, 20*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "broker") > 0 })
				produceTo(t, prod, 0, 100, after) // at the log end, 50..69: routed
				out := collect(t, env.cluster, after, 30*time.Second, 300*time.Millisecond, tc.opts...)
				waitCommitted(t, env.cluster, parts, 20*time.Second)
				g.stop(t)

				if seen, dup := out.routed(idRange(100, 100+after)); len(seen) != after || len(dup) > 0 {
					t.Errorf("records written after the loss: %d of %d routed, duplicated %v", len(seen), after, dup)
				}
				if seen, _ := out.routed(idRange(0, first)); len(seen) > 0 {
					t.Errorf("%d records below the committed offset routed again, e.g. %v", len(seen), head(seen))
				}
				if got := lostMetric(t, g.reg, 0, "broker"); got != committed-first {
					t.Errorf("gate_records_lost_total{partition=0,cause=broker} = %v, want %d", got, committed-first)
				}
				checkLossLine(t, logs, 0, "broker", first, committed)
			})
		}
	}
}

// TestOutOfRangeWithinLog: the broker answers one fetch at the gate's position with
// OFFSET_OUT_OF_RANGE although the position is within its log, as a broker that lost
// and rewrote records does. Asked where the leader epoch of the gate's last record
// ended, it says: past the position (spurious: nothing lost, nothing routed twice), or
// 30 records before it (diverged: those 30 are reported lost by the broker, and the
// gate re-reads from there, routing what the log now holds at those offsets). Before:
// franz-go rewound by time, replaying the partition, and reported nothing.
func TestOutOfRangeWithinLog(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		for _, diverged := range []bool{false, true} {
			name := tc.name + "/spurious"
			if diverged {
				name = tc.name + "/diverged"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				const parts, first, more, back = 1, 100, 50, 30
				env := newEnv(t, parts)
				env.ccfg.Delivery = tc.d
				// Every fetch names the partition and its offset, for the fault to see: an
				// incremental fetch session leaves an unchanged partition out.
				env.ccfg.ClientOpts = append(testClientOpts(), kgo.DisableFetchSessions())
				logs := &syncBuffer{}
				env.logs = logs
				prod := partProducer(t, env.cluster)
				produceTo(t, prod, 0, 0, first)
				g := env.start(t, "a")
				waitCommitted(t, env.cluster, parts, 20*time.Second)

				pos := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
				var fired atomic.Bool
				oor := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
					Err: kerr.OffsetOutOfRange, When: func(kreq kmsg.Request) bool {
						for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
							for _, rp := range rt.Partitions {
								if rp.FetchOffset == pos {
									fired.Store(true)
									return true
								}
							}
						}
						return false
					}})
				if diverged {
					// Once the fault fired, the leader says epoch 0 ended 30 records back.
					env.cluster.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
						if !fired.Load() {
							env.cluster.KeepControl()
							return nil, nil, false
						}
						return epochEnds(kreq, func(int32) int64 { return pos - back }), nil, true
					})
				}
				waitFor(t, 20*time.Second, "the fetch out of range", func() bool { return oor.Hits() > 0 })
				produceTo(t, prod, 0, first, more)
				total := first + more
				out := collect(t, env.cluster, total, 30*time.Second, 300*time.Millisecond, tc.opts...)
				waitCommitted(t, env.cluster, parts, 20*time.Second)
				g.stop(t)

				lost, dup := out.conservation(total)
				if len(lost) > 0 {
					t.Errorf("not routed: %v", head(lost))
				}
				if !diverged {
					if len(dup) > 0 {
						t.Errorf("%d records routed twice after a spurious out of range, e.g. %v", len(dup), head(dup))
					}
					if got := lostMetric(t, g.reg, 0, "broker") + lostMetric(t, g.reg, 0, "retention"); got != 0 {
						t.Errorf("gate_records_lost_total = %v for a spurious out of range, want 0", got)
					}
					if lines := lossLines(t, logs); len(lines) > 0 {
						t.Errorf("a loss reported for a spurious out of range: %v", lines)
					}
					return
				}
				// Re-read from where the log diverged: the records there (here the same ones)
				// are routed again.
				if want := idRange(first-back, first); !slices.Equal(dup, want) {
					t.Errorf("routed again %v, want the %d records from where the log diverged, %v", head(dup), back, head(want))
				}
				if got := lostMetric(t, g.reg, 0, "broker"); got != back {
					t.Errorf("gate_records_lost_total{partition=0,cause=broker} = %v, want %d", got, back)
				}
				checkLossLine(t, logs, 0, "broker", pos-back, pos)
			})
		}
	}
}

// TestJudgeOutOfRange: what an out-of-range fetch at pos means, given the log's start
// and end and where the leader epoch of the gate's last record ended.
func TestJudgeOutOfRange(t *testing.T) {
	t.Parallel()
	eo := func(off int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: 3, Offset: off} }
	unknown := kgo.EpochOffset{Epoch: -1, Offset: -1}
	for _, tc := range []struct {
		name                      string
		pos, start, end, epochEnd kgo.EpochOffset
		lost                      bool
		want                      gap
	}{
		{"below the log start", eo(50), eo(120), eo(200), unknown, true,
			gap{cause: lossRetention, pos: 50, from: 50, to: 120, resume: eo(120)}},
		{"below the log start, whatever the epoch says", eo(50), eo(120), eo(200), eo(30), true,
			gap{cause: lossRetention, pos: 50, from: 50, to: 120, resume: eo(120)}},
		{"the epoch ended below the position", eo(100), eo(0), eo(80), eo(70), true,
			gap{cause: lossBroker, pos: 100, from: 70, to: 100, resume: eo(70)}},
		{"the epoch ended below the position and the log start", eo(100), eo(90), eo(120), eo(60), true,
			gap{cause: lossBroker, pos: 100, from: 60, to: 100, resume: eo(90)}},
		{"past the log end, no epoch", eo(1000), eo(0), eo(50), unknown, true,
			gap{cause: lossBroker, pos: 1000, from: 50, to: 1000, resume: eo(50), unlocated: true}},
		{"past the log end, the epoch going on", eo(100), eo(0), eo(90), eo(110), false, gap{}},
		{"within the log, no epoch", eo(100), eo(0), eo(150), unknown, false, gap{}},
		{"within the log, the epoch going on", eo(100), eo(0), eo(150), eo(150), false, gap{}},
		{"at the log end", eo(100), eo(0), eo(100), eo(100), false, gap{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, lost := judgeOutOfRange(tc.pos, tc.start, tc.end, tc.epochEnd)
			if lost != tc.lost || g != tc.want {
				t.Errorf("got %+v, lost %v; want %+v, lost %v", g, lost, tc.want, tc.lost)
			}
		})
	}
}

// TestDataLossConfig: continue is the default, the names round-trip, and a value that
// is neither policy is refused.
func TestDataLossConfig(t *testing.T) {
	t.Parallel()
	base := Config{Brokers: []string{"x:9092"}, InputTopic: "in", GroupID: "g"}
	if c, err := base.withDefaults(); err != nil || c.OnDataLoss != DataLossContinue {
		t.Errorf("default %v (%v), want continue", c.OnDataLoss, err)
	}
	for _, d := range []DataLoss{DataLossContinue, DataLossStop} {
		if got, err := ParseDataLoss(d.String()); err != nil || got != d {
			t.Errorf("ParseDataLoss(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDataLoss("skip"); err == nil {
		t.Error("ParseDataLoss(skip): no error")
	}
	base.OnDataLoss = 7
	if _, err := base.withDefaults(); err == nil || !strings.Contains(err.Error(), "unknown data loss policy DataLoss(7)") {
		t.Errorf("data loss policy 7: error %v", err)
	}
}

// TestDeletedBeforeFirstFetch: a new group's start offset (the log start) is deleted
// between the client's lookup of it and its first fetch. Nothing the group had reached
// is lost, so nothing is counted; the client cannot be moved (it has neither read nor
// a committed offset for the partition), so the gate commits the log start, stops the
// partition and says to restart, and a restarted gate routes from the log start.
// The commit is held at the broker until the test has looked: not ready must not tell
// the operator to restart before the offset a restart resumes at is committed (it
// did, and a CI run read no commit the moment the message appeared).
func TestDeletedBeforeFirstFetch(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, n, deleted = 1, 60, 30
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			logs := &syncBuffer{}
			env.logs = logs
			deleteBeforeFirstFetch(t, env, n, deleted)

			// Hold the gate's commit of the log start until the test has looked.
			release := make(chan struct{})
			var held atomic.Int64
			env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				env.cluster.KeepControl()
				req := kreq.(*kmsg.OffsetCommitRequest)
				for _, rt := range req.Topics {
					for _, rp := range rt.Partitions {
						// From v10 the request names the topic by ID only; the group reads one topic.
						if (rt.Topic == inTopic || rt.Topic == "") && rp.Partition == 0 && rp.Offset == deleted && held.Add(1) == 1 {
							env.cluster.SleepControl(func() { <-release })
						}
					}
				}
				return nil, nil, false
			})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })

			a := env.start(t, "a")
			waitFor(t, 20*time.Second, "the commit of the log start sent", func() bool { return held.Load() > 0 })
			want := fmt.Sprintf("partition %s/0 stopped", inTopic)
			if why := strings.Join(a.c.NotReady(), "; "); strings.Contains(why, want) {
				t.Errorf("not ready because %q while the commit of the log start was unanswered: a restart then resumes elsewhere", why)
			}
			once.Do(func() { close(release) })
			waitFor(t, 20*time.Second, "not ready, naming the partition", func() bool {
				return strings.Contains(strings.Join(a.c.NotReady(), "; "), want)
			})
			if why := strings.Join(a.c.NotReady(), "; "); !strings.Contains(why, fmt.Sprintf("restart the gate, which resumes at offset %d", deleted)) {
				t.Errorf("not ready because %q, want it to say to restart", why)
			}
			if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; !ok || gc.Offset != deleted {
				t.Errorf("committed %v, want the log start %d", gc.Offset, deleted)
			}
			a.stop(t)
			if got := lostMetric(t, a.reg, 0, "retention") + lostMetric(t, a.reg, 0, "broker"); got != 0 {
				t.Errorf("gate_records_lost_total = %v, want 0: nothing the group had reached was lost", got)
			}
			if lines := lossLines(t, logs); len(lines) > 0 {
				t.Errorf("a loss reported: %v", lines)
			}

			b := env.start(t, "a")
			out := collect(t, env.cluster, n-deleted, 30*time.Second, 300*time.Millisecond, tc.opts...)
			waitCommitted(t, env.cluster, parts, 20*time.Second)
			b.stop(t)
			if seen, dup := out.routed(idRange(deleted, n)); len(seen) != n-deleted || len(dup) > 0 {
				t.Errorf("after the restart %d of %d routed, duplicated %v", len(seen), n-deleted, head(dup))
			}
		})
	}
}

// deleteBeforeFirstFetch writes n records to partition 0 of env's input, deletes the
// first deleted of them, and makes the client's first lookup of the log start answer
// 0, the start before the deletion, as a lookup just before a deletion does.
func deleteBeforeFirstFetch(t *testing.T, env *gateEnv, n, deleted int) {
	t.Helper()
	produceTo(t, partProducer(t, env.cluster), 0, 0, n)
	if err := env.cluster.DeleteRecords(inTopic, 0, int64(deleted)); err != nil {
		t.Fatal(err)
	}
	env.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ListOffsetsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != inTopic || len(req.Topics[0].Partitions) != 1 ||
			req.Topics[0].Partitions[0].Timestamp != -2 {
			env.cluster.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = inTopic
		sp := kmsg.NewListOffsetsResponseTopicPartition()
		sp.Partition, sp.Offset, sp.LeaderEpoch, sp.Timestamp = 0, 0, 0, -1
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
}

// TestDeletedBeforeFirstFetchCommitFails: as TestDeletedBeforeFirstFetch, but the
// commit of the log start fails. The gate must not say a restart resumes at the log
// start it could not commit; it says the commit failed and that a restart looks the
// start up again, and a restart does so: it routes everything left, once.
func TestDeletedBeforeFirstFetchCommitFails(t *testing.T) {
	t.Parallel()
	const parts, n, deleted = 1, 60, 30
	env := newEnv(t, parts)
	deleteBeforeFirstFetch(t, env, n, deleted)
	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.GroupAuthorizationFailed, Count: -1})

	a := env.start(t, "a")
	want := fmt.Sprintf("partition %s/0 stopped", inTopic)
	waitFor(t, 20*time.Second, "not ready, naming the partition", func() bool {
		return strings.Contains(strings.Join(a.c.NotReady(), "; "), want)
	})
	why := strings.Join(a.c.NotReady(), "; ")
	for _, s := range []string{fmt.Sprintf("committing offset %d failed", deleted), "GROUP_AUTHORIZATION_FAILED", "looks up the start offset again"} {
		if !strings.Contains(why, s) {
			t.Errorf("not ready because %q, want it to say %q", why, s)
		}
	}
	if strings.Contains(why, "resumes at offset") {
		t.Errorf("not ready because %q: it promises an offset it did not commit", why)
	}
	fail.Remove()
	a.stop(t)

	b := env.start(t, "a")
	out := collect(t, env.cluster, n-deleted, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	b.stop(t)
	if seen, dup := out.routed(idRange(deleted, n)); len(seen) != n-deleted || len(dup) > 0 {
		t.Errorf("after the restart %d of %d routed, duplicated %v", len(seen), n-deleted, head(dup))
	}
}

// TestRetentionTwiceBeforeCommit: retention deletes below a lagging gate's position
// twice, the second time before the gate has read anything past the first gap or
// committed where it resumed (its commits fail meanwhile). Each gap is counted once:
// 100, then 10. Before, the second out-of-range fetch was judged from the group's
// committed offset, still below the first gap, and counted that gap again (210); on
// Apache Kafka, a segment deleted just after the one the gate skipped did it
// (internal/integration TestRetentionBelowLaggingGate).
func TestRetentionTwiceBeforeCommit(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	// The commits fail on purpose: the commit hold (fetching paused once no commit has
	// succeeded for CommitHoldAfter with something to commit, the gap skipped) is not
	// what is tested, and on a loaded machine it held the second gap's fetch.
	env.ccfg.CommitHoldAfter = time.Hour
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, 50) // offsets 0..49
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	commits := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	gap := func(produce int, deleteTo int64, wantLost float64) {
		t.Helper()
		hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
			Err: kerr.NotLeaderForPartition, Count: -1})
		waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
		hwm := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
		produceTo(t, prod, 0, int(hwm)+1000, produce)
		if err := env.cluster.DeleteRecords(inTopic, 0, deleteTo); err != nil {
			t.Fatal(err)
		}
		hold.Remove()
		waitFor(t, 20*time.Second, fmt.Sprintf("%v records counted lost", wantLost), func() bool {
			return lostMetric(t, g.reg, 0, "retention") >= wantLost
		})
	}
	gap(100, 150, 100) // offsets 50..149 written, all deleted: the gate resumes at 150
	gap(20, 160, 110)  // 150..169 written, 150..159 deleted before the gate read any
	commits.Remove()
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	g.stop(t)
	if got := lostMetric(t, g.reg, 0, "retention"); got != 110 {
		t.Errorf("gate_records_lost_total{cause=retention} = %v, want 110 (100 + 10, each gap once)", got)
	}
}

// TestStoppedReasonOfRevokedPartition: a partition revoked or lost while it was being
// stopped (restart commits before it says why) leaves no reason behind: releaseStopped
// ran before the reason was set, and nothing would ever clear it, so the gate would stay
// not ready for a partition it no longer owns.
func TestStoppedReasonOfRevokedPartition(t *testing.T) {
	c := &Consumer{}
	owned, revoked := &partition{id: 1}, &partition{id: 2}
	revoked.gone.Store(true)
	c.sayStopped(owned, "partition 1 stopped")
	c.sayStopped(revoked, "partition 2 stopped")
	if got := c.problems.list(); len(got) != 1 || got[0] != "partition 1 stopped" {
		t.Errorf("not-ready reasons %q, want only the owned partition's", got)
	}
}

// epochEnds answers an OffsetForLeaderEpoch request (kreq) as a broker whose log of each
// partition p diverged at end(p): the leader epoch asked about ended there.
func epochEnds(kreq kmsg.Request, end func(p int32) int64) kmsg.Response {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, end(rp.Partition)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// A partition revoked (or lost) between
// park, which pauses its fetching in the client, and sayStopped (restart commits in
// between; the retry loop's undeliverable stop races onRevoked) is left paused in the
// client for good: releaseStopped resumed only partitions whose not-ready reason it
// cleared, and sayStopped sets none for a gone partition. Paused partitions persist
// across rebalances in franz-go, so when the partition is assigned to this gate again
// it is never fetched, and nothing says so (no reason, the gate ready).
func TestStoppedPartitionRevokedMidStopIsResumed(t *testing.T) {
	env := newEnv(t, 2)
	c, err := New(env.ccfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.onAssigned(t.Context(), c.cl, map[string][]int32{inTopic: {0, 1}})
	p := c.owned(1)

	// restart / stopPartition: park, then (the revoke runs here), then say why.
	if !c.park(p) {
		t.Fatal("park: partition was not running")
	}
	c.drop([]int32{1}) // onRevoked / onLost
	c.releaseStopped([]int32{1})
	c.sayStopped(p, "partition 1 stopped")

	if paused := c.cl.PauseFetchPartitions(nil); len(paused[inTopic]) != 0 {
		t.Errorf("partitions %v of %s still paused in the client after partition 1 was revoked; "+
			"assigned again, it would never be fetched (not-ready reasons: %q)", paused[inTopic], inTopic, c.problems.list())
	}
}

// firstRouter routes as its Router, calling first once, before the first record.
type firstRouter struct {
	Router
	once  *sync.Once
	first func()
}

func (f firstRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	f.once.Do(f.first)
	return f.Router.RouteInto(now, in, sc, out)
}

// TestGapToLogEndClearsLag: a gate lagging on its partition (polls see records past
// what they return) meets a gap that reaches the log end: an operator purges the
// backlog (kafka-delete-records up to the high watermark) and no more records come.
// The gate reports the gap and goes on at the log end, with nothing left to read: its
// lag is 0 (gate_partition_lag_records, and the watchdog's), and the idle gate stays
// ready and live. Before, the lag of the last poll stayed, so the idle gate counted as
// having work and no progress: not ready after GATE_STALL_NOT_READY, then not live.
func TestGapToLogEndClearsLag(t *testing.T) {
	t.Parallel()
	const n = 300
	env := newEnv(t, 1)
	env.ccfg.StallNotReady = 300 * time.Millisecond
	env.ccfg.StallRestart = 600 * time.Millisecond
	// Small fetches: a poll sees the records it does not return as lag.
	env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.FetchMaxPartitionBytes(512), kgo.FetchMaxBytes(512))
	// Kept, and printed when the test fails: it failed once on a loaded machine (nothing
	// committed in 20 s, 45 s in all against 3 s alone) with nothing to say why.
	logs := &syncBuffer{}
	env.logs = logs
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gate's log:\n%s", logs.String())
		}
	})
	prod := partProducer(t, env.cluster)
	for id := range n { // one batch per record, so that a fetch returns a few
		produceTo(t, prod, 0, id, 1)
	}
	var hold *kfake.FaultHandle
	held := make(chan struct{})
	env.wrap = func(r Router) Router {
		return firstRouter{r, new(sync.Once), func() {
			hold = env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
				Err: kerr.NotLeaderForPartition, Count: -1})
			close(held)
		}}
	}
	g := env.start(t, "a")
	<-held
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	p := g.c.owned(0)
	if p == nil || p.lag.Load() == 0 {
		t.Fatalf("no lag seen before the purge (partition %v)", p)
	}
	end := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
	if err := env.cluster.DeleteRecords(inTopic, 0, end); err != nil {
		t.Fatal(err)
	}
	hold.Remove()
	waitFor(t, 20*time.Second, "the gap counted", func() bool { return lostMetric(t, g.reg, 0, "retention") > 0 })
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	time.Sleep(4 * env.ccfg.StallRestart)
	if lag := p.lag.Load(); lag != 0 {
		t.Errorf("lag %d after going on at the log end, want 0", lag)
	}
	if got := testutil.ToFloat64(g.c.m.lag.WithLabelValues("0")); got != 0 {
		t.Errorf("gate_partition_lag_records{partition=0} = %v after going on at the log end, want 0", got)
	}
	if u := unwell(g.c); u != "" {
		t.Errorf("an idle gate after a gap to the log end: %s", u)
	}
}
