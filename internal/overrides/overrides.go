// Package overrides keeps a gate's per-team thresholds in step with a Redis hash that
// operators edit at run time ({prefix}:overrides, field = team, value = limit), on top of
// the base set from GATE_OVERRIDES.
//
// Guarantees:
//
//   - Atomic: each refresh swaps the whole effective set into the limiter at once
//     (limit.SetOverrides); a check sees the old set or the new one, never a mix.
//   - Fail-static: a Redis error, a missing hash or a hash holding any invalid entry keeps
//     the current overrides; the failure is counted and logged, never applied half-way.
//   - An empty live set is representable: the hash's marker field (MarkerField), kept by
//     Set and Delete, makes a hash with no team in it exist, which clears the live set.
//     (Redis deletes a hash whose last field goes, so without it "deleted the last
//     override" would read as "missing" and be ignored.)
//   - Merge: the effective set is GATE_OVERRIDES with the live hash laid over it. A team
//     in the hash takes the hash's limit; a team deleted from it falls back to its
//     GATE_OVERRIDES limit, or the default threshold.
//   - Several limits: an override sets a team's threshold in the primary limit; each
//     further limit (Config.Extra) gets it scaled by that limit's factor (Scale), applied
//     right after the primary's.
package overrides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/throttle"
)

// MarkerField is the hash field that is not a team: the time of the last change, in
// RFC 3339. Its presence is what tells an empty live set from a missing hash.
const MarkerField = ".updated"

// DefaultInterval is how often the hash is read when Config.Interval is zero.
const DefaultInterval = 60 * time.Second

// Key returns the hash's key for a Redis key prefix (GATE_REDIS_PREFIX).
func Key(prefix string) string { return prefix + ":overrides" }

// Config is a Refresher's settings.
type Config struct {
	// Key is the hash (Key(prefix)).
	Key string
	// Base is GATE_OVERRIDES, under the live set.
	Base map[string]int64
	// Interval between reads. Zero means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one read. Zero means 1 s.
	Timeout time.Duration
	// Extra are further limits (GATE_LIMITS) whose per-team thresholds follow the
	// primary's overrides, scaled.
	Extra []Extra
}

// Extra is a further limiter and the factor its overrides are the primary's times: its
// default threshold over the primary's.
type Extra struct {
	Lim    *limit.Limiter
	Factor float64
}

// Scale returns m's thresholds times f, rounded, clamped to 1..limit.MaxThreshold.
func Scale(m map[string]int64, f float64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for team, t := range m {
		out[team] = int64(min(max(math.Round(float64(t)*f), 1), limit.MaxThreshold))
	}
	return out
}

// Refresher reads the live overrides and applies them to a limiter.
type Refresher struct {
	cfg    Config
	lim    *limit.Limiter
	client redis.UniversalClient
	log    *slog.Logger

	mu   sync.Mutex // serialises refreshes
	live map[string]int64

	loaded      prometheus.Gauge
	liveTeams   prometheus.Gauge
	lastSuccess prometheus.Gauge
	errs        *prometheus.CounterVec
}

// New returns a Refresher for lim reading from client. reg may be nil.
func New(cfg Config, lim *limit.Limiter, client redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*Refresher, error) {
	if cfg.Key == "" {
		return nil, errors.New("overrides: no key")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, errors.New("overrides: negative interval or timeout")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Refresher{
		cfg: cfg, lim: lim, client: client, log: log,
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_overrides_loaded",
			Help: "Per-team thresholds in force: GATE_OVERRIDES with the live hash laid over it.",
		}),
		liveTeams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_overrides_live",
			Help: "Teams in the live overrides hash at the last successful refresh.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_overrides_last_refresh_timestamp_seconds",
			Help: "Unix time of the last successful read of the live overrides hash (0: none yet).",
		}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_overrides_refresh_errors_total",
			Help: "Refreshes that kept the current overrides, by cause: redis (unreachable, timeout), missing (no hash), invalid (an entry is not a valid limit).",
		}, []string{"cause"}),
	}
	for _, c := range []string{"redis", "missing", "invalid"} {
		r.errs.WithLabelValues(c)
	}
	r.loaded.Set(float64(len(lim.Overrides())))
	if reg != nil {
		for _, c := range []prometheus.Collector{r.loaded, r.liveTeams, r.lastSuccess, r.errs} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering overrides metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Run refreshes at once, then every interval, until ctx ends.
func (r *Refresher) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	logs := throttle.NewEvery(time.Minute, nil) // wall time: it paces a log
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			// No hash is the normal state of a fleet without live overrides: not worth a
			// warning. Other failures are logged once a minute at most: an outage must not
			// flood the log.
			if errors.Is(err, ErrMissing) {
				r.log.Debug("no live overrides hash; keeping the current overrides", "key", r.cfg.Key)
			} else if ok, unlogged := logs.Allow(); ok {
				r.log.Warn("live overrides not refreshed; keeping the current ones", "err", err, "failures_unlogged", unlogged)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ErrMissing is returned by Refresh when the hash does not exist.
var ErrMissing = errors.New("overrides: no live overrides hash")

// Refresh reads the hash once and, if it is readable and valid, applies the merged set.
func (r *Refresher) Refresh(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	h, err := r.client.HGetAll(rctx, r.cfg.Key).Result()
	cancel()
	if err != nil {
		r.errs.WithLabelValues("redis").Inc()
		return fmt.Errorf("reading %s: %w", r.cfg.Key, err)
	}
	if len(h) == 0 {
		r.errs.WithLabelValues("missing").Inc()
		return fmt.Errorf("%w: %s", ErrMissing, r.cfg.Key)
	}
	live, err := Parse(h)
	if err != nil {
		r.errs.WithLabelValues("invalid").Inc()
		return fmt.Errorf("reading %s: %w", r.cfg.Key, err)
	}
	merged := maps.Clone(r.cfg.Base)
	if merged == nil {
		merged = make(map[string]int64, len(live))
	}
	maps.Copy(merged, live)
	changed := !maps.Equal(live, r.live)
	if err := r.lim.SetOverrides(merged); err != nil {
		r.errs.WithLabelValues("invalid").Inc()
		return fmt.Errorf("applying %s: %w", r.cfg.Key, err)
	}
	for _, e := range r.cfg.Extra {
		// Cannot fail: Scale keeps every threshold in range.
		if err := e.Lim.SetOverrides(Scale(merged, e.Factor)); err != nil {
			return fmt.Errorf("applying %s to the %s limit: %w", r.cfg.Key, e.Lim.Config().Window, err)
		}
	}
	r.live = live
	r.loaded.Set(float64(len(merged)))
	r.liveTeams.Set(float64(len(live)))
	r.lastSuccess.Set(float64(time.Now().Unix()))
	if changed {
		r.log.Info("live overrides applied", "key", r.cfg.Key, "live", len(live), "effective", len(merged))
	}
	return nil
}

// Parse reads a hash's fields into team limits, skipping MarkerField. Any entry that is
// not a whole number from 1 to limit.MaxThreshold, or an empty team, fails the whole set.
func Parse(h map[string]string) (map[string]int64, error) {
	out := make(map[string]int64, len(h))
	for team, v := range h {
		if team == MarkerField {
			continue
		}
		n, err := ParseLimit(v)
		if err != nil {
			return nil, fmt.Errorf("team %q: %w", team, err)
		}
		if team == "" {
			return nil, errors.New("an entry has an empty team")
		}
		out[team] = n
	}
	return out, nil
}

// ParseLimit reads one limit: a whole number from 1 to limit.MaxThreshold.
func ParseLimit(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > limit.MaxThreshold {
		return 0, fmt.Errorf("limit %q is not a whole number from 1 to %d", s, int64(limit.MaxThreshold))
	}
	return n, nil
}

// Set writes one team's live limit (and the marker) in one transaction.
func Set(ctx context.Context, c redis.UniversalClient, key, team string, lim int64, now time.Time) error {
	if team == "" || team == MarkerField {
		return fmt.Errorf("team %q cannot be overridden", team)
	}
	if _, err := ParseLimit(strconv.FormatInt(lim, 10)); err != nil {
		return err
	}
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, team, lim, MarkerField, now.UTC().Format(time.RFC3339))
		return nil
	})
	if err != nil {
		return fmt.Errorf("setting %s in %s: %w", team, key, err)
	}
	return nil
}

// Delete removes one team's live limit, keeping the marker so an empty set stays
// readable as empty. It reports whether the team was there.
func Delete(ctx context.Context, c redis.UniversalClient, key, team string, now time.Time) (bool, error) {
	var del *redis.IntCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.HDel(ctx, key, team)
		p.HSet(ctx, key, MarkerField, now.UTC().Format(time.RFC3339))
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("deleting %s from %s: %w", team, key, err)
	}
	return del.Val() > 0, nil
}

// List returns the live limits and the marker's time ("" when the hash has none).
func List(ctx context.Context, c redis.UniversalClient, key string) (map[string]int64, string, error) {
	h, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", key, err)
	}
	m, err := Parse(h)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", key, err)
	}
	return m, h[MarkerField], nil
}
