package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestRuleTopic: a rule whose own topic (action topic:NAME) is missing, on a broker that
// creates no topic by itself. At start the gate is not ready and names the topic, as for
// its own topics, and routes nothing; once the topic exists it routes, the rule's records
// to its topic. Deleted while the gate runs, the topic makes the gate not ready with the
// topic named, and holds up nothing: every other team's records are routed, and the
// rule's own go to the overflow topic, saying which topic they were for; created again,
// it takes them again. Before the topic was checked, the first record over the rule was
// retried without end and every partition stopped routing (issue "One way through the
// gate").
func TestRuleTopic(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{}, 1, 1)
	merges := s.n.In + "-merges"
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf(`rules:
  - name: merges
    key: json:team_id
    match: [{field: json:event, in: [$identify]}]
    limits: [1m:2]
    action: topic:%s
  - name: team
    key: json:team_id
    limits: [1m:1000]
`, merges)), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := s.vars()
	vars["GATE_RULES_FILE"] = rules
	delete(vars, "GATE_WINDOW") // each rule says its own
	delete(vars, "GATE_THRESHOLD")
	gt := faulttest.StartGate(t, s.bin, "ruletopic", vars)
	faulttest.WaitFor(t, time.Minute, "/readyz naming the missing rule topic", func() bool {
		code, body := gt.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+merges+`" does not exist`)
	})
	s.k.CreateTopic(t, merges, 1)
	waitReady(t, gt)

	var seq int
	send := func(team, event string, n int) {
		t.Helper()
		var recs []*kgo.Record
		for range n {
			seq++
			recs = append(recs, &kgo.Record{Topic: s.n.In, Value: []byte(fmt.Sprintf(`{"team_id":%q,"event":%q,"seq":%d}`, team, event, seq))})
		}
		produce(t, s.k, recs...)
	}
	// count waits until topics hold want records in all and returns them.
	count := func(want int, what string, topics ...string) []*kgo.Record {
		t.Helper()
		var out []*kgo.Record
		faulttest.WaitFor(t, 2*time.Minute, what, func() bool {
			ends := s.k.Ends(t, topics...)
			var n int64
			for _, tp := range topics {
				n += sum(ends[tp])
			}
			if n < int64(want) {
				return false
			}
			out = s.k.ReadAll(t, nil, topics...)
			return len(out) >= want
		})
		return out
	}
	send("t1", "$identify", 4) // 2 accepted, 2 over the merges rule: to its topic
	send("t2", "$pageview", 3)
	out := count(7, "the first 7 records routed", append(s.n.Outs(), merges)...)
	by := map[string]int{}
	for _, r := range out {
		by[r.Topic]++
	}
	if by[merges] != 2 || by[s.n.Acc] != 5 {
		t.Fatalf("with the rule topic there: %v, want 2 on %s and 5 accepted", by, merges)
	}

	// The topic is deleted while the gate runs.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.k.Admin.DeleteTopics(ctx, merges); err != nil {
		t.Fatalf("deleting %s: %v", merges, err)
	}
	faulttest.WaitFor(t, time.Minute, "the rule topic gone from the brokers' metadata", func() bool {
		m, err := s.k.Admin.Metadata(context.Background(), merges)
		if err != nil {
			return false
		}
		td, ok := m.Topics[merges]
		return !ok || td.Err != nil
	})
	send("t1", "$identify", 3) // all over the merges rule: its topic is gone
	send("t2", "$pageview", 3)
	send("t3", "$identify", 1)
	faulttest.WaitFor(t, 2*time.Minute, "/readyz naming the deleted rule topic", func() bool {
		code, body := gt.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `rule topic "`+merges+`"`)
	})
	// The rule topic is gone, with the 2 records it held: the gate's own topics hold the rest.
	out = count(12, "every record routed with the rule topic deleted", s.n.Outs()...)
	by = map[string]int{}
	for _, r := range out {
		v := string(r.Value)
		switch {
		case r.Topic == s.n.Ovf:
			var missing string
			for _, h := range r.Headers {
				if h.Key == "gate-rule-topic-missing" {
					missing = string(h.Value)
				}
			}
			if !strings.Contains(v, `"t1"`) || missing != merges {
				t.Errorf("on overflow: %s with gate-rule-topic-missing %q", v, missing)
			}
			by["overflow"]++
		case r.Topic == s.n.Acc:
			by["accepted"]++
		default:
			by[r.Topic]++
		}
	}
	// 5 + 3 (t2) + 1 (t3) accepted; t1's three over the rule on overflow.
	if by["accepted"] != 9 || by["overflow"] != 3 {
		t.Errorf("with the rule topic deleted: %v, want 9 accepted and 3 on overflow", by)
	}
	if logs := gt.Logs(); !strings.Contains(logs, "rule topic") || !strings.Contains(logs, merges) {
		t.Errorf("the log does not name the missing rule topic:\n%s", gt.Logs())
	}

	// Created again: the gate is ready again, and the rule's records go to the new topic
	// (the client forgets the deleted one's ID first).
	s.k.CreateTopic(t, merges, 1)
	waitReady(t, gt)
	send("t1", "$identify", 2)
	send("t2", "$pageview", 1)
	if out := count(2, "the rule's records on its topic created again", merges); len(out) != 2 {
		t.Errorf("on %s created again: %d records, want t1's 2", merges, len(out))
	}
	if out := count(13, "t2's record accepted", s.n.Outs()...); len(out) != 13 {
		t.Errorf("the gate's own topics hold %d records, want 13 (t2's accepted)", len(out))
	}
}
