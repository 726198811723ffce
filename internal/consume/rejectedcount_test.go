package consume

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStrippedDeadLetterCountedOnce: a record its output topic refuses (too large) and
// the dead-letter topic refuses too, written there without its value, is one dead letter
// of reason rejected in gate_records_total, as one refused on its output topic alone is.
// Before, each dead letter built for it was counted: the stripped one twice, inflating
// the dead-letter share GateDeadLetterRateHigh reads.
func TestStrippedDeadLetterCountedOnce(t *testing.T) {
	t.Parallel()
	const n = 3
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	prod := producer(t, env.cluster)
	v := "4096"
	setTopicConfig(t, env.cluster, "max.message.bytes", v, accTopic, dlqTopic)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "t")
		recs[id].Value, _ = json.Marshal(map[string]any{"team_id": "t", "seq": id, "pad": strings.Repeat("x", 8000)})
	}
	produceAll(t, prod, recs)
	g := env.start(t, "g")
	defer g.stop(t)
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, 1, 30*time.Second)
	if got := len(out.recs[dlqTopic]); got != n {
		t.Fatalf("%d dead letters, want %d", got, n)
	}
	for _, r := range out.recs[dlqTopic] {
		if header(r, HeaderDropped) == "" {
			t.Fatalf("a dead letter with its value (%d bytes): want it stripped", len(r.Value))
		}
	}
	if got := recordsCounted(t, g.reg, "dead_letter", "rejected"); got != n {
		t.Errorf(`gate_records_total{route="dead_letter",reason="rejected"} = %v for %d records stripped, want %d`, got, n, n)
	}
}

// recordsCounted is gate_records_total's count of route and reason in reg.
func recordsCounted(t *testing.T, reg *prometheus.Registry, route, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gate_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
