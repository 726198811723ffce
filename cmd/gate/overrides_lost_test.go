package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// gate overrides list on a missing hash says it is missing, as set and delete do: the
// gates that read it before keep enforcing the set they last read. It said "no live
// overrides", and the on-call of a lost hash (docs/operations.md, Overrides hash lost)
// read that no override was in force while every gate enforced the kept set.
func TestOverridesListOfAMissingHashSaysGatesKeepTheirSet(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	env := map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "ops"}
	do := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"overrides"}, args...), testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("overrides %q: %v", args, err)
		}
		return stdout.String()
	}
	do("set", "whale", "5000")
	if err := rs.Client(t).Del(t.Context(), "ops:overrides").Err(); err != nil { // Redis restarted empty
		t.Fatal(err)
	}
	out := do("list")
	if !strings.HasPrefix(out, "no live overrides in ops:overrides") || !strings.Contains(out, "ops:overrides does not exist") ||
		!strings.Contains(out, "keep the set they last read: docs/operations.md, Overrides hash lost") {
		t.Errorf("list of a lost hash: %q", out)
	}
	// The runbook's copy of the set reads no team from it.
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 1 {
		t.Errorf("list of a lost hash: %d lines, want 1: %q", len(lines), out)
	}
}
