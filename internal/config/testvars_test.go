package config

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The test suite's own variables (the real-Kafka suite's broker, the soak switch, the
// Kafka jars' directory, ...) are named GATETEST_, not GATE_: a developer exports them in
// the shell the gate is started from too, and the gate refuses a GATE_ name it does not
// know.

// repoRoot is the repository's top directory, from this package's.
const repoRoot = "../.."

// suiteVariable is a GATETEST_ name as a Go string literal; suiteRead is a call reading
// a GATE_ variable by a literal name (os.Getenv, os.LookupEnv, an injected getenv).
var (
	suiteVariable = regexp.MustCompile(`"(GATETEST_[A-Z0-9_]+)"`)
	suiteRead     = regexp.MustCompile(`(?i:getenv|lookupenv)\("(GATE_[A-Z0-9_]*)"\)`)
)

// goSources returns every .go file of the repository (its other modules, deploy/helm and
// deploy/compose, included), by path from repoRoot.
func goSources(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out["internal/config/testvars_test.go"]; !ok {
		t.Fatalf("walking %s found %d Go files, not this one: not the repository's top", repoRoot, len(out))
	}
	return out
}

// TestSuiteVariablesDoNotStopTheGate: every GATETEST_ variable the repository's code
// names, set in the environment the gate starts with, is neither among the names Load
// checks (Names) nor an unknown variable to Load when a caller passes it anyway.
func TestSuiteVariablesDoNotStopTheGate(t *testing.T) {
	t.Parallel()
	suite := map[string]bool{}
	for path, src := range goSources(t) {
		if path == "internal/config/testvars_test.go" {
			continue // names them itself
		}
		for _, m := range suiteVariable.FindAllStringSubmatch(src, -1) {
			suite[m[1]] = true
		}
	}
	// The suite's variables as they stand: a scan that found none would test nothing.
	for _, n := range []string{"GATETEST_IT_BROKER", "GATETEST_KAFKA_JARS", "GATETEST_SOAK"} {
		if !suite[n] {
			t.Errorf("no Go file names %s", n)
		}
	}

	env := map[string]string{"GATE_WINDOW": "30s"}
	for n := range suite {
		env[n] = "1"
	}
	env["GATETEST_IT_BROKER"] = "jvm" // as ci.yml sets it for make test
	environ := []string{"HOME=/root"}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	getenv := getenvFrom(env)
	names := Names(environ, getenv)
	if !slices.Equal(names, []string{"GATE_WINDOW"}) {
		t.Errorf("Names = %v, want [GATE_WINDOW]", names)
	}
	c, err := Load(getenv, names)
	if err != nil {
		t.Fatalf("Load with %v in the environment: %v", slices.Sorted(maps.Keys(suite)), err)
	}
	if c.Window.String() != "30s" {
		t.Errorf("GATE_WINDOW beside them: window %s, want 30s", c.Window)
	}
	if _, err := Load(getenv, slices.Collect(maps.Keys(env))); err != nil {
		t.Errorf("Load given every name of the environment: %v", err)
	}
}

// TestSuiteReadsNoGATEVariableOfItsOwn: no Go file reads, by a literal name, a GATE_
// variable that is not one of the gate's (Config's); a test's own switch is GATETEST_.
func TestSuiteReadsNoGATEVariableOfItsOwn(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, k := range structKeys(t) {
		known[k] = true
	}
	reads := 0
	srcs := goSources(t)
	for _, path := range slices.Sorted(maps.Keys(srcs)) {
		for _, m := range suiteRead.FindAllStringSubmatch(srcs[path], -1) {
			reads++
			if !known[m[1]] {
				t.Errorf("%s reads %s, which the gate does not know: a test's variable is named GATETEST_ (a gate started from the same shell refuses an unknown GATE_ name)", path, m[1])
			}
		}
	}
	if reads == 0 {
		t.Errorf("found no read of a GATE_ variable in %d Go files: the pattern %s matches nothing", len(srcs), suiteRead)
	}
}
