package consume

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records that vanish before the gate reads them. The gate loses nothing it has read,
// but a record can be gone from its input partition before the gate gets to it:
//
//   - retention deletes the segments below a lagging gate's position, or below the
//     committed offset of a group that was away longer than the retention;
//   - a broker loses records it had acknowledged: a log truncated after an unclean
//     leader election, a lost disk. The gate had read some of them; what producers
//     wrote there after, it has not.
//
// The broker answers a fetch below its log start or past its log end with
// OFFSET_OUT_OF_RANGE. The client is built with ConsumeResetOffset(NoResetOffset()),
// so franz-go does not resume somewhere by itself: the partition's fetch returns the
// error, and fetches again at the same offset, until the gate moves it (SetOffsets).
// On each such error (outOfRange) the gate finds where it stood, the partition's log
// start and end (ListOffsets) and, when its position is within the log or past its
// end, where the leader epoch of the last record it read ended (OffsetForLeaderEpoch),
// and judges (judgeOutOfRange):
//
//   - below the log start: the records in between were deleted by retention
//     (cause "retention"); the gate resumes at the log start;
//   - the epoch ended below its position: the broker lost the records from there
//     (cause "broker"), which the gate read (and routed) but which the partition no
//     longer holds as they were; the gate resumes there, reading what the log now
//     holds at those offsets;
//   - past the log end with no epoch to ask about (or the broker knows nothing of it):
//     the broker lost at least the records from its log end (cause "broker"), and
//     where the log diverged cannot be located: records below the log end may have
//     been replaced too, and are not re-read; the gate resumes at the log end;
//   - otherwise (within the log, the epoch going on past it: a new leader's high
//     watermark that has not caught up yet) nothing is lost and the fetch is retried.
//
// franz-go itself reports a broker's loss it located while validating a leader epoch
// (a fenced fetch after a leader change, a committed offset whose epoch the leader
// ended sooner) as a *kgo.ErrDataLoss, having already resumed where the log diverged
// (brokerLost); the gate treats it as the second case.
//
// Either way the gate logs one error line naming the topic, the partition, the cause,
// the offsets [from, to) and their count, adds the count to
// gate_records_lost_total{topic,partition,cause}, and then follows
// Config.OnDataLoss: DataLossContinue resumes as above, and commits the offset it
// resumes at, so that a restart does not meet (and count) the same gap again;
// DataLossStop stops the partition at its position (paused, nothing committed past
// it, the consumer not ready, saying what to do) until the partition is revoked.
//
// A partition the group has no committed offset for and the gate has read nothing of
// loses nothing (its start offset, earliest or latest, is wherever the log starts or
// ends). franz-go cannot be moved there (SetOffsets only moves a partition it has
// read from or has a committed offset for), so the gate commits that start offset and
// stops the partition: it resumes there once the gate restarts or the partition moves.
// It only happens when retention deletes between the client's lookup of a start
// offset and its first fetch.

// DataLoss is what the gate does on finding that records of its input partition are
// gone before it read them.
type DataLoss int

const (
	// DataLossContinue (the default) counts and logs the records lost and goes on
	// after them.
	DataLossContinue DataLoss = iota
	// DataLossStop counts and logs them and stops the partition there: nothing more of
	// it is routed or committed and the consumer is not ready, naming the partition,
	// until an operator accepts the loss (moves the group's offset past the gap, or
	// sets DataLossContinue) and restarts the gate. For pipelines where a gap must
	// stop the line.
	DataLossStop
)

// ParseDataLoss reads a DataLoss from its name: "continue" or "stop".
func ParseDataLoss(s string) (DataLoss, error) {
	switch s {
	case "continue":
		return DataLossContinue, nil
	case "stop":
		return DataLossStop, nil
	}
	return DataLossContinue, fmt.Errorf("%q: want continue or stop", s)
}

// String returns the name ParseDataLoss reads.
func (d DataLoss) String() string {
	switch d {
	case DataLossContinue:
		return "continue"
	case DataLossStop:
		return "stop"
	}
	return "DataLoss(" + strconv.Itoa(int(d)) + ")"
}

// The causes of lost records, the cause label of gate_records_lost_total.
const (
	lossRetention = "retention"
	lossBroker    = "broker"
)

// lossLookupTimeout bounds the broker requests made on an out-of-range fetch. In
// at-least-once mode rebalances wait for them, as for a poll's routing; a shutdown
// does not (outOfRange).
const lossLookupTimeout = 10 * time.Second

// gap is records of an input partition the gate will not read.
type gap struct {
	cause    string
	pos      int64           // where the gate stood
	from, to int64           // the offsets lost, [from, to)
	resume   kgo.EpochOffset // where the partition goes on
	// unlocated is a broker loss whose start could not be located: records below
	// from may have been replaced too.
	unlocated bool
}

func (g gap) count() int64 { return max(g.to-g.from, 0) }

func (g gap) offsets() string { return fmt.Sprintf("[%d, %d)", g.from, g.to) }

// judgeOutOfRange decides what a fetch at pos answered OFFSET_OUT_OF_RANGE means (see
// the top of this file): start and end are the partition's log start and end, and
// epochEnd where the leader epoch of the last record read at pos ended (Offset -1 when
// unknown). ok is false when nothing is lost: the fetch is to be retried at pos.
func judgeOutOfRange(pos, start, end, epochEnd kgo.EpochOffset) (g gap, ok bool) {
	switch {
	case pos.Offset < start.Offset:
		return gap{cause: lossRetention, pos: pos.Offset, from: pos.Offset, to: start.Offset, resume: start}, true
	case epochEnd.Offset >= 0 && epochEnd.Offset < pos.Offset:
		resume := epochEnd
		if resume.Offset < start.Offset {
			resume = start
		}
		return gap{cause: lossBroker, pos: pos.Offset, from: epochEnd.Offset, to: pos.Offset, resume: resume}, true
	case epochEnd.Offset < 0 && pos.Offset > end.Offset:
		return gap{cause: lossBroker, pos: pos.Offset, from: end.Offset, to: pos.Offset, resume: end, unlocated: true}, true
	}
	return gap{}, false
}

// dataLoss handles a fetch error of the input topic that says records are gone (an
// out-of-range fetch, franz-go's ErrDataLoss) and reports whether it was one.
func (c *Consumer) dataLoss(fetches kgo.Fetches, topic string, id int32, err error) bool {
	if topic != c.cfg.InputTopic {
		return false
	}
	if dl, ok := errors.AsType[*kgo.ErrDataLoss](err); ok {
		c.brokerLost(fetches, dl)
		return true
	}
	if errors.Is(err, kerr.OffsetOutOfRange) {
		c.outOfRange(id)
		return true
	}
	return false
}

// outOfRange handles a fetch of partition id answered OFFSET_OUT_OF_RANGE.
func (c *Consumer) outOfRange(id int32) {
	p := c.owned(id)
	if p == nil || p.stopped.Load() {
		return // revoked since, or stopped: fetched before it was paused
	}
	// Under Run's context (at least once; exactly once it never ends): a lookup the
	// broker holds must not hold the shutdown past its bound (the package doc) for
	// lossLookupTimeout, and one cut short by it is made again by the partition's next
	// owner, which meets the gap as this gate did.
	ctx, cancel := context.WithTimeout(c.runCtx, lossLookupTimeout)
	defer cancel()
	warn := func(what string, err error) {
		if c.runCtx.Err() != nil {
			return // shutting down: no next poll here, and no broker's fault
		}
		c.log.Warn("fetch out of range; "+what+" failed, tried again at the next poll",
			"topic", c.cfg.InputTopic, "partition", id, "err", err)
	}
	pos, read, err := c.position(ctx, p)
	if err != nil {
		warn("looking up the group's committed offset", err)
		return
	}
	start, err := c.listOffset(ctx, id, -2)
	if err != nil {
		warn("looking up the partition's log start", err)
		return
	}
	end, err := c.listOffset(ctx, id, -1)
	if err != nil {
		warn("looking up the partition's log end", err)
		return
	}
	if !read {
		c.restart(ctx, p, start, end)
		return
	}
	epochEnd := kgo.EpochOffset{Epoch: -1, Offset: -1}
	if pos.Offset >= start.Offset && pos.Epoch >= 0 {
		if epochEnd, err = c.epochEnd(ctx, id, pos.Epoch); err != nil {
			warn("asking where leader epoch "+strconv.Itoa(int(pos.Epoch))+" ended", err)
			return
		}
	}
	g, lost := judgeOutOfRange(pos, start, end, epochEnd)
	if !lost {
		c.log.Warn("fetch out of range at an offset within the partition's log, whose leader epoch goes on past it: nothing lost, fetched again",
			"topic", c.cfg.InputTopic, "partition", id, "offset", pos.Offset, "log_start", start.Offset, "log_end", end.Offset)
		return
	}
	c.applyGap(ctx, p, g, true, end.Offset)
}

// brokerLost handles franz-go's report that the broker lost records the gate had
// read; the client already resumes at dl.ResetTo.
func (c *Consumer) brokerLost(fetches kgo.Fetches, dl *kgo.ErrDataLoss) {
	p := c.owned(dl.Partition)
	if p == nil || p.stopped.Load() {
		return
	}
	g := gap{cause: lossBroker, pos: dl.ConsumedTo, from: dl.ResetTo, to: dl.ConsumedTo,
		resume: kgo.EpochOffset{Epoch: dl.ResetToEpoch, Offset: dl.ResetTo}, unlocated: dl.ResetTo == dl.ConsumedTo}
	ctx, cancel := context.WithTimeout(context.Background(), lossLookupTimeout)
	defer cancel()
	// The client's own record of the partition's position moves with the records
	// polled: when this poll holds some of the partition's (read after the reset),
	// it is already right, else it is still dl.ConsumedTo.
	c.applyGap(ctx, p, g, !polled(fetches, c.cfg.InputTopic, dl.Partition), -1)
}

// polled reports whether fetches hold records of the partition.
func polled(fetches kgo.Fetches, topic string, id int32) bool {
	found := false
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		found = found || ftp.Topic == topic && ftp.Partition == id && len(ftp.Records) > 0
	})
	return found
}

// applyGap counts and reports g, a gap in partition p, and resumes after it or stops
// there (Config.OnDataLoss). move says whether the client is to be moved to the
// gap's resume offset; end is the partition's log end, -1 when unknown.
func (c *Consumer) applyGap(ctx context.Context, p *partition, g gap, move bool, end int64) {
	if c.txn.filling && c.txn.routed[p.id] {
		c.gapInTxn(p, g)
		return
	}
	attrs := c.countGap(p, g)
	var what string
	switch {
	case g.cause == lossRetention:
		what = "deleted by the topic's retention before the gate read them"
	case g.unlocated:
		what = "lost by the broker (its log truncated: an unclean leader election, a lost disk) at or past where the gate had reached; " +
			"where the log diverged is unknown, so records below may have been replaced too, and are not read again"
	default:
		what = "lost by the broker (its log truncated: an unclean leader election, a lost disk) after the gate read them; " +
			"the partition holds other records at those offsets now, or none yet, and the gate reads them"
	}
	if c.cfg.OnDataLoss == DataLossStop {
		c.stopAtGap(p, g, what, attrs)
		return
	}
	err := c.goOnAt(ctx, p, g.resume, move, g.cause == lossBroker)
	// The lag is measured from the resume offset now: the last poll's, from below the
	// gap, would stay while nothing past the gap is polled (a gap up to the log end),
	// and an idle gate would count as stalled (watchdog.go).
	c.setLag(p, end, end, g.resume.Offset)
	c.log.Error("input records lost: "+what+"; the partition goes on at resumed_at (GATE_ON_DATA_LOSS=continue)",
		append(attrs, "resumed_at", g.resume.Offset, "commit_err", err)...)
}

// countGap counts g's records in gate_records_lost_total and returns the attributes its
// log lines carry.
func (c *Consumer) countGap(p *partition, g gap) []any {
	if n := g.count(); n > 0 {
		c.m.lost.WithLabelValues(c.cfg.InputTopic, itoa(p.id), g.cause).Add(float64(n))
	}
	return []any{"topic", c.cfg.InputTopic, "partition", p.id, "cause", g.cause, "offsets", g.offsets(), "lost_records", g.count()}
}

// goOnAt makes p go on at resume past a gap, moving the client there when move (franz-go
// has not already), and commits it (commitGap). diverged says the broker's log diverged
// at resume (a broker's loss): the records from there on are others than those counted.
// A retention gap deletes the records below resume and leaves those from it on as they
// were: counted, and given their decisions, once.
func (c *Consumer) goOnAt(ctx context.Context, p *partition, resume kgo.EpochOffset, move, diverged bool) error {
	if move {
		// Epoch -1: set the position as it is, without franz-go validating it again.
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: {p.id: {Epoch: -1, Offset: resume.Offset}}})
	}
	p.movedTo, p.hasMoved = kgo.EpochOffset{Epoch: -1, Offset: resume.Offset}, true
	if diverged {
		// The records from resume on are the broker's new log's, not the ones counted.
		c.txn.uncountFrom(p.id, resume.Offset)
	}
	return c.commitGap(ctx, p, resume)
}

// gapInTxn handles g, met in partition p while a transaction holds records of it (fillTxn):
// the transaction aborts, and the session rewinds every partition to its last commit,
// where the gap is met again with nothing in flight and handled as ever. Handled here,
// its commit and the client's move would pass records routed only in the aborted
// transaction (lost, never reported), or keep the transaction's own offset commit from
// covering what it produced (duplicates). Records a broker lost are counted and reported
// now, though: read from the last commit again, the partition goes on in the broker's
// new log, and nothing would say that what the gate had read past its divergence is
// gone. With GATE_ON_DATA_LOSS=stop the partition stops at its last commit.
func (c *Consumer) gapInTxn(p *partition, g gap) {
	c.txn.gapMet = true
	c.txn.skipped.Store(true)
	if g.cause != lossBroker {
		return // retention: met from the last commit, counted from there
	}
	// The records from the divergence on are the new log's, read again from the last
	// commit after the abort: not the ones counted, nor given the decisions kept
	// (route.Decisions). resumeTxnGaps calls goOnAt, which says so too, only for a
	// divergence below the commit.
	c.txn.uncountFrom(p.id, g.resume.Offset)
	if st, ok := c.txn.from[p.id]; ok && g.unlocated {
		// Where the log diverged is unknown: any record the transaction routed may be
		// another now. Judged afresh, as before decisions were kept; not counted again,
		// as they may be the same.
		c.txn.forgetDecisions(p.id, st.offset)
	}
	topic := c.cfg.InputTopic
	attrs := c.countGap(p, g)
	what := "lost by the broker (its log truncated: an unclean leader election, a lost disk) after the gate read them, in a transaction " +
		"still open: it is aborted, and the partition read again from its last commit"
	if g.unlocated {
		what += "; where the log diverged is unknown, so records below may have been replaced too, and those read again are judged afresh"
	}
	if c.cfg.OnDataLoss == DataLossStop {
		if c.halt(p, fmt.Sprintf("partition %s/%d stopped at its last committed offset: %d input records, offsets %s, %s (GATE_ON_DATA_LOSS=stop); "+
			"to go on without them, replay them from elsewhere if they are kept, then set GATE_ON_DATA_LOSS=continue and restart the gate",
			topic, p.id, g.count(), g.offsets(), what)) {
			c.log.Error("input records lost: "+what+"; partition stopped (GATE_ON_DATA_LOSS=stop), not ready until an operator acts", attrs...)
		}
		return
	}
	c.txn.gaps = append(c.txn.gaps, partGap{p, g})
	c.log.Error("input records lost: "+what+" (GATE_ON_DATA_LOSS=continue)", attrs...)
}

// partGap is a gap met in partition p.
type partGap struct {
	p *partition
	g gap
}

// resumeTxnGaps resumes each partition whose broker loss gapInTxn met at the gap's resume
// offset when that is below the commit the transaction's abort went back to: the log
// diverged below it, and the gate reads the new log from there, as applyGap does
// outside a transaction. Nothing is in flight: the transaction has ended. Only a
// partition owned throughout, its state the one the gap was met in: one revoked since
// (and maybe assigned again) may have had another owner, whose commit this one would
// pull back; it starts from the commit, and franz-go validates that against the leader
// epochs and finds the divergence itself. A partition kept through a rebalance
// (cooperative-sticky) is not: its commit is not fetched again, so nothing else would.
func (c *Consumer) resumeTxnGaps(ctx context.Context) {
	defer func() { c.txn.gaps = c.txn.gaps[:0] }()
	ctx, cancel := context.WithTimeout(ctx, lossLookupTimeout) // not through a rebalance
	defer cancel()
	committed := c.cl.CommittedOffsets()[c.cfg.InputTopic]
	for _, pg := range c.txn.gaps {
		p, g := pg.p, pg.g
		at, ok := committed[p.id]
		if p.gone.Load() || c.owned(p.id) != p || p.stopped.Load() || !ok || g.resume.Offset >= at.Offset {
			continue // revoked, stopped, or read again from the commit already
		}
		err := c.goOnAt(ctx, p, g.resume, true, true)
		c.log.Warn("the partition goes on where the broker's log diverged, below its last commit: the records there are the new leader's",
			"topic", c.cfg.InputTopic, "partition", p.id, "resumed_at", g.resume.Offset, "last_commit", at.Offset, "commit_err", err)
	}
}

// commitGap makes g.resume the partition's committed offset, so that the next owner
// (or this gate, restarted) does not meet the gap again. In at-least-once mode it
// goes through the partition's tracking, behind the records routed before the gap;
// in exactly-once mode the offset is committed at once, between transactions or in one
// that holds no records of the partition (gapInTxn takes the others): the transaction's
// own commit leaves the partition out, as the client takes the offset for committed
// once moved there, and its abort rewinds the partition to it.
func (c *Consumer) commitGap(ctx context.Context, p *partition, to kgo.EpochOffset) error {
	if !c.exactlyOnce() {
		p.resumeAt(to)
		return nil
	}
	if result := c.commitNow(ctx, p.id, to); result != nil {
		c.m.commitErrors.Inc()
		return fmt.Errorf("committing offset %d of partition %d after the lost records (the next owner meets them again): %w", to.Offset, p.id, result)
	}
	c.partsMu.Lock()
	if !p.gone.Load() {
		c.m.committed.WithLabelValues(itoa(p.id)).Set(float64(to.Offset))
	}
	c.partsMu.Unlock()
	return nil
}

// resumeAt makes off the next offset committed for the partition once everything
// routed before it is acknowledged: forward past a gap (a batch of no record), or
// back to where a broker's log diverged, below what was routed (what was routed
// from there on is no longer awaited: it is read again).
func (p *partition) resumeAt(off kgo.EpochOffset) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.acked.Offset
	if n := len(p.batches); n > 0 {
		last = p.batches[n-1].end
	}
	if off.Offset >= last {
		p.batches = append(p.batches, &batch{p: p, end: off.Offset, epoch: off.Epoch})
		return
	}
	// Back: the batches that end by off are still awaited as they are; the one that
	// straddles off is cut there (it still awaits all its records, which were
	// produced, so no commit passes one of them unacknowledged); the later ones are
	// read again and no longer awaited.
	keep := p.batches[:0]
	cut := false
	for _, b := range p.batches {
		if b.end <= off.Offset {
			keep = append(keep, b)
			continue
		}
		if !cut {
			b.end, b.epoch = off.Offset, off.Epoch
			keep = append(keep, b)
			cut = true
		}
	}
	clear(p.batches[len(keep):])
	p.batches = keep
	if !cut {
		p.batches = append(p.batches, &batch{p: p, end: off.Offset, epoch: off.Epoch})
	}
	if p.acked.Offset > off.Offset {
		p.acked = kgo.EpochOffset{Epoch: -1, Offset: -1}
	}
	// Below what was committed: commit it anyway, and ignore the answers to commits
	// sent before (a late one would put committed back above it).
	p.committed = -1
	p.gen++
	// The outcome rows of what is read again are counted again (as its records are
	// produced again): their hold starts at off, and the next seal covers no further
	// than what is routed from there.
	if st := p.out; st != nil {
		if st.from < 0 || off.Offset < st.from {
			st.from = off.Offset
			st.hold.Store(off.Offset)
		}
		st.to = min(st.to, off.Offset)
	}
}

// stopAtGap stops p at its gap g (DataLossStop): it is no longer fetched, nothing
// more of it is routed or committed, and the consumer is not ready until p is revoked.
func (c *Consumer) stopAtGap(p *partition, g gap, what string, attrs []any) {
	topic := c.cfg.InputTopic
	if !c.halt(p, fmt.Sprintf("partition %s/%d stopped at offset %d: %d input records, offsets %s, %s (GATE_ON_DATA_LOSS=stop); "+
		"to go on without them, replay them from elsewhere if they are kept, then set GATE_ON_DATA_LOSS=continue and restart the gate "+
		"(it resumes at offset %d, counting them again), or move the group's offset there with every gate stopped",
		topic, p.id, g.pos, g.count(), g.offsets(), what, g.resume.Offset)) {
		return
	}
	// Keep the client's position at the gate's, so that nothing read past the gap is
	// committed with a transaction.
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {p.id: {Epoch: -1, Offset: g.pos}}})
	c.log.Error("input records lost: "+what+"; partition stopped (GATE_ON_DATA_LOSS=stop), not ready until an operator acts",
		append(attrs, "stopped_at", g.pos, "resume_offset", g.resume.Offset)...)
}

// commitNow commits offset to for input partition id outside any transaction and
// waits for the answer: the request's error or the partition's own, whichever came.
func (c *Consumer) commitNow(ctx context.Context, id int32, to kgo.EpochOffset) error {
	return c.commitInput(ctx, c.cl, map[int32]kgo.EpochOffset{id: to})
}

// restart handles an out-of-range fetch of a partition the gate has read nothing of
// and its group has no committed offset for: nothing the group had reached is lost
// (see the top of this file). The client cannot be moved, so the start offset is
// committed and the partition stopped until it is assigned again. The commit comes
// before the not-ready reason, which tells the operator to restart: a restart the
// moment it is read must find the offset committed.
func (c *Consumer) restart(ctx context.Context, p *partition, start, end kgo.EpochOffset) {
	to := start
	if c.cfg.StartOffset == StartLatest {
		to = end
	}
	topic := c.cfg.InputTopic
	if !c.park(p) {
		return
	}
	cerr := c.commitNow(ctx, p.id, to)
	why := fmt.Sprintf("partition %s/%d stopped: records were deleted between the lookup of its start offset and its first fetch "+
		"(it has no committed offset, so nothing the group had reached is lost)", topic, p.id)
	if cerr == nil {
		why += fmt.Sprintf("; restart the gate, which resumes at offset %d", to.Offset)
	} else {
		why += fmt.Sprintf(", and committing offset %d failed (%v); restart the gate, which looks up the start offset again "+
			"(GATE_KAFKA_START_OFFSET)", to.Offset, cerr)
	}
	c.sayStopped(p, why)
	c.log.Error("fetch out of range before the gate read anything of the partition; partition stopped until the gate restarts",
		"topic", topic, "partition", p.id, "log_start", start.Offset, "log_end", end.Offset, "committed", to.Offset, "commit_err", cerr)
}

// position returns where the gate stands in partition id: past its committed offset
// when it read records since, or where the gate moved it back to (the client's
// position), else the group's committed offset, asked of the broker; with none there,
// the client's own committed offset (franz-go shows one only for a partition the group
// has committed). read is false when the group has no committed offset and the gate
// read nothing.
func (c *Consumer) position(ctx context.Context, p *partition) (pos kgo.EpochOffset, read bool, err error) {
	id := p.id
	if off, ok := c.cl.UncommittedOffsets()[c.cfg.InputTopic][id]; ok {
		return off, true, nil
	}

	offs, err := c.committedOffsets(ctx, []int32{id}, false)
	if err != nil {
		return pos, false, err
	}
	pos, read = offs[id]
	if !read {
		// Read, and moved back to where the gate began reading it (an aborted
		// transaction: rewindTxnStarts; routing cut by a rebalance: unroute) before the
		// group ever committed it: the client's committed offset is then its position
		// (it keeps one only for a partition it has read or found committed).
		pos, read = c.cl.CommittedOffsets()[c.cfg.InputTopic][id]
	}
	if p.hasMoved && (!read || p.movedTo.Offset > pos.Offset) {
		// Moved past a gap and nothing read since: the group's committed offset may
		// still be below that gap (its commit is asynchronous, or failing), and
		// counting from it would count the gap again.
		return p.movedTo, true, nil
	}
	return pos, read, nil
}

// committedOffsets returns the group's committed offsets of the input partitions ids,
// as the coordinator has them; a partition with none is absent. stable asks the
// coordinator to wait out a transaction's pending offsets (KIP-447: it answers
// UNSTABLE_OFFSET_COMMIT meanwhile). A partition's error is the call's.
func (c *Consumer) committedOffsets(ctx context.Context, ids []int32, stable bool) (map[int32]kgo.EpochOffset, error) {
	offs, errs, err := c.offsetFetch(ctx, c.cl, ids, stable)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		p := slices.Min(slices.Collect(maps.Keys(errs)))
		return nil, fmt.Errorf("partition %d: %w", p, errs[p])
	}
	return offs, nil
}

// offsetFetch asks the group coordinator, through cl, for the committed offsets of the
// input partitions ids (with RequireStable if stable): the offsets found, and each
// partition's own error apart. The request is filled in both its forms, the group's
// fields up to v7 and its Groups from v8 on, so that it reads the same whatever version
// the broker and the client agree on.
func (c *Consumer) offsetFetch(ctx context.Context, cl *kgo.Client, ids []int32, stable bool) (map[int32]kgo.EpochOffset, map[int32]error, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = stable
	req.Group = c.cfg.GroupID
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic, t.Partitions = c.cfg.InputTopic, ids
	req.Topics = []kmsg.OffsetFetchRequestTopic{t}
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = c.cfg.GroupID
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = c.cfg.InputTopic, ids
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{gt}
	req.Groups = []kmsg.OffsetFetchRequestGroup{g}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, nil, err
	}
	offs := make(map[int32]kgo.EpochOffset)
	errs := make(map[int32]error)
	add := func(topic string, p int32, off int64, epoch int32, code int16) {
		switch {
		case topic != c.cfg.InputTopic:
		case code != 0:
			errs[p] = kerr.ErrorForCode(code)
		case off >= 0:
			offs[p] = kgo.EpochOffset{Epoch: epoch, Offset: off}
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, nil, err
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
			}
		}
	}
	return offs, errs, nil
}

// listOffset returns the partition's log start (ts -2) or end (ts -1), with the
// leader epoch of the record there.
func (c *Consumer) listOffset(ctx context.Context, id int32, ts int64) (kgo.EpochOffset, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = c.cfg.InputTopic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = id, -1, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return kgo.EpochOffset{}, err
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if t.Topic == c.cfg.InputTopic && rp.Partition == id {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return kgo.EpochOffset{}, err
				}
				return kgo.EpochOffset{Epoch: rp.LeaderEpoch, Offset: rp.Offset}, nil
			}
		}
	}
	return kgo.EpochOffset{}, fmt.Errorf("no answer for partition %d", id)
}

// epochEnd asks the partition's leader where leader epoch ended in its log (KIP-320):
// the first offset past the epoch, Offset -1 when the leader knows nothing of it.
func (c *Consumer) epochEnd(ctx context.Context, id, epoch int32) (kgo.EpochOffset, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = c.cfg.InputTopic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = id, -1, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return kgo.EpochOffset{}, err
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if t.Topic == c.cfg.InputTopic && rp.Partition == id {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return kgo.EpochOffset{}, err
				}
				if rp.EndOffset < 0 {
					return kgo.EpochOffset{Epoch: -1, Offset: -1}, nil
				}
				return kgo.EpochOffset{Epoch: rp.LeaderEpoch, Offset: rp.EndOffset}, nil
			}
		}
	}
	return kgo.EpochOffset{}, fmt.Errorf("no answer for partition %d", id)
}
