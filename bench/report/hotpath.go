package main

import "fmt"

// The per-record check beside a bare sharded map and the synchronous Lua limiter
// (internal/limit BenchmarkCheck and BenchmarkCheckBesideMap, internal/tick BenchmarkSyncLua).

// Benchmark names the figures come from (without the -GOMAXPROCS suffix).
const (
	benchHotParallel = "BenchmarkCheck/zipf100k/parallel/divert-batchclock"
	benchHotSerial   = "BenchmarkCheck/zipf100k/serial/divert-batchclock"
	benchMapParallel = "BenchmarkCheck/zipf100k/parallel/baremap"
	benchMapCopied   = "BenchmarkCheck/zipf100k/parallel/baremap-copied"
	// benchCheckBesideMap is the check and the maps in turns, in one process.
	benchCheckBesideMap = "BenchmarkCheckBesideMap"
	benchSyncLua        = "BenchmarkSyncLua"
)

// hotpathFigures puts the check's figures: its ns/op, beside the maps, beside Lua. The
// ratios to the maps that stand in for BenchmarkCheckBesideMap's go into fellBack too.
func hotpathFigures(b Samples, out map[string]float64, fellBack map[string]string) {
	hot, okHot := b.Median(benchHotParallel, "ns/op")
	if okHot {
		out["hotpath_ns_per_op"] = hot
	}
	if v, ok := b.Mean(benchHotParallel, "allocs/op"); ok {
		out["hotpath_allocs_per_op"] = v
	}
	// The goal reads the check beside the map measured in turns in one process
	// (BenchmarkCheckBesideMap), the median of the processes' ratios; the medians of
	// BenchmarkCheck's one-after-the-other runs stay beside it, and stand in for it in a
	// run without it: a fallback, which fails make bench.
	for _, k := range []struct{ key, seqMap, unit string }{
		{"hotpath_vs_map_ratio", benchMapParallel, "check_vs_map"},
		{"hotpath_vs_map_copied_ratio", benchMapCopied, "check_vs_map_copied"},
	} {
		seq, okSeq := b.medianRatio(benchHotParallel, k.seqMap, "ns/op")
		if okSeq {
			out[k.key+"_sequential"] = seq
			out[k.key] = seq
		}
		if r, ok := b.Median(benchCheckBesideMap, k.unit); ok {
			out[k.key] = r
		} else if okSeq {
			fellBack[k.key] = fmt.Sprintf("BenchmarkCheck's ratio of medians, one after the other, stands in: no %s %s in the input", benchCheckBesideMap, k.unit)
		}
	}
	if r, ok := b.Median(benchCheckBesideMap, "check_ns/op"); ok {
		out["hotpath_beside_map_ns_per_op"] = r
	}
	if r, ok := b.Median(benchCheckBesideMap, "map_ns/op"); ok {
		out["hotpath_beside_map_map_ns_per_op"] = r
	}
	serial, okSerial := b.Mean(benchHotSerial, "ns/op")
	if okSerial {
		out["hotpath_serial_ns_per_op"] = serial
	}
	lua, okLua := b.Mean(benchSyncLua, "checks/s")
	if okLua {
		out["sync_lua_checks_per_s"] = lua
	}
	// Serial against serial: the Lua call is one connection, one caller; the check is one
	// goroutine with the clock read once per 64 records.
	if okLua && okSerial && serial > 0 && lua > 0 {
		out["hotpath_vs_sync_lua_speedup"] = (1e9 / serial) / lua
	}
}

// hotpathProcesses puts how many processes BenchmarkCheckBesideMap ran in: its figures
// are medians over them.
func hotpathProcesses(p *Parsed, out map[string]float64) {
	if n := p.Processes(benchCheckBesideMap); n > 0 {
		out["hotpath_beside_map_processes"] = float64(n)
	}
}

// hotpathSources is RESULTS.md's word on where the hotpath_* figures come from, with how
// many runs and processes the input held.
func hotpathSources(res map[string]float64, p *Parsed) string {
	runs, procs := p.Runs(benchHotParallel), p.Processes(benchHotParallel)
	seq := "not measured"
	if runs > 0 {
		seq = "medians of " + count(runs, "run", "runs")
		if n := p.Runs(benchHotParallel, "hotpath-interleaved"); n > 0 {
			seq += fmt.Sprintf(", %d of them interleaved", n)
		}
		if runs == procs {
			seq += ", each in a process of its own"
		} else {
			seq += " in " + count(procs, "process", "processes")
		}
	}
	beside := "`BenchmarkCheckBesideMap` (not measured)"
	if n := int(res["hotpath_beside_map_processes"]); n > 0 {
		beside = "`BenchmarkCheckBesideMap` (the check and the maps in turns of a million lookups, in " + count(n, "process", "processes") + ": the median of their ratios)"
	} else if _, ok := res["hotpath_vs_map_ratio"]; ok {
		beside = "not `BenchmarkCheckBesideMap`, which is missing from this run: the one-after-the-other medians stand in (a fallback)"
	}
	return fmt.Sprintf("`hotpath_*` from `BenchmarkCheck/zipf100k` (internal/limit; the parallel check and the bare maps: %s) and, for the ratios the goal reads, %s", seq, beside)
}

// hotpathVsMapHow is the README's word on how hotpath_vs_map_ratio was measured.
func hotpathVsMapHow(res map[string]float64) string {
	if n := int(res["hotpath_beside_map_processes"]); n > 0 {
		return "the two in turns; median of " + count(n, "process", "processes")
	}
	if _, ok := res["hotpath_beside_map_ns_per_op"]; ok {
		return "the two in turns; median of the processes"
	}
	return "one after the other, a fallback: the two in turns not measured"
}
