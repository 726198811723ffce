package consume

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/throttle"
	"github.com/capturegate/gate/internal/tlsreload"
)

// Router decides each record's output. *route.Router is the gate's; it is an interface
// here so the loop's commit and retry logic can be tested on its own.
type Router interface {
	// RouteInto writes into *out the record to produce for in, decided at time now. s
	// is scratch owned by the calling goroutine.
	RouteInto(now time.Time, in *kgo.Record, s *route.Scratch, out *kgo.Record) route.Outcome
	// DeadLetter returns a dead-letter record for in with the given reason.
	DeadLetter(in *kgo.Record, reason, detail string) *kgo.Record
}

// clockRefresh is how many records a worker routes on one clock reading: time.Now costs
// about as much as a check on these machines, and a few hundred records take
// microseconds.
const clockRefresh = 256

// Consumer is the gate's Kafka loop. Build it with New, run it with Run, once.
type Consumer struct {
	cfg    Config
	router Router
	clock  clock.Clock
	log    *slog.Logger
	m      *metrics
	reg    prometheus.Registerer
	cl     *kgo.Client
	tx     *kgo.GroupTransactSession // exactly-once only: the session that owns cl
	// live is cl, for the metrics' scrapes: with exactly-once delivery the loop
	// replaces cl when it rebuilds a fenced session (see recoverFenced).
	live atomic.Pointer[kgo.Client]
	// closeMus holds each client's close (closeOf), taken by each closer of it
	// (closeClient's, Close's): a client is closed once, by whichever comes first (franz-go's
	// Close run twice at once races with itself, each killing the fetch sessions: a data
	// race under -race in v1.22.2; run twice in turn, a second close the crash tests
	// count), and
	// a close the loop starts while Close closes it (a transaction whose end that close
	// failed, rebuilding the client) waits for that one to finish. One a client, not one
	// for all: a rebuilt client's close must not wait for its predecessor's, still under
	// way past RevokeTimeout. Keyed weakly: a closed client is not kept alive by its
	// entry, which goes once the client is collected (dropCollectedCloses); a session
	// rebuilt every 10 s (an output topic deleted) kept every client it had ever built.
	closeMus sync.Map // weak.Pointer[kgo.Client] → *clientClose
	// shut is set by Close: the exactly-once loop builds no new session after it
	// (rebuild), which no one would close.
	shut atomic.Bool

	partsMu sync.Mutex
	parts   map[int32]*partition

	// commitMu orders issuing commits: an interval commit snapshotted before a revoke
	// is issued (and so, by franz-go's ordering, completes) before the revoke's own.
	commitMu sync.Mutex
	// commitPending is set while an interval commit awaits its answer (commitLoop).
	commitPending atomic.Bool
	// commitLog paces the log of failed interval commits (see logCommitFailure).
	commitLog *throttle.Every
	// fetchLog paces the log of fetch errors a retry may cure (see fetchErrors).
	fetchLog *throttle.Every
	// rerouteLog paces the log of records rerouted to dead letter (logRerouted).
	rerouteLog rerouteLog
	// fetchRefusedAt is when a poll last handed back a fetch error no retry cures
	// (a mono reading; see fetchErrors), 0 when none is recorded.
	fetchRefusedAt atomic.Int64
	// hold is the commit hold (commithold.go).
	hold commitHold

	retry   retryQueue
	ready   atomic.Bool // has joined the group and holds an assignment (maybe empty)
	closing atomic.Bool // shutting down: revokes do not wait for in-flight records
	// preflighted is set once the preflight has passed: until then it reports the topics
	// missing, the rule topic watch waits (nothing is routed yet), and the consumer is
	// not ready, though franz-go may have joined the group already.
	preflighted atomic.Bool
	// preflightWait is what a preflight retrying quietly waits for (awaitPreflight's
	// transient answers), for NotReady; nil when it waits for nothing such.
	preflightWait atomic.Pointer[string]
	// startRuleTopics are the rule topics in use when the consumer was made (those
	// Config.OutputTopics lists with the gate's own): the preflight checks each only
	// while a rule in use still sends to it.
	startRuleTopics []string
	// outstanding counts the records handed to the client whose promise has not
	// finished (at-least-once): zero means every failure is in the retry queue.
	outstanding paddedCount
	// buffered counts the records (and outcome rows) handed to the client whose promise
	// has not run (bufferedHook, exactly once only): BufferedProduceRecords without its
	// lock.
	buffered paddedCount
	// route is what routed records are produced under (at-least-once): a child of
	// produceCtx that onBlocked cancels when a rebalance waits for the poll being
	// routed, so that a Produce blocked on a full buffer returns and routing stops.
	// The poll loop makes a new one before routing when it was cancelled; runCtx is
	// Run's, whose end also stops routing (but not the records handed over).
	route     context.Context
	routeMu   sync.Mutex
	routeStop context.CancelFunc
	runCtx    context.Context
	// rewinds collects, for the running poll, where each partition's routing stopped
	// short (see unroute); the poll loop moves the client back there.
	rewinds map[int32]kgo.EpochOffset
	// unrouted counts the times routing stopped short (tests read it).
	unrouted atomic.Int64
	// produceCtx is what records are produced under: it ends when the shutdown
	// timeout has passed after Run's context ended, so that a broker that stopped
	// answering cannot hold a full buffer, and so the shutdown, for ever.
	produceCtx context.Context
	// problems are conditions an operator must fix; the consumer is not ready while
	// any holds.
	problems problems
	// progressAt is when the loop last made progress, a mono reading (0: never; see
	// watchdog.go).
	progressAt atomic.Int64
	// mono is the clock of every age the consumer measures (mono.go).
	mono mono
	// lagRefreshed, when set (by tests), runs as soon as refreshLag has set the lags it
	// measured: where a Stalled read sees the work they are.
	lagRefreshed func()
	// revokeWaited, when set (by tests), runs in an at-least-once revoke once it has
	// stopped waiting for the partitions' records in flight, before its commit.
	revokeWaited func()
	// watched, when set (by tests), runs after each round of the output watch that ran
	// (a client to ask with): a test waits for rounds rather than for a time.
	watched func()
	// ackAt is when the brokers last acknowledged output records (a mono reading; see
	// outputs.go).
	ackAt atomic.Int64
	// produceBlocked is set while a produce problem (see produceProblem) is recorded,
	// so that an acknowledgement checks for one at the cost of an atomic load.
	produceBlocked atomic.Bool
	// stallLogged is set while a stall past StallNotReady has been logged (watchdog.go).
	stallLogged atomic.Bool
	// deadLogged is set while a stall past StallRestart has been logged (watchdog.go).
	deadLogged atomic.Bool
	// stale holds the output topics a produce to failed with UNKNOWN_TOPIC_ID, for the
	// output watch to purge from the client once they exist (outputs.go).
	stale staleTopics
	// batchLimits are the output topics' max.message.bytes, read at preflight, which
	// the producer's batches to them stay within (batchlimit.go).
	batchLimits batchLimits
	// topicIDs are the IDs of the topics the gate checks, as the cluster last gave them:
	// a rule topic created again while no rule used it is learned anew (ruletopics.go).
	topicIDs topicIDs
	// added is the input topic's partition count the gate knows, for partitions added
	// while it runs (added.go).
	added addedWatch

	scratch []route.Scratch          // one per routing goroutine
	slabs   slabs                    // records in flight, reused (slab.go)
	pools   fetchPools               // fetched records' memory, lent to the client (pools.go)
	promise func(*kgo.Record, error) // onProduced, made once rather than per record

	// Exactly-once only (see transact.go).
	txn        txnState
	txnPromise func(*kgo.Record, error) // onProducedTxn
	// reroutes holds the records the broker rejected for good, for their replay.
	// Written by the transaction loop between transactions only, read while routing.
	reroutes map[rerouteKey]reroute
	// recoveries are when the loop last rebuilt a fenced session (see recoverFenced);
	// the loop's own.
	recoveries []recovery
	// unstable is the unstable-offsets watch's (unstable.go), the output watch's own.
	unstable unstableWatch
	// out writes outcome rows (outcomes.go); nil when Config.OutcomesTopic is empty.
	out *outcomes
}

// paddedCount is an atomic counter alone on its cache line(s): every routing goroutine
// and the promise goroutine change it once per record, and the fields read per record
// beside it must not share its line.
type paddedCount struct {
	_ [64]byte
	atomic.Int64
	_ [56]byte
}

// New builds the consumer and its client; nothing connects until Run. reg receives the
// gate_* consumer metrics and franz-go's own (gate_kafka_*); log takes lifecycle events.
func New(cfg Config, router Router, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{
		mono:    newMono(),
		cfg:     cfg,
		reg:     reg,
		router:  router,
		clock:   clk,
		log:     log,
		route:   context.Background(),
		runCtx:  context.Background(),
		parts:   make(map[int32]*partition),
		scratch: make([]route.Scratch, runtime.GOMAXPROCS(0)),
		// Wall time, not clk (which may be a routing clock a test drives): it paces a log.
		commitLog: throttle.NewEvery(commitLogEvery, nil),
		fetchLog:  throttle.NewEvery(commitLogEvery, nil),
	}
	if cfg.RuleTopics != nil {
		c.startRuleTopics = cfg.RuleTopics.Topics()
	}
	c.retry.init()
	c.initOutcomes()
	c.produceCtx = context.Background()
	c.promise = c.onProduced
	c.txnPromise = c.onProducedTxn
	if c.m, err = newMetrics(reg, c); err != nil {
		return nil, err
	}
	if cfg.Delivery == ExactlyOnce {
		if err := c.newSession(); err != nil {
			return nil, err
		}
		return c, nil
	}
	if c.cl, err = kgo.NewClient(c.clientOpts()...); err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	c.live.Store(c.cl)
	return c, nil
}

// clientOpts are the options of the consumer's client: the configuration's, its
// rebalance callbacks and franz-go's metrics. Each client gets a kprom of its own: a
// closed client unregisters its collectors, and a rebuilt one registers them anew.
func (c *Consumer) clientOpts() []kgo.Opt {
	opts := append(c.cfg.clientOpts(),
		// After Config.clientOpts's ProducerBatchMaxBytes, which it replaces: asked once a
		// partition, when the client first produces to it, which is after the preflight.
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 { return ClientBatchLimit(c.batchMaxBytes(topic)) }),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.OnPartitionsCallbackBlocked(c.onBlocked),
	)
	if c.reg != nil {
		// kprom's gatherer is only used by its own HTTP handler, which the gate does not
		// serve: the gate's registry is served with everything else.
		reg := c.reg
		if c.exactlyOnce() {
			reg = withoutKpromBuffered{reg} // served from bufferedHook (metrics.go)
		}
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("gate_kafka", kprom.Registerer(reg))))
	}
	// Both delivery modes recycle their input records once every record of a poll's
	// batch is done (ackBatch).
	opts = append(opts, kgo.WithPools(&c.pools), kgo.WithHooks(&c.pools))
	// Control records (the commit or abort marker that ends a transaction of the
	// input's producers) are polled, so that the gate sees its position move past them
	// (works drops them): a marker after the last record otherwise counts as lag no
	// poll ever clears, and an idle gate reads as stalled (watchdog.go).
	opts = append(opts, kgo.KeepControlRecords())
	opts = append(opts, kgoLoggerOpt(c.log)...)
	opts = append(opts, kgo.WithHooks(newQuotaHook(c.m.throttled, c.log), ackHook{&c.ackAt, c.mono}))
	if c.preflighted.Load() {
		// A client rebuilt once the preflight passed (exactly once: a recovery's session)
		// joins at once, as the one it replaces had.
		opts = append(opts, kgo.ConsumeTopics(c.cfg.InputTopic))
	}
	if c.exactlyOnce() {
		// Only here is the producer's lock held for long (a Begin or an aborting End
		// getting a producer ID): at least once, outstanding counts the records in flight
		// already, and the hook's two atomic adds a record would be paid twice.
		opts = append(opts, kgo.WithHooks(bufferedHook{&c.buffered.Int64}))
	}
	return opts
}

// producerBuffered is the output records (and outcome rows) handed to the client and not yet
// finished: exactly once, counted by bufferedHook without the producer's lock, which a
// Begin waiting for the transaction coordinator holds for as long as 30 s; at least once,
// BufferedProduceRecords (nothing holds that lock for long there).
func (c *Consumer) producerBuffered() int64 {
	if c.exactlyOnce() {
		n, _ := bufferedCounts(c.buffered.Load())
		return n
	}
	if cl := c.live.Load(); cl != nil {
		return cl.BufferedProduceRecords()
	}
	return 0
}

// exactlyOnce reports whether the consumer runs the transaction loop. Unlike c.tx,
// which that loop may replace, it is safe to read from the client's callbacks.
func (c *Consumer) exactlyOnce() bool { return c.cfg.Delivery == ExactlyOnce }

// Ready reports whether the consumer has joined its group and holds an assignment, and
// no condition an operator must fix holds (NotReady says which).
func (c *Consumer) Ready() bool {
	c.fetchRefusalOver(false)
	return c.ready.Load() && c.preflighted.Load() && c.problems.empty() && c.stallProblem() == ""
}

// Close releases the client of a Consumer whose Run is never called (Run closes it
// itself when it returns). Beside a running Run it closes the client under it, as a
// crash would (the tests' SIGKILL), never at once with Run's own close (closeOf), and
// the loop builds no client after it (shut); a client the loop was building as Close ran
// may be closed by the loop after Close returns, before Run does.
func (c *Consumer) Close() {
	c.shut.Store(true)
	// c.live, not c.cl: the exactly-once loop writes c.cl as it rebuilds its session,
	// and publishes the client in c.live; one it publishes as this closes the one
	// before is closed too (the loop, seeing shut, closes it itself if this did not).
	for {
		cl := c.live.Load()
		// The loop learns of this close by shut, and its own close of cl waits for it.
		c.closeOf(cl).do(cl.Close)
		if c.live.Load() == cl {
			return
		}
	}
}

// clientClose is one client's close: done once, by whichever closer takes mu first.
type clientClose struct {
	mu     sync.Mutex
	closed bool
}

// do runs closeFn unless the client was closed already, and reports whether it ran. It
// returns once the client's close, this one or another's, is over.
func (cc *clientClose) do(closeFn func()) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return false
	}
	cc.closed = true
	closeFn()
	return true
}

// closeOf is cl's close (Consumer.closeMus).
func (c *Consumer) closeOf(cl *kgo.Client) *clientClose {
	cc, _ := c.closeMus.LoadOrStore(weak.Make(cl), new(clientClose))
	return cc.(*clientClose)
}

// dropCollectedCloses drops the closes of clients the garbage collector has freed:
// no one can close those again.
func (c *Consumer) dropCollectedCloses() {
	c.closeMus.Range(func(k, _ any) bool {
		if k.(weak.Pointer[kgo.Client]).Value() == nil {
			c.closeMus.Delete(k)
		}
		return true
	})
}

// Run consumes until ctx ends, then shuts down gracefully (see the package doc) and
// closes the client. It returns an error only when the loop stopped for another reason.
func (c *Consumer) Run(ctx context.Context) error {
	if c.exactlyOnce() {
		return c.runTxn(ctx)
	}
	c.log.Info("consumer started", "brokers", c.cfg.Brokers, "input_topic", c.cfg.InputTopic, "group", c.cfg.GroupID,
		"delivery", c.cfg.Delivery.String())
	bg := context.WithoutCancel(ctx)

	// Records are produced until the shutdown timeout has passed after ctx ends.
	grace, stopGrace := graceContext(ctx, c.cfg.ShutdownTimeout)
	defer stopGrace()
	c.produceCtx, c.runCtx = grace, ctx
	// The retry and commit loops outlive ctx: at shutdown, retries go on until the
	// in-flight records are acknowledged or the shutdown timeout passes.
	retryCtx, stopRetry := context.WithCancel(bg)
	commitCtx, stopCommit := context.WithCancel(bg)
	var wg sync.WaitGroup
	wg.Go(func() { c.retryLoop(retryCtx) })
	wg.Go(func() { c.commitLoop(commitCtx) })
	wg.Go(func() { c.holdLoop(commitCtx) })
	wg.Go(func() { c.watchOutputs(commitCtx) })

	c.progressed()
	var runErr error
	if c.awaitPreflight(ctx) == nil && c.beforeRouting(ctx) == nil {
		runErr = c.pollLoop(ctx)
	}

	// Nothing routes any more: every partition's outcome rows go out with the drain.
	c.sealALO(c.produceCtx)
	c.sendNow(grace)
	left := c.waitInFlight(grace, nil)
	// Whatever is still buffered is failed now: a broker that stopped answering does
	// not hold the shutdown past its timeout. Nothing unacknowledged is committed.
	stopGrace()
	stopRetry()
	stopCommit()
	wg.Wait()
	// The final commit has a bound of its own: the drain may have used up the
	// shutdown timeout.
	cctx, cancel := context.WithTimeout(bg, c.cfg.RevokeTimeout)
	committed, err := c.commit(cctx, true, nil)
	cancel()
	if err != nil {
		c.log.Error("final commit failed; the next owner replays from the last commit", "err", err)
	}
	// Where each partition's next owner starts, for the stop line: committed alone is
	// what the final commit moved, empty when the interval's commits had covered
	// everything, which read as nothing committed.
	at := c.resumeOffsets()
	// Leaving the group revokes everything: onRevoked commits again (a no-op when
	// nothing moved) without waiting, as closing is set. Set only now: a revoke during
	// the drain above (another member joining) must wait for the partitions' records
	// and outcome rows as any revoke does, or its commit stops at the shutdown seal's
	// first record and the next owner routes everything since again.
	c.closing.Store(true)
	c.closeClient(c.cl.CloseAllowingRebalance)
	c.ready.Store(false)
	// Rows unwritten hold the commits at their seal: the records they count are routed
	// and counted again by the partitions' next owner, though none is abandoned.
	unwritten := c.rowsUnwritten()
	lvl := slog.LevelInfo
	if left > 0 || unwritten > 0 {
		lvl = slog.LevelWarn
	}
	c.log.Log(bg, lvl, "consumer stopped", "committed", committed, "committed_offsets", at, "abandoned_records", left, "outcome_rows_unwritten", unwritten)
	return runErr
}

// resumeOffsets is the offset last committed for each partition owned that has one:
// where its next owner starts.
func (c *Consumer) resumeOffsets() map[int32]int64 {
	at := map[int32]int64{}
	for _, p := range c.snapshot(nil) {
		p.mu.Lock()
		if p.committed >= 0 {
			at[p.id] = p.committed
		}
		p.mu.Unlock()
	}
	return at
}

// beforeRouting runs Config.BeforeRouting, if any, and returns ctx's error once it has.
func (c *Consumer) beforeRouting(ctx context.Context) error {
	if c.cfg.BeforeRouting != nil {
		c.cfg.BeforeRouting(ctx)
	}
	return ctx.Err()
}

// pollLoop polls and routes until ctx ends or the client is closed.
func (c *Consumer) pollLoop(ctx context.Context) error {
	for {
		// While records or outcome rows are being retried, poll nothing new: a failing
		// broker must slow consumption, not grow the retry queue (or the seals awaiting
		// their rows, which hold the commits). Nor while the polls not yet wholly
		// acknowledged keep as much input as the producer's buffer may hold (inputFull).
		if err := waitUntil(ctx, func() bool { return c.retry.pending.Load() == 0 && c.rowsRetrying() == 0 && !c.inputFull() }); err != nil {
			return nil
		}
		// The routing context exists before the poll returns: a rebalance that starts
		// waiting for this poll at once (onBlocked) must find it.
		c.routeMu.Lock()
		if c.routeStop == nil || c.route.Err() != nil {
			c.route, c.routeStop = context.WithCancel(c.produceCtx)
		}
		c.routeMu.Unlock()
		pctx, cancel := c.pollContext(ctx)
		fetches := c.cl.PollRecords(pctx, c.cfg.MaxPollRecords)
		cancel()
		nudgeFetch(c.cl, fetches)
		if fetches.NumRecords() > 0 {
			c.progressed()
		}
		if fetches.IsClientClosed() {
			c.cl.AllowRebalance()
			return errors.New("kafka client closed while consuming")
		}
		c.fetchErrors(fetches)
		// Routing stops when ctx ends or a rebalance wants to run (onBlocked); what
		// it did not hand to the producer is neither committed nor skipped: the
		// client is moved back to it (unroute).
		c.process(c.works(fetches), c.routeWork)
		if len(c.rewinds) > 0 {
			c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: c.rewinds})
			c.rewinds = nil
		}
		c.sealDue()
		c.cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// pollContext bounds a poll: to nudgeAfter, so that a poll with no record asks the fetch
// loops to start (nudgeFetch), and to Config.OutcomesFlushInterval, so that the periodic
// seal runs on an idle gate too.
func (c *Consumer) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wait := nudgeAfter
	if c.out != nil {
		wait = min(wait, c.cfg.OutcomesFlushInterval)
	}
	return context.WithTimeout(ctx, wait)
}

// inputFull reports whether the input records kept for the polls not yet wholly
// acknowledged, of the partitions routing, reach MaxBufferedRecords or MaxBufferedBytes.
// A poll's input records (and its slab) are kept until its last record is acknowledged
// (ackBatch): the producer's buffer bounds the records unacknowledged, not those kept
// for them. One output partition refusing writes while the others take theirs held
// back every poll with a record for it, so the gate read on until that partition alone
// filled the buffer, keeping the buffer's size times the output partitions in input.
// A stopped partition's stuck record is never acknowledged: its polls are left out.
func (c *Consumer) inputFull() bool {
	var records, bytes int64
	for _, p := range c.snapshot(nil) {
		if p.stopped.Load() {
			continue
		}
		r, b := p.held()
		records, bytes = records+r, bytes+b
	}
	return records > 0 && (records >= int64(c.cfg.MaxBufferedRecords) || bytes >= int64(c.cfg.MaxBufferedBytes))
}

// onBlocked is called (on a goroutine of its own) when a rebalance waits for the poll
// being routed: routing stops, so that a joining member is not held for as long as a
// full buffer in front of a hung broker would hold it.
func (c *Consumer) onBlocked(context.Context, *kgo.Client) {
	c.routeMu.Lock()
	defer c.routeMu.Unlock()
	if c.routeStop != nil {
		c.routeStop()
	}
}

// unroute records that routing w stopped before w.recs[i]: b no longer waits for the
// records from there, and the client is to be moved back to it, so they are polled
// again (or, if the partition is revoked, replayed by its next owner).
func (c *Consumer) unroute(w work, b *batch, i int) {
	// Read before ackBatch, which may complete b and recycle its records.
	from := kgo.EpochOffset{Epoch: w.recs[i].LeaderEpoch, Offset: w.recs[i].Offset}
	w.p.mu.Lock()
	b.end = from.Offset
	b.epoch = from.Epoch
	if i > 0 {
		b.epoch = w.recs[i-1].LeaderEpoch
	}
	w.p.mu.Unlock()
	c.ackBatch(b, int64(len(w.recs)-i))
	c.unrouted.Add(1)
	c.routeMu.Lock()
	if c.rewinds == nil {
		c.rewinds = make(map[int32]kgo.EpochOffset)
	}
	c.rewinds[w.p.id] = from
	c.routeMu.Unlock()
}

// closeClient runs closeFn (the client's, which leaves the group and so revokes
// everything, committing in onRevoked, a no-op after the final commit) for at most
// RevokeTimeout: a coordinator that stopped answering must not hold the shutdown. A
// client closed by another (Close, under the running loop) is not closed again; a close
// of it under way is waited for as this one would be. The channel
// returned is closed once the client's close is over, past RevokeTimeout too: a
// session built before then would register its client's metrics beside the closed
// one's (resumeSession waits for it).
func (c *Consumer) closeClient(closeFn func()) <-chan struct{} {
	done := make(chan struct{})
	cc := c.closeOf(c.cl)
	go func() {
		defer close(done)
		cc.do(closeFn)
	}()
	t := time.NewTimer(c.cfg.RevokeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn("leaving the consumer group did not finish in time; the group times this member out instead",
			"waited", c.cfg.RevokeTimeout.String())
	}
	return done
}

// problemFetch keys the problem of a topic (or, "", the group) that the brokers refuse
// to the gate's consumer for a reason only an operator can fix (fetchProblem).
const problemFetch = "fetch/"

// problemSASL keys the brokers' refusal of the gate's SASL login while it runs; a
// fetch problem (a space is in no topic name), cleared with the others.
const problemSASL = problemFetch + " sasl"

// problemTLS keys a TLS handshake with the brokers that fails on a certificate while
// the gate runs, as problemSASL.
const problemTLS = problemFetch + " tls"

// fetchRefusedQuiet is how long after the last refused fetch, with none since, such a
// problem is taken as over though no record has been polled since (an idle topic): franz-go
// fetches again at once after a refused fetch, and joins again a few seconds after a
// refused group session, so a refusal that goes on is seen well within it.
const fetchRefusedQuiet = 10 * time.Second

// fetchErrors counts and reports the errors of a poll. franz-go hands back a fetch
// error it does not retry by itself (TOPIC_AUTHORIZATION_FAILED: the READ ACL revoked
// after the preflight) and fetches again at once, with no backoff: thousands of errors
// a second; a group session that ends in an error (GROUP_AUTHORIZATION_FAILED) comes as
// one too. Such a refusal is a problem (not ready, one error line), over (with a line)
// once a poll returns records, or fetchRefusedQuiet after the last one; the others, which
// a retry may cure, are logged at most once per commitLogEvery.
func (c *Consumer) fetchErrors(fetches kgo.Fetches) {
	refused := false
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if c.dataLoss(fetches, topic, p, err) {
			return // records gone before they were read: counted and reported (loss.go)
		}
		c.m.fetchErrors.Inc()
		if msg := c.fetchProblem(topic, err); msg != "" {
			refused = true
			c.fetchRefusedAt.Store(c.mono.now())
			attrs := []any{"err", err}
			key := problemFetch + topic
			if topic != "" {
				attrs = append(attrs, "topic", topic, "partition", p)
			}
			if saslProblem(err) != "" {
				key = problemSASL // one problem, whichever fetch or group session met it
			} else if tlsProblem(err) != "" {
				key = problemTLS
			}
			c.logProblem(context.Background(), key, msg, attrs...)
			return
		}
		// franz-go retries fetches itself; this is for the operator. An error of no topic
		// is the group session's (a broker gone, the coordinator moving): said as such,
		// naming no partition 0 it is not about.
		if ok, unlogged := c.fetchLog.Allow(); ok {
			if topic == "" {
				c.log.Warn("consumer group session failed; the client retries", "err", err, "errors_unlogged", unlogged)
			} else {
				c.log.Warn("fetch failed; the client retries", "topic", topic, "partition", p, "err", err, "errors_unlogged", unlogged)
			}
		}
	})
	if !refused {
		c.fetchRefusalOver(fetches.NumRecords() > 0)
	}
}

// fetchRefusalOver clears the refused-fetch problems, with a line, when records were
// polled since the last refusal (polled) or fetchRefusedQuiet has passed without one.
// NotReady asks too: a poll waits for records, and a refusal lifted from an idle topic
// would otherwise keep the gate not ready until its next record.
func (c *Consumer) fetchRefusalOver(polled bool) {
	at := c.fetchRefusedAt.Load()
	if at == 0 || !polled && c.mono.since(at) < fetchRefusedQuiet {
		return
	}
	if !c.fetchRefusedAt.CompareAndSwap(at, 0) {
		return // refused again meanwhile
	}
	if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, problemFetch) }) {
		c.log.Info("kafka: fetching works again", "topic", c.cfg.InputTopic, "group", c.cfg.GroupID)
	}
}

// fetchProblem is what an operator must do about err, a fetch error on topic ("": of the
// group session), when it is a refusal no retry cures: "" for any other (franz-go retries
// those itself, and a group session ended by a rebalance or a member timed out rejoins).
func (c *Consumer) fetchProblem(topic string, err error) string {
	if msg := saslProblem(err); msg != "" {
		return msg
	}
	if msg := tlsProblem(err); msg != "" {
		return msg
	}
	switch {
	case topic == "" && errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Sprintf("kafka: consumer group %q: %v: grant the gate's principal the READ ACL on the group; nothing is consumed meanwhile", c.cfg.GroupID, err)
	case topic == "" && errors.Is(err, kerr.InvalidSessionTimeout):
		// The classic protocol's join: GATE_KAFKA_SESSION_TIMEOUT is the gate's to fix.
		return fmt.Sprintf("kafka: consumer group %q: the brokers refuse the gate's session timeout (INVALID_SESSION_TIMEOUT): "+
			"set GATE_KAFKA_SESSION_TIMEOUT within their group.min.session.timeout.ms and group.max.session.timeout.ms (6 s and 30 min by default); nothing is consumed meanwhile", c.cfg.GroupID)
	case topic == "" && errors.Is(err, kerr.GroupIDNotFound):
		// Kafka's answer to a join in a group of the other protocol with members that it
		// may not switch ("Cannot upgrade classic group ..."), as a rolling update from
		// one GATE_KAFKA_GROUP_PROTOCOL to the other meets; or of a share or streams
		// group of that name. The group is there: "does not exist" misled. Kafka's reason
		// is in the line's err.
		return fmt.Sprintf("kafka: consumer group %q does not take this gate as a member of the %s group protocol (GATE_KAFKA_GROUP_PROTOCOL): "+
			"its members run the other one and the brokers' group.consumer.migration.policy does not let it switch (bidirectional, Kafka 4's default, does), "+
			"or it is a share or streams group; set GATE_KAFKA_GROUP_PROTOCOL as the gates in it have it, or stop them first; nothing is consumed meanwhile",
			c.cfg.GroupID, c.cfg.GroupProtocol)
	case topic != "" && errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Sprintf("kafka: fetching topic %q fails with %v: grant the gate's principal the READ and DESCRIBE ACLs on it; nothing of it is routed meanwhile", topic, err)
	}
	return ""
}

// saslProblem says that the brokers refuse the gate's SASL login, with their answer and
// the variables to check; "" when err is no such refusal. A wrong password or an unknown
// user at start, or a password changed at the brokers while the gate runs (refused at
// its next connection, or re-authentication under the brokers'
// connections.max.reauth.ms, KIP-368): no retry cures it, and franz-go retries it as it
// does a broker restarting, so that the gate said only that it had not joined its group,
// or that checking topics and permissions failed. The text is the brokers' answer from
// its code on, the same whichever request met it, so that it is logged once.
func saslProblem(err error) string {
	for _, e := range []*kerr.Error{kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState} {
		if errors.Is(err, e) {
			answer := err.Error()
			if i := strings.Index(answer, e.Message); i >= 0 {
				answer = answer[i:]
			}
			return fmt.Sprintf("kafka: the brokers refuse the gate's SASL login: %s: check GATE_KAFKA_SASL_MECHANISM, GATE_KAFKA_SASL_USERNAME and GATE_KAFKA_SASL_PASSWORD "+
				"(read at start: restart the gate after changing them); nothing is consumed meanwhile", answer)
		}
	}
	return ""
}

// tlsProblem says that the TLS handshake with a broker fails on a certificate, with
// crypto/tls's error, naming the variables to check; "" when err is no such failure. The
// brokers' certificate not signed by a CA of GATE_KAFKA_TLS_CA_FILE (else the system's:
// a CA rotated out of order), not for their name or expired; or the gate's refused by
// them (a remote error: none where they require one, or one they do not trust). The
// files are read again at the next connection, but franz-go retries the handshake as it
// does a broker down, so that the gate said only that it had not joined its group.
func tlsProblem(err error) string {
	if !tlsreload.Refused(err) { // as the tick and /readyz tell a Redis's apart
		return ""
	}
	// The handshake's own error, without what franz-go wrapped it in (the request that
	// met it), so that the line is the same whichever request did.
	var why error = err
	if v, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		why = v
	} else if op, ok := errors.AsType[*net.OpError](err); ok {
		why = op
	}
	return fmt.Sprintf("kafka: the TLS handshake with the brokers fails: %v: check GATE_KAFKA_TLS_CA_FILE (their CA), GATE_KAFKA_TLS_SERVER_NAME "+
		"and GATE_KAFKA_TLS_CERT_FILE (the gate's certificate, which they may refuse), read again at the next connection; nothing is consumed meanwhile", why)
}

// work is one partition's records from one poll.
type work struct {
	p    *partition
	recs []*kgo.Record // without control records (see dataRecords)
	hwm  int64
	// stable is where the records the gate can poll end: hwm, or with exactly-once
	// (read_committed) the last stable offset, below an open transaction's records.
	stable int64
	// next is the offset after the last record polled, control records included (never
	// before the last of recs): where the partition's lag is measured from once every
	// record of recs is routed.
	next int64
}

// works gathers a poll's records of the input topic, one work item per partition.
func (c *Consumer) works(fetches kgo.Fetches) []work {
	var ws []work
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if ftp.Topic != c.cfg.InputTopic {
			return
		}
		recs, next := dataRecords(ftp.Records)
		if next < 0 {
			c.m.setLag(ftp.Partition, ftp.HighWatermark, -1)
			return
		}
		// A partition spread over several fetches comes back in fetch order, which is
		// offset order: merge it into one work item so one goroutine routes it.
		for i := range ws {
			if ws[i].p.id == ftp.Partition {
				// Clip: the first slice's spare capacity belongs to the client.
				ws[i].recs = append(slices.Clip(ws[i].recs), recs...)
				ws[i].hwm = max(ws[i].hwm, ftp.HighWatermark)
				ws[i].stable = max(ws[i].stable, c.stableEnd(ftp))
				ws[i].next = next
				return
			}
		}
		p := c.partition(ftp.Partition)
		if p.stopped.Load() {
			return // fetched before it was paused: nothing past the stop is routed
		}
		if len(recs) == 0 {
			// Only control records: nothing to route, but the partition's position moved
			// past them (a record of it polled later in this poll sets its lag again).
			c.setLag(p, ftp.HighWatermark, c.stableEnd(ftp), next)
			return
		}
		ws = append(ws, work{p: p, recs: recs, hwm: ftp.HighWatermark, stable: c.stableEnd(ftp), next: next})
	})
	return ws
}

// dataRecords returns recs without their control records (transaction markers, polled
// only so that the gate sees its position move: see clientOpts), which it recycles, and
// the offset after the last record of either kind (-1 when recs is empty). recs comes
// back as is when it holds none, else in a slice of its own: recs is the client's.
func dataRecords(recs []*kgo.Record) ([]*kgo.Record, int64) {
	if len(recs) == 0 {
		return recs, -1
	}
	next := recs[len(recs)-1].Offset + 1
	i := slices.IndexFunc(recs, func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	if i < 0 {
		return recs, next
	}
	data := recs[:i:i]
	for _, r := range recs[i:] {
		if r.Attrs.IsControl() {
			r.Recycle()
			continue
		}
		data = append(data, r)
	}
	return data, next
}

// process routes ws with routeFn: each partition's records in order, by one goroutine,
// partitions in parallel. It returns when every record has been handed to the producer,
// and what each goroutine counted is in the metrics (route.Scratch.Flush).
func (c *Consumer) process(ws []work, routeFn func(work, *route.Scratch)) {
	switch n := min(len(ws), len(c.scratch)); n {
	case 0:
	case 1:
		s := &c.scratch[0]
		for _, w := range ws {
			routeFn(w, s)
		}
		s.Flush()
	default:
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				s := &c.scratch[g]
				for i := next.Add(1) - 1; i < int64(len(ws)); i = next.Add(1) - 1 {
					routeFn(ws[i], s)
				}
				s.Flush()
			})
		}
		wg.Wait()
	}
}

// partition returns the state of an owned partition. Polls return only assigned
// partitions, and assignment creates the state, so the fallback is defensive; except
// with exactly-once delivery, where a revoke can run between a poll and its routing:
// the partition is then no longer ours, its records go into a transaction that aborts,
// and it gets detached state, already gone.
func (c *Consumer) partition(id int32) *partition {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	p := c.parts[id]
	if p == nil {
		p = newPartition(c.cfg.InputTopic, id, c.mono)
		if c.exactlyOnce() {
			p.gone.Store(true) // no outcomes: its transaction aborts
			return p
		}
		c.attachOutcomes(p)
		c.parts[id] = p
	}
	return p
}

// stableEnd is where the records of ftp the gate can poll end: the high watermark, or
// with exactly-once delivery, which reads read_committed, the last stable offset. The
// records of a transaction an upstream producer keeps open are not lag the gate can
// route: it waits for their transaction to end, and that wait is no stall (watchdog.go).
func (c *Consumer) stableEnd(ftp kgo.FetchTopicPartition) int64 {
	if c.exactlyOnce() && ftp.LastStableOffset >= 0 {
		return min(ftp.HighWatermark, ftp.LastStableOffset)
	}
	return ftp.HighWatermark
}

// setLag sets the lag of p unless it was revoked or lost meanwhile, which would leave
// a series for a partition this gate no longer owns: the metric from hwm, the
// watchdog's from stable (see stableEnd).
func (c *Consumer) setLag(p *partition, hwm, stable, next int64) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	c.setLagLocked(p, hwm, stable, next, true)
}

// setLagLocked is setLag with partsMu held; keep false leaves p's next and lagAt as they
// are (a measure from the committed offset of a partition no poll has measured:
// setLagRefreshed).
func (c *Consumer) setLagLocked(p *partition, hwm, stable, next int64, keep bool) {
	if p.gone.Load() {
		return
	}
	c.m.setLag(p.id, hwm, next)
	if next >= 0 && stable >= 0 {
		p.lag.Store(max(stable-next, 0))
	}
	if keep && next >= 0 && hwm >= 0 {
		p.next.Store(next)
		p.lagAt.Store(c.mono.now())
	}
}

// routeWork routes one partition's records in offset order and hands them to the
// producer; Produce blocks while the producer's buffer is full.
func (c *Consumer) routeWork(w work, s *route.Scratch) {
	// Read before any record is produced: once all are acknowledged the batch is
	// complete and its records recycled (ackBatch), maybe before the loop ends.
	last := w.recs[len(w.recs)-1]
	end, epoch := last.Offset+1, last.LeaderEpoch
	b := w.p.add(end, epoch, len(w.recs))
	// The input bytes the batch keeps, summed as the records are routed and added once
	// the loop ends: inputFull reads the poll being routed at its records alone.
	var size int64
	defer func() { b.bytes.Add(size) }()
	var now time.Time
	rctx := c.route
	// The records in flight in one slab, reused once all are done (slab.go): b holds
	// it until then.
	fs := c.slabs.get(len(w.recs))
	b.slab = fs
	beginOutcomes(w.p, w.recs[0])
	for i, in := range w.recs {
		if i%clockRefresh == 0 {
			now = c.clock.Now()
		}
		if rctx.Err() != nil || c.runCtx.Err() != nil || c.retry.pending.Load() > 0 && !c.holdRouting(rctx, w.p) {
			// Shutting down, a rebalance waiting, or the partition revoked or
			// stopped: the rest is not routed now.
			if i > 0 { // w.recs[i-1] is not recycled: the batch awaits w.recs[i:]
				endOutcomes(w.p, w.recs[i].Offset)
			}
			c.unroute(w, b, i)
			return
		}
		f := &fs[i]
		f.b, f.in = b, in
		size += recordBytes(in) // read before it is produced: acknowledged, it is recycled
		if c.router.RouteInto(now, in, s, &f.out).Route == route.Dropped {
			// Written nowhere (a drop rule; its outcome row counts it): done at once.
			c.ackBatch(b, 1)
			continue
		}
		// Counted one by one as handed over, not for the poll at once: a routing that
		// waits for the retries (holdRouting) must not count as records in flight, or
		// the retries would wait for it in turn.
		c.outstanding.Add(1)
		c.cl.Produce(rctx, &f.out, c.promise)
	}
	endOutcomes(w.p, end)
	c.setLag(w.p, w.hwm, w.stable, w.next) // every record routed: past the control records after them too
}

// produce hands f.out to the producer; onProduced acknowledges it in its batch or
// queues it for a retry.
func (c *Consumer) produce(f *failed) {
	c.outstanding.Add(1)
	c.cl.Produce(c.produceCtx, &f.out, c.promise)
}

// onProduced is the promise of every record the consumer produces. Each is the out field
// of a failed, its first field, so the pointer converts back (the unsafe.Pointer rule for
// a struct and its first field).
func (c *Consumer) onProduced(r *kgo.Record, err error) {
	// Last, so that a failure is queued before the retry loop can see quiescence.
	defer c.outstanding.Add(-1)
	f := (*failed)(unsafe.Pointer(r))
	if err == nil {
		c.producedOK(r.Topic)
		retried := f.attempts > 0
		c.ackBatch(f.b, 1) // f may be reused from here on
		if retried {
			c.retryDone()
		}
		return
	}
	if f.b.p.released() {
		// The new owner replays from the last commit.
		if f.attempts > 0 {
			c.retryDone()
		}
		return
	}
	f.err = err
	topic := r.Topic
	if rejected(err) {
		if stage, moved := f.advance(); moved && stage < stageUndeliverable {
			c.m.countRerouted(stage)
			c.logRerouted(topic, err)
		}
	}
	// Queued (and so awaiting its retry) before its problem is recorded: see
	// produceSettled. The retry loop takes it only once this promise has returned.
	c.retry.push(f)
	if !errors.Is(err, context.Canceled) {
		// A record failed because its routing context ended (a rebalance waiting, or
		// the end of the shutdown's grace) is no broker error: it is produced again.
		c.m.produceError(topic, err)
		c.produceProblem(topic, err)
	}
}

// onAssigned creates state for new partitions. With exactly-once delivery it first
// drops the partitions revoked without a call to onRevoked (dropRevokedUntold); with
// StartLatest it commits the start of partitions the group has no offset for: those
// added to the topic at their log start (checkAdded), the others at their end
// (commitLatestStarts).
func (c *Consumer) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	ids := slices.Sorted(slices.Values(assigned[c.cfg.InputTopic]))
	if c.exactlyOnce() {
		c.dropRevokedUntold(cl, ids)
	}
	if c.cfg.StartOffset == StartLatest && len(ids) > 0 {
		// Their start is committed before franz-go, once this returns, fetches their
		// offsets: partitions added to the topic since the gate first saw it at their
		// log start (added.go), the others the group is new to at their end (latest.go).
		actx, cancel := context.WithTimeout(ctx, c.cfg.RevokeTimeout)
		if c.assignsAdded(ids) {
			c.checkAdded(actx, cl)
		}
		if started, err := c.commitLatestStarts(actx, cl, ids); err != nil {
			c.log.Warn("kafka: committing where the group starts partitions it has no offset for failed; "+
				"a partition that moves before this gate commits it starts at the log's end as of its next owner's assignment",
				"topic", c.cfg.InputTopic, "partitions", ids, "err", err)
		} else if len(started) > 0 {
			c.log.Info("kafka: start committed at the end of partitions the group has no offset for (GATE_KAFKA_START_OFFSET=latest)",
				"topic", c.cfg.InputTopic, "start_committed", started)
		}
		cancel()
	}
	c.partsMu.Lock()
	for _, id := range ids {
		p := newPartition(c.cfg.InputTopic, id, c.mono)
		p.assignedAt = c.mono.now()
		c.attachOutcomes(p)
		c.parts[id] = p
	}
	owned := len(c.parts)
	c.partsMu.Unlock()
	c.m.rebalances.WithLabelValues("assigned").Inc()
	c.m.initLost(c.cfg.InputTopic, ids)
	c.txn.rebalanced.Store(true)
	c.ready.Store(true)
	c.log.Info("partitions assigned", "topic", c.cfg.InputTopic, "partitions", ids, "owned", owned)
}

// onRevoked waits (briefly) for the revoked partitions' in-flight records, commits what
// is acknowledged, and drops their state. Rebalances are blocked while a poll's records
// are routed, so nothing new is handed to the producer for them meanwhile. With
// exactly-once delivery it only drops the state: the session aborts the open
// transaction.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ids := slices.Sorted(slices.Values(revoked[c.cfg.InputTopic]))
	if len(ids) == 0 {
		return
	}
	if c.exactlyOnce() {
		if c.txn.beforeRevoke != nil {
			c.txn.beforeRevoke()
		}
		c.revokedTxn(ids)
		return
	}
	// Wall time, not c.clock (a routing clock a test may drive): how long the group's
	// rebalance waited on this member, the figure an operator compares with
	// GATE_REVOKE_TIMEOUT.
	began := time.Now()
	var left int64
	// Nothing routes during a revoke: the partitions' outcome rows go out, and are
	// awaited, with their records, the seal and the wait within one RevokeTimeout. A
	// seal whose rows find the producer's buffer full (a broker that stopped answering)
	// blocks in Produce until their context ends: with a context of its own it held the
	// revoke that long before the wait began, even for partitions with nothing in
	// flight. The rows' context ends with the wait, not at its deadline: a row still
	// blocked or buffered then fails as cancelled and is retried (rowRetries), not
	// reported as the outcomes topic's problem.
	wctx, cancelWait := context.WithTimeout(ctx, c.cfg.RevokeTimeout)
	defer cancelWait()
	sctx, cancelSeal := context.WithCancel(ctx)
	defer cancelSeal()
	defer context.AfterFunc(wctx, cancelSeal)()
	c.sealALO(sctx)
	c.sendNow(wctx)
	if !c.closing.Load() {
		left = c.waitInFlight(wctx, ids)
	}
	// What the wait did not see acknowledged is given up now, not once the commit below
	// has come back: a retry begun meanwhile could write, after the commit, a record the
	// partition's next owner writes again. (One handed to the client before now may
	// still land: at least once, a revoke that stops waiting cannot call it back.)
	for _, p := range c.snapshot(ids) {
		p.abandoned.Store(true)
	}
	if c.revokeWaited != nil {
		c.revokeWaited()
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.RevokeTimeout)
	committed, err := c.commit(cctx, true, ids)
	cancel()
	// The rows left unwritten that count the revoked partitions' records (read before
	// their state goes): another partition's hold its own commits, and count nothing twice.
	unwritten := c.rowsUnwrittenOf(ids)
	c.drop(ids)
	c.releaseStopped(ids)
	c.m.rebalances.WithLabelValues("revoked").Inc()
	lvl := slog.LevelInfo
	if err != nil || left > 0 || unwritten > 0 {
		lvl = slog.LevelWarn
	}
	c.log.Log(ctx, lvl, "partitions revoked", "topic", c.cfg.InputTopic, "partitions", ids,
		"committed", committed, "abandoned_records", left, "outcome_rows_unwritten", unwritten, "commit_err", err,
		"took", time.Since(began).Round(time.Millisecond).String())
}

// onLost drops the partitions' state without committing: the group has already moved
// on, and a commit would be refused or, worse, overwrite the new owner's.
func (c *Consumer) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	began := time.Now() // wall time, as onRevoked's
	ids := slices.Sorted(slices.Values(lost[c.cfg.InputTopic]))
	if c.exactlyOnce() {
		c.txn.rebalanced.Store(true)
		c.interruptTxn() // the session aborts the open transaction
	}
	var left int64
	for _, p := range c.snapshot(ids) {
		r, _ := p.inFlight()
		left += r
	}
	if !c.exactlyOnce() && len(ids) > 0 && len(c.snapshot(ids)) > 0 {
		// Nothing routes during a loss: the rows of what the lost partitions routed go
		// out in a seal naming them, before their state is dropped. Left in the
		// aggregates, they went into the next seal, whose sources do not name them: a
		// next owner (this gate, rejoining) routing them again counted them twice in
		// one seal, the overlap invisible. Nothing waits for the rows (nothing of the
		// lost partitions is committed); their context outlives the callback, so
		// that they are not failed once it returns. It ends after one RevokeTimeout,
		// as a revoke's does: rows that find the producer's buffer full (a broker that
		// stopped answering) block in Produce until then, and with 2 × RevokeTimeout
		// held the gate out of its group that long. Cancelled, not timed out: a row
		// still blocked or buffered then is retried (rowRetries), not reported as the
		// outcomes topic's problem.
		sctx, cancelSeal := context.WithCancel(ctx)
		time.AfterFunc(c.cfg.RevokeTimeout, cancelSeal)
		c.sealALO(sctx)
	}
	c.drop(ids)
	c.releaseStopped(ids)
	c.partsMu.Lock()
	if len(c.parts) == 0 {
		c.ready.Store(false)
	}
	c.partsMu.Unlock()
	if len(ids) == 0 {
		// franz-go calls this on every failed join or heartbeat with what the member
		// held: holding nothing, it lost nothing (the member is out, hence not ready).
		return
	}
	c.m.rebalances.WithLabelValues("lost").Inc()
	c.log.Log(ctx, slog.LevelWarn, "partitions lost; their uncommitted records will be replayed by the next owner",
		"topic", c.cfg.InputTopic, "partitions", ids, "in_flight_records", left, "took", time.Since(began).Round(time.Millisecond).String())
}

func (c *Consumer) drop(ids []int32) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	for _, id := range ids {
		if p := c.parts[id]; p != nil {
			p.gone.Store(true)
			delete(c.parts, id)
		}
		c.m.deleteLag(id)
	}
}

// snapshot returns the owned partitions among ids, or all of them when ids is nil.
func (c *Consumer) snapshot(ids []int32) []*partition {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	var ps []*partition
	if ids == nil {
		for _, p := range c.parts {
			ps = append(ps, p)
		}
		return ps
	}
	for _, id := range ids {
		if p := c.parts[id]; p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// waitInFlight waits until the partitions (all when ids is nil) have no unacknowledged
// record nor outcome seal awaiting its rows, or ctx ends; it returns how many records
// were left (rowsUnwritten says how many rows).
func (c *Consumer) waitInFlight(ctx context.Context, ids []int32) int64 {
	var n int64
	_ = waitUntil(ctx, func() bool {
		n = 0
		rows := false
		for _, p := range c.snapshot(ids) {
			if !p.stopped.Load() { // a stopped partition's stuck record is never acknowledged
				r, w := p.inFlight()
				n, rows = n+r, rows || w
			}
		}
		return n == 0 && !rows
	})
	return n
}

// sendNow has the producer send what it buffers without its linger (franz-go's, 10 ms by
// default) until ctx ends: for a wait on what was just produced, such as a seal's rows at
// a revoke or the shutdown, which nothing produced after them would join. It does not
// wait itself: franz-go's Flush waits for every buffered record, the partitions the
// caller does not wait for included.
func (c *Consumer) sendNow(ctx context.Context) {
	go func() { _ = c.cl.Flush(ctx) }()
}

// commitLoop commits acknowledged offsets every CommitInterval.
func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.commitPending.Load() {
				// franz-go queues a commit behind the one unanswered, with the offsets of
				// its send: with commits slower than the interval, the queue (a goroutine
				// each) and the committed offsets' lag grew without bound. The next tick
				// after the answer commits what is acknowledged by then.
				continue
			}
			if _, err := c.commit(ctx, false, nil); err != nil && ctx.Err() == nil {
				c.log.Warn("commit failed; retried next interval", "err", err)
			}
		}
	}
}

// commit commits, for the partitions among ids (all when nil), the offsets up to which
// everything is acknowledged, when past the last commit. Synchronous commits wait for
// the answer; asynchronous ones report errors through the metrics and the next call.
// It returns, by partition, the offsets the coordinator took (synchronous: what the
// revoke and stop lines say was committed, none of a refused commit's) or sent
// (asynchronous).
func (c *Consumer) commit(ctx context.Context, sync bool, ids []int32) (map[int32]int64, error) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offs := make(map[int32]kgo.EpochOffset)
	byID := make(map[int32]*partition)
	gens := make(map[int32]int)
	for _, p := range c.snapshot(ids) {
		if off, gen, ok := p.advance(); ok {
			offs[p.id] = off
			byID[p.id] = p
			gens[p.id] = gen
		}
	}
	if len(offs) == 0 {
		// Nothing acknowledged past the last commit: nothing to hold for. Only when that
		// holds for every partition owned (ids nil): a revoke's partitions having nothing
		// says nothing of the others', whose commits may still fail.
		if ids == nil {
			now := time.Now()
			c.commitSucceeded(now, now)
		}
		return nil, nil
	}
	sent := make(map[int32]int64, len(offs))
	for id, off := range offs {
		sent[id] = off.Offset
	}
	var result error
	took := make(map[int32]int64, len(offs))
	sentAt := time.Now() // a commit sent before a hold began does not end it (commitHold)
	done := func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			err = c.commitResponse(resp, byID, offs, gens, took)
		}
		if err == nil {
			c.commitSucceeded(sentAt, time.Now())
		}
		if err != nil && !sync && errors.Is(err, context.Canceled) && ctx.Err() != nil {
			// The commit loop's end (the shutdown) gave it up: nothing failed, and the
			// final commit sends what it would have.
			return
		}
		if err != nil {
			c.m.commitErrors.Inc()
			result = fmt.Errorf("committing offsets of %s: %w", c.cfg.InputTopic, err)
			if !sync {
				c.logCommitFailure(result)
			}
		}
	}
	req := map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: offs}
	if sync {
		c.cl.CommitOffsetsSync(ctx, req, done)
		return took, result
	}
	c.commitPending.Store(true)
	c.cl.CommitOffsets(ctx, req, func(cl *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		done(cl, req, resp, err)
		c.commitPending.Store(false)
	})
	return sent, nil
}

// commitLogEvery bounds how often failed interval commits are logged: each failure
// is counted (gate_commit_errors_total), and the next interval commits the same
// offsets again, so a broken coordinator would otherwise log every second.
const commitLogEvery = 10 * time.Second

// logCommitFailure logs a failed asynchronous commit, at most once per commitLogEvery
// (with how many failed since the last line).
func (c *Consumer) logCommitFailure(err error) {
	ok, suppressed := c.commitLog.Allow()
	if !ok {
		return
	}
	c.log.Warn("interval commit failed; the next interval commits the same offsets again",
		"err", err, "failures_since_last_line", suppressed+1)
}

// commitResponse marks the partitions the broker accepted, adding their offsets to took,
// and returns the first partition error.
func (c *Consumer) commitResponse(resp *kmsg.OffsetCommitResponse, byID map[int32]*partition, offs map[int32]kgo.EpochOffset, gens map[int32]int, took map[int32]int64) error {
	var first error
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			p := byID[rp.Partition]
			if p == nil {
				continue
			}
			if rp.ErrorCode != 0 {
				if first == nil {
					first = fmt.Errorf("partition %d: %w", rp.Partition, kerr.ErrorForCode(rp.ErrorCode))
				}
				continue
			}
			p.markCommitted(offs[rp.Partition].Offset, gens[rp.Partition])
			took[rp.Partition] = offs[rp.Partition].Offset
			c.progressed()
			// Not for a partition revoked or lost since the commit was sent (drop
			// deleted its series under partsMu): another gate owns it now.
			c.partsMu.Lock()
			if !p.gone.Load() {
				c.m.committed.WithLabelValues(itoa(p.id)).Set(float64(offs[rp.Partition].Offset))
			}
			c.partsMu.Unlock()
		}
	}
	return first
}
