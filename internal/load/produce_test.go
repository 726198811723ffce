package load

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A run of -duration D at -rate R produces ceil(D x R) records: the first at once and one
// every 1/R after, every one due before the end, not a step's worth fewer (and, at a low
// rate, none at all).
func TestProduceRunMakesRateTimesDuration(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, tt := range []struct {
		rate     int
		duration time.Duration
		want     int64
	}{
		{rate: 1, duration: 500 * time.Millisecond, want: 1},
		{rate: 2, duration: 1200 * time.Millisecond, want: 3}, // at 0, 0.5s and 1s
		{rate: 200, duration: 500 * time.Millisecond, want: 100},
	} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		spec := DefaultSpec()
		spec.Rate, spec.Duration = tt.rate, tt.duration
		var counts Counts
		start := time.Now()
		err = Produce(t.Context(), cl, "events", spec, &counts, slog.New(slog.DiscardHandler))
		took := time.Since(start)
		cl.Close()
		if err != nil {
			t.Fatalf("-rate %d -duration %s: %v", tt.rate, tt.duration, err)
		}
		// Records the run fell behind on (a loaded machine not scheduling it) are skipped,
		// and counted: with those, the schedule's count exactly.
		if got := counts.Produced.Load() + counts.Skipped.Load(); got != tt.want || counts.Failed.Load() != 0 {
			t.Errorf("-rate %d -duration %s: produced %d (failed %d), want %d", tt.rate, tt.duration, got, counts.Failed.Load(), tt.want)
		}
		if took < tt.duration {
			t.Errorf("-rate %d -duration %s: returned after %s", tt.rate, tt.duration, took)
		}
	}
}

// After the broker stalls the load (its produce requests unanswered for a second, the
// client's buffer full, so Produce blocks), the generator catches up by at most a tenth
// of a second of records, as Produce says, and then holds -rate: not the whole second it
// missed, in a burst of ten times -rate that a gate in front of it takes for a spike.
func TestProduceAfterStallHoldsRate(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const rate = 1000
	var armed, stalled atomic.Bool
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if armed.Load() && !stalled.Swap(true) {
			c.SleepControl(func() { time.Sleep(time.Second) })
		}
		return nil, nil, false
	})
	time.AfterFunc(300*time.Millisecond, func() { armed.Store(true) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(10))
	if err != nil {
		t.Fatal(err)
	}
	spec := DefaultSpec()
	spec.Rate, spec.Duration = rate, 2500*time.Millisecond
	var counts Counts
	err = Produce(t.Context(), cl, "events", spec, &counts, slog.New(slog.DiscardHandler))
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Each record is stamped when it is produced: count them per 100 ms.
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("events"), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	perStep := map[int64]int{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for got := int64(0); got < counts.Produced.Load() && ctx.Err() == nil; {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			perStep[r.Timestamp.UnixMilli()/100]++
			got++
		})
	}
	most := 0
	for _, n := range perStep {
		most = max(most, n)
	}
	// 100 records a step at -rate, and at most another 101 of catch-up; 300 leaves
	// room for timers woken late, not for the missed second's 1000.
	if most > 300 {
		t.Errorf("-rate %d: %d records within one 100 ms after a 1 s stall, want at most 300 (produced %d)", rate, most, counts.Produced.Load())
	}
}

// A broker slower than -rate (here some 50 records a second against 1000) does not hold
// a -duration run past its end until every record of rate x duration is sent: the run
// ends about on time. Before, -duration 1s ran some 20 s, sending the backlog at its end.
func TestProduceSlowBrokerEndsOnTime(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	spec := DefaultSpec()
	spec.Rate, spec.Duration = 1000, time.Second
	var counts Counts
	start := time.Now()
	err = Produce(t.Context(), cl, "events", spec, &counts, slog.New(slog.DiscardHandler))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// What the broker could not take in time is skipped, and counted, not sent after the
	// run's end: the run's records, produced and skipped, are its schedule's, and most
	// of them were skipped (the broker takes some 50 a second). Before, all 1,000 were
	// produced, the run taking some 20 s.
	p, sk := counts.Produced.Load(), counts.Skipped.Load()
	if p+sk != 1000 || sk < 500 {
		t.Errorf("-rate 1000 -duration 1s on a broker taking 50 records/s: produced %d, skipped %d (returned after %s); want 1,000 in all, most skipped", p, sk, took.Round(time.Millisecond))
	}
}

// A broker that takes no record (every produce refused with a retriable error, as
// NOT_ENOUGH_REPLICAS while the ISR is short, so the client retries and its buffer fills)
// does not hold a -duration run past its end: the run ends, every record of its schedule
// either handed to the client or skipped. Before, Produce blocked on the full buffer and
// -duration 1s ran until Ctrl-C.
func TestProduceRefusingBrokerEndsOnTime(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(kmsg.Produce.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return faulttest.ProduceRefused(r.(*kmsg.ProduceRequest), faulttest.NotEnoughReplicas), nil, true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(10))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cl.Close)
	t.Cleanup(cancel)
	spec := DefaultSpec()
	spec.Rate, spec.Duration = 100, time.Second
	var counts Counts
	done := make(chan error, 1)
	go func() { done <- Produce(ctx, cl, "events", spec, &counts, slog.New(slog.DiscardHandler)) }()
	select {
	case <-done: // the flush's wait for acknowledgements that never come times out: an error
	case <-time.After(30 * time.Second):
		cancel() // as Ctrl-C would
		<-done
		t.Fatalf("-rate 100 -duration 1s on a broker refusing every record: still running after 30 s (sent %d, skipped %d)", counts.Sent.Load(), counts.Skipped.Load())
	}
	if got := counts.Sent.Load() + counts.Skipped.Load(); got != 100 || counts.Produced.Load() != 0 {
		t.Errorf("-rate 100 -duration 1s: sent %d, skipped %d, produced %d; want the run's 100 sent or skipped, none produced", counts.Sent.Load(), counts.Skipped.Load(), counts.Produced.Load())
	}
}

// Ctrl-C (ctx cancelled) stops making records; the ones already handed to the client are
// still sent and waited for, as at a -duration's end, not withdrawn. Before, the records
// waiting in the client's linger were cancelled and never sent: gate load's last line
// counted them as unanswered by the broker, and a run stopped before its first batch went
// out failed with "no record acknowledged ... is the broker reachable" against a healthy
// one. A linger far longer than the run makes every record wait there.
func TestProduceInterruptedSendsWhatItMade(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	spec := DefaultSpec()
	spec.Rate = 100
	var counts Counts
	done := make(chan error, 1)
	go func() { done <- Produce(ctx, cl, "events", spec, &counts, slog.New(slog.DiscardHandler)) }()
	for deadline := time.Now().Add(30 * time.Second); counts.Sent.Load() < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("20 records not made within 30 s (sent %d)", counts.Sent.Load())
		}
	}
	cancel() // Ctrl-C
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, p, f := counts.Sent.Load(), counts.Produced.Load(), counts.Failed.Load(); p != s || f != 0 {
		t.Errorf("interrupted after %d records handed to the client: produced %d, failed %d; want every one produced", s, p, f)
	}
}
