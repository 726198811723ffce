package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// e2e_vs_passthrough_ratio_worst_run pairs each BenchmarkEndToEnd/gate run with the plain
// pass-through run of its process (worstRatio, run i with run i); its note says where
// that pass-through runs beside the gate, which BenchmarkEndToEnd's modes decide
// (internal/consume/bench_test.go): the note must say what they do.
func TestE2EWorstRunNoteFollowsModes(t *testing.T) {
	src, err := os.ReadFile("../../internal/consume/bench_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)func BenchmarkEndToEnd\(b \*testing\.B\) \{.*?runEndToEnd\(b, \[\]string\{([^}]*)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no runEndToEnd(b, []string{...}) in BenchmarkEndToEnd")
	}
	var modes []string
	for _, q := range strings.Split(string(m[1]), ",") {
		s, err := strconv.Unquote(strings.TrimSpace(q))
		if err != nil {
			t.Fatalf("BenchmarkEndToEnd's mode %q: %v", q, err)
		}
		modes = append(modes, s)
	}
	gate, pass := slices.Index(modes, "gate"), slices.Index(modes, "passthrough")
	if gate < 0 || pass < 0 {
		t.Fatalf("BenchmarkEndToEnd's modes %q lack gate or passthrough", modes)
	}
	var note string
	for _, r := range rows {
		if r.key == "e2e_vs_passthrough_ratio_worst_run" {
			note = r.note
		}
	}
	wrong, right := "before it", "after it"
	if pass < gate {
		wrong, right = right, wrong
	}
	if strings.Contains(note, wrong) || !strings.Contains(note, right) {
		t.Errorf("e2e_vs_passthrough_ratio_worst_run's note %q: BenchmarkEndToEnd runs %q, the plain pass-through %s the gate", note, modes, strings.TrimSuffix(right, " it"))
	}
}
