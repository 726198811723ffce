package helm

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestReadmeListsEveryAlert: the chart README's alert table (## Alerts) has a row for every
// alert the PrometheusRule defines, so that an operator reading it knows each one.
func TestReadmeListsEveryAlert(t *testing.T) {
	b, err := os.ReadFile("capture-gate/README.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(Gate[A-Za-z]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		listed[m[1]] = true
	}
	for _, a := range allAlerts {
		if !listed[a] {
			t.Errorf("capture-gate/README.md's alert table has no row for %s", a)
		}
	}
}

// TestValuesDocumentEveryAlert: values.yaml's prometheusRule.alerts has an entry for every
// alert the chart defines (and no other), each with a `# --` comment saying when it fires
// and what its threshold's unit is. TestReadmeValues checks prometheusRule.alerts as one
// value, so an alert without its comment passed it.
func TestValuesDocumentEveryAlert(t *testing.T) {
	doc := valuesNode(t)
	child := func(n *yaml.Node, key string) *yaml.Node {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	alerts := child(child(doc.Content[0], "prometheusRule"), "alerts")
	if alerts == nil || alerts.Kind != yaml.MappingNode {
		t.Fatal("values.yaml has no prometheusRule.alerts map")
	}
	var inValues []string
	for i := 0; i+1 < len(alerts.Content); i += 2 {
		key := alerts.Content[i]
		inValues = append(inValues, key.Value)
		if !slices.Contains(allAlerts, key.Value) {
			t.Errorf("values.yaml: prometheusRule.alerts.%s is not an alert the chart defines (allAlerts)", key.Value)
		}
		if docComment(key) == "" {
			t.Errorf("values.yaml: prometheusRule.alerts.%s has no `# --` comment", key.Value)
		}
	}
	for _, a := range allAlerts {
		if !slices.Contains(inValues, a) {
			t.Errorf("values.yaml: prometheusRule.alerts has no entry for %s", a)
		}
	}
}
