package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	gatesync "github.com/capturegate/gate/internal/sync"
)

// gateParts is one gate: its limiter, the Redis clients and the tick that syncs it, the
// router that asks it, and the Kafka consumer that routes through that router, with their
// metrics on one registry. serve runs one; gate dev runs two in one process.
type gateParts struct {
	reg      *prometheus.Registry
	lim      *limit.Limiter
	extra    []*limit.Limiter // one per GATE_LIMITS entry
	clients  []redis.UniversalClient
	ticker   *gatesync.Ticker
	router   *route.Router
	consumer *consume.Consumer
	// overrides keeps the limiter's per-team thresholds in step with the live hash in
	// the first Redis instance; serve runs it.
	overrides *overrides.Refresher
}

// gateOptions are what gate dev changes in a gate; serve passes the zero value.
type gateOptions struct {
	// wrapRouter, if set, stands between the consumer and the router (gate dev counts
	// outcomes per team through it).
	wrapRouter func(*route.Router) consume.Router
	// clientOpts are added after the consumer's own Kafka client options.
	clientOpts []kgo.Opt
}

// newGate builds a gate from cfg. Nothing connects or starts: every step that can fail
// runs here, before the caller starts anything. On success the caller owns the Redis
// clients and closes them (closeRedis) after the tick's final flush; on failure they are
// closed already.
func newGate(cfg Config, log *slog.Logger, o gateOptions) (_ *gateParts, err error) {
	g := &gateParts{reg: prometheus.NewRegistry()}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := g.reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering runtime metrics: %w", err)
		}
	}
	// With further limits, each limiter's metrics carry its window as the label limit;
	// with one, they stay as they always were.
	limReg := func(w time.Duration) prometheus.Registerer {
		if len(cfg.Limits) == 0 {
			return g.reg
		}
		return prometheus.WrapRegistererWith(prometheus.Labels{"limit": w.String()}, g.reg)
	}
	if g.lim, err = limit.New(cfg.limitConfig(), nil, limReg(cfg.Window)); err != nil {
		return nil, fmt.Errorf("building the limiter: %w", err)
	}
	for _, lc := range cfg.extraLimitConfigs() {
		l, err := limit.New(lc, nil, limReg(lc.Window))
		if err != nil {
			return nil, fmt.Errorf("building the %s limiter: %w", lc.Window, err)
		}
		g.extra = append(g.extra, l)
	}
	ropts, err := cfg.redisOptions()
	if err != nil {
		return nil, err
	}
	if g.clients, err = cfg.dialRedis(ropts); err != nil {
		return nil, fmt.Errorf("configuring Redis clients: %w", err)
	}
	defer func() {
		if err != nil {
			g.closeRedis(log)
		}
	}()
	instances := g.clients
	tlims := []gatesync.Limit{{Lim: g.lim}}
	for i, l := range g.extra {
		tlims = append(tlims, gatesync.Limit{Lim: l, KeyPrefix: cfg.limitKeyPrefix(i)})
	}
	if g.ticker, err = gatesync.NewMulti(tlims, instances, cfg.syncConfig(), g.reg, log.With("component", "tick")); err != nil {
		return nil, fmt.Errorf("building the tick: %w", err)
	}
	var ovrExtra []overrides.Extra
	for i, l := range g.extra {
		ovrExtra = append(ovrExtra, overrides.Extra{Lim: l, Factor: cfg.limitFactor(i)})
	}
	if g.overrides, err = overrides.New(overrides.Config{
		Key:      overrides.Key(cfg.RedisPrefix),
		Base:     cfg.Overrides,
		Interval: cfg.OverridesRefresh,
		Timeout:  cfg.RedisDialTimeout + cfg.RedisWriteTimeout + cfg.RedisReadTimeout,
		Extra:    ovrExtra,
	}, g.lim, instances[0], g.reg, log.With("component", "overrides")); err != nil {
		return nil, fmt.Errorf("building the overrides refresher: %w", err)
	}
	if g.router, err = route.NewMulti(cfg.routeConfig(), append([]*limit.Limiter{g.lim}, g.extra...), g.reg); err != nil {
		return nil, fmt.Errorf("building the router: %w", err)
	}
	ccfg, err := cfg.consumeConfig()
	if err != nil {
		return nil, err
	}
	ccfg.ClientOpts = append(ccfg.ClientOpts, o.clientOpts...)
	var r consume.Router = g.router
	if o.wrapRouter != nil {
		r = o.wrapRouter(g.router)
	}
	if g.consumer, err = consume.New(ccfg, r, nil, g.reg, log.With("component", "consume")); err != nil {
		return nil, fmt.Errorf("building the Kafka consumer: %w", err)
	}
	return g, nil
}

// dialRedis returns the clients GATE_REDIS_MODE calls for: one per URL in standalone
// mode, else one cluster or failover client. None connects yet.
func (c Config) dialRedis(o gatesync.RedisOptions) ([]redis.UniversalClient, error) {
	switch c.RedisMode {
	case "cluster":
		cc, err := gatesync.DialCluster(c.RedisURLs, o)
		if err != nil {
			return nil, err
		}
		return []redis.UniversalClient{cc}, nil
	case "sentinel":
		fc, err := gatesync.DialSentinel(string(c.RedisSentinelMaster), c.RedisSentinelAddrs, c.RedisURLs[0], o)
		if err != nil {
			return nil, err
		}
		return []redis.UniversalClient{fc}, nil
	}
	cs, err := gatesync.Dial(c.RedisURLs, o)
	if err != nil {
		return nil, err
	}
	u := make([]redis.UniversalClient, len(cs))
	for i, x := range cs {
		u[i] = x
	}
	return u, nil
}

// redisLabels names dialRedis's clients, passwords redacted, for logs and readiness.
func (c Config) redisLabels() []string {
	var urls []string
	for _, u := range c.RedisURLs {
		urls = append(urls, redactURL(u))
	}
	switch c.RedisMode {
	case "cluster":
		return []string{"cluster " + strings.Join(urls, ",")}
	case "sentinel":
		return []string{"sentinel master " + string(c.RedisSentinelMaster) + " via " + strings.Join(c.RedisSentinelAddrs, ",")}
	}
	return urls
}

// closeRedis closes the Redis clients; call it after the tick's final flush.
func (g *gateParts) closeRedis(log *slog.Logger) {
	for i, c := range g.clients {
		if err := c.Close(); err != nil {
			log.Warn("closing redis client", "instance", i, "err", err)
		}
	}
}
