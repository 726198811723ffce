package gate

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// A rule whose limit is changed by a reload (a threshold raised or lowered) keeps its
// counters in Redis, and a team over the new limit is limited from its first record
// under the new rules: the keys the old limiter had near or over its limit are read
// before the new rules route (primeReload). Before, every key was first contact to the
// new limiter, admitted by this gate's own count until it reached the sync floor and a
// tick read it: 10 of the whale's 10 records after the edit went to accepted.
func TestRulesReloadChangedLimitReadsPressingKeysFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to int
	}{
		{"raised", 100, 200},   // 300 sent: over both
		{"lowered", 1000, 200}, // 300 sent: under the old, over the new
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			path := filepath.Join(t.TempDir(), "rules.yaml")
			rule := func(thr int) string {
				return fmt.Sprintf("rules:\n  - {name: team, key: json:team_id, limits: [1m:%d]}\n", thr)
			}
			writeRules(t, path, rule(tc.from))
			cfg := load(t, map[string]string{
				"GATE_KAFKA_BROKERS": "127.0.0.1:1",
				"GATE_REDIS_URLS":    srv.URL(),
				"GATE_RULES_FILE":    path,
			})
			g := startReloading(t, cfg, "reload-prime")
			send := func(n int) map[string]int {
				topics := map[string]int{}
				for range n {
					var out kgo.Record
					switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"whale"}`)}, &route.Scratch{}, &out)
					topics[out.Topic]++
				}
				return topics
			}
			send(300)
			first := g.gen.Load()
			waitTicks(t, first, 2) // the 300 written to Redis
			writeRules(t, path, rule(tc.to))
			waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
			if got := send(10); got[cfg.AcceptedTopic] != 0 {
				t.Errorf("the whale's first records under the new limit of %d (300 in Redis): %v, want none accepted", tc.to, got)
			}
		})
	}
}
