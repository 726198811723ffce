package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The release the CHANGELOG names last, the chart's appVersion (the image it installs
// by default) and the tag of that release name one version; `make release` moves them
// together (tools/release).
var (
	releaseHeading = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`)
	chartField     = func(name string) *regexp.Regexp { return regexp.MustCompile(`(?m)^` + name + `: "?([^"\n]+)"?$`) }
)

// appVersionEnv is the list `make release` wrote of the variables the gate of the
// chart's appVersion knows.
const appVersionEnv = "testdata/appversion-env.txt"

// TestVersionsMoveTogether: the chart's appVersion is the CHANGELOG's newest release, its
// version is that or later, and the chart sets no variable (in any value set) that the
// gate of its appVersion does not know: the gate refuses unknown GATE_ names, so the
// chart's default image would crash-loop. A chart that starts setting a new variable
// fails here until `make release` ships a gate that knows it. Where the clone has tags:
// the release is tagged, the variable list is the one written at the tag, and a chart
// changed since the tag has a newer chart version.
func TestVersionsMoveTogether(t *testing.T) {
	chart := readFile(t, "capture-gate/Chart.yaml")
	appVersion, chartVersion := chartField("appVersion").FindStringSubmatch(chart), chartField("version").FindStringSubmatch(chart)
	if appVersion == nil || chartVersion == nil {
		t.Fatalf("Chart.yaml lacks version or appVersion:\n%s", chart)
	}
	app := appVersion[1]
	m := releaseHeading.FindStringSubmatch(readFile(t, "../../CHANGELOG.md"))
	if m == nil {
		t.Fatal("CHANGELOG.md names no release (## [x.y.z] - date)")
	}
	if m[1] != app {
		t.Errorf("Chart.yaml appVersion %s, CHANGELOG.md's newest release %s: cut releases with make release", app, m[1])
	}
	if compareVersions(chartVersion[1], app) < 0 {
		t.Errorf("Chart.yaml version %s is before its appVersion %s", chartVersion[1], app)
	}

	list := readFile(t, appVersionEnv)
	if !strings.Contains(list, "capture gate "+app+" knows") {
		t.Errorf("%s is not the list of %s (make release writes it):\n%s", appVersionEnv, app, list)
	}
	var knows []string
	for _, line := range strings.Split(list, "\n") {
		if strings.HasPrefix(line, "GATE_") {
			knows = append(knows, line)
		}
	}
	for _, vs := range valueSets {
		d := renderDeployment(t, readValues(t, filepath.Join("testdata", vs.file)), capabilities(vs.caps...))
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "GATE_") && !slices.Contains(knows, e.Name) {
				t.Errorf("%s: the chart sets %s, which the gate of its appVersion %s does not know (it would refuse to start): release a gate that knows it (make release)", vs.file, e.Name, app)
			}
		}
	}

	if _, err := git(t, "rev-parse", "--git-dir"); err != nil {
		t.Logf("not a git clone (%v): the tag checks need one", err)
		return
	}
	tags, _ := git(t, "tag", "--list", "v*")
	tag := "v" + app
	if _, err := git(t, "rev-parse", "-q", "--verify", "refs/tags/"+tag); err != nil {
		if strings.TrimSpace(tags) == "" {
			t.Logf("this clone has no tags (cloned without them?): %s not checked", tag)
			return
		}
		t.Fatalf("no tag %s for the CHANGELOG's newest release (tags here: %s)", tag, strings.Fields(tags))
	}
	atTag, err := git(t, "show", tag+":deploy/helm/"+appVersionEnv)
	if err != nil || atTag != list {
		t.Errorf("%s differs from the one released at %s (%v): it records that release's gate, do not edit it", appVersionEnv, tag, err)
	}
	if _, err := git(t, "diff", "--quiet", tag, "--", "capture-gate"); err != nil && compareVersions(chartVersion[1], app) <= 0 {
		t.Errorf("the chart changed since %s but its version is still %s: bump Chart.yaml's version (a patch for a fix, a minor for a new value)", tag, chartVersion[1])
	}
	if exact, err := git(t, "describe", "--tags", "--exact-match", "HEAD"); err == nil && strings.TrimSpace(exact) == tag {
		// At the release itself: the list is this commit's gate.
		var names []string
		for _, v := range mustGateEnv(t) {
			names = append(names, v.name)
		}
		if !slices.Equal(names, knows) {
			t.Errorf("at %s, %s lists %v, gate env %v", tag, appVersionEnv, knows, names)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// git runs git in this directory; its error carries stderr.
func git(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// compareVersions orders two x.y.z versions: -1, 0 or 1.
func compareVersions(a, b string) int {
	var pa, pb [3]int
	fmt.Sscanf(a, "%d.%d.%d", &pa[0], &pa[1], &pa[2])
	fmt.Sscanf(b, "%d.%d.%d", &pb[0], &pb[1], &pb[2])
	for i := range pa {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
