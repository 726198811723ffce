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
	srv := redistest.Start(t)
	c := srv.Client(t)
	mem, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.Atoi(infoValue(mem, "used_memory"))
	if err != nil {
		t.Fatal(err)
	}
	// Under noeviction at the first look: what the start-up check saw.
	if err := c.ConfigSet(ctx, "maxmemory", strconv.Itoa(used+1<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
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
	// ticks waits for n ticks to start: the errands of the n-1 before them are done.
	ticks := func(n int) {
		for range n {
			select {
			case <-starts:
			case <-time.After(30 * time.Second):
				t.Fatal("no tick started in 30 s")
			}
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { tk.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	ticks(2) // the first tick's errands: the watch starts its minute
	wall.Advance(time.Minute)
	ticks(2) // the first look

	// Then the policy is changed, and another client fills Redis past its maxmemory.
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
	wall.Advance(time.Minute) // the next minute's errands
	ticks(3)

	evicted := -1.0
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
					evicted = m.GetCounter().GetValue()
				}
			}
		}
	}
	if evicted <= 0 {
		t.Errorf("gate_redis_evicted_keys_total{redis_instance=\"0\"} = %v after Redis evicted keys, want > 0 (-1: no such series)", evicted)
	}
	var policyWarned, evictionWarned bool
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, "level=WARN") {
			continue
		}
		policyWarned = policyWarned || strings.Contains(line, "redis may evict the gate's keys") && strings.Contains(line, "maxmemory_policy=allkeys-lru")
		evictionWarned = evictionWarned || strings.Contains(line, "redis evicted keys")
	}
	if !policyWarned || !evictionWarned {
		t.Errorf("warned of the policy change: %v, of the evictions: %v; want both. Logs:\n%s", policyWarned, evictionWarned, logs.String())
	}
}
