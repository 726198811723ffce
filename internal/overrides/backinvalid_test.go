package overrides

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// A lost hash written back with an entry no gate can use, or over the maximum, is back:
// gate_overrides_hash_missing clears (the refresh still fails, cause invalid or
// too_large, and keeps the last set read), as the package promises ("both clear when
// the hash is back"). It stayed 1, GateOverridesHashMissing firing and the runbook's
// check ("returns to 0") failing for a hash that was there, its real fault, the entry,
// said only by a refresh error.
func TestLostHashBackButUnusableClearsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs lockedBuffer
	lim, c, r := readXOnce(t, Config{Key: key, MaxEntries: 2}, &logs)
	want := map[string]int64{"x": 5}
	for _, tt := range []struct {
		name   string
		fields []any
		cause  string
	}{
		{"an invalid entry", []any{"x", 6, "bad", "lots", MarkerField, "t1"}, CauseInvalid},
		{"over the maximum", []any{"x", 6, "y", 7, "z", 8, MarkerField, "t2"}, CauseTooLarge},
	} {
		if err := c.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
			t.Fatalf("%s: refresh of the lost hash: %v", tt.name, err)
		}
		if got := testutil.ToFloat64(r.hashMissing); got != 1 {
			t.Fatalf("%s: gate_overrides_hash_missing = %v with the hash lost, want 1", tt.name, got)
		}
		if err := c.HSet(ctx, key, tt.fields...).Err(); err != nil {
			t.Fatal(err)
		}
		before := testutil.ToFloat64(r.errs.WithLabelValues(tt.cause))
		if err := r.Refresh(ctx); err == nil {
			t.Fatalf("%s: refresh succeeded", tt.name)
		}
		if got := testutil.ToFloat64(r.errs.WithLabelValues(tt.cause)); got != before+1 {
			t.Errorf("%s: refresh errors of cause %s: %v, want %v", tt.name, tt.cause, got, before+1)
		}
		if got := testutil.ToFloat64(r.hashMissing); got != 0 {
			t.Errorf("%s: gate_overrides_hash_missing = %v with the hash back, want 0", tt.name, got)
		}
		if got := lim.Overrides(); !maps.Equal(got, want) {
			t.Errorf("%s: overrides %v, want the last set read, %v", tt.name, got, want)
		}
	}
	if got := logs.lines(t, "live overrides hash is back"); len(got) != 2 {
		t.Errorf("%d lines that the hash is back, want 2: %v", len(got), got)
	}
}

// A lost hash written back whose merged set the limiter refuses (apply's error, after
// Parse took it) is back too: gate_overrides_hash_missing clears, as for the other
// refusals of a hash that is there. No hash reaches it today (Parse and the limiter take
// the same range, GATE_OVERRIDES is checked at start), so the base set is made one the
// limiter refuses, after the first read.
func TestLostHashBackButRefusedByTheLimiterClearsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs lockedBuffer
	lim, c, r := readXOnce(t, Config{Key: key}, &logs)
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatalf("refresh of the lost hash: %v", err)
	}
	if got := testutil.ToFloat64(r.hashMissing); got != 1 {
		t.Fatalf("gate_overrides_hash_missing = %v with the hash lost, want 1", got)
	}
	r.cfg.Base = map[string]int64{"b": 0} // no threshold the limiter takes
	if err := setOverride(ctx, c, key, "x", 6, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(r.errs.WithLabelValues(CauseInvalid))
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("refresh of a set the limiter refuses succeeded")
	}
	if got := testutil.ToFloat64(r.errs.WithLabelValues(CauseInvalid)); got != before+1 {
		t.Errorf("refresh errors of cause invalid: %v, want %v", got, before+1)
	}
	if got := testutil.ToFloat64(r.hashMissing); got != 0 {
		t.Errorf("gate_overrides_hash_missing = %v with the hash back, refused by the limiter, want 0", got)
	}
	if got, want := lim.Overrides(), map[string]int64{"x": 5}; !maps.Equal(got, want) {
		t.Errorf("overrides %v, want the last set read, %v", got, want)
	}
	if got := logs.lines(t, "live overrides hash is back, but cannot be used"); len(got) != 1 {
		t.Errorf("%d lines that the hash is back but cannot be used, want 1: %v", len(got), got)
	}
}

// readXOnce starts a redis-server whose hash at cfg.Key holds x = 5, and a refresher of
// cfg, logging to logs, into a limiter of 1,000 that has read it once.
func readXOnce(t *testing.T, cfg Config, logs *lockedBuffer) (*limit.Limiter, *redis.Client, *Refresher) {
	t.Helper()
	ctx := context.Background()
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := redistest.Start(t).Client(t)
	r, err := New(cfg, lim, c, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, c, cfg.Key, "x", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return lim, c, r
}
