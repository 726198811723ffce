// The Ticker, how it is built, and when it ticks. Ticks fall on the wall clock's
// multiples of TickInterval, the same instants in every gate of a fleet, each split in
// two: every gate writes at the boundary, then reads a quarter of an interval later, so a
// read misses none of the fleet's counts up to the boundary. Only one goroutine may tick
// at a time; every tick is bounded by TickTimeout; Run ends with a flush of the pending
// counts.

package tick

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/throttle"
)

// Ticker runs the tick for one or more limiters against one or more Redis instances: every
// limiter's counts and reads go in the same pipeline per instance per tick, within one
// shared key budget.
type Ticker struct {
	cfg Config
	// nowReq carries TickNow's requests to Run, each answered with its tick's result.
	nowReq    chan chan TickResult
	limits    []limitState // limits[0] is the primary
	instances []redis.UniversalClient
	log       *slog.Logger
	m         *metrics
	errLogs   []errLog // by instance; each written only by its instance's pipeline goroutine
	// errNodes: cluster mode, the primaries the errors and pipeline duration metrics have
	// series of (trackNodes); the tick goroutine's.
	errNodes map[string]struct{}
	// parseLogs pace the logs of values read that do not parse, by kind (unreadable).
	parseLogs [numValueKinds]*throttle.Every
	// lostLog paces the warning of writes Redis lost after acknowledging them
	// (settleWrites): a sequence key evicted tick after tick warned once a tick.
	lostLog *throttle.Every
	// instCap is each instance's key budget as the ticks that timed out on it left it
	// (fitBudget; 0: none, Config.KeysPerTick); instLeft what a tick's plan has left of
	// it (instanceBudgets); budgetLog paces the line saying a budget was cut.
	instCap, instLeft []int
	budgetLog         *throttle.Every

	// Owned by the tick goroutine.
	pending map[countKey]int64 // counts Redis has not confirmed: unsent, refused or in doubt
	doubt   map[countKey]int64 // the part of pending in batches sent without an answer
	// pendingPeak is the most counts pending since the maps were last rebuilt (shrink).
	pendingPeak int
	lanes       []lane
	laneReads   [][]readRef // by lane, this tick's reads
	open        []*batch    // by lane and TTL group, the batch being filled this tick
	ttlGroups   int         // distinct TTLs of the limits (limitState.ttlGroup)
	partOf      []int       // by lane, its pipeline this tick (pipelines)

	tickN         uint64          // ticks so far
	fleet         *Fleet          // Run's count of the fleet (fleet.go): Config.Fleet, or its own
	split         splitTick       // a split tick between its write and read phases
	clockCheck                    // Run's, once a minute
	agree         agreeCheck      // the fleet's agreement on limits, checked with the live key (agree.go); its run Config.Warnings's, or its own
	fleetWarn     *throttle.Every // the fleet count's refusals, said at most every fleetWarnEvery
	evictionWatch *evictionWatch  // Run's, once a minute, after the clock check (evictwatch.go): Config.Evictions's, or its own
	// onPhase, when set (tests), is called by Run as each phase of a tick starts, and as
	// its write phase ends, with the tick's boundary.
	onPhase func(part int, boundary time.Time, ended bool)

	// writes, when set (the benchmarks), writes counts in place of writeScript: as the
	// gate did before it, to measure the two side by side. The binary has no such writer:
	// it lives in the package's bench code.
	writes batchWriter
	plans  []plan
	reads  []readRef // every limiter's due reads, reused
	// putOff is, for the due reads the read budget put off, how many ticks in a row it
	// did (readPriority); empty while the budget holds every due read.
	putOff map[teamRef]putOff
	// primedMissed holds the keys Expect marked whose read a tick failed or put off
	// since TickNow last answered, and no tick has read since: its answer's
	// PrimedMissed. A scheduled tick may take the mark between Expect and TickNow's own
	// tick; its miss is the caller's concern only while the key stays unread (a review:
	// a count of misses said a key TickNow's tick had read was not). Past
	// maxPrimedMissed keys, primedMore counts the rest.
	primedMissed map[teamRef]struct{}
	primedMore   int
	// retired is set once a rules reload replaced the limiters (Retire): each tick's
	// writes then end by sharing what is left unwritten (Config.Unwritten).
	retired atomic.Bool
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
	window int64         // the limiter's window in ns: where its epochs begin (createdEarly)
	// ttlGroup numbers the distinct TTLs of the limits (one for all of them when their
	// windows are alike): one write batch carries any counters of its lane and TTL, so a
	// gate with three rules of one window sends the commands of one.
	ttlGroup int
	sweep    limit.Sweep
	oldest   int64 // the oldest epoch whose counts are still written, for this tick
	// profiles folded by this tick's reads, written by the next tick (profile.go)
	profiles []limit.ProfileWrite
	// overfull is the limiter's count of inserts into a full cache that could evict
	// nothing, as last swept, and overfullLogged when that last grew into a log line.
	overfull       uint64
	overfullLogged time.Time
}

type countKey struct {
	lim   int // index in Ticker.limits
	team  string
	epoch int64
}

// TickResult says what one tick did.
type TickResult struct {
	Writes        int // (team, epoch) counts written (or found written: a resend)
	Reads         int // teams read and applied
	FailedReads   int // planned reads that failed: views rebuilt locally (fail-open)
	Commands      int // Redis commands sent
	CarriedWrites int // counts left for a later tick (budget or failure)
	SkippedReads  int // due reads not made this tick (budget)
	// PrimedMissed is how many of FailedReads and SkippedReads were of keys Expect
	// marked (limit.ReadPrimed): what TickNow's caller was waiting for. TickNow's tick
	// has instead the keys marked whose reads it or a tick since the last TickNow missed
	// and no tick read since.
	PrimedMissed int
	Dropped      int64
	Errors       int // instances whose pipeline failed
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
// limits[0] is the primary. Each limiter's keys use its own KeyPrefix and expire after
// KeyTTL raised to its own KeyLifetime (2 × its window, 3 × with learned thresholds,
// plus GATE_MAX_EVENT_AGE under the event clock).
func NewMulti(limits []Limit, instances []redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Ticker, error) {
	if len(instances) == 0 {
		return nil, fmt.Errorf("%w: no Redis instance", ErrBadConfig)
	}
	if len(limits) == 0 || limits[0].Lim == nil {
		return nil, fmt.Errorf("%w: no limiter", ErrBadConfig)
	}
	cfg, err := cfg.withDefaults()
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
		states[i] = limitState{l: lm.Lim, prefix: p, ttl: max(cfg.KeyTTL, lm.Lim.KeyLifetime()), window: int64(lm.Lim.Config().Window)}
	}
	var ttls []time.Duration
	for i := range states {
		g := slices.Index(ttls, states[i].ttl)
		if g < 0 {
			g = len(ttls)
			ttls = append(ttls, states[i].ttl)
		}
		states[i].ttlGroup = g
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg, len(instances), cfg.Mode == ModeCluster, cfg.Redirects, cfg.Dropped, cfg.TickInterval)
	if err != nil {
		return nil, err
	}
	if cc, ok := instances[0].(*redis.ClusterClient); ok && cfg.Redirects == nil {
		// Node clients are created lazily, so a hook added now sees every node's pipelines
		// (while this is the client's first tick: Redirects).
		(&Redirects{c: m.redirects}).Watch(cc)
	}
	t := &Ticker{
		cfg:          cfg,
		nowReq:       make(chan chan TickResult),
		limits:       states,
		instances:    instances,
		log:          log,
		m:            m,
		errLogs:      make([]errLog, len(instances)),
		pending:      make(map[countKey]int64),
		doubt:        make(map[countKey]int64),
		putOff:       make(map[teamRef]putOff),
		primedMissed: make(map[teamRef]struct{}),
		plans:        make([]plan, len(instances)),
		ttlGroups:    len(ttls),
	}
	for k := range t.parseLogs {
		t.parseLogs[k] = throttle.NewEvery(errorLogInterval, nil) // wall time: it paces a log
	}
	t.lostLog = throttle.NewEvery(errorLogInterval, nil)
	if t.fleet = cfg.Fleet; t.fleet == nil {
		t.fleet = NewFleet()
	}
	if t.evictionWatch = new(evictionWatch); cfg.Evictions != nil {
		t.evictionWatch = &cfg.Evictions.w
	}
	if t.agree.run = new(agreeRun); cfg.Warnings != nil {
		t.agree.run, t.clockCheck.shared = &cfg.Warnings.agree, cfg.Warnings
	}
	// A gate's later rule set starts at the fleet its earlier one found, not at one.
	t.applyFleet(t.fleet.Size())
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
	t.open = make([]*batch, n*len(ttls))
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
	// wait waits until until; serving, it makes the ticks TickNow asks for meanwhile.
	// Not while a split tick's reads wait for the fleet's writes: made early, they would
	// miss some and be applied as reads that follow them all (Read.Fresh).
	wait := func(until time.Time, serving bool) bool {
		timer.Reset(time.Until(until))
		var now chan chan TickResult
		if serving {
			now = t.nowReq
		}
		for {
			select {
			case <-ctx.Done():
				return false
			case <-timer.C:
				return true
			case done := <-now:
				tctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
				res := t.Tick(tctx)
				res.PrimedMissed = t.takePrimedMissed() // its own and those of the ticks since the last, unread
				done <- res
				cancel()
			}
		}
	}
	t.countFleet(ctx, time.Now()) // before the first tick: the floors start at the fleet's size
	// Before the first tick too: that tick's reads fold the profiles of every team cached
	// by then (a gate routing before it, a rules reload's new tick), and were the offset
	// still unmeasured, a host's clock days off would write those folds (withholdProfile).
	// Under one tick timeout in all: a hung instance 0 delays the first tick by that at
	// most, and the check is tried again after it.
	cctx, ccancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	t.checkClock(cctx)
	ccancel()
	for {
		at := nextTick(time.Now(), t.cfg.TickInterval)
		if !wait(at, true) {
			break
		}
		// The tick's deadline: a node that hangs costs its teams this tick, never the next
		// tick's start.
		tctx, cancel := context.WithDeadline(ctx, at.Add(t.cfg.TickTimeout))
		if t.onPhase != nil {
			t.onPhase(partWrites, at, false)
		}
		t.WritePhase(tctx)
		if t.onPhase != nil {
			t.onPhase(partWrites, at, true)
		}
		if !wait(at.Add(t.readDelay()), false) {
			cancel()
			break // the final flush makes the planned reads first
		}
		if t.onPhase != nil {
			t.onPhase(partReads, at, false)
		}
		// The reads keep the time the tick gives them after the read delay when a node that
		// hung held the write phase to the tick's deadline (its own reads are not sent:
		// queueReads), up to the errands' deadline below. Under the tick's deadline, passed
		// by then, every other node's reads failed unsent, each tick the node hung.
		edl := at.Add(t.cfg.TickInterval - t.cfg.TickInterval/8) // the errands' deadline
		rdl := at.Add(t.cfg.TickTimeout)
		if late := time.Now().Add(t.cfg.TickTimeout - t.readDelay()); late.After(rdl) && edl.After(rdl) {
			rdl = late
			if edl.Before(rdl) {
				rdl = edl
			}
		}
		rctx, rcancel := context.WithDeadline(ctx, rdl)
		t.ReadPhase(rctx)
		rcancel()
		cancel()
		// The errands that ask instance 0 (the fleet count, the minute's clock check; the
		// minute's look at every instance's evictions after them) end
		// an eighth of an interval before the next boundary: with a timeout of their own, a
		// hung instance 0 held the loop past it, and Run skipped every other tick for every
		// instance; with the tick's deadline, which a hung other instance uses up, they
		// never ran while it hung, though instance 0 answers.
		ectx, ecancel := context.WithDeadline(ctx, edl)
		t.checkClock(ectx)
		t.countFleet(ectx, time.Now())
		// Last: an instance that hangs holds it to the errands' deadline.
		t.watchEviction(ectx)
		ecancel()
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.FlushTimeout)
	defer cancel()
	// Tried again until FlushTimeout (within the shutdown bound the start line states):
	// the counts are this gate's last, and a Redis that failed them for a moment (a
	// connection reset, a node restarting, a refusal) would cost the fleet them for good.
	// A retired tick's unwritten counts are Drain's (or DrainBy's, the gate stopping),
	// which its gate runs after (a rules reload): it keeps trying, and says what it wrote
	// and dropped.
	var dropped int64
	if err := t.flushRetrying(fctx, &dropped, !t.retired.Load()); err != nil {
		t.log.Warn("final flush of pending counts incomplete", "err", err, "pending_writes", len(t.pending))
	}
}

// flushRetrying flushes until fctx ends, and, with retry, again while Redis fails it,
// with waits doubling from finalFlushRetry to finalFlushRetryMax: a tick's last writes.
func (t *Ticker) flushRetrying(fctx context.Context, dropped *int64, retry bool) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	err := t.flush(fctx, dropped)
	for wait := finalFlushRetry; retry && err != nil && fctx.Err() == nil; wait = min(2*wait, finalFlushRetryMax) {
		timer.Reset(wait)
		select {
		case <-fctx.Done():
		case <-timer.C:
			err = t.flush(fctx, dropped)
		}
	}
	return err
}

// TickNow has Run make a whole tick now, between the ones it schedules, and returns once
// it is made: the writes of the counts due and the reads of the teams due, those Expect
// marked among them (limit.ReadPrimed), their views applied. A gate calls it before
// routing the records waiting in partitions it takes over (consume's Config.Prime). The
// tick is as any Tick: not aligned with the fleet's (its reads add half a tick of the
// others' traffic as unseen), bounded by Config.TickTimeout, its failures counted and
// logged as any tick's. It returns an error when a read of a key Expect marked failed
// or was put off, by its tick or one Run made since the last TickNow (its view is this
// gate's own until a later tick reads it; another
// team's failed read, on another instance say, is no concern of the caller's), or
// ctx ended first (Run not running, or busy with a tick past ctx's end: the tick, if
// begun, still ends as Run's). A request made while a split tick's reads wait for the
// fleet's writes is served after them.
func (t *Ticker) TickNow(ctx context.Context) error {
	done := make(chan TickResult, 1) // Run's send never waits for a caller gone
	select {
	case t.nowReq <- done:
	case <-ctx.Done():
		return fmt.Errorf("asking the tick for a tick now: %w", ctx.Err())
	}
	select {
	case res := <-done:
		if res.PrimedMissed > 0 {
			return fmt.Errorf("a tick now: %d of the keys marked are unread, their reads failed or put off by it or a tick since the last tick now (its own tick: %d failed, %d put off of all its reads)",
				res.PrimedMissed, res.FailedReads, res.SkippedReads)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for a tick now: %w", ctx.Err())
	}
}

// The final flush's waits between attempts, doubling from the first to the most.
const (
	finalFlushRetry    = 100 * time.Millisecond
	finalFlushRetryMax = time.Second
)

// PendingWrites is how many (team, epoch) counts Redis has not confirmed. Only the
// goroutine that ticks may call it.
func (t *Ticker) PendingWrites() int { return len(t.pending) }

// Drain is for a tick whose Run has returned while counts are left to write (its final
// flush failed: Redis down or refusing writes), whose limiters no longer count: a rule
// set a reload replaced. It flushes again each TickInterval until nothing is left to write,
// the counts written or dropped as a tick drops them (an epoch no longer written), or ctx
// ends, and then flushes for at most FlushTimeout more, again while Redis fails it. Its
// counts cannot go to another tick: a batch in doubt is safe to send again only under
// this tick's writer and number (writeScript), and only this tick's lanes can tell from
// an answer that Redis lost batches it had confirmed, and send them again. With ctx done
// on entry it makes no flush (the gate stopping: DrainBy). It returns the counts dropped
// meanwhile, and an error if some are left unwritten.
func (t *Ticker) Drain(ctx context.Context) (dropped int64, err error) {
	if len(t.pending) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("draining %d pending counts: %w", len(t.pending), err)
	}
	timer := time.NewTimer(t.cfg.TickInterval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.FlushTimeout)
			defer cancel()
			return dropped, t.flushRetrying(fctx, &dropped, true)
		case <-timer.C:
		}
		// A flush ends at its first tick that writes nothing: Redis still failing, or a
		// slot still in migration.
		if t.flush(ctx, &dropped) == nil {
			return dropped, nil
		}
		timer.Reset(t.cfg.TickInterval)
	}
}

// DrainBy is Drain for a gate that stops: a retired tick's Run returned (its final flush
// one attempt) as the gate began to stop, and what it left is flushed, and again while
// Redis fails it, until deadline (the gate's shutdown start + FlushTimeout, the bound
// its own tick's final flush keeps): Drain, its context done, made no flush at all, and
// a moment's refusal at shutdown lost the retired rules' counts (a review: 100 of 150).
func (t *Ticker) DrainBy(deadline time.Time) (dropped int64, err error) {
	if len(t.pending) == 0 {
		return 0, nil
	}
	fctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return dropped, t.flushRetrying(fctx, &dropped, true)
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
// a tick writes nothing (an instance failed, or a cluster slot in migration refused the
// writes), or ctx ends. A failed instance costs
// only its own counts: the others' are written past the first tick's key budget.
func (t *Ticker) Flush(ctx context.Context) error {
	var dropped int64
	return t.flush(ctx, &dropped)
}

// flush is Flush, adding the counts its ticks drop to dropped.
func (t *Ticker) flush(ctx context.Context, dropped *int64) error {
	t.ReadPhase(ctx) // reads planned by a write phase are made first
	for {
		r := t.tick(ctx, false)
		*dropped += r.Dropped
		switch {
		case len(t.pending) == 0:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("flushing %d pending counts: %w", len(t.pending), ctx.Err())
		case r.Writes == 0 && r.Errors > 0:
			// Each tick that writes takes what it wrote out of pending: the loop ends.
			return fmt.Errorf("flushing %d pending counts: Redis failed", len(t.pending))
		case r.Writes == 0:
			// No error, nothing written: TRYAGAIN, a cluster slot in migration. Sent again
			// at once, they were refused again tick after tick until ctx ended.
			return fmt.Errorf("flushing %d pending counts: Redis wrote none (a cluster slot in migration)", len(t.pending))
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

// finish ends a tick, whole or split: each instance's pipeline metrics and failure log,
// then the tick's.
func (t *Ticker) finish(commands int, took time.Duration) {
	t.fitBudget()
	for i := range t.plans {
		p := &t.plans[i]
		if !p.has(partWrites | partReads) {
			continue
		}
		label := strconv.Itoa(i)
		if t.cfg.Mode == ModeCluster {
			t.trackNodes(p)
		}
		if t.cfg.Mode != ModeCluster {
			t.m.pipelineDur.WithLabelValues(label).Observe(p.dur.Seconds())
		}
		for node, d := range p.nodeDur { // cluster mode: the slow primary named
			// A node of the write phase no longer in the read phase's slot map has no
			// series kept (trackNodes): its time is left out, not left behind.
			if _, ok := t.errNodes[node]; ok || node == "" {
				t.m.pipelineDur.WithLabelValues(cmp.Or(node, label)).Observe(d.Seconds())
			}
		}
		t.m.pipelineSize.WithLabelValues("write").Observe(float64(p.writes))
		t.m.pipelineSize.WithLabelValues("read").Observe(float64(p.reads))
		t.report(i, p)
	}
	t.shrink()
	t.m.pendingWrites.Set(float64(len(t.pending)))
	t.m.tickCommands.Observe(float64(commands))
	t.m.tickDur.Observe(took.Seconds())
}

// instanceBudgets returns each instance's key budget for the tick being planned (written
// down as the plan takes from it): its cap (fitBudget), else Config.KeysPerTick.
func (t *Ticker) instanceBudgets() []int {
	if len(t.instCap) != len(t.plans) {
		t.instCap, t.instLeft = make([]int, len(t.plans)), make([]int, len(t.plans))
	}
	for i, c := range t.instCap {
		t.instLeft[i] = t.cfg.KeysPerTick
		if c > 0 {
			t.instLeft[i] = c
		}
	}
	return t.instLeft
}

// fitBudget fits each instance's key budget to what it answers in time: a tick that timed
// out on it with two commands' keys or more (Config.KeysPerCommand, the least it cuts
// to) halves it (to half the keys planned for it, writes and reads), and a tick that did
// not raises it by half again, back to Config.KeysPerTick. Sent whole, a backlog (150,000
// teams due for reads under a per-user rule, or written after an outage) timed out tick
// after tick, nothing read or written, for as long as it lasted (a third gate joining
// the demo: over a minute, a team at twice its limit let through;
// TestBacklogFitsTheTickTimeout): a failed read stays due, and writes in doubt are sent
// again whole. Cut to what fits, each tick gets its share through, the reads nearest
// their limit first. Each instance's own: a hung one, timing out every tick, costs the
// others nothing (TestHungInstanceCutsNoOtherBudget). Not in cluster mode, whose one
// pipeline serves every node: a hung node would cut the budget of all.
func (t *Ticker) fitBudget() {
	if t.cfg.Mode == ModeCluster || len(t.instCap) != len(t.plans) {
		return
	}
	for i := range t.plans {
		p := &t.plans[i]
		used := p.writes + p.readKeys
		switch timedOut := p.causes.has(causeTimeout); {
		case timedOut && used >= 2*t.cfg.KeysPerCommand:
			// A tick of fewer keys than two commands' timing out is a Redis that stalls (a
			// stopped process, a long script), not one given too much: cut, it was told of
			// as "ticks time out with this many keys" for 206 keys, the cut to 200.
			t.instCap[i] = max(used/2, t.cfg.KeysPerCommand)
			if t.budgetLog == nil {
				t.budgetLog = throttle.NewEvery(time.Minute, nil)
			}
			if ok, quiet := t.budgetLog.Allow(); ok {
				t.log.Warn("redis ticks time out with this many keys: the next ticks carry fewer (the teams nearest their limit read first, "+
					"the rest of the writes and reads carried) until they fit, then more again up to GATE_KEYS_PER_TICK",
					"instance", i, "keys", used, "next_budget", t.instCap[i], "tick_timeout", t.cfg.TickTimeout.String(), "warnings_unlogged", quiet)
			}
		case !timedOut && t.instCap[i] > 0:
			if t.instCap[i] += t.instCap[i] / 2; t.instCap[i] >= t.cfg.KeysPerTick {
				t.instCap[i] = 0
			}
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
