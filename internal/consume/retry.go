package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/throttle"
)

// failed is one record on its way to the broker, with what the gate needs when the
// broker answers; it is queued for a retry when its produce fails. The output record is
// its first field, so the one promise function the consumer hands franz-go finds the
// failed from the *kgo.Record it is given (see onProduced), with no closure per record.
// At-least-once routing keeps them in a slab per partition's poll, reused once every
// record of it is done (slab.go): nothing is read from a failed after its batch
// acknowledgement (Consumer.ackBatch).
//
// With exactly-once delivery it carries a record produced in a transaction: b is nil,
// and a failure aborts the transaction rather than being retried.
type failed struct {
	out      kgo.Record // must stay the first field
	b        *batch
	in       *kgo.Record
	err      error
	attempts int32 // produces retried so far
	// stage is how far a record the broker rejects for good has been rerouted: see
	// stageRouted and the stages after it. Small types, so that a record in flight
	// stays 200 bytes (amd64), as slabs hold thousands.
	stage int8
	// alone is set when the produce in flight was sent with no other record of the
	// gate's in flight, so that the broker's answer is about this record only;
	// isolate when the next attempt must be (a rejection came back for the batch it
	// was in, which may have been another record's fault).
	alone, isolate bool
	moved          bool // stage moved since the record was last built
}

// The stages of a record the broker rejects for good (too large, invalid, a timestamp
// out of the broker's bounds). Brokers answer such errors for a whole produce batch,
// and franz-go fails every record buffered behind it in the partition with the same
// error: a record moves to the next stage only when it was rejected alone.
const (
	stageRouted        = iota // as the router routed it
	stageDeadLetter           // to the dead-letter topic, reason rejected, stamped now
	stageStripped             // the same without its value (and large headers)
	stageUndeliverable        // refused everywhere: Config.OnUndeliverable decides
)

// advance updates f after the broker rejected it for good: the next attempt is
// alone, and when this one already was, it is of the next stage. It returns the new
// stage when f moved.
func (f *failed) advance() (int, bool) {
	moved := f.alone && f.stage < stageUndeliverable
	if moved {
		f.stage++
		f.moved = true
	}
	f.isolate = true
	return int(f.stage), moved
}

// retryQueue holds failed records until the retry loop produces them again, in the
// order the client failed them: for one output partition, the order they were produced.
type retryQueue struct {
	mu    sync.Mutex
	items []*failed
	wake  chan struct{}
	// pending counts records that failed and are not yet acknowledged (or given up):
	// polling waits for it to reach zero, and routing holds while it is above.
	pending atomic.Int64
	// pushes counts every push, so the retry loop can tell whether a produce of its
	// own round failed meanwhile.
	pushes atomic.Uint64
}

func (q *retryQueue) init() { q.wake = make(chan struct{}, 1) }

// push queues f; a record's first failure makes it pending.
func (q *retryQueue) push(f *failed) {
	if f.attempts == 0 {
		q.pending.Add(1)
	}
	q.mu.Lock()
	q.items = append(q.items, f)
	q.mu.Unlock()
	q.pushes.Add(1)
	q.signal()
}

// requeue puts back, behind what is queued, records taken but not produced.
func (q *retryQueue) requeue(fs []*failed) {
	q.mu.Lock()
	q.items = append(q.items, fs...)
	q.mu.Unlock()
	q.signal()
}

func (q *retryQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// done marks a retried record acknowledged (or abandoned); it reports whether it was
// the last awaiting its retry.
func (q *retryQueue) done() bool { return q.pending.Add(-1) == 0 }

// retryDone marks a retried record acknowledged or given up; after the last one no
// produce fails any more (produceSettled).
func (c *Consumer) retryDone() {
	if c.retry.done() {
		c.produceSettled()
	}
}

func (q *retryQueue) take() []*failed {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// peek returns the first queued record, how many are queued, whether any awaits a
// retry only time may cure (transient), and the first whose failure came from the
// brokers (brokerErr): nil when every one was only cut short by its routing context
// ending (a rebalance, or the end of the shutdown's grace), which is no fault to warn of.
func (q *retryQueue) peek() (first *failed, n int, transient bool, brokerErr *failed) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.items {
		if !f.isolate || !rejected(f.err) {
			transient = true
		}
		if brokerErr == nil && !errors.Is(f.err, context.Canceled) {
			brokerErr = f
		}
	}
	if len(q.items) == 0 {
		return nil, 0, false, nil
	}
	return q.items[0], len(q.items), transient, brokerErr
}

// waitUntil polls cond until it holds (nil) or ctx ends (ctx's error).
func waitUntil(ctx context.Context, cond func() bool) error {
	if cond() {
		return ctx.Err()
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// retryLogEvery bounds how often failed produces that are retried are logged, and the
// aborted transactions of exactly-once delivery (txnLoop): each is counted in the
// metrics, and a broker that keeps failing would otherwise log every backoff.
const retryLogEvery = 10 * time.Second

// retryLoop produces failed records again, in the order they failed, after a backoff
// that grows with their attempts (none when every one only awaits a produce alone). It
// stops when ctx ends; records still queued then are abandoned uncommitted, so the
// partition's next owner replays them.
//
// Order: while a record awaits its retry, routing holds (see holdRouting), and the loop
// waits until every produce handed to the client has been answered before it takes the
// queue, so the queue holds every failure, in the order the client failed them, which
// for one output partition is the order they were produced; the records are produced
// again in that order. When a produce of its own fails meanwhile, the rest waits behind
// it. So one key's records keep their input order on its output topic through retries,
// save one case: a batch the broker refuses for good is reported by franz-go on its own
// goroutine, after records routed meanwhile may have been sent in a later batch to the
// same partition; the refused batch's records, produced again alone, land after those.
// Nothing in the client holds a partition's later batches back until the gate has heard.
func (c *Consumer) retryLoop(ctx context.Context) {
	// Wall time: it paces a log.
	logs := throttle.NewEvery(retryLogEvery, nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.retry.wake:
		}
		first, n, transient, brokerErr := c.retry.peek()
		if n == 0 {
			continue
		}
		switch {
		case transient && brokerErr == nil:
			// Cut short by a rebalance or the shutdown's grace, as every gate's first
			// rebalance does: produced again, nothing for an operator to see.
			c.log.Debug("produces cut short by their routing context ending; producing them again", "records", n)
		case transient:
			if ok, unlogged := logs.Allow(); ok {
				msg := "produce failed; retrying, and not committing past the failed records"
				if c.ruleTopicGone(brokerErr.out.Topic, brokerErr.err) {
					// Not retried to it: retryRecord sends a missing rule topic's records
					// to overflow (a review read "retrying" of records that went there).
					msg = "produce to a missing rule topic failed; its records go to the overflow topic instead (gate-rule-topic-missing), and nothing is committed past them until written there"
				}
				c.log.Warn(msg,
					"records", n, "topic", brokerErr.out.Topic, "partition", brokerErr.out.Partition, "attempt", brokerErr.attempts+1, "err", brokerErr.err,
					"retries_unlogged", unlogged)
			}
		}
		if transient {
			t := time.NewTimer(c.backoff(int(first.attempts)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if c.quiesce(ctx) != nil {
			return
		}
		c.redeliver(ctx, inReadOrder(c.retry.take()))
	}
}

// inReadOrder sorts items by input partition and offset, the order they were read and
// first produced in (one routing goroutine a partition; a key's records are in one
// partition), keeping it for records of equal place. The queue holds them in the order
// the client failed them, which is that order for one output partition but for a record
// the client failed without buffering it: a routing context cancelled by a rebalance
// fails a record waiting in Produce on a full buffer at once, and the record buffered
// before it, of the same key, only at its next attempt; redelivered in that order, the
// key's records were written out of order, both committed (a review).
func inReadOrder(items []*failed) []*failed {
	slices.SortStableFunc(items, func(a, b *failed) int {
		return cmp.Or(cmp.Compare(a.in.Partition, b.in.Partition), cmp.Compare(a.in.Offset, b.in.Offset))
	})
	return items
}

// quiesce waits until every record handed to the client has been answered.
func (c *Consumer) quiesce(ctx context.Context) error {
	return waitUntil(ctx, func() bool { return c.outstanding.Load() == 0 })
}

// redeliver produces items again, in order (see retryLoop).
func (c *Consumer) redeliver(ctx context.Context, items []*failed) {
	mark := c.retry.pushes.Load()
	for i, f := range items {
		if f.b.p.givenUp() {
			f.b.givenUp.Add(1)
			c.retryDone() // the partition's new owner replays it, or it stopped before it
			continue
		}
		if f.stage == stageUndeliverable {
			c.undeliverable(f)
			continue
		}
		if c.retry.pushes.Load() != mark {
			// A record produced in this round failed: the rest follows it.
			if c.quiesce(ctx) == nil {
				c.retry.requeue(items[i:])
			}
			return
		}
		// Refused in its batch (the first refusal) and known by now to be refused alone
		// too: its dead letter, in this round's batch rather than a round trip alone.
		c.deadLetterUnsent(f)
		f.alone = f.isolate
		if f.alone {
			// Alone: what this round produced before it must be answered first, and
			// when one of those failed meanwhile, this record follows it into the next
			// round, as above (sent now, it went ahead of the failed one's retry).
			if c.quiesce(ctx) != nil {
				return
			}
			if c.retry.pushes.Load() != mark {
				c.retry.requeue(items[i:])
				return
			}
		}
		if f.b.p.givenUp() {
			// Revoked (or stopped) while this round waited: given up, as above, before
			// its record is built (a rule's missing topic counted for it).
			f.b.givenUp.Add(1)
			c.retryDone()
			continue
		}
		f.out = *c.retryRecord(f)
		f.attempts++
		c.m.retries.Inc()
		alone := f.alone
		c.produce(f) // f may be acknowledged, and its slab reused, before this returns
		if alone {
			// Nothing else is sent until the broker has answered for it alone.
			if c.quiesce(ctx) != nil {
				return
			}
		}
	}
}

// holdRouting is called by a routing goroutine while records await a retry: it waits
// until they are acknowledged, so that no record overtakes them on its output
// partition. It returns false when routing must stop instead: p was revoked or
// stopped, or ctx (the poll's routing) ended: shutdown, or a rebalance waiting.
func (c *Consumer) holdRouting(ctx context.Context, p *partition) bool {
	err := waitUntil(ctx, func() bool {
		return c.retry.pending.Load() == 0 || p.gone.Load() || p.stopped.Load() || c.runCtx.Err() != nil
	})
	return err == nil && !p.gone.Load() && !p.stopped.Load() && c.runCtx.Err() == nil
}

// backoffCap is the longest delay before the retry after attempts retries: it doubles
// from retryMinBackoff up to retryMaxBackoff.
func backoffCap(attempts int) time.Duration {
	d := retryMinBackoff << min(attempts, 10)
	return min(d, retryMaxBackoff)
}

// backoff is the delay before the retry after attempts retries: full jitter, uniform in
// [0, backoffCap(attempts)], drawn from c's jitter source.
func (c *Consumer) backoff(attempts int) time.Duration {
	limit := int64(backoffCap(attempts))
	d := c.cfg.Jitter(limit + 1)
	return time.Duration(min(max(d, 0), limit))
}

// deadLetterUnsent makes f, a record as routed, its dead letter when it has no key and
// its topic is known to refuse such a record (compacted: knownRefusal), as a refusal of
// it alone would (advance): the same stage, reason, gate-error-detail (the topic and
// error, which says why), rerouted count and log line, without the round trips of a
// produce refused in its batch and again alone. The first refusal still takes those:
// it is how a topic made compacted at runtime is found (logRerouted). It reports
// whether f was made a dead letter. With exactly-once the rerouted count waits for its
// transaction to commit (onProducedTxn, countCommitted): a transaction aborted routes it again.
func (c *Consumer) deadLetterUnsent(f *failed) bool {
	if f.out.Key != nil || f.stage != stageRouted {
		return false
	}
	err := c.knownRefusal(f.out.Topic)
	if err == nil {
		return false
	}
	topic := f.out.Topic
	f.out = *c.deadLetterRecord(f.in, topic, err, stageDeadLetter, refusedBefore(f.in, &f.out))
	f.err, f.stage, f.isolate, f.moved = err, stageDeadLetter, false, false
	if !c.exactlyOnce() {
		c.m.countRerouted(stageDeadLetter)
	}
	c.logRerouted(topic, err)
	return true
}

// retryRecord returns the record to produce for f's next attempt: the same record, or
// the dead letter of its new stage when it moved.
func (c *Consumer) retryRecord(f *failed) *kgo.Record {
	if f.moved {
		f.moved = false
		return c.deadLetterRecord(f.in, f.out.Topic, f.err, int(f.stage), refusedBefore(f.in, &f.out))
	}
	if w := c.cfg.RuleTopics; w != nil && w.Missing(f.out.Topic) {
		// A rule's topic found missing: to overflow, as the router now sends its records
		// (ruletopics.go); or one no rule in use sends to any more, deleted with its rules
		// (produceProblem marks it, TopicWatch.RetiredGone).
		if rc, ok := c.router.(interface{ CountRuleTopicMissing(rule, topic string) }); ok {
			for _, h := range f.out.Headers {
				if h.Key == route.HeaderOverflowRule {
					rc.CountRuleTopicMissing(string(h.Value), f.out.Topic)
				}
			}
		}
		// Where the router puts it: after the overflow headers, before the rules' tags.
		at := len(f.out.Headers)
		for at > 0 && f.out.Headers[at-1].Key == route.HeaderTag {
			at--
		}
		hdrs := slices.Insert(slices.Clip(f.out.Headers), at, kgo.RecordHeader{Key: route.HeaderRuleTopicMissing, Value: []byte(f.out.Topic)})
		return &kgo.Record{Topic: w.Fallback(), Key: f.out.Key, Value: f.out.Value, Headers: hdrs, Timestamp: f.out.Timestamp}
	}
	return &kgo.Record{Topic: f.out.Topic, Key: f.out.Key, Value: f.out.Value, Headers: f.out.Headers, Timestamp: f.out.Timestamp}
}

// deadLetterRecord returns what to produce for in once topic has rejected it for good
// with err. At stage 1 that is a dead letter with reason "rejected"; at stage 2 (the
// dead-letter topic rejected it too: it is too large for any topic) the same without its
// value (and without its headers if they are large), which stay readable in the input
// topic at the offset the gate-source header gives: a record the broker can never accept
// must not stop its partition for good. before, when topic is the dead-letter topic and
// the record refused there was already a dead letter (see refusedBefore), is what that
// one said, kept ahead of this refusal in gate-error-detail.
//
// Either way the dead letter is stamped with the current time, the input's timestamp
// kept in the gate-original-timestamp header (Unix milliseconds): a broker that
// validates timestamps (message.timestamp.after.max.ms and before.max.ms, Kafka 3.6)
// may have refused the record for its timestamp, and would refuse a copy bearing it.
func (c *Consumer) deadLetterRecord(in *kgo.Record, topic string, err error, stage int, before string) *kgo.Record {
	detail := fmt.Sprintf("topic %s rejected the record: %v", topic, err)
	if before != "" {
		detail = before + "; then " + detail
	}
	// Counted once the broker takes it (onProduced, onProducedTxn), not here.
	r := c.router.DeadLetter(in, "rejected", detail)
	stampNow(r, in, c.clock.Now())
	if stage >= 2 {
		return c.strip(in, r)
	}
	return r
}

// strip returns r, in's dead letter, without its value, and without in's headers when
// they are large (see deadLetterRecord).
func (c *Consumer) strip(in, r *kgo.Record) *kgo.Record {
	// The input's headers stay when they are small (ids and trace context are what an
	// operator looks for); thousands of them, or huge ones, go with the value. Counted
	// as encoded: each header's two lengths too, most of the size of thousands of tiny ones.
	// Small against the dead-letter topic's own batch limit (batchlimit.go), which its
	// max.message.bytes may set far below GATE_KAFKA_MAX_MESSAGE_BYTES.
	var hb int
	for _, h := range in.Headers {
		hb += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	dropped := 0
	// DeadLetter appends its headers, gate-error first, after those of the input it
	// keeps (all but an earlier dead letter's gate-error, gate-error-detail, gate-source).
	own := slices.IndexFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == route.HeaderError })
	if hb > int(c.batchMaxBytes(r.Topic))/4 && own >= 0 {
		r.Headers = r.Headers[own:]
		dropped = len(in.Headers)
		for _, h := range in.Headers {
			if h.Key != HeaderOriginalTimestamp {
				continue
			}
			// A dead letter replayed: stampNow kept its header, dropped with the others.
			// Kept only if it is what it says, Unix milliseconds: anything else (as large
			// as the headers dropped here) is dropped too, the input's own timestamp in
			// its place, or the stripped dead letter could be refused as well.
			if _, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], h)
				dropped--
			} else {
				r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{
					Key: HeaderOriginalTimestamp, Value: strconv.AppendInt(nil, in.Timestamp.UnixMilli(), 10),
				})
			}
			break
		}
	}
	r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{
		Key:   HeaderDropped,
		Value: []byte("value_bytes=" + strconv.Itoa(len(in.Value)) + " headers=" + strconv.Itoa(dropped)),
	})
	r.Value = nil
	if len(r.Key) > 1024 {
		r.Key = nil
	}
	return r
}

// refusedBefore returns, for out, a record produced for in that the broker refused for
// good, what out said of in when it was in's dead letter already (its gate-source names
// in): its gate-error-detail, after its reason unless that is rejected (whose detail
// names the topic that refused it). The dead-letter topic refusing a dead letter must not
// hide why the record is one: the output topic to fix, or the record's own fault. ""
// when out is not in's dead letter (a re-driven record carries an earlier one's headers,
// naming another offset).
func refusedBefore(in, out *kgo.Record) string {
	var reason, detail, source []byte
	for _, h := range out.Headers {
		switch h.Key {
		case route.HeaderError:
			reason = h.Value
		case route.HeaderErrorDetail:
			detail = h.Value
		case route.HeaderSource:
			source = h.Value
		}
	}
	if reason == nil || string(source) != string(route.AppendSource(nil, in)) {
		return ""
	}
	if string(reason) == route.ReasonRejected {
		return string(detail)
	}
	return "dead-lettered " + string(reason) + " (" + string(detail) + ")"
}

// varintLen is the size of n encoded as a Kafka record's lengths are: a zigzag varint.
func varintLen(n int) int {
	l := 1
	for v := uint64(n) << 1; v >= 0x80; v >>= 7 {
		l++
	}
	return l
}

// HeaderOriginalTimestamp carries, on a dead letter stamped anew, the input record's
// timestamp in Unix milliseconds.
const HeaderOriginalTimestamp = "gate-original-timestamp"

// HeaderDropped marks a dead letter sent without its value (and maybe its headers and
// key): too large for the dead-letter topic as it was. It says what was left out.
const HeaderDropped = "gate-dropped"

// GateHeader reports whether key is a header the gate writes on the records it produces:
// the router's (route.Header*) and those of a dead letter refused or stripped here. One
// list beside the last of them, for what takes a record written by the gate back to the
// input (gate redrive), which must leave these out and keep a producer's own gate-* ones.
func GateHeader(key string) bool {
	return route.OwnHeader(key) || key == HeaderOriginalTimestamp || key == HeaderDropped
}

// stampNow gives r the timestamp now, keeping in's in a header (once).
func stampNow(r, in *kgo.Record, now time.Time) {
	for _, h := range r.Headers {
		if h.Key == HeaderOriginalTimestamp {
			r.Timestamp = now
			return
		}
	}
	r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{
		Key: HeaderOriginalTimestamp, Value: strconv.AppendInt(nil, in.Timestamp.UnixMilli(), 10),
	})
	r.Timestamp = now
}

// rerouteLogEvery bounds how often records rerouted to dead letter are said, per
// topic and error (logRerouted).
const rerouteLogEvery = time.Minute

// rerouteLog paces the warnings of logRerouted, one pace per topic and error. It is
// safe for concurrent use.
type rerouteLog struct {
	mu    sync.Mutex
	paces map[string]*throttle.Every
}

// allow reports whether to say a record topic refused with the error named reason, and
// how many were rerouted since the last line (this one among them).
func (l *rerouteLog) allow(topic, reason string) (bool, int) {
	l.mu.Lock()
	key := topic + "\x00" + reason
	e := l.paces[key]
	if e == nil {
		if l.paces == nil {
			l.paces = map[string]*throttle.Every{}
		}
		e = throttle.NewEvery(rerouteLogEvery, nil) // wall time: it paces a log
		l.paces[key] = e
	}
	l.mu.Unlock()
	ok, unlogged := e.Allow()
	return ok, unlogged + 1
}

// logRerouted warns that topic refused a record for good with err and the gate rerouted
// it to the dead-letter topic (stripped, when topic is that one), at most once a minute
// per topic and error, with the count since the line before: a topic refusing every
// record (too small a max.message.bytes, compacted, narrow timestamp bounds) would
// otherwise only show in gate_records_rerouted_total.
func (c *Consumer) logRerouted(topic string, err error) {
	if ok, n := c.rerouteLog.allow(topic, errorName(err)); ok {
		if c.refusedKeyless(topic, err) {
			// Likely made compacted since the last read of its settings: read them now,
			// so that the gate is not ready, the topic named (checkCompacted), within a
			// round trip rather than at the next read, up to TopicConfigInterval later.
			// Paced with the line: at most once a minute a topic.
			c.rereadTopicsSoon()
		}
		c.log.Warn("kafka: an output topic refuses records for good; they go to the dead-letter topic (reason rejected, stripped of their value when the dead-letter topic refuses them; the topic and error in gate-error-detail): check the topic's settings if it goes on",
			"topic", topic, "err", err, "records", n)
	}
}

// refusedKeyless reports a refusal (err) by topic, written without keys, that a
// compacted topic gives a record without a key.
func (c *Consumer) refusedKeyless(topic string, err error) bool {
	return c.keyless(topic) && (errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage))
}

// rereadTopicsSoon asks the output watch to read the topics' settings again now
// (rereadBatchLimits); a read already asked for is not asked again.
func (c *Consumer) rereadTopicsSoon() {
	select {
	case c.rereadTopics <- struct{}{}:
	default:
	}
}

// rejected reports a produce error that retrying the same record cannot cure.
func rejected(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
