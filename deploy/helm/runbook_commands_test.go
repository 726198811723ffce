package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestRunbookCommandsNameTheDeployment: a runbook command that names the chart's
// Deployment by its release (deploy/<release>…) must name it as the chart does. The
// Deployment is the release's full name, <release>-capture-gate (the NOTES print it so):
// `kubectl exec deploy/<release>` found no Deployment of a release installed as the docs
// install it (helm install gate …: deploy/gate-capture-gate), and the runbook's way to
// raise a team's limit on a chart fleet failed with NotFound; so did `kubectl describe
// deployment <release>`, the form with a space (a review).
func TestRunbookCommandsNameTheDeployment(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	objs := renderObjects(t, readValues(t, "testdata/defaults.yaml"))
	deploy := objs.typed["Deployment"][0].(*appsv1.Deployment).Name
	n := 0
	for _, cmd := range regexp.MustCompile("`(kubectl [^`]*)`").FindAllStringSubmatch(doc, -1) {
		for _, m := range regexp.MustCompile(`(?:deploy|deployment|deployments)[/ ](<release>\S*)`).FindAllStringSubmatch(cmd[1], -1) {
			n++
			if got := strings.ReplaceAll(m[1], "<release>", releaseName); got != deploy {
				t.Errorf("runbook command %q: for release %s it names Deployment %s; the chart's Deployment is %s", cmd[1], releaseName, got, deploy)
			}
		}
	}
	if n == 0 {
		t.Fatal("no `kubectl … deploy/<release>…` command in docs/operations.md: nothing checked")
	}
}
