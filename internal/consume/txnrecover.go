// Exactly-once recovery: what the gate does when the broker fences its producer, times
// out or refuses a transaction, or an output topic closes to the gate (an ACL revoked, a
// topic deleted). A fence the broker may have made itself (a transaction timed out, a
// rebalance held its End) is recovered by a new session under the same transactional id,
// its aborted records replayed; a refusal that no retry cures makes the gate not ready
// and says what the operator must change, never a silent retry loop.

package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/throttle"
)

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
	brokerMax := c.refusedTxnMax(ctx)
	c.problems.set(problemTxnTimeout, "kafka: "+transactionTimeoutMessage(c.cfg.TransactionTimeout, brokerMax))
	c.log.Error("kafka: the brokers refuse to begin transactions: "+transactionTimeoutMessage(c.cfg.TransactionTimeout, brokerMax)+"; not ready",
		"retry_in", cmp.Or(c.txn.timeoutRetry, txnTimeoutRetry).String(), "err", err)
	closed := c.closeClient(c.tx.CloseAllowingRebalance)
	c.ready.Store(false)
	c.txn.interrupted.Store(false)
	t := time.NewTimer(cmp.Or(c.txn.timeoutRetry, txnTimeoutRetry))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return c.resumeSession(closed)
}

// refusedTxnMax is the brokers' transaction.max.timeout.ms as a refusal of the gate's
// transaction timeout names it, read again at each refusal ("unknown: ..." when it
// cannot be): the preflight's read may have come before the gate's principal could
// (DESCRIBE_CONFIGS granted at the same moment, or by an operator answering the
// refusal; in a CI run the ACL had not reached the broker when the gate started, and
// every retry said "unknown" for minutes).
func (c *Consumer) refusedTxnMax(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	meta := kmsg.NewPtrMetadataRequest() // no topics: the brokers alone
	meta.Topics = []kmsg.MetadataRequestTopic{}
	if resp, err := meta.RequestWith(rctx, c.cl); err == nil && len(resp.Brokers) > 0 {
		if max, ok := c.brokerTxnMax(rctx, resp.Brokers[0].NodeID); ok {
			return durtext.String(max)
		}
	}
	return "unknown: the gate may not read it"
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
		found, _, _, err := c.topicProblems(qctx, c.cl, topics)
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
	c.noteSession(c.cl)
	c.live.Store(c.cl)
	c.txn.unfenced = true
	c.txn.staleCommitted = false // the session reads the group's commits
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
	at       time.Time
	slow     bool
	unmapped bool // the transactional id no longer mapped to the producer (id_unmapped)
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
	// A producer id the brokers no longer map to the transactional id: the id expired,
	// unused for transactional.id.expiration.ms (7 days by default: a gate whose
	// partitions were idle that long met it at its next record, and exited blaming
	// another instance), or another instance took it over since. A new session maps it
	// again; another instance would fence it back, which the recoveries' bound stops.
	unmappedNow := errors.Is(err, kerr.InvalidProducerIDMapping)
	if isFence && open < timeout && !unmappedNow {
		return fmt.Errorf("%w (fenced %s into a transaction, within the transaction timeout of %s: "+
			"another live instance is using transactional id %q)", err, durtext.String(open.Round(time.Millisecond)), durtext.String(timeout), id)
	}
	now := time.Now()
	recent := c.recoveries[:0]
	slow, unmapped := 0, 0 // of recent, the transactions that outlived the timeout; the ids unmapped
	for _, r := range c.recoveries {
		if now.Sub(r.at) < recoveryWindow {
			recent = append(recent, r)
			switch {
			case r.slow:
				slow++
			case r.unmapped:
				unmapped++
			}
		}
	}
	c.recoveries = recent
	if !churn && len(recent) >= maxRecoveries {
		switch {
		case unmappedNow:
			unmapped++
		case isFence:
			slow++
		}
		// Said by what the counted recoveries were, not by this last one alone: five
		// ends refused with an unknown outcome and then one slow transaction are no
		// transaction timeout to raise.
		switch n := len(recent) + 1; {
		case unmapped == n:
			// Mapped again and again taken: another instance uses the id.
			return fmt.Errorf("%w (the brokers stopped mapping transactional id %q to this gate's producer %d times within %s: "+
				"another live instance is using it)", err, id, n, durtext.String(recoveryWindow))
		case unmapped > 0:
			return fmt.Errorf("%w (transactions could not be ended %d times within %s: %d outlived the transaction timeout of %s, "+
				"%d found the transactional id %q no longer mapped to this gate's producer, %d ended with an unknown outcome; "+
				"see gate_transaction_recoveries_total by cause and the warnings before this)", err, n, durtext.String(recoveryWindow),
				slow, durtext.String(timeout), unmapped, id, n-slow-unmapped)
		case slow == 0:
			return fmt.Errorf("%w (ending transactions failed %d times within %s)", err, n, durtext.String(recoveryWindow))
		case slow == n:
			return fmt.Errorf("%w (transactions outlived the transaction timeout of %s %d times within %s: "+
				"raise it above the group's session and rebalance timeouts and the time a transaction stays open "+
				"(the transaction interval, %s, then the time its records in flight take to produce), "+
				"and check that no other instance uses transactional id %q)", err, durtext.String(timeout), n, durtext.String(recoveryWindow),
				durtext.String(c.cfg.TransactionInterval), id)
		default:
			return fmt.Errorf("%w (transactions could not be ended %d times within %s: %d outlived the transaction "+
				"timeout of %s, %d ended with an unknown outcome (a broker not answering, a lost connection); "+
				"see gate_transaction_recoveries_total by cause and the warnings before this)", err, n, durtext.String(recoveryWindow),
				slow, durtext.String(timeout), n-slow)
		}
	}
	cause := "group_churn"
	switch {
	case unmappedNow && !churn:
		c.recoveries = append(c.recoveries, recovery{at: now, unmapped: true})
		cause = "id_unmapped"
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
	case unmappedNow:
		msg = "the brokers no longer map the transactional id to this producer: it expired, unused for the brokers' " +
			"transactional.id.expiration.ms (7 days by default), or another instance took it; rebuilding the Kafka client " +
			"under the same transactional id, which resumes from the group's committed offsets"
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
