package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestRetentionBelowLaggingGate: records deleted from the input below the group's
// committed offset while no gate runs, by DeleteRecords and by a small retention.bytes,
// are counted exactly in gate_records_lost_total{cause="retention"} when a gate comes
// back, with an error line; everything still in the log is routed once.
func TestRetentionBelowLaggingGate(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"DeleteRecords", "retention.bytes"} {
		t.Run(how, func(t *testing.T) {
			s := newScenario(t, kafkaOpts{}, 0, 0)
			s.k.CreateTopic(t, s.n.In, 1)
			for _, o := range s.n.Outs() {
				s.k.CreateTopic(t, o, 1)
			}
			next := 0
			burst := func(n int) {
				t.Helper()
				for range n {
					produce(t, s.k, s.record(next))
					next++
				}
			}
			burst(50)
			g := faulttest.StartGate(t, s.bin, "first", s.vars())
			s.waitDrained()
			g.Term(t, time.Minute)
			committed := s.k.Committed(t, s.n.Group, s.n.In)

			// The gate is away: more records, then the oldest of them deleted.
			var logStart int64
			switch how {
			case "DeleteRecords":
				burst(100)
				o := kadm.Offsets{}
				o.Add(kadm.Offset{Topic: s.n.In, Partition: 0, At: committed + 60})
				res, err := s.k.Admin.DeleteRecords(t.Context(), o)
				if err == nil {
					err = res.Error()
				}
				if err != nil {
					t.Fatalf("DeleteRecords: %v", err)
				}
				logStart = committed + 60
				if got := s.start(t); got != logStart {
					t.Fatalf("log start %d, want %d", got, logStart)
				}
			case "retention.bytes":
				// As an operator shrinking the retention: segments roll at the first
				// record 200 ms after a segment's first, and every closed segment is
				// over the 1-byte retention, deleted at the broker's next retention
				// check (every second here). Set only now, so that nothing the first
				// gate was to read is deleted under it.
				v200, v1, vNone := "200", "1", "-1"
				res, err := s.k.Admin.AlterTopicConfigs(t.Context(), []kadm.AlterConfig{
					{Op: kadm.SetConfig, Name: "segment.ms", Value: &v200},
					{Op: kadm.SetConfig, Name: "retention.bytes", Value: &v1},
					{Op: kadm.SetConfig, Name: "retention.ms", Value: &vNone},
				}, s.n.In)
				if err := allOK(res, err, func(r kadm.AlterConfigsResponse) error { return r.Err }); err != nil {
					t.Fatalf("shrinking the input's retention: %v", err)
				}
				// The controller takes the change; the broker rolls and deletes by it once its
				// metadata has it (a segment rolls only on an append, and no record comes
				// after the bursts), which on a loaded machine can be a while later.
				faulttest.WaitFor(t, time.Minute, "the broker's metadata to hold the input's new segment.ms and retention.bytes", func() bool {
					rcs, err := s.k.Admin.DescribeTopicConfigs(t.Context(), s.n.In)
					if err != nil {
						return false
					}
					rc, err := rcs.On(s.n.In, nil)
					if err != nil || rc.Err != nil {
						return false
					}
					got := map[string]string{}
					for _, c := range rc.Configs {
						got[c.Key] = c.MaybeValue()
					}
					return got["segment.ms"] == v200 && got["retention.bytes"] == v1
				})
				for range 3 {
					time.Sleep(300 * time.Millisecond) // the next burst rolls a new segment
					burst(40)
				}
				faulttest.WaitFor(t, time.Minute, "retention to delete past the committed offset", func() bool {
					logStart = s.start(t)
					return logStart > committed
				})
			}
			// With retention.bytes, logStart is where the deletion had reached when first
			// seen past the committed offset; the broker may delete more at its next
			// check (a segment the last burst closed), hence "at least".
			want := logStart - committed // at least these are gone

			g = faulttest.StartGate(t, s.bin, "back", s.vars())
			s.waitDrained()
			// Every record is either on the outputs once or counted lost, never both:
			// the first gate's (below committed), and from there on those the gates
			// read before retention deleted them. With retention.bytes the broker goes
			// on deleting while the gate reads, so where the gap ends is the gate's
			// own finding, not a fixed log start.
			seen := map[int64]int{}
			for _, r := range s.k.ReadAll(t, nil, s.n.Outs()...) {
				id, _ := faulttest.Header(r, faulttest.IDHeader)
				n, err := strconv.ParseInt(id, 10, 64)
				if err != nil {
					t.Fatalf("output %s/%d/%d without an id", r.Topic, r.Partition, r.Offset)
				}
				seen[n]++
			}
			routed, missing := 0, int64(0)
			for id := int64(0); id < int64(next); id++ {
				switch {
				case id < committed && seen[id] != 1, seen[id] > 1:
					t.Errorf("record %d is on the outputs %d times, want once (committed %d)", id, seen[id], committed)
				case seen[id] == 0:
					missing++
				}
				routed += seen[id]
			}
			if missing < want {
				t.Errorf("%d records missing from the outputs, fewer than the %d deleted below the log start %d", missing, want, logStart)
			}
			var lost float64
			faulttest.WaitFor(t, time.Minute, fmt.Sprintf("gate_records_lost_total = the %d records on no output", missing), func() bool {
				_, m := g.Get(t, "/metrics")
				lost = metricSum(m, `gate_records_lost_total{cause="retention",partition="0",topic="`+s.n.In+`"}`)
				return int64(lost) == missing
			})
			if !strings.Contains(g.Logs(), `"msg":"input records lost: `) {
				t.Errorf("no error line for the lost records")
			}
			t.Logf("FIGURES real_kafka_retention how=%s produced=%d committed=%d log_start=%d lost_metric=%v routed=%d", how, next, committed, logStart, lost, routed)
			g.Term(t, time.Minute)
		})
	}
}

// start is the log start offset of the input's partition 0.
func (s *scenario) start(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, err := s.k.Admin.ListStartOffsets(ctx, s.n.In)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		t.Fatalf("listing the start offset of %s: %v", s.n.In, err)
	}
	o, _ := l.Lookup(s.n.In, 0)
	return o.Offset
}
