package tick

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestTickReportsEvictions: a Redis whose maxmemory-policy is changed to an evicting one
// after the gate started (CONFIG SET), and which then evicts keys, is seen by the tick's
// minute errands: gate_redis_evicted_keys_total counts the keys evicted since its first
// look, and a warning names the policy change and the evictions (Run's errands, the wall
// clock they are paced by a fake one). Only the start-up check
// looked at the policy, once: a running gate whose counters Redis evicted (its teams let
// past their limits) said nothing, in no metric and no log.
func TestTickReportsEvictions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Under noeviction at the first look: what the start-up check saw.
	srv, c := nearMaxmemory(t)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var logs faulttest.Buffer
	tk, err := New(l, []redis.UniversalClient{c}, Config{KeyPrefix: "evict"}, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	wall := clock.NewFake(time.Now())
	tk.clockCheck.wall = wall
	starts := make(chan struct{}, 1000)
	tk.onPhase = func(part int, _ time.Time, ended bool) {
		if part == partWrites && !ended {
			starts <- struct{}{}
		}
	}
	ticks := func(n int) { waitTicks(t, starts, n) }
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { tk.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	ticks(2) // the first tick's errands: the watch starts its minute
	wall.Advance(time.Minute)
	ticks(2) // the first look

	evictSome(t, srv, c)      // the policy changed, and Redis filled past its maxmemory
	wall.Advance(time.Minute) // the next minute's errands
	ticks(3)

	if evicted := evictedKeys(t, reg); evicted <= 0 {
		t.Errorf("gate_redis_evicted_keys_total{redis_instance=\"0\"} = %v after Redis evicted keys, want > 0 (-1: no such series)", evicted)
	}
	if policy, evictions := warnedOfEvictions(logs.String()); !policy || !evictions {
		t.Errorf("warned of the policy change: %v, of the evictions: %v; want both. Logs:\n%s", policy, evictions, logs.String())
	}
}

// nearMaxmemory starts a redis-server whose maxmemory is 1 MiB above what it uses, under
// noeviction, and a client of it.
func nearMaxmemory(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	used := usedMemory(t, c)
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// evictSome changes nearMaxmemory's server to an evicting policy, then has another client
// fill it 4 MB past its maxmemory, failing t unless Redis evicted keys.
func evictSome(t *testing.T, srv *redistest.Server, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	other := srv.Client(t)
	val := strings.Repeat("x", 1024)
	for b := range 8 {
		pipe := other.Pipeline()
		for i := range 500 {
			pipe.Set(ctx, fmt.Sprintf("filler:%d:%d", b, i), val, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(infoValue(stats, "evicted_keys")); n == 0 {
		t.Fatalf("redis evicted no key after 4 MB over a maxmemory 1 MB above its use")
	}
}

// waitTicks waits for n ticks to start (a tick's onPhase sending on starts as its writes
// begin): the errands of the n-1 before them are done.
func waitTicks(t *testing.T, starts chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-starts:
		case <-time.After(30 * time.Second):
			t.Fatal("no tick started in 30 s")
		}
	}
}

// evictedKeys is reg's gate_redis_evicted_keys_total of Redis instance 0, -1 when there is
// no such series.
func evictedKeys(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gate_redis_evicted_keys_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "redis_instance" && lp.GetValue() == "0" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// warnedOfEvictions reports whether logs hold the tick's warnings of a policy changed to
// allkeys-lru and of keys evicted.
func warnedOfEvictions(logs string) (policy, evictions bool) {
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, "level=WARN") {
			continue
		}
		policy = policy || strings.Contains(line, "redis may evict the gate's keys") && strings.Contains(line, "maxmemory_policy=allkeys-lru")
		evictions = evictions || strings.Contains(line, "redis evicted keys")
	}
	return policy, evictions
}
