package consume

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReroutedSeriesExistAtStart: gate_records_rerouted_total's two series are scraped at
// zero from the start, as gate_records_undeliverable_total's are. A series born at its
// first value is no increase to increase() or rate(): the dashboard's "Undeliverable and
// lost records" panel showed nothing for the first records a topic refused for good.
func TestReroutedSeriesExistAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, &Consumer{}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "gate_records_rerouted_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "to" {
					got[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, to := range []string{"dead_letter", "dead_letter_stripped"} {
		if v, ok := got[to]; !ok || v != 0 {
			t.Errorf("gate_records_rerouted_total{to=%q} at start: %v (scraped: %t), want 0, scraped", to, v, ok)
		}
	}
}
