package helm

import (
	"log/slog"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
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
