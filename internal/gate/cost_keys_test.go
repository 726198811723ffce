package gate

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// A gate without rules restarted with GATE_COST changed (bytes to events, as a rollout
// does) starts its counts afresh: it read the bytes the old gate had counted under the
// same keys as events, so every team was far over its limit, diverted and held. A bytes
// gate's keys, its counters and holds, are under {prefix}/bytes, as a bytes rule's are
// under /bytes; an events gate's are {prefix} as ever.
func TestFilelessCostChangeStartsCountsAfresh(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	env := map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_COST":          "bytes",
		"GATE_THRESHOLD":     "3000",
	}
	// run builds a gate of env and runs its tick until stop, which returns after the
	// tick's final flush.
	run := func(writer string) (g *Gate, stop func()) {
		g, err := New(load(t, env), log, Options{Writer: writer})
		if err != nil {
			t.Fatal(err)
		}
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); g.RunTick(tctx) }()
		stopped := false
		stop = func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
				g.Consumer.Close()
				g.CloseRedis(log)
			}
		}
		t.Cleanup(stop)
		return g, stop
	}
	send := func(g *Gate, n int) map[string]int {
		topics := map[string]int{}
		for range n {
			var out kgo.Record
			g.Router.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1","distinct_id":"u1"}`)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	cfg := load(t, env)
	bytesGate, stop := run("cost-bytes")
	if got := send(bytesGate, 100); got[cfg.OverflowTopic] == 0 { // 3,500 bytes
		t.Fatalf("3,500 bytes under 3,000 a minute: %v, want some diverted", got)
	}
	waitFor(t, "the bytes gate to hold t1", func() bool {
		s, ok := bytesGate.Lim.Snapshot(time.Now(), "t1")
		return ok && !s.HeldSince.IsZero()
	})
	stop() // its final flush writes the 3,500 bytes and the hold
	rdb := srv.Client(t)
	keys, err := rdb.Keys(ctx, "gate*:t1:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if v, err := rdb.Get(ctx, k).Int(); err == nil {
			n += v
		}
		if !strings.HasPrefix(k, "gate/bytes:t1:") {
			t.Errorf("the bytes gate's key %s, want it under gate/bytes", k)
		}
	}
	if n < 3500 {
		t.Fatalf("the bytes gate's counts in Redis: %d in %v, want 3,500", n, keys)
	}
	if !slices.Contains(keys, "gate/bytes:t1:hold") {
		t.Errorf("the bytes gate's keys in Redis: %v, want its hold gate/bytes:t1:hold", keys)
	}

	// The gate restarted with GATE_COST=events and a threshold of 1,000 events a minute.
	delete(env, "GATE_COST")
	env["GATE_THRESHOLD"] = "1000"
	eventsGate, _ := run("cost-events")
	send(eventsGate, 20) // at its floor (1% of 1,000) or more: read at the next sweep
	waitFor(t, "the events gate to read t1 from Redis", func() bool {
		s, ok := eventsGate.Lim.Snapshot(time.Now(), "t1")
		return ok && !s.ReadAt.IsZero()
	})
	if got := send(eventsGate, 100); got[cfg.AcceptedTopic] != 100 {
		s, _ := eventsGate.Lim.Snapshot(time.Now(), "t1")
		t.Errorf("120 events under 1,000 a minute, after 3,500 bytes counted with GATE_COST=bytes: %v (level %.0f, held since %v); want all accepted", got, s.Level, s.HeldSince)
	}
	// An events gate's keys are {prefix}:{team}:{epoch}, as ever.
	waitFor(t, "the events gate's counts in Redis", func() bool {
		keys, err := rdb.Keys(ctx, "gate:t1:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys) > 0
	})
}
