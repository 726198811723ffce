package gate

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// syncBuffer is a log destination the test reads while the gate writes to it.
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

// A rules reload while Redis is down loses none of the old rule set's counts: what its
// tick could not write (the records it counted during the outage, and the batches Redis
// confirmed before it, which a Redis that comes back empty has lost) is written once
// Redis answers again, under the old tick's own writer, so each record is counted once
// fleet-wide. The old tick's final flush failed and its counts were dropped: after the
// reload a team could exceed its limit by what the gate routed during the outage.
func TestRulesReloadWithRedisDownKeepsUnwrittenCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n"
	writeRules(t, path, team)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	g, logs := startReloadingLogged(t, cfg, "reload-outage")
	ctx := context.Background()

	send := func(n int) {
		for range n {
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
			if out.Topic != cfg.AcceptedTopic {
				t.Fatalf("a record of t1 under its limit went to %q", out.Topic)
			}
		}
	}
	rdb := srv.Client(t)
	sum := func() int {
		keys, err := rdb.Keys(ctx, "gate:rule:team:t1:*").Result()
		if err != nil {
			return -1 // Redis down
		}
		n := 0
		for _, k := range keys {
			if v, err := rdb.Get(ctx, k).Int(); err == nil {
				n += v
			}
		}
		return n
	}

	send(40)
	waitFor(t, "the first 40 records counted in Redis", func() bool { return sum() == 40 })
	srv.Stop(t)
	send(50) // counted by the first rule set's limiters, never written by its tick
	first := g.gen.Load()
	writeRules(t, path, "# the team rule\n"+team)
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	send(30) // the second rule set's
	waitFor(t, "the first rule set's tick stopped", func() bool {
		return strings.Contains(logs.String(), "final flush of pending counts incomplete")
	})
	srv.Restart(t) // empty: the first 40 are gone too, and kept by the tick that wrote them

	deadline := time.Now().Add(30 * time.Second)
	for n := sum(); n != 120; n = sum() {
		if time.Now().After(deadline) {
			t.Fatalf("t1's count in Redis 30s after it came back: %d, want the 120 records routed", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Nothing is left to write, by either rule set's tick: a batch sent twice under two
	// writers would have shown by now.
	waitFor(t, "the first rule set's counts all written", func() bool {
		return strings.Contains(logs.String(), "retired rules' counts written")
	})
	waitFor(t, "nothing pending", func() bool { return gaugeValue(t, g, "gate_limiter_pending_writes") == 0 })
	if n := sum(); n != 120 {
		t.Errorf("t1's count in Redis once every tick wrote its counts: %d, want 120", n)
	}
}
