package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/capturegate/gate/internal/redistest"
)

// fakeMemory is a memoryHost whose container has limit (or err) and whose runtime limit
// is a variable: what setMemoryLimit asked of each.
type fakeMemory struct {
	limit   uint64
	err     error
	asked   bool    // the container was asked its limit
	set     []int64 // the values set, -1 for a read
	runtime int64   // the runtime's limit
}

func (f *fakeMemory) host() memoryHost {
	return memoryHost{
		container: func() (uint64, error) { f.asked = true; return f.limit, f.err },
		set: func(n int64) int64 {
			f.set = append(f.set, n)
			old := f.runtime
			if n >= 0 {
				f.runtime = n
			}
			return old
		},
	}
}

// The runtime's limit is GATE_MEMORY_LIMIT_RATIO of the container's, unless GOMEMLIMIT
// is set or the ratio is 0; a container without a limit, or one whose limit cannot be
// read, leaves the runtime without one (and the second says why).
func TestSetMemoryLimit(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	for _, tc := range []struct {
		name       string
		env        map[string]string
		ratio      float64
		limit      uint64
		err        error
		want       int64  // the runtime's limit after, math.MaxInt64 for Go's default, none
		wantFrom   string // in memLimit.from
		wantErr    bool
		wantAsked  bool // the container was asked its limit
		wantBytes  int64
		wantWrites int // limits set, reads not counted
	}{
		{name: "ratio of the container's", ratio: 0.9, limit: gib, want: 966367641, wantFrom: "0.9 of the container's memory limit (1073741824 bytes)", wantAsked: true, wantBytes: 966367641, wantWrites: 1},
		{name: "the whole limit", ratio: 1, limit: gib, want: gib, wantFrom: "1 of the container's", wantAsked: true, wantBytes: gib, wantWrites: 1},
		{name: "a limit past int64", ratio: 1, limit: math.MaxUint64, want: math.MaxInt64, wantFrom: "1 of the container's", wantAsked: true, wantBytes: math.MaxInt64, wantWrites: 1},
		{name: "GOMEMLIMIT wins", env: map[string]string{"GOMEMLIMIT": "900MiB"}, ratio: 0.9, limit: gib, want: math.MaxInt64, wantFrom: "GOMEMLIMIT=900MiB", wantBytes: math.MaxInt64},
		{name: "off", ratio: 0, limit: gib, want: math.MaxInt64, wantFrom: "GATE_MEMORY_LIMIT_RATIO=0"},
		{name: "no container limit", ratio: 0.9, err: memlimit.ErrNoLimit, want: math.MaxInt64, wantFrom: "no memory limit", wantAsked: true},
		{name: "unreadable", ratio: 0.9, err: errors.New("open /sys/fs/cgroup/memory.max: permission denied"), want: math.MaxInt64, wantFrom: "could not be read", wantErr: true, wantAsked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMemory{limit: tc.limit, err: tc.err, runtime: math.MaxInt64}
			m, err := setMemoryLimit(getenvFrom(tc.env), tc.ratio, f.host())
			if (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("error %v, want one: %v (with the cause)", err, tc.wantErr)
			}
			writes := 0
			for _, n := range f.set {
				if n >= 0 {
					writes++
				}
			}
			if f.runtime != tc.want || writes != tc.wantWrites || f.asked != tc.wantAsked {
				t.Errorf("runtime limit %d after %v, container asked %v; want %d after %d writes, asked %v", f.runtime, f.set, f.asked, tc.want, tc.wantWrites, tc.wantAsked)
			}
			if m.bytes != tc.wantBytes || !strings.Contains(m.from, tc.wantFrom) {
				t.Errorf("memLimit %+v, want %d bytes from %q", m, tc.wantBytes, tc.wantFrom)
			}
		})
	}
}

// serve sets the runtime's limit before it starts anything and says so in its start-up
// line, with where it came from.
func TestServeSetsTheMemoryLimit(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	f := &fakeMemory{limit: 1 << 30, runtime: math.MaxInt64}
	env := map[string]string{
		"GATE_KAFKA_BROKERS":      closedPort(t),
		"GATE_REDIS_URLS":         rs.URL(),
		"GATE_HTTP_ADDR":          "127.0.0.1:0",
		"GATE_MEMORY_LIMIT_RATIO": "0.75",
	}
	g := startGateFunc(t, func(ctx context.Context, stderr io.Writer) error {
		h := testHost(env)
		h.memory = f.host()
		return run(ctx, []string{"serve"}, h, io.Discard, stderr)
	})
	var line struct {
		Limit int64   `json:"go_mem_limit"`
		From  string  `json:"go_mem_limit_from"`
		Ratio float64 `json:"memory_limit_ratio"`
	}
	for l := range strings.SplitSeq(g.stderr.String(), "\n") {
		if strings.Contains(l, `"msg":"gate started"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("start-up line %q: %v", l, err)
			}
		}
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	const want = 805306368 // 0.75 GiB
	if line.Limit != want || !strings.Contains(line.From, "0.75 of the container's memory limit") || line.Ratio != 0.75 {
		t.Errorf("start-up line: go_mem_limit %d from %q, memory_limit_ratio %v; want %d from 0.75 of the container's", line.Limit, line.From, line.Ratio, want)
	}
	if len(f.set) != 1 || f.set[0] != want {
		t.Errorf("runtime limits set: %v, want [%d]", f.set, want)
	}
}
