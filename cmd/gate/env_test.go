package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/config"
)

// TestREADMEEnvTable keeps the README's variable table equal to `gate env`: regenerate it
// with `go run ./cmd/gate env` when a setting changes.
func TestREADMEEnvTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- gate env: generated, kept in sync by cmd/gate TestREADMEEnvTable -->\n", "\n<!-- end gate env -->"
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no generated variable table between %q and %q", begin, end)
	}
	var buf bytes.Buffer
	if err := config.WriteEnvTable(&buf); err != nil {
		t.Fatal(err)
	}
	if got, want := s[i+len(begin):j], strings.TrimRight(buf.String(), "\n"); got != want {
		t.Errorf("README.md variable table differs from `gate env`; regenerate it.\nREADME:\n%s\n\ngate env:\n%s", got, want)
	}
}
