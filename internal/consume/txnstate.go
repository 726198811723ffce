// The open transaction's state: where it began reading each partition, what it counted
// and which records it reroutes. Each field says who touches it: the loop's goroutine
// alone, the produce callbacks under txnState.mu, or a revoke through atomics. An abort
// rewinds each partition to the start kept here (rewindTxnStarts, transact.go).

package consume

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/route"
)

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
	inputGone   atomic.Bool // the input topic went (inputwatch.go): every transaction aborts
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
	// staleCommitted is set once the gate has moved its positions to the group's
	// commits after a commit the broker may have applied and answered with an error
	// (transact): franz-go's own record of what is committed, which every abort's
	// rewind goes back to, stays at the commit before, and an abort would rewind a
	// partition the aborted transaction held no records of below the group's commit,
	// its committed records routed again (a review: 10 of 20 routed twice). While set,
	// every abort is followed by a move to the group's commits (not when stopping). A new
	// session, which reads the group's commits, clears it. It is set too by an abort
	// franz-go made of a commit for a rebalance, which sent none: the gate cannot tell
	// the two apart, and the cost of the false alarm is an offset fetch per later abort.
	// The loop's goroutine only.
	staleCommitted bool
	// deadLettered and rerouted count the open transaction's dead letters the broker
	// took (gate_records_total's dead_letter/rejected), and of those the ones made
	// unsent (gate_records_rerouted_total, by stage: deadLetterUnsent): added to the
	// metrics when it commits (countCommitted), dropped when the next begins.
	deadLettered atomic.Int64
	rerouted     [stageUndeliverable + 1]atomic.Int64
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
	// afterPoll, when set (by tests), runs as a poll returns, before its records are
	// looked at: where a revoke can land between the poll and its transaction.
	afterPoll func(kgo.Fetches)
	// closedRetry is how long awaitClosedTopic waits before it builds a new client;
	// zero is closedTopicRetry (tests shorten it).
	closedRetry time.Duration
	// timeoutRetry is how long awaitTransactionTimeout waits before it builds a new
	// client; txnTimeoutRetry when zero (tests shorten it).
	timeoutRetry time.Duration

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
	// decisions holds, by input partition, the rules' decisions for the records the
	// limiter counted and the group has not committed (route.Decisions): routed again
	// after an abort, they go where they went. Under countedMu; a partition's is used by
	// the goroutine routing it, and emptied by the loop's goroutine between transactions
	// once they commit (committed).
	decisions map[int32]*route.Decisions
}

// decisionsOf returns partition p's decisions.
func (t *txnState) decisionsOf(p int32) *route.Decisions {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	d := t.decisions[p]
	if d == nil {
		if t.decisions == nil {
			t.decisions = make(map[int32]*route.Decisions)
		}
		d = new(route.Decisions)
		t.decisions[p] = d
	}
	return d
}

// committed forgets the decisions of the records a transaction committed, offs being
// the offsets it committed by partition: those records are never routed again. A
// partition it committed nothing of keeps its own, for an abort's replay to come, unless
// it holds none or is not among owned, the partitions the gate owns: its entry goes, made
// again at its next routing. A partition revoked while an aborted transaction held its
// records is its next owner's to route and commit: kept, its decisions stayed for the
// life of the process, were it never assigned here again.
func (t *txnState) committed(offs map[int32]kgo.EpochOffset, owned map[int32]bool) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	for p, d := range t.decisions {
		if o, ok := offs[p]; ok {
			d.DropBelow(o.Offset)
		} else if d.Len() == 0 || !owned[p] {
			delete(t.decisions, p)
		}
	}
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
	t.dropDecisionsFrom(p, off)
}

// forgetDecisions forgets partition p's decisions from off on, leaving what it counted:
// its records there are judged afresh when routed again, and not counted again.
func (t *txnState) forgetDecisions(p int32, off int64) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	t.dropDecisionsFrom(p, off)
}

// dropDecisionsFrom drops partition p's decisions from off on. Under countedMu.
func (t *txnState) dropDecisionsFrom(p int32, off int64) {
	if d := t.decisions[p]; d != nil {
		d.DropFrom(max(off, 0))
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
