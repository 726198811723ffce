package helm

import (
	"bytes"
	"flag"
	"log/slog"
	"os"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

var updateComposeAlerts = flag.Bool("update-compose-alerts", false, "rewrite ../compose/alerts.yml from the chart")

// composeAlerts is ../compose/alerts.yml: the chart's alerts for the compose stack's
// Prometheus, selecting the gates by their scrape job and the namespace prometheus.yml's
// relabelling gives them (absent(), GateFleetAbsent, keeps only its equality matchers) and
// without GateNotReady and GateReplicasUnavailable, which need kube-state-metrics.
const composeAlerts = "../compose/alerts.yml"

const composeAlertsHeader = `# The chart's alerts (deploy/helm/capture-gate/templates/prometheusrule.yaml), rendered
# for docker-compose.yml's Prometheus: the gates selected by namespace="compose", job="gate"
# (the namespace its relabelling sets, which GateFleetAbsent's absent() keeps), GateNotReady and
# GateReplicasUnavailable left out (they need kube-state-metrics). Generated: go test ./deploy/helm -run
# TestComposeAlertRules -update-compose-alerts (from deploy/helm: go test -run ... ./...).
`

// TestComposeAlertRules: the compose stack's Prometheus loads the same alerts as the chart
// installs, kept in step by this test.
func TestComposeAlertRules(t *testing.T) {
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t,
		`prometheusRule: {enabled: true, selector: 'namespace="compose", job="gate"', alerts: {GateNotReady: {enabled: false, for: 10m, severity: warning}, GateReplicasUnavailable: {enabled: false, for: 15m, severity: warning}}}`))
	_, spec := promRule(t, vals)
	want := append([]byte(composeAlertsHeader), spec...)
	if _, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler)); len(errs) > 0 {
		t.Fatalf("compose alerts do not load: %v", errs)
	}
	if *updateComposeAlerts {
		if err := os.WriteFile(composeAlerts, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(composeAlerts)
	if err != nil {
		t.Fatalf("%v (generate it with -update-compose-alerts)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the chart's alerts: run go test -run TestComposeAlertRules -update-compose-alerts in deploy/helm", composeAlerts)
	}
}
