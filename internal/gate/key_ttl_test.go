package gate

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tick"
)

// With a rules file a rule's counters expire after GATE_REDIS_KEY_TTL raised to 2 × the
// rule's window, as the variable says, not after 2 × GATE_WINDOW's default (60s), which
// no rule uses: a 10s rule's keys lived 150s, not 50s, and a GATE_REDIS_KEY_TTL under
// 120s was raised "to 2 x GATE_WINDOW".
func TestRulesKeyTTLFollowsTheRulesWindow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := rulesConfig(t, srv.URL(), "rules:\n  - {name: team, key: json:team_id, limits: [10s:100]}\n")
	if ttl, clamped := cfg.KeyTTL(); clamped {
		t.Errorf("KeyTTL() = %s, clamped, with GATE_REDIS_KEY_TTL unset", ttl)
	}
	g := startReloading(t, cfg, "key-ttl")
	var out kgo.Record
	switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
	ctx := context.Background()
	rdb := srv.Client(t)
	var keys []string
	waitFor(t, "t1's counter written", func() bool {
		var err error
		keys, err = rdb.Keys(ctx, "gate:rule:team:t1:*").Result()
		return err == nil && len(keys) > 0
	})
	ttl, err := rdb.PTTL(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*10*time.Second + tick.KeyTTLMargin; ttl <= 0 || ttl > want {
		t.Errorf("%s expires in %s, want at most %s (2 × the rule's 10s window, plus the margin)", keys[0], ttl, want)
	}
}

// A rules file whose first rule counts by the day and whose second by 10 s: the second
// rule's counters expire after 2 × 10 s (plus the margin), not after the first rule's 2
// days. Before, the tick raised every limit's expiry to 2 × its first limit's window: a
// per-user rule listed after a daily team rule kept each user's keys 48 hours.
func TestRulesKeyTTLIsEachRulesOwn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := rulesConfig(t, srv.URL(), "rules:\n  - {name: daily, key: json:team_id, limits: [24h:1000000]}\n  - {name: user, key: json:team_id+distinct_id, limits: [10s:100]}\n")
	// One record is a cold team's under the daily limit, written at the limiter's first
	// sweep, or else after its window ends, tomorrow; with cold teams written once a
	// second (GATE_COLD_WRITE_INTERVAL), it is written within a second whenever it comes.
	cfg.ColdWriteInterval = time.Second
	g := startReloading(t, cfg, "key-ttl-each")
	var out kgo.Record
	switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1","distinct_id":"u1"}`)}, &route.Scratch{}, &out)
	ctx := context.Background()
	rdb := srv.Client(t)
	ttlOf := func(pattern string) time.Duration {
		var keys []string
		waitFor(t, pattern+" written", func() bool {
			var err error
			keys, err = rdb.Keys(ctx, pattern).Result()
			return err == nil && len(keys) > 0
		})
		ttl, err := rdb.PTTL(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ttl
	}
	if ttl, want := ttlOf("gate:rule:user:t1:u1:*"), 2*10*time.Second+tick.KeyTTLMargin; ttl <= 0 || ttl > want {
		t.Errorf("the 10s rule's counter expires in %s, want at most %s (2 × its own window, plus the margin)", ttl, want)
	}
	if ttl, want := ttlOf("gate:rule:daily:t1:*"), 2*24*time.Hour+tick.KeyTTLMargin; ttl <= 2*24*time.Hour || ttl > want {
		t.Errorf("the daily rule's counter expires in %s, want within (48h, %s]", ttl, want)
	}
}
