// Offset commits, at least once: every Config.CommitInterval (none queued behind one
// unanswered), and at a revoke and at the shutdown, each owned partition is committed up
// to the offset before which every record is acknowledged (track.go), so that a restart
// replays at most what was in flight. A failed interval commit is logged at most every
// commitLogEvery, and the next interval commits what is acknowledged by then.

package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
	if c.inputDoubt.Load() {
		if len(c.snapshot(ids)) == 0 {
			return nil, nil // nothing owned (the input gone, its partitions dropped): nothing withheld
		}
		return nil, errInputDoubt
	}
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

// loggedOffsets is offsets, what a commit moved, for a log line: none is an empty object,
// which reads as nothing moved, where a nil map is logged as null, which read as a fault
// (the revoke of leaving the group, whose commit usually has nothing left to move).
func loggedOffsets(offsets map[int32]int64) map[int32]int64 {
	if offsets == nil {
		return map[int32]int64{}
	}
	return offsets
}
