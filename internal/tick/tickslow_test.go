package tick

import (
	"context"
	"math"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

// histogramQuantile is Prometheus' histogram_quantile over one histogram's cumulative
// buckets (upper bound → count, +Inf included): linear interpolation within the bucket
// the rank falls in, the first bucket's lower bound 0, and the last finite bound for a
// rank in +Inf.
func histogramQuantile(q float64, buckets map[float64]float64) float64 {
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := buckets[bounds[len(bounds)-1]]
	rank := q * total
	i := sort.Search(len(bounds), func(i int) bool { return buckets[bounds[i]] >= rank })
	if math.IsInf(bounds[i], 1) {
		return bounds[len(bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = bounds[i-1], buckets[bounds[i-1]]
	}
	return lower + (bounds[i]-lower)*(rank-below)/(buckets[bounds[i]]-below)
}

// GateTickSlow fires when histogram_quantile(0.99) of gate_limiter_tick_duration_seconds
// exceeds the tick interval (its default threshold, 1 x sync.tickInterval), and the
// dashboard's tick panel plots the same figure. A Redis that hangs cuts every tick at its
// deadline, 3/4 of the interval: within it. Before, the buckets were 0.5 ms x 2^k, none
// at the interval: ticks of 150 ms against a 200 ms interval (or 0.6 s against 1 s) fell
// in the bucket up to 256 ms (1.024 s), and the interpolation put their p99 at 255 ms (1.02
// s): the alert said the ticks outlasted their interval when none had.
func TestTickSlowQuantileWithinTheInterval(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // a Redis that hangs: it takes connections and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	clients, err := Dial([]string{"redis://" + ln.Addr().String()}, RedisOptions{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clients[0].Close() })
	clk := clock.NewFake(epochStart)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000, ColdWriteInterval: writeEveryTick}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	const interval = 200 * time.Millisecond
	// Eight ticks each within the interval, on a tick of their own: a loaded machine (CI
	// beside other work) once held one past it, 796 ms, a sample the quantile then rightly
	// puts over the interval. Such a run is started again, on a fresh registry, up to ten
	// times; the ticks' deadline (3/4 of the interval) is what keeps them within.
	var reg *prometheus.Registry
	var slowest time.Duration
	for attempt := 0; ; attempt++ {
		reg = prometheus.NewRegistry()
		tk, err := New(l, []redis.UniversalClient{clients[0]}, Config{TickInterval: interval}, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		slowest = 0
		for range 8 {
			l.Check("team", 1)
			clk.Advance(interval)
			start := time.Now()
			tk.Tick(context.Background())
			slowest = max(slowest, time.Since(start))
		}
		if slowest < interval {
			break
		}
		if attempt == 9 {
			t.Fatalf("in ten runs of eight ticks, a tick took as long as %s in each, not within its %s interval: the test needs them within", slowest, interval)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "gate_limiter_tick_duration_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		buckets := map[float64]float64{math.Inf(1): float64(h.GetSampleCount())}
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] = float64(b.GetCumulativeCount())
		}
		if p99 := histogramQuantile(0.99, buckets); p99 > interval.Seconds() {
			t.Errorf("%d ticks of %.3fs on average, each within its %s interval: histogram_quantile(0.99) = %.3fs, over the interval (GateTickSlow fires)",
				h.GetSampleCount(), h.GetSampleSum()/float64(h.GetSampleCount()), interval, p99)
		}
		return
	}
	t.Fatal("no gate_limiter_tick_duration_seconds")
}
