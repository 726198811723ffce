package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestStartLatestKeptOnApacheKafka: a new group with GATE_KAFKA_START_OFFSET=latest
// whose first gate leaves before it read anything keeps where the group started: the
// next gate routes every record written after the first one's assignment, and none
// written before. The start is committed in onAssigned, under the assignment's
// generation (classic) or member epoch (KIP-848), which is what a real broker must
// accept: at-least-once on the one protocol, exactly-once (the last stable offset) on
// the other.
func TestStartLatestKeptOnApacheKafka(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ protocol, delivery string }{
		{"classic", "at-least-once"},
		{"consumer", "exactly-once"},
	} {
		t.Run(tc.protocol+"/"+tc.delivery, func(t *testing.T) {
			t.Parallel()
			const before, after = 40, 40
			s := newScenario(t, kafkaOpts{}, 2, 1)
			var old, recs []*kgo.Record
			for id := range before {
				old = append(old, s.record(id))
			}
			for id := before; id < before+after; id++ {
				recs = append(recs, s.record(id))
			}
			produce(t, s.k, old...)
			kv := []string{"GATE_KAFKA_GROUP_PROTOCOL", tc.protocol, "GATE_KAFKA_START_OFFSET", "latest"}

			a := s.startGate("a", tc.delivery, kv...)
			a.WaitLog(t, 2*time.Minute, "kafka: start committed at the end of partitions the group has no offset for (GATE_KAFKA_START_OFFSET=latest)")
			waitReady(t, a)
			a.Term(t, time.Minute) // assigned both partitions, read nothing of them
			produce(t, s.k, recs...)
			b := s.startGate("b", tc.delivery, kv...)
			var opts []kgo.Opt
			if tc.delivery == "exactly-once" {
				opts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
			}
			seen := map[int]int{}
			faulttest.WaitFor(t, 2*time.Minute, "gate b to route the records written after a's assignment", func() bool {
				clear(seen)
				for _, r := range s.k.ReadAll(t, opts, s.n.Outs()...) {
					for _, h := range r.Headers {
						if h.Key == faulttest.IDHeader {
							id, _ := strconv.Atoi(string(h.Value))
							seen[id]++
						}
					}
				}
				for id := before; id < before+after; id++ {
					if seen[id] == 0 {
						return false
					}
				}
				return true
			})
			b.Term(t, time.Minute)
			for id, n := range seen {
				switch {
				case id < before:
					t.Errorf("record %d, written before the group joined, was routed", id)
				case n > 1 && tc.delivery == "exactly-once":
					t.Errorf("record %d routed %d times, exactly-once", id, n)
				}
			}
		})
	}
}
