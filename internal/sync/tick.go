package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/throttle"
)

// Ticker runs the tick for one or more limiters against one or more Redis instances: every
// limiter's counts and reads go in the same pipeline per instance per tick, within one
// shared key budget.
type Ticker struct {
	cfg       Config
	limits    []limitState // limits[0] is the primary
	instances []redis.UniversalClient
	log       *slog.Logger
	m         *metrics
	errLogs   []errLog // by instance; each written only by its instance's pipeline goroutine

	// Owned by the tick goroutine.
	pending map[countKey]int64 // counts waiting for Redis
	carried map[teamKey]struct{}
	plans   []plan
	reads   []readRef // every limiter's due reads, reused
}

// Limit is one limiter the tick syncs, with the prefix of its Redis keys.
type Limit struct {
	Lim *limit.Limiter
	// KeyPrefix starts the limiter's keys; empty means Config.KeyPrefix. Each limiter
	// needs its own, as each has its own epochs.
	KeyPrefix string
}

// limitState is one limiter's part of the tick.
type limitState struct {
	l      *limit.Limiter
	prefix string
	ttl    time.Duration // Config.KeyTTL raised to the limiter's KeyLifetime
	sweep  limit.Sweep
	oldest int64 // the oldest epoch whose counts are still written, for this tick
}

type countKey struct {
	lim   int // index in Ticker.limits
	team  string
	epoch int64
}

type teamKey struct {
	lim  int
	team string
}

// readRef is a planned read and the limiter it belongs to.
type readRef struct {
	lim int
	r   *limit.Read
}

// plan is one instance's share of a tick.
type plan struct {
	writes []countKey
	reads  []readRef
	cmds   int
	err    error // the first command's error, as Exec returns it
	dur    time.Duration
	wcmds  []*redis.IntCmd
	ecmds  []*redis.BoolCmd
	rcmds  []*redis.SliceCmd
	// What failed, command by command: a pipeline can partly fail, as when Redis
	// refuses writes (OOM, READONLY, MISCONF) and still answers reads.
	failedWrites int // INCRBYs that failed: their counts are still pending
	failedReads  int // MGETs that failed
	causes       causeSet
}

// TickResult says what one tick did.
type TickResult struct {
	Writes        int // (team, epoch) counts written
	Reads         int // teams read and applied
	FailedReads   int // planned reads that failed: views rebuilt locally (fail-open)
	Commands      int // Redis commands sent
	CarriedWrites int // counts left for a later tick (budget or failure)
	SkippedReads  int // due reads not made this tick (budget)
	Dropped       int64
	Errors        int // instances whose pipeline failed
}

// New returns a Ticker for one limiter. In standalone mode every instance must be
// distinct; a team's keys live on instances[InstanceFor(team, len(instances))]. In cluster
// and sentinel mode there is exactly one client (a *redis.ClusterClient, or a failover
// *redis.Client), which routes each command itself. reg may be nil.
func New(l *limit.Limiter, instances []redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Ticker, error) {
	return NewMulti([]Limit{{Lim: l}}, instances, cfg, reg, log)
}

// NewMulti is New for several limiters synced by one tick, in one pipeline per instance.
// limits[0] is the primary: Config's defaults (KeyTTL's floor) follow its window. Each
// limiter's keys use its own KeyPrefix and expire after KeyTTL raised to its KeyLifetime
// (2 × its window, plus GATE_MAX_EVENT_AGE under the event clock).
func NewMulti(limits []Limit, instances []redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Ticker, error) {
	if len(instances) == 0 {
		return nil, fmt.Errorf("%w: no Redis instance", ErrBadConfig)
	}
	if len(limits) == 0 || limits[0].Lim == nil {
		return nil, fmt.Errorf("%w: no limiter", ErrBadConfig)
	}
	cfg, err := cfg.withDefaults(limits[0].Lim.Config().Window)
	if err != nil {
		return nil, err
	}
	if cfg.Mode != ModeStandalone && len(instances) != 1 {
		return nil, fmt.Errorf("%w: %s mode takes one client, got %d", ErrBadConfig, cfg.Mode, len(instances))
	}
	states := make([]limitState, len(limits))
	prefixes := make(map[string]bool, len(limits))
	for i, lm := range limits {
		if lm.Lim == nil {
			return nil, fmt.Errorf("%w: limit %d has no limiter", ErrBadConfig, i)
		}
		p := lm.KeyPrefix
		if p == "" {
			p = cfg.KeyPrefix
		}
		if err := CheckKeyPrefix(cfg.Mode, p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		if prefixes[p] {
			return nil, fmt.Errorf("%w: key prefix %q used by two limits", ErrBadConfig, p)
		}
		prefixes[p] = true
		states[i] = limitState{l: lm.Lim, prefix: p, ttl: max(cfg.KeyTTL, lm.Lim.KeyLifetime())}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg, len(instances))
	if err != nil {
		return nil, err
	}
	if cc, ok := instances[0].(*redis.ClusterClient); ok {
		// Node clients are created lazily, so a hook added now sees every node's pipelines.
		cc.OnNewNode(func(nc *redis.Client) { nc.AddHook(redirectHook{m}) })
	}
	return &Ticker{
		cfg:       cfg,
		limits:    states,
		instances: instances,
		log:       log,
		m:         m,
		errLogs:   make([]errLog, len(instances)),
		pending:   make(map[countKey]int64),
		carried:   make(map[teamKey]struct{}),
		plans:     make([]plan, len(instances)),
	}, nil
}

// Config returns the tick's configuration with defaults filled in.
func (t *Ticker) Config() Config { return t.cfg }

// Run ticks every TickInterval until ctx is done, then flushes pending counts (bounded by
// FlushTimeout) and returns.
func (t *Ticker) Run(ctx context.Context) {
	tk := time.NewTicker(t.cfg.TickInterval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.FlushTimeout)
			defer cancel()
			if err := t.Flush(fctx); err != nil {
				t.log.Warn("final flush of pending counts incomplete", "err", err, "pending_writes", len(t.pending))
			}
			return
		case <-tk.C:
			t.Tick(ctx)
		}
	}
}

// Flush writes every pending count, tick after tick without reads, until none is left,
// Redis fails, or ctx ends.
func (t *Ticker) Flush(ctx context.Context) error {
	for {
		r := t.tick(ctx, false)
		switch {
		case r.Errors > 0:
			return fmt.Errorf("flushing %d pending counts: Redis failed", len(t.pending))
		case len(t.pending) == 0:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("flushing %d pending counts: %w", len(t.pending), ctx.Err())
		}
	}
}

// Tick runs one tick now: sweep the limiter, write counts, read due teams, apply reads.
// Only one goroutine may call Tick, Flush or Run at a time.
func (t *Ticker) Tick(ctx context.Context) TickResult { return t.tick(ctx, true) }

func (t *Ticker) tick(ctx context.Context, withReads bool) TickResult {
	start := time.Now()
	var res TickResult

	// 1. Take each limiter's counts and due reads.
	for li := range t.limits {
		ls := &t.limits[li]
		now := ls.l.Clock().Now()
		ls.oldest = ls.l.OldestEpoch(now)
		ls.l.Sweep(now, &ls.sweep)
		res.Dropped += ls.sweep.Stale
		t.m.dropped.WithLabelValues("stale_epoch").Add(float64(ls.sweep.Stale))
		for _, c := range ls.sweep.Counts {
			k := countKey{li, c.Team, c.Epoch}
			if _, ok := t.pending[k]; !ok && len(t.pending) >= t.cfg.MaxPendingWrites {
				res.Dropped += c.N
				t.m.dropped.WithLabelValues("write_cap").Add(float64(c.N))
				continue
			}
			t.pending[k] += c.N
		}
	}
	for k, n := range t.pending {
		if k.epoch < t.limits[k.lim].oldest {
			delete(t.pending, k)
			res.Dropped += n
			t.m.dropped.WithLabelValues("stale_epoch").Add(float64(n))
		}
	}

	// 2. Plan: writes first, then reads, within the key budget.
	for i := range t.plans {
		p := &t.plans[i]
		clear(p.writes)
		clear(p.reads)
		*p = plan{writes: p.writes[:0], reads: p.reads[:0], wcmds: p.wcmds[:0], ecmds: p.ecmds[:0], rcmds: p.rcmds[:0]}
	}
	clear(t.carried)
	budget := t.cfg.KeysPerTick
	for k := range t.pending {
		if budget < 1 {
			t.carried[teamKey{k.lim, k.team}] = struct{}{}
			res.CarriedWrites++
			continue
		}
		budget--
		p := &t.plans[t.instanceFor(k.team)]
		p.writes = append(p.writes, k)
	}
	if withReads {
		maxReads := min(t.cfg.MaxReadsPerTick, budget/2)
		clear(t.reads)
		reads := t.reads[:0]
		for li := range t.limits {
			for i := range t.limits[li].sweep.Reads {
				reads = append(reads, readRef{li, &t.limits[li].sweep.Reads[i]})
			}
		}
		t.reads = reads
		if len(reads) > maxReads {
			// Over budget: the hottest teams first; the rest are planned again next tick.
			slices.SortFunc(reads, func(a, b readRef) int { return cmp.Compare(b.r.Pressure, a.r.Pressure) })
		}
		for _, rr := range reads {
			if _, ok := t.carried[teamKey{rr.lim, rr.r.Team}]; ok || res.Reads >= maxReads {
				// A read must include all of this instance's writes for the team, or
				// applying it would forget the ones still waiting.
				res.SkippedReads++
				continue
			}
			p := &t.plans[t.instanceFor(rr.r.Team)]
			p.reads = append(p.reads, rr)
			res.Reads++
			t.m.reads.WithLabelValues(rr.r.Reason.String()).Inc()
		}
		t.m.skippedReads.Add(float64(res.SkippedReads))
	}
	t.m.pendingSync.Set(float64(res.SkippedReads))

	// 3. One pipeline per instance, in parallel.
	var wg gosync.WaitGroup
	for i := range t.plans {
		if p := &t.plans[i]; len(p.writes)+len(p.reads) > 0 {
			wg.Go(func() { t.execute(ctx, i, p) })
		}
	}
	wg.Wait()

	// 4. Apply: forget written counts, apply reads. A read that succeeded while some of
	// the same pipeline's writes failed (Redis refusing writes: OOM, READONLY, MISCONF;
	// or one key's error) does not hold the counts still pending: they are added to what
	// it returned, as if written. Applying it as returned would drop them from the level,
	// and a team over its limit would be let through for as long as Redis refuses writes.
	// They stay in every read until they are written (and so in what Redis returns) or
	// dropped (stale epoch).
	res.Reads = 0
	applyAt := t.limits[0].l.Clock().Now()
	for i := range t.plans {
		p := &t.plans[i]
		res.Commands += p.cmds
		if p.err != nil {
			res.Errors++
		}
		if len(p.writes)+len(p.reads) == 0 {
			continue
		}
		t.m.pipelineDur.WithLabelValues(strconv.Itoa(i)).Observe(p.dur.Seconds())
		t.m.pipelineSize.WithLabelValues("write").Observe(float64(len(p.writes)))
		t.m.pipelineSize.WithLabelValues("read").Observe(float64(len(p.reads)))
		for j, k := range p.writes {
			if p.wcmds[j].Err() == nil {
				delete(t.pending, k)
				res.Writes++
			} else {
				res.CarriedWrites++
			}
		}
		teamsPerCmd := t.teamsPerCmd()
		for j, c := range p.rcmds {
			chunk := p.reads[j*teamsPerCmd : min(len(p.reads), (j+1)*teamsPerCmd)]
			if c.Err() != nil {
				// Fail open: rebuild these views from what this gate counted, so that
				// they keep draining instead of piling up pending records.
				for _, rr := range chunk {
					t.limits[rr.lim].l.ApplyLocal(rr.r, applyAt)
				}
				res.FailedReads += len(chunk)
				continue
			}
			vals := c.Val()
			for x, rr := range chunk {
				l := t.limits[rr.lim].l
				curr, err1 := counterValue(vals[2*x])
				prev, err2 := counterValue(vals[2*x+1])
				if err := errors.Join(err1, err2); err != nil {
					t.countError(causeParse, i)
					l.ApplyLocal(rr.r, applyAt)
					res.FailedReads++
					continue
				}
				if p.failedWrites > 0 {
					curr += t.pending[countKey{rr.lim, rr.r.Team, rr.r.Epoch}]
					prev += t.pending[countKey{rr.lim, rr.r.Team, rr.r.Epoch - 1}]
				}
				a := l.ApplyRead(rr.r, curr, prev, applyAt)
				t.m.drift.Observe(a.Drift)
				if a.Staleness > 0 {
					t.m.staleness.Observe(a.Staleness.Seconds())
				}
				res.Reads++
			}
		}
	}
	t.m.pendingWrites.Set(float64(len(t.pending)))
	t.m.tickCommands.Observe(float64(res.Commands))
	t.m.tickDur.Observe(time.Since(start).Seconds())
	return res
}

func (t *Ticker) instanceFor(team string) int { return InstanceFor(team, len(t.instances)) }

func (t *Ticker) key(lim int, team string, epoch int64) string {
	return KeyFor(t.cfg.Mode, t.limits[lim].prefix, team, epoch)
}

// teamsPerCmd is how many teams one MGET reads. In cluster mode a command's keys must share
// a slot, and only a team's own two keys are sure to: one MGET per team.
func (t *Ticker) teamsPerCmd() int {
	if t.cfg.Mode == ModeCluster {
		return 1
	}
	return t.cfg.KeysPerCommand / 2
}

// execute sends one instance's pipeline: every write (INCRBY + EXPIRE), then the reads in
// MGETs of up to KeysPerCommand keys. In cluster mode the one pipeline goes to the
// ClusterClient, which splits it by node and runs the parts in parallel.
func (t *Ticker) execute(ctx context.Context, i int, p *plan) {
	start := time.Now()
	pipe := t.instances[i].Pipeline()
	cluster := t.cfg.Mode == ModeCluster
	for _, k := range p.writes {
		key := t.key(k.lim, k.team, k.epoch)
		if cluster {
			c := redis.NewIntCmd(ctx, "incrby", key, t.pending[k])
			_ = pipe.Process(ctx, noRetryCmd{c}) // queues; the error comes with Exec
			p.wcmds = append(p.wcmds, c)
		} else {
			p.wcmds = append(p.wcmds, pipe.IncrBy(ctx, key, t.pending[k]))
		}
		p.ecmds = append(p.ecmds, pipe.Expire(ctx, key, t.limits[k.lim].ttl))
	}
	teamsPerCmd := t.teamsPerCmd()
	for j := 0; j < len(p.reads); j += teamsPerCmd {
		chunk := p.reads[j:min(len(p.reads), j+teamsPerCmd)]
		keys := make([]string, 0, 2*len(chunk))
		for _, rr := range chunk {
			keys = append(keys, t.key(rr.lim, rr.r.Team, rr.r.Epoch), t.key(rr.lim, rr.r.Team, rr.r.Epoch-1))
		}
		p.rcmds = append(p.rcmds, pipe.MGet(ctx, keys...))
	}
	p.cmds = pipe.Len()
	_, p.err = pipe.Exec(ctx)
	p.dur = time.Since(start)
	label := strconv.Itoa(i)
	t.m.commands.WithLabelValues("incrby").Add(float64(len(p.writes)))
	t.m.commands.WithLabelValues("expire").Add(float64(len(p.writes)))
	t.m.commands.WithLabelValues("mget").Add(float64(len(p.rcmds)))
	if p.err == nil {
		t.errLogs[i].recovered(t.log, label, p.dur)
		return
	}
	// Every command's error, not only the first: a pipeline can partly fail.
	for _, c := range p.wcmds {
		if err := c.Err(); err != nil {
			p.failedWrites++
			p.causes.add(classify(err))
		}
	}
	for _, c := range p.ecmds {
		if err := c.Err(); err != nil {
			p.causes.add(classify(err))
		}
	}
	for _, c := range p.rcmds {
		if err := c.Err(); err != nil {
			p.failedReads++
			p.causes.add(classify(err))
		}
	}
	if p.causes == 0 {
		p.causes.add(classify(p.err)) // an error no command carries
	}
	if cc, ok := t.instances[i].(*redis.ClusterClient); ok && p.causes&^(1<<causeRedis|1<<causeOOM|1<<causeMisconf) != 0 {
		// The cluster client refreshes its slot map on MOVED, or every minute, but
		// not when a node stops answering, nor when a demoted primary answers READONLY:
		// without this, writes for a dead primary's slots would keep failing for up to
		// a minute after its replica took over.
		cc.ReloadState(ctx)
	}
	for c := range numCauses {
		if p.causes.has(c) {
			t.countError(c, i)
		}
	}
	t.errLogs[i].failed(t.log, label, p)
}

func (t *Ticker) countError(c cause, instance int) {
	t.m.errors.WithLabelValues(c.String(), strconv.Itoa(instance)).Inc()
}

// cause is why a Redis command failed, as the errors metric labels it.
type cause uint8

// The causes of Redis errors.
const (
	causeTimeout    cause = iota // no answer in time
	causeConnection              // no connection, or it broke
	causeRedis                   // an error reply not named below
	causeOOM                     // write refused: used memory over maxmemory under noeviction
	causeReadOnly                // write refused: a replica (a demoted primary)
	causeMisconf                 // write refused: the last snapshot failed (stop-writes-on-bgsave-error)
	causeParse                   // a counter that is not an integer
	numCauses
)

func (c cause) String() string {
	switch c {
	case causeTimeout:
		return "timeout"
	case causeConnection:
		return "connection"
	case causeRedis:
		return "redis"
	case causeOOM:
		return "oom"
	case causeReadOnly:
		return "readonly"
	case causeMisconf:
		return "misconf"
	case causeParse:
		return "parse"
	}
	return "unknown"
}

// causeSet is a set of causes, one bit each.
type causeSet uint16

// refusals are the causes of a Redis that refuses writes while it answers reads.
const refusals causeSet = 1<<causeOOM | 1<<causeReadOnly | 1<<causeMisconf

func (s *causeSet) add(c cause)     { *s |= 1 << c }
func (s causeSet) has(c cause) bool { return s&(1<<c) != 0 }

// String lists the causes, comma-separated.
func (s causeSet) String() string {
	var b strings.Builder
	for c := range numCauses {
		if s.has(c) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(c.String())
		}
	}
	return b.String()
}

// classify names an error's cause for the errors metric.
func classify(err error) cause {
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return causeTimeout
	case redis.IsOOMError(err):
		return causeOOM
	case redis.IsReadOnlyError(err):
		return causeReadOnly
	case redis.HasErrorPrefix(err, "MISCONF"):
		return causeMisconf
	case errors.As(err, &re):
		return causeRedis
	}
	return causeConnection
}

// errorLogInterval is how often, at most, the tick logs the failures of one Redis
// instance while they go on: a tick a second must not log a line a second through an
// outage or a stretch of refused writes.
const errorLogInterval = time.Minute

// errLog rate-limits one Redis instance's failure logs: the first failed pipeline is
// logged at once, then one line per errorLogInterval (its pace), or sooner when the
// causes change, each saying how many failed since the last; the first pipeline to
// succeed after them is logged too. Wall time, not the limiter's clock: it paces a log.
type errLog struct {
	pace    *throttle.Every // errorLogInterval; nil until the first failure
	clock   clock.Clock     // wall time, for failing_for
	failing bool
	causes  causeSet  // as last logged
	since   time.Time // when the failures began
	ticks   int       // failed pipelines since the failures began
}

func (e *errLog) failed(log *slog.Logger, instance string, p *plan) {
	if e.clock == nil {
		e.clock = clock.Real{}
	}
	if e.pace == nil {
		e.pace = throttle.NewEvery(errorLogInterval, e.clock)
	}
	now := e.clock.Now()
	if !e.failing {
		e.since = now
	}
	e.ticks++
	if p.causes != e.causes {
		e.pace.Reset() // a new cause is logged at once
	}
	ok, quiet := e.pace.Allow()
	if !ok {
		return
	}
	msg := "redis pipeline failed; counts kept for the next tick, views go stale"
	if p.causes&^refusals == 0 {
		msg = "redis refused writes; counts kept in the level and for the next tick"
	}
	log.Warn(msg, "instance", instance, "cause", p.causes.String(),
		"failed_writes", p.failedWrites, "writes", len(p.writes), "failed_reads", p.failedReads, "reads", len(p.reads),
		"failed_unlogged", quiet, "failing_for", now.Sub(e.since).Round(time.Millisecond), "err", p.err)
	e.failing, e.causes = true, p.causes
}

func (e *errLog) recovered(log *slog.Logger, instance string, took time.Duration) {
	if !e.failing {
		return
	}
	log.Info("redis pipeline succeeds again; counts kept meanwhile are written from now on", "instance", instance,
		"failed_ticks", e.ticks, "failing_for", e.clock.Now().Sub(e.since).Round(time.Millisecond), "pipeline", took)
	*e = errLog{clock: e.clock} // the next failures start a fresh pace
}

// counterValue reads one MGET value: nil (no key) is 0.
func counterValue(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading counter %q: %w", x, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("reading counter: unexpected %T", v)
}
