// Command release cuts a release of capture gate in the working tree: the CHANGELOG's
// Unreleased section becomes the version's, the chart's version and appVersion become the
// version, and deploy/helm/testdata/appversion-env.txt records the GATE_ variables the
// binary of this commit knows. `make release VERSION=x.y.z` runs it, then commits and
// tags vx.y.z, so that the binary (stamped from the tag), the image (tagged by
// release.yml from the tag), the chart's appVersion (the image it installs by default)
// and the CHANGELOG name one version.
//
// Why the variable list: the chart's default image is its appVersion, and the gate
// refuses a GATE_ variable it does not know. The chart test (deploy/helm
// TestVersionsMoveTogether) checks that the chart sets by default only variables that
// list names, so a chart on main that starts setting a new variable fails until a release
// ships the binary that knows it.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/config"
)

// Paths from the repository's root.
const (
	changelogPath = "CHANGELOG.md"
	chartPath     = "deploy/helm/capture-gate/Chart.yaml"
	envListPath   = "deploy/helm/testdata/appversion-env.txt"
	repoURL       = "https://github.com/capturegate/gate"
)

func main() {
	version := flag.String("version", "", "the version to release, x.y.z")
	date := flag.String("date", "", "the release date, YYYY-MM-DD (default: today, UTC)")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := cut(*root, *version, *date, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// cut edits the three files under root for version, released on date (now's when empty).
func cut(root, version, date string, now time.Time) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("-version %q: want x.y.z (no v, no pre-release)", version)
	}
	if date == "" {
		date = now.UTC().Format(time.DateOnly)
	}
	if _, err := time.Parse(time.DateOnly, date); err != nil {
		return fmt.Errorf("-date %q: want YYYY-MM-DD", date)
	}
	cl, err := os.ReadFile(filepath.Join(root, changelogPath))
	if err != nil {
		return fmt.Errorf("reading the changelog: %w", err)
	}
	newCL, prev, err := CutChangelog(string(cl), version, date)
	if err != nil {
		return fmt.Errorf("%s: %w", changelogPath, err)
	}
	if Compare(version, prev) <= 0 {
		return fmt.Errorf("-version %s is not after the last release, %s", version, prev)
	}
	chart, err := os.ReadFile(filepath.Join(root, chartPath))
	if err != nil {
		return fmt.Errorf("reading the chart: %w", err)
	}
	newChart, err := SetChartVersion(string(chart), version)
	if err != nil {
		return fmt.Errorf("%s: %w", chartPath, err)
	}
	var env bytes.Buffer
	if err := config.WriteEnvTable(&env); err != nil {
		return fmt.Errorf("listing the gate's variables: %w", err)
	}
	names := EnvNames(env.String())
	if len(names) == 0 {
		return errors.New("the gate's variable table lists no GATE_ variable; has its format changed?")
	}
	list := fmt.Sprintf("# The GATE_ variables capture gate %s knows (`gate env`), written by `make release`.\n# The chart sets no other by default: its default image is this version.\n%s\n", version, strings.Join(names, "\n"))
	for path, body := range map[string]string{changelogPath: newCL, chartPath: newChart, envListPath: list} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

var (
	unreleasedHeading = regexp.MustCompile(`(?m)^## \[Unreleased\]\n`)
	releaseHeading    = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`)
	unreleasedLink    = regexp.MustCompile(`(?m)^\[Unreleased\]: .*$`)
)

// CutChangelog turns the Unreleased section of a Keep a Changelog text into version's,
// dated date, under a new empty Unreleased heading, and points the compare links at the
// new tag. It returns the text and the release before this one.
func CutChangelog(text, version, date string) (string, string, error) {
	loc := unreleasedHeading.FindStringIndex(text)
	if loc == nil {
		return "", "", errors.New("no \"## [Unreleased]\" heading")
	}
	next := releaseHeading.FindStringSubmatchIndex(text[loc[1]:])
	if next == nil {
		return "", "", errors.New("no earlier release heading (## [x.y.z] - date) after Unreleased")
	}
	prev := text[loc[1]+next[2] : loc[1]+next[3]]
	if strings.TrimSpace(text[loc[1]:loc[1]+next[0]]) == "" {
		return "", "", errors.New("the Unreleased section is empty: nothing to release")
	}
	if strings.Contains(text, "## ["+version+"]") {
		return "", "", fmt.Errorf("%s is released already", version)
	}
	out := text[:loc[1]] + "\n## [" + version + "] - " + date + "\n" + text[loc[1]:]
	if !unreleasedLink.MatchString(out) {
		return "", "", errors.New("no \"[Unreleased]: ...\" link at the end")
	}
	out = unreleasedLink.ReplaceAllLiteralString(out,
		fmt.Sprintf("[Unreleased]: %s/compare/v%s...HEAD\n[%s]: %s/compare/v%s...v%s", repoURL, version, version, repoURL, prev, version))
	return out, prev, nil
}

var (
	chartVersion    = regexp.MustCompile(`(?m)^version: .*$`)
	chartAppVersion = regexp.MustCompile(`(?m)^appVersion: .*$`)
)

// SetChartVersion sets a Chart.yaml's version and appVersion to version.
func SetChartVersion(text, version string) (string, error) {
	if !chartVersion.MatchString(text) || !chartAppVersion.MatchString(text) {
		return "", errors.New("no version: or appVersion: line")
	}
	text = chartVersion.ReplaceAllLiteralString(text, "version: "+version)
	return chartAppVersion.ReplaceAllLiteralString(text, `appVersion: "`+version+`"`), nil
}

var envRow = regexp.MustCompile("(?m)^\\| `(GATE_[A-Z0-9_]+)` \\|")

// EnvNames returns the variable names of `gate env`'s Markdown table, in its order.
func EnvNames(table string) []string {
	var names []string
	for _, m := range envRow.FindAllStringSubmatch(table, -1) {
		names = append(names, m[1])
	}
	return names
}

// Compare orders two x.y.z versions: -1, 0 or 1.
func Compare(a, b string) int {
	pa, pb := semver.FindStringSubmatch(a), semver.FindStringSubmatch(b)
	for i := 1; i <= 3 && pa != nil && pb != nil; i++ {
		var x, y int
		fmt.Sscan(pa[i], &x)
		fmt.Sscan(pb[i], &y)
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
