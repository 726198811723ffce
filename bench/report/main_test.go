package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	f, err := os.Open("testdata/sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.CPU != "Intel(R) Xeon(R) Processor" {
		t.Errorf("cpu = %q", p.CPU)
	}
	if got := p.Bench[benchHotParallel]["ns/op"]; len(got) != 1 || got[0] != 38.74 {
		t.Errorf("hot path ns/op = %v", got)
	}
	if got := p.Bench[benchE2EGate]["records/s"]; len(got) != 3 {
		t.Errorf("gate runs = %v, want 3", got)
	}
	res := Results(p)
	want := map[string]float64{
		"hotpath_ns_per_op":                38.74,
		"hotpath_allocs_per_op":            0,
		"hotpath_vs_map_ratio":             round(38.74 / 52.63),
		"hotpath_vs_map_copied_ratio":      round(38.74 / 52.21),
		"hotpath_serial_ns_per_op":         57.45,
		"sync_lua_checks_per_s":            8132,
		"hotpath_vs_sync_lua_speedup":      round(1e9 / 57.45 / 8132),
		"e2e_gate_records_per_s":           math.Round((1073633.0 + 1076166 + 1137112) / 3),
		"e2e_passthrough_records_per_s":    math.Round((957041.0 + 1118720 + 1099597) / 3),
		"e2e_vs_passthrough_ratio":         round((1073633.0 + 1076166 + 1137112) / (957041.0 + 1118720 + 1099597)),
		"sync_read_reduction":              0.9989,
		"redis_commands_per_tick":          34193,
		"tick_all_teams_commands_per_tick": 200283,
		"bytes_per_entity":                 92.2,
	}
	for k, w := range want {
		if g, ok := res[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if len(res) != len(want) {
		t.Errorf("got %d keys, want %d: %v", len(res), len(want), res)
	}
	md := Markdown(res, Machine{GoVersion: "go1.26", CPU: "x", CPUs: 2, Date: "today"})
	for _, s := range []string{"| `hotpath_vs_map_ratio` | 0.7361 | ≤ 1.5 | yes |", "| `e2e_vs_passthrough_ratio` | 1.0351 | ≥ 0.9 | yes |", "| `sync_read_reduction_reference` | not measured |", "Not measured yet: `fleet_admitted_over_threshold`"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

func TestParseMissing(t *testing.T) {
	p, err := Parse(strings.NewReader("BenchmarkSyncLua-2\n    synclua_bench_test.go:1: a log line between the name and the figures\n   10\t  100 ns/op\t 5000 checks/s\nBenchmarkX\nnot figures\n"))
	if err != nil {
		t.Fatal(err)
	}
	res := Results(p)
	if len(res) != 1 || res["sync_lua_checks_per_s"] != 5000 {
		t.Errorf("results = %v", res)
	}
	if _, ok := res["hotpath_vs_sync_lua_speedup"]; ok {
		t.Error("speedup without the hot path")
	}
}
