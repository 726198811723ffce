package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const changelog = `# Changelog

## [Unreleased]

### Added

- Rules.

## [0.1.0] - 2026-11-24

- First.

[Unreleased]: https://github.com/capturegate/gate/compare/v0.1.0...HEAD
[0.1.0]: https://github.com/capturegate/gate/releases/tag/v0.1.0
`

func TestCutChangelog(t *testing.T) {
	got, prev, err := CutChangelog(changelog, "0.2.0", "2026-11-27")
	if err != nil {
		t.Fatal(err)
	}
	want := `# Changelog

## [Unreleased]

## [0.2.0] - 2026-11-27

### Added

- Rules.

## [0.1.0] - 2026-11-24

- First.

[Unreleased]: https://github.com/capturegate/gate/compare/v0.2.0...HEAD
[0.2.0]: https://github.com/capturegate/gate/compare/v0.1.0...v0.2.0
[0.1.0]: https://github.com/capturegate/gate/releases/tag/v0.1.0
`
	if got != want || prev != "0.1.0" {
		t.Errorf("prev %q, text:\n%s", prev, got)
	}
	// Released twice, or nothing to release: refused.
	if _, _, err := CutChangelog(got, "0.3.0", "2026-11-28"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty Unreleased: %v", err)
	}
	if _, _, err := CutChangelog(changelog, "0.1.0", "2026-11-28"); err == nil || !strings.Contains(err.Error(), "released already") {
		t.Errorf("0.1.0 again: %v", err)
	}
	if _, _, err := CutChangelog("# Changelog\n", "0.2.0", "2026-11-28"); err == nil {
		t.Error("no Unreleased heading: no error")
	}
}

func TestSetChartVersion(t *testing.T) {
	got, err := SetChartVersion("apiVersion: v2\nname: capture-gate\nversion: 0.1.3\nappVersion: \"0.1.0\"\nkubeVersion: \">=1.27.0-0\"\n", "0.2.0")
	if err != nil || got != "apiVersion: v2\nname: capture-gate\nversion: 0.2.0\nappVersion: \"0.2.0\"\nkubeVersion: \">=1.27.0-0\"\n" {
		t.Errorf("%v:\n%s", err, got)
	}
	if _, err := SetChartVersion("name: x\n", "0.2.0"); err == nil {
		t.Error("no version lines: no error")
	}
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"0.2.0", "0.1.0", 1}, {"0.10.0", "0.9.9", 1}, {"1.0.0", "1.0.0", 0}, {"0.1.9", "0.2.0", -1}} {
		if got := Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// cut writes the three files; a bad version or a version not after the last is refused
// before anything is written.
func TestCut(t *testing.T) {
	root := t.TempDir()
	for path, body := range map[string]string{
		changelogPath: changelog,
		chartPath:     "apiVersion: v2\nversion: 0.1.0\nappVersion: \"0.1.0\"\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(envListPath)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"v0.2.0", "0.2", "0.0.9", "0.1.0"} {
		if err := cut(root, bad, "", time.Now()); err == nil {
			t.Errorf("version %q: no error", bad)
		}
	}
	if _, err := os.Stat(filepath.Join(root, envListPath)); err == nil {
		t.Fatal("a refused release wrote the variable list")
	}
	if err := cut(root, "0.2.0", "", time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	cl, _ := os.ReadFile(filepath.Join(root, changelogPath))
	chart, _ := os.ReadFile(filepath.Join(root, chartPath))
	list, _ := os.ReadFile(filepath.Join(root, envListPath))
	if !strings.Contains(string(cl), "## [0.2.0] - 2026-11-27\n") || string(chart) != "apiVersion: v2\nversion: 0.2.0\nappVersion: \"0.2.0\"\n" {
		t.Errorf("changelog or chart not cut:\n%s\n%s", cl, chart)
	}
	lines := strings.Split(string(list), "\n")
	for _, want := range []string{"GATE_KAFKA_BROKERS", "GATE_REDIS_URLS", "GATE_THRESHOLD_MODE"} {
		if !slices.Contains(lines, want) {
			t.Errorf("variable list lacks %s:\n%s", want, list)
		}
	}
}
