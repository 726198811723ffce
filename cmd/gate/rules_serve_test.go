package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
)

// A served gate with a rules file, in both delivery modes: a runaway user is diverted by
// the user rule (gate-overflow-rule: team-user) while its team's other users are
// accepted, merge events past their limit go to their rule's topic, a tagging rule's
// records stay on accepted with gate-tag, a record without a team is dead-lettered
// naming the rule, and every record comes out once (exactly once: read committed).
func TestServeRules(t *testing.T) {
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			kc, kenv := kafkaEnv(t)
			if err := kc.CreateTopic("events_merges", 1, nil); err != nil {
				t.Fatal(err) // not in the default topics
			}
			rules := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(rules, []byte(`rules:
  - name: team-user
    key: json:team_id+distinct_id
    missing: skip
    limits: [1m:5]
  - name: merges
    key: json:team_id
    match: [{field: json:event, in: [$identify]}]
    limits: [1m:2]
    action: topic:events_merges
  - name: big-events
    key: json:team_id
    match: [{field: json:event, in: [$big]}]
    limits: [1m:1]
    action: tag
  - name: team
    key: json:team_id
    limits: [1m:1000]
`), 0o644); err != nil {
				t.Fatal(err)
			}
			g := startGate(t, withEnv(kenv, map[string]string{
				"GATE_REDIS_URLS":    rs.URL(),
				"GATE_HTTP_ADDR":     "127.0.0.1:0",
				"GATE_TICK_INTERVAL": "50ms",
				"GATE_RULES_FILE":    rules,
				"GATE_DELIVERY":      delivery,
			}))
			prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			var in []*kgo.Record
			add := func(n int, user, event string) {
				for range n {
					v := fmt.Sprintf(`{"team_id":"t1","distinct_id":%q,"event":%q}`, user, event)
					if user == "" {
						v = fmt.Sprintf(`{"team_id":"t1","event":%q}`, event)
					}
					in = append(in, &kgo.Record{Topic: "events", Key: []byte("t1"), Value: []byte(v)})
				}
			}
			add(12, "runaway", "$pageview") // 5 accepted, 7 to overflow
			for i := range 4 {
				add(3, fmt.Sprintf("u%d", i), "$pageview") // all accepted
			}
			add(4, "", "$identify")                                                               // 2 accepted, 2 to events_merges
			add(2, "", "$big")                                                                    // 1 accepted, 1 accepted with gate-tag
			in = append(in, &kgo.Record{Topic: "events", Key: []byte("t1"), Value: []byte(`{}`)}) // no team: dead letter
			if err := prod.ProduceSync(t.Context(), in...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cons, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeTopics("events_accepted", "events_overflow", "events_dead_letter", "events_merges"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			var out []*kgo.Record
			waitFor(t, 30*time.Second, fmt.Sprintf("%d output records", len(in)), func() bool {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
				return len(out) >= len(in)
			})
			hdr := func(r *kgo.Record, k string) string {
				var vs []string
				for _, h := range r.Headers {
					if h.Key == k {
						vs = append(vs, string(h.Value))
					}
				}
				return strings.Join(vs, ",")
			}
			got := map[string]int{}
			for _, r := range out {
				v := string(r.Value)
				switch {
				case strings.Contains(v, "runaway"):
					got["runaway "+r.Topic+" "+hdr(r, "gate-overflow-rule")]++
				case strings.Contains(v, `"u`):
					got["users "+r.Topic]++
				case strings.Contains(v, "$identify"):
					got["merges "+r.Topic+" "+hdr(r, "gate-overflow-rule")]++
				case strings.Contains(v, "$big"):
					got["big "+r.Topic+" "+hdr(r, "gate-tag")]++
				default:
					got["bad "+r.Topic+" "+hdr(r, "gate-error")+" "+strings.SplitN(hdr(r, "gate-error-detail"), ":", 2)[0]]++
				}
			}
			want := map[string]int{
				"runaway events_accepted ": 5, "runaway events_overflow team-user": 7,
				"users events_accepted":   12,
				"merges events_accepted ": 2, "merges events_merges merges": 2,
				"big events_accepted ": 1, "big events_accepted big-events": 1,
				"bad events_dead_letter field_missing rule team": 1,
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("outputs (%d records for %d):\n got %v\nwant %v", len(out), len(in), got, want)
			}
			if err := g.stop(t); err != nil {
				t.Fatalf("run: %v\n%s", err, g.stderr)
			}
			if want := `"msg":"rules in use","generation":1,"file":"` + rules + `","rules":["team-user","merges","big-events","team"],"key_prefixes":["gate:rule:team-user",`; !strings.Contains(g.stderr.String(), want) {
				t.Errorf("logs lack %s:\n%s", want, g.stderr)
			}
		})
	}
}
