package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
// fails here until `make release` ships a gate that knows it. Where the clone has tags,
// the release is tagged. At the tag, or in a clone without tags at the release's commit
// ("release x.y.z"), the variable list is the one written there (a hand edit that lets
// the chart set a variable the release does not know fails), and a chart changed since
// has a newer chart version. With tags or without, the binary's version (make build's
// VERSION) is that release too: the tree says it, not a tag.
func TestVersionsMoveTogether(t *testing.T) {
	chart := readFile(t, "capture-gate/Chart.yaml")
	appVersion, chartVersion := chartField("appVersion").FindStringSubmatch(chart), chartField("version").FindStringSubmatch(chart)
	if appVersion == nil || chartVersion == nil {
		t.Fatalf("Chart.yaml lacks version or appVersion:\n%s", chart)
	}
	app := appVersion[1]
	changelog := readFile(t, "../../CHANGELOG.md")
	release := newestRelease(t, changelog)
	if release != app {
		t.Errorf("Chart.yaml appVersion %s, CHANGELOG.md's newest release %s: cut releases with make release", app, release)
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

	// The binary's version, with a tag and without: the same release, from the tree.
	t.Run("make version", func(t *testing.T) { checkMakeVersion(t, release, changelog) })

	if _, err := git(t, "rev-parse", "--git-dir"); err != nil {
		t.Logf("not a git clone (%v): the tag checks need one", err)
		return
	}
	tags, _ := git(t, "tag", "--list", "v*")
	tag := "v" + app
	at := tag // the release: its tag, or its commit in a clone without tags
	if _, err := git(t, "rev-parse", "-q", "--verify", "refs/tags/"+tag); err != nil {
		if strings.TrimSpace(tags) != "" {
			t.Fatalf("no tag %s for the CHANGELOG's newest release (tags here: %s)", tag, strings.Fields(tags))
		}
		// make release commits "release x.y.z": without tags (a clone without them, or
		// a repository whose tags were never pushed) that commit is the release, and a
		// hand edit of the list past it is found all the same.
		out, _ := git(t, "log", "-n1", "--format=%H", "--grep", "^release "+regexp.QuoteMeta(app)+"$")
		if at = strings.TrimSpace(out); at == "" {
			t.Logf("this clone has neither tags nor a \"release %s\" commit (shallow?): %s not checked", app, tag)
			return
		}
	}
	atTag, err := git(t, "show", at+":deploy/helm/"+appVersionEnv)
	if err != nil || atTag != list {
		t.Errorf("%s differs from the one released at %s (%v): it records that release's gate, do not edit it", appVersionEnv, at, err)
	}
	if _, err := git(t, "diff", "--quiet", at, "--", "capture-gate"); err != nil && compareVersions(chartVersion[1], app) <= 0 {
		t.Errorf("the chart changed since %s but its version is still %s: bump Chart.yaml's version (a patch for a fix, a minor for a new value)", at, chartVersion[1])
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

// newestRelease returns the version of the CHANGELOG's first heading after Unreleased,
// which must read "## [x.y.z] - YYYY-MM-DD": a heading of another form is not passed
// over for an older release below it.
func newestRelease(t *testing.T, changelog string) string {
	t.Helper()
	for _, line := range strings.Split(changelog, "\n") {
		if !strings.HasPrefix(line, "## [") || line == "## [Unreleased]" {
			continue
		}
		m := releaseHeading.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("CHANGELOG.md's newest release heading %q is not \"## [x.y.z] - YYYY-MM-DD\" (make release writes it so)", line)
		}
		return m[1]
	}
	t.Fatal("CHANGELOG.md names no release (## [x.y.z] - YYYY-MM-DD)")
	return ""
}

// unreleasedEntries reports whether the CHANGELOG's Unreleased section has anything in
// it: the tree is past its newest release (make release leaves the section empty).
func unreleasedEntries(changelog string) bool {
	_, after, ok := strings.Cut(changelog, "\n## [Unreleased]\n")
	if !ok {
		return false
	}
	section, _, _ := strings.Cut(after, "\n## [")
	return strings.TrimSpace(section) != ""
}

// checkMakeVersion: the version make build stamps into the binary (make's VERSION, which
// `make -s version` prints) is git describe's where a release tag is behind HEAD, and
// without one (TAG_VERSION empty, as in a clone without tags whatever this one has) the
// CHANGELOG's newest release: exactly that for the release's own tree, else that plus
// -dev.g<commit>, and .dirty with uncommitted changes.
func checkMakeVersion(t *testing.T, release, changelog string) {
	if _, err := exec.LookPath("make"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("make not on PATH (%v); CI=%s, so this is a failure, not a skip", err, os.Getenv("CI"))
		}
		t.Skipf("make not on PATH (%v): the binary's version is make's", err)
	}
	want := release
	commit, commitErr := git(t, "rev-parse", "--short=12", "HEAD")
	_, diffErr := git(t, "diff", "--quiet", "HEAD", "--")
	dirty := commitErr == nil && diffErr != nil
	if unreleasedEntries(changelog) || dirty {
		want += "-dev"
		if commitErr == nil {
			want += ".g" + strings.TrimSpace(commit)
		}
		if dirty {
			want += ".dirty"
		}
	}
	if got := makeVersion(t, "TAG_VERSION="); got != want {
		t.Errorf("make version without a tag: %q, want %q (the CHANGELOG's newest release, %s; past it: %v, uncommitted changes: %v)",
			got, want, release, unreleasedEntries(changelog), dirty)
	}
	if desc, err := git(t, "describe", "--tags", "--match", "v[0-9]*", "--dirty"); err == nil {
		want = strings.TrimPrefix(strings.TrimSpace(desc), "v")
	}
	if got := makeVersion(t); got != want {
		t.Errorf("make version: %q, want %q", got, want)
	}
}

// makeVersion runs `make -s version` at the repository's root with args, in this
// process's environment less what a make running this test would pass down (its flags,
// a VERSION given to it).
func makeVersion(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "-C", "../..", "version"}, args...)...)
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VERSION", "TAG_VERSION", "COMMIT":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -s version %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
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
