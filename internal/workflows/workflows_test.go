package workflows

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// workflow is the part of a GitHub Actions workflow this test reads.
type workflow struct {
	Jobs map[string]struct {
		Steps []struct {
			Name string `yaml:"name"`
			Run  string `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// makeCall is one target a workflow asks make for.
type makeCall struct {
	file, job, step, target string
}

// makeTargets returns the targets the Makefile defines: rule lines "a b: ...", not
// variable assignments ("A := ...", "A ?= ...").
func makeTargets(makefile string) map[string]bool {
	rule := regexp.MustCompile(`^([A-Za-z0-9_./-]+(?:[ \t]+[A-Za-z0-9_./-]+)*)[ \t]*:([^=]|$)`)
	out := map[string]bool{}
	for _, line := range strings.Split(makefile, "\n") {
		m := rule.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			out[t] = true
		}
	}
	return out
}

// shellSep splits a run: script into commands at newlines and shell separators.
var shellSep = regexp.MustCompile(`\n|;|&&|\|\||\||\(|\)|\$\(`)

// makeCalls returns every make target the run: script asks for. A command is a make call
// when its first word is make; its targets are the words after it that are
// neither options (-j4) nor variables (VERSION=...), up to a redirection.
func makeCalls(run string) []string {
	var out []string
	for _, cmd := range shellSep.Split(run, -1) {
		words := strings.Fields(cmd)
		if len(words) == 0 || words[0] != "make" {
			continue
		}
		for _, w := range words[1:] {
			if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || w == "2>&1" || strings.HasPrefix(w, "2>") {
				break
			}
			if strings.HasPrefix(w, "-") || strings.Contains(w, "=") || strings.HasPrefix(w, "#") {
				if strings.HasPrefix(w, "#") {
					break
				}
				continue
			}
			out = append(out, w)
		}
	}
	return out
}

// calls parses every workflow file in dir.
func calls(t *testing.T, dir string) []makeCall {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	files = append(files, more...)
	var out []makeCall
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var w workflow
		if err := yaml.Unmarshal(b, &w); err != nil {
			t.Fatalf("%s: not valid YAML: %v", f, err)
		}
		if len(w.Jobs) == 0 {
			t.Errorf("%s: no jobs", f)
		}
		for job, j := range w.Jobs {
			for _, s := range j.Steps {
				for _, target := range makeCalls(s.Run) {
					out = append(out, makeCall{file: filepath.Base(f), job: job, step: s.Name, target: target})
				}
			}
		}
	}
	return out
}

func TestMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := makeTargets(string(mk))
	got := calls(t, filepath.Join(root, ".github", "workflows"))
	var seen []string
	for _, c := range got {
		seen = append(seen, c.file+":"+c.target)
		if !targets[c.target] {
			t.Errorf("%s, job %s, step %q runs make %s: the Makefile has no such target", c.file, c.job, c.step, c.target)
		}
	}
	// What the pipeline promises: checks, the suite, the image, the chart, the real-Kafka
	// suite on every push; the image and the release notes on a tag.
	for _, want := range []string{"ci.yml:check", "ci.yml:test", "ci.yml:image", "ci.yml:test-chart", "ci.yml:test-integration",
		"release.yml:image", "release.yml:release-notes"} {
		if !slices.Contains(seen, want) {
			t.Errorf("no workflow step runs %s (found %v)", want, seen)
		}
	}
}

func TestMakeTargetsParsing(t *testing.T) {
	targets := makeTargets("A ?= 1\nB := 2\nC = x:y\nall: build\nbuild:\n\tgo build\n.PHONY: all build\nfoo bar: baz\n\techo a:b\n")
	for _, want := range []string{"all", "build", "foo", "bar", ".PHONY"} {
		if !targets[want] {
			t.Errorf("target %s not found in %v", want, targets)
		}
	}
	for _, not := range []string{"A", "B", "C", "echo", "go"} {
		if targets[not] {
			t.Errorf("%s taken for a target", not)
		}
	}
	run := "make check\nmake -j2 VERSION=\"$V\" image test > out.txt # comment\ncd x && make nope; echo make notthis\n( make inner )"
	if got, want := makeCalls(run), []string{"check", "image", "test", "nope", "inner"}; !slices.Equal(got, want) {
		t.Errorf("makeCalls = %v, want %v", got, want)
	}
}

// A workflow calling a target the Makefile lacks is reported.
func TestMissingTargetCaught(t *testing.T) {
	dir := t.TempDir()
	wf := "jobs:\n  a:\n    steps:\n      - run: make check\n      - name: typo\n        run: |\n          make tset\n"
	if err := os.WriteFile(filepath.Join(dir, "x.yml"), []byte(wf), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := makeTargets("check:\n\ttrue\ntest:\n\ttrue\n")
	var missing []string
	for _, c := range calls(t, dir) {
		if !targets[c.target] {
			missing = append(missing, c.step+":"+c.target)
		}
	}
	if !slices.Equal(missing, []string{"typo:tset"}) {
		t.Errorf("missing = %v, want [typo:tset]", missing)
	}
}

// TestDepsTestInstallsNoninteractively: on a machine that lacks the suite's programs,
// make deps-test runs apt-get update before apt-get install (on a new machine the package
// lists are empty, and install finds nothing), and installs with -y and
// DEBIAN_FRONTEND=noninteractive (make test runs with no one to answer), as root and
// through sudo. Through sudo, whose env_reset drops the caller's environment,
// DEBIAN_FRONTEND set before sudo never reached apt-get. apt-get, sudo and id are
// stand-ins that record what they were asked; PATH holds nothing else of the machine's.
func TestDepsTestInstallsNoninteractively(t *testing.T) {
	missing := func(t *testing.T, what string, err error) {
		t.Helper()
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("no %s: %v; CI is set, so this is a failure, not a skip", what, err)
		}
		t.Skipf("no %s: %v; skipping (set CI=true to make this a failure)", what, err)
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		missing(t, "make", err)
	}
	for _, uid := range []string{"0", "1000"} {
		t.Run("uid"+uid, func(t *testing.T) {
			bin, log := t.TempDir(), filepath.Join(t.TempDir(), "apt.log")
			sudoLog := filepath.Join(t.TempDir(), "sudo.log")
			for _, tool := range []string{"bash", "env", "chmod", "git", "sed", "awk"} {
				p, err := exec.LookPath(tool)
				if err != nil {
					missing(t, tool, err)
				}
				if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			stubs := map[string]string{
				"id": "echo " + uid,
				// sudo's env_reset: the command gets PATH, not the caller's environment.
				"sudo": `echo "$*" >> ` + sudoLog + `
exec env -i PATH="$PATH" "$@"`,
				// install finds no package before an update; it adds each package's program.
				"apt-get": `echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> ` + log + `
[ "$1" = install ] || exit 0
[[ "$(< ` + log + `)" == *" update"* ]] || { echo "E: Unable to locate package" >&2; exit 100; }
for a in "${@:2}"; do
	case "$a" in -*) continue;; maven) a=mvn;; esac
	printf '#!/bin/sh\n' > "` + bin + `/$a" && chmod +x "` + bin + `/$a"
done`,
			}
			for name, body := range stubs {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(mk, "-s", "-C", root, "deps-test")
			cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make deps-test: %v\n%s", err, out)
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatalf("apt-get was not run: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], " update") {
				t.Fatalf("apt-get runs:\n%s\nwant update, then install", b)
			}
			install := strings.Fields(lines[1])
			if install[0] != "DEBIAN_FRONTEND=noninteractive" || install[1] != "install" || !slices.Contains(install, "-y") {
				t.Errorf("apt-get install ran as %q, want DEBIAN_FRONTEND=noninteractive install -y ...", lines[1])
			}
			for _, pkg := range []string{"redis-server", "kcat", "maven", "chromium"} {
				if !slices.Contains(install, pkg) {
					t.Errorf("apt-get install ran as %q: %s missing", lines[1], pkg)
				}
			}
			// Root runs apt-get itself; anyone else through sudo, both runs.
			sudo, _ := os.ReadFile(sudoLog)
			switch runs := strings.Count(string(sudo), "apt-get"); {
			case uid == "0" && len(sudo) > 0:
				t.Errorf("as root, make deps-test ran sudo: %q", sudo)
			case uid != "0" && runs != 2:
				t.Errorf("as uid %s, apt-get ran %d times through sudo (%q), want update and install both", uid, runs, sudo)
			}
		})
	}
}

// filterPattern is a regexp of a GitHub Actions filter pattern (on.push.tags and the
// like): * any characters but /, ** any, ? zero or one of the character before, + one or
// more of it, [..] one of a set or range; the rest literal ("." too).
func filterPattern(t *testing.T, pat string) *regexp.Regexp {
	t.Helper()
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; c {
		case '*':
			if i+1 < len(pat) && pat[i+1] == '*' {
				b.WriteString(".*")
				i++
				continue
			}
			b.WriteString("[^/]*")
		case '?', '+':
			b.WriteByte(c)
		case '[':
			end := strings.IndexByte(pat[i:], ']')
			if end < 0 {
				t.Fatalf("filter pattern %q: [ not closed", pat)
			}
			b.WriteString(pat[i : i+end+1])
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// The release workflow runs on the tags make release makes (vX.Y.Z: tools/release takes
// x.y.z only, no pre-release) and on no other: on any v* tag (vfoo, a v1 moved along the
// releases) it ran and failed at its release-notes step, CHANGELOG.md having no section
// for it, a red run for a tag that was never a release.
func TestReleaseRunsOnReleaseTagsOnly(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		On struct {
			Push struct {
				Tags []string `yaml:"tags"`
			} `yaml:"push"`
		} `yaml:"on"`
	}
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	if len(w.On.Push.Tags) == 0 {
		t.Fatal("release.yml: no on.push.tags")
	}
	runs := func(tag string) bool {
		for _, p := range w.On.Push.Tags {
			if !strings.HasPrefix(p, "!") && filterPattern(t, p).MatchString(tag) {
				return true
			}
		}
		return false
	}
	for _, tag := range []string{"v0.1.0", "v0.8.0", "v1.10.3", "v10.0.12"} {
		if !runs(tag) {
			t.Errorf("release.yml (tags %q) does not run on the release tag %s", w.On.Push.Tags, tag)
		}
	}
	for _, tag := range []string{"vfoo", "v1", "v1.2", "v0.9.0-rc.1", "version-2", "v1.2.3/x", "x/v1.2.3"} {
		if runs(tag) {
			t.Errorf("release.yml (tags %q) runs on %s, which make release never tags", w.On.Push.Tags, tag)
		}
	}
}

// The filter patterns are read as GitHub Actions reads them (its docs' examples).
func TestFilterPattern(t *testing.T) {
	for _, c := range []struct {
		pat, tag string
		want     bool
	}{
		{"v*", "vfoo", true}, {"v*", "v1/2", false}, {"v**", "v1/2", true},
		{"v[0-9]+.[0-9]+.[0-9]+", "v10.2.3", true}, {"v[0-9]+.[0-9]+.[0-9]+", "v1x2.3", false},
		{"v[0-9]+.[0-9]+.[0-9]+", "v.2.3", false}, {"v2*", "v23", true}, {"ab?c", "ac", true},
	} {
		if got := filterPattern(t, c.pat).MatchString(c.tag); got != c.want {
			t.Errorf("%q matches %q: %v, want %v", c.pat, c.tag, got, c.want)
		}
	}
}
