package tick

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
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
	srv, c := nearMaxmemory(t)
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
	ticks := func(starts chan struct{}, n int) { waitTicks(t, starts, n) }
	old, _, oldStarts, stopOld := start("evict-a")
	ticks(oldStarts, 2) // the watch starts its minute
	wall.Advance(time.Minute)
	ticks(oldStarts, 2) // the first look: noeviction, none evicted

	// A reload: the old tick retired, the new one started; the old stops a tick later.
	old.Retire()
	_, reg, newStarts, _ := start("evict-a-r2")
	ticks(newStarts, 2)
	stopOld()

	evictSome(t, srv, c)      // the policy changed, and Redis filled past its maxmemory
	wall.Advance(time.Minute) // the next minute's errands, the new tick's
	ticks(newStarts, 3)

	if evicted := evictedKeys(t, reg); evicted <= 0 {
		t.Errorf("the new tick's gate_redis_evicted_keys_total = %v a minute after Redis evicted keys, want > 0", evicted)
	}
	if policy, evictions := warnedOfEvictions(logs.String()); !policy || !evictions {
		t.Errorf("warned of the policy change: %v, of the evictions: %v; want both. Logs:\n%s", policy, evictions, logs.String())
	}
}
