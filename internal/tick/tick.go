package tick

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
	"sync"
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
	pending map[countKey]int64 // counts Redis has not confirmed: unsent, refused or in doubt
	doubt   map[countKey]int64 // the part of pending in batches sent without an answer
	// pendingPeak is the most counts pending since the maps were last rebuilt (shrink).
	pendingPeak int
	lanes       []lane
	laneReads   [][]readRef // by lane, this tick's reads
	open        []*batch    // by lane and limiter, the batch being filled this tick
	partOf      []int       // by lane, its pipeline this tick (pipelines)

	tickN      uint64    // ticks so far
	split      splitTick // a split tick between its write and read phases
	clockCheck           // Run's, once a minute
	// onPhase, when set (tests), is called by Run as each phase of a tick starts, and as
	// its write phase ends, with the tick's boundary.
	onPhase func(part int, boundary time.Time, ended bool)

	// writes, when set (the benchmarks), writes counts in place of writeScript: as the
	// gate did before it, to measure the two side by side. The binary has no such writer:
	// it lives in the package's bench code.
	writes batchWriter
	plans  []plan
	reads  []readRef // every limiter's due reads, reused
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
	// profiles folded by this tick's reads, written by the next tick (profile.go)
	profiles []limit.ProfileWrite
}

type countKey struct {
	lim   int // index in Ticker.limits
	team  string
	epoch int64
}

// readRef is a planned read and the limiter it belongs to.
type readRef struct {
	lim int
	r   *limit.Read
}

// plan is one instance's share of a tick.
type plan struct {
	batches []*batch // resends first (in order, by lane), then new batches
	lanes   []int    // the instance's lanes, in order
	writes  int      // counts in batches
	reads   int      // teams read
	err     error    // the first command's error that makes the pipeline failed (not TRYAGAIN)
	dur     time.Duration
	// The last send's (a split tick sends twice).
	sent    int
	sendErr error
	rcmds   []readCmd
	holds   []holdWrite // hold flags to set (limit.HoldFlag)
	// learned profiles to set (profile.go), and their scripts once queued
	profiles []profileWrite
	pcmds    []profileCmd
	// What failed, command by command: a pipeline can partly fail, as when Redis
	// refuses writes (OOM, READONLY, MISCONF) and still answers reads.
	failedWrites int // counts whose batch was refused or unanswered, or whose key failed
	failedReads  int // MGETs that failed
	tryAgain     int // commands answered TRYAGAIN (a slot in migration): retried next tick
	causes       causeSet
}

// has reports whether the plan has work in the given parts.
func (p *plan) has(part int) bool {
	return part&partWrites != 0 && len(p.batches)+len(p.holds)+len(p.profiles) > 0 || part&partReads != 0 && p.reads > 0
}

// readCmd is one MGET and the teams it reads: per team its counters of the read's epoch
// and the one before, then its hold flag when the read asks for it (Read.Hold).
type readCmd struct {
	cmd   *redis.SliceCmd
	teams []readRef
}

// holdWrite is one hold flag to set, on a lane's node.
type holdWrite struct {
	lane int
	key  string
	val  string
	ttl  time.Duration
}

// TickResult says what one tick did.
type TickResult struct {
	Writes        int // (team, epoch) counts written (or found written: a resend)
	Reads         int // teams read and applied
	FailedReads   int // planned reads that failed: views rebuilt locally (fail-open)
	Commands      int // Redis commands sent
	CarriedWrites int // counts left for a later tick (budget or failure)
	SkippedReads  int // due reads not made this tick (budget)
	Dropped       int64
	Errors        int // instances whose pipeline failed
	// Batches by outcome: applied, found applied already (a resend after a lost reply),
	// refused (an error reply), unknown (no reply; resent next tick as they are),
	// replayed (confirmed before, found lost by Redis, counts sent again), lost (the same,
	// confirmed too long ago to be kept: the lanes that lost such batches).
	Batches [numOutcomes]int
	// Replayed is the counts of replayed batches, pending again.
	Replayed int64
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
	t := &Ticker{
		cfg:       cfg,
		limits:    states,
		instances: instances,
		log:       log,
		m:         m,
		errLogs:   make([]errLog, len(instances)),
		pending:   make(map[countKey]int64),
		doubt:     make(map[countKey]int64),
		plans:     make([]plan, len(instances)),
	}
	n := len(instances)
	if cfg.Mode == ModeCluster {
		n = ClusterShards
	}
	t.lanes = make([]lane, n)
	for i := range t.lanes {
		t.lanes[i] = lane{key: laneKey(cfg.Mode, cfg.KeyPrefix, cfg.Writer, i)}
		if cfg.Mode != ModeCluster {
			t.lanes[i].inst = i
		}
		p := &t.plans[t.lanes[i].inst]
		p.lanes = append(p.lanes, i)
	}
	t.laneReads = make([][]readRef, n)
	t.open = make([]*batch, n*len(states))
	t.partOf = make([]int, n)
	return t, nil
}

// Config returns the tick's configuration with defaults filled in.
func (t *Ticker) Config() Config { return t.cfg }

// Run ticks until ctx is done, then flushes pending counts (bounded by FlushTimeout) and
// returns.
//
// Its ticks fall on the wall clock's multiples of TickInterval, the same instants in every
// gate of a fleet (with the same interval), and each is split in two: at the boundary every
// gate writes its counts (WritePhase); a quarter of an interval later, when the whole
// fleet's writes have landed, every gate reads (ReadPhase). A read then misses none of the
// other gates' counts up to the boundary, and what they counted since is what this gate's
// own records since the boundary, scaled by its fleet factor, stand for: no gate learns of
// the others a tick late for ticking just before them (docs/design.md, "Aligned ticks").
// Clocks need to agree within that quarter interval less the write's time; a gate whose
// clock is further off sees the others' counts of a tick later, as it would unaligned.
func (t *Ticker) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wait := func(until time.Time) bool {
		timer.Reset(time.Until(until))
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		}
	}
	for {
		at := nextTick(time.Now(), t.cfg.TickInterval)
		if !wait(at) {
			break
		}
		// One deadline for both phases: a node that hangs costs its teams this tick, never
		// the next tick's start.
		tctx, cancel := context.WithDeadline(ctx, at.Add(t.cfg.TickTimeout))
		if t.onPhase != nil {
			t.onPhase(partWrites, at, false)
		}
		t.WritePhase(tctx)
		if t.onPhase != nil {
			t.onPhase(partWrites, at, true)
		}
		if !wait(at.Add(t.readDelay())) {
			cancel()
			break // the final flush makes the planned reads first
		}
		if t.onPhase != nil {
			t.onPhase(partReads, at, false)
		}
		t.ReadPhase(tctx)
		cancel()
		t.checkClock(ctx)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.FlushTimeout)
	defer cancel()
	if err := t.Flush(fctx); err != nil {
		t.log.Warn("final flush of pending counts incomplete", "err", err, "pending_writes", len(t.pending))
	}
}

// nextTick is the first multiple of interval since the Unix epoch after now.
func nextTick(now time.Time, interval time.Duration) time.Time {
	ns := now.UnixNano()
	return time.Unix(0, ns-ns%int64(interval)+int64(interval)).In(now.Location())
}

// readDelay is how long after a tick's boundary Run's read phase starts: a quarter of the
// interval (250 ms by default), long enough for every gate's sweep and write to land, and
// within half the tick's deadline so the reads keep time to run.
func (t *Ticker) readDelay() time.Duration {
	return min(t.cfg.TickInterval/4, t.cfg.TickTimeout/2)
}

// Flush writes every pending count, tick after tick without reads, until none is left,
// Redis fails, or ctx ends.
func (t *Ticker) Flush(ctx context.Context) error {
	t.ReadPhase(ctx) // reads planned by a write phase are made first
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

// Tick runs one whole tick now: sweep the limiter, write counts, read due teams, apply
// reads, the writes and reads in one pipeline per instance. Only one goroutine may call
// Tick, WritePhase, ReadPhase, Flush or Run at a time.
func (t *Ticker) Tick(ctx context.Context) TickResult {
	t.ReadPhase(ctx) // reads planned by a write phase are made first
	return t.tick(ctx, true)
}

// WritePhase runs the first half of a tick split in two (Run's): sweep, write counts and
// hold flags, settle the writes. The reads it plans wait for ReadPhase, which must follow
// before the next WritePhase or Tick (they make it first if it did not). Its result counts
// the writes, and the reads put off (SkippedReads); ReadPhase's counts the reads made.
func (t *Ticker) WritePhase(ctx context.Context) TickResult {
	t.ReadPhase(ctx)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	var res TickResult
	t.prepare(true, &res)
	t.send(ctx, partWrites, &res)
	t.settleWrites(&res)
	t.split = splitTick{open: true, took: time.Since(start), commands: res.Commands}
	res.Reads = 0 // planned, made by ReadPhase
	return res
}

// ReadPhase runs the second half of a tick split in two: the reads WritePhase planned,
// made and applied as reads that follow every gate's writes of the tick's boundary
// (limit.Read.Fresh). Without a write phase before it, it does nothing.
func (t *Ticker) ReadPhase(ctx context.Context) TickResult {
	var res TickResult
	if !t.split.open {
		return res
	}
	sp := t.split
	t.split = splitTick{}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	t.send(ctx, partReads, &res)
	t.applyReads(&res, true)
	t.finish(sp.commands+res.Commands, sp.took+time.Since(start))
	return res
}

// splitTick is what a write phase leaves its read phase.
type splitTick struct {
	open     bool          // reads planned, not yet made
	took     time.Duration // the write phase's
	commands int
}

// The parts of a plan one send carries.
const (
	partWrites = 1 << iota // counts, hold flags and folded profiles
	partReads
)

func (t *Ticker) tick(ctx context.Context, withReads bool) TickResult {
	start := time.Now()
	var res TickResult
	// Every tick is bounded: one node that hangs must not hold the next tick back, nor the
	// healthy nodes' teams, whose results are applied when the deadline ends the wait.
	ctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	t.prepare(withReads, &res)
	t.send(ctx, partWrites|partReads, &res)
	t.settleWrites(&res)
	t.applyReads(&res, false)
	t.finish(res.Commands, time.Since(start))
	return res
}

// prepare takes each limiter's counts and due reads and plans the tick's commands.
func (t *Ticker) prepare(withReads bool, res *TickResult) {
	t.tickN++
	t.forgetConfirmed()

	// 1. Take each limiter's counts and due reads.
	for li := range t.limits {
		ls := &t.limits[li]
		now := ls.l.Clock().Now()
		ls.oldest = ls.l.OldestEpoch(now)
		if withReads {
			ls.l.Sweep(now, &ls.sweep)
		} else {
			ls.l.SweepAll(now, &ls.sweep) // a flush: cold teams' counts too
		}
		res.Dropped += ls.sweep.Stale
		t.m.dropped.WithLabelValues("stale_epoch").Add(float64(ls.sweep.Stale))
		t.logSpikes(ls)
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
			delete(t.doubt, k)
			res.Dropped += n
			t.m.dropped.WithLabelValues("stale_epoch").Add(float64(n))
		}
	}
	t.dropStaleDoubt()

	// 2. Plan: writes first, then reads, within the key budget. A lane with batches in
	// doubt resends them as they are and gets no new batch until they are answered.
	for i := range t.plans {
		p := &t.plans[i]
		clear(p.batches)
		clear(p.rcmds)
		clear(p.holds)
		clear(p.profiles)
		clear(p.pcmds)
		*p = plan{batches: p.batches[:0], rcmds: p.rcmds[:0], holds: p.holds[:0], profiles: p.profiles[:0], pcmds: p.pcmds[:0], lanes: p.lanes}
	}
	clear(t.open)
	budget := t.cfg.KeysPerTick
	for li := range t.lanes {
		ln := &t.lanes[li]
		p := &t.plans[ln.inst]
		for _, b := range ln.doubt {
			p.batches = append(p.batches, b)
			p.writes += len(b.items)
			budget -= len(b.items)
		}
	}
	for k, n := range t.pending {
		n -= t.doubt[k]
		if n <= 0 {
			continue // all of it in doubt, resent above
		}
		li := t.laneFor(k.team)
		if budget < 1 || len(t.lanes[li].doubt) > 0 {
			res.CarriedWrites++
			continue
		}
		budget--
		o := li*len(t.limits) + k.lim
		b := t.open[o]
		if b == nil || len(b.items) == t.cfg.KeysPerCommand {
			ln := &t.lanes[li]
			ln.seq++
			b = &batch{lane: li, lim: k.lim, seq: ln.seq, items: make([]item, 0, min(t.cfg.KeysPerCommand, len(t.pending)))}
			t.open[o] = b
			p := &t.plans[ln.inst]
			p.batches = append(p.batches, b)
		}
		b.items = append(b.items, item{k, n})
		t.plans[t.lanes[li].inst].writes++
	}
	// Hold flags: one SET each, refreshed every tick while the team is over its release
	// level, living as long as a hold. A few teams at most (those over their limit).
	for li := range t.limits {
		ls := &t.limits[li]
		for _, f := range ls.sweep.Holds {
			ln := t.laneFor(f.Team)
			p := &t.plans[t.lanes[ln].inst]
			p.holds = append(p.holds, holdWrite{ln, HoldKeyFor(t.cfg.Mode, ls.prefix, f.Team), holdValue(f), ls.l.DivertHold()})
		}
	}
	t.planProfiles()
	for li := range t.laneReads {
		clear(t.laneReads[li])
		t.laneReads[li] = t.laneReads[li][:0]
	}
	if withReads {
		maxReads := min(t.cfg.MaxReadsPerTick, max(budget, 0)/2)
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
			// A team whose counts were not all sent is read all the same: what Redis
			// does not hold is added to the read (notInRedis), so none is forgotten.
			if res.Reads >= maxReads {
				res.SkippedReads++
				continue
			}
			li := t.laneFor(rr.r.Team)
			t.laneReads[li] = append(t.laneReads[li], rr)
			t.plans[t.lanes[li].inst].reads++
			res.Reads++
			t.m.reads.WithLabelValues(rr.r.Reason.String()).Inc()
		}
		t.m.skippedReads.Add(float64(res.SkippedReads))
	}
	t.m.pendingSync.Set(float64(res.SkippedReads))

}

// send runs the given parts of every instance's plan, one pipeline per instance, in
// parallel, and counts their commands and failed pipelines in res.
func (t *Ticker) send(ctx context.Context, part int, res *TickResult) {
	var wg sync.WaitGroup
	for i := range t.plans {
		if p := &t.plans[i]; p.has(part) {
			wg.Go(func() { t.execute(ctx, i, p, part) })
		}
	}
	wg.Wait()
	for i := range t.plans {
		p := &t.plans[i]
		if !p.has(part) {
			continue
		}
		res.Commands += p.sent
		if p.sendErr != nil {
			res.Errors++
		}
	}
}

// settleWrites settles the writes sent: a batch answered is confirmed (applied now, or
// found applied by an earlier send whose reply was lost); a batch refused keeps its
// counts pending, to go in a new batch; a batch unanswered stays in doubt and is resent
// as it is.
func (t *Ticker) settleWrites(res *TickResult) {
	for i := range t.plans {
		p := &t.plans[i]
		for _, b := range p.batches {
			o := t.settle(b, res)
			res.Batches[o]++
			t.m.batches.WithLabelValues(o.String()).Inc()
		}
	}
	for li := range t.lanes {
		ln := &t.lanes[li]
		ln.doubt = slices.DeleteFunc(ln.doubt, func(b *batch) bool { return !b.doubt })
	}
	if res.Batches[outReplayed]+res.Batches[outLost] > 0 {
		t.log.Warn("redis lost writes it had acknowledged (a failover to a replica that had not received them, or a restart); this gate's are sent again",
			"replayed_batches", res.Batches[outReplayed], "replayed_counts", res.Replayed,
			"lost_batches", res.Batches[outLost], "keep_confirmed", t.cfg.KeepConfirmed)
	}
}

// applyReads applies the reads sent; fresh says they were made after every gate of the
// fleet wrote its counts of this tick's boundary (a split tick's read phase).
//
// A read that succeeded while some of this gate's counts for the team are not in Redis
// (refused: OOM, READONLY, MISCONF; or one key's error) does not hold them: they are
// added to what it returned, as if written. Applying it as returned would drop them from
// the level, and a team over its limit would be let through for as long as Redis refuses
// writes. They stay in every read until they are written (and so in what Redis returns)
// or dropped (stale epoch).
func (t *Ticker) applyReads(res *TickResult, fresh bool) {
	res.Reads = 0
	applyAt := t.limits[0].l.Clock().Now()
	for i := range t.plans {
		p := &t.plans[i]
		for _, rc := range p.rcmds {
			if rc.cmd.Err() != nil {
				// Fail open: rebuild these views from what this gate counted, so that
				// they keep draining instead of piling up pending records; the limiter
				// keeps them due, so they are read again next tick.
				for _, rr := range rc.teams {
					t.limits[rr.lim].l.ApplyLocal(rr.r, applyAt)
				}
				res.FailedReads += len(rc.teams)
				continue
			}
			vals := rc.cmd.Val()
			at := 0
			for _, rr := range rc.teams {
				l := t.limits[rr.lim].l
				curr, err1 := counterValue(vals[at])
				prev, err2 := counterValue(vals[at+1])
				var flag any
				if at += 2; rr.r.Hold {
					flag = vals[at]
					at++
				}
				pvals := vals[at : at+profileVals(rr.r)]
				at += len(pvals)
				if err := errors.Join(err1, err2); err != nil {
					t.countError(causeParse, i)
					l.ApplyLocal(rr.r, applyAt)
					res.FailedReads++
					continue
				}
				curr += t.notInRedis(countKey{rr.lim, rr.r.Team, rr.r.Epoch})
				prev += t.notInRedis(countKey{rr.lim, rr.r.Team, rr.r.Epoch - 1})
				rr.r.Fresh = fresh
				a := l.ApplyRead(rr.r, curr, prev, applyAt)
				if v, ok := flag.(string); ok {
					if f, ok := parseHold(rr.r.Team, v); ok {
						l.ApplyHold(rr.r, f)
					} else {
						t.countError(causeParse, i)
					}
				}
				if len(pvals) > 0 {
					t.applyProfile(i, rr, pvals, applyAt)
				}
				t.m.drift.Observe(a.Drift)
				if a.Staleness > 0 {
					t.m.staleness.Observe(a.Staleness.Seconds())
				}
				res.Reads++
			}
		}
	}
}

// finish ends a tick, whole or split: each instance's pipeline metrics and failure log,
// then the tick's.
func (t *Ticker) finish(commands int, took time.Duration) {
	for i := range t.plans {
		p := &t.plans[i]
		if !p.has(partWrites | partReads) {
			continue
		}
		t.m.pipelineDur.WithLabelValues(strconv.Itoa(i)).Observe(p.dur.Seconds())
		t.m.pipelineSize.WithLabelValues("write").Observe(float64(p.writes))
		t.m.pipelineSize.WithLabelValues("read").Observe(float64(p.reads))
		t.report(i, p)
	}
	t.shrink()
	t.m.pendingWrites.Set(float64(len(t.pending)))
	t.m.tickCommands.Observe(float64(commands))
	t.m.tickDur.Observe(took.Seconds())
}

// settle applies one batch's outcome to the pending counts.
func (t *Ticker) settle(b *batch, res *TickResult) outcome {
	o, failed := b.out, b.failed
	ln := &t.lanes[b.lane]
	switch o {
	case outApplied, outDuplicate:
		t.recoverLost(ln, b.last, res)
		applied := b.items[:0:0]
		for j, it := range b.items {
			if b.doubt {
				t.addTo(t.doubt, it.k, -it.n)
			}
			if slices.Contains(failed, int64(j+1)) {
				// This key failed on its own: its count stays pending, to go in a new batch.
				res.CarriedWrites++
				continue
			}
			t.addTo(t.pending, it.k, -it.n)
			res.Writes++
			if len(failed) > 0 {
				applied = append(applied, it)
			}
		}
		if len(failed) > 0 {
			b.items = applied
		}
		b.doubt = false
		b.tick = t.tickN
		ln.kept = append(ln.kept, b)
	case outRefused:
		// Not applied. A batch in doubt stays in doubt, with its number: an earlier send
		// may have been applied. Otherwise its counts stay pending for a new batch.
		res.CarriedWrites += len(b.items)
	case outUnknown:
		if !b.doubt {
			b.doubt = true
			ln.doubt = append(ln.doubt, b)
			for _, it := range b.items {
				t.doubt[it.k] += it.n
			}
		}
		res.CarriedWrites += len(b.items)
	}
	return o
}

// recoverLost is called with each answer of the write script on a lane: last is the
// number the lane held in Redis before the batch. Batches confirmed earlier with a higher
// number are no longer in Redis: a failover promoted a replica that had not received them,
// or Redis restarted without them. Their counts go back to pending and are sent again in
// new batches; batches confirmed too long ago to be kept are reported as lost.
func (t *Ticker) recoverLost(ln *lane, last int64, res *TickResult) {
	i := len(ln.kept)
	for i > 0 && int64(ln.kept[i-1].seq) > last {
		i--
	}
	for _, b := range ln.kept[i:] {
		for _, it := range b.items {
			if it.k.epoch < t.limits[it.k.lim].oldest {
				continue // no longer written: as if dropped
			}
			t.pending[it.k] += it.n
			res.Replayed += it.n
		}
		res.Batches[outReplayed]++
		t.m.batches.WithLabelValues(outReplayed.String()).Inc()
	}
	clear(ln.kept[i:])
	ln.kept = ln.kept[:i]
	// The sequence key lives as long as the counters (seqTTL); a lane idle for longer
	// starts again from 0 without having lost anything that still counts.
	if ln.forgot > 0 && int64(ln.forgot) > last && time.Duration(t.tickN-ln.forgotTick)*t.cfg.TickInterval < t.seqTTLDur() {
		res.Batches[outLost]++
		t.m.batches.WithLabelValues(outLost.String()).Inc()
		ln.forgot = 0 // reported once
	}
}

// forgetConfirmed stops keeping batches confirmed more than KeepConfirmed ago.
func (t *Ticker) forgetConfirmed() {
	keep := uint64(max(1, int64(t.cfg.KeepConfirmed/t.cfg.TickInterval)))
	for li := range t.lanes {
		ln := &t.lanes[li]
		n := 0
		for n < len(ln.kept) && ln.kept[n].tick+keep < t.tickN {
			ln.forgot, ln.forgotTick = ln.kept[n].seq, ln.kept[n].tick
			n++
		}
		if n > 0 {
			clear(ln.kept[:n])
			ln.kept = slices.Delete(ln.kept, 0, n)
		}
	}
}

// shrink rebuilds the pending maps once they hold an eighth of what they once held: a Go
// map keeps the memory of its largest size, and a start, an outage or a backlog can fill
// them with a count for every cached team (about 100 bytes each).
func (t *Ticker) shrink() {
	t.pendingPeak = max(t.pendingPeak, len(t.pending))
	if t.pendingPeak > 1<<16 && len(t.pending) < t.pendingPeak/8 {
		// Not maps.Clone: it keeps the source's size.
		t.pending = copyMap(t.pending)
		t.doubt = copyMap(t.doubt)
		t.pendingPeak = len(t.pending)
	}
	if c := cap(t.reads); c > 1<<16 && len(t.reads) < c/8 {
		t.reads = nil
	}
}

func copyMap(m map[countKey]int64) map[countKey]int64 {
	c := make(map[countKey]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// dropStaleDoubt forgets batches in doubt whose every count is of an epoch no longer
// written (step 1 dropped those counts from pending and counted them).
func (t *Ticker) dropStaleDoubt() {
	for li := range t.lanes {
		ln := &t.lanes[li]
		ln.doubt = slices.DeleteFunc(ln.doubt, func(b *batch) bool {
			for _, it := range b.items {
				if it.k.epoch >= t.limits[it.k.lim].oldest {
					return false
				}
			}
			return true
		})
	}
}

// addTo adds n to m[k], deleting the key at zero or below.
func (t *Ticker) addTo(m map[countKey]int64, k countKey, n int64) {
	v, ok := m[k]
	if !ok {
		return
	}
	if v += n; v <= 0 {
		delete(m, k)
		return
	}
	m[k] = v
}

// notInRedis is what this gate counted for k that Redis surely does not hold: pending
// counts not in doubt (not sent: over budget, or behind a lane's batches in doubt;
// refused; or a key's own error). Counts in doubt are most likely in Redis (a reply lost
// to a stall) and are not added.
func (t *Ticker) notInRedis(k countKey) int64 {
	return max(t.pending[k]-t.doubt[k], 0)
}

func (t *Ticker) laneFor(team string) int {
	if t.cfg.Mode == ModeCluster {
		return ClusterShard(team)
	}
	return t.instanceFor(team)
}

func (t *Ticker) instanceFor(team string) int { return InstanceFor(team, len(t.instances)) }

func (t *Ticker) key(lim int, team string, epoch int64) string {
	return KeyFor(t.cfg.Mode, t.limits[lim].prefix, team, epoch)
}

// execute sends one instance's pipeline: every batch of writes (writeScript: resends
// first, in order), then the reads in MGETs of up to KeysPerCommand keys of one lane. In
// cluster mode the one pipeline goes to the ClusterClient, which splits it by node and
// runs the parts in parallel.
func (t *Ticker) execute(ctx context.Context, i int, p *plan, part int) {
	start := time.Now()
	pipes := t.pipelines(ctx, i, p)
	if part&partWrites != 0 {
		t.queueWrites(ctx, p, pipes)
	}
	if part&partReads != 0 {
		t.queueReads(ctx, p, pipes)
	}
	errs := make([]error, len(pipes))
	var wg sync.WaitGroup
	p.sent, p.sendErr = 0, nil
	for j, pipe := range pipes {
		if n := pipe.Len(); n > 0 {
			p.sent += n
			wg.Go(func() { _, errs[j] = pipe.Exec(ctx) })
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			p.sendErr = err
			break
		}
	}
	p.dur += time.Since(start)
	if part&partWrites != 0 {
		for _, b := range p.batches {
			if t.writes != nil {
				b.out, b.failed, b.err = t.writes.result(b)
			} else {
				b.out, b.failed, b.err = b.result()
			}
			if len(b.failed) > 0 && p.sendErr == nil {
				p.sendErr = b.err // a key that failed on its own: the script's reply says which
			}
		}
		t.m.commands.WithLabelValues("eval").Add(float64(len(p.batches) + len(p.pcmds)))
		t.profileErrors(i, p)
		t.m.commands.WithLabelValues("set").Add(float64(len(p.holds)))
	}
	if part&partReads != 0 {
		t.m.commands.WithLabelValues("mget").Add(float64(len(p.rcmds)))
	}
	if p.sendErr == nil {
		return
	}
	// Every command's error, not only the first: a pipeline can partly fail. TRYAGAIN (a
	// multi-key command on a slot in migration) is no failure of Redis: the command was not
	// run, its writes stay pending and its reads are made again next tick.
	var causes causeSet
	note := func(err error) bool {
		if redis.IsTryAgainError(err) {
			p.tryAgain++
			t.m.redirects.WithLabelValues("tryagain").Inc()
			return false
		}
		causes.add(classify(err))
		return true
	}
	if part&partWrites != 0 {
		for _, b := range p.batches {
			switch {
			case b.out == outRefused || b.out == outUnknown:
				p.failedWrites += len(b.items)
				note(b.err)
			case len(b.failed) > 0:
				p.failedWrites += len(b.failed)
				causes.add(causeRedis)
			}
		}
	}
	if part&partReads != 0 {
		for _, rc := range p.rcmds {
			if err := rc.cmd.Err(); err != nil && note(err) {
				p.failedReads++
			}
		}
	}
	if causes == 0 && p.tryAgain > 0 {
		p.sendErr = nil // only TRYAGAIN: nothing to report
		return
	}
	if causes == 0 {
		causes.add(classify(p.sendErr)) // an error no command carries
	}
	if cc, ok := t.instances[i].(*redis.ClusterClient); ok && causes&^(1<<causeRedis|1<<causeOOM|1<<causeMisconf|1<<causeNoReplicas) != 0 {
		// The cluster client refreshes its slot map on MOVED, or every minute, but
		// not when a node stops answering, nor when a demoted primary answers READONLY:
		// without this, writes for a dead primary's slots would keep failing for up to
		// a minute after its replica took over.
		cc.ReloadState(ctx)
	}
	p.causes |= causes
	if p.err == nil {
		p.err = p.sendErr
	}
}

// queueWrites queues the plan's count batches and hold flags on its pipelines.
func (t *Ticker) queueWrites(ctx context.Context, p *plan, pipes []redis.Pipeliner) {
	seqTTL := t.seqTTL()
	for _, b := range p.batches {
		ln := &t.lanes[b.lane]
		pipe := pipes[t.partOf[b.lane]]
		if t.writes != nil {
			t.writes.queue(ctx, t, pipe, b)
			continue
		}
		keys := make([]string, 1, 1+len(b.items))
		keys[0] = ln.key
		args := make([]any, 3, 3+len(b.items))
		args[0], args[1], args[2] = b.seq, seqTTL, (t.limits[b.lim].ttl + KeyTTLMargin).Milliseconds()
		for _, it := range b.items {
			keys = append(keys, t.key(it.k.lim, it.k.team, it.k.epoch))
			args = append(args, it.n)
		}
		// EVAL, not EVALSHA: a node that has not seen the script (restarted, promoted, a
		// slot's new owner, or its script cache evicted) runs it all the same, and the
		// hash Redis computes per call costs nothing measurable (docs/benchmarks.md).
		b.cmd = pipe.Eval(ctx, writeScript, keys, args...)
	}
	for _, hw := range p.holds {
		// Not part of a batch: setting a flag twice is harmless, and one lost is set again
		// next tick.
		pipes[t.partOf[hw.lane]].Set(ctx, hw.key, hw.val, hw.ttl)
	}
	t.queueProfiles(ctx, pipes, p)
}

// queueReads queues the plan's reads on its pipelines.
func (t *Ticker) queueReads(ctx context.Context, p *plan, pipes []redis.Pipeliner) {
	for _, li := range p.lanes {
		reads := t.laneReads[li]
		pipe := pipes[t.partOf[li]]
		for j := 0; j < len(reads); {
			// Up to KeysPerCommand keys: two counters per team, its hold flag if asked, and
			// its profile (appendReadKeys).
			var keys []string
			k := j
			for ; k < len(reads) && (k == j || len(keys)+readKeys(reads[k].r) <= t.cfg.KeysPerCommand); k++ {
				keys = t.appendReadKeys(keys, reads[k])
			}
			p.rcmds = append(p.rcmds, readCmd{pipe.MGet(ctx, keys...), reads[j:k]})
			j = k
		}
	}
}

// report counts and logs what failed in instance i's pipelines this tick, once a tick
// (both phases of a split one): a stretch of refused writes under answered reads is one
// failure a tick, not a failure and a recovery.
func (t *Ticker) report(i int, p *plan) {
	label := strconv.Itoa(i)
	if p.err == nil {
		t.errLogs[i].recovered(t.log, label, p.dur)
		return
	}
	for c := range numCauses {
		if p.causes.has(c) {
			t.countError(c, i)
		}
	}
	t.errLogs[i].failed(t.log, label, p)
}

// pipelines returns the pipelines instance i's plan is sent in, and sets partOf for its
// lanes. One, except in cluster mode: one per primary, each still a ClusterClient
// pipeline (it follows MOVED and ASK) but holding one node's lanes only, so that a node
// that hangs fails its own commands when the tick's deadline ends the wait, not every
// node's: the cluster client's pipeline, once its deadline passes between retries, sets
// the deadline's error on all of its commands, those already answered too.
func (t *Ticker) pipelines(ctx context.Context, i int, p *plan) []redis.Pipeliner {
	cc, ok := t.instances[i].(*redis.ClusterClient)
	if !ok {
		for _, li := range p.lanes {
			t.partOf[li] = 0
		}
		return []redis.Pipeliner{t.instances[i].Pipeline()}
	}
	var pipes []redis.Pipeliner
	byNode := make(map[*redis.Client]int)
	for _, li := range p.lanes {
		node, err := cc.MasterForKey(ctx, t.lanes[li].key)
		if err != nil {
			node = nil // no slot map: one pipeline, which reports the error
		}
		j, ok := byNode[node]
		if !ok {
			j = len(pipes)
			byNode[node] = j
			pipes = append(pipes, cc.Pipeline())
		}
		t.partOf[li] = j
	}
	return pipes
}

// seqTTL is how long a lane's sequence key lives, in ms: as long as the longest-lived
// counter, since a batch in doubt is resent until its epochs are no longer written.
func (t *Ticker) seqTTL() int64 { return t.seqTTLDur().Milliseconds() }

func (t *Ticker) seqTTLDur() time.Duration {
	var d time.Duration
	for _, ls := range t.limits {
		d = max(d, ls.ttl)
	}
	return d + KeyTTLMargin
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
	causeNoReplicas              // write refused: too few replicas in sync (min-replicas-to-write)
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
	case causeNoReplicas:
		return "noreplicas"
	case causeParse:
		return "parse"
	}
	return "unknown"
}

// causeSet is a set of causes, one bit each.
type causeSet uint16

// refusals are the causes of a Redis that refuses writes while it answers reads.
const refusals causeSet = 1<<causeOOM | 1<<causeReadOnly | 1<<causeMisconf | 1<<causeNoReplicas

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
	case redis.HasErrorPrefix(err, "NOREPLICAS"):
		return causeNoReplicas
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
		"failed_writes", p.failedWrites, "writes", p.writes, "failed_reads", p.failedReads, "reads", p.reads,
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
