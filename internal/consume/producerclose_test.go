package consume

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCloseWithoutRunReleasesBothClients: at least once a Consumer holds two Kafka
// clients from New on (producer.go), and Close releases both, Run or no Run (a gate
// whose start fails after New closes it so): a client left open keeps its connections
// and goroutines, and its collectors (kprom unregisters them at close) in the registry.
func TestCloseWithoutRunReleasesBothClients(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	reg := prometheus.NewRegistry()
	_, r := env.limiterRouter(t, reg)
	c, err := New(env.ccfg, r, nil, reg, testLogger(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if c.prod == nil {
		t.Fatal("at least once, no producer's client of its own")
	}
	before := kafkaSeries(t, reg)
	for _, cl := range []string{clientGroup, clientProducer} {
		if before[cl] == 0 {
			t.Fatalf("no gate_kafka_* series of client=%q before Close: %v", cl, before)
		}
	}
	c.Close()
	if after := kafkaSeries(t, reg); len(after) != 0 {
		t.Errorf("gate_kafka_* series left after Close, by client: %v (before: %v)", after, before)
	}
}

// kafkaSeries counts the gate_kafka_* series gathered from reg by their client label.
func kafkaSeries(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gate_kafka_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "client" {
					n[l.GetValue()]++
				}
			}
		}
	}
	return n
}
