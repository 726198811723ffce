package helm

import (
	"os"
	"regexp"
	"testing"
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
