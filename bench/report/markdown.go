package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the figures were measured.
type Machine struct {
	GoVersion, CPU, Date, Load string
	CPUs                       int
	Parts                      []string // how long each part of the run took (Parsed.Parts)
}

// machine is where the benchmarks in p ran: the processor, CPUs and Go version that
// bench/run.sh's "machine:" line and go test's "cpu:" lines name, and where the input has
// neither, the machine running the report (as make bench runs it, the same one); the
// date is when the run started (run.sh's "started:" line), else the report's, and the
// load the report's.
func machine(p *Parsed) Machine {
	m := Machine{GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if p.Started != "" {
		// Re-deriving the report from bench/raw.txt.gz keeps the run's date.
		m.Date = p.Started
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if p.CPU != "" {
		m.CPU = p.CPU
	}
	// "CPU, N CPUs, GOVERSION"; the CPU is empty where /proc/cpuinfo names no model.
	if rest, gov, ok := cutLast(p.Machine, ", "); ok {
		if cpu, cpus, ok := cutLast(rest, ", "); ok {
			var n int
			if _, err := fmt.Sscanf(cpus, "%d CPUs", &n); err == nil && n > 0 && strings.HasPrefix(gov, "go") {
				m.CPUs, m.GoVersion = n, gov
				if cpu = strings.TrimSpace(cpu); cpu != "" {
					m.CPU = cpu
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	return m
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// count is n with the noun for one or for several.
func count(n int, one, several string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, several)
}

func format(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Run is what RESULTS.md says of the run beside its figures and machine.
type Run struct {
	// Fallbacks are the figures another statistic stood in for (Figures.Fallbacks): their
	// note says so.
	Fallbacks map[string]string
	// Problems are what fails make bench besides the goals missed (RunProblems).
	Problems []string
	// Input is what the report read (nil: nothing but the figures is known): how many runs
	// and processes each benchmark had, and where the end-to-end runs were bound.
	Input *Parsed
	// Chart is the fidelity chart drawn for this run, relative to RESULTS.md ("": none).
	Chart string
	// notes are the table's notes that say what happened in this run, by key.
	notes map[string]string
}

// Table renders every figure as a Markdown table: key, value, goal, met.
func Table(res map[string]float64) string {
	return table(append(slices.Clone(rows), fidelityRows...), res, func(string) bool { return true }, Run{})
}

// table renders rs, then the keys of res that are in no row and that extra accepts.
func table(rs []row, res map[string]float64, extraOK func(string) bool, run Run) string {
	var sb strings.Builder
	sb.WriteString("| key | value | goal | met | note |\n|---|---:|---|---|---|\n")
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.key] = true
		val, goalText, met := "not measured", "—", "—"
		v, ok := res[r.key]
		if ok {
			val = format(v)
		}
		if r.goal != nil {
			goalText = r.goal.text
			if ok {
				met = r.goal.verdict(v)
			}
		}
		note := r.note
		if n, ok := run.notes[r.key]; ok {
			note = n
		}
		if why, ok := run.Fallbacks[r.key]; ok {
			note = fmt.Sprintf("**fallback**: %s (the figure meant: %s)", why, note)
		}
		fmt.Fprintf(&sb, "| `%s` | %s | %s | %s | %s |\n", r.key, val, goalText, met, note)
	}
	var extra []string
	for k := range res {
		if !seen[k] && extraOK(k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		fmt.Fprintf(&sb, "| `%s` | %s | — | — | |\n", k, format(res[k]))
	}
	return sb.String()
}

// Markdown is bench/RESULTS.md.
func Markdown(res map[string]float64, m Machine, run Run) string {
	why := ""
	if run.Input != nil {
		why = run.Input.NotBoundWhy
	}
	run.notes = map[string]string{"e2e_gate_cpu_s_per_million_records": pinNote(res, why)}
	var sb strings.Builder
	sb.WriteString("# Benchmark results\n\nWritten by `make bench` (`go run ./bench/report < bench/raw.txt`); the figures are also in `results.json`.\n")
	sb.WriteString("The run's raw output is `raw.txt.gz`, committed with them: `zcat bench/raw.txt.gz | go run ./bench/report -json /tmp/results.json -md /tmp/RESULTS.md -svg /tmp/fidelity.svg -readme-file /dev/null` re-derives `results.json` (without the flags, over the committed files), and bench/report's TestResultsFromCommittedRaw checks that it does.\n")
	sb.WriteString("These machines are noisy: the ratios, measured side by side in one run, are the figures that count.\n\n")
	fmt.Fprintf(&sb, "Machine: %s, %d CPUs, %s, %s", m.CPU, m.CPUs, m.GoVersion, m.Date)
	if m.Load != "" {
		fmt.Fprintf(&sb, ", load average at report time %s", m.Load)
	}
	sb.WriteString(".\n")
	if len(m.Parts) > 0 {
		sb.WriteString("\nHow long each part of the run took (`bench/run.sh`):\n\n```\n" + strings.Join(m.Parts, "\n") + "\n```\n")
	}
	if len(run.Problems) > 0 {
		sb.WriteString("\n## Problems with this run\n\n`make bench` failed on each of these, and on any goal missed (below); the figures are what the run measured.\n\n")
		for _, p := range run.Problems {
			sb.WriteString("- " + p + "\n")
		}
	}
	sb.WriteString("\n## Speed\n\n")
	sb.WriteString(table(rows, res, func(k string) bool { return !isFidelity(k) }, run))
	sb.WriteString("\nSources: " + hotpathSources(res, run.Input) + ", `sync_lua_*` from `BenchmarkSyncLua` (internal/tick: the seed's sliding-log Lua script — ZREMRANGEBYSCORE, ZCARD, ZADD if under the limit, PEXPIRE — by EVALSHA, one per record, serial, one connection, real redis-server on loopback), `e2e_*` from `BenchmarkEndToEnd` (internal/consume, 1,000,000 records per run: the pass-through, the pass-through recycling its input into franz-go's pools, the gate, the gate in exactly-once mode, through franz-go's kfake broker run in a process of its own, so the CPU figures are the client's alone, " + pinSources(res, why) + "; a run's time includes joining the group and starting up; `e2e_shared_cores_*` from `BenchmarkEndToEndSharedCores`, the pass-through and the gate with both processes left to share every core), " + routeSources(run.Input) + ", `sync_read_reduction` and `redis_commands_per_tick` from `BenchmarkReadReduction/ours`, `bytes_per_entity` from `TestMemoryPerTeam`.\n")
	sb.WriteString("`hotpath_vs_sync_lua_speedup` compares like with like: one caller each, the check's serial ns/op turned into checks/s, divided by the Lua limiter's checks/s.\n")
	sb.WriteString(fidelity(res, run.Chart))
	var missed []string
	for _, r := range append(slices.Clone(rows), fidelityRows...) {
		if v, ok := res[r.key]; ok && r.goal != nil && !r.goal.met(v) {
			missed = append(missed, fmt.Sprintf("- `%s` = %s, goal %s: %s.", r.key, format(v), r.goal.text, r.goal.by(v)))
		}
	}
	if len(missed) > 0 {
		sb.WriteString("\n## Goals missed\n\n" + strings.Join(missed, "\n") + "\n")
	}
	return sb.String()
}
