package consume

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagStale is how long a partition's lag may go unmeasured by polls before refreshLag
// measures it: two watch intervals (10 s by default), so a partition polled at all is
// left to its polls.
func (c *Consumer) lagStale() time.Duration { return 2 * c.cfg.WatchInterval }

// refreshLag measures again the lag of the owned partitions whose polls have not for
// lagStale: the gate polls nothing while records await a retry or rows of outcomes
// fail, nor a stopped partition, and their lag measured from polls alone stood still
// while the input grew, an outage's backlog showing as none (the chart's
// GateConsumerLagGrowing never fired). The input's end is listed (with exactly-once,
// its last stable offset too, as the fetches give it) and the lag measured from where
// it was last (partition.next). A partition no poll has measured lagStale after its
// assignment (assigned while polling was held, as when a peer left during an output
// outage, or without a record since) is measured from the group's committed offset at
// every check until a poll measures it (setLagRefreshed), else, starting at the
// earliest, from the partition's first offset; starting at the latest with nothing
// committed, it is left to its first poll (where it starts is not known). A listing
// that fails for some partitions (a broker not answering) measures the others; with
// exactly-once, a partition without its last stable offset has its metric measured and
// the watchdog's lag left as it was. What fails is tried again at the next check.
func (c *Consumer) refreshLag(ctx context.Context, cl *kgo.Client) {
	type staleLag struct {
		p  *partition
		at int64 // its lagAt when found stale: 0, measured by no poll yet
	}
	var stale []staleLag
	staleAfter := c.lagStale()
	unmeasured := 0 // of stale, the partitions measured by no poll yet
	for _, p := range c.snapshot(nil) {
		if p.gone.Load() {
			continue
		}
		if at := p.lagAt.Load(); at != 0 && c.mono.since(at) >= staleAfter {
			stale = append(stale, staleLag{p, at})
		} else if at == 0 && p.assignedAt != 0 && c.mono.since(p.assignedAt) >= staleAfter {
			stale = append(stale, staleLag{p, 0})
			unmeasured++
		}
	}
	if len(stale) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	// A listing some brokers did not answer (*kadm.ShardErrors) still holds the others'
	// partitions: with one broker down, the rest are measured.
	partial := func(err error) bool {
		var se *kadm.ShardErrors
		return err == nil || errors.As(err, &se)
	}
	ends, err := adm.ListEndOffsets(lctx, c.cfg.InputTopic)
	if !partial(err) {
		c.log.Debug("kafka: could not list the input's ends to measure the lag of partitions not polled", "err", err)
		return
	}
	// The last stable offsets: the input is read read_committed in both delivery modes.
	stable, err := adm.ListCommittedOffsets(lctx, c.cfg.InputTopic)
	if !partial(err) {
		stable = nil // the watchdog's lags are left as they are (below)
	}
	var committed kadm.OffsetResponses
	var starts kadm.ListedOffsets
	if unmeasured > 0 {
		// Where the partitions measured by no poll start: their group's commits.
		if committed, err = adm.FetchOffsets(lctx, c.cfg.GroupID); err != nil {
			c.log.Debug("kafka: could not fetch the group's offsets to measure the lag of partitions not polled since their assignment", "err", err)
			committed = nil
		}
		if c.cfg.StartOffset == StartEarliest {
			if starts, err = adm.ListStartOffsets(lctx, c.cfg.InputTopic); !partial(err) {
				starts = nil
			}
		}
	}
	// Records an idle gate has not polled yet are work from now: the stall clock starts
	// here, as it does at an idle gate's first poll, not at the progress before it idled
	// (which made the idle time a stall at once: not ready, not live). It starts before
	// the first lag is set, which makes the gate one with work: started after, a Stalled
	// read in between (a probe, the stall metric) counted the idle time, and a gate idle
	// past GATE_STALL_RESTART failed /healthz and logged that it should be restarted. On a
	// gate that stays idle (no lag found) it is no stall either: Stalled reads 0 without
	// work.
	if !c.hasWork() {
		c.progressed()
	}
	for _, sl := range stale {
		p := sl.p
		end, ok := ends.Lookup(c.cfg.InputTopic, p.id)
		if !ok || end.Err != nil {
			continue
		}
		var start int64
		if sl.at == 0 {
			if start, ok = c.startOf(p.id, committed, starts); !ok {
				continue
			}
		}
		// Without its last stable offset the watchdog's lag is left as it was (-1): from
		// the end, an open upstream transaction's records counted as work.
		st := int64(-1)
		if s, ok := stable.Lookup(c.cfg.InputTopic, p.id); ok && s.Err == nil {
			st = min(end.Offset, s.Offset)
		}
		c.setLagRefreshed(p, sl.at, end.Offset, st, start)
	}
	if c.lagRefreshed != nil {
		c.lagRefreshed()
	}
}

// startOf is where partition id of the input is read from by a member assigned it that
// has not polled it yet: the group's committed offset, else (nothing committed) the
// partition's first offset when the gate starts at the earliest. ok is false when
// neither is known (a listing failed, or the gate starts at the latest).
func (c *Consumer) startOf(id int32, committed kadm.OffsetResponses, starts kadm.ListedOffsets) (int64, bool) {
	if o, ok := committed.Lookup(c.cfg.InputTopic, id); ok && o.Err == nil && o.At >= 0 {
		return o.At, true
	} else if committed == nil || ok && o.Err != nil {
		return 0, false // not known whether anything is committed
	}
	if s, ok := starts.Lookup(c.cfg.InputTopic, id); ok && s.Err == nil {
		return s.Offset, true
	}
	return 0, false
}

// setLagRefreshed sets p's lag as refreshLag measured it from the input's end (hwm, and
// stable as setLag's), p's lagAt having read at: not if a poll has measured p since (its
// lagAt moved), whose measure is the newer. A partition measured by polls is measured
// from where they left it (partition.next), and its lagAt moves on. One no poll has
// measured (at 0) is measured from start, the group's committed offset, and keeps
// neither: it is measured from the committed offset again at the next refresh, as an
// open transaction's commit may yet move it (the offsets are fetched without waiting
// for one), and a poll's measure takes over from the first.
func (c *Consumer) setLagRefreshed(p *partition, at, hwm, stable, start int64) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	if p.lagAt.Load() != at {
		return
	}
	if at == 0 {
		c.setLagLocked(p, hwm, stable, start, false)
	} else {
		c.setLagLocked(p, hwm, stable, p.next.Load(), true)
	}
}

// stableEnd is where the records of ftp the gate can poll end: reading read_committed
// (both delivery modes), the last stable offset, else the high watermark. The
// records of a transaction an upstream producer keeps open are not lag the gate can
// route: it waits for their transaction to end, and that wait is no stall (watchdog.go).
func (c *Consumer) stableEnd(ftp kgo.FetchTopicPartition) int64 {
	if ftp.LastStableOffset >= 0 {
		return min(ftp.HighWatermark, ftp.LastStableOffset)
	}
	return ftp.HighWatermark
}

// setLag sets the lag of p unless it was revoked or lost meanwhile, which would leave
// a series for a partition this gate no longer owns: the metric from hwm, the
// watchdog's from stable (see stableEnd).
func (c *Consumer) setLag(p *partition, hwm, stable, next int64) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	c.setLagLocked(p, hwm, stable, next, true)
}

// setLagLocked is setLag with partsMu held; keep false leaves p's next and lagAt as they
// are (a measure from the committed offset of a partition no poll has measured:
// setLagRefreshed).
func (c *Consumer) setLagLocked(p *partition, hwm, stable, next int64, keep bool) {
	if p.gone.Load() {
		return
	}
	from := next
	if d := p.doneAt.Load(); d > 0 && next >= 0 {
		from = min(from, d-1) // exactly once: from what is committed (partition.doneAt)
	}
	c.m.setLag(p.id, hwm, from)
	if next >= 0 && stable >= 0 {
		p.lag.Store(max(stable-next, 0))
	}
	if keep && next >= 0 && hwm >= 0 {
		p.next.Store(next)
		p.hwm.Store(hwm)
		p.lagAt.Store(c.mono.now())
	}
}
