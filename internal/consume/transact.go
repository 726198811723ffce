package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/throttle"
)

// The exactly-once loop: records are routed and produced in transactions of a
// kgo.GroupTransactSession, which commits the input offsets they reach with them. A
// transaction opens with a poll's records and stays open while further polls route into
// it, until Config.TransactionInterval has passed or Config.TransactionMaxRecords were
// routed (then it commits), or a produce failed or a revoke or loss came (then it
// aborts). Ending one is two round trips during which nothing is polled, so ending one
// per poll halved the throughput on Apache Kafka; per interval the cost is spread over
// every poll in it. An aborted transaction makes the session rewind the client to the
// last committed offsets, so its polls are replayed: by this gate, or by the partitions'
// next owner. A crash loses nothing and duplicates nothing for read_committed readers;
// it costs at most the open transaction's records routed again.

// txnStart is where the open transaction began reading a partition, and the
// partition's state then: a revoke replaces it.
type txnStart struct {
	p      *partition
	offset int64
}

// txnState is the exactly-once loop's state for its open transaction.
type txnState struct {
	// pending counts the records produced in the open transaction whose promise has not
	// run. Flush does not cover all of them: franz-go fails a record too large to
	// buffer on a goroutine of its own, after Flush may have returned.
	pending sync.WaitGroup

	mu       sync.Mutex
	failures []*failed // records of the open transaction whose produce failed

	// interrupted is set by a revoke or a loss since the last End: the session aborts
	// the open transaction, so routing stops (skipped) and the poll is woken.
	interrupted atomic.Bool
	skipped     atomic.Bool
	// filling is set while fillTxn handles a poll's fetch errors, the transaction open
	// with records in it; gapMet, when that poll met input records lost (loss.go), whose
	// handling then waits for the transaction's abort, and gaps the broker losses among
	// them, whose resume offset may be below the commit the abort goes back to. The
	// loop's goroutine only.
	filling, gapMet bool
	gaps            []partGap
	// routed are the input partitions the open transaction holds records of: a gap met
	// in another needs no abort. The loop's goroutine only.
	routed map[int32]bool
	// from is, by input partition, the first offset the open transaction routed: where
	// its abort must replay from. franz-go rewinds to the group's commit, and a
	// partition the group has none of yet to offset 0: the start of the log, not
	// Config.StartOffset's. With it, the partition's state then (see rewindTxnStarts).
	// The loop's goroutine only.
	from map[int32]txnStart
	// startErr is why the offsets where the open transaction began reading partitions
	// the group has not committed could not be committed (commitTxnStarts): the
	// transaction aborts with their records unrouted. The loop's goroutine only.
	startErr error
	// rebalanced is set by every rebalance callback: with the generation, how a
	// transaction tells that the group rebalanced while it was open.
	rebalanced atomic.Bool
	// rearms counts the empty transactions rearm ended; afterEnd, when set (by tests),
	// runs as soon as End returns, where a revoke can land.
	rearms   atomic.Int64
	afterEnd func()
	// beforeRewind, when set (by tests), runs as soon as End returns, before the
	// gate's rewind: where onAssigned can run on the group's goroutine (untoldChecks).
	beforeRewind func()
	// beforeRevoke, when set (by tests), runs as onRevoked begins: a group goroutine
	// the scheduler is slow to run passes a revoke on late.
	beforeRevoke func()
	// awaitingRevoke, when set (by tests), runs as rebalanceTold begins its wait.
	awaitingRevoke func()
	// closedRetry is how long awaitClosedTopic waits before it builds a new client;
	// zero is closedTopicRetry (tests shorten it).
	closedRetry time.Duration

	// ending is set while End runs: the gate polls nothing until it returns, so an End
	// the broker does not answer is work waiting (watchdog.go), not an idle gate.
	ending atomic.Bool
	// untold holds the checks of dropRevokedUntold put off while a transaction ends
	// (untoldChecks).
	untold untoldChecks
	// unfenced is set by newSession: the session's producer id is not initialised yet,
	// and a transaction its transactional id left open may still hold the group's
	// offsets (see fenceOpen). The loop's goroutine only.
	unfenced bool

	pollMu     sync.Mutex
	cancelPoll context.CancelFunc // the running poll's, nil between polls

	// ctx is the open transaction's routing context: records are produced under it,
	// so that a revoke (interruptTxn) or the end of the shutdown's grace stops a
	// Produce blocked on a full buffer; routeStop (under pollMu) cancels it.
	ctx       context.Context
	routeStop context.CancelFunc

	// countedMu guards counted: by input partition, the offset up to which the
	// limiter has counted the records routed. An aborted transaction's records are
	// polled again from the last commit; those below it are judged without being
	// counted again. Kept across revokes: a partition that comes back with a commit
	// below it was not committed by anyone since (or the commit would be above).
	countedMu sync.Mutex
	counted   map[int32]int64
}

// countedTo returns the offset up to which partition p's records were counted.
func (t *txnState) countedTo(p int32) int64 {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	return t.counted[p]
}

// countTo notes that partition p's records were counted up to off.
func (t *txnState) countTo(p int32, off int64) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if t.counted == nil {
		t.counted = make(map[int32]int64)
	}
	if off > t.counted[p] {
		t.counted[p] = off
	}
}

// uncountFrom notes that partition p's records from off on were not counted: the log
// diverged there (a broker's loss), and the records now at those offsets are others.
func (t *txnState) uncountFrom(p int32, off int64) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if c, ok := t.counted[p]; ok && off < c {
		t.counted[p] = max(off, 0)
	}
}

func (t *txnState) fail(f *failed) {
	t.mu.Lock()
	t.failures = append(t.failures, f)
	t.mu.Unlock()
}

// failing reports whether a record of the open transaction failed to produce.
func (t *txnState) failing() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failures) > 0
}

func (t *txnState) takeFailures() []*failed {
	t.mu.Lock()
	defer t.mu.Unlock()
	fs := t.failures
	t.failures = nil
	return fs
}

// rerouteKey is an input record: its partition and offset.
type rerouteKey struct {
	part   int32
	offset int64
}

// reroute is how far an input record the broker rejected for good has been rerouted
// (stage, as failed.stage), whether its next produce must be alone (see
// failed.isolate), and the rejection that made it so.
type reroute struct {
	stage   int
	isolate bool
	topic   string // the topic that rejected it
	err     error
	before  string // what the record it refused said, when it was a dead letter already (refusedBefore)
}

// txnCounts are the transactions a run ended.
type txnCounts struct{ committed, aborted int }

// A transaction can outlive Config.TransactionTimeout without the gate being slow:
// GroupTransactSession.End holds its TxnOffsetCommit while the group joins and syncs
// (franz-go v1.22.2 and v1.22.3, kgo/txn.go commitTransactionOffsets: g.waitJoinSyncMu), and a
// join waits for every member, a dead one until its session times out (up to the
// rebalance timeout for a live but slow one). The broker then aborts the transaction
// and bumps the producer's epoch, and the offset commit or the EndTxn that follows is
// refused as fenced (kfake: txns.go, updateTimer then doTxnOffsetCommit). The id is
// still this gate's own, so the loop does what a restart would: it closes the client,
// leaving the group, and builds a new one under the same transactional id, whose
// InitProducerID bumps the epoch; the aborted transaction's records are replayed from the
// last commit.
// A fence that comes sooner than the transaction timeout cannot be the broker's:
// another live instance has the same id, and the loop stops (see
// Config.TransactionalID). So does a sixth timeout within recoveryWindow: a timeout
// too short for the gate's transactions, or a fence misread, must not loop for ever.
const (
	maxRecoveries  = 5
	recoveryWindow = 10 * time.Minute
)

// txnTimeoutRetry is how often a gate whose transactions the brokers refuse for their
// timeout (INVALID_TRANSACTION_TIMEOUT) builds a new client to try again: each try
// leaves and rejoins the group, so not often; the operator's fix (a lower
// GATE_TRANSACTION_TIMEOUT is a restart anyway, a higher transaction.max.timeout.ms is
// not) is picked up within it.
const txnTimeoutRetry = 30 * time.Second

// problemTxnTimeout is the problems key of that refusal.
const problemTxnTimeout = "produce/transaction-timeout"

// problemTxnInit is the problems key of a session's producer id that cannot be
// initialised (fenceOpen): no transaction can begin.
const problemTxnInit = "produce/transaction-init"

// awaitTransactionTimeout handles a transaction the brokers refused to begin because
// Config.TransactionTimeout is above their transaction.max.timeout.ms (the preflight
// catches it first where the gate may read the brokers' configuration). It is a
// condition only an operator can fix, and franz-go's producer cannot go on after it:
// the gate stays up and not ready, says which two settings disagree, and every
// txnTimeoutRetry builds a new client to try again. Exiting instead would only make
// Kubernetes restart it into the same refusal.
func (c *Consumer) awaitTransactionTimeout(ctx context.Context, err error) error {
	c.problems.set(problemTxnTimeout, "kafka: "+transactionTimeoutMessage(c.cfg.TransactionTimeout, "unknown: the gate may not read it"))
	c.log.Error("kafka: the brokers refuse to begin transactions: "+transactionTimeoutMessage(c.cfg.TransactionTimeout, "unknown: the gate may not read it")+"; not ready",
		"retry_in", txnTimeoutRetry.String(), "err", err)
	closed := c.closeClient(c.tx.CloseAllowingRebalance)
	c.ready.Store(false)
	c.txn.interrupted.Store(false)
	t := time.NewTimer(txnTimeoutRetry)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return c.resumeSession(closed)
}

// closedTopicRetry is how long a gate whose client an output topic closed to it left
// unable to go on (see awaitClosedTopic) waits before it builds a new one: each is a
// leave and a join of the group, so not at every backoff; a topic created again or an
// ACL granted again is picked up within it.
const closedTopicRetry = 10 * time.Second

// awaitClosedTopic handles a transaction that cannot begin or end because an output
// topic refused the gate's writes (an ACL revoked, a topic deleted) on brokers whose
// transactions predate KIP-890 part 2 (Kafka 3.x, or 4.x with transaction.version
// below 2): there the refusal comes in answer to AddPartitionsToTxn, which franz-go
// takes as fatal to its producer id, failing every record buffered (whatever its topic)
// and every Begin after. As docs/operations.md says of a topic closed while the gate
// runs, it stays up and not ready, naming the topic (produceProblem), its transaction
// aborted and replayed: it builds a new client every closedTopicRetry, whose first
// transaction writes to the topic again. Exiting instead would only make Kubernetes
// restart it.
func (c *Consumer) awaitClosedTopic(ctx context.Context, err error) error {
	topics := c.closedTopics()
	wait := cmp.Or(c.txn.closedRetry, closedTopicRetry)
	if w := c.cfg.RuleTopics; w != nil && len(topics) > 0 && !slices.ContainsFunc(topics, func(t string) bool { return !w.Missing(t) }) {
		// Only rule topics, marked missing: the new client sends nothing to them (their
		// records go to overflow), so waiting would hold up every team for nothing.
		wait = 0
	}
	c.log.Error("kafka: an output topic refuses the gate's writes, and the brokers' transactions (before KIP-890 part 2: "+
		"Kafka 3.x, or transaction.version below 2) leave the Kafka client unable to go on; not ready, building a new Kafka client "+
		"under the same transactional id (the transaction's records are replayed); create the topic or grant the gate's principal the WRITE ACL on it",
		"topics", topics, "retry_in", wait.String(), "err", err)
	closed := c.closeClient(c.tx.CloseAllowingRebalance)
	c.ready.Store(false)
	c.txn.interrupted.Store(false)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return c.resumeSession(closed)
}

// closedTopics returns the topics that the problems say refuse the gate's writes: the
// produce problems' (closedProblems) and the rule topics found missing.
func (c *Consumer) closedTopics() []string {
	var topics []string
	for _, k := range c.problems.keys() {
		if t, ok := strings.CutPrefix(k, "produce/"); ok && k != problemTxnTimeout && k != problemTxnInit {
			topics = append(topics, t)
		} else if t, ok := strings.CutPrefix(k, problemRuleTopics); ok {
			topics = append(topics, t)
		}
	}
	return topics
}

// closedProblems says (produceProblem) which topics refuse the gate's writes, among
// those of a transaction's records (fs) and outcome rows (rowErr, the first row's
// error) failed for a topic missing or closed to the gate.
// On brokers whose transactions predate KIP-890 part 2 the refusal comes in answer to
// AddPartitionsToTxn, and franz-go fails every record buffered with it, whatever its
// topic: when records of more than one topic failed so, the cluster is asked which it
// closes, and only those are named (every one when it names none).
func (c *Consumer) closedProblems(ctx context.Context, fs []*failed, rowErr error) {
	if len(fs) == 0 && rowErr == nil {
		return // every transaction that wrote all it had: no map made for it
	}
	errs := map[string]error{}
	for _, f := range fs {
		if _, ok := errs[f.out.Topic]; !ok && topicClosed(f.err) {
			errs[f.out.Topic] = f.err
		}
	}
	if topicClosed(rowErr) {
		errs[c.cfg.OutcomesTopic] = rowErr
	}
	topics := slices.Sorted(maps.Keys(errs))
	if len(topics) > 1 {
		qctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
		found, _, err := c.topicProblems(qctx, c.cl, topics)
		cancel()
		if err == nil && len(found) > 0 {
			topics = slices.DeleteFunc(topics, func(t string) bool { return found[t] == "" })
		}
	}
	for _, t := range topics {
		c.produceProblem(t, errs[t])
	}
}

// errShut stops the exactly-once loop when Close has closed the consumer's client under
// it: no session is built to go on with.
var errShut = errors.New("the consumer was closed while running")

// resumeSession is newSession for a loop that closed its session's client to go on
// with a new one (closed: that close, closeClient's), unless Close has run
// (Consumer.shut): then it returns errShut, and a session built as Close ran is closed,
// whoever closes it first (Close, which sets shut before it reads the client to close,
// may have read the one before). It first waits for the closed client's close to be
// over, however long past RevokeTimeout: its metrics leave the registry only then, and
// the new client's, registered before, were a duplicate registration (a panic).
func (c *Consumer) resumeSession(closed <-chan struct{}) error {
	<-closed
	c.dropCollectedCloses()
	if c.shut.Load() {
		return errShut
	}
	if err := c.newSession(); err != nil {
		return err
	}
	if c.shut.Load() {
		<-c.closeClient(c.cl.Close) // not again if Close closed it
		return errShut
	}
	return nil
}

// newSession builds the transactional client, and makes it the consumer's.
func (c *Consumer) newSession() error {
	tx, err := kgo.NewGroupTransactSession(c.clientOpts()...)
	if err != nil {
		return fmt.Errorf("creating the transactional Kafka client: %w", err)
	}
	c.tx, c.cl = tx, tx.Client()
	c.live.Store(c.cl)
	c.txn.unfenced = true
	return nil
}

// fenceOpen initialises the new session's producer id before its first poll, which
// fences a transaction its transactional id left open (a crash, a shutdown or a failed
// End between the transaction's offset commit and its EndTxn): the broker aborts it
// at once. Until it ends, the group coordinator answers this member's offset fetch
// UNSTABLE_OFFSET_COMMIT (KIP-447), so the member polls nothing, and franz-go
// initialises the id only in the first Begin, after a poll: the gate routed nothing
// until the broker timed the transaction out (Config.TransactionTimeout). A coordinator
// that does not answer is asked again after a backoff, as Begin would, the gate not
// ready meanwhile, as the preflight keeps it at start (no transaction can begin, so no
// record can be routed); a refusal is returned (InvalidTransactionTimeout: see
// awaitTransactionTimeout).
func (c *Consumer) fenceOpen(ctx context.Context) error {
	logs := throttle.NewEvery(retryLogEvery, nil) // wall time: it paces a log
	defer c.problems.clear(func(k string) bool { return k == problemTxnInit })
	for attempt := 0; ; attempt++ {
		_, _, err := c.cl.ProducerID(ctx)
		if err == nil {
			c.txn.unfenced = false
			c.txnTimeoutTaken()
			if attempt > 0 {
				// Said, as the failures were: the reason leaves /readyz now.
				c.log.Info("kafka: transactional producer initialised; transactions can begin again",
					"transactional_id", c.cfg.TransactionalID, "attempts", attempt+1)
			}
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) || !outcomeUnknown(err) {
			return fmt.Errorf("initialising the transactional producer: %w", err)
		}
		c.problems.set(problemTxnInit, fmt.Sprintf("kafka: transactional id %q: no transaction can begin: %v", c.cfg.TransactionalID, err))
		if ok, unlogged := logs.Allow(); ok {
			c.log.Warn("kafka: initialising the transactional producer failed; retrying before the first poll",
				"transactional_id", c.cfg.TransactionalID, "attempt", attempt+1, "err", err, "failures_unlogged", unlogged)
		}
		t := time.NewTimer(c.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// txnTimeoutTaken clears the problem of a transaction timeout the brokers refused, once
// they took it.
func (c *Consumer) txnTimeoutTaken() {
	if c.problems.clear(func(k string) bool { return k == problemTxnTimeout }) {
		c.log.Info("kafka: transactions start again: the brokers take GATE_TRANSACTION_TIMEOUT now")
	}
}

// fenced reports whether err says the producer's epoch is no longer the broker's:
// another producer initialised the transactional id, or the broker aborted a
// transaction that outlived its timeout. INVALID_TXN_STATE is kfake's answer to an
// EndTxn commit after such an abort (txns.go, doEnd: the KIP-890 retry check);
// INVALID_PRODUCER_ID_MAPPING the coordinator's when the id's producer is another's now.
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.InvalidProducerIDMapping)
}

// outcomeUnknown reports whether err, ending a transaction, leaves its outcome
// unknown (no answer, a broken connection, an error the broker may give after
// applying the request), as opposed to a definite refusal that a new client under the
// same id would meet again, or would win only by fencing another instance.
func outcomeUnknown(err error) bool {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return true // the client's own: a timeout, a connection
	}
	return ke.Retriable || errors.Is(err, kerr.UnknownServerError) || errors.Is(err, kerr.RequestTimedOut)
}

// recovery is a session rebuilt after a transaction could not be ended (recoverFenced),
// counted toward maxRecoveries: when, and whether the transaction outlived the
// transaction timeout (a fence) rather than ending with an unknown outcome.
type recovery struct {
	at   time.Time
	slow bool
}

// recoverFenced is called after a transaction of open could not be ended with err.
// If the broker may have fenced the producer itself, because the transaction
// outlived the transaction timeout (see maxRecoveries), it replaces the session with
// a new one under the same transactional id and returns nil. Otherwise it returns
// the error to stop with. churn says the group rebalanced while the transaction was
// open: its end waited out the rebalance (a peer that died without leaving holds a
// join until its session times out), which is the group's doing, not this gate's,
// and does not count toward maxRecoveries: a crash-looping peer must not stop every
// healthy gate.
//
// An error that is not a fence but leaves the transaction's outcome unknown (the broker
// may have committed it, and franz-go says the client cannot go on) is recovered from
// the same way, counted: the new session's member starts from the offsets the group has
// committed, whatever became of the transaction, so nothing is routed twice. A definite
// refusal (an ACL, say) stops Run with the error, as a rebuilt client would meet it
// again.
func (c *Consumer) recoverFenced(err error, open time.Duration, churn bool) error {
	id, timeout := c.cfg.TransactionalID, c.cfg.TransactionTimeout
	if errors.Is(err, kgo.ErrClientClosed) || c.shut.Load() {
		// Closed by another (Close, under the running loop; its end may fail otherwise
		// than as closed): nothing to recover (resumeSession would build nothing), and
		// no recovery to log or count.
		return err
	}
	isFence := fenced(err)
	if !isFence {
		if !errors.Is(err, errResync) && !outcomeUnknown(err) {
			return err // a definite refusal: rebuilding would meet it again
		}
		churn = errors.Is(err, errResync)
	}
	if isFence && open < timeout {
		return fmt.Errorf("%w (fenced %s into a transaction, within the transaction timeout of %s: "+
			"another live instance is using transactional id %q)", err, open.Round(time.Millisecond), timeout, id)
	}
	now := time.Now()
	recent := c.recoveries[:0]
	slow := 0 // of recent, the transactions that outlived the timeout
	for _, r := range c.recoveries {
		if now.Sub(r.at) < recoveryWindow {
			recent = append(recent, r)
			if r.slow {
				slow++
			}
		}
	}
	c.recoveries = recent
	if !churn && len(recent) >= maxRecoveries {
		if isFence {
			slow++
		}
		// Said by what the counted recoveries were, not by this last one alone: five
		// ends refused with an unknown outcome and then one slow transaction are no
		// transaction timeout to raise.
		switch n := len(recent) + 1; slow {
		case 0:
			return fmt.Errorf("%w (ending transactions failed %d times within %s)", err, n, recoveryWindow)
		case n:
			return fmt.Errorf("%w (transactions outlived the transaction timeout of %s %d times within %s: "+
				"raise it above the group's session and rebalance timeouts and the time a transaction stays open "+
				"(the transaction interval, %s, then the time its records in flight take to produce), "+
				"and check that no other instance uses transactional id %q)", err, timeout, n, recoveryWindow,
				c.cfg.TransactionInterval, id)
		default:
			return fmt.Errorf("%w (transactions could not be ended %d times within %s: %d outlived the transaction "+
				"timeout of %s, %d ended with an unknown outcome (a broker not answering, a lost connection); "+
				"see gate_transaction_recoveries_total by cause and the warnings before this)", err, n, recoveryWindow,
				slow, timeout, n-slow)
		}
	}
	cause := "group_churn"
	switch {
	case !isFence && !churn:
		c.recoveries = append(c.recoveries, recovery{at: now})
		cause = "end_error"
	case !churn:
		c.recoveries = append(c.recoveries, recovery{at: now, slow: true})
		cause = "slow_transaction"
	}
	c.m.recoveries.WithLabelValues(cause).Inc()
	// A transaction spans the polls of TransactionInterval: the abort replays them all.
	msg := "the broker aborted a transaction that outlived the transaction timeout and fenced the producer; " +
		"rebuilding the Kafka client under the same transactional id, the transaction's records since its last commit are replayed"
	switch {
	case errors.Is(err, errResync):
		// The transaction ended, aborted: what failed is the re-read after it.
		msg = "re-reading the group's committed offsets after an aborted transaction failed; rebuilding the Kafka client " +
			"under the same transactional id, which resumes from them"
	case !isFence:
		msg = "ending a transaction failed and its outcome is unknown; rebuilding the Kafka client under the same " +
			"transactional id, which resumes from the group's committed offsets"
	}
	c.log.Warn(msg,
		"transactional_id", id, "open", open.Round(time.Millisecond).String(), "transaction_timeout", timeout.String(),
		"transaction_interval", c.cfg.TransactionInterval.String(), "cause", cause, "counted_recoveries", len(c.recoveries), "err", err)
	// Leaving the group revokes everything: onRevoked drops the partitions' state, and
	// the new member is assigned afresh.
	closed := c.closeClient(c.tx.CloseAllowingRebalance)
	c.ready.Store(false)
	c.txn.interrupted.Store(false)
	return c.resumeSession(closed)
}

// runTxn is Run with exactly-once delivery.
func (c *Consumer) runTxn(ctx context.Context) error {
	c.log.Info("consumer started", "brokers", c.cfg.Brokers, "input_topic", c.cfg.InputTopic, "group", c.cfg.GroupID,
		"delivery", c.cfg.Delivery.String(), "transactional_id", c.cfg.TransactionalID)
	// Transactions end with endCtx, never ctx: an End cut short leaves the client unable
	// to tell whether the transaction committed. Once ctx ends, the transaction still
	// open gets ShutdownTimeout.
	endCtx, stop := graceContext(ctx, c.cfg.ShutdownTimeout)
	defer stop()
	var (
		n      txnCounts
		runErr error
	)
	c.progressed()
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watched := make(chan struct{})
	go func() { defer close(watched); c.watchOutputs(watchCtx) }()
	defer func() { stopWatch(); <-watched }()
	if c.awaitPreflight(ctx) == nil && c.beforeRouting(ctx) == nil {
		n, runErr = c.txnLoop(ctx, endCtx)
	}
	if runErr == nil {
		// So that the session passes on the revoke of leaving (see rearm).
		if err := c.rearm(endCtx); err != nil {
			c.log.Warn("could not end the session's empty transaction before leaving the group", "err", err)
		}
	}
	// Leaving the group revokes everything: onRevoked drops the partitions' state.
	c.closeClient(c.tx.CloseAllowingRebalance)
	// Unless the session did not pass that revoke on (a rearm that failed, an assignment
	// racing the leave: a CI run under load left a gate two partitions and their series
	// after it stopped): the gate owns nothing once it has left.
	if left := c.snapshot(nil); len(left) > 0 {
		ids := make([]int32, 0, len(left))
		for _, p := range left {
			ids = append(ids, p.id)
		}
		slices.Sort(ids)
		c.drop(ids)
		c.releaseStopped(ids)
	}
	c.ready.Store(false)
	c.log.Info("consumer stopped", "transactions_committed", n.committed, "transactions_aborted", n.aborted)
	return runErr
}

// txnLoop polls and transacts until ctx ends, the client is closed or a transaction
// cannot be ended (but for a fence recoverFenced recovers from).
func (c *Consumer) txnLoop(ctx, endCtx context.Context) (txnCounts, error) {
	var (
		n        txnCounts
		failures int                                     // transactions in a row aborted by failed produces: the backoff's attempts
		logs     = throttle.NewEvery(retryLogEvery, nil) // wall time: it paces a log
		// settled: no transaction has ended since the start, or the last one committed;
		// not after an abort or a rebuilt client, whose records are polled again.
		settled = true
	)
	for {
		if c.txn.unfenced {
			if err := c.fenceOpen(ctx); err != nil {
				if ctx.Err() != nil {
					return n, nil // nothing open: nothing to end
				}
				if errors.Is(err, kerr.InvalidTransactionTimeout) {
					if err := c.awaitTransactionTimeout(ctx, err); err != nil {
						return n, c.stopped(ctx, err)
					}
					continue
				}
				return n, err
			}
		}
		// Only a commit is progress (watchdog.go), but a gate that waits in this poll
		// with nothing to do is idle, however long: the stall clock starts when records
		// come. Else the idle time counted as a stall once they did, and until their
		// transaction committed the gate was not ready and not live.
		idle := settled && !c.hasWork()
		fetches := c.pollTxn(ctx)
		if fetches.IsClientClosed() {
			return n, errors.New("kafka client closed while consuming")
		}
		c.fetchErrors(fetches)
		ws := c.works(fetches)
		if len(ws) == 0 {
			if err := c.rearm(endCtx); err != nil || ctx.Err() != nil {
				return n, c.stopped(ctx, err)
			}
			continue
		}
		if idle {
			c.progressed()
		}
		// Records polled together with a cancellation are routed and committed too.
		res, err := c.transact(ctx, endCtx, ws)
		settled = err == nil && res.committed
		c.closedProblems(ctx, res.failures, res.outcomeErr)
		if err != nil {
			if ctx.Err() != nil {
				return n, c.stopped(ctx, err)
			}
			if errors.Is(err, kerr.InvalidTransactionTimeout) {
				if err := c.awaitTransactionTimeout(ctx, err); err != nil {
					return n, c.stopped(ctx, err)
				}
				continue
			}
			if topicClosed(err) {
				if err := c.awaitClosedTopic(ctx, err); err != nil {
					return n, c.stopped(ctx, err)
				}
				continue
			}
			if err := c.recoverFenced(err, res.open, res.churn); err != nil {
				return n, err
			}
			n.aborted++
			if !errors.Is(err, errResync) {
				// After a failed re-read the transaction had ended, aborted, and transact
				// counted it: once is what GateTransactionsAborting's ratio takes.
				c.m.transactions.WithLabelValues("aborted").Inc()
			}
			continue
		}
		if res.committed {
			n.committed++
			failures = 0
		} else {
			n.aborted++
		}
		transient := c.rememberRejected(res.failures)
		if res.outcomeErr != nil && !errors.Is(res.outcomeErr, context.Canceled) {
			transient = true
		}
		if res.startErr != nil && !errors.Is(res.startErr, context.Canceled) {
			transient = true
		}
		if res.refused && !res.churn && !c.rebalanceTold(ctx) {
			if ctx.Err() != nil {
				// Stopping, before or while it waited: the revoke that usually explains
				// the abort (a rollout's new pod joining as this one leaves) is passed on
				// only after End, and the stop does not wait for it; the brokers refusing
				// again cannot hold up a gate that is leaving. Not a warning: the
				// partitions' next owner replays the records
				// (TestExactlyOnceRefusedAsItStopsIsNoWarning).
				c.log.Info("the last transaction aborted as the gate stopped (its offset commit refused, as a revoke does); "+
					"the partitions' next owner replays its records", "records", res.records)
				return n, nil
			}
			// No rebalance explains it: the brokers refused the commit, and may again at
			// once (franz-go does not retry these).
			transient = true
		}
		if transient {
			// Something retrying may cure (the broker is failing): wait before the
			// replay, as the at-least-once retries do.
			msg := "produce failed; transaction aborted, its records are replayed"
			topic, err := c.cfg.OutcomesTopic, res.outcomeErr
			if len(res.failures) > 0 {
				topic, err = res.failures[0].out.Topic, res.failures[0].err
			} else if res.startErr != nil {
				msg = "committing where the group starts partitions it never committed failed; transaction aborted, its records are replayed"
				topic, err = c.cfg.InputTopic, res.startErr
			} else if res.refused {
				msg = "transaction aborted though the gate asked to commit (the brokers refused its offset commit, " +
					"the heartbeat after it, or its end); its records are replayed"
				topic, err = c.cfg.InputTopic, nil
			}
			if ok, unlogged := logs.Allow(); ok {
				attrs := []any{"records", res.records, "failed", len(res.failures), "topic", topic, "attempt", failures + 1}
				if err != nil {
					attrs = append(attrs, "err", err) // none for a refused commit: franz-go keeps it
				}
				c.log.Warn(msg, append(attrs, "aborts_unlogged", unlogged)...)
			}
			t := time.NewTimer(c.backoff(failures))
			failures++
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return n, nil
		}
	}
}

// rebalanceToldWithin is how long after a transaction the session aborted though the
// gate asked to commit, no rebalance seen, the gate waits for one to be passed on before
// taking the abort for the brokers' refusal (rebalanceTold). The revoke comes on the
// group's goroutine, which the scheduler may run late: under -race on two busy cores it
// came past the 100 ms this once was, and a rolling update warned
// (TestExactlyOnceKIP848LateRevokeIsNoRefusal). A refusal no rebalance explains is
// replayed after this second and then its backoff.
const rebalanceToldWithin = time.Second

// rebalanceTold reports whether a revoke, a loss or an assignment is passed on to the
// consumer within rebalanceToldWithin (or was since the transaction ended). Under the
// consumer group protocol (KIP-848) the heartbeat End forces is what usually learns that
// partitions are taken from the gate; the session aborts the transaction for it, and
// passes the revoke on only once End has returned, without a new member epoch meanwhile:
// transact sees no rebalance. Taken for a refusal, every join and leave of a rolling
// update logged a warning sending the operator to the brokers, and delayed the replay
// by a backoff.
func (c *Consumer) rebalanceTold(ctx context.Context) bool {
	if c.txn.awaitingRevoke != nil {
		c.txn.awaitingRevoke()
	}
	wctx, cancel := context.WithTimeout(ctx, rebalanceToldWithin)
	defer cancel()
	_ = waitUntil(wctx, c.txn.rebalanced.Load) // a stop cuts the wait short, not what was told
	return c.txn.rebalanced.Load()
}

// stopped returns what the loop returns after err: err, unless ctx has ended, when an
// error ending the last transaction is logged instead, as at-least-once mode logs a
// failed final commit: the partitions' next owner replays what it did not commit.
func (c *Consumer) stopped(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, errShut) {
		c.log.Error("ending the last transaction failed; the broker aborts it and the partitions' next owner replays it", "err", err)
		return nil
	}
	return err
}

// pollTxn polls the records a transaction opens with: no more than
// Config.TransactionMaxRecords, waiting nudgeAfter at most (none: nudgeFetch). A revoke
// or a loss cuts the poll short (see rearm).
func (c *Consumer) pollTxn(ctx context.Context) kgo.Fetches {
	fetches := c.pollTxnUntil(ctx, time.Now().Add(nudgeAfter), c.cfg.TransactionMaxRecords)
	nudgeFetch(c.cl, fetches)
	return fetches
}

// pollTxnUntil is pollTxn that also returns at deadline (unless it is zero), with at
// most room records (and Config.MaxPollRecords): what the open transaction may still
// route. The client keeps the rest for the next poll.
func (c *Consumer) pollTxnUntil(ctx context.Context, deadline time.Time, room int) kgo.Fetches {
	pctx, cancel := context.WithCancel(ctx)
	if !deadline.IsZero() {
		pctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	c.txn.pollMu.Lock()
	c.txn.cancelPoll = cancel
	c.txn.pollMu.Unlock()
	defer func() {
		c.txn.pollMu.Lock()
		c.txn.cancelPoll = nil
		c.txn.pollMu.Unlock()
	}()
	if c.txn.interrupted.Load() {
		cancel() // interrupted before the poll was registered
	}
	return c.tx.PollRecords(pctx, min(c.cfg.MaxPollRecords, max(room, 1)))
}

// interruptTxn is called on a revoke or a loss: the session aborts the open transaction.
func (c *Consumer) interruptTxn() {
	c.txn.interrupted.Store(true)
	c.txn.pollMu.Lock()
	if c.txn.cancelPoll != nil {
		c.txn.cancelPoll()
	}
	if c.txn.routeStop != nil {
		c.txn.routeStop()
	}
	c.txn.pollMu.Unlock()
}

// dropRevokedUntold drops the state of the partitions the client no longer owns though
// onRevoked never said so: the session passes on only the first revoke after each End,
// and a partition revoked while the transaction that revoke interrupted is still
// ending (the next step of a cooperative or KIP-848 rebalance: another member joining,
// a heartbeat's reconciliation) stayed owned here for good, its lag counted as work by
// the watchdog (an idle gate went not ready, then failed its liveness probe), its
// series still exported. franz-go calls onAssigned after every revoke, told or not,
// and forgets a revoked partition's offsets first: a partition whose records went into
// a transaction here (partition.transacted), whose offsets the client no longer holds
// (heldOffsets), and not in assigned, is no longer this gate's. One only polled is not
// judged: an abort's rewind hides its offsets until a poll returns its records again.
// The open transaction, which may hold its records, is interrupted (it aborts).
//
// While a transaction ends the check waits for the end's rewind (untoldChecks): an
// aborted transaction's partitions the group has no commit for are held without
// offsets the client shows from End's rewind until rewindTxnStarts sets them.
func (c *Consumer) dropRevokedUntold(cl *kgo.Client, assigned []int32) {
	if c.txn.untold.putOff(assigned) {
		return
	}
	c.dropUnheld(cl, assigned)
}

// dropUnheld drops, as revoked untold, the partitions transacted here that are not in
// assigned and whose offsets the client no longer holds.
func (c *Consumer) dropUnheld(cl *kgo.Client, assigned []int32) {
	held := heldOffsets(cl, c.cfg.InputTopic)
	var ids []int32
	c.partsMu.Lock()
	for id, p := range c.parts {
		if !held[id] && p.transacted.Load() && !slices.Contains(assigned, id) {
			ids = append(ids, id)
		}
	}
	c.partsMu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	c.revokedTxn(ids, "seen_at", "assignment")
}

// heldOffsets returns the partitions of topic the client holds offsets for: those the
// group committed (CommittedOffsets, since franz-go v1.22.3 only those with a commit)
// and those read or set past it (UncommittedOffsets: a partition without a commit
// once a poll returned its records, or once SetOffsets moved it). A revoked partition
// is in neither: franz-go forgets its offsets before onAssigned.
func heldOffsets(cl *kgo.Client, topic string) map[int32]bool {
	held := map[int32]bool{}
	for id := range cl.CommittedOffsets()[topic] {
		held[id] = true
	}
	for id := range cl.UncommittedOffsets()[topic] {
		held[id] = true
	}
	return held
}

// untoldChecks puts off dropRevokedUntold's check while a transaction ends. End's
// rewind after an abort moves the client back to the group's commits, and a partition
// the group has no commit for back to where the client began reading it, without a
// mark: from then until rewindTxnStarts sets it again (SetOffsets), the client shows
// no offsets for it, and a check in between (onAssigned runs on the group's goroutine,
// beside End: the next step of the rebalance that interrupted the transaction) took
// the partition, still the client's, for revoked: the gate dropped its state
// (gate_owned_partitions, its lag series and the watchdog's view of it) until the next
// rebalance. The loop checks again once the rewind is over (settle), giving the check
// the partitions assigned meanwhile. The mutex orders a check put off against the
// loop's taking them: none is left behind.
type untoldChecks struct {
	mu        sync.Mutex
	rewinding bool
	due       bool    // a check was put off
	assigned  []int32 // the partitions the callbacks put off were given meanwhile
}

// start marks a transaction's end and rewind as under way.
func (u *untoldChecks) start() {
	u.mu.Lock()
	u.rewinding = true
	u.mu.Unlock()
}

// putOff reports whether a check of assigned must wait for the rewind, noting it.
func (u *untoldChecks) putOff(assigned []int32) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.rewinding {
		return false
	}
	u.due = true
	u.assigned = append(u.assigned, assigned...)
	return true
}

// settle ends the rewind and returns whether a check was put off, and the partitions
// given meanwhile (not revoked: assigned since).
func (u *untoldChecks) settle() (due bool, assigned []int32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	due, assigned = u.due, u.assigned
	u.rewinding, u.due, u.assigned = false, false, nil
	return due, assigned
}

// checkUntold runs the check put off while the transaction ended, if any.
func (c *Consumer) checkUntold() {
	if due, assigned := c.txn.untold.settle(); due {
		c.dropUnheld(c.cl, assigned)
	}
}

// revokedTxn gives up the partitions ids under exactly-once delivery: the session aborts
// the open transaction, if any (interrupted here), so there is nothing to await or
// commit, and the partitions' next owner replays from the last commit. attrs are added
// to the log line, which gives took as the at-least-once one does: how long this member
// held the group's rebalance (wall time, as onRevoked's).
func (c *Consumer) revokedTxn(ids []int32, attrs ...any) {
	began := time.Now()
	c.txn.rebalanced.Store(true)
	c.interruptTxn()
	c.drop(ids)
	c.releaseStopped(ids)
	c.m.rebalances.WithLabelValues("revoked").Inc()
	c.log.Info("partitions revoked", append([]any{"topic", c.cfg.InputTopic, "partitions", ids,
		"took", time.Since(began).Round(time.Millisecond).String()}, attrs...)...)
}

// rearm ends the session's transaction, with nothing in it, after a revoke or a loss
// seen while idle. The session passes only the first revoke and the first loss after
// each End on to the consumer's callbacks; without an End, a later one would leave the
// partitions' state, readiness and lag metrics stale. Nothing was polled since the last
// End, so the rewind to the committed offsets that comes with it moves nothing.
func (c *Consumer) rearm(ctx context.Context) error {
	if !c.txn.interrupted.Load() {
		return nil
	}
	c.txn.interrupted.Store(false) // before End: see transact
	c.txn.ending.Store(true)
	c.txn.untold.start()
	_, err := c.tx.End(ctx, kgo.TryAbort)
	c.txn.ending.Store(false)
	c.checkUntold()
	c.txn.rearms.Add(1)
	if err != nil {
		return fmt.Errorf("ending an empty transaction after a rebalance: %w", err)
	}
	return nil
}

// txnResult is what became of one transaction.
type txnResult struct {
	committed bool
	records   int
	failures  []*failed
	open      time.Duration // from Begin to End's return
	churn     bool          // the group's generation moved meanwhile: a rebalance ran
	// outcomeErr is a failed outcome row's error: the transaction aborted for it.
	outcomeErr error
	// startErr is commitTxnStarts' error: the transaction aborted for it.
	startErr error
	// refused: the gate asked to commit, and the transaction aborted all the same, End
	// returning no error: franz-go aborts when the offset commit is refused with an
	// error of its list (ILLEGAL_GENERATION, CONCURRENT_TRANSACTIONS,
	// UNKNOWN_SERVER_ERROR...), when the heartbeat after it fails, or when EndTxn is
	// refused so; it does not retry them, and the gate backs off (see txnLoop).
	refused bool
}

// transact routes and produces ws in one transaction, goes on polling (under pollCtx)
// and routing into it while it may stay open (see the top of this file), and ends it
// (under ctx): a commit, unless a produce failed or a rebalance interrupted it. The
// error is End's (or Begin's), after which franz-go says the client cannot go on.
func (c *Consumer) transact(pollCtx, ctx context.Context, ws []work) (txnResult, error) {
	var res txnResult
	for _, w := range ws {
		res.records += len(w.recs)
	}
	start := time.Now()
	_, gen := c.cl.GroupMetadata()
	c.txn.rebalanced.Store(false)
	if err := c.tx.Begin(); err != nil {
		return res, fmt.Errorf("beginning a transaction: %w", err)
	}
	c.txnTimeoutTaken()
	c.txn.skipped.Store(false)
	c.txn.gapMet, c.txn.gaps = false, c.txn.gaps[:0]
	c.txn.startErr = nil
	clear(c.txn.routed)
	clear(c.txn.from)
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	c.txn.pollMu.Lock()
	c.txn.ctx, c.txn.routeStop = tctx, stop
	c.txn.pollMu.Unlock()
	if c.txn.interrupted.Load() {
		stop() // interrupted before the stop was registered
	}
	c.routeTxn(ws)
	c.fillTxn(pollCtx, start, &res)
	// The transaction's outcome rows, in it: they commit or abort with its records.
	rows, folded := c.sealTxn()
	end, what := kgo.TryCommit, "committing"
	if err := c.cl.Flush(ctx); err != nil {
		// Only ctx ends a Flush: the shutdown timeout passed.
		end, what = kgo.TryAbort, "aborting after "+err.Error()
	} else {
		c.txn.pending.Wait()
	}
	res.failures = c.txn.takeFailures()
	res.outcomeErr = c.outcomeFailed()
	res.startErr = c.txn.startErr
	switch {
	case len(res.failures) > 0:
		end, what = kgo.TryAbort, "aborting after failed produces"
	case res.startErr != nil:
		end, what = kgo.TryAbort, "aborting after a failed commit of the start offsets"
	case res.outcomeErr != nil:
		end, what = kgo.TryAbort, "aborting after a failed outcome row"
	case c.txn.gapMet:
		// Input records lost under the open transaction (loss.go): met again, and
		// handled, from the last commit.
		end, what = kgo.TryAbort, "aborting after input records lost"
	case c.txn.skipped.Load():
		// Routing stopped short: committing the poll's offsets would skip records.
		end, what = kgo.TryAbort, "aborting after a rebalance"
	}
	var offs map[int32]kgo.EpochOffset
	if end == kgo.TryCommit {
		// What End commits: the client's position, past the poll.
		offs = c.cl.UncommittedOffsets()[c.cfg.InputTopic]
	}
	// Cleared before End, not after: a revoke or loss that lands once End has reset the
	// session (franz-go passes it on then) must stay seen, or the session would not
	// pass on the next one until a transaction ends (see rearm).
	c.txn.interrupted.Store(false)
	c.txn.ending.Store(true)
	c.txn.untold.start()
	committed, err := c.tx.End(ctx, end)
	c.txn.ending.Store(false)
	if c.txn.beforeRewind != nil {
		c.txn.beforeRewind()
	}
	if err == nil && committed {
		// Only a commit is progress: an aborted transaction's records are polled and
		// routed again, and a gate whose every transaction aborts is stuck (watchdog.go).
		c.progressed()
	}
	if err == nil && !committed {
		c.rewindTxnStarts()
	}
	c.checkUntold() // the rewind is over: see untoldChecks
	if err == nil && len(c.txn.gaps) > 0 {
		c.resumeTxnGaps(ctx)
	}
	if c.txn.afterEnd != nil {
		c.txn.afterEnd()
	}
	res.open = time.Since(start)
	_, genAfter := c.cl.GroupMetadata()
	res.churn = genAfter != gen || c.txn.rebalanced.Swap(false)
	c.m.txnDuration.Observe(res.open.Seconds())
	if err != nil {
		return res, fmt.Errorf("ending a transaction of %d input records (%s): %w", res.records, what, err)
	}
	res.committed = committed
	res.refused = !committed && end == kgo.TryCommit
	if committed {
		c.m.transactions.WithLabelValues("committed").Inc()
		c.m.outcomeRows.Add(float64(rows)) // written only now: an aborted one's are not
		c.m.outcomeFolded.Add(float64(folded))
	} else {
		c.m.transactions.WithLabelValues("aborted").Inc()
		offs = nil
		if end == kgo.TryCommit && pollCtx.Err() == nil {
			// An abort the gate did not ask for: franz-go retries a commit that failed
			// as an abort and rewinds to the offsets it last committed, but a broker can
			// apply a commit and still answer it with an error. Polling again from
			// franz-go's offsets would route a committed poll twice: take the group's.
			// Not when stopping: nothing is polled again, and the partitions' next owner
			// starts from the group's offsets. That re-read waited out the shutdown
			// timeout while another member's transaction (a rollout's new pod) held the
			// offsets unstable, then logged the last transaction as failed, at error.
			if err := c.resyncOffsetsRetrying(ctx); err != nil {
				return res, fmt.Errorf("re-reading the committed offsets after a transaction the broker did not confirm: %w: %w", errResync, err)
			}
		}
	}
	c.afterEnd(offs)
	return res, nil
}

// rewindTxnStarts puts each partition an aborted transaction routed back where the
// transaction began reading it, when the session's rewind went below that, and where
// the group has not committed it: franz-go rewinds such a partition to where it began
// reading it (v1.22.2 went to offset 0, which routed the records Config.StartOffset
// skipped), and shows no offsets for it until it is set (untoldChecks). Only a
// partition owned throughout, its state the one the transaction routed (a rebalance
// can abort the transaction and leave it here: cooperative-sticky keeps what it can); a
// partition revoked since is its next owner's, who starts from the commit. The records
// of such a partition are polled again: it has lag, whatever routing them left (none
// when the poll held its last records), or the watchdog would take a gate whose every
// transaction aborts for idle.
func (c *Consumer) rewindTxnStarts() {
	cur := c.cl.CommittedOffsets()[c.cfg.InputTopic]
	set := map[int32]kgo.EpochOffset{}
	for id, from := range c.txn.from {
		if c.owned(id) != from.p {
			continue
		}
		from.p.lag.Store(max(from.p.lag.Load(), 1))
		again := from.offset
		if off, ok := cur[id]; !ok || off.Offset < from.offset {
			set[id] = kgo.EpochOffset{Epoch: -1, Offset: from.offset}
		} else {
			again = off.Offset
		}
		// A lag measured again before the poll (refreshLag) is from where it is read
		// again: from past the records, where their poll left it, it read 0.
		from.p.next.Store(again)
	}
	if len(set) > 0 {
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: set})
	}
}

// routeTxn routes one poll's records into the open transaction.
func (c *Consumer) routeTxn(ws []work) {
	if c.txn.routed == nil {
		c.txn.routed = map[int32]bool{}
	}
	if c.txn.from == nil {
		c.txn.from = map[int32]txnStart{}
	}
	for _, w := range ws {
		c.txn.routed[w.p.id] = true
		w.p.transacted.Store(true)
		if _, ok := c.txn.from[w.p.id]; !ok {
			c.txn.from[w.p.id] = txnStart{w.p, w.recs[0].Offset}
		}
	}
	if c.cfg.StartOffset == StartLatest && !c.commitTxnStarts(ws) {
		return // the transaction aborts: its records since the last commit, this poll's too, are replayed
	}
	if c.isolating(ws) {
		// A record must be produced alone: one goroutine routes the poll, so that
		// nothing else is in flight when it is.
		for _, w := range ws {
			c.routeTxnWork(w, &c.scratch[0])
		}
	} else {
		c.process(ws, c.routeTxnWork)
	}
}

// commitTxnStarts commits, outside the transaction and before any of their records is
// produced, where the open transaction began reading the partitions of ws the group has
// no offset committed for (StartLatest only). Their next owner would otherwise start at
// the log's end as of its own assignment, past the records this transaction routed:
// whatever aborts the transaction (a rebalance that moves the partition, a crash, a
// fence) would lose them. From there it replays them, and nothing written before the
// group first read the partition. With StartEarliest the next owner starts below them.
// The start is normally committed already, at the assignment (commitLatestStarts,
// which franz-go then shows as committed): this is for when that commit failed.
// It reports whether ws may be routed: if not, the transaction must abort
// (txnState.skipped, and startErr says why when the commit failed).
func (c *Consumer) commitTxnStarts(ws []work) bool {
	var cur, offs map[int32]kgo.EpochOffset
	for _, w := range ws {
		if w.p.startCommitted {
			continue
		}
		if cur == nil {
			cur = c.cl.CommittedOffsets()[c.cfg.InputTopic]
		}
		// franz-go shows no committed offset for a partition the group has not
		// committed (v1.22.2 showed offset 0): committing where the transaction began
		// is then harmless anyway, as the client reads from there.
		if off, ok := cur[w.p.id]; ok && off.Offset > 0 {
			w.p.startCommitted = true
			continue
		}
		if offs == nil {
			offs = map[int32]kgo.EpochOffset{}
		}
		offs[w.p.id] = kgo.EpochOffset{Epoch: -1, Offset: c.txn.from[w.p.id].offset}
	}
	if len(offs) == 0 {
		return true
	}
	if c.txn.interrupted.Load() || c.txn.ctx.Err() != nil {
		// Revoked or lost meanwhile: this member may no longer own them.
		c.txn.skipped.Store(true)
		return false
	}
	err := c.commitInput(c.txn.ctx, c.cl, offs)
	if err != nil {
		c.txn.startErr = fmt.Errorf("committing the start offsets of %s, partitions the group never committed: %w", c.cfg.InputTopic, err)
		c.txn.skipped.Store(true)
		return false
	}
	for _, w := range ws {
		if _, ok := offs[w.p.id]; ok {
			w.p.startCommitted = true
		}
	}
	return true
}

// fillTxn polls and routes into the transaction opened at start while it may stay
// open: until Config.TransactionInterval from start, Config.TransactionMaxRecords
// routed, a revoke or loss (routing stopped short or the poll cut), a failed produce
// (the transaction aborts: routing more would only be replayed) or the end of pollCtx
// (shutdown: what was routed is committed). The records it routes are added to res.
func (c *Consumer) fillTxn(pollCtx context.Context, start time.Time, res *txnResult) {
	deadline := start.Add(c.cfg.TransactionInterval)
	for res.records < c.cfg.TransactionMaxRecords && pollCtx.Err() == nil && time.Now().Before(deadline) &&
		!c.txn.interrupted.Load() && !c.txn.skipped.Load() && !c.txn.failing() {
		until := quietUntil(time.Now(), deadline, c.cfg.TransactionInterval)
		fetches := c.pollTxnUntil(pollCtx, until, c.cfg.TransactionMaxRecords-res.records)
		if fetches.IsClientClosed() {
			return // End fails and says so
		}
		c.txn.filling = true
		c.fetchErrors(fetches)
		c.txn.filling = false
		if c.txn.gapMet {
			return // the transaction aborts, this poll unrouted: replayed from the last commit
		}
		ws := c.works(fetches)
		if len(ws) == 0 {
			if !time.Now().Before(until) && pollCtx.Err() == nil {
				return // the input went quiet: its records are committed now, not at the deadline
			}
			continue
		}
		for _, w := range ws {
			res.records += len(w.recs)
		}
		c.routeTxn(ws)
	}
}

// txnQuietShare is the part of Config.TransactionInterval a poll of an open transaction
// waits for records: a poll that gets none in that time ends the transaction, so that
// the last records before a pause (the input drained, a burst over) are readable at once
// rather than when the interval ends. Under load a poll gets records long before (a
// fetch round trip), and the transaction goes on to the interval.
const txnQuietShare = 10

// quietUntil is when a poll of an open transaction, made at now, gives up waiting for
// records: a tenth of the interval later (txnQuietShare), or at the transaction's
// deadline if that is sooner.
func quietUntil(now, deadline time.Time, interval time.Duration) time.Time {
	if q := now.Add(interval / txnQuietShare); q.Before(deadline) {
		return q
	}
	return deadline
}

// errResync marks a failure to re-read the committed offsets after an abort: the
// session is rebuilt (its new member starts from them), but it is not the gate's fault
// and does not count toward maxRecoveries.
var errResync = errors.New("offsets not re-read")

// resyncOffsetsRetrying is resyncOffsets, retried with a backoff while the
// coordinator answers with a retriable error: UNSTABLE_OFFSET_COMMIT in particular,
// while the markers of the transaction just aborted are still being written.
func (c *Consumer) resyncOffsetsRetrying(ctx context.Context) error {
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := c.resyncOffsets(ctx)
		if err == nil || attempt == 10 || !(errors.Is(err, kerr.UnstableOffsetCommit) || kerr.IsRetriable(err)) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// resyncOffsets sets the client's position in every owned input partition to the
// group's committed offset, as the coordinator has it (stable: no transaction's
// offsets pending).
func (c *Consumer) resyncOffsets(ctx context.Context) error {
	var ids []int32
	for _, p := range c.snapshot(nil) {
		ids = append(ids, p.id)
	}
	if len(ids) == 0 {
		return nil
	}
	offs, err := c.committedOffsets(ctx, ids, true)
	if err != nil {
		return err
	}
	if len(offs) > 0 {
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: offs})
	}
	return nil
}

// routeTxnWork routes one partition's records in offset order and produces them in the
// open transaction. A record the broker rejected for good when its poll was last
// attempted is produced alone, or goes to the dead-letter topic, or is skipped (see
// rememberRejected). Records counted by the limiter in an aborted attempt are judged
// without being counted again.
func (c *Consumer) routeTxnWork(w work, s *route.Scratch) {
	var now time.Time
	next := w.recs[0].Offset
	counted := c.txn.countedTo(w.p.id)
	beginOutcomes(w.p, w.recs[0])
	defer func() {
		s.Replay = false
		c.txn.countTo(w.p.id, next)
		endOutcomes(w.p, next)
	}()
	// The records in flight in a slab, reused as routeWork's are (slab.go): b counts them
	// down as their promises run, and routing holds one more until it has given back
	// the records it did not produce (skipped, dropped, not routed). A batch with a
	// failed produce is kept (batch.keep).
	fs := c.slabs.get(len(w.recs))
	b := &batch{slab: fs}
	b.remaining.Store(int64(len(w.recs)) + 1)
	produced := 0
	defer func() { c.ackBatch(b, int64(len(w.recs)-produced)+1) }()
	for i, in := range w.recs {
		if i%clockRefresh == 0 {
			if c.txn.interrupted.Load() || w.p.stopped.Load() || c.txn.ctx.Err() != nil {
				// The transaction aborts: routing the rest would only count them in the
				// limiter once more than needed.
				c.txn.skipped.Store(true)
				break
			}
			now = c.clock.Now()
		}
		f := &fs[i]
		f.in = in
		r, rerouted := c.reroutes[rerouteKey{w.p.id, in.Offset}]
		switch {
		case rerouted && r.stage == stageUndeliverable:
			// Skipped (GATE_ON_UNDELIVERABLE=skip): committed past, not produced.
			c.recordFate(s, now, in, outcome.Dropped, "undeliverable")
			next = in.Offset + 1
			continue
		case rerouted && r.stage > stageRouted:
			f.stage = int8(r.stage)
			f.out = *c.deadLetterRecord(in, r.topic, r.err, r.stage, r.before)
			c.recordFate(s, now, in, outcome.DeadLetter, route.ReasonRejected)
		default:
			s.Replay = in.Offset < counted
			if c.router.RouteInto(now, in, s, &f.out).Route == route.Dropped {
				next = in.Offset + 1 // written nowhere: its outcome row counts it
				continue
			}
		}
		f.b = b
		produced++
		if rerouted && r.isolate {
			c.produceAlone(f)
		} else {
			c.txn.pending.Add(1)
			c.cl.Produce(c.txn.ctx, &f.out, c.txnPromise)
		}
		next = in.Offset + 1
	}
	lagFrom := next // next is the deferred countTo's and endOutcomes': not moved past markers
	if next == w.recs[len(w.recs)-1].Offset+1 {
		lagFrom = w.next // every record routed: past the control records after them too
	}
	c.setLag(w.p, w.hwm, w.stable, lagFrom)
}

// isolating reports whether a record of ws must be produced alone.
func (c *Consumer) isolating(ws []work) bool {
	for k, r := range c.reroutes {
		if !r.isolate {
			continue
		}
		for _, w := range ws {
			if w.p.id == k.part && k.offset >= w.recs[0].Offset && k.offset <= w.recs[len(w.recs)-1].Offset {
				return true
			}
		}
	}
	return false
}

// produceAlone produces f in the open transaction with nothing else in flight, and
// waits for the broker's answer, so that a rejection is about f alone. Only one
// goroutine routes while a poll has such a record (see transact).
func (c *Consumer) produceAlone(f *failed) {
	if c.cl.Flush(c.txn.ctx) != nil {
		return // the shutdown timeout passed: the transaction aborts
	}
	c.txn.pending.Wait()
	f.alone = true
	c.txn.pending.Add(1)
	c.cl.Produce(c.txn.ctx, &f.out, c.txnPromise)
	_ = c.cl.Flush(c.txn.ctx)
	c.txn.pending.Wait()
}

// onProducedTxn is the promise of every record produced in a transaction; the record
// is the out field of a failed, as for onProduced.
func (c *Consumer) onProducedTxn(r *kgo.Record, err error) {
	f := (*failed)(unsafe.Pointer(r))
	b := f.b
	if err == nil {
		c.producedOK(r.Topic)
	}
	if errors.Is(err, context.Canceled) {
		// Failed because the routing context ended (a revoke or loss, or the end of the
		// shutdown's grace), as onProduced treats it: no broker error, nothing to count
		// or back off for, but the record is not in the transaction, which must abort.
		c.txn.skipped.Store(true)
		err = nil
	}
	if err != nil {
		f.err = err
		c.m.produceError(r.Topic, err)
		if !topicClosed(err) {
			// A topic missing or closed is said once the transaction has ended
			// (closedProblems): the error may be another topic's.
			c.produceProblem(r.Topic, err)
		}
		b.keep.Store(true) // before ackBatch: the call that completes b sees it
		c.txn.fail(f)
	}
	c.ackBatch(b, 1) // f may be reused from here on, unless b is kept
	c.txn.pending.Done()
}

// rememberRejected notes, among the failed records of an aborted transaction, those
// the broker rejected for good, so that when they are polled again they are produced
// alone, and when they were, they go on to the next stage of failed.advance: the
// dead-letter topic, the same stripped, then Config.OnUndeliverable. So a record no
// topic accepts cannot stop its partition unless the operator asked it to, and one
// rejected with others in a batch is not dead-lettered for their fault. It reports
// whether any other failure remains, which only time may cure.
func (c *Consumer) rememberRejected(fs []*failed) (transient bool) {
	for _, f := range fs {
		if !rejected(f.err) || f.stage >= stageUndeliverable {
			transient = true
			continue
		}
		key := rerouteKey{f.in.Partition, f.in.Offset}
		prev, had := c.reroutes[key]
		stage, moved := f.advance()
		r := reroute{stage: stage, isolate: f.isolate, topic: f.out.Topic, err: f.err, before: refusedBefore(f.in, &f.out)}
		if !moved && had {
			// Same stage: its dead letter keeps naming the rejection that led to it.
			r.topic, r.err, r.before = prev.topic, prev.err, prev.before
		}
		switch {
		case stage < stageUndeliverable:
			if moved {
				c.m.countRerouted(stage)
				c.logRerouted(f.out.Topic, f.err)
			}
		case c.cfg.OnUndeliverable == UndeliverableSkip:
			c.skipUndeliverable(f.in, f.out.Topic, f.err)
		default:
			if p := c.owned(f.in.Partition); p != nil {
				c.stopPartition(p, f.in, f.out.Topic, f.err)
			}
			delete(c.reroutes, key)
			continue
		}
		if c.reroutes == nil {
			c.reroutes = make(map[rerouteKey]reroute)
		}
		c.reroutes[key] = r
	}
	return transient
}

// owned returns the state of partition id if this consumer owns it.
func (c *Consumer) owned(id int32) *partition {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	return c.parts[id]
}

// afterEnd updates the committed-offset gauges of the partitions a commit covered
// (committed: nil after an abort) and forgets the reroutes of records committed or of
// partitions no longer owned.
func (c *Consumer) afterEnd(committed map[int32]kgo.EpochOffset) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	for id, off := range committed {
		if c.parts[id] != nil {
			c.m.committed.WithLabelValues(itoa(id)).Set(float64(off.Offset))
		}
	}
	for k := range c.reroutes {
		off, ok := committed[k.part]
		if c.parts[k.part] == nil || ok && k.offset < off.Offset {
			delete(c.reroutes, k)
		}
	}
}

// graceContext returns a context that is not cancelled with ctx but ends grace after
// ctx does, and a function releasing it.
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(grace, cancel)
		mu.Unlock()
	})
	return gctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
