package consume

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/route"
)

// Outcome rows (Config.OutcomesTopic). Each routing goroutine counts the fates of the
// records it routes in an outcome.Agg of its own (its route.Scratch's Outcomes), and each
// owned partition remembers the input offsets counted since the last seal. A seal, run
// while nothing routes, merges the goroutines' aggregates into rows, one per key, rule,
// outcome and reason whichever partition and goroutine counted it, and writes a SealInfo
// record naming the offsets they cover.
//
// Exactly-once: every transaction seals into itself before it ends, so its rows commit
// or abort with its records, and a read_committed reader's rows count exactly what it
// finds on the output topics. A partition revoked or lost mid-transaction aborts it.
//
// At-least-once: a partition's offsets are committed only up to its last seal
// (outcomeState.hold), and each seal adds a batch to every partition it covers
// (track.go) that completes when every row of the seal is acknowledged, so an offset is
// committed only once the rows counting the records before it are. The poll loop seals
// every Config.OutcomesFlushInterval (GATE_OUTCOMES_FLUSH_INTERVAL; and polls no longer
// than that, so an idle gate's last records get theirs), a revoke and shutdown seal
// before they commit. What can count
// twice is what can be routed twice: the records after the last commit, routed again by
// a partition's next owner after a crash or a loss; their seals' sources overlap.

// outcomeState is what a partition's records counted since the last seal cover. from
// and to are written by the goroutine routing the partition (one at a time) and
// read by the seal (while nothing routes); hold is read by the commit loop too.
type outcomeState struct {
	from int64 // the first offset counted since the last seal; -1: none
	to   int64 // the offset after the last one counted
	// hold is from while anything is counted and not sealed, else -1: commits stop there
	// (at-least-once).
	hold atomic.Int64
}

// outcomes is the consumer's outcome writing; nil when off.
type outcomes struct {
	aggs   []*outcome.Agg // one per routing goroutine: Consumer.scratch[i].Outcomes
	budget *outcome.Budget
	// rows and ends are the last seal's, cleared: the next one's (seals run one at a time).
	rows   []outcome.Row
	ends   []int
	sealMu sync.Mutex // one seal at a time: the poll loop's and a revoke's
	sealed time.Time  // the last periodic seal (at-least-once), under sealMu
	// run and seq name the seals: the consumer's start (Unix ms) and a random suffix,
	// so that two gates of one name (gate-dev's, a restart within a millisecond) never
	// share one, and a count.
	run     string
	seq     int64
	promise func(*kgo.Record, error)
	// txnErr is the first failed outcome produce of the open transaction (exactly-once).
	txnErr  atomic.Pointer[error]
	retries rowRetries // at-least-once
	// unwritten counts the at-least-once rows (seal records too) produced and not yet
	// acknowledged, for the logs of a revoke and the shutdown.
	unwritten atomic.Int64
	// chunk bounds the bytes of rows produced together (0: no bound), learned from a
	// batch of rows the outcomes topic refused as too large: a topic's max.message.bytes
	// may be below GATE_KAFKA_MAX_MESSAGE_BYTES, the batches the producer makes, and
	// franz-go does not split a batch the broker refuses. Halved at each refusal of rows
	// produced under it; rows are then produced a chunk at a time, each awaited before
	// the next is buffered, so that no batch holds more.
	chunk atomic.Int64
}

// outcomeRow is a row's record in flight: record first, so a promise's *kgo.Record
// converts back (as for failed).
type outcomeRow struct {
	rec  kgo.Record
	seal *sealBatch // at-least-once
	// chunk is outcomes.chunk when it was produced: a refusal as too large halves it once.
	chunk int64
	// info: the seal record, not a row (gate_outcome_rows_total counts rows).
	info bool
	// folded is the records of a folded row (keys past GATE_OUTCOMES_MAX_ROWS), 0 for
	// any other: gate_outcome_folded_records_total counts them once the row is written,
	// as gate_outcome_rows_total counts rows.
	folded int64
	// failing: its produce failed and it is being retried, counted in
	// rowRetries.pending until acknowledged. Only its promise reads and writes it (one
	// at a time: a row is produced again only after its promise failed).
	failing bool
}

// rowRetries holds at-least-once rows whose produce failed, produced again together
// after a backoff that grows while they keep failing: one timer, however many rows.
type rowRetries struct {
	mu       sync.Mutex
	rows     []*outcomeRow
	armed    bool
	attempts int // failed rounds in a row
	// pending counts the rows that failed and are not yet acknowledged. While it is
	// above zero nothing new is polled, as while records are retried: each seal adds a
	// row per key, each poll a batch its seal holds, and a gate routing on while its
	// rows fail would hold them and every commit for as long as the topic fails.
	pending atomic.Int64
}

// sealBatch is an at-least-once seal in flight: when its last row is acknowledged, the
// batch it added to each partition it covers is complete.
type sealBatch struct {
	rows    atomic.Int64
	batches []*batch
}

func (c *Consumer) initOutcomes() {
	if c.cfg.OutcomesTopic == "" {
		return
	}
	c.out = &outcomes{budget: outcome.NewBudget(int64(c.cfg.OutcomesMaxRows)), sealed: c.clock.Now(),
		run: fmt.Sprintf("%d-%08x", c.clock.Now().UnixMilli(), rand.Uint32())}
	c.out.promise = c.onOutcomeProduced
	if c.exactlyOnce() {
		c.out.promise = c.onOutcomeProducedTxn
	}
	seed := c.cfg.HashSeed
	if seed == (maphash.Seed{}) {
		seed = maphash.MakeSeed()
	}
	for i := range c.scratch {
		a := outcome.NewAggSeeded(c.cfg.OutcomesInterval, c.out.budget, seed)
		c.out.aggs = append(c.out.aggs, a)
		c.scratch[i].Outcomes = a
	}
}

// attachOutcomes gives a new partition its outcome state.
func (c *Consumer) attachOutcomes(p *partition) {
	if c.out == nil {
		return
	}
	p.out = &outcomeState{from: -1}
	p.out.hold.Store(-1)
}

// beginOutcomes notes that p's records from first on are being counted.
func beginOutcomes(p *partition, first *kgo.Record) {
	if p.out != nil && p.out.from < 0 {
		p.out.from = first.Offset
		p.out.hold.Store(first.Offset)
	}
}

// endOutcomes notes that p's records before offset to were counted. An offset, not the
// record: a record handed to the producer may be acknowledged and recycled meanwhile.
func endOutcomes(p *partition, to int64) {
	if p.out != nil {
		p.out.to = to
	}
}

// teamReader is what a router that reads teams offers (*route.Router and the gate's
// router of the rules in use): the team of a record the consumer decides itself.
type teamReader interface {
	TeamOf(in *kgo.Record, s *route.Scratch) string
}

// recordFate counts a record the consumer decides itself (a rerouted dead letter, a
// skipped undeliverable one) in the routing goroutine's aggregate, under its team.
func (c *Consumer) recordFate(s *route.Scratch, now time.Time, in *kgo.Record, kind outcome.Kind, reason string) {
	if s.Outcomes == nil {
		return
	}
	f := outcome.Fate{At: now, Kind: kind, Reason: reason, Bytes: len(in.Value)}
	if tr, ok := c.router.(teamReader); ok {
		f.Team = tr.TeamOf(in, s)
		f.Key = f.Team
	}
	s.Outcomes.Record(&f)
}

// seal merges the aggregates into records for the outcomes topic, its rows then its
// SealInfo, covering ps (the partitions with records counted: outcomeState.from set),
// and clears their from. Nothing may route meanwhile.
func (c *Consumer) seal(ps []*partition) []*outcomeRow {
	var sources []outcome.Source
	for _, p := range ps {
		if p.out.to > p.out.from { // else routing stopped before its first record
			sources = append(sources, outcome.Source{Topic: c.cfg.InputTopic, Partition: p.id, FirstOffset: p.out.from, LastOffset: p.out.to - 1})
		}
		p.out.from = -1
	}
	c.out.seq++
	id := fmt.Sprintf("%s/%s/%d", c.cfg.Gate, c.out.run, c.out.seq)
	// Keys that read back alike (bytes not UTF-8) as one row: a reader would keep one.
	rows := outcome.MergeAsEncoded(outcome.SealAppend(c.out.rows[:0], c.cfg.Gate, id, c.out.aggs...))
	// The rows are copied into the records below: the slice is the next seal's.
	var ends []int
	defer func() { clear(rows); c.out.rows, c.out.ends = rows[:0], ends[:0] }()
	if len(rows) == 0 {
		return nil
	}
	out := make([]*outcomeRow, len(rows)+1)
	// One allocation for the rows' records, one for their values, one for their keys
	// (the teams), each sized before it is filled: a seal writes a row for every key
	// that routed since the last (under exactly-once, every transaction), and growing
	// them by appending copied each several times.
	recs := make([]outcomeRow, len(rows)+1)
	nkeys := 0
	for i := range rows {
		nkeys += len(rows[i].Team)
	}
	keys := make([]byte, 0, nkeys)
	var buf []byte
	buf, ends = outcome.AppendRowsJSON(make([]byte, 0, len(rows)*rowBytes), rows, c.out.ends[:0])
	from := 0
	for i := range rows {
		r := &recs[i]
		r.rec = kgo.Record{Topic: c.cfg.OutcomesTopic, Value: buf[from:ends[i]:ends[i]]}
		if t := rows[i].Team; t != "" {
			keys = append(keys, t...)
			r.rec.Key = keys[len(keys)-len(t) : len(keys) : len(keys)]
		} else {
			// The rows of no team (folded, or no key read) keyed by the empty key, not
			// none: in one partition (Kafka's partitioner hashes any key that is there),
			// which gate outcomes TEAM reads beside the team's for its folded records.
			// Keyed by none they were spread over every partition, and a team whose
			// records were all folded elsewhere read "no outcomes" without a word.
			r.rec.Key = []byte{}
		}
		from = ends[i]
		if rows[i].Folded {
			r.folded = rows[i].Records
		}
		out[i] = r
	}
	info := &recs[len(rows)]
	info.info = true
	info.rec = kgo.Record{Topic: c.cfg.OutcomesTopic, Key: []byte(c.cfg.Gate),
		Value: outcome.AppendSealJSON(nil, &outcome.SealInfo{Schema: outcome.SchemaVersion, Seal: id, Gate: c.cfg.Gate, Rows: len(rows), Sources: sources})}
	out[len(rows)] = info
	// gate_outcome_rows_total counts the rows once written (onOutcomeProduced, transact),
	// and gate_outcome_folded_records_total the folded rows' records: a row sealed may
	// never be, its transaction aborted (its records then folded again in the next) or
	// its gate gone first.
	return out
}

// rowBytes is about how long a row's encoding is (internal/outcome's golden row is 315
// bytes): the size a seal's buffer is made for, a seal of longer rows growing it once.
const rowBytes = 320

// counted returns the partitions among ps with records counted since the last seal.
func counted(ps []*partition) []*partition {
	var out []*partition
	for _, p := range ps {
		if p.out != nil && p.out.from >= 0 {
			out = append(out, p)
		}
	}
	return out
}

// sealALO seals (at-least-once): every row of the seal, then a batch of each partition it
// covers that completes once they are all acknowledged, ahead of every record they
// count; then the commit hold, which it takes over, is lifted. Called while nothing
// routes: between polls, in a revoke, at shutdown.
//
// Rows are produced under ctx: the poll loop's routing context (a rebalance waiting
// cancels it, so that a full buffer cannot hold the group), a revoke's bounded by
// Config.RevokeTimeout, shutdown's grace. A row whose produce is cancelled is produced
// again later (rowRetries); its seal's batch holds the commits meanwhile.
func (c *Consumer) sealALO(ctx context.Context) {
	if c.out == nil {
		return
	}
	c.out.sealMu.Lock()
	defer c.out.sealMu.Unlock()
	c.out.sealed = c.clock.Now()
	ps := counted(c.snapshot(nil))
	if len(ps) == 0 {
		return
	}
	// The partitions whose records the rows count, and where each one's batch goes: at
	// the first record counted (read before seal clears from), ahead of the records'
	// own batches (addSeal). A partition whose routing stopped before its first record
	// counted nothing, and gets none.
	type start struct {
		p    *partition
		from int64
	}
	var starts []start
	for _, p := range ps {
		if p.out.to > p.out.from {
			starts = append(starts, start{p, p.out.from})
		}
	}
	rows := c.seal(ps)
	if len(rows) > 0 {
		sb := &sealBatch{}
		sb.rows.Store(int64(len(rows)))
		for _, s := range starts {
			sb.batches = append(sb.batches, s.p.addSeal(s.from, sb))
		}
		for _, r := range rows {
			r.seal = sb
		}
		c.out.unwritten.Add(int64(len(rows)))
		c.produceRows(ctx, rows)
	}
	// After the batches are in place: a commit snapshotted from here on stops at them.
	for _, p := range ps {
		p.out.hold.Store(-1)
	}
}

// sealDue seals when OutcomesFlushInterval (GATE_OUTCOMES_FLUSH_INTERVAL) has passed
// since the last seal (at-least-once; the poll loop's, between polls).
func (c *Consumer) sealDue() {
	if c.out == nil {
		return
	}
	c.out.sealMu.Lock()
	due := c.clock.Now().Sub(c.out.sealed) >= c.cfg.OutcomesFlushInterval
	c.out.sealMu.Unlock()
	if due {
		c.sealALO(c.route)
	}
}

// onOutcomeProduced is the promise of an at-least-once row: acknowledged, it counts
// toward its seal; failed, it is produced again after a backoff (retryRows), the
// partitions' commits held meanwhile, the problem reported as for any output topic.
// Rows are not records in flight (Consumer.outstanding): the record retries do not wait
// for them.
func (c *Consumer) onOutcomeProduced(rec *kgo.Record, err error) {
	r := (*outcomeRow)(unsafe.Pointer(rec))
	if err == nil {
		c.out.retries.mu.Lock()
		c.out.retries.attempts = 0
		c.out.retries.mu.Unlock()
		if r.failing {
			r.failing = false
			c.out.retries.pending.Add(-1)
		}
		// After the row no longer awaits its retry: the last one's settles every produce
		// problem (produceSettled).
		c.producedOK(rec.Topic)
		c.out.unwritten.Add(-1)
		if !r.info {
			c.m.outcomeRows.Inc()
		}
		if r.folded > 0 {
			c.m.outcomeFolded.Add(float64(r.folded))
		}
		if r.seal.rows.Add(-1) == 0 {
			for _, b := range r.seal.batches {
				c.ackBatch(b, 1)
			}
		}
		return
	}
	if c.produceCtx.Err() != nil {
		return // shutting down: not committed past, counted again on replay
	}
	rt := &c.out.retries
	if !r.failing {
		// Counted awaiting its retry before its problem is recorded: see produceSettled.
		r.failing = true
		rt.pending.Add(1)
	}
	if !errors.Is(err, context.Canceled) {
		c.m.produceError(rec.Topic, err)
		c.produceProblem(rec.Topic, err)
		c.rowsTooLarge(r, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.rows = append(rt.rows, r)
	if !rt.armed {
		rt.armed = true
		time.AfterFunc(c.backoff(rt.attempts), c.retryRows)
		rt.attempts++
	}
}

// retryRows produces the failed rows again, on a goroutine of its own (a full buffer
// blocks it, nothing else).
func (c *Consumer) retryRows() {
	rt := &c.out.retries
	rt.mu.Lock()
	rows := rt.rows
	rt.rows, rt.armed = nil, false
	rt.mu.Unlock()
	for _, r := range rows {
		// A record of its own, as the record retries make one (retryRecord): franz-go
		// keeps the context a record was first produced under (Record.Context, set only
		// when nil), and a row first produced under a context since cancelled (the
		// routing context a rebalance cancels, a revoke's) would fail at once on every
		// try, its seal holding its partitions' commits for good.
		r.rec = kgo.Record{Topic: r.rec.Topic, Key: r.rec.Key, Value: r.rec.Value, Timestamp: r.rec.Timestamp}
	}
	c.produceRows(c.produceCtx, rows)
}

// produceRows produces rows with the outcomes' promise: all at once, or, once the
// outcomes topic refused a batch of rows as too large (outcomes.chunk), a chunk at a
// time, each chunk's promises awaited before the next is produced. The waits end with
// ctx too: franz-go does not fail a record sent to a broker that does not answer when
// its context ends, and the callers (a revoke, the shutdown, the exactly-once loop) are
// bounded by ctx; the rows left are then produced under it, and fail with it.
func (c *Consumer) produceRows(ctx context.Context, rows []*outcomeRow) {
	limit := c.out.chunk.Load()
	if limit == 0 {
		for _, r := range rows {
			r.chunk = 0
			c.producer().Produce(ctx, &r.rec, c.out.promise)
		}
		return
	}
	// left counts the chunk's rows whose promise has not run, plus one while the chunk
	// is being produced; acked is closed when it reaches zero.
	var (
		left  *atomic.Int64
		acked chan struct{}
	)
	next := func() {
		left, acked = new(atomic.Int64), make(chan struct{})
		left.Store(1)
	}
	wait := func() {
		if left.Add(-1) == 0 {
			close(acked)
		}
		select {
		case <-acked:
		case <-ctx.Done():
		}
	}
	next()
	size := int64(0)
	for _, r := range rows {
		n := int64(len(r.rec.Key) + len(r.rec.Value))
		if size > 0 && size+n > limit {
			wait()
			next()
			size = 0
		}
		r.chunk = limit
		l, a := left, acked
		l.Add(1)
		c.producer().Produce(ctx, &r.rec, func(rec *kgo.Record, err error) {
			c.out.promise(rec, err)
			if l.Add(-1) == 0 {
				close(a)
			}
		})
		size += n
	}
	wait()
}

// rowsTooLarge halves the bytes of rows produced together when the outcomes topic
// refused r's batch as too large (once for the rows produced under one bound).
func (c *Consumer) rowsTooLarge(r *outcomeRow, err error) {
	if !errors.Is(err, kerr.MessageTooLarge) && !errors.Is(err, kerr.RecordListTooLarge) {
		return
	}
	from := r.chunk
	if from == 0 {
		from = int64(c.cfg.MaxMessageBytes)
	}
	c.out.chunk.CompareAndSwap(r.chunk, max(from/2, 1))
}

// rowsRetrying is how many at-least-once outcome rows failed and await their retry.
func (c *Consumer) rowsRetrying() int64 {
	if c.out == nil {
		return 0
	}
	return c.out.retries.pending.Load()
}

// rowsUnwritten is how many at-least-once outcome rows were produced and are not
// acknowledged.
func (c *Consumer) rowsUnwritten() int64 {
	if c.out == nil {
		return 0
	}
	return c.out.unwritten.Load()
}

// rowsUnwrittenOf is how many at-least-once outcome rows (seal records too) counting
// records of the partitions ids were produced and are not yet acknowledged: those of the
// seals whose batch on one of them is not complete. A revoke that gives up on them leaves
// those records to count twice; rows of the partitions the gate keeps hold only their
// commits.
func (c *Consumer) rowsUnwrittenOf(ids []int32) int64 {
	if c.out == nil {
		return 0
	}
	seals := map[*sealBatch]bool{}
	for _, p := range c.snapshot(ids) {
		p.sealsUnwritten(seals)
	}
	var n int64
	for sb := range seals {
		n += sb.rows.Load()
	}
	return n
}

// sealTxn seals into the open transaction everything routed into it (exactly-once), and
// returns how many rows (seal record aside) it produced and how many records its folded
// rows count: written if the transaction commits.
func (c *Consumer) sealTxn() (n int, folded int64) {
	if c.out == nil {
		return 0, 0
	}
	ps := counted(c.snapshot(nil))
	// A partition revoked meanwhile is no longer among them: its records' counts are
	// in the aggregates all the same, and the transaction aborts.
	rows := c.seal(ps)
	for _, r := range rows {
		folded += r.folded
	}
	c.txn.pending.Add(len(rows))
	c.produceRows(c.txn.ctx, rows)
	return max(len(rows)-1, 0), folded
}

// onOutcomeProducedTxn is the promise of a row in a transaction: a failure aborts the
// transaction, whose records are routed again (and counted in new rows).
func (c *Consumer) onOutcomeProducedTxn(rec *kgo.Record, err error) {
	if err == nil {
		c.producedOK(rec.Topic)
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			// Cancelled: the transaction was interrupted, and aborts for that anyway.
			c.m.produceError(rec.Topic, err)
			if !topicClosed(err) {
				// A topic missing or closed: said once the transaction has ended
				// (closedProblems), as the error may be another topic's.
				c.produceProblem(rec.Topic, err)
			}
			c.rowsTooLarge((*outcomeRow)(unsafe.Pointer(rec)), err)
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
