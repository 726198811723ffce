// Package overrides keeps a gate's per-team thresholds in step with a Redis hash that
// operators edit at run time ({prefix}:overrides, field = team, value = limit), on top of
// the base set from GATE_OVERRIDES.
//
// Guarantees:
//
//   - Atomic: a refresh that reads a new set swaps the whole effective set into the
//     limiter at once (limit.SetOverrides); a check sees the old set or the new one,
//     never a mix. A set equal to the one in force is not swapped again.
//   - Short commands: the hash is read in chunks (HLEN, then HSCAN with COUNT ScanCount
//     until the cursor is back to 0), never with one HGETALL, so no command holds Redis
//     for more than about a millisecond, whatever the hash's size; a million teams read
//     in about a second. The whole read is bounded by Config.Timeout, each command also
//     by the client's own read timeout (GATE_REDIS_READ_TIMEOUT): a hung Redis fails the
//     refresh within that, a large hash does not.
//   - Bounded: a hash holding more than Config.MaxEntries teams (GATE_OVERRIDES_MAX_ENTRIES,
//     DefaultMaxEntries) is not read at all: HLEN says so first, and the refresh fails
//     with ErrTooLarge, naming the key, the count and the cap.
//   - Consistent: a chunked read is not a snapshot, so the hash's length and its marker
//     field are read before and after the scan, and the scan must have returned as many
//     entries as the hash holds. If anything differs (Set or Delete ran meanwhile, the
//     hash was deleted or grew), the hash is read once more, and a second change fails
//     the refresh (ErrChanging) rather than apply a set that mixes the states before and
//     after. Only an edit made by hand that changes neither the marker nor the length
//     (HSET of an existing team) can go unseen: HSCAN returns every entry present for
//     the whole scan, so it leaves that team at its old or new limit until the next
//     refresh.
//   - Fail-static: a Redis error, a missing hash, a hash over the cap, one changing
//     under the read or holding any invalid entry keeps the current overrides; the
//     failure is counted (gate_overrides_refresh_errors_total{cause}) and logged, never
//     applied half-way.
//   - A lost hash is reported: when the hash this gate read before is gone (Redis
//     restarted empty, a failover to a replica that never had it), the gate keeps the
//     last set it read, sets gate_overrides_hash_missing to 1 and logs a warning at
//     once, then at most every MissingLogInterval while it lasts; both clear when the
//     hash is back, even one the gate refuses (an invalid entry, a set the limiter
//     refuses, too large, changing: a refresh error of that cause). A hash that never existed is the normal state of a fleet without
//     live overrides: debug level only.
//   - An older set is reported: SetWithin and Delete raise the hash's version
//     (VersionField) with each change, in the same script. A read whose version is lower
//     than the one of the set this gate applied is a regression: a failover to a replica
//     that lacked the last writes. The gate applies it all the same, as every gate reading
//     the hash does (a gate that restarts reads it too, and a fleet split between two sets
//     would be worse), but logs a warning naming both versions, once per regression, and
//     counts it (gate_overrides_version_regressions_total): the lost changes are the
//     operator's to make again (gate overrides set, delete). A hash without a version
//     (written by an older gate, or restored by hand) and a hash written anew after it
//     was lost start the count again, without a warning.
//   - An empty live set is representable: the hash's marker field (MarkerField), kept by
//     SetWithin and Delete, makes a hash with no team in it exist, which clears the live set.
//     (Redis deletes a hash whose last field goes, so without it "deleted the last
//     override" would read as "missing" and be ignored.)
//   - Read before routing: FirstRead is closed once the first read has finished, applied
//     or failed; a starting gate routes nothing before it, for at most StartWait
//     (internal/gate), so a team restricted or raised by a live override is routed at its
//     live limit from its first record.
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
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/throttle"
)

// MarkerField is the hash field that is not a team: the time of the last change, in
// RFC 3339 with nanoseconds. Its presence is what tells an empty live set from a missing
// hash, and its change during a read what tells a read to be made again.
const MarkerField = ".updated"

// VersionField is the second hash field that is not a team: a count that SetWithin and
// Delete raise by one with each change, in the same script as the change. It tells an
// older set (a failover to a replica that lacked the last writes) from a newer one, which
// the marker's time cannot: operators' clocks differ.
const VersionField = ".version"

// DefaultInterval is how often the hash is read when Config.Interval is zero.
const DefaultInterval = 60 * time.Second

// DefaultTimeout bounds one whole read of the hash when Config.Timeout is zero: a
// million teams take about a second, so it leaves room for a slow network. A hung Redis
// fails a read sooner, at the client's read timeout for one command.
const DefaultTimeout = 30 * time.Second

// DefaultMaxEntries is the most teams the hash may hold when Config.MaxEntries is zero.
// A million live overrides take about a second of reading, in chunks, and a few hundred
// MB of memory at a refresh; past it, the hash is not read.
const DefaultMaxEntries = 1_000_000

// ScanCount is the COUNT hint of each HSCAN: about this many entries per command. On a
// hash of a million entries one such command takes Redis about 0.7 ms, under 1 ms on a
// quiet machine (5000 would take 3 ms, for a whole read only 10% faster).
const ScanCount = 1000

// StartWait bounds how long a gate waits, at start, for the first read of its hashes
// before it routes a record (internal/gate): until then a team restricted or raised by a
// live override would be routed at its GATE_OVERRIDES or default limit. A read that ends
// sooner, applied or failed, starts routing at once (no hash: a round trip); one still
// going then starts it on GATE_OVERRIDES, and its set applies when it lands. A million
// teams read in about a second.
const StartWait = 10 * time.Second

// MissingLogInterval is how often, at most, the warning that the hash is gone is
// repeated while it lasts; the first one is written at once.
const MissingLogInterval = 10 * time.Minute

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
	// Timeout bounds one whole read, every chunk of it; each command is also bounded by
	// the client's read timeout. Zero means DefaultTimeout.
	Timeout time.Duration
	// MaxEntries is the most teams the hash may hold (GATE_OVERRIDES_MAX_ENTRIES); a
	// larger hash is not read and the current set is kept. Zero means DefaultMaxEntries.
	MaxEntries int
	// Extra are further limits (GATE_LIMITS) whose per-team thresholds follow the
	// primary's overrides, scaled.
	Extra []Extra
}

// Extra is a further limiter and the factor its overrides are the primary's times: its
// default threshold over the primary's, Threshold / Primary.
type Extra struct {
	Lim                *limit.Limiter
	Threshold, Primary int64
}

// Scale returns m's thresholds times thr / primary (a further limit's threshold over the
// primary's), rounded half up, clamped to 1..limit.MaxThreshold. thr and primary must be
// at least 1.
func Scale(m map[string]int64, thr, primary int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for team, t := range m {
		out[team] = scale(t, thr, primary)
	}
	return out
}

// scale is t × thr / primary rounded half up: (2·t·thr + primary) / (2·primary), in 128
// bits (each is up to 2^43). In integers, not times a float factor: 2300/1000 is a hair
// under 2.3 as a float, and 25 × it rounded 57.5 down to 57.
func scale(t, thr, primary int64) int64 {
	hi, lo := bits.Mul64(uint64(t), 2*uint64(thr))
	lo, carry := bits.Add64(lo, uint64(primary), 0)
	hi += carry
	d := 2 * uint64(primary)
	if hi >= d {
		return limit.MaxThreshold // a quotient past 64 bits
	}
	q, _ := bits.Div64(hi, lo, d)
	return int64(min(max(q, 1), limit.MaxThreshold))
}

// Refresher reads the live overrides and applies them to a limiter.
type Refresher struct {
	cfg    Config
	lim    *limit.Limiter
	client redis.UniversalClient
	log    *slog.Logger

	mu   sync.Mutex // serialises refreshes
	live map[string]int64
	// version is live's VersionField (0: none, or nothing read since the hash was lost):
	// a later read of a lower one is a regression.
	version int64
	// lastOK is when live was last read (zero: never), what lastSuccess shows; a reload's
	// refresher inherits it with the set.
	lastOK time.Time
	// missingSince is when the hash was first found gone after a read of it (zero: it
	// is not gone, or was never read); missingLog paces the warning while it lasts.
	missingSince time.Time
	missingLog   *throttle.Every
	// afterScan, when set (tests), runs after each scan, before the marker is read again.
	afterScan func(attempt int)
	// first is closed once the first read has finished, applied or failed, or a set was
	// carried over (Inherit): FirstRead.
	first     chan struct{}
	firstOnce sync.Once

	loaded      prometheus.Gauge
	liveTeams   prometheus.Gauge
	lastSuccess prometheus.Gauge
	hashMissing prometheus.Gauge
	regressions prometheus.Counter
	errs        *prometheus.CounterVec
}

// Causes of a failed refresh, the label of gate_overrides_refresh_errors_total.
const (
	CauseRedis    = "redis"     // unreachable, timed out
	CauseMissing  = "missing"   // no hash
	CauseInvalid  = "invalid"   // an entry is not a valid limit, or the key not a hash
	CauseTooLarge = "too_large" // more teams than Config.MaxEntries
	CauseChanging = "changing"  // changed under two reads in a row
)

// New returns a Refresher for lim reading from client. reg may be nil.
func New(cfg Config, lim *limit.Limiter, client redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*Refresher, error) {
	if cfg.Key == "" {
		return nil, errors.New("overrides: no key")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.MaxEntries < 0 {
		return nil, errors.New("overrides: negative interval, timeout or maximum")
	}
	for _, e := range cfg.Extra {
		if e.Threshold < 1 || e.Primary < 1 {
			return nil, fmt.Errorf("overrides: further limit's thresholds %d / %d: want both at least 1", e.Threshold, e.Primary)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Refresher{
		cfg: cfg, lim: lim, client: client, log: log, first: make(chan struct{}),
		missingLog: throttle.NewEvery(MissingLogInterval, nil), // wall time: it paces a log
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
		hashMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_overrides_hash_missing",
			Help: "Whether the live overrides hash this gate read before is gone (Redis restarted empty, a lossy failover), the gate keeping the last set it read: 1 while it is, else 0.",
		}),
		regressions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_overrides_version_regressions_total",
			Help: "Reads of the live overrides hash at a lower version than the set this gate applied before (a failover to a replica that lacked the last writes), applied as read: the lost changes must be made again.",
		}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_overrides_refresh_errors_total",
			Help: "Refreshes that kept the current overrides, by cause: redis (unreachable, timeout), missing (a hash read before is gone: not counted for one that never existed), invalid (an entry is not a valid limit, or the key is not a hash), too_large (more teams than GATE_OVERRIDES_MAX_ENTRIES), changing (changed under two reads in a row).",
		}, []string{"cause"}),
	}
	for _, c := range []string{CauseRedis, CauseMissing, CauseInvalid, CauseTooLarge, CauseChanging} {
		r.errs.WithLabelValues(c)
	}
	r.loaded.Set(float64(len(lim.Overrides())))
	if reg != nil {
		for _, c := range []prometheus.Collector{r.loaded, r.liveTeams, r.lastSuccess, r.hashMissing, r.regressions, r.errs} {
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
	var failingSince time.Time                  // the first failure warned of and not yet over
	for {
		err := r.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, ErrMissing):
			// A missing hash is logged by Refresh, which knows whether it was there before.
			// Other failures are logged once a minute at most: an outage must not flood the
			// log.
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if ok, unlogged := logs.Allow(); ok {
				r.log.Warn("live overrides not refreshed; keeping the current ones", "err", err, "failures_unlogged", unlogged)
			}
		case (err == nil || errors.Is(err, ErrMissing) && !r.readBefore()) && !failingSince.IsZero():
			// Said, as the warning was: a set read back equal to the one in force is not
			// applied again, and nothing else would tell the operator that the fix took.
			// No hash, where none was ever read, ends the failure too: it is the normal
			// state of a fleet without live overrides, and Redis answered. (A hash read
			// before and gone now is reported by Refresh, until it is back.)
			attrs := []any{"key", r.cfg.Key, "failing_for", time.Since(failingSince).Round(time.Second).String()}
			if err != nil {
				attrs = append(attrs, "hash", "none")
			}
			r.log.Info("live overrides refreshed again", attrs...)
			failingSince = time.Time{}
			logs.Reset() // the next failure is warned of at once
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readBefore reports whether r has read its hash (or inherited a set read from it).
func (r *Refresher) readBefore() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live != nil
}

// FirstRead is closed once r has a set to route on: its first read of the hash has
// finished, applied or failed (fail-static: GATE_OVERRIDES then), or a rules reload
// carried over the set its rule's last refresher read (Inherit).
func (r *Refresher) FirstRead() <-chan struct{} { return r.first }

// HashKey is the hash r reads.
func (r *Refresher) HashKey() string { return r.cfg.Key }

// firstDone closes first, once.
func (r *Refresher) firstDone() { r.firstOnce.Do(func() { close(r.first) }) }

// Errors of a read that Refresh, Read and List return, wrapped with the key.
var (
	// ErrMissing: the hash does not exist.
	ErrMissing = errors.New("overrides: no live overrides hash")
	// ErrTooLarge: the hash holds more teams than the maximum (GATE_OVERRIDES_MAX_ENTRIES).
	ErrTooLarge = errors.New("overrides: live overrides hash too large")
	// ErrChanging: the hash changed during two reads in a row.
	ErrChanging = errors.New("overrides: live overrides hash changing while read")
	// ErrNotHash: the key holds another type than a hash (a SET by hand, say): the
	// operator's to fix, not Redis unreachable.
	ErrNotHash = errors.New("overrides: live overrides key is not a hash")
)

// Refresh reads the hash once and, if it is readable and valid, applies the merged set.
func (r *Refresher) Refresh(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.firstDone() // after the set is applied: what waits for it routes on it
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	h, err := read(rctx, r.client, r.cfg.Key, r.cfg.MaxEntries, r.afterScan)
	cancel()
	switch {
	case errors.Is(err, ErrMissing):
		if r.live != nil {
			// Gone after a read: counted, as the runbook's signal. A hash that never
			// existed (no override ever set, as for most rules) is no error: counted,
			// every rule without overrides rose on the dashboard's panel of refresh
			// errors once a refresh (a review, three gates of three rules).
			r.errs.WithLabelValues(CauseMissing).Inc()
		}
		r.missing()
		return err
	case errors.Is(err, ErrTooLarge):
		r.errs.WithLabelValues(CauseTooLarge).Inc()
		r.back(-1, err)
		return err
	case errors.Is(err, ErrChanging):
		r.errs.WithLabelValues(CauseChanging).Inc()
		r.back(-1, err)
		return err
	case errors.Is(err, ErrNotHash):
		r.errs.WithLabelValues(CauseInvalid).Inc()
		return err
	case err != nil:
		r.errs.WithLabelValues(CauseRedis).Inc()
		return err
	}
	live, err := Parse(h)
	if err != nil {
		r.errs.WithLabelValues(CauseInvalid).Inc()
		err = fmt.Errorf("reading %s: %w", r.cfg.Key, err)
		r.back(-1, err)
		return err
	}
	version := Version(h)
	if version > 0 && version < r.version {
		// Applied all the same (see the package documentation), said at once: a team's
		// raised limit reverting, or a removed block coming back, would go unseen.
		r.regressions.Inc()
		r.log.Warn("live overrides hash is older than the set applied before (a failover to a replica that lacked the last writes?); applying it as every gate reading it does: make the lost changes again with gate overrides set or delete (runbook: Overrides hash older)",
			"key", r.cfg.Key, "read_version", version, "applied_version", r.version, "live", len(live), "applied_live", len(r.live))
	}
	// A set equal to the one in force is not applied again: at a million teams, that
	// saves each gate two copies of it a minute, and the limiter's cached thresholds.
	changed := !maps.Equal(live, r.live)
	if changed || r.live == nil {
		merged, err := r.apply(live)
		if err != nil {
			r.errs.WithLabelValues(CauseInvalid).Inc()
			r.back(-1, err) // refused as an invalid entry is: the hash is there
			return err
		}
		if changed {
			r.log.Info("live overrides applied", "key", r.cfg.Key, "live", len(live), "effective", len(merged))
		}
	}
	r.live, r.version = live, version
	r.liveTeams.Set(float64(len(live)))
	r.lastOK = time.Now()
	r.lastSuccess.Set(float64(r.lastOK.Unix()))
	r.back(len(live), nil)
	return nil
}

// back records a read that found the hash: applied (live teams, err nil), or refused
// whole (err: an invalid entry, too large, changing), the last set read staying in force.
// Either way it is not missing: a lost hash written back with a bad entry is no longer
// reported lost (gate_overrides_hash_missing, GateOverridesHashMissing), its refusal being
// counted and warned of as any other's.
func (r *Refresher) back(live int, err error) {
	r.hashMissing.Set(0)
	if r.missingSince.IsZero() {
		return
	}
	attrs := []any{"key", r.cfg.Key, "missing_for", time.Since(r.missingSince).Round(time.Second).String()}
	msg := "live overrides hash is back"
	if err != nil {
		msg += ", but cannot be used; keeping the last set read"
		attrs = append(attrs, "err", err)
	} else {
		attrs = append(attrs, "live", live)
	}
	r.log.Info(msg, attrs...)
	r.missingSince = time.Time{}
	r.missingLog.Reset() // the next loss is reported at once
}

// apply lays live over the base set and swaps the result into the limiters.
func (r *Refresher) apply(live map[string]int64) (map[string]int64, error) {
	merged := maps.Clone(r.cfg.Base)
	if merged == nil {
		merged = make(map[string]int64, len(live))
	}
	maps.Copy(merged, live)
	if err := r.lim.SetOverrides(merged); err != nil {
		return nil, fmt.Errorf("applying %s: %w", r.cfg.Key, err)
	}
	for _, e := range r.cfg.Extra {
		// Cannot fail: Scale keeps every threshold in range.
		if err := e.Lim.SetOverrides(Scale(merged, e.Threshold, e.Primary)); err != nil {
			return nil, fmt.Errorf("applying %s to the %s limit: %w", r.cfg.Key, durtext.String(e.Lim.Config().Window), err)
		}
	}
	r.loaded.Set(float64(len(merged)))
	return merged, nil
}

// Inherit applies to r's limiters, before r's first read, the live set old last read from
// the same hash, and takes over its state: a rules reload builds new limiters, and they
// keep the rule's live overrides while the hash cannot be read (fail-static), and report
// it lost if it was.
func (r *Refresher) Inherit(old *Refresher) error {
	old.mu.Lock()
	live, since, lastOK, version := maps.Clone(old.live), old.missingSince, old.lastOK, old.version
	old.mu.Unlock()
	if live == nil || old.cfg.Key != r.cfg.Key {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.apply(live); err != nil {
		return err
	}
	r.live, r.missingSince, r.lastOK, r.version = live, since, lastOK, version
	r.firstDone()
	r.liveTeams.Set(float64(len(live)))
	if !lastOK.IsZero() {
		// The set in force was read then: GateOverridesStale keeps measuring from it.
		r.lastSuccess.Set(float64(lastOK.Unix()))
	}
	if !since.IsZero() {
		r.hashMissing.Set(1)
	}
	return nil
}

// missing records a read that found no hash. One this gate read before is gone: the
// last set read stays in force, and the loss is reported at warning level, at once and
// then at most every MissingLogInterval, with the gauge. One never read is the normal
// state of a fleet without live overrides.
func (r *Refresher) missing() {
	if r.live == nil {
		r.log.Debug("no live overrides hash; keeping the current overrides", "key", r.cfg.Key)
		return
	}
	r.hashMissing.Set(1)
	// A hash written anew starts its versions again: no regression.
	r.version = 0
	if r.missingSince.IsZero() {
		r.missingSince = time.Now()
	}
	if ok, unlogged := r.missingLog.Allow(); ok {
		r.log.Warn("live overrides hash is gone; keeping the last set read until it is restored (runbook: Overrides hash lost)",
			"key", r.cfg.Key, "live", len(r.live), "missing_for", time.Since(r.missingSince).Round(time.Second).String(),
			"refreshes_unlogged", unlogged)
	}
}

// Read reads the hash at key in short commands (see the package documentation): its
// fields as they are, MarkerField included. A hash of more than maxEntries teams is not
// read (ErrTooLarge; 0 means DefaultMaxEntries); a missing one is ErrMissing; one that
// changed under two reads in a row is ErrChanging. ctx bounds the whole read.
func Read(ctx context.Context, c redis.UniversalClient, key string, maxEntries int) (map[string]string, error) {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	return read(ctx, c, key, maxEntries, nil)
}

func read(ctx context.Context, c redis.UniversalClient, key string, maxEntries int, afterScan func(int)) (map[string]string, error) {
	for attempt := 1; ; attempt++ {
		h, changed, err := readOnce(ctx, c, key, maxEntries, func() {
			if afterScan != nil {
				afterScan(attempt)
			}
		})
		if err != nil || !changed {
			return h, err
		}
		if attempt == 2 {
			return nil, fmt.Errorf("%w: %s changed under two reads in a row (the next refresh tries again)", ErrChanging, key)
		}
	}
}

// readOnce makes one read: HLEN and the marker, HSCAN to the end, HLEN and the marker
// again. changed reports that the hash changed under the scan, h then being unusable:
// the marker differs between its two reads, or the length does, or the scan did not
// return as many entries as the hash holds.
func readOnce(ctx context.Context, c redis.UniversalClient, key string, maxEntries int, afterScan func()) (h map[string]string, changed bool, err error) {
	before, err := readHead(ctx, c, key)
	if err != nil {
		return nil, false, err
	}
	if before.len == 0 {
		return nil, false, fmt.Errorf("%w: %s", ErrMissing, key)
	}
	if teams := before.teams(before.len); teams > int64(maxEntries) {
		return nil, false, tooLarge(key, teams, maxEntries)
	}
	// HSCAN returns every entry present for the whole scan, some possibly twice (the
	// map keeps one). COUNT is a hint, and the hash may grow under the scan: the maximum
	// is checked as it goes.
	h = make(map[string]string, before.len)
	var cursor uint64
	for {
		kv, next, err := c.HScan(ctx, key, cursor, "", ScanCount).Result()
		if err != nil {
			return nil, false, fmt.Errorf("reading %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		if teams := before.teams(int64(len(h))); teams > int64(maxEntries) {
			return nil, false, tooLarge(key, teams, maxEntries)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	afterScan()
	after, err := readHead(ctx, c, key)
	if err != nil {
		return nil, false, err
	}
	if after != before || int64(len(h)) != before.len {
		return nil, true, nil
	}
	return h, false, nil
}

// head is what a read checks before and after its scan: the hash's length (0: no
// hash) and its marker.
type head struct {
	len        int64
	marker     string
	hasMarker  bool
	hasVersion bool
}

// teams is how many of n fields are teams: all but the marker and the version.
func (hd head) teams(n int64) int64 {
	if hd.hasMarker {
		n--
	}
	if hd.hasVersion {
		n--
	}
	return n
}

// readHead reads HLEN, the marker and whether there is a version in one round trip; a
// missing marker or version (redis.Nil) is not an error.
func readHead(ctx context.Context, c redis.UniversalClient, key string) (head, error) {
	var n *redis.IntCmd
	var m, v *redis.StringCmd
	_, perr := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.HLen(ctx, key)
		m = p.HGet(ctx, key, MarkerField)
		v = p.HGet(ctx, key, VersionField)
		return nil
	})
	err := n.Err()
	if err == nil && perr != nil && !errors.Is(perr, redis.Nil) {
		// A connection refused with a Redis reply (a login the primary or the sentinels
		// refuse) leaves the commands without an error, HLEN reading 0: the pipeline's
		// own error is the only one, and the hash is not missing.
		err = perr
	}
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return head{}, fmt.Errorf("%w: %s (%w): delete it, and set overrides with gate overrides set", ErrNotHash, key, err)
		}
		return head{}, fmt.Errorf("reading %s: %w", key, err)
	}
	for _, c := range []*redis.StringCmd{m, v} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return head{}, fmt.Errorf("reading %s: %w", key, err)
		}
	}
	return head{len: n.Val(), marker: m.Val(), hasMarker: m.Err() == nil, hasVersion: v.Err() == nil}, nil
}

func tooLarge(key string, teams int64, maxEntries int) error {
	return fmt.Errorf("%w: %s holds %d teams, more than the %d allowed (GATE_OVERRIDES_MAX_ENTRIES)", ErrTooLarge, key, teams, maxEntries)
}

// Version returns a hash's VersionField, 0 when it has none (written by an older gate, or
// restored by hand) or one that is not a whole number above 0 (edited by hand): no
// version to compare.
func Version(h map[string]string) int64 {
	v, err := strconv.ParseInt(h[VersionField], 10, 64)
	if err != nil || v < 1 {
		return 0
	}
	return v
}

// Parse reads a hash's fields into team limits, skipping MarkerField and VersionField. Any entry that is
// not a whole number from 1 to limit.MaxThreshold, or an empty team, fails the whole set.
func Parse(h map[string]string) (map[string]int64, error) {
	out := make(map[string]int64, len(h))
	for team, v := range h {
		if team == MarkerField || team == VersionField {
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

// setWithinScript is SetWithin: HSET of the team and the marker (ARGV[1] to ARGV[4]), and
// of the version (ARGV[6]) one higher, unless the team is not in the hash and the hash
// holds ARGV[5] teams already, as a read counts them (HLEN, less the marker and the
// version): then it writes nothing and returns how many it holds; -1 once written. The
// count and the write are one command, so no other write comes between. The version is
// raised with HGET and HSET, which an ACL for the script grants already (not HINCRBY);
// one that is not a number (edited by hand) starts again at 1.
var setWithinScript = redis.NewScript(`
local n = redis.call('HLEN', KEYS[1])
if n > 0 and redis.call('HGET', KEYS[1], ARGV[3]) then n = n - 1 end
local v = redis.call('HGET', KEYS[1], ARGV[6])
if v then n = n - 1 end
if not redis.call('HGET', KEYS[1], ARGV[1]) and n >= tonumber(ARGV[5]) then return n end
v = math.max(math.floor(tonumber(v) or 0), 0) + 1
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], string.format('%d', v))
return -1`)

// SetWithin writes one team's live limit, and the marker, in the hash at key, which the
// gates read with a maximum of maxEntries teams (0: DefaultMaxEntries): a team not in it yet is refused when it holds maxEntries already, as
// every gate would refuse the hash whole (ErrTooLarge) and keep its limits, applying
// neither this override nor any other change to it. Refused so, it returns the teams the
// hash holds and an error wrapping ErrTooLarge. The count and the write are one script:
// checked apart, two operators adding a team each to a hash one short of the maximum both
// passed the check, and the hash ended over it.
func SetWithin(ctx context.Context, c redis.UniversalClient, key, team string, lim int64, now time.Time, maxEntries int) (int64, error) {
	if team == "" || team == MarkerField || team == VersionField {
		return 0, fmt.Errorf("team %q cannot be overridden", team)
	}
	if _, err := ParseLimit(strconv.FormatInt(lim, 10)); err != nil {
		return 0, err
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	n, err := setWithinScript.Run(ctx, c, []string{key}, team, lim, MarkerField, now.UTC().Format(time.RFC3339Nano), maxEntries, VersionField).Int64()
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		// Said as a read says it: the script's error adds its hash and line to Redis's.
		return 0, fmt.Errorf("setting %s: %w: %s: delete it, and set overrides with gate overrides set", team, ErrNotHash, key)
	}
	if err != nil {
		return 0, fmt.Errorf("setting %s in %s: %w", team, key, err)
	}
	if n >= 0 {
		return n, tooLarge(key, n+1, maxEntries)
	}
	return 0, nil
}

// deleteScript is Delete: HDEL and the marker, and the version (ARGV[4]) one higher, in a
// hash that exists only. The marker and the version move only when a team went: the
// marker is when the live set last changed (gate overrides list).
var deleteScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n > 0 then
  local v = math.max(math.floor(tonumber(redis.call('HGET', KEYS[1], ARGV[4])) or 0), 0) + 1
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3], ARGV[4], string.format('%d', v))
end
return n`)

// Delete removes one team's live limit, keeping the marker so an empty set stays
// readable as empty. It reports whether the team was there; when it was not, the hash is
// left as it is. A missing hash is left missing (ErrMissing): writing the marker would
// make it an empty live set, and every gate that kept the set of a lost hash would drop
// it.
func Delete(ctx context.Context, c redis.UniversalClient, key, team string, now time.Time) (bool, error) {
	n, err := deleteScript.Run(ctx, c, []string{key}, team, MarkerField, now.UTC().Format(time.RFC3339Nano), VersionField).Int64()
	if err != nil {
		return false, fmt.Errorf("deleting %s from %s: %w", team, key, err)
	}
	if n < 0 {
		return false, fmt.Errorf("%w: %s", ErrMissing, key)
	}
	return n > 0, nil
}

// List returns the live limits, the marker's time ("" when the hash has none) and the
// hash's version (Version: 0 for none), read as Read reads them; a missing hash is an
// empty set.
func List(ctx context.Context, c redis.UniversalClient, key string, maxEntries int) (map[string]int64, string, int64, error) {
	h, err := Read(ctx, c, key, maxEntries)
	if errors.Is(err, ErrMissing) {
		return map[string]int64{}, "", 0, nil
	}
	if err != nil {
		return nil, "", 0, err
	}
	m, err := Parse(h)
	if err != nil {
		return nil, "", 0, fmt.Errorf("reading %s: %w", key, err)
	}
	return m, h[MarkerField], Version(h), nil
}
