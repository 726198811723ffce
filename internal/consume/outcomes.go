package consume

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/route"
)

// Outcome rows (Config.OutcomesTopic). Each owned partition has an outcome.Agg that the
// goroutine routing the partition's records fills (route.Scratch.Outcomes); a seal turns
// it into rows covering the input offsets routed since the last seal.
//
// Exactly-once: every transaction seals the partitions it routed before it ends, so a
// transaction's rows commit or abort with its records, and a read_committed reader's
// rows count exactly what it finds on the output topics.
//
// At-least-once: a partition's offsets are committed only up to its last seal
// (outcomeState.hold), and a seal's rows are a batch of the partition (track.go), so an
// offset is committed only once the rows counting the records before it are
// acknowledged. The poll loop seals every GATE_COMMIT_INTERVAL (and polls no longer
// than that, so an idle gate's last records get theirs), a revoke seals the partitions
// it takes, and shutdown seals them all. What can count twice is what can be routed
// twice: the records after the last commit, replayed by a partition's next owner after
// a crash or a lost partition. A row's id names its input range, so a reader sees the
// overlap.

// outcomeState is a partition's outcome aggregate and what it covers. agg, from, to and
// epoch are the routing goroutine's (one at a time, and the poll loop between polls);
// hold is read by the commit loop too.
type outcomeState struct {
	agg   *outcome.Agg
	from  int64 // the first offset counted since the last seal
	to    int64 // the offset after the last one counted
	epoch int32 // the last counted record's leader epoch
	// hold is from while anything is counted and not sealed, else -1: commits stop there
	// (at-least-once).
	hold atomic.Int64
}

// outcomes is the consumer's outcome writing; nil when off.
type outcomes struct {
	budget  *outcome.Budget
	sealMu  sync.Mutex // one seal at a time: the poll loop's and a revoke's
	sealed  time.Time  // the last periodic seal (at-least-once), the poll loop's
	promise func(*kgo.Record, error)
	// txnErr is the first failed outcome produce of the open transaction (exactly-once).
	txnErr atomic.Pointer[error]
	// orphans are partitions given up whose aggregates are released once nothing
	// routes (releaseOrphans): a revoke or loss can come while their records are routed
	// with exactly-once delivery.
	orphanMu sync.Mutex
	orphans  []*partition
}

// outcomeRow is a row's record in flight: record first, so a promise's *kgo.Record
// converts back (as for failed).
type outcomeRow struct {
	rec kgo.Record
	b   *batch // at-least-once: the seal's batch
	p   *partition
}

func (c *Consumer) initOutcomes() {
	if c.cfg.OutcomesTopic == "" {
		return
	}
	c.out = &outcomes{budget: outcome.NewBudget(int64(c.cfg.OutcomesMaxRows)), sealed: time.Now()}
	c.out.promise = c.onOutcomeProduced
	if c.exactlyOnce() {
		c.out.promise = c.onOutcomeProducedTxn
	}
}

// attachOutcomes gives a new partition its aggregate.
func (c *Consumer) attachOutcomes(p *partition) {
	if c.out == nil {
		return
	}
	p.out = &outcomeState{agg: outcome.NewAgg(c.cfg.OutcomesInterval, c.out.budget), from: -1}
	p.out.hold.Store(-1)
}

// beginOutcomes points s at p's aggregate before p's records from first are routed.
func (c *Consumer) beginOutcomes(p *partition, s *route.Scratch, first *kgo.Record) {
	if p.out == nil {
		s.Outcomes = nil
		return
	}
	s.Outcomes = p.out.agg
	if p.out.from < 0 {
		p.out.from = first.Offset
		p.out.hold.Store(first.Offset)
	}
}

// endOutcomes records that p's records up to last were routed (counted).
func (c *Consumer) endOutcomes(p *partition, s *route.Scratch, last *kgo.Record) {
	s.Outcomes = nil
	if p.out != nil && last != nil {
		p.out.to, p.out.epoch = last.Offset+1, last.LeaderEpoch
	}
}

// recordFate counts a record the consumer decides itself (a rerouted dead letter, a
// skipped undeliverable one) in p's aggregate.
func (c *Consumer) recordFate(p *partition, now time.Time, in *kgo.Record, kind outcome.Kind, reason string) {
	if p.out != nil {
		p.out.agg.Record(outcome.Fate{At: now, Kind: kind, Reason: reason, Bytes: len(in.Value)})
	}
}

// sealRows seals p's aggregate into records for the outcomes topic; nil when empty.
func (c *Consumer) sealRows(p *partition) []*outcomeRow {
	st := p.out
	if st == nil || st.agg.Empty() || st.from < 0 {
		return nil
	}
	if n := st.agg.Folded(); n > 0 {
		c.m.outcomeFolded.Add(float64(n))
	}
	rows := st.agg.Seal(c.cfg.Gate, outcome.Source{Topic: c.cfg.InputTopic, Partition: p.id, FirstOffset: st.from, LastOffset: st.to - 1})
	out := make([]*outcomeRow, 0, len(rows))
	for i := range rows {
		v, err := outcome.AppendJSON(nil, &rows[i])
		if err != nil {
			c.log.Error("an outcome row could not be encoded; it is not written", "err", err)
			continue
		}
		r := &outcomeRow{p: p}
		r.rec = kgo.Record{Topic: c.cfg.OutcomesTopic, Value: v}
		if rows[i].Team != "" {
			r.rec.Key = []byte(rows[i].Team)
		}
		out = append(out, r)
	}
	c.m.outcomeRows.Add(float64(len(out)))
	return out
}

// sealALO seals the partitions among ps (at-least-once): their rows become a batch of
// the partition, after every record they count, and the commit hold moves past them.
// Called while nothing routes: between polls, in a revoke, at shutdown.
func (c *Consumer) sealALO(ps []*partition) {
	if c.out == nil {
		return
	}
	c.out.sealMu.Lock()
	defer c.out.sealMu.Unlock()
	for _, p := range ps {
		st := p.out
		if st == nil || st.from < 0 {
			continue
		}
		rows := c.sealRows(p)
		if len(rows) > 0 {
			b := p.add(st.to, st.epoch, len(rows))
			for _, r := range rows {
				r.b = b
				c.outstanding.Add(1)
				c.cl.Produce(c.produceCtx, &r.rec, c.out.promise)
			}
		}
		// After the batch is in place: a commit snapshotted from here on stops at it.
		st.from = -1
		st.hold.Store(-1)
	}
}

// sealDue seals every owned partition when GATE_COMMIT_INTERVAL has passed since the
// last periodic seal (at-least-once; the poll loop's, between polls).
func (c *Consumer) sealDue() {
	if c.out == nil || time.Since(c.out.sealed) < c.cfg.CommitInterval {
		return
	}
	c.out.sealed = time.Now()
	c.sealALO(c.snapshot(nil))
}

// pollContext bounds a poll so the periodic seal runs on an idle gate too.
func (c *Consumer) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.out == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.CommitInterval)
}

// onOutcomeProduced is the promise of an at-least-once row: acknowledged, it counts in
// its seal's batch; failed, it is produced again after a backoff, the partition's
// commit held meanwhile, the problem reported as for any output topic.
func (c *Consumer) onOutcomeProduced(rec *kgo.Record, err error) {
	defer c.outstanding.Add(-1)
	r := (*outcomeRow)(unsafe.Pointer(rec))
	if err == nil {
		if c.produceBlocked.Load() {
			c.produceRecovered(rec.Topic)
		}
		c.ackBatch(r.b, 1)
		return
	}
	if r.p.gone.Load() || c.produceCtx.Err() != nil {
		return // revoked, lost or shutting down: not committed past, counted again on replay
	}
	if !errors.Is(err, context.Canceled) {
		c.m.produceError(rec.Topic, err)
		c.produceProblem(rec.Topic, err)
	}
	c.outstanding.Add(1)
	time.AfterFunc(c.backoff(0), func() { c.cl.Produce(c.produceCtx, rec, c.out.promise) })
}

// sealTxn seals every partition routed in the open transaction into it (exactly-once).
func (c *Consumer) sealTxn() {
	if c.out == nil {
		return
	}
	c.releaseOrphans()
	for _, p := range c.snapshot(nil) {
		rows := c.sealRows(p)
		for _, r := range rows {
			c.txn.pending.Add(1)
			c.cl.Produce(c.txn.ctx, &r.rec, c.out.promise)
		}
		if p.out != nil {
			p.out.from = -1
		}
	}
}

// onOutcomeProducedTxn is the promise of a row in a transaction: a failure aborts the
// transaction, whose records are routed again (and counted in new rows).
func (c *Consumer) onOutcomeProducedTxn(rec *kgo.Record, err error) {
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			// Cancelled: the transaction was interrupted, and aborts for that anyway.
			c.m.produceError(rec.Topic, err)
			c.produceProblem(rec.Topic, err)
		}
		// Whatever the error, the transaction must not commit without its rows.
		c.out.txnErr.CompareAndSwap(nil, &err)
	}
	c.txn.pending.Done()
}

// outcomeFailed returns, and clears, a failed row produce of the transaction that ended.
func (c *Consumer) outcomeFailed() error {
	if c.out == nil {
		return nil
	}
	if e := c.out.txnErr.Swap(nil); e != nil {
		return *e
	}
	return nil
}

// orphanOutcomes queues a partition given up for releaseOrphans.
func (c *Consumer) orphanOutcomes(p *partition) {
	if c.out == nil || p.out == nil {
		return
	}
	c.out.orphanMu.Lock()
	c.out.orphans = append(c.out.orphans, p)
	c.out.orphanMu.Unlock()
}

// releaseOrphans discards the unsealed counts of the partitions given up, giving their
// rows back to the budget: their records are routed again by the partitions' next
// owner (a revoke with at-least-once delivery sealed them first). Called while nothing
// routes.
func (c *Consumer) releaseOrphans() {
	if c.out == nil {
		return
	}
	c.out.orphanMu.Lock()
	ps := c.out.orphans
	c.out.orphans = nil
	c.out.orphanMu.Unlock()
	for _, p := range ps {
		p.out.agg.Seal("", outcome.Source{})
		p.out.from = -1
		p.out.hold.Store(-1)
	}
}
