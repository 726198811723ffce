package consume

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReroutedToDeadLetterSaid: records an output topic refuses for good (here larger
// than its max.message.bytes) and the gate reroutes to the dead-letter topic are said,
// in a warning naming the topic and the broker's error, at most once a minute per topic
// and error, with the count since the last line. Before, only
// gate_records_rerouted_total moved: a topic refusing every record went unseen in the log.
func TestReroutedToDeadLetterSaid(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			const n = 4
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
			logs := &syncBuffer{}
			env.logs = logs
			prod := producer(t, env.cluster)
			v := "4096"
			setTopicConfig(t, env.cluster, "max.message.bytes", v, accTopic)
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "t")
				recs[id].Value, _ = json.Marshal(map[string]any{"team_id": "t", "seq": id, "pad": strings.Repeat("x", 8000)})
			}
			produceAll(t, prod, recs)
			g := env.start(t, "g")
			defer g.stop(t)
			waitCommitted(t, env.cluster, 1, 30*time.Second)
			var said []string
			for l := range strings.SplitSeq(logs.String(), "\n") {
				if strings.Contains(l, "dead-letter topic") && strings.Contains(l, "refuse") && strings.Contains(l, `"level":"WARN"`) {
					said = append(said, l)
				}
			}
			if len(said) != 1 {
				t.Fatalf("%d records rerouted, said %d times, want once a minute: %q", n, len(said), said)
			}
			for _, want := range []string{`"topic":"` + accTopic + `"`, "MESSAGE_TOO_LARGE", `"records":1`} {
				if !strings.Contains(said[0], want) {
					t.Errorf("the line lacks %s: %s", want, said[0])
				}
			}
		})
	}
}
