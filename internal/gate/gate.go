// Package gate assembles a gate from its configuration: the limiter (and one per further
// limit), the Redis clients and the tick that syncs them, the live overrides, the router
// and the Kafka consumer, with their metrics on one registry. cmd/gate's serve runs one;
// cmd/gate-dev runs two in one process. Nothing here starts a goroutine or connects:
// the caller runs the parts, and stops them in order.
package gate

import (
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/buildinfo"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/throttle"
	"github.com/capturegate/gate/internal/tick"
)

// Gate is one gate: its limiter, the Redis clients and the tick that syncs it, the
// router that asks it, and the Kafka consumer that routes through that router, with their
// metrics on one registry.
type Gate struct {
	Reg      *prometheus.Registry
	Lim      *limit.Limiter
	Extra    []*limit.Limiter // one per GATE_LIMITS entry
	Clients  []redis.UniversalClient
	Ticker   *tick.Ticker
	Router   *route.Router
	Consumer *consume.Consumer
	// Overrides keeps the limiter's per-team thresholds in step with the live hash in
	// the first Redis instance; serve runs it (RunOverrides). Nil with rules: each rule
	// generation runs its own refreshers (RunTick). The consumer routes nothing before
	// their first read, for at most overrides.StartWait (awaitOverrides).
	//
	// With rules, Lim, Ticker and Router are the first generation's (the first rule's
	// first limit, its tick, its router), as the gate started; CurrentRules is what is in
	// use since the last reload.
	Overrides *overrides.Refresher

	// With rules: the generation in use, the reloader of GATE_RULES_FILE (nil for
	// Options.Rules), and what a new generation is built from (rules.go).
	gen      atomic.Pointer[generation]
	reloader *rules.Reloader
	// checkNow takes CheckRulesNow's requests to RunTick's loop, which alone reads the
	// file and switches generations; each sends what the read found on its channel.
	checkNow  chan chan string
	cfg       config.Config
	instances []redis.UniversalClient
	log       *slog.Logger
	// seed is every limiter's hash seed and the outcome aggregates' (limit.Config.HashSeed,
	// consume.Config.HashSeed): a record's team, hashed once for its outcome row, is
	// checked with that hash.
	seed      maphash.Seed
	writer    string
	gens      int               // generations built
	reload    time.Duration     // how often the rules file is read again
	topics    *route.TopicWatch // the rules' own topics, shared by the routers and the consumer
	redirects *tick.Redirects   // on Redis Cluster, the client's redirects, shared by the rule sets' ticks
	fleet     *tick.Fleet       // the gate's count of its fleet, shared by the rule sets' ticks
	evictions *tick.Evictions   // the gate's watch of Redis's evictions, shared by the rule sets' ticks
	warnings  *tick.Warnings    // the clock check's and the limits agreement's warnings, shared by the rule sets' ticks
	unwritten *tick.Unwritten   // what retired rule sets' ticks hold unwritten, added to the others' reads
	dropped   *tick.Dropped     // gate_limiter_dropped_counts_total, shared by the rule sets' ticks

	// routing is set once the consumer may route: the first reads of the live overrides
	// have finished, or overrides.StartWait has passed (awaitOverrides).
	routing atomic.Bool
	// primeOff is when priming may be tried again (unix ns) after one whose tick failed:
	// a catch-up primes every poll, and with Redis hung each would wait for a tick
	// bound to fail. primeLog paces the line that says so.
	primeOff atomic.Int64
	primeLog *throttle.Every
	// primeMu orders a prime's marks with a reload's copy of the old limiters' state
	// (newGeneration, then pending set): a prime that marked its keys before the copy
	// finds pending after its read and reads them into it too (its read may land in the
	// old limiters after the copy); one after it marks them in both. Held for no read.
	primeMu sync.Mutex
	// pending is the generation a reload has built and not put in use yet (RunTick).
	pending *generation
	// built is the generation the reloader's check built (checkReload), for RunTick to
	// put in use; RunTick's goroutine's, which runs the check.
	built *generation
}

// primePause is how long priming rests after a prime whose tick failed.
const primePause = 10 * time.Second

// RuleLimits is one rule's limiters and where their keys are in Redis.
type RuleLimits struct {
	Name        string
	Lims        []*limit.Limiter // one per limit, the first primary
	KeyPrefixes []string         // each limiter's (config.RuleKeyPrefix)
	// Force are the keys that take the rule's action whatever their level (a rule's
	// force, GATE_FORCE_OVERFLOW without rules), for the team view to say so.
	Force []string
	// Key is where the rule reads its key (GATE_KEY_FROM without rules): the team view
	// says what is wrong with a key no rule builds (a composite key's ':' not escaped).
	Key route.KeyFrom
	// Cost is what the rule's records count (GATE_COST without rules): its thresholds and
	// levels are in events, or in bytes of value.
	Cost route.Cost
	// Shadow: the rule is counted and judged, and never changes where a record goes, so
	// the team view says what it would do without calling its keys limited.
	Shadow bool
}

// Options are what the caller changes in a gate: serve sets Writer and Clock, the demo
// stack more.
type Options struct {
	// WrapRouter, if set, stands between the consumer and the router (the demo counts
	// outcomes per team through it).
	WrapRouter func(consume.Router) consume.Router
	// ClientOpts are added after the consumer's own Kafka client options.
	ClientOpts []kgo.Opt
	// Writer names this process in Redis (tick.Config.Writer); empty means a random name.
	Writer string
	// Host names this gate in its outcome rows (GATE_OUTCOMES_TOPIC): the host name.
	Host string
	// Clock paces the reads of the Kafka and Redis TLS files (config.Reload); the wall
	// clock if nil.
	Clock clock.Clock
	// RulesReload is how often GATE_RULES_FILE is read again (0: rules.DefaultReloadInterval).
	RulesReload time.Duration
	// Rules, if set, replace the gate's one limit on GATE_KEY_FROM (and GATE_LIMITS,
	// GATE_OVERRIDES, GATE_FORCE_OVERFLOW, GATE_COST, GATE_LIMIT_MODE and
	// GATE_THRESHOLD_MODE, which each rule says for itself): every rule gets its limiters,
	// its keys under config.RuleKeyPrefix, its overrides hash, and the router checks every
	// record against them (route.NewRules).
	Rules *rules.Set
}

// New builds a gate from cfg. Nothing connects or starts: every step that can fail
// runs here, before the caller starts anything. On success the caller owns the Redis
// clients and closes them (CloseRedis) after the tick's final flush; on failure they are
// closed already.
func New(cfg config.Config, log *slog.Logger, o Options) (_ *Gate, err error) {
	g := &Gate{Reg: prometheus.NewRegistry(), log: log, seed: maphash.MakeSeed(), primeLog: throttle.NewEvery(time.Minute, nil)}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		BuildInfoCollector(buildinfo.Get()),
	} {
		if err := g.Reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering runtime metrics: %w", err)
		}
	}
	set, err := g.ruleSet(cfg, o, log)
	if err != nil {
		return nil, err
	}
	if set == nil {
		if err := g.limiters(cfg); err != nil {
			return nil, err
		}
	}
	ropts, err := cfg.RedisOptions()
	if err != nil {
		return nil, err
	}
	// The TLS files are read again when they change; their metrics carry target=kafka
	// or target=redis.
	reload := config.Reload{Clock: o.Clock, Log: log.With("component", "tls"), Reg: g.Reg}
	if g.Clients, err = cfg.DialRedis(ropts, reload); err != nil {
		return nil, fmt.Errorf("configuring Redis clients: %w", err)
	}
	defer func() {
		if err != nil {
			g.CloseRedis(log)
		}
	}()
	instances := g.Clients
	if fc, ok := g.Clients[0].(*redis.Client); ok && cfg.SyncConfig().Mode == tick.ModeSentinel {
		// A dial hook, no goroutine: it logs and counts every switch of primary.
		if _, err = tick.WatchPrimary(fc, string(cfg.RedisSentinelMaster), g.Reg, log.With("component", "redis"), nil); err != nil {
			return nil, err
		}
	}
	if set != nil {
		// Every part that counts, one generation per rule set (rules.go).
		g.cfg, g.instances, g.writer = cfg, instances, o.Writer
		g.topics = route.NewTopicWatch(cfg.OverflowTopic)
		g.fleet = tick.NewFleet()
		g.evictions = tick.NewEvictions()
		g.warnings = tick.NewWarnings()
		g.unwritten = tick.NewUnwritten()
		// On the gate's registry, not a generation's: a retired rule set's tick drops
		// counts after the gate stopped showing its metrics (tick.Dropped).
		if g.dropped, err = tick.NewDropped(g.Reg); err != nil {
			return nil, err
		}
		if cc, ok := instances[0].(*redis.ClusterClient); ok {
			// One redirect counter for the client's life, watching it before any tick
			// makes a node client: each rule set's tick counts into it (tick.Redirects).
			if g.redirects, err = tick.NewRedirects(g.Reg); err != nil {
				return nil, err
			}
			g.redirects.Watch(cc)
		}
		gen, err := g.newGeneration(set)
		if err != nil {
			return nil, err
		}
		g.topics.Use(gen.topics)
		g.gen.Store(gen)
		g.Reg.MustRegister(genCollector{g})
		g.Lim, g.Ticker, g.Router = gen.rules[0].Lims[0], gen.ticker, gen.router
	} else {
		scfg := cfg.SyncConfig()
		scfg.Writer = o.Writer
		tlims := []tick.Limit{{Lim: g.Lim, KeyPrefix: cfg.PrimaryKeyPrefix()}}
		for i, l := range g.Extra {
			tlims = append(tlims, tick.Limit{Lim: l, KeyPrefix: cfg.LimitKeyPrefix(i)})
		}
		scfg.LiveLimits = limitsDesc([]ruleDesc{fixedDescOf(cfg.KeyFrom.KeyFrom, cfg.ForceOverflow, len(tlims))}, tlims)
		if g.Ticker, err = tick.NewMulti(tlims, instances, scfg, g.Reg, log.With("component", "tick")); err != nil {
			return nil, fmt.Errorf("building the tick: %w", err)
		}
		if err := g.overridesAndRouter(cfg, instances[0], log); err != nil {
			return nil, err
		}
	}
	ccfg, err := cfg.ConsumeConfig(reload)
	if err != nil {
		return nil, err
	}
	ccfg.ClientOpts = append(ccfg.ClientOpts, o.ClientOpts...)
	ccfg.Gate = o.Host
	ccfg.HashSeed = g.seed
	// A restarted gate routes its first record on the live overrides, not GATE_OVERRIDES
	// alone: a team cut off by one would be let through, a team raised by one diverted.
	ccfg.BeforeRouting = g.awaitOverrides
	// A partition taken over with records waiting: their keys read before they are routed.
	ccfg.Prime = g.prime
	if set != nil {
		// A rule's own topic is one of the gate's: checked at start with the others, and
		// watched while the gate runs (consume's ruletopics.go).
		ccfg.OutputTopics = append(ccfg.OutputTopics, g.gen.Load().topics...)
		ccfg.RuleTopics = g.topics
		ccfg.RuleTopicAt = func(t string) string { return g.gen.Load().set.TopicAt(t) }
	}
	var r consume.Router = g.Router
	if set != nil {
		r = switchRouter{g} // the current generation's router, record by record
	}
	if o.WrapRouter != nil {
		r = o.WrapRouter(r) // with rules, over the router of the rules in use
	}
	if g.Consumer, err = consume.New(ccfg, r, nil, g.Reg, log.With("component", "consume")); err != nil {
		return nil, fmt.Errorf("building the Kafka consumer: %w", err)
	}
	return g, nil
}

// limiters builds the limiter and one per GATE_LIMITS entry.
func (g *Gate) limiters(cfg config.Config) error {
	// With further limits, each limiter's metrics carry its window as the label limit;
	// with one, they stay as they always were.
	limReg := func(w time.Duration) prometheus.Registerer {
		if len(cfg.Limits) == 0 {
			return g.Reg
		}
		return prometheus.WrapRegistererWith(prometheus.Labels{"limit": w.String()}, g.Reg)
	}
	var err error
	lc := cfg.LimitConfig()
	lc.HashSeed = g.seed
	if g.Lim, err = limit.New(lc, nil, limReg(cfg.Window)); err != nil {
		return fmt.Errorf("building the limiter: %w", err)
	}
	for _, lc := range cfg.ExtraLimitConfigs() {
		lc.HashSeed = g.seed
		l, err := limit.New(lc, nil, limReg(lc.Window))
		if err != nil {
			return fmt.Errorf("building the %s limiter: %w", durtext.String(lc.Window), err)
		}
		g.Extra = append(g.Extra, l)
	}
	return nil
}

// overridesAndRouter builds the overrides refresher and the router of a gate without
// rules.
func (g *Gate) overridesAndRouter(cfg config.Config, client redis.UniversalClient, log *slog.Logger) error {
	var ovrExtra []overrides.Extra
	for i, l := range g.Extra {
		ovrExtra = append(ovrExtra, overrides.Extra{Lim: l, Threshold: cfg.Limits[i].Threshold, Primary: cfg.Threshold})
	}
	ocfg := cfg.OverridesConfig()
	ocfg.Extra = ovrExtra
	var err error
	if g.Overrides, err = overrides.New(ocfg, g.Lim, client, g.Reg, log.With("component", "overrides")); err != nil {
		return fmt.Errorf("building the overrides refresher: %w", err)
	}
	if g.Router, err = route.NewMulti(cfg.RouteConfig(), append([]*limit.Limiter{g.Lim}, g.Extra...), g.Reg); err != nil {
		return fmt.Errorf("building the router: %w", err)
	}
	return nil
}

// BuildInfoCollector is gate_build_info: always 1, its labels naming the build (the same
// fields as `gate version` and the start-up line), so a dashboard can tell which version
// each gate runs: count by (version) (gate_build_info).
func BuildInfoCollector(i buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gate_build_info",
		Help: "Always 1; the labels name the gate's build: version, commit, Go and franz-go versions.",
		ConstLabels: prometheus.Labels{
			"version":          i.Version,
			"commit":           i.Commit,
			"go_version":       i.GoVersion,
			"franz_go_version": i.FranzGo,
		},
	})
	g.Set(1)
	return g
}

// CloseRedis closes the Redis clients; call it after the tick's final flush.
func (g *Gate) CloseRedis(log *slog.Logger) {
	for i, c := range g.Clients {
		if err := c.Close(); err != nil {
			log.Warn("closing redis client", "instance", i, "err", err)
		}
	}
}

// NewLogger builds the process logger from GATE_LOG_LEVEL and GATE_LOG_FORMAT.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(cfg.LogLevel)}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// RedisLogger adapts slog to go-redis's logger, at debug level: what go-redis logs
// (chiefly failed dials, on every attempt) comes back as an error to the tick or the
// readiness probe, which log it at their own pace and count it in
// gate_limiter_errors_total; at warn it would repeat every second through an outage.
// Install it with redis.SetLogger, which is process-wide.
type RedisLogger struct{ Log *slog.Logger }

func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.Log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// prime is the consumer's Prime: the keys of the records waiting in partitions this gate
// has just taken over, of at least two records each, are marked in the limiters (put in
// their caches if not there) and read in a tick made at once, before any of them is
// routed (route.Router.Expect, tick.Ticker.TickNow). Bounded by two tick intervals: a
// tick in progress is waited for, then this one, which TickTimeout bounds; past that,
// or with Redis out of reach, the records are routed as first contact, as without it,
// and priming rests for primePause; not after a read its caller cut short (ctx ended).
//
// With rules, a reload may be putting new ones in use meanwhile: their limiters took the
// old ones' view of each key over before the keys were read into the old ones, and met
// them as first contact for a tick. So the keys are read into every generation in use or
// pending that has not had them (primeTargets), and once more after the reads into one a
// reload brought meanwhile: a read each, each bounded as above.
func (g *Gate) prime(ctx context.Context, recs []*kgo.Record) {
	start := time.Now()
	if start.UnixNano() < g.primeOff.Load() {
		return // a prime failed lately: routed as first contact, not held up again
	}
	var done []*generation // with rules, the generations that have the keys marked
	n := 0
	for range primeRounds {
		tks, marked, more := g.primeTargets(start, recs, &done)
		n += marked
		for _, tk := range tks {
			if err := readMarked(ctx, tk); err != nil {
				if ctx.Err() != nil {
					// Cut short by the caller (a rebalance, a revoke): no failure of Redis's,
					// and the partitions it brings are to be primed at once.
					return
				}
				g.primeOff.Store(time.Now().Add(primePause).UnixNano())
				// At most once a minute: the tick's own lines say why Redis failed.
				if ok, left := g.primeLog.Allow(); ok {
					g.log.Info("records waiting in partitions taken over routed before all their keys were read: judged as first contact; priming rests 10s",
						"records", len(recs), "keys", n, "took", time.Since(start), "err", err, "lines_left_out", left)
				}
				return
			}
		}
		if !more {
			break
		}
	}
	if n > 0 {
		g.log.Debug("read the keys of records waiting in partitions taken over, before routing them",
			"records", len(recs), "keys", n, "took", time.Since(start))
	}
}

// primeRounds bounds a prime's rounds: the first, and one for a reload that came during
// its read. A third reload within two reads is the rules file changing every tick.
const primeRounds = 2

// primeTargets marks recs' keys in the limiters of the gate without rules, or of each
// generation in use or pending (a reload's) not in done, which it adds them to; it
// returns the ticks to read the keys marked (those with any), how many were marked, and,
// with rules, true: a reload may bring another generation during the reads.
func (g *Gate) primeTargets(now time.Time, recs []*kgo.Record, done *[]*generation) (tks []*tick.Ticker, n int, more bool) {
	sc := new(route.Scratch)
	g.primeMu.Lock()
	defer g.primeMu.Unlock()
	cur := g.gen.Load()
	if cur == nil {
		if n = g.Router.Expect(now, recs, sc); n > 0 {
			tks = append(tks, g.Ticker)
		}
		return tks, n, false
	}
	for _, gen := range []*generation{cur, g.pending} {
		if gen == nil || slices.Contains(*done, gen) {
			continue
		}
		*done = append(*done, gen)
		if m := gen.router.Expect(now, recs, sc); m > 0 {
			n += m
			tks = append(tks, gen.ticker)
		}
	}
	return tks, n, len(tks) > 0
}

// readMarked has tk make a tick at once for the keys just marked in its limiters
// (tick.Ticker.TickNow), waited for up to two tick intervals: a tick in progress, then
// this one, which TickTimeout bounds.
func readMarked(ctx context.Context, tk *tick.Ticker) error {
	ctx, cancel := context.WithTimeout(ctx, 2*tk.Config().TickInterval)
	defer cancel()
	return tk.TickNow(ctx)
}
