package consume

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// failed is one record on its way to the broker, with what the gate needs when the
// broker answers; it is queued for a retry when its produce fails. The output record is
// its first field, so the one promise function the consumer hands franz-go finds the
// failed from the *kgo.Record it is given (see onProduced): one allocation per record
// for the record and its state, and none for a closure.
//
// With exactly-once delivery it carries a record produced in a transaction: b is nil,
// and a failure aborts the transaction rather than being retried.
type failed struct {
	out      kgo.Record // must stay the first field
	b        *batch
	in       *kgo.Record
	err      error
	attempts int // produces retried so far
	// stage counts how far a record the broker rejects for good has been rerouted:
	// 0 as routed, 1 to the dead-letter topic, 2 to it without its value.
	stage int
}

// retryQueue holds failed records until the retry loop produces them again.
type retryQueue struct {
	mu    sync.Mutex
	items []*failed
	wake  chan struct{}
	// pending counts records that failed and are not yet acknowledged: polling waits
	// for it to reach zero.
	pending atomic.Int64
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
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// done marks a retried record acknowledged (or abandoned).
func (q *retryQueue) done() { q.pending.Add(-1) }

func (q *retryQueue) take() []*failed {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// waitIdle returns once no record is pending a retry, or with ctx's error.
func (q *retryQueue) waitIdle(ctx context.Context) error {
	if q.pending.Load() == 0 {
		return ctx.Err()
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for q.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// retryLoop produces failed records again, in the order they failed, after a backoff
// that grows with their attempts. It stops when ctx ends; records still queued then are
// abandoned uncommitted, so the partition's next owner replays them.
func (c *Consumer) retryLoop(ctx context.Context) {
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.retry.wake:
		}
		items := c.retry.take()
		if len(items) == 0 {
			continue
		}
		first := items[0]
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			c.log.Warn("produce failed; retrying, and not committing past the failed records",
				"records", len(items), "topic", first.out.Topic, "attempt", first.attempts+1, "err", first.err)
		}
		t := time.NewTimer(backoff(first.attempts))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for _, f := range items {
			if f.b.p.gone.Load() {
				c.retry.done() // the partition's new owner replays it
				continue
			}
			f.out = *c.retryRecord(f)
			f.attempts++
			c.m.retries.Inc()
			c.produce(f)
		}
	}
}

func backoff(attempts int) time.Duration {
	d := retryMinBackoff << min(attempts, 10)
	return min(d, retryMaxBackoff)
}

// retryRecord returns the record to produce for f's next attempt: the same record, or,
// when the broker rejected it for good, the next stage of deadLetterRecord.
func (c *Consumer) retryRecord(f *failed) *kgo.Record {
	if !rejected(f.err) || f.stage >= 2 {
		return &kgo.Record{Topic: f.out.Topic, Key: f.out.Key, Value: f.out.Value, Headers: f.out.Headers, Timestamp: f.out.Timestamp}
	}
	f.stage++
	c.m.countRerouted(f.stage)
	return c.deadLetterRecord(f.in, f.out.Topic, f.err, f.stage)
}

// deadLetterRecord returns what to produce for in once topic has rejected it for good
// with err. At stage 1 that is a dead letter with reason "rejected"; at stage 2 (the
// dead-letter topic rejected it too: it is too large for any topic) the same without its
// value (and without its headers if they are large), which stay readable in the input
// topic at the offset the gate-source header gives: a record the broker can never accept
// must not stop its partition for good.
func (c *Consumer) deadLetterRecord(in *kgo.Record, topic string, err error, stage int) *kgo.Record {
	detail := fmt.Sprintf("topic %s rejected the record: %v", topic, err)
	r := c.router.DeadLetter(in, "rejected", detail)
	if stage < 2 {
		return r
	}
	// The input's headers stay when they are small (ids and trace context are what an
	// operator looks for); thousands of them, or huge ones, go with the value.
	var hb int
	for _, h := range in.Headers {
		hb += len(h.Key) + len(h.Value)
	}
	dropped := 0
	if hb > int(c.cfg.MaxMessageBytes)/4 && len(r.Headers) >= len(in.Headers) {
		r.Headers = r.Headers[len(in.Headers):] // DeadLetter appends its headers after the input's
		dropped = len(in.Headers)
	}
	r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{
		Key:   "gate-dropped",
		Value: []byte("value_bytes=" + strconv.Itoa(len(in.Value)) + " headers=" + strconv.Itoa(dropped)),
	})
	r.Value = nil
	if len(r.Key) > 1024 {
		r.Key = nil
	}
	return r
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
