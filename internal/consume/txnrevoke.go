// Exactly once, partitions taken from the gate: a revoke or a loss interrupts the open
// transaction (it aborts, and its records are the next owner's to route), a partition
// revoked without being told (KIP-848's heartbeat inside End) is found and dropped, and
// the loop is rearmed with an empty transaction so that the rewind to the committed
// offsets moves nothing.

package consume

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
// End, so the rewind to the committed offsets that comes with it moves nothing, unless
// franz-go's commits are behind the group's (staleCommitted): then, with resync (not
// when stopping: nothing is polled again), the kept partitions are moved to the group's
// commits again.
func (c *Consumer) rearm(ctx context.Context, resync bool) error {
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
	if resync && c.txn.staleCommitted && ctx.Err() == nil {
		if err := c.resyncOffsetsRetrying(ctx); err != nil {
			return fmt.Errorf("re-reading the committed offsets after an empty transaction's abort, franz-go's own behind the group's since a transaction the broker did not confirm: %w: %w", errResync, err)
		}
	}
	return nil
}
