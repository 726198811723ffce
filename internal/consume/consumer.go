package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/throttle"
)

// Router decides each record's output. *route.Router is the gate's; it is an interface
// here so the loop's commit and retry logic can be tested on its own.
type Router interface {
	// RouteInto writes into *out the record to produce for in, decided at time now. s
	// is scratch owned by the calling goroutine.
	RouteInto(now time.Time, in *kgo.Record, s *route.Scratch, out *kgo.Record) route.Outcome
	// DeadLetter returns a dead-letter record for in with the given reason, not counted.
	DeadLetter(in *kgo.Record, reason, detail string) *kgo.Record
	// CountDeadLettered counts one dead letter the broker took (gate_records_total's
	// dead_letter/rejected): a record refused by every topic is written nowhere.
	CountDeadLettered()
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
	// prod is the client the output is produced through at least once, apart from cl's
	// group (producer.go); nil exactly once, where cl produces in its transactions.
	prod *kgo.Client
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
	// retried is the output partitions whose batches brokers refused with an error
	// franz-go retries (batchRetried).
	retried batchRetries
	// fetchRefusedAt is when a poll last handed back a fetch error no retry cures
	// (a mono reading; see fetchErrors), 0 when none is recorded.
	fetchRefusedAt atomic.Int64
	// hold is the commit hold (commithold.go).
	hold commitHold

	retry retryQueue
	// checkRules asks the output watch for a check of the rule topics out of its
	// schedule (checkRuleTopicsSoon).
	checkRules chan struct{}
	// rereadTopics asks the output watch to read the topics' settings out of its
	// schedule (rereadTopicsSoon).
	rereadTopics chan struct{}
	ready        atomic.Bool // has joined the group and holds an assignment (maybe empty)
	closing      atomic.Bool // shutting down: revokes do not wait for in-flight records
	// preflighted is set once the preflight has passed: until then it reports the topics
	// missing, the rule topic watch waits (nothing is routed yet), and the consumer is
	// not ready, though franz-go may have joined the group already.
	preflighted atomic.Bool
	// preflightWait is what a preflight retrying quietly waits for (awaitPreflight's
	// transient answers), for NotReady; nil when it waits for nothing such.
	preflightWait atomic.Pointer[string]
	// startRuleTopics are the rule topics in use when the consumer was made (those
	// Config.OutputTopics lists with the gate's own): the preflight checks each only
	// while a rule in use still sends to it, and the topics written (writtenTopics) take
	// them from the watch.
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
	// quota is the quota hook of the client last built (clientOpts), told the client's
	// session timeout once it exists (noteSession).
	quota *quotaHook
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
	// inputID is the input topic's identity (inputwatch.go); stopRun ends Run with the
	// cause when the topic goes, set by Run before the watch starts.
	inputID inputIdentity
	stopRun context.CancelCauseFunc
	// inputDoubt is set when a fetch of the input fails with UNKNOWN_TOPIC_ID or
	// UNKNOWN_TOPIC_OR_PARTITION, until the watch finds the topic as it was: offsets are
	// committed by topic name, and those of a topic deleted and created again would be
	// the new one's. Nothing is committed meanwhile (errInputDoubt).
	inputDoubt      atomic.Bool
	compactedWarned atomic.Bool // compactedWarnings asked (preflight.go)
	// compactedKept are the compacted topics the gate keeps keys on that were warned of
	// (warnCompactedKept): at start, or at a rules reload naming one, each once.
	compactedKept compactedKept
	// refusesKeyless holds the topics the gate writes without keys that the last read
	// of their settings found compacted (checkCompacted), nil when none: a record
	// without a key to one goes to dead letter unsent (deadLetterUnsent).
	refusesKeyless atomic.Pointer[[]keylessRefusal]

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
	c.checkRules = make(chan struct{}, 1)
	c.rereadTopics = make(chan struct{}, 1)
	c.initOutcomes()
	if c.exactlyOnce() {
		// A transaction's records are counted once it commits (countCommitted): an
		// aborted one's are routed again, and counted then.
		for i := range c.scratch {
			c.scratch[i].Hold()
		}
	}
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
	c.noteSession(c.cl)
	c.live.Store(c.cl)
	if c.prod, err = kgo.NewClient(c.producerOpts()...); err != nil {
		c.cl.Close()
		return nil, fmt.Errorf("creating the Kafka producer's client: %w", err)
	}
	return c, nil
}

// The client label of franz-go's metrics (gate_kafka_*): the consumer group's client
// (exactly once, the one that produces in its transactions too), and at least once the
// producer's (producer.go).
const (
	clientGroup    = "group"
	clientProducer = "producer"
)

// kpromHooks is franz-go's metrics (kprom) of a client, registered in reg labelled
// client=name: each client gets a kprom of its own, a closed client unregisters its
// collectors and a rebuilt one registers them anew.
func kpromHooks(reg prometheus.Registerer, name string) kgo.Opt {
	// kprom's gatherer is only used by its own HTTP handler, which the gate does not
	// serve: the gate's registry is served with everything else.
	return kgo.WithHooks(kprom.NewMetrics("gate_kafka", kprom.Registerer(prometheus.WrapRegistererWith(prometheus.Labels{"client": name}, reg))))
}

// noteSession tells the quota hook of cl, the client just built, its session timeout.
func (c *Consumer) noteSession(cl *kgo.Client) {
	if d, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok && c.quota != nil {
		c.quota.setSessionTimeout(d)
	}
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
		reg := c.reg
		if c.exactlyOnce() {
			reg = withoutKpromBuffered{reg} // served from bufferedHook (metrics.go)
		}
		opts = append(opts, kpromHooks(reg, clientGroup))
	}
	// Both delivery modes recycle their input records once every record of a poll's
	// batch is done (ackBatch).
	opts = append(opts, kgo.WithPools(&c.pools), kgo.WithHooks(&c.pools))
	// Control records (the commit or abort marker that ends a transaction of the
	// input's producers) are polled, so that the gate sees its position move past them
	// (works drops them): a marker after the last record otherwise counts as lag no
	// poll ever clears, and an idle gate reads as stalled (watchdog.go).
	opts = append(opts, kgo.KeepControlRecords())
	opts = append(opts, kgoLoggerOpt(c.log, c.batchRetried)...)
	c.quota = newQuotaHook(c.m.throttled, c.log)
	opts = append(opts, kgo.WithHooks(c.quota, ackHook{&c.ackAt, c.mono}))
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
	if c.prod != nil {
		return c.prod.BufferedProduceRecords()
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

// Close releases the clients of a Consumer whose Run is never called (Run closes them
// itself when it returns): the group's and, at least once, the producer's (producer.go).
// Beside a running Run it closes them under it, as a
// crash would (the tests' SIGKILL), never at once with Run's own close (closeOf), and
// the loop builds no client after it (shut); a client the loop was building as Close ran
// may be closed by the loop after Close returns, before Run does.
func (c *Consumer) Close() {
	c.shut.Store(true)
	defer c.closeProducer()
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
	// The input topic deleted under the gate ends the run as a shutdown does, with the
	// cause returned (inputwatch.go).
	ctx, c.stopRun = context.WithCancelCause(ctx)
	defer c.stopRun(nil)

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
	c.closeProducer() // after the group's client: its revoke may still wait for acknowledgements
	c.ready.Store(false)
	// Rows unwritten hold the commits at their seal: the records they count are routed
	// and counted again by the partitions' next owner, though none is abandoned.
	unwritten := c.rowsUnwritten()
	lvl := slog.LevelInfo
	if left > 0 || unwritten > 0 {
		lvl = slog.LevelWarn
	}
	c.log.Log(bg, lvl, "consumer stopped", "committed", loggedOffsets(committed), "committed_offsets", at, "abandoned_records", left, "outcome_rows_unwritten", unwritten)
	if gone, ok := errors.AsType[*InputGoneError](context.Cause(ctx)); ok && runErr == nil {
		return gone
	}
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
		ws, _ := c.works(fetches) // a poll of markers alone got empty batches
		c.prime(c.route, ws)
		c.process(ws, c.routeWork)
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
