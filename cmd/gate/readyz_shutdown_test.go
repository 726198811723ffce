package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// From the signal on, /readyz answers 503 "shutting down" while the gate drains records
// the brokers keep refusing (up to GATE_SHUTDOWN_TIMEOUT), and still once it has left the
// group. It answered 200 "ready" through the drain, then "not joined to consumer group
// … yet" (a review).
func TestReadyzSaysShuttingDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)
	refused := inputThenRefuseWrites(t, kc, 50) // the gate's records stay in flight
	g := startGate(t, withEnv(kenv, map[string]string{
		"GATE_HTTP_ADDR": "127.0.0.1:0", "GATE_REDIS_URLS": rs.URL(), "GATE_GROUP_ID": "readyz-shutdown",
		"GATE_SHUTDOWN_TIMEOUT": "8s", // the drain: long enough to ask, short of cleanup's wait
	}))
	waitFor(t, 30*time.Second, "ready, its writes refused", func() bool {
		code, _ := get(t, g.addr, "/readyz")
		return code == 200 && refused.Load() > 0
	})
	g.cancel()
	waitFor(t, 30*time.Second, "the shutdown begun", func() bool { return strings.Contains(g.stderr.String(), `"msg":"shutting down"`) })
	select {
	case <-g.done:
		t.Fatalf("stopped before its in-flight records were given up\n%s", g.stderr)
	default:
	}
	code, body := get(t, g.addr, "/readyz")
	if code != 503 || !strings.Contains(body, "shutting down") || strings.Contains(body, "yet") {
		t.Errorf("/readyz while draining: %d %q, want 503 saying it is shutting down, alone", code, body)
	}
	if code, _ := get(t, g.addr, "/healthz"); code != 200 {
		t.Errorf("/healthz while draining: %d, want 200 (the process is fine)", code)
	}
}

// inputThenRefuseWrites produces n events of ten teams to c's input topic, then has c
// refuse every produce after (retriably, NOT_ENOUGH_REPLICAS), counting them: a gate
// started on it routes them and keeps them in flight, and its shutdown waits for them.
func inputThenRefuseWrites(t *testing.T, c *kfake.Cluster, n int) *atomic.Int64 {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t%d"}`, i%10)}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := kafkaClient(t, c).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		refused.Add(1)
		return faulttest.ProduceRefused(r.(*kmsg.ProduceRequest), faulttest.NotEnoughReplicas), nil, true
	})
	return &refused
}
