// Partitions assigned, revoked and lost. An assignment creates a partition's state. At
// least once, a revoke seals the outcome rows, waits within Config.RevokeTimeout for
// the partitions' records in flight and those rows, commits what is acknowledged and
// drops the rest for the next owner to route; exactly once, it interrupts the open
// transaction (txnrevoke.go). A loss drops the state without committing: the group has
// moved on, and a commit would overwrite the new owner's.

package consume

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
	// A cooperative rebalance calls this on every member, most given nothing new: said at
	// debug, not as an assignment of null partitions, twice a rebalance at info.
	lvl := slog.LevelInfo
	if len(ids) == 0 {
		lvl, ids = slog.LevelDebug, []int32{}
	}
	c.log.Log(ctx, lvl, "partitions assigned", "topic", c.cfg.InputTopic, "partitions", ids, "owned", owned)
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
		"committed", loggedOffsets(committed), "abandoned_records", left, "outcome_rows_unwritten", unwritten, "commit_err", err,
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
		r, _ := p.inFlight(false)
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
			// A stopped partition's records given up (the undeliverable record that
			// stopped it, retries dropped) are never acknowledged; those still with the
			// client, routed before it stopped (a data-loss stop), and its seals' outcome
			// rows are awaited as any partition's, so that the commit after the wait
			// covers them. Skipped, they were abandoned unsaid (the rows: the commit held
			// at their seal) and written again by the partition's next owner.
			r, w := p.inFlight(p.stopped.Load())
			n, rows = n+r, rows || w
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
	cl := c.producer()
	go func() { _ = cl.Flush(ctx) }()
}
