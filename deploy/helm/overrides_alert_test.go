package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// alertExpr renders the chart's alerts with vals and returns the expression of alert name.
func alertExpr(t *testing.T, vals map[string]any, name string) string {
	t.Helper()
	u, _ := promRule(t, vals)
	for _, g := range u.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if r := r.(map[string]any); r["alert"] == name {
				return r["expr"].(string)
			}
		}
	}
	t.Fatalf("no alert %s", name)
	return ""
}

// TestOverridesStaleAlertPerRule: with a rules file every rule has its own live overrides
// hash and refresher (internal/gate/rules.go), whose
// gate_overrides_last_refresh_timestamp_seconds carries its rule label. One rule's hash
// that cannot be used (an invalid entry, too many teams) leaves that rule's overrides stale
// while the others refresh; an aggregation that takes the newest timestamp of a pod's
// rules (max by (namespace, pod)) hides it. The timestamp must be aggregated per rule, or
// by its oldest (min).
func TestOverridesStaleAlertPerRule(t *testing.T) {
	vals := mergeValues(readValues(t, "testdata/rules.yaml"), mustParse(t, "prometheusRule: {enabled: true}"))
	expr := alertExpr(t, vals, "GateOverridesStale")
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Fatal(err)
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok {
			return nil
		}
		names, _ := metricNames(agg.Expr.String())
		if !slices.Contains(names, "gate_overrides_last_refresh_timestamp_seconds") {
			return nil
		}
		perRule := !agg.Without && slices.Contains(agg.Grouping, "rule") || agg.Without && !slices.Contains(agg.Grouping, "rule")
		if !perRule && agg.Op != parser.MIN {
			t.Errorf("GateOverridesStale takes %s of the rules' refresh timestamps (%s): a rule whose overrides are stale is hidden by a rule that refreshes", agg.Op, agg)
		}
		return nil
	})
}

// TestOverridesStaleAlertScalesWithRefresh: the alert's threshold counts refreshes
// (GATE_OVERRIDES_REFRESH, limit.overridesRefresh), as GateTickSlow counts ticks: a fixed
// 600 s fired on every healthy gate of a refresh of 15m, each cycle.
func TestOverridesStaleAlertScalesWithRefresh(t *testing.T) {
	for _, tc := range []struct{ refresh, want string }{
		{"", "> 600"}, // the default 60s
		{"15m", "> 9000"},
		{"2s", "> 20"},
	} {
		v := "prometheusRule: {enabled: true}"
		if tc.refresh != "" {
			v += "\nlimit: {overridesRefresh: " + tc.refresh + "}"
		}
		vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, v))
		if expr := alertExpr(t, vals, "GateOverridesStale"); !strings.HasSuffix(expr, tc.want) {
			t.Errorf("limit.overridesRefresh %q: GateOverridesStale %q; want it ending %q (ten refreshes)", tc.refresh, expr, tc.want)
		}
	}
}

// TestOverridesVersionRegressedAlert: a gate that read the live overrides hash at a lower
// version than the set it applied (gate_overrides_version_regressions_total: a failover to
// a replica that lacked the last writes) fires GateOverridesVersionRegressed at the first
// regression, per gate and rule, for the 15 minutes after it; a counter at rest, however
// high, does not, nor a gate that never regressed.
func TestOverridesVersionRegressedAlert(t *testing.T) {
	firesAfterAnIncrease(t, "GateOverridesVersionRegressed", `gate_overrides_version_regressions_total{%s, rule="team-user"}`)
	// Two rules' hashes of one gate: one alert each, the rule named.
	two := fmt.Sprintf("  gate_overrides_version_regressions_total{%s, rule=\"a\"} 0x4 1x30\n  gate_overrides_version_regressions_total{%s, rule=\"b\"} 0x4 2x30\n", evalPod, evalPod) + gateScraped(0, 60)
	if n := alertSeries(t, "prometheusRule: {enabled: true}", "GateOverridesVersionRegressed", two, 10); n != 2 {
		t.Errorf("two rules' hashes regressed on one gate: GateOverridesVersionRegressed fired %d alerts, want 2 (one a rule)", n)
	}
	text := alertText(t, "GateOverridesVersionRegressed", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p", "rule": "team-user"}, 1)
	for _, want := range []string{"gate-capture-gate-7d9f8b6c5-x2k4p", "rule team-user", "gate overrides -rule team-user list", "older"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateOverridesVersionRegressed says\n%s\nwant it to say %q", text, want)
		}
	}
}
