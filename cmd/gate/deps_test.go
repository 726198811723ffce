package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// demoOnly are the modules only the demo stack (cmd/gate-dev) uses: the in-process
// Kafka broker, the embedded Redis and the terminal view.
var demoOnly = []string{
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/alicebob/miniredis",
	"golang.org/x/term",
}

// TestProductionBinaryLinksNoDemoCode: the gate binary links none of the demo stack's
// code, which lives in cmd/gate-dev. `go list -deps` lists the packages `go build`
// links (tests' imports aside), so a kfake in a _test.go file is fine and one in a
// production file fails here; `go version -m bin/gate` shows the same at module level.
func TestProductionBinaryLinksNoDemoCode(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f",
		`{{if not .Standard}}{{.ImportPath}} {{join .Imports " "}}{{end}}`, ".")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	imports := map[string][]string{} // package -> what it imports
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	if len(imports) < 10 {
		t.Fatalf("go list -deps listed only:\n%s", out)
	}
	inModule := func(pkg, mod string) bool { return pkg == mod || strings.HasPrefix(pkg, mod+"/") }
	for _, mod := range demoOnly {
		var via []string // linked packages outside mod that import it
		for pkg, imps := range imports {
			if !inModule(pkg, mod) && slices.ContainsFunc(imps, func(imp string) bool { return inModule(imp, mod) }) {
				via = append(via, pkg)
			}
		}
		if len(via) > 0 {
			slices.Sort(via)
			t.Errorf("cmd/gate links %s, imported by %s: demo code belongs in cmd/gate-dev", mod, strings.Join(via, ", "))
		}
	}
}
