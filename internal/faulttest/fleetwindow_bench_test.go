package faulttest_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// BenchmarkFleetProcessWindow checks the fidelity simulation (internal/tick
// BenchmarkFidelity) against real processes: four gate binaries in one group, the
// in-process broker, one redis-server, cap mode, a 5 s window with a threshold of 500, and
// one team offered 2 × that (200 records a second, spread over the input's partitions) for
// eight windows. The accepted records are counted per window of their timestamps (the
// producer's time, within milliseconds of the gates'); windows 3-8 are steady.
// fleet_process_worst_window is the window farthest from the threshold, ÷ threshold
// (the simulation's cap_admitted_worst_window_n4_x2). It takes about a minute: run it with
// -benchtime 1x. With more iterations worst_window is the worst of them all, mean_window
// their mean.
func BenchmarkFleetProcessWindow(b *testing.B) {
	if gateBin == "" {
		b.Skip("runs the built gate binary (not under -short)")
	}
	worst, sum, n := 1.0, 0.0, 0
	for b.Loop() {
		w, mean := fleetProcessWindow(b)
		if math.Abs(w-1) > math.Abs(worst-1) {
			worst = w
		}
		sum, n = sum+mean, n+1
	}
	b.ReportMetric(worst, "worst_window")
	b.ReportMetric(sum/float64(n), "mean_window")
}

func fleetProcessWindow(b *testing.B) (worst, mean float64) {
	const (
		window    = 5 * time.Second
		threshold = 500
		rate      = 2 * threshold / 5 // records per second: 2 × the threshold
		windows   = 8
		gates     = 4
	)
	c := faulttest.NewCluster(b, kfake.SeedTopics(8, inTopic), kfake.SeedTopics(3, outTopics...))
	rs := redistest.Start(b)
	vars := map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","),
		"GATE_REDIS_URLS":    rs.URL(),
		"GATE_HTTP_ADDR":     "127.0.0.1:0",
		"GATE_GROUP_ID":      "fleet-window",
		"GATE_LIMIT_MODE":    "cap",
		"GATE_WINDOW":        window.String(),
		"GATE_THRESHOLD":     strconv.Itoa(threshold),
		"GATE_TICK_INTERVAL": (window / 60).String(),
		"GATE_SYNC_INTERVAL": (window / 4).String(),
	}
	for i := range gates {
		faulttest.StartGate(b, gateBin, fmt.Sprintf("gate-%d", i), vars)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitGroupStable(ctx, "fleet-window", gates); err != nil {
		b.Fatalf("group not stable with %d members: %v", gates, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	// Start on a window's edge, so that windows of the timestamps are the gates' epochs.
	start := time.Now().Truncate(window).Add(window)
	time.Sleep(time.Until(start))
	const step = 10 * time.Millisecond
	per := rate * int(step) / int(time.Second)
	id := 0
	for at := start; at.Before(start.Add(windows * window)); at = at.Add(step) {
		time.Sleep(time.Until(at))
		recs := make([]*kgo.Record, per)
		for i := range recs {
			recs[i] = &kgo.Record{
				Topic:     inTopic,
				Value:     fmt.Appendf(nil, `{"team_id":"hot","seq":%d}`, id),
				Timestamp: time.Now(),
				Headers:   []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(id))}},
			}
			id++
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
			pcancel()
			b.Fatalf("producing: %v", err)
		}
		pcancel()
	}
	routed := func() int {
		n := 0
		for _, topic := range []string{accTopic, ovfTopic} {
			for _, p := range c.PartitionInfos(topic) {
				n += int(p.HighWatermark)
			}
		}
		return n
	}
	for deadline := time.Now().Add(60 * time.Second); routed() < id; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d records routed after 60 s", routed(), id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	accepted := faulttest.ReadTopics(b, c, 30*time.Second, nil, accTopic, ovfTopic)
	perWindow := make([]int, windows)
	total := 0
	for _, r := range accepted {
		total++
		if r.Topic != accTopic {
			continue
		}
		w := int(r.Timestamp.Sub(start) / window)
		if w >= 0 && w < windows {
			perWindow[w]++
		}
	}
	if total < id*9/10 {
		b.Fatalf("%d of %d records routed", total, id)
	}
	var sum float64
	for w := 2; w < windows; w++ {
		r := float64(perWindow[w]) / threshold
		sum += r
		if math.Abs(r-1) > math.Abs(worst-1) || w == 2 {
			worst = r
		}
	}
	b.Logf("accepted per window: %v (threshold %d)", perWindow, threshold)
	return worst, sum / (windows - 2)
}
