// The tick's metrics (gate_limiter_*, gate_fleet_gates, gate_redis_evicted_keys_total). The series of every batch
// outcome, profile-write result, drop reason, read reason, Redis command and error cause
// of each instance exist at zero from the start (the redirect kinds too: NewRedirects), so a rate of one is defined
// before its first event. They are registered on New's registry when it is not nil, and a
// registration that fails fails New. The redirect counter is Config.Redirects' when set,
// the dropped counter Config.Dropped's.

package tick

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/limit"
)

type metrics struct {
	tickDur       prometheus.Histogram
	pipelineDur   *prometheus.HistogramVec
	pipelineSize  *prometheus.HistogramVec
	tickCommands  prometheus.Histogram
	pendingSync   prometheus.Gauge
	pendingWrites prometheus.Gauge
	fleetGates    prometheus.Gauge
	drift         prometheus.Histogram
	staleness     prometheus.Histogram
	errors        *prometheus.CounterVec
	commands      *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	reads         *prometheus.CounterVec
	skippedReads  prometheus.Counter
	redirects     *prometheus.CounterVec
	batches       *prometheus.CounterVec
	clockOffset   prometheus.Gauge
	limitVariants prometheus.Gauge
	profiles      *prometheus.CounterVec
	evicted       *prometheus.CounterVec
}

// Dropped counts the counts dropped unwritten (gate_limiter_dropped_counts_total), by
// reason. Shared by a gate's successive rule sets' ticks (Config.Dropped): a rule set a
// reload retired keeps writing what Redis refused (Drain), and what it drops meanwhile
// was counted on its own metrics, which the gate no longer shows, so
// GateLimiterCountsDropped never saw it.
type Dropped struct{ c *prometheus.CounterVec }

// NewDropped makes the counter, registered with reg when it is not nil.
func NewDropped(reg prometheus.Registerer) (*Dropped, error) {
	d := &Dropped{c: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_dropped_counts_total",
		Help: "Counted records never written to Redis, by reason (stale_epoch, write_cap)."}, []string{"reason"})}
	for _, r := range []string{"stale_epoch", "write_cap"} {
		d.c.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(d.c); err != nil {
			return nil, fmt.Errorf("registering the dropped counts counter: %w", err)
		}
	}
	return d, nil
}

// newMetrics makes the tick's metrics, registered with reg when it is not nil; the redirect
// counter is redirects' (registered by its maker) when it is not nil, else its own, and
// the dropped counter dropped's likewise. interval is the tick's (TickInterval); cluster
// (ModeCluster) has no instance series of the evictions, which are counted by primary.
func newMetrics(reg prometheus.Registerer, instances int, cluster bool, redirects *Redirects, dropped *Dropped, interval time.Duration) (*metrics, error) {
	// 0.5 ms .. 65.5 s: a pipeline as long as a long GATE_TICK_INTERVAL is measured, not +Inf.
	ms := prometheus.ExponentialBuckets(0.0005, 2, 18)
	m := &metrics{
		tickDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gate_limiter_tick_duration_seconds",
			Help: "Time one tick takes: sweep, pipelines, applying reads.", Buckets: tickBuckets(interval)}),
		pipelineDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gate_limiter_pipeline_duration_seconds",
			Help: "Time one Redis pipeline takes, by Redis instance (its index in GATE_REDIS_URLS; in cluster mode the address of the primary it went to, a series per primary the gate writes to, those of primaries gone from the cluster deleted).", Buckets: ms}, []string{"redis_instance"}),
		pipelineSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gate_limiter_pipeline_size",
			Help: "Teams per pipeline, by kind (write, read).", Buckets: prometheus.ExponentialBuckets(1, 4, 10)}, []string{"kind"}),
		tickCommands: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gate_limiter_tick_redis_commands",
			Help: "Redis commands sent per tick.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		pendingSync: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_limiter_pending_sync",
			Help: "Reads due but not made in the last tick (over budget): the backpressure signal."}),
		pendingWrites: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_limiter_pending_writes",
			Help: "(team, epoch) counts waiting for Redis after the last tick."}),
		fleetGates: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_fleet_gates",
			Help: "Gates sharing this gate's Redis prefix, as counted in Redis every 5 s or every tick when GATE_TICK_INTERVAL is longer (0: not counted yet): each gate's share of a key's floor, under which the key is neither cached nor written nor read, is GATE_SYNC_FLOOR / this of its threshold."}),
		drift: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gate_limiter_estimate_drift",
			Help:    "(local level - global estimate) / threshold at each read: how far this gate's view had strayed.",
			Buckets: []float64{-1, -0.5, -0.2, -0.1, -0.05, -0.01, 0, 0.01, 0.05, 0.1, 0.2, 0.5, 1}}),
		staleness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gate_limiter_sync_staleness_seconds",
			Help: "Age of a team's view when a read replaced it.", Buckets: prometheus.ExponentialBuckets(0.25, 2, 12)}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_errors_total",
			Help: "Redis failures, by cause (timeout, connection, tls, redis, oom, readonly, misconf, noreplicas, parse) and Redis instance (its index in GATE_REDIS_URLS; " +
				"in cluster mode the address of the primary that failed, a series per primary the gate writes to, those of primaries gone from the cluster deleted): " +
				"one a tick per cause among the errors of its pipeline (per primary in cluster mode) (a split tick's two counted as one), tls a TLS handshake failed on a certificate (Redis's or the gate's) or a TLS version the two do not share, oom, readonly, misconf and noreplicas being writes refused (maxmemory under noeviction, a replica, a failed snapshot, min-replicas-to-write); parse one per unreadable counter. The fleet count (every 5 s, or every tick when GATE_TICK_INTERVAL is longer) and the clock check (every minute) count their own failures there too: on instance 0, in cluster mode on the primary that answered, as parse counts on the primary the value was read from."}, []string{"cause", "redis_instance"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_redis_commands_total",
			Help: "Redis commands issued, by command."}, []string{"command"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_reads_total",
			Help: "Team reads planned, by reason (first, pending, hot, cadence, ttl, retry: the last read of the team failed; profile: GATE_THRESHOLD_MODE=adaptive, a look at its learned profile; primed: a key of the records waiting in a partition this gate took over, read before they are routed)."}, []string{"reason"}),
		skippedReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "gate_limiter_reads_skipped_total",
			Help: "Due reads put off to a later tick because a tick's budget was spent."}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_write_batches_total",
			Help: "Batches of counts sent to Redis, by outcome: applied; duplicate (a resend that found its batch applied: an earlier reply was lost); refused (an error reply: its counts go again in a new batch); unknown (no reply: resent as it is next tick); replayed (confirmed, then lost by Redis in a failover or restart: its counts sent again); lost (the same, confirmed too long ago to be kept, one per lane and event)."}, []string{"outcome"}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_limiter_clock_offset_seconds",
			Help: "This host's clock minus the first Redis instance's (in cluster mode the primary of the fleet's live key, the same for every gate) (TIME, corrected by half the round trip), measured once a minute: epochs are cut and ticks aligned on the hosts' clocks, and a gate off the others by more than a quarter of GATE_TICK_INTERVAL reads their counts a tick late."}),
		limitVariants: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_fleet_limit_variants",
			Help: "The sets of limits the gates sharing this gate's Redis prefix enforced in the last whole minute, as each gate hashes its own (the limits_hash of its start and rules lines), counted once a minute: 1 when they agree; more while a rules change reaches every gate (a minute or two), or for as long as some gate runs other rules or GATE_* limits, whose counts then corrupt the shared counters (GateFleetLimitsDisagree). 0 before the first count."}),
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_profile_writes_total",
			Help: "GATE_THRESHOLD_MODE=adaptive: learned profiles this gate folded and sent, by result: set; lost (another gate had folded it first: harmless, the fold is deterministic); withheld (not sent: this host's clock was off Redis's by a window or more, or not yet measured, no clock check having had TIME's answer nor found TIME refused, and its folds would take the wrong windows' counts)."}, []string{"result"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_redis_evicted_keys_total",
			Help: "Keys Redis reports it evicted (INFO stats evicted_keys, read once a minute) since this gate first looked, by Redis instance (its index in GATE_REDIS_URLS; in cluster mode the address of each primary, from its first look, those of primaries gone from the cluster deleted): any key, the gate's among them; an evicted counter lets its team past its limit, an evicted write sequence a resent batch count twice. Stays 0 when INFO is refused."}, []string{"redis_instance"}),
	}
	for o := range numOutcomes {
		m.batches.WithLabelValues(o.String())
	}
	// Every reason and command from the start, at zero (TestReadsAndCommandsExistFromTheStart).
	for r := range limit.NumReadReasons {
		m.reads.WithLabelValues(r.String())
	}
	for _, c := range []string{cmdEval, cmdMget, cmdSet, cmdGet, cmdIncrby, cmdPexpire} {
		m.commands.WithLabelValues(c)
	}
	for _, r := range []string{"set", "lost", "withheld"} {
		m.profiles.WithLabelValues(r)
	}
	for i := range instances {
		for c := range numCauses {
			m.errors.WithLabelValues(c.String(), fmt.Sprint(i))
		}
		if !cluster { // a cluster's are its primaries' (lookForEviction)
			m.evicted.WithLabelValues(fmt.Sprint(i))
		}
	}
	if redirects == nil {
		own, err := NewRedirects(reg)
		if err != nil {
			return nil, err
		}
		redirects = own
	}
	m.redirects = redirects.c
	if dropped == nil {
		own, err := NewDropped(reg)
		if err != nil {
			return nil, err
		}
		dropped = own
	}
	m.dropped = dropped.c
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.tickDur, m.pipelineDur, m.pipelineSize, m.tickCommands, m.pendingSync,
		m.pendingWrites, m.fleetGates, m.drift, m.staleness, m.errors, m.commands, m.reads, m.skippedReads, m.batches, m.clockOffset, m.limitVariants, m.profiles, m.evicted} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering tick metrics: %w", err)
		}
	}
	return m, nil
}

// tickBuckets are the tick duration's buckets: interval × 2^k from 1/2048 to 64 times the
// interval, so that the interval and its halves and doubles are bounds. GateTickSlow
// compares histogram_quantile(0.99) with threshold × the interval (1 × by default), and
// the quantile interpolates within the bucket its rank falls in: with fixed bounds around
// the interval (0.512 and 1.024 s around 1 s), ticks all within it, such as those a Redis
// that hangs cuts at 3/4 of it, read as a p99 of 1.02 s, and the alert fired. A bound at
// the interval keeps the p99 of ticks within it within it. Up to 64 intervals: a tick
// that long is measured, not +Inf.
func tickBuckets(interval time.Duration) []float64 {
	if interval <= 0 {
		interval = DefaultTickInterval
	}
	return prometheus.ExponentialBuckets(interval.Seconds()/2048, 2, 18)
}

// The commands gate_limiter_redis_commands_total counts, its command label.
const (
	cmdEval    = "eval"    // the write script, a hold flag's, a profile's
	cmdMget    = "mget"    // the reads
	cmdSet     = "set"     // a lane's one hold flag; the gate's live key (markLive)
	cmdGet     = "get"     // the fleet count
	cmdIncrby  = "incrby"  // the fleet count
	cmdPexpire = "pexpire" // the fleet count
)
