package consume

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// jitterConsumer is a Consumer built by New with cfg's Jitter (nil: the default source).
func jitterConsumer(t *testing.T, jitter func(int64) int64) *Consumer {
	t.Helper()
	c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: "in", GroupID: "g", Jitter: jitter}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Delays are full jitter: within [0, cap] for each attempt, the cap doubling to
// retryMaxBackoff; two consumers (two gates) draw different delays.
func TestBackoffFullJitter(t *testing.T) {
	a, b := jitterConsumer(t, nil), jitterConsumer(t, nil)
	same := 0
	const draws = 200
	for i := range draws {
		attempts := i % 12
		limit := backoffCap(attempts)
		da, db := a.backoff(attempts), b.backoff(attempts)
		for _, d := range []time.Duration{da, db} {
			if d < 0 || d > limit {
				t.Fatalf("attempt %d: delay %s outside [0, %s]", attempts, d, limit)
			}
		}
		if da == db {
			same++
		}
	}
	if same == draws {
		t.Errorf("two consumers drew the same %d delays: they would retry in lockstep", draws)
	}
	if got := backoffCap(0); got != retryMinBackoff {
		t.Errorf("cap after 0 retries %s, want %s", got, retryMinBackoff)
	}
	if got := backoffCap(3); got != 8*retryMinBackoff {
		t.Errorf("cap after 3 retries %s, want %s", got, 8*retryMinBackoff)
	}
	if got := backoffCap(40); got != retryMaxBackoff {
		t.Errorf("cap after 40 retries %s, want %s", got, retryMaxBackoff)
	}
}

// The delays spread over the whole range, not bunched at one end.
func TestBackoffSpread(t *testing.T) {
	c := jitterConsumer(t, nil)
	limit := backoffCap(20)
	var low, high int
	for range 1000 {
		d := c.backoff(20)
		if d < limit/4 {
			low++
		}
		if d > 3*limit/4 {
			high++
		}
	}
	if low < 150 || high < 150 {
		t.Errorf("of 1000 delays up to %s, %d in the lowest quarter and %d in the highest: want about 250 each", limit, low, high)
	}
}

// An injected source decides the delay; out-of-range draws are clamped to [0, cap].
func TestBackoffInjectedJitter(t *testing.T) {
	var asked []int64
	draw := int64(0)
	c := jitterConsumer(t, func(n int64) int64 { asked = append(asked, n); return draw })
	if d := c.backoff(1); d != 0 {
		t.Errorf("draw 0: delay %s, want 0", d)
	}
	if len(asked) != 1 || asked[0] != int64(backoffCap(1))+1 {
		t.Errorf("asked for %v, want [cap+1] = [%d]", asked, int64(backoffCap(1))+1)
	}
	draw = int64(time.Hour)
	if d := c.backoff(1); d != backoffCap(1) {
		t.Errorf("draw above the cap: delay %s, want the cap %s", d, backoffCap(1))
	}
	draw = 42
	if d := c.backoff(2); d != 42 {
		t.Errorf("draw 42: delay %s, want 42ns", d)
	}
}

// A retry queue holding only produces cut short by their routing context (a rebalance,
// as every gate's first one: the demo logged a warning at each start) names no broker
// failure to warn of; one broker error among them is named.
func TestRetryQueueTellsCancelsFromBrokerErrors(t *testing.T) {
	var q retryQueue
	q.init()
	canceled := &failed{err: fmt.Errorf("producing: %w", context.Canceled)}
	q.push(canceled)
	q.push(&failed{err: context.Canceled})
	if _, n, transient, brokerErr := q.peek(); n != 2 || !transient || brokerErr != nil {
		t.Errorf("only cancels: n %d transient %v broker error %v, want 2, true, none", n, transient, brokerErr)
	}
	broker := &failed{err: kerr.NotEnoughReplicas}
	broker.out.Topic = "accepted"
	q.push(broker)
	if first, _, _, brokerErr := q.peek(); first != canceled || brokerErr != broker {
		t.Errorf("first %p broker error %p, want %p and %p", first, brokerErr, canceled, broker)
	}
}
