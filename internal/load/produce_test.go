package load

import (
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
		if got := counts.Produced.Load(); got != tt.want || counts.Failed.Load() != 0 {
			t.Errorf("-rate %d -duration %s: produced %d (failed %d), want %d", tt.rate, tt.duration, got, counts.Failed.Load(), tt.want)
		}
		if took < tt.duration {
			t.Errorf("-rate %d -duration %s: returned after %s", tt.rate, tt.duration, took)
		}
	}
}
