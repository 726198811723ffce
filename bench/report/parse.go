package main

import (
	"bufio"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Parsed is what the report reads from the benchmark output.
type Parsed struct {
	Bench Samples
	// BytesPerEntity is TestMemoryPerTeam's figure (NaN when absent).
	BytesPerEntity float64
	// BytesPerLongEntity is TestMemoryPerTeam's figures for teams longer than an entry
	// holds, by their length in bytes.
	BytesPerLongEntity map[int]float64
	// CPU is the last "cpu:" header line's value.
	CPU string
	// Machine is bench/run.sh's opening "machine:" line's value: the processor, the
	// CPUs and the Go version of the machine the benchmarks ran on ("" when absent).
	Machine string
	// Started is bench/run.sh's "started:" line's value: when the run began, in UTC to
	// the minute ("" when absent: a run from before the line was written).
	Started string
	// Parts are bench/run.sh's closing lines: each part and how long it took, then the
	// total.
	Parts []string
	// Skipped and Failed are the benchmarks that printed "--- SKIP:" or "--- FAIL:" (run.sh
	// runs them verbose, or a skip says nothing), in the order they did.
	Skipped, Failed []Event
	// Bound and NotBound count the end-to-end runs that said their client and broker were
	// bound to a CPU each, or not (internal/consume's e2ePin); NotBoundWhy is the last
	// reason one gave.
	Bound, NotBound int
	NotBoundWhy     string
	// runs counts each benchmark's result lines by the part of bench/run.sh they were in;
	// procs, the processes they came from, numbered by the "goos:" line each test binary
	// starts with.
	runs  map[string]map[string]int
	procs map[string]map[int]bool
	// Series is, per limiter (ours and each baseline), the fidelity chart's points:
	// admitted per window ÷ threshold in the main cap scenario. Filled by Results.
	Series map[string][]point
}

// Event is a benchmark that was skipped or failed: the part of bench/run.sh it ran in
// ("" before the first), its name, and the log line that says why ("" if none did).
type Event struct{ Part, Bench, Reason string }

// partPrefix starts bench/run.sh's line naming the part that runs next.
const partPrefix = "=== bench part: "

// machinePrefix starts bench/run.sh's first line: "machine: CPU, N CPUs, GOVERSION".
const machinePrefix = "machine:"

// startedPrefix starts bench/run.sh's second line: "started: 2006-01-02 15:04 UTC".
const startedPrefix = "started:"

var (
	eventLine    = regexp.MustCompile(`^--- (SKIP|FAIL): (\S+)`)
	logLine      = regexp.MustCompile(`^\S+\.go:\d+: `)
	boundLine    = regexp.MustCompile(`client bound to CPU \d+ \(GOMAXPROCS 1\), broker to CPU \d+`)
	notBoundLine = regexp.MustCompile(`client and broker not bound to CPUs of their own: (.*)$`)
	procSuffix   = regexp.MustCompile(`-\d+$`)
	memLine      = regexp.MustCompile(`heap per cached team at [^:]*:\s*([0-9.eE+-]+)\s*bytes`)
	memLongLine  = regexp.MustCompile(`heap per cached (\d+)-byte team at [^:]*:\s*([0-9.eE+-]+)\s*bytes`)
)

// Parse reads `go test -bench` text. A result line is the benchmark name, the iteration
// count, then value–unit pairs. Go may print the name before the figures (a benchmark
// that logs, or the streamed output of a slow one), so a name line without figures waits
// for the next line that starts with an iteration count.
func Parse(r io.Reader) (*Parsed, error) {
	p := &Parsed{Bench: Samples{}, BytesPerEntity: math.NaN(), BytesPerLongEntity: map[int]float64{}, Series: map[string][]point{},
		runs: map[string]map[string]int{}, procs: map[string]map[int]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	pending := ""
	inParts := false
	// part is the part running; lastLog the last log line since a benchmark's name; event
	// the SKIP or FAIL line just read, whose reason may be the log line after it (as
	// without -v).
	part, lastLog, proc := "", "", 0
	var event *Event
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if e := event; e != nil {
			if event = nil; e.Reason == "" && logLine.MatchString(line) {
				e.Reason = line
			}
		}
		if name, ok := strings.CutPrefix(line, partPrefix); ok {
			part = strings.TrimSpace(name)
			continue
		}
		if m := eventLine.FindStringSubmatch(line); m != nil {
			e := &Event{Part: part, Bench: procSuffix.ReplaceAllString(m[2], ""), Reason: lastLog}
			if m[1] == "SKIP" {
				p.Skipped = append(p.Skipped, *e)
				e = &p.Skipped[len(p.Skipped)-1]
			} else {
				p.Failed = append(p.Failed, *e)
				e = &p.Failed[len(p.Failed)-1]
			}
			event, lastLog = e, ""
			continue
		}
		if logLine.MatchString(line) {
			lastLog = line
		}
		if boundLine.MatchString(line) {
			p.Bound++
			continue
		}
		if m := notBoundLine.FindStringSubmatch(line); m != nil {
			p.NotBound++
			p.NotBoundWhy = m[1]
			continue
		}
		if strings.HasPrefix(line, "goos:") {
			proc++
			continue
		}
		if line == "=== bench parts (seconds)" {
			inParts = true
			continue
		}
		if inParts {
			p.Parts = append(p.Parts, line)
			inParts = !strings.HasPrefix(line, "total:")
			continue
		}
		if m := memLine.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				p.BytesPerEntity = v
			}
			continue
		}
		if m := memLongLine.FindStringSubmatch(line); m != nil {
			n, nerr := strconv.Atoi(m[1])
			if v, err := strconv.ParseFloat(m[2], 64); err == nil && nerr == nil {
				p.BytesPerLongEntity[n] = v
			}
			continue
		}
		if m, ok := strings.CutPrefix(line, machinePrefix); ok {
			p.Machine = strings.TrimSpace(m)
			continue
		}
		if d, ok := strings.CutPrefix(line, startedPrefix); ok {
			p.Started = strings.TrimSpace(d)
			continue
		}
		if cpu, ok := strings.CutPrefix(line, "cpu:"); ok {
			p.CPU = strings.TrimSpace(cpu)
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := ""
		if strings.HasPrefix(f[0], "Benchmark") {
			lastLog = ""
			name = procSuffix.ReplaceAllString(f[0], "")
			f = f[1:]
			if !figures(f) {
				pending = name
				continue
			}
		} else if pending != "" && figures(f) {
			name = pending
		} else {
			continue
		}
		pending = ""
		if p.runs[name] == nil {
			p.runs[name], p.procs[name] = map[string]int{}, map[int]bool{}
		}
		p.runs[name][part]++
		p.procs[name][proc] = true
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			p.Bench.add(name, f[i+1], v)
		}
	}
	return p, sc.Err()
}

// figures reports whether f is an iteration count followed by at least one value and unit.
func figures(f []string) bool {
	if len(f) < 3 {
		return false
	}
	if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
		return false
	}
	_, err := strconv.ParseFloat(f[1], 64)
	return err == nil
}

// Runs is how many result lines bench printed in the parts named (any part: none named).
func (p *Parsed) Runs(bench string, parts ...string) int {
	n := 0
	if p == nil {
		return 0
	}
	for part, c := range p.runs[bench] {
		if len(parts) == 0 || slices.Contains(parts, part) {
			n += c
		}
	}
	return n
}

// Processes is how many test processes bench printed a result in.
func (p *Parsed) Processes(bench string) int {
	if p == nil {
		return 0
	}
	return len(p.procs[bench])
}
