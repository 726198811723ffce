package consume

import (
	"context"
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
// A failed listing is tried again at the next check.
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
	ends, err := adm.ListEndOffsets(lctx, c.cfg.InputTopic)
	var stable kadm.ListedOffsets
	if err == nil && c.exactlyOnce() {
		stable, err = adm.ListCommittedOffsets(lctx, c.cfg.InputTopic)
	}
	if err != nil {
		c.log.Debug("kafka: could not list the input's ends to measure the lag of partitions not polled", "err", err)
		return
	}
	for _, p := range stale {
		end, ok := ends.Lookup(c.cfg.InputTopic, p.id)
		if !ok || end.Err != nil {
			continue
		}
		st := end.Offset
		if s, ok := stable.Lookup(c.cfg.InputTopic, p.id); ok && s.Err == nil {
			st = min(st, s.Offset)
		}
		c.setLag(p, end.Offset, st, p.next.Load())
	}
}
