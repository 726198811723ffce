package consume

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagStale is how long a partition's lag may go unmeasured by polls before refreshLag
// measures it: two output checks, so a partition polled at all is left to its polls.
const lagStale = 2 * outputCheckEvery

// refreshLag measures again the lag of the owned partitions whose polls have not for
// lagStale: the gate polls nothing while records await a retry or rows of outcomes
// fail, nor a stopped partition, and their lag measured from polls alone stood still
// while the input grew, an outage's backlog showing as none (the chart's
// GateConsumerLagGrowing never fired). The input's end is listed (with exactly-once,
// its last stable offset too, as the fetches give it) and the lag measured from where
// it was last (partition.next). A partition never measured is left to its first poll.
// A listing that fails for some partitions (a broker not answering) measures the others;
// with exactly-once, a partition without its last stable offset has its metric measured
// and the watchdog's lag left as it was. What fails is tried again at the next check.
func (c *Consumer) refreshLag(ctx context.Context, cl *kgo.Client, now time.Time) {
	var stale []*partition
	for _, p := range c.snapshot(nil) {
		if at := p.lagAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= lagStale && !p.gone.Load() {
			stale = append(stale, p)
		}
	}
	if len(stale) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, outputCheckEvery)
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
	var stable kadm.ListedOffsets
	if c.exactlyOnce() {
		if stable, err = adm.ListCommittedOffsets(lctx, c.cfg.InputTopic); !partial(err) {
			stable = nil // the watchdog's lags are left as they are (below)
		}
	}
	// Records an idle gate has not polled yet are work from now: the stall clock starts
	// here, as it does at an idle gate's first poll, not at the progress before it idled
	// (which made the idle time a stall at once: not ready, not live).
	idle := !c.hasWork()
	for _, p := range stale {
		end, ok := ends.Lookup(c.cfg.InputTopic, p.id)
		if !ok || end.Err != nil {
			continue
		}
		st := end.Offset
		if c.exactlyOnce() {
			// Without its last stable offset the watchdog's lag is left as it was (-1):
			// from the end, an open upstream transaction's records counted as work.
			if s, ok := stable.Lookup(c.cfg.InputTopic, p.id); ok && s.Err == nil {
				st = min(st, s.Offset)
			} else {
				st = -1
			}
		}
		c.setLag(p, end.Offset, st, p.next.Load())
	}
	if idle && c.hasWork() {
		c.progressed()
	}
}
