package helm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	engine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
)

// outLabels returns the labels the series of e's result keep: all (whatever its selectors
// had), or only those named (all false). Enough of PromQL for the alerts: selectors,
// aggregations with by or without, functions, binary operators with on or ignoring.
func outLabels(e parser.Expr) (all bool, keep []string) {
	switch n := e.(type) {
	case *parser.VectorSelector:
		return true, nil
	case *parser.MatrixSelector:
		return outLabels(n.VectorSelector)
	case *parser.SubqueryExpr:
		return outLabels(n.Expr)
	case *parser.ParenExpr:
		return outLabels(n.Expr)
	case *parser.UnaryExpr:
		return outLabels(n.Expr)
	case *parser.StepInvariantExpr:
		return outLabels(n.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return false, nil
	case *parser.AggregateExpr:
		if n.Without {
			all, keep := outLabels(n.Expr)
			return all, slices.DeleteFunc(keep, func(l string) bool { return slices.Contains(n.Grouping, l) })
		}
		return false, n.Grouping
	case *parser.Call:
		switch n.Func.Name {
		case "absent", "absent_over_time":
			// the equality matchers' labels, and no other
			var vs *parser.VectorSelector
			parser.Inspect(n.Args[0], func(c parser.Node, _ []parser.Node) error {
				if v, ok := c.(*parser.VectorSelector); ok && vs == nil {
					vs = v
				}
				return nil
			})
			for _, m := range vs.LabelMatchers {
				if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
					keep = append(keep, m.Name)
				}
			}
			return false, keep
		case "time", "vector", "scalar", "pi":
			return false, nil
		case "histogram_quantile":
			all, keep := outLabels(n.Args[1])
			return all, slices.DeleteFunc(keep, func(l string) bool { return l == "le" })
		}
		for _, a := range n.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				return outLabels(a)
			}
		}
		return false, nil
	case *parser.BinaryExpr:
		lt, rt := n.LHS.Type() == parser.ValueTypeVector, n.RHS.Type() == parser.ValueTypeVector
		switch {
		case lt && !rt:
			return outLabels(n.LHS)
		case rt && !lt:
			return outLabels(n.RHS)
		case !lt && !rt:
			return false, nil
		}
		la, lk := outLabels(n.LHS)
		if n.Op == parser.LOR {
			// either side's series
			ra, rk := outLabels(n.RHS)
			switch {
			case la && ra:
				return true, nil
			case la:
				return false, rk
			case ra:
				return false, lk
			}
			return false, slices.DeleteFunc(lk, func(l string) bool { return !slices.Contains(rk, l) })
		}
		if n.Op.IsSetOperator() || (n.Op.IsComparisonOperator() && !n.ReturnBool) {
			return la, lk // the left side's series, filtered
		}
		if m := n.VectorMatching; m != nil && m.Card == parser.CardOneToOne && m.On {
			return false, m.MatchingLabels
		}
		return la, lk
	}
	return true, nil
}

var labelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// checkAlertLabels: every {{ $labels.x }} of an alert's annotations is a label its
// expression keeps, so that it does not render empty.
func checkAlertLabels(t *testing.T, where string, spec []byte) {
	t.Helper()
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", where, errs)
	}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			e, err := promql.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %s: %v", where, r.Alert, err)
				continue
			}
			n++
			all, keep := outLabels(e)
			if all {
				continue
			}
			for k, a := range r.Annotations {
				for _, m := range labelRef.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(keep, m[1]) {
						t.Errorf("%s: %s's %s names $labels.%s, which its expression does not keep (it keeps %v): %s", where, r.Alert, k, m[1], keep, r.Expr)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("%s: only %d alerts", where, n)
	}
}

// TestAlertAnnotationsNameKeptLabels: an alert's summary and description name the pod,
// namespace, partition or Redis instance it concerns with {{ $labels.x }}, which renders
// empty unless the expression keeps that label (a sum by, an absent() of a matcher).
// Before, the compose stack's GateFleetAbsent, absent(up{job="gate"}), said "no gate ...
// is scraped ()": absent() keeps only its selector's equality matchers, and the compose
// selector had no namespace.
func TestAlertAnnotationsNameKeptLabels(t *testing.T) {
	for _, f := range []string{"testdata/defaults.yaml", "testdata/operations.yaml"} {
		vals := readValues(t, f)
		if f == "testdata/defaults.yaml" {
			vals = mergeValues(vals, mustParse(t, "prometheusRule: {enabled: true}"))
		}
		_, spec := promRule(t, vals)
		checkAlertLabels(t, f, spec)
	}
	b, err := os.ReadFile(composeAlerts)
	if err != nil {
		t.Fatal(err)
	}
	checkAlertLabels(t, composeAlerts, b)
}

// TestOutLabels pins outLabels on the shapes the alerts use.
func TestOutLabels(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (namespace, pod) (x{a="1"}) > 60`:                                                                  {"namespace", "pod"},
		`absent(up{namespace="n", pod=~"p.*"})`:                                                                    {"namespace"},
		`sum by (namespace) (rate(a[5m])) / sum by (namespace) (rate(b[5m])) > 0.1`:                                {"namespace"},
		`(max by (namespace, pod, rule) (a) == 0) and on (namespace, pod, rule) (sum by (namespace, pod) (b) > 1)`: {"namespace", "pod", "rule"},
		`histogram_quantile(0.99, sum by (namespace, pod, le) (rate(b[5m])))`:                                      {"namespace", "pod"},
		`time() - max by (pod) (a)`:                                                                                {"pod"},
	} {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			t.Fatal(err)
		}
		all, got := outLabels(e)
		if all || !slices.Equal(got, want) {
			t.Errorf("outLabels(%s) = %v %v, want %v", expr, all, got, want)
		}
	}
}

// TestFleetAbsentAlertNamesTheNamespace: GateFleetAbsent, absent(up{<selector>}), fires
// with the labels of its selector's equality matchers only. With a prometheusRule.selector
// that has no namespace matcher (job="ingest/gate-capture-gate", as values.yaml suggests)
// it fired with no namespace label, which Alertmanager routes by, and said "no gate of
// gate-capture-gate is scraped ()". It carries the release's namespace, and says it; a
// selector's own namespace matcher is the alert's namespace, as before.
func TestFleetAbsentAlertNamesTheNamespace(t *testing.T) {
	for _, tc := range []struct{ selector, want string }{
		{``, "ingest"},
		{`job="ingest/gate-capture-gate"`, "ingest"},
		{`job=~"ingest/gate-.*", namespace=~"ing.*"`, "ingest"},
		{`namespace="ingest-b", job="gate"`, "ingest-b"},
	} {
		vals := mergeValues(readValues(t, "testdata/defaults.yaml"),
			mustParse(t, fmt.Sprintf("prometheusRule: {enabled: true, selector: %q}", tc.selector)))
		u, _ := promRule(t, vals)
		var rule map[string]any
		for _, g := range u.Object["spec"].(map[string]any)["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				if r := r.(map[string]any); r["alert"] == "GateFleetAbsent" {
					rule = r
				}
			}
		}
		if rule == nil {
			t.Fatalf("selector %q: no GateFleetAbsent", tc.selector)
		}
		// No gate scraped: the alert fires, with its series' labels and the rule's over them,
		// as Prometheus labels an alert.
		fired := queryAt(t, rule["expr"].(string), "  up{namespace=\"elsewhere\", job=\"other\"} 1x10\n", 5)[0]
		if len(fired) != 1 {
			t.Fatalf("selector %q: GateFleetAbsent (%s) returned %d series with no gate scraped, want 1", tc.selector, rule["expr"], len(fired))
		}
		lbls := fired[0].Metric.Map()
		for k, v := range rule["labels"].(map[string]any) {
			lbls[k] = fmt.Sprint(v)
		}
		if lbls["namespace"] != tc.want {
			t.Errorf("selector %q: GateFleetAbsent fires with labels %v, want namespace=%q", tc.selector, lbls, tc.want)
		}
		// Its description as Prometheus expands it, from the series' labels (not the rule's).
		data := template.AlertTemplateData(fired[0].Metric.Map(), nil, "", engine.Sample{F: 1})
		text := "{{$labels := .Labels}}{{$value := .Value}}" + rule["annotations"].(map[string]any)["description"].(string)
		desc, err := template.NewTemplateExpander(context.Background(), text, "GateFleetAbsent", data, 0, nil, nil, nil).Expand()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(desc, "("+tc.want+")") {
			t.Errorf("selector %q: GateFleetAbsent's description does not name namespace %s: %s", tc.selector, tc.want, desc)
		}
	}
	// prometheusRule.alertLabels' own namespace is the alert's, written once.
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"),
		mustParse(t, "prometheusRule: {enabled: true, selector: 'job=\"gate\"', alertLabels: {namespace: oncall}}"))
	_, spec := promRule(t, vals)
	if n := strings.Count(string(spec), "namespace: oncall"); n != len(allAlerts) || strings.Contains(string(spec), "namespace: ingest") {
		t.Errorf("alertLabels {namespace: oncall}: %d alerts labelled so (want %d), or another namespace label:\n%s", n, len(allAlerts), spec)
	}
}
