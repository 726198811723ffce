package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/config"
)

// TestConfigurationDocEnvTable keeps the variable table in docs/configuration.md equal to
// `gate env`: regenerate it with `go run ./cmd/gate env` when a setting changes.
func TestConfigurationDocEnvTable(t *testing.T) {
	t.Parallel()
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- gate env: generated, kept in sync by cmd/gate TestConfigurationDocEnvTable -->\n", "\n<!-- end gate env -->"
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated variable table between %q and %q", path, begin, end)
	}
	var buf bytes.Buffer
	if err := config.WriteEnvTable(&buf); err != nil {
		t.Fatal(err)
	}
	if got, want := s[i+len(begin):j], strings.TrimRight(buf.String(), "\n"); got != want {
		t.Errorf("%s variable table differs from `gate env`; regenerate it with `go run ./cmd/gate env`.\ndoc:\n%s\n\ngate env:\n%s", path, got, want)
	}

	// The docs that count the variables say how many there are.
	n := strings.Count(buf.String(), "\n| `GATE_")
	for file, phrase := range map[string]string{
		path:                        fmt.Sprintf("environment variable: %d of them", n),
		"../../docs/reliability.md": fmt.Sprintf("`gate env` lists (%d)", n),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), phrase) {
			t.Errorf("%s does not say %q: `gate env` lists %d variables", file, phrase, n)
		}
	}
}
