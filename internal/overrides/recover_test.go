package overrides

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestRunSaysWhenRefreshesWorkAgain: the live overrides key overwritten by hand with a
// string (the operator's to fix) makes Run warn that it keeps the current overrides;
// once the hash is written back, with the same teams, refreshes work again and Run must
// say so. Before, it warned and then said nothing: the set read back equals the one in
// force, so not even "live overrides applied" told the operator the fix took.
func TestRunSaysWhenRefreshesWorkAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Interval: 20 * time.Millisecond}, lim, c, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, c, key, "t", 7, time.Now()); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	logs.wait(t, "first set applied", "live overrides applied")

	if err := c.Set(ctx, key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, "warning", "live overrides not refreshed")
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, c, key, "t", 7, time.Now()); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, "recovery line", "live overrides refreshed again")
	if got := lim.Threshold("t"); got != 7 {
		t.Errorf("threshold of t = %d, want 7", got)
	}
}

// TestRunSaysWhenRedisAnswersAgainWithoutAHash: a fleet without live overrides (no hash,
// the normal state) through a Redis outage. Run warns that it keeps the current
// overrides while Redis is down; once Redis answers again, with no hash as before, it
// must say that refreshes work again. Before, a missing hash did not end the failure: the
// warning was never followed by the recovery line, and the next hash set, days later,
// was logged as "refreshed again" after failing for days.
func TestRunSaysWhenRedisAnswersAgainWithoutAHash(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Interval: 20 * time.Millisecond, Timeout: 10 * time.Second}, lim, srv.Client(t), prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	<-r.FirstRead()
	srv.Stop(t)
	logs.wait(t, "warning", "live overrides not refreshed")
	srv.Restart(t) // empty, as before: no hash
	logs.wait(t, "recovery line", "live overrides refreshed again")
	if got := logs.lines(t, "live overrides hash is gone"); len(got) != 0 {
		t.Errorf("a hash never read reported gone: %v", got)
	}
}

// wait polls, up to 30 s, for a JSON log line whose msg starts with prefix (what it is,
// for the failure).
func (l *lockedBuffer) wait(t *testing.T, what, prefix string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(l.lines(t, prefix)) == 0 {
		if time.Now().After(deadline) {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no %s (a line starting %q) in 30s:\n%s", what, prefix, l.b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
