// A poll's work: each partition's records routed in offset order by one goroutine,
// partitions in parallel (process, both delivery modes). At least once, each record is
// handed to the producer (routeWork), and its acknowledgement (onProduced) moves its
// partition's committable offset (track.go) or queues it for a retry (retry.go).

package consume

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/route"
)

// work is one partition's records from one poll.
type work struct {
	p    *partition
	recs []*kgo.Record // without control records (see dataRecords)
	hwm  int64
	// stable is where the records the gate can poll end: hwm, or with exactly-once
	// (read_committed) the last stable offset, below an open transaction's records.
	stable int64
	// next is the offset after the last record polled, control records included (never
	// before the last of recs): where the partition's lag is measured from once every
	// record of recs is routed.
	next int64
	// nextEpoch is the leader epoch of the record before next (a control record's too).
	nextEpoch int32
}

// works gathers a poll's records of the input topic, one work item per partition, and
// reports whether the poll moved a partition past control records alone (moved): the
// markers of upstream transactions, an aborted one's with none of its records (read
// committed drops them). Their offsets must be committed too, though nothing is routed:
// an input ending in such a poll (an upstream transaction aborted, then quiet) was left
// uncommitted for good, lag to every tool that reads the group's commits (and KEDA,
// which scales on it). At least once, such a partition gets an empty batch, complete at
// once, that the commit moves past in offset order; exactly once, the caller runs a
// transaction for the offsets.
func (c *Consumer) works(fetches kgo.Fetches) (ws []work, moved bool) {
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if ftp.Topic != c.cfg.InputTopic {
			return
		}
		var nextEpoch int32 = -1
		if n := len(ftp.Records); n > 0 {
			nextEpoch = ftp.Records[n-1].LeaderEpoch
		}
		recs, next := dataRecords(ftp.Records)
		if next < 0 {
			c.m.setLag(ftp.Partition, ftp.HighWatermark, -1)
			return
		}
		// A partition spread over several fetches comes back in fetch order, which is
		// offset order: merge it into one work item so one goroutine routes it.
		for i := range ws {
			if ws[i].p.id == ftp.Partition {
				// Clip: the first slice's spare capacity belongs to the client.
				ws[i].recs = append(slices.Clip(ws[i].recs), recs...)
				ws[i].hwm = max(ws[i].hwm, ftp.HighWatermark)
				ws[i].stable = max(ws[i].stable, c.stableEnd(ftp))
				ws[i].next, ws[i].nextEpoch = next, nextEpoch
				return
			}
		}
		p := c.partition(ftp.Partition)
		if p.stopped.Load() {
			return // fetched before it was paused: nothing past the stop is routed
		}
		if len(recs) == 0 {
			// Only control records: nothing to route, but the partition's position moved
			// past them (a record of it polled later in this poll sets its lag again).
			c.setLag(p, ftp.HighWatermark, c.stableEnd(ftp), next)
			if !c.exactlyOnce() {
				p.addEmpty(next, nextEpoch)
			}
			moved = true
			return
		}
		ws = append(ws, work{p: p, recs: recs, hwm: ftp.HighWatermark, stable: c.stableEnd(ftp), next: next, nextEpoch: nextEpoch})
	})
	return ws, moved
}

// primeSample bounds the records of a poll's lagging partitions after their first poll
// that Prime is given, taken evenly across them (every eighth at most): reading their
// keys runs on the polling goroutine, before the routing workers start, and costs about
// what routing a record does (BenchmarkExpect: 568 ns a record against BenchmarkRoute's
// 470, AMD EPYC), so a whole poll's would hold every worker of a many-core gate for its
// time. 256 of them cost some 0.15 ms a poll, and a team heavy in the backlog (about 1 %
// of a poll's records or more) shows in the sample as two records or more, Expect's rule.
const primeSample = 256

// prime hands Config.Prime, before any of ws is routed, the records of each partition's
// first poll since it was assigned here, and a sample of its later polls' records
// (primeSample) until one reaches the end of what it can poll (w.stable): a backlog
// longer than a poll has its later keys read too, as they come. A partition another
// member owns now (exactly once, detached: its records abort) is left out.
func (c *Consumer) prime(ctx context.Context, ws []work) {
	if c.cfg.Prime == nil {
		return
	}
	var recs []*kgo.Record
	var lagging []work             // primed before: sampled
	var first, caught []*partition // primed here for the first time; found caught up here
	n := 0
	for _, w := range ws {
		p := w.p
		if p.gone.Load() || p.caughtUp.Load() {
			continue
		}
		if !p.primed.Swap(true) {
			recs = append(recs, w.recs...)
			first = append(first, p)
		} else {
			lagging = append(lagging, w)
			n += len(w.recs)
		}
		if w.next >= w.stable {
			p.caughtUp.Store(true) // what comes next arrives live, met as any team's records are
			caught = append(caught, p)
		}
	}
	// One stride over the lagging partitions' records taken together: each sampled from
	// its own first record, every partition added one at least, and a poll of 600 lagging
	// partitions of 5 records each had all 600 read (a review).
	stride := max(8, (n+primeSample-1)/primeSample)
	at := 0 // the next sampled record's index in w.recs, counted on from the partition before
	for _, w := range lagging {
		for ; at < len(w.recs); at += stride {
			recs = append(recs, w.recs[at])
		}
		at -= len(w.recs)
	}
	if len(recs) > 0 {
		c.cfg.Prime(ctx, recs)
	}
	if ctx.Err() != nil {
		// Cut short (at least once, a rebalance waiting for this poll; exactly once, a
		// revoke or loss aborting the transaction): none of ws is routed, and a partition
		// kept polls these records again: its first poll is then
		// primed whole again, not sampled as a later one, and a lagging one's sampled.
		for _, p := range first {
			p.primed.Store(false)
		}
		for _, p := range caught {
			p.caughtUp.Store(false)
		}
	}
}

// dataRecords returns recs without their control records (transaction markers, polled
// only so that the gate sees its position move: see clientOpts), which it recycles, and
// the offset after the last record of either kind (-1 when recs is empty). recs comes
// back as is when it holds none, else in a slice of its own: recs is the client's.
func dataRecords(recs []*kgo.Record) ([]*kgo.Record, int64) {
	if len(recs) == 0 {
		return recs, -1
	}
	next := recs[len(recs)-1].Offset + 1
	i := slices.IndexFunc(recs, func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	if i < 0 {
		return recs, next
	}
	data := recs[:i:i]
	for _, r := range recs[i:] {
		if r.Attrs.IsControl() {
			r.Recycle()
			continue
		}
		data = append(data, r)
	}
	return data, next
}

// process routes ws with routeFn: each partition's records in order, by one goroutine,
// partitions in parallel. It returns when every record has been handed to the producer,
// and what each goroutine counted is in the metrics (route.Scratch.Flush).
func (c *Consumer) process(ws []work, routeFn func(work, *route.Scratch)) {
	switch n := min(len(ws), len(c.scratch)); n {
	case 0:
	case 1:
		s := &c.scratch[0]
		for _, w := range ws {
			routeFn(w, s)
		}
		s.Flush()
	default:
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				s := &c.scratch[g]
				for i := next.Add(1) - 1; i < int64(len(ws)); i = next.Add(1) - 1 {
					routeFn(ws[i], s)
				}
				s.Flush()
			})
		}
		wg.Wait()
	}
}

// partition returns the state of an owned partition. Polls return only assigned
// partitions, and assignment creates the state, so the fallback is defensive; except
// with exactly-once delivery, where a revoke can run between a poll and its routing:
// the partition is then no longer ours, its records go into a transaction that aborts,
// and it gets detached state, already gone.
func (c *Consumer) partition(id int32) *partition {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	p := c.parts[id]
	if p == nil {
		p = newPartition(c.cfg.InputTopic, id, c.mono)
		if c.exactlyOnce() {
			p.gone.Store(true) // no outcomes: its transaction aborts
			return p
		}
		c.attachOutcomes(p)
		c.parts[id] = p
	}
	return p
}

// routeWork routes one partition's records in offset order and hands them to the
// producer; Produce blocks while the producer's buffer is full.
func (c *Consumer) routeWork(w work, s *route.Scratch) {
	// Read before any record is produced: once all are acknowledged the batch is
	// complete and its records recycled (ackBatch), maybe before the loop ends.
	last := w.recs[len(w.recs)-1]
	// Past the control records after the last one too (the commit marker that ends an
	// upstream transaction, which read_committed returns with its records): a commit
	// stopping before it left the group a record behind for good where the input ended
	// there, as lag tools (and KEDA) read the group.
	end, epoch := last.Offset+1, last.LeaderEpoch
	if w.next > end {
		end, epoch = w.next, w.nextEpoch
	}
	b := w.p.add(end, epoch, len(w.recs))
	// The input bytes the batch keeps, summed as the records are routed and added once
	// the loop ends: inputFull reads the poll being routed at its records alone.
	var size int64
	defer func() { b.bytes.Add(size) }()
	var now time.Time
	rctx := c.route
	// The records in flight in one slab, reused once all are done (slab.go): b holds
	// it until then.
	fs := c.slabs.get(len(w.recs))
	b.slab = fs
	beginOutcomes(w.p, w.recs[0])
	for i, in := range w.recs {
		if i%clockRefresh == 0 {
			now = c.clock.Now()
		}
		if rctx.Err() != nil || c.runCtx.Err() != nil || c.retry.pending.Load() > 0 && !c.holdRouting(rctx, w.p) {
			// Shutting down, a rebalance waiting, or the partition revoked or
			// stopped: the rest is not routed now.
			if i > 0 { // w.recs[i-1] is not recycled: the batch awaits w.recs[i:]
				endOutcomes(w.p, w.recs[i].Offset)
			}
			c.unroute(w, b, i)
			return
		}
		f := &fs[i]
		f.b, f.in = b, in
		size += recordBytes(in) // read before it is produced: acknowledged, it is recycled
		if c.router.RouteInto(now, in, s, &f.out).Route == route.Dropped {
			// Written nowhere (a drop rule; its outcome row counts it): done at once.
			c.ackBatch(b, 1)
			continue
		}
		if f.out.Key == nil && c.refusesKeyless.Load() != nil {
			c.deadLetterUnsent(f) // a keyless record to a topic known compacted
		}
		// Counted one by one as handed over, not for the poll at once: a routing that
		// waits for the retries (holdRouting) must not count as records in flight, or
		// the retries would wait for it in turn.
		c.outstanding.Add(1)
		c.prod.Produce(rctx, &f.out, c.promise)
	}
	endOutcomes(w.p, end)
	c.setLag(w.p, w.hwm, w.stable, w.next) // every record routed: past the control records after them too
}

// produce hands f.out to the producer; onProduced acknowledges it in its batch or
// queues it for a retry.
func (c *Consumer) produce(f *failed) {
	c.outstanding.Add(1)
	c.prod.Produce(c.produceCtx, &f.out, c.promise)
}

// onProduced is the promise of every record the consumer produces. Each is the out field
// of a failed, its first field, so the pointer converts back (the unsafe.Pointer rule for
// a struct and its first field).
func (c *Consumer) onProduced(r *kgo.Record, err error) {
	// Last, so that a failure is queued before the retry loop can see quiescence.
	defer c.outstanding.Add(-1)
	f := (*failed)(unsafe.Pointer(r))
	if err == nil {
		c.producedOK(r.Topic)
		retried, stage := f.attempts > 0, f.stage
		c.ackBatch(f.b, 1) // f may be reused from here on
		if stage > stageRouted {
			// Counted only now that it is written: one refused there too may be
			// written nowhere (undeliverable). Retried, or made a dead letter unsent
			// (deadLetterUnsent).
			c.router.CountDeadLettered()
		}
		if retried {
			c.retryDone()
		}
		return
	}
	if f.b.p.released() {
		// The new owner replays from the last commit.
		f.b.givenUp.Add(1)
		if f.attempts > 0 {
			c.retryDone()
		}
		return
	}
	f.err = err
	topic := r.Topic
	if rejected(err) {
		if stage, moved := f.advance(); moved && stage < stageUndeliverable {
			c.m.countRerouted(stage)
			c.logRerouted(topic, err)
		}
	}
	// Queued (and so awaiting its retry) before its problem is recorded: see
	// produceSettled. The retry loop takes it only once this promise has returned.
	c.retry.push(f)
	if !errors.Is(err, context.Canceled) {
		// A record failed because its routing context ended (a rebalance waiting, or
		// the end of the shutdown's grace) is no broker error: it is produced again.
		c.m.produceError(topic, err)
		c.produceProblem(topic, err)
	}
}
