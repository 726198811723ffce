package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// runTxn is Run with exactly-once delivery.
func (c *Consumer) runTxn(ctx context.Context) error {
	c.log.Info("consumer started", "brokers", c.cfg.Brokers, "input_topic", c.cfg.InputTopic, "group", c.cfg.GroupID,
		"delivery", c.cfg.Delivery.String(), "transactional_id", c.cfg.TransactionalID)
	// Transactions end with endCtx, never ctx: an End cut short leaves the client unable
	// to tell whether the transaction committed. Once ctx ends, the transaction still
	// open gets ShutdownTimeout.
	// The input topic deleted under the gate ends the run as a shutdown does, with the
	// cause returned (inputwatch.go).
	ctx, c.stopRun = context.WithCancelCause(ctx)
	defer c.stopRun(nil)
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
		if err := c.rearm(endCtx, false); err != nil {
			c.log.Warn("could not end the session's empty transaction before leaving the group", "err", err)
		}
	}
	// Where each partition's next owner starts, for the stop line, as at least once:
	// what the last commit here reached (partition.doneAt), before leaving drops them.
	at := map[int32]int64{}
	for _, p := range c.snapshot(nil) {
		if d := p.doneAt.Load(); d > 0 {
			at[p.id] = d - 1
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
	c.log.Info("consumer stopped", "transactions_committed", n.committed, "transactions_aborted", n.aborted, "committed_offsets", at)
	if gone, ok := errors.AsType[*InputGoneError](context.Cause(ctx)); ok && runErr == nil {
		return gone
	}
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
		// An abort's records are polled again only by their partitions' owner: a gate
		// left owning nothing (the rebalance that aborted passed it over) has none left
		// to poll, and is as settled as one that never transacted.
		if !settled && c.ownsNothing() {
			settled = true
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
		if c.txn.afterPoll != nil {
			c.txn.afterPoll(fetches)
		}
		c.fetchErrors(fetches)
		// A poll of control records alone (an aborted upstream transaction's marker)
		// still runs a transaction: it commits the offsets past them, with the records
		// of any poll that follows within it. Not once a revoke interrupted the session:
		// ending it would be refused as revoked, and read as the brokers refusing it.
		ws, moved := c.works(fetches)
		if len(ws) == 0 && (!moved || c.txn.interrupted.Load()) {
			err := c.rearm(endCtx, ctx.Err() == nil)
			if errors.Is(err, errResync) && ctx.Err() == nil {
				// The empty transaction ended; the re-read after it failed: a new session
				// reads the group's commits, as after a transaction's (recoverFenced).
				if err := c.recoverFenced(err, 0, true); err != nil {
					return n, err
				}
				continue
			}
			if err != nil || ctx.Err() != nil {
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
			msg := "produce failed; transaction aborted, "
			topic, err := c.cfg.OutcomesTopic, res.outcomeErr
			if len(res.failures) > 0 {
				topic, err = res.failures[0].out.Topic, res.failures[0].err
				if c.ruleTopicGone(topic, err) {
					// closedProblems, or the check that purged its records, marked it:
					// the replay sends the rule's records to overflow, not there again.
					msg = "produce to a missing rule topic failed; transaction aborted, its rule's records go to the overflow topic instead (" +
						route.HeaderRuleTopicMissing + "), "
				}
			} else if res.startErr != nil {
				msg = "committing where the group starts partitions it never committed failed; transaction aborted, "
				topic, err = c.cfg.InputTopic, res.startErr
			} else if res.refused {
				msg = "transaction aborted though the gate asked to commit (the brokers refused its offset commit, " +
					"the heartbeat after it, or its end); "
				topic, err = c.cfg.InputTopic, nil
			}
			// What becomes of its records: replayed here, or, stopping, where nothing is
			// polled again, by the partitions' next owner.
			if ctx.Err() != nil {
				msg += "the gate stops: the partitions' next owner routes its records"
			} else {
				msg += "its records are replayed"
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
	c.dropUncommittedCounts() // of the last transaction, unless it committed
	c.routeTxn(ws)
	c.fillTxn(pollCtx, start, &res)
	// The transaction's outcome rows, in it: they commit or abort with its records.
	rows, folded := c.sealTxn()
	end, what := kgo.TryCommit, "committing"
	slow := time.AfterFunc(slowFlush, c.checkRuleTopicsSoon)
	err := c.cl.Flush(ctx)
	slow.Stop()
	if err != nil {
		// Only ctx ends a Flush: the shutdown timeout passed.
		end, what = kgo.TryAbort, "aborting after "+err.Error()
	} else {
		c.txn.pending.Wait()
	}
	res.failures = c.txn.takeFailures()
	res.outcomeErr = c.outcomeFailed()
	res.startErr = c.txn.startErr
	switch {
	case c.txn.inputGone.Load():
		end, what = kgo.TryAbort, "aborting: the input topic went"
	case c.inputDoubt.Load():
		// Its offsets are committed by topic name: a topic created again would take them.
		end, what = kgo.TryAbort, "aborting: the input topic in doubt"
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
		c.txn.committed(offs, c.ownedIDs())
		c.countCommitted()
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
			c.txn.staleCommitted = true
			if err := c.resyncOffsetsRetrying(ctx); err != nil {
				return res, fmt.Errorf("re-reading the committed offsets after a transaction the broker did not confirm: %w: %w", errResync, err)
			}
		} else if c.txn.staleCommitted && pollCtx.Err() == nil {
			// The gate's own abort, after one it did not ask for: franz-go rewound every
			// partition to the commits it knows, older than the group's where the
			// unconfirmed commit was applied (staleCommitted).
			if err := c.resyncOffsetsRetrying(ctx); err != nil {
				return res, fmt.Errorf("re-reading the committed offsets after an abort, franz-go's own behind the group's since a transaction the broker did not confirm: %w: %w", errResync, err)
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
			w.p.doneAt.CompareAndSwap(0, w.recs[0].Offset+1) // the first read here: nothing routed past it yet
		}
	}
	if c.cfg.StartOffset == StartLatest && !c.commitTxnStarts(ws) {
		return // the transaction aborts: its records since the last commit, this poll's too, are replayed
	}
	// Under the transaction's routing context: a revoke or loss, which aborts the
	// transaction, cuts the read short, as does the end of the shutdown's grace.
	c.prime(c.txn.ctx, ws)
	if c.isolating(ws) {
		// A record must be produced alone: one goroutine routes the poll, so that
		// nothing else is in flight when it is.
		for _, w := range ws {
			c.routeTxnWork(w, &c.scratch[0])
		}
		// As process does: what the routing counted reaches the metrics (and the
		// limiters' held-back counts) now, not when a later poll is routed.
		c.scratch[0].Flush()
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
		ws, _ := c.works(fetches) // markers alone: End commits the position past them
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
	s.Decisions = c.txn.decisionsOf(w.p.id) // what the records below counted were given
	beginOutcomes(w.p, w.recs[0])
	defer func() {
		s.Replay, s.Decisions = false, nil
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
		unsent := false
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
			// A keyless record to a topic known compacted.
			if f.out.Key == nil && c.refusesKeyless.Load() != nil {
				if s.Outcomes != nil && c.refuseKnown(f, b) {
					next = in.Offset + 1 // not produced: the transaction aborts
					continue
				}
				unsent = c.deadLetterUnsent(f)
			}
		}
		f.b = b
		produced++
		if rerouted && r.isolate && !unsent {
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

// countCommitted counts the transaction just committed: its records (each routing
// goroutine's held counts: route.Scratch.Hold) and its dead letters taken. Only a
// committed transaction's, so that the metrics count what read_committed readers of
// the output topics find: an aborted one's records are routed, and counted, again.
// Nothing routes meanwhile.
func (c *Consumer) countCommitted() {
	for i := range c.scratch {
		c.scratch[i].Release(true)
	}
	for n := c.txn.deadLettered.Swap(0); n > 0; n-- {
		c.router.CountDeadLettered()
	}
	for stage := range c.txn.rerouted {
		for n := c.txn.rerouted[stage].Swap(0); n > 0; n-- {
			c.m.countRerouted(stage)
		}
	}
}

// dropUncommittedCounts forgets what countCommitted would have counted of a
// transaction that did not commit (aborted, or its end failed), as a new one begins.
func (c *Consumer) dropUncommittedCounts() {
	for i := range c.scratch {
		c.scratch[i].Release(false)
	}
	c.txn.deadLettered.Store(0)
	for stage := range c.txn.rerouted {
		c.txn.rerouted[stage].Store(0)
	}
}

// refuseKnown fails f, a keyless record the router sent to a topic known to refuse it
// (knownRefusal), in the open transaction as the broker's refusal of it alone would,
// without producing it: the transaction aborts, and its replay sends f to dead letter
// (rememberRejected; routeTxnWork's rerouted records). For exactly once with outcomes
// on, where deadLetterUnsent cannot serve: routing has counted f's outcome row where it
// routed it, in this transaction's rows, and only the abort takes that back; the replay
// counts it as the dead letter it is (recordFate), so the rows agree with the output
// topics. Every such record of the poll is failed in the one transaction: one abort a
// poll that has any, not one a record. It reports whether f was failed.
func (c *Consumer) refuseKnown(f *failed, b *batch) bool {
	if f.stage != stageRouted {
		return false
	}
	err := c.knownRefusal(f.out.Topic)
	if err == nil {
		return false
	}
	f.b, f.err, f.alone = b, err, true // alone: rememberRejected moves it to dead letter
	b.keep.Store(true)                 // f is read once the transaction has ended
	c.txn.fail(f)
	return true
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
		if f.stage > stageRouted {
			c.txn.deadLettered.Add(1) // as onProduced: taken, not only built; once committed
		}
	}
	if f.stage > stageRouted && f.err != nil && !errors.Is(err, context.Canceled) {
		// Made a dead letter unsent (deadLetterUnsent, which set err): counted as
		// rerouted when the broker answers it, taken (once committed: an aborted
		// transaction's is made again when replayed) or refused for good (now: it then
		// moves on from the dead-letter stage, rememberRejected, and is not made
		// unsent again), as a refused record is counted once it moves; not when a
		// cancelled routing drops it, nor when a transient refusal has it made again.
		switch {
		case err == nil:
			c.txn.rerouted[f.stage].Add(1)
		case rejected(err):
			c.m.countRerouted(int(f.stage))
		}
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
	reread := false
	defer func() {
		if reread {
			c.rereadTopicsSoon()
		}
	}()
	for _, f := range fs {
		if !rejected(f.err) || f.stage >= stageUndeliverable {
			transient = true
			continue
		}
		key := rerouteKey{f.in.Partition, f.in.Offset}
		prev, had := c.reroutes[key]
		stage, moved := f.advance()
		r := reroute{stage: stage, isolate: f.isolate, topic: f.out.Topic, err: f.err, before: refusedBefore(f.in, &f.out)}
		if errors.As(f.err, new(*compactedRefusal)) {
			// Refused unsent (refuseKnown): nothing came back of a batch to tell the
			// record apart from, so its dead letter need not be produced alone.
			r.isolate = false
		}
		if !moved && had {
			// Same stage: its dead letter keeps naming the rejection that led to it.
			r.topic, r.err, r.before = prev.topic, prev.err, prev.before
		}
		switch {
		case stage < stageUndeliverable:
			if moved {
				c.m.countRerouted(stage)
				c.logRerouted(f.out.Topic, f.err)
			} else if c.refusedKeyless(f.out.Topic, f.err) && c.knownRefusal(f.out.Topic) == nil {
				// Refused in its batch, maybe by a topic made compacted: its settings
				// read now, as logRerouted does at the first record refused alone. The
				// next transaction produces every such record alone, in turn, before
				// any is rerouted; found compacted meanwhile, the rest go to dead letter
				// unsent (deadLetterUnsent), not one round trip each. Once an aborted
				// transaction.
				reread = true
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

// ownedIDs returns the partitions this consumer owns, read under partsMu before a caller
// takes a lock of its own (txnState.committed takes countedMu).
func (c *Consumer) ownedIDs() map[int32]bool {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	ids := make(map[int32]bool, len(c.parts))
	for id := range c.parts {
		ids[id] = true
	}
	return ids
}

// ownsNothing reports whether this consumer owns no partition.
func (c *Consumer) ownsNothing() bool {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	return len(c.parts) == 0
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
		if p := c.parts[id]; p != nil {
			c.m.committed.WithLabelValues(itoa(id)).Set(float64(off.Offset))
			p.doneAt.Store(off.Offset + 1)
			// The lag from what is now committed, not from the last poll's measure,
			// which counted this transaction's records still.
			if hwm, next := p.hwm.Load(), p.next.Load(); hwm >= 0 {
				c.m.setLag(id, hwm, min(next, off.Offset))
			}
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
