package consume

import (
	"context"
	"sync"
	"time"

	"github.com/capturegate/gate/internal/durtext"
)

// The commit hold (at-least-once). The gate commits acknowledged offsets every
// CommitInterval, off the records' path, and goes on fetching and producing whatever
// the commits do. When they fail or hang, because the group coordinator died and the
// group has not found its successor yet, say, everything routed meanwhile stays
// uncommitted, and a rebalance then hands it to the partitions' next owner to route
// again: on three Apache Kafka brokers with the coordinator SIGKILLed, about 5 s of
// routing (16,500 records) was routed twice, where a gate's own crash replays about one
// CommitInterval. So once no commit has succeeded for CommitHoldAfter (2 ×
// CommitInterval, at least a second) while there was something to commit, the gate stops fetching new
// input (the input topic's fetches paused; the records in flight are still produced and
// acknowledged) and says so; the first commit that succeeds resumes it. A rebalance then
// replays at most what was fetched before the hold: about CommitHoldAfter +
// CommitInterval of traffic. The hold is judged by its own loop, not the commit loop: a
// commit the client holds in flight (retrying a coordinator that is gone) fails no
// callback and may hold the commit loop too. An attempt that finds nothing to commit
// for any partition owned (nothing acknowledged past the last commit; a revoke's
// partitions alone say nothing of the others') counts as a success: holding then would
// bound nothing, and would keep a newly assigned partition from ever producing the
// acknowledgement a commit needs.
//
// Only a commit sent while the gate held resumes it: one sent before the hold began and
// answered during it (the coordinator slow with it, while the later ones fail) covers
// none of what was routed between its send and the hold, and resuming on it would let
// the gate fetch on while every commit since fails.
// minCommitHoldAfter is the least CommitHoldAfter defaults to: a commit answered within
// it is a slow coordinator, not a dead one. Below a commit's round trip (GATE_COMMIT_INTERVAL
// 10 ms, commits answered in 25 ms) every commit held fetching until its answer, with a
// warning each time, though none failed.
const minCommitHoldAfter = time.Second

type commitHold struct {
	mu     sync.Mutex
	lastOK time.Time // the last commit that succeeded, or found nothing to commit
	held   bool
	since  time.Time // when held: when the hold began
}

// commitSucceeded notes a successful commit (or nothing to commit) sent at sent and
// answered at now, resuming fetching if it was held and the commit was sent since the
// hold began.
func (c *Consumer) commitSucceeded(sent, now time.Time) {
	h := &c.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastOK = now
	if !h.held || sent.Before(h.since) {
		return
	}
	h.held = false
	if cl := c.live.Load(); cl != nil {
		cl.ResumeFetchTopics(c.cfg.InputTopic)
	}
	c.m.commitHeld.Set(0)
	c.log.Info("kafka: offsets commit again; fetching the input resumes")
}

// fetchHeld reports whether fetching is held for want of a successful commit.
func (c *Consumer) fetchHeld() bool {
	c.hold.mu.Lock()
	defer c.hold.mu.Unlock()
	return c.hold.held
}

// holdLoop checks the hold every CommitInterval / 2 until ctx ends.
func (c *Consumer) holdLoop(ctx context.Context) {
	now := time.Now()
	c.commitSucceeded(now, now) // nothing was due before the start
	t := time.NewTicker(max(c.cfg.CommitInterval/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.checkCommitHold(now)
		}
	}
}

// checkCommitHold holds fetching at now if no commit has succeeded for CommitHoldAfter.
func (c *Consumer) checkCommitHold(now time.Time) {
	h := &c.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held || h.lastOK.IsZero() || now.Sub(h.lastOK) < c.cfg.CommitHoldAfter {
		return
	}
	cl := c.live.Load()
	if cl == nil {
		return
	}
	h.held, h.since = true, now
	cl.PauseFetchTopics(c.cfg.InputTopic)
	c.m.commitHeld.Set(1)
	c.log.Warn("kafka: no offset commit has succeeded for "+durtext.String(now.Sub(h.lastOK).Round(time.Millisecond))+
		"; fetching the input stops until one succeeds, so that a rebalance replays no more than was fetched before "+
		"(records in flight are still produced)", "input_topic", c.cfg.InputTopic, "hold_after", c.cfg.CommitHoldAfter.String())
}
