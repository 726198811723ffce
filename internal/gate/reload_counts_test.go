package gate

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// A team over its limit and held stays so across a rules reload that leaves its rule
// unchanged (a comment added): the new generation's limiters start from what the old
// ones knew of the team, its hold and the fleet's count read last, not from nothing. They
// were built empty, and let 60 of the team's next 60 records through, until their first
// tick read Redis; with Redis down at the reload, for as long as it stayed down. What the
// old generation counted reaches Redis once: by its own tick, not the new one's too.
func TestRulesReloadKeepsHeldTeam(t *testing.T) {
	t.Parallel()
	for _, redisDown := range []bool{false, true} {
		name := "redis up"
		if redisDown {
			name = "redis down"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			path := filepath.Join(t.TempDir(), "rules.yaml")
			const team = "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n"
			writeRules(t, path, team)
			cfg := load(t, map[string]string{
				"GATE_KAFKA_BROKERS": "127.0.0.1:1",
				"GATE_REDIS_URLS":    srv.URL(),
				"GATE_RULES_FILE":    path,
			})
			g := startReloading(t, cfg, "reload-held")
			send := func(n int) map[string]int {
				topics := map[string]int{}
				for range n {
					var out kgo.Record
					switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
					topics[out.Topic]++
				}
				return topics
			}
			if got := send(220); got[cfg.AcceptedTopic] != 100 || got[cfg.OverflowTopic] != 120 {
				t.Fatalf("220 records of t1 under 100 a minute: %v", got)
			}
			// The tick writes the 220 and reads them back: the gate knows the fleet's count.
			waitFor(t, "t1's count read from Redis", func() bool {
				s, ok := g.CurrentRules()[0].Lims[0].Snapshot(time.Now(), "t1")
				return ok && !s.ReadAt.IsZero() && s.Estimate >= 200 && !s.HeldSince.IsZero()
			})
			if redisDown {
				srv.Stop(t)
			}
			first := g.gen.Load()
			writeRules(t, path, "# the team rule\n"+team)
			waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
			if got := send(60); got[cfg.AcceptedTopic] != 0 {
				t.Errorf("a held team at 220 of 100 after a comment-only reload: %v, want all 60 diverted", got)
			}
			if redisDown {
				// The new generation's ticks cannot read the team: it stays held on what
				// the gate knew.
				waitTicks(t, g.gen.Load(), 2)
				if got := send(20); got[cfg.AcceptedTopic] != 0 {
					t.Errorf("two ticks later, Redis still down: %v, want all 20 diverted", got)
				}
				return
			}
			ctx := context.Background()
			rdb := srv.Client(t)
			sum := func() int {
				keys, err := rdb.Keys(ctx, "gate:rule:team:t1:*").Result()
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, k := range keys {
					if v, err := rdb.Get(ctx, k).Int(); err == nil {
						n += v
					}
				}
				return n
			}
			waitFor(t, "every record counted in Redis", func() bool { return sum() >= 280 })
			waitRetired(t, first, g.gen.Load()) // the old generation's final flush done, and two of the new one's ticks
			if n := sum(); n != 280 {
				t.Errorf("t1's counts in Redis after the reload: %d, want the 280 records counted once", n)
			}
		})
	}
}
