package tick

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestRotationEndLogsItsDurationOnTheLimitersClock: a team rotating identities from
// second 2 (2,000 fresh keys against a max_keys of 1,000), back under the bound a window
// later, is logged "no longer rotating" at second 121 with the duration on the limiter's
// clock, here a fake one: about two minutes. Before, the duration was time.Since the
// start, read on the wall clock against a start on the limiter's: here -1095h21m42s.
func TestRotationEndLogsItsDurationOnTheLimitersClock(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart.Add(time.Second))
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth, KeyCardinality: 1000, OnCardinality: limit.CardinalityCollapse}, clk, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	tk, err := New(l, []redis.UniversalClient{srv.Client(t)}, Config{}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	seq := 0
	rotate := func(n int) {
		for range n {
			seq++
			l.Check(fmt.Sprintf("rot:id-%d", seq), 1)
		}
	}
	tickAt := func(d time.Duration) {
		clk.Set(epochStart.Add(d))
		tk.Tick(context.Background())
	}
	rotate(2000)
	tickAt(2 * time.Second)
	tickAt(61 * time.Second)
	clk.Set(epochStart.Add(62 * time.Second))
	rotate(10)
	tickAt(121 * time.Second)
	m := regexp.MustCompile(`team no longer rotating identities.* duration=(\S+)`).FindSubmatch(logs.Bytes())
	if m == nil {
		t.Fatalf("no \"team no longer rotating identities\" line in\n%s", logs.String())
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil || d < time.Minute || d > 2*time.Minute {
		t.Errorf("rotation from second 2 to second 121 on the limiter's clock logged duration=%s, want about 2m", m[1])
	}
}
