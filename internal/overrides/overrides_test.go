package overrides

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/throttle"
)

const key = "gate:overrides"

func newRefresher(t *testing.T, srv *redistest.Server, base map[string]int64) (*Refresher, *limit.Limiter) {
	t.Helper()
	lim, err := limit.New(limit.Config{Threshold: 1000, Overrides: base}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Base: base, Timeout: 10 * time.Second}, lim, srv.Client(t), prometheus.NewRegistry(), nil)
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

	if err := setOverride(ctx, c, key, "b", 25, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, c, key, "c", 30, time.Now()); err != nil {
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
	if err := setOverride(ctx, c, key, "x", 5, time.Now()); err != nil {
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

	// A key of another type (a SET by hand) keeps it, counted invalid: the operator's to
	// fix, not Redis unreachable.
	if err := c.Set(ctx, key, "5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrNotHash) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("refresh of a key that is not a hash: %v", err)
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
	for cause, want := range map[string]float64{"invalid": 2, "missing": 1, "redis": 1} {
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
	if err := setOverride(context.Background(), srv.Client(t), key, "t", 7, time.Now()); err != nil {
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
	if err := setOverride(context.Background(), srv.Client(t), key, MarkerField, 3, time.Now()); err == nil {
		t.Error("Set accepted the marker field as a team")
	}
	if err := setOverride(context.Background(), srv.Client(t), key, "a", 0, time.Now()); err == nil {
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
	hour, err := limit.New(limit.Config{Window: time.Hour, Threshold: 20000, Overrides: Scale(base, 20000, 1000)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tiny, err := limit.New(limit.Config{Window: time.Second, Threshold: 10}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2300 over 1000: a float factor, a hair under 2.3, rounded 25 × it (57.5) down.
	day, err := limit.New(limit.Config{Window: 24 * time.Hour, Threshold: 2300, Overrides: Scale(base, 2300, 1000)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Base: base, Timeout: 10 * time.Second, Extra: []Extra{{hour, 20000, 1000}, {tiny, 10, 1000}, {day, 2300, 1000}}}, lim, srv.Client(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, srv.Client(t), key, "b", 250, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := setOverride(ctx, srv.Client(t), key, "c", 25, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := hour.Overrides(), map[string]int64{"a": 200, "b": 5000, "c": 500}; !maps.Equal(got, want) {
		t.Errorf("hour overrides %v, want %v", got, want)
	}
	if got, want := tiny.Overrides(), map[string]int64{"a": 1, "b": 3, "c": 1}; !maps.Equal(got, want) { // 0.1 → 1 (at least 1), 2.5 → 3, 0.25 → 1
		t.Errorf("second overrides %v, want %v", got, want)
	}
	if got, want := day.Overrides(), map[string]int64{"a": 23, "b": 575, "c": 58}; !maps.Equal(got, want) { // 57.5 → 58
		t.Errorf("day overrides %v, want %v", got, want)
	}
	for _, tc := range []struct{ t, thr, primary, want int64 }{
		{limit.MaxThreshold, 2, 1, limit.MaxThreshold},                                   // past the maximum
		{limit.MaxThreshold, limit.MaxThreshold, 1, limit.MaxThreshold},                  // past 64 bits
		{limit.MaxThreshold, limit.MaxThreshold, limit.MaxThreshold, limit.MaxThreshold}, // × 1
		{1, 1, limit.MaxThreshold, 1},                                                    // at least 1
		{limit.MaxThreshold, 1, limit.MaxThreshold, 1},
		{limit.MaxThreshold, 3, 2, limit.MaxThreshold},
		{limit.MaxThreshold - 1, 1, 2, limit.MaxThreshold / 2}, // (2^43 − 2) / 2
		{limit.MaxThreshold, 1, 2, limit.MaxThreshold/2 + 1},   // (2^43 − 1) / 2 = … .5, up
	} {
		if got := Scale(map[string]int64{"x": tc.t}, tc.thr, tc.primary)["x"]; got != tc.want {
			t.Errorf("Scale(%d, %d / %d) = %d, want %d", tc.t, tc.thr, tc.primary, got, tc.want)
		}
	}
}

// lockedBuffer is a log destination the test reads while the refresher writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines written so far whose msg starts with prefix.
func (l *lockedBuffer) lines(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// A hash that was read and is gone (Redis restarted empty) keeps the last set in force,
// with the gauge at 1 and a warning: at once, then at most every MissingLogInterval
// while it lasts. Both clear when the hash is back; the next loss warns at once again.
func TestLostHashKeepsTheSetAndSaysSo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lim, err := limit.New(limit.Config{Threshold: 1000, Overrides: map[string]int64{"base": 10}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	r, err := New(Config{Key: key, Base: map[string]int64{"base": 10}}, lim, c, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	r.missingLog = throttle.NewEvery(MissingLogInterval, clk)
	const gone = "live overrides hash is gone"
	want := map[string]int64{"base": 10, "x": 5, "y": 7}
	check := func(when string, wantMissing float64, wantWarnings int) {
		t.Helper()
		if got := lim.Overrides(); !maps.Equal(got, want) {
			t.Errorf("%s: overrides %v, want %v", when, got, want)
		}
		if got := testutil.ToFloat64(r.hashMissing); got != wantMissing {
			t.Errorf("%s: gate_overrides_hash_missing = %v, want %v", when, got, wantMissing)
		}
		if got := logs.lines(t, gone); len(got) != wantWarnings {
			t.Errorf("%s: %d warnings that the hash is gone, want %d: %v", when, len(got), wantWarnings, got)
		}
	}

	// Never there: the normal state of a fleet without live overrides. Debug only.
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatalf("refresh of a hash never written: %v", err)
	}
	if got := testutil.ToFloat64(r.hashMissing); got != 0 {
		t.Errorf("gate_overrides_hash_missing = %v for a hash never read, want 0", got)
	}
	// Nor is it a refresh error: counted, every rule without overrides rose on the
	// dashboard's panel of them, once a refresh.
	if got := testutil.ToFloat64(r.errs.WithLabelValues(CauseMissing)); got != 0 {
		t.Errorf("gate_overrides_refresh_errors_total{cause=missing} = %v for a hash never read, want 0", got)
	}
	if got := logs.lines(t, "no live overrides hash"); len(got) != 1 || got[0]["level"] != "DEBUG" {
		t.Errorf("log for a hash never read: %v", got)
	}

	for _, team := range []string{"x", "y"} {
		if err := setOverride(ctx, c, key, team, want[team], time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("read", 0, 0)

	// Redis restarts empty: the set read stays, the loss is said at once.
	srv.Restart(t)
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatalf("refresh after an empty restart: %v", err)
	}
	check("gone", 1, 1)
	w := logs.lines(t, gone)[0]
	if w["level"] != "WARN" || w["key"] != key || w["live"] != float64(2) {
		t.Errorf("warning %v: want level WARN, key %s, live 2", w, key)
	}
	// Every refresh while it lasts fails the same way, and warns again only after
	// MissingLogInterval.
	clk.Advance(MissingLogInterval - time.Second)
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatal(err)
	}
	check("still gone", 1, 1)
	clk.Advance(time.Second)
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatal(err)
	}
	check("gone for MissingLogInterval", 1, 2)
	if w := logs.lines(t, gone)[1]; w["refreshes_unlogged"] != float64(1) {
		t.Errorf("second warning %v: want refreshes_unlogged 1", w)
	}
	if got := testutil.ToFloat64(r.errs.WithLabelValues(CauseMissing)); got != 3 {
		t.Errorf("gate_overrides_refresh_errors_total{cause=missing} = %v, want 3: the refreshes since it was read", got)
	}
	// A delete does not turn the lost hash into an empty live set.
	if found, err := Delete(ctx, c, key, "x", time.Now()); !errors.Is(err, ErrMissing) || found {
		t.Errorf("delete from a missing hash: %v %v, want ErrMissing", found, err)
	}
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("delete from a missing hash made it exist: %d %v", n, err)
	}

	// Restored: the gauge clears, an info line says so.
	for _, team := range []string{"x", "y"} {
		if err := setOverride(ctx, c, key, team, want[team], time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("restored", 0, 2)
	if got := logs.lines(t, "live overrides hash is back"); len(got) != 1 || got[0]["level"] != "INFO" {
		t.Errorf("log when the hash is back: %v", got)
	}

	// Lost again, within MissingLogInterval of the last warning: said at once all the same.
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatal(err)
	}
	check("gone again", 1, 3)
}

// A hash of more teams than the maximum is not read (one HLEN, no scan): the refresh
// fails naming the key, the count and the maximum, keeps the set in force and counts
// the cause. At the maximum exactly, it is read.
func TestHashOverTheMaximumIsNotRead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, MaxEntries: 10}, lim, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillHash(t, c, key, 10) // and the marker, which is not a team
	if err := r.Refresh(ctx); err != nil {
		t.Fatalf("refresh of a hash at the maximum: %v", err)
	}
	kept := lim.Overrides()
	if len(kept) != 10 {
		t.Fatalf("%d overrides applied, want 10", len(kept))
	}

	if err := c.HSet(ctx, key, "team-11", 50).Err(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"SLOWLOG", "RESET"}} {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	err = r.Refresh(ctx)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), key+" holds 11 teams, more than the 10 allowed (GATE_OVERRIDES_MAX_ENTRIES)") {
		t.Errorf("refresh of a hash over the maximum: %v", err)
	}
	if n := len(commandTimes(t, c)["hscan"]); n != 0 {
		t.Errorf("%d HSCANs of a hash over the maximum, want none", n)
	}
	if got := lim.Overrides(); !maps.Equal(got, kept) {
		t.Errorf("overrides after a hash over the maximum: %d teams, want the %d kept", len(got), len(kept))
	}
	if got := testutil.ToFloat64(r.errs.WithLabelValues(CauseTooLarge)); got != 1 {
		t.Errorf("gate_overrides_refresh_errors_total{cause=too_large} = %v, want 1", got)
	}
	if _, _, _, err := List(ctx, c, key, 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("List of a hash over the maximum: %v", err)
	}
}

// A change made during the scan is seen (the marker or the length differs after it) and
// the hash read again; a change during both reads fails the refresh and keeps the set.
func TestChangeUnderTheScanIsReadAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key}, lim, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillHash(t, c, key, 3000) // several chunks
	var scans []int
	r.afterScan = func(attempt int) {
		scans = append(scans, attempt)
		if attempt == 1 { // an update of a team: only the marker tells
			if err := setOverride(ctx, c, key, "team-1", 7, time.Now()); err != nil {
				t.Error(err)
			}
		}
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(scans, []int{1, 2}) || lim.Threshold("team-1") != 7 || len(lim.Overrides()) != 3000 {
		t.Errorf("after a change under the first scan: scans %v, team-1 at %d, %d teams; want scans [1 2], 7, 3000",
			scans, lim.Threshold("team-1"), len(lim.Overrides()))
	}

	// A team added by hand, without the marker: the length tells.
	scans = nil
	r.afterScan = func(attempt int) {
		scans = append(scans, attempt)
		if err := c.HSet(ctx, key, fmt.Sprintf("hand-%d", attempt), 9).Err(); err != nil {
			t.Error(err)
		}
	}
	err = r.Refresh(ctx)
	if !errors.Is(err, ErrChanging) || !slices.Equal(scans, []int{1, 2}) {
		t.Errorf("refresh under changes: %v after scans %v, want ErrChanging after [1 2]", err, scans)
	}
	if lim.Threshold("hand-1") != 1000 || len(lim.Overrides()) != 3000 {
		t.Errorf("a refresh that failed changed the overrides: hand-1 at %d, %d teams", lim.Threshold("hand-1"), len(lim.Overrides()))
	}
	if got := testutil.ToFloat64(r.errs.WithLabelValues(CauseChanging)); got != 1 {
		t.Errorf("gate_overrides_refresh_errors_total{cause=changing} = %v, want 1", got)
	}

	// Deleted under the scan: missing, not an empty or partial set.
	r.afterScan = func(int) {
		if err := c.Del(ctx, key).Err(); err != nil {
			t.Error(err)
		}
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Errorf("refresh of a hash deleted under the scan: %v", err)
	}
	if len(lim.Overrides()) != 3000 {
		t.Errorf("%d teams after the hash was deleted under the scan, want the 3000 kept", len(lim.Overrides()))
	}
}

// A rules reload while the hash cannot be read (Redis down, an invalid entry) builds a new
// refresher that inherits the old one's set: it must also inherit when that set was last
// read, or gate_overrides_last_refresh_timestamp_seconds drops to 0 ("none yet"), which
// GateOverridesStale (`... > 0`) leaves out: the stale gate stops being reported.
func TestInheritKeepsTheLastRefreshTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	old, _ := newRefresher(t, srv, nil)
	c := srv.Client(t)
	if err := setOverride(ctx, c, key, "x", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := old.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	last := testutil.ToFloat64(old.lastSuccess)
	if last == 0 {
		t.Fatal("old refresher: no last refresh time")
	}
	// The hash goes bad (an entry written by hand), then the rules are reloaded.
	if err := c.HSet(ctx, key, "y", "lots").Err(); err != nil {
		t.Fatal(err)
	}
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Timeout: 10 * time.Second}, lim, srv.Client(t), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Inherit(old); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("refresh of an invalid hash succeeded")
	}
	if got := lim.Overrides(); !maps.Equal(got, map[string]int64{"x": 5}) {
		t.Errorf("inherited overrides %v, want x=5", got)
	}
	if got := testutil.ToFloat64(r.lastSuccess); got != last {
		t.Errorf("gate_overrides_last_refresh_timestamp_seconds after the reload = %v, want the old refresher's %v (the set in force was read then)", got, last)
	}
}

// A delete of a team the hash does not hold changes nothing, its marker included: the
// marker is when the live set last changed (gate overrides list prints it), and the
// command says "nothing changed".
func TestDeleteOfAnAbsentTeamKeepsTheMarker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := setOverride(ctx, c, key, "a", 5, t0); err != nil {
		t.Fatal(err)
	}
	if found, err := Delete(ctx, c, key, "nobody", t0.Add(time.Hour)); err != nil || found {
		t.Fatalf("delete of an absent team: %v %v", found, err)
	}
	live, updated, version, err := List(ctx, c, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Format(time.RFC3339Nano); updated != want || !maps.Equal(live, map[string]int64{"a": 5}) || version != 1 {
		t.Errorf("after deleting an absent team: %v, last changed %q, version %d; want the set, %q and version 1 unchanged", live, updated, version, want)
	}
	// A delete that removes a team still moves the marker.
	if found, err := Delete(ctx, c, key, "a", t0.Add(2*time.Hour)); err != nil || !found {
		t.Fatalf("delete: %v %v", found, err)
	}
	if _, updated, version, err := List(ctx, c, key, 0); err != nil || updated != t0.Add(2*time.Hour).Format(time.RFC3339Nano) || version != 2 {
		t.Errorf("after deleting a team: last changed %q, version %d (%v); want version 2", updated, version, err)
	}
}

// TestRefusedLoginIsNotAMissingHash: a Redis that refuses the client's login (a wrong
// password, refused when the connection opens, by the primary or by the sentinels) is an
// error of Read and List, not a missing hash: go-redis gives the pipeline's commands no
// error of their own then, and read as they were, they said the hash was empty, so gate
// overrides list printed "no live overrides" and a gate took the set for lost.
func TestRefusedLoginIsNotAMissingHash(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "right"})
	ctx := context.Background()
	if err := setOverride(ctx, srv.Client(t), key, "a", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := Read(ctx, c, key, 0); err == nil || errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("Read with a refused login: %v, want Redis's WRONGPASS", err)
	}
	if live, _, _, err := List(ctx, c, key, 0); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("List with a refused login: %v, %v; want Redis's WRONGPASS", live, err)
	}
}

// TestSetRefusedSaysWhy: a Redis that refuses writes (a replica, as after a failover; out
// of memory) refuses gate overrides set's write (SetWithin) with its own reason: when it
// was queued in MULTI, the HSET's refusal made EXEC fail with "EXECABORT Transaction
// discarded because of previous errors", and that was all gate overrides set said.
func TestSetRefusedSaysWhy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		how  redistest.Refusal
		want string
	}{
		{redistest.RefuseReadOnly, "READONLY"},
		{redistest.RefuseOOM, "OOM"},
		{redistest.RefuseMisconf, "MISCONF"},
	} {
		t.Run(tt.how.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			srv.RefuseWrites(t, tt.how)
			err := setOverride(context.Background(), srv.Client(t), key, "a", 5, time.Now())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SetWithin on a Redis refusing writes (%s): %v, want Redis's %s", tt.how, err, tt.want)
			}
		})
	}
}

// A failover to a replica that lacked the last writes to the hash has the refresher read
// an older set than the one it applied. It applies what Redis holds (every gate reading
// the hash agrees; one that restarts would read it too), but says so once, naming both
// versions, and counts it (gate_overrides_version_regressions_total): before, a team's
// raised limit silently reverted. Two real servers stand for the primary and the lagging
// replica; the client's dialer moves to the second when the first dies, as a Sentinel
// client's does. A hash without a version (written by an older gate, or restored by hand)
// and one written anew after it was lost are no regression.
func TestOlderHashAfterFailoverIsReported(t *testing.T) {
	t.Parallel()
	primary, replica := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	// The replica had the first write only.
	for _, w := range []struct {
		c    redis.UniversalClient
		team string
		lim  int64
	}{{primary.Client(t), "x", 5}, {primary.Client(t), "x", 50}, {primary.Client(t), "y", 7}, {replica.Client(t), "x", 5}} {
		if err := setOverride(ctx, w.c, key, w.team, w.lim, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var addr atomic.Value
	addr.Store(primary.Addr())
	c := redis.NewClient(&redis.Options{Addr: "current-primary", Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr.Load().(string))
	}})
	t.Cleanup(func() { c.Close() })
	var logs lockedBuffer
	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(Config{Key: key, Timeout: 10 * time.Second}, lim, c, reg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	regressions := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "gate_overrides_version_regressions_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1 // not registered
	}
	refresh := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := r.Refresh(ctx)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: refresh: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond) // a poll's pace: the client reconnects meanwhile
		}
	}
	refresh("the primary")
	if got, want := lim.Overrides(), map[string]int64{"x": 50, "y": 7}; !maps.Equal(got, want) {
		t.Fatalf("overrides from the primary %v, want %v", got, want)
	}

	// Failover: the primary dies, the client reconnects to the promoted replica.
	addr.Store(replica.Addr())
	primary.Stop(t)
	refresh("the promoted replica")
	if got, want := lim.Overrides(), map[string]int64{"x": 5}; !maps.Equal(got, want) {
		t.Errorf("overrides after the failover %v, want what Redis holds now, %v", got, want)
	}
	refresh("the promoted replica again")
	warned := logs.lines(t, "live overrides hash is older")
	if len(warned) != 1 {
		t.Fatalf("%d warnings that the hash is older than the set applied, want 1 (once): %v", len(warned), warned)
	}
	if w := warned[0]; w["level"] != "WARN" || w["read_version"] != float64(1) || w["applied_version"] != float64(3) || w["key"] != key {
		t.Errorf("warning %v: want level WARN, key %s, read_version 1, applied_version 3", w, key)
	}
	if got := regressions(); got != 1 {
		t.Errorf("gate_overrides_version_regressions_total = %v, want 1", got)
	}

	// Re-applied with gate overrides set: newer again, nothing to say.
	cr := replica.Client(t)
	if err := setOverride(ctx, cr, key, "x", 50, time.Now()); err != nil {
		t.Fatal(err)
	}
	refresh("the set re-applied")
	// A hash without a version: written by an older gate, or restored by hand.
	if err := cr.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cr.HSet(ctx, key, "x", 9, MarkerField, "2026-01-01T00:00:00Z").Err(); err != nil {
		t.Fatal(err)
	}
	refresh("a hash without a version")
	if err := setOverride(ctx, cr, key, "x", 10, time.Now()); err != nil {
		t.Fatal(err)
	}
	refresh("a version written over a hash without one")
	// A hash lost and written anew starts its versions again.
	if err := cr.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); !errors.Is(err, ErrMissing) {
		t.Fatalf("refresh of the lost hash: %v", err)
	}
	if err := setOverride(ctx, cr, key, "x", 11, time.Now()); err != nil {
		t.Fatal(err)
	}
	refresh("a hash written anew")
	if got, want := lim.Overrides(), map[string]int64{"x": 11}; !maps.Equal(got, want) {
		t.Errorf("overrides at the end %v, want %v", got, want)
	}
	if got := logs.lines(t, "live overrides hash is older"); len(got) != 1 {
		t.Errorf("%d warnings that the hash is older, want still the one of the failover: %v", len(got), got)
	}
	if got := regressions(); got != 1 {
		t.Errorf("gate_overrides_version_regressions_total = %v at the end, want still 1", got)
	}
}
