package overrides

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

const key = "gate:overrides"

func newRefresher(t *testing.T, srv *redistest.Server, base map[string]int64) (*Refresher, *limit.Limiter) {
	t.Helper()
	lim, err := limit.New(limit.Config{Threshold: 1000, Overrides: base}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Base: base, Timeout: 300 * time.Millisecond}, lim, srv.Client(t), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, lim
}

func TestRefreshAppliesMergedSet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	r, lim := newRefresher(t, srv, map[string]int64{"a": 10, "b": 20})
	c := srv.Client(t)

	if err := Set(ctx, c, key, "b", 25, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := Set(ctx, c, key, "c", 30, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"a": 10, "b": 25, "c": 30} // the live set replaces b, adds c
	if got := lim.Overrides(); !maps.Equal(got, want) {
		t.Errorf("overrides %v, want %v", got, want)
	}
	if lim.Threshold("c") != 30 || lim.Threshold("zz") != 1000 {
		t.Errorf("thresholds c=%d zz=%d", lim.Threshold("c"), lim.Threshold("zz"))
	}
	if got := testutil.ToFloat64(r.loaded); got != 3 {
		t.Errorf("gate_overrides_loaded %v, want 3", got)
	}
	if testutil.ToFloat64(r.lastSuccess) == 0 {
		t.Error("gate_overrides_last_refresh_timestamp_seconds not set")
	}

	// Deleting every live team leaves the marker: an empty live set, back to the base.
	for _, team := range []string{"b", "c"} {
		if ok, err := Delete(ctx, c, key, team, time.Now()); err != nil || !ok {
			t.Fatalf("delete %s: %v %v", team, ok, err)
		}
	}
	if ok, err := Delete(ctx, c, key, "nobody", time.Now()); err != nil || ok {
		t.Errorf("delete of an absent team: %v %v", ok, err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lim.Overrides(); !maps.Equal(got, map[string]int64{"a": 10, "b": 20}) {
		t.Errorf("after deleting the live set: %v, want the base", got)
	}
}

func TestRefreshIsFailStatic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	r, lim := newRefresher(t, srv, nil)
	c := srv.Client(t)
	if err := Set(ctx, c, key, "x", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	// An invalid entry (written by hand) rejects the whole set.
	if err := c.HSet(ctx, key, "y", "lots").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err == nil || !strings.Contains(err.Error(), `team "y"`) {
		t.Errorf("refresh with an invalid entry: %v", err)
	}
	if got := lim.Overrides(); !maps.Equal(got, map[string]int64{"x": 5}) {
		t.Errorf("after an invalid set: %v, want the previous one kept", got)
	}

	// A missing hash (Redis restarted empty, say) keeps the current set.
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Errorf("refresh of a missing hash: %v", err)
	}
	// Redis down keeps it too.
	srv.Stop(t)
	if err := r.Refresh(ctx); err == nil {
		t.Error("refresh with Redis down succeeded")
	}
	if got := lim.Overrides(); !maps.Equal(got, map[string]int64{"x": 5}) {
		t.Errorf("after failures: %v, want the previous set kept", got)
	}
	for cause, want := range map[string]float64{"invalid": 1, "missing": 1, "redis": 1} {
		if got := testutil.ToFloat64(r.errs.WithLabelValues(cause)); got != want {
			t.Errorf("gate_overrides_refresh_errors_total{cause=%s} = %v, want %v", cause, got, want)
		}
	}
}

func TestRunRefreshesUntilCancelled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lim, _ := limit.New(limit.Config{}, nil, nil)
	r, err := New(Config{Key: key, Interval: 20 * time.Millisecond}, lim, srv.Client(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	if err := Set(context.Background(), srv.Client(t), key, "t", 7, time.Now()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for lim.Threshold("t") != 7 {
		if time.Now().After(deadline) {
			t.Fatal("live override not applied by Run")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestParseAndSetRejectBadInput(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{{"a": "0"}, {"a": "-1"}, {"a": "1.5"}, {"": "3"}, {"a": "99999999999999999999"}} {
		if _, err := Parse(h); err == nil {
			t.Errorf("Parse(%v) accepted", h)
		}
	}
	m, err := Parse(map[string]string{"a": "3", MarkerField: "2026-01-01T00:00:00Z"})
	if err != nil || !maps.Equal(m, map[string]int64{"a": 3}) {
		t.Errorf("Parse: %v %v", m, err)
	}
	srv := redistest.Start(t)
	if err := Set(context.Background(), srv.Client(t), key, MarkerField, 3, time.Now()); err == nil {
		t.Error("Set accepted the marker field as a team")
	}
	if err := Set(context.Background(), srv.Client(t), key, "a", 0, time.Now()); err == nil {
		t.Error("Set accepted a zero limit")
	}
}

// With several limits, each further limit gets the primary's overrides scaled by its
// factor, rounded and at least 1.
func TestRefreshScalesExtraLimits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	base := map[string]int64{"a": 10}
	lim, err := limit.New(limit.Config{Threshold: 1000, Overrides: base}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := limit.New(limit.Config{Window: time.Hour, Threshold: 20000, Overrides: Scale(base, 20)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tiny, err := limit.New(limit.Config{Window: time.Second, Threshold: 10}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Base: base, Timeout: 300 * time.Millisecond, Extra: []Extra{{hour, 20}, {tiny, 0.01}}}, lim, srv.Client(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Set(ctx, srv.Client(t), key, "b", 250, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := hour.Overrides(), map[string]int64{"a": 200, "b": 5000}; !maps.Equal(got, want) {
		t.Errorf("hour overrides %v, want %v", got, want)
	}
	if got, want := tiny.Overrides(), map[string]int64{"a": 1, "b": 3}; !maps.Equal(got, want) { // 0.1 → 1 (at least 1), 2.5 → 3
		t.Errorf("second overrides %v, want %v", got, want)
	}
	if got := Scale(map[string]int64{"x": limit.MaxThreshold}, 2)["x"]; got != limit.MaxThreshold {
		t.Errorf("Scale past the maximum = %d", got)
	}
}
