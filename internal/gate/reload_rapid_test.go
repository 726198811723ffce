package gate

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// Records routed without pause through reloads in quick succession, the last one a
// moment before the gate stops, are each counted in Redis once: every retired
// generation's tick and the last one's make their final flush, and RunTick returns
// within the flush's bound.
func TestRulesRapidReloadsThenStopCountOnce(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	text := func(n int) string {
		return fmt.Sprintf("# edit %d\nrules:\n  - {name: team, key: json:team_id, limits: [1h:%d]}\n", n, 1000000+n)
	}
	writeRules(t, path, text(0))
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	g, err := New(cfg, slog.New(slog.DiscardHandler), Options{Writer: "reload-rapid", RulesReload: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Consumer.Close(); g.CloseRedis(slog.New(slog.DiscardHandler)) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.RunTick(ctx) }()

	var routed atomic.Int64
	stopRouting := make(chan struct{})
	routing := make(chan struct{})
	go func() {
		defer close(routing)
		for {
			select {
			case <-stopRouting:
				return
			default:
			}
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
			if out.Topic != cfg.AcceptedTopic {
				t.Errorf("record sent to %s", out.Topic)
			}
			routed.Add(1)
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for i := 1; i <= 5; i++ {
		writeRules(t, path, text(i))
		waitFor(t, fmt.Sprintf("generation %d", i+1), func() bool { return g.gen.Load().n == i+1 })
	}
	close(stopRouting)
	<-routing
	stopAt := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(2 * g.gen.Load().ticker.Config().FlushTimeout):
		t.Fatalf("RunTick still running %v after the gate began to stop", time.Since(stopAt))
	}
	rdb := srv.Client(t)
	keys, err := rdb.Keys(context.Background(), "gate:rule:team:t1:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, k := range keys {
		if v, err := rdb.Get(context.Background(), k).Int64(); err == nil {
			n += v
		}
	}
	if want := routed.Load(); n != want {
		t.Errorf("t1's counts in Redis: %d, want the %d records routed, each counted once (keys %v)", n, want, keys)
	}
}
