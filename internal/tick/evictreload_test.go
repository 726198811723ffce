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

// TestEvictionsSeenAcrossARulesReload: a rules reload's new tick watches Redis's evictions
// from where the gate's earlier tick left off (Config.Evictions): keys Redis evicts after
// the reload are counted in the new tick's gate_redis_evicted_keys_total and warned of at
// its next minute's look. Each tick had a watch of its own, whose first look, a minute
// after the reload, only noted what Redis had evicted so far: the keys evicted in the
// minute or two about every reload were never counted nor warned of, a policy changed to
// an evicting one then never said, and a file edited every minute or so watched nothing.
func TestEvictionsSeenAcrossARulesReload(t *testing.T) {
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
	if err := c.ConfigSet(ctx, "maxmemory", strconv.Itoa(used+1<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	wall := clock.NewFake(time.Now())
	shared := NewEvictions()
	var logs faulttest.Buffer
	// start runs a tick of its own limiter, registry and writer on Redis, as a rule set's.
	start := func(writer string) (*Ticker, *prometheus.Registry, chan struct{}, func()) {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		tk, err := New(l, []redis.UniversalClient{c}, Config{KeyPrefix: "evict", Writer: writer, Evictions: shared}, reg, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		tk.clockCheck.wall = wall
		starts := make(chan struct{}, 1000)
		tk.onPhase = func(part int, _ time.Time, ended bool) {
			if part == partWrites && !ended {
				starts <- struct{}{}
			}
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tk.Run(runCtx); close(done) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return tk, reg, starts, stop
	}
	ticks := func(starts chan struct{}, n int) {
		for range n {
			select {
			case <-starts:
			case <-time.After(30 * time.Second):
				t.Fatal("no tick started in 30 s")
			}
		}
	}
	old, _, oldStarts, stopOld := start("evict-a")
	ticks(oldStarts, 2) // the watch starts its minute
	wall.Advance(time.Minute)
	ticks(oldStarts, 2) // the first look: noeviction, none evicted

	// A reload: the old tick retired, the new one started; the old stops a tick later.
	old.Retire()
	_, reg, newStarts, _ := start("evict-a-r2")
	ticks(newStarts, 2)
	stopOld()

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
	wall.Advance(time.Minute) // the next minute's errands, the new tick's
	ticks(newStarts, 3)

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
			evicted = m.GetCounter().GetValue()
		}
	}
	if evicted <= 0 {
		t.Errorf("the new tick's gate_redis_evicted_keys_total = %v a minute after Redis evicted keys, want > 0", evicted)
	}
	var policyWarned, evictionWarned bool
	for line := range strings.Lines(logs.String()) {
		policyWarned = policyWarned || strings.Contains(line, "redis may evict the gate's keys")
		evictionWarned = evictionWarned || strings.Contains(line, "redis evicted keys")
	}
	if !policyWarned || !evictionWarned {
		t.Errorf("warned of the policy change: %v, of the evictions: %v; want both. Logs:\n%s", policyWarned, evictionWarned, logs.String())
	}
}
