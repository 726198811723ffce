package consume

import (
	"fmt"
	"time"

	"github.com/capturegate/gate/internal/durtext"
)

// The progress watchdog: a gate that makes no progress while it has work is stuck,
// whatever the cause (a broker that stopped answering, a poll held behind a join, a
// client wedged), and readiness and liveness must say so; a gate with nothing to do is
// merely idle and must not be restarted.
//
// Progress is, at least once, a poll returning records or a commit the broker accepted;
// exactly once, a transaction committed. A poll's records count only once their
// transaction commits: an aborted transaction's are polled again, and a gate whose every
// transaction aborts (a produce failing each time) is stuck, not progressing. But the
// first poll returning records after an idle wait (nothing to do, the last transaction
// committed, or no partition owned since an abort) counts, exactly once too: the time
// spent idle is no stall (see txnLoop).
// Work is lag on an owned partition (an aborted transaction's records, to be polled
// again, are lag: see rewindTxnStarts), or records handed to the producer and not yet
// acknowledged, or awaiting a retry, or a transaction being ended, or offsets to commit
// while fetching is held for want of a successful commit (commithold.go): the fetches
// paused, the lag is measured from the input's end only every 10 s (refreshLag), and
// reads 0 on a gate that had caught up until then, however many records wait.

// Defaults for Config.StallNotReady and Config.StallRestart.
const (
	// DefaultStallNotReady is above the group's default rebalance timeout (60 s), the
	// longest a healthy poll or transaction end can wait behind a rebalance.
	DefaultStallNotReady = 2 * time.Minute
	// DefaultStallRestart leaves an operator time to see the gate not ready, and a
	// broker time to come back, before Kubernetes restarts the pod.
	DefaultStallRestart = 10 * time.Minute
)

// progressed notes progress now, on the monotonic clock (mono.go).
func (c *Consumer) progressed() { c.progressAt.Store(c.mono.now()) }

// hasWork reports whether the gate has records to route or to see acknowledged.
func (c *Consumer) hasWork() bool {
	if c.outstanding.Load() > 0 || c.retry.pending.Load() > 0 || c.txn.ending.Load() || c.fetchHeld() {
		return true
	}
	if c.producerBuffered() > 0 {
		return true
	}
	for _, p := range c.snapshot(nil) {
		if p.lag.Load() > 0 && !p.stopped.Load() {
			return true
		}
	}
	return false
}

// Stalled returns how long the gate has had work and made no progress (0 when it
// progresses or is idle).
func (c *Consumer) Stalled() time.Duration {
	at := c.progressAt.Load()
	if at == 0 || !c.hasWork() {
		return 0
	}
	return max(c.mono.since(at), 0)
}

// stallProblem is NotReady's line about a stall past Config.StallNotReady, or "".
func (c *Consumer) stallProblem() string {
	if c.cfg.StallNotReady <= 0 {
		return ""
	}
	if d := c.Stalled(); d >= c.cfg.StallNotReady {
		if !c.stallLogged.Swap(true) {
			c.log.Error("kafka: no progress while records wait (no poll, commit or committed transaction); not ready until the gate progresses",
				"stalled", d.Round(time.Second).String(), "stall_not_ready", c.cfg.StallNotReady.String(), "stall_restart", c.cfg.StallRestart.String())
		}
		why := "the broker or the group is holding the gate"
		if c.fetchHeld() {
			why = "no offset commit succeeds, and fetching the input is held until one does (gate_fetch_held_by_commits)"
		}
		return fmt.Sprintf("kafka: no progress for %s while records wait (no poll, commit or committed transaction): %s", durtext.String(d.Round(time.Second)), why)
	}
	if c.stallLogged.Swap(false) {
		c.log.Info("kafka: progressing again; the stall is over")
	}
	return ""
}

// Live returns an error when the gate has made no progress for Config.StallRestart
// while it had work: stuck for good, and a restart is the cure (/healthz fails). The
// first failure of a stall is logged at error level: the restart that follows leaves the
// log the one place to say why, and with StallNotReady off nothing else logs the stall.
func (c *Consumer) Live() error {
	if c.cfg.StallRestart <= 0 {
		return nil
	}
	if d := c.Stalled(); d >= c.cfg.StallRestart {
		if !c.deadLogged.Swap(true) {
			c.log.Error("kafka: no progress past GATE_STALL_RESTART while records wait (no poll, commit or committed transaction); /healthz fails so that the gate is restarted",
				"stalled", d.Round(time.Second).String(), "stall_restart", c.cfg.StallRestart.String())
		}
		return fmt.Errorf("kafka: no progress for %s while records wait (GATE_STALL_RESTART is %s)", durtext.String(d.Round(time.Second)), durtext.String(c.cfg.StallRestart))
	}
	c.deadLogged.Store(false)
	return nil
}
