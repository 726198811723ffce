package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		runtime    int64  // the runtime's limit before (0: math.MaxInt64, Go's default, none)
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
		{name: "GOMEMLIMIT wins", env: map[string]string{"GOMEMLIMIT": "900MiB"}, runtime: 900 << 20, ratio: 0.9, limit: gib, want: 900 << 20, wantFrom: "GOMEMLIMIT=900MiB", wantBytes: 900 << 20},
		// GOMEMLIMIT=off leaves the runtime without a limit (math.MaxInt64): the start-up
		// line said 9223372036854775807 where it says 0 for none.
		{name: "GOMEMLIMIT off", env: map[string]string{"GOMEMLIMIT": "off"}, ratio: 0.9, limit: gib, want: math.MaxInt64, wantFrom: "GOMEMLIMIT=off", wantBytes: 0},
		{name: "off", ratio: 0, limit: gib, want: math.MaxInt64, wantFrom: "GATE_MEMORY_LIMIT_RATIO=0"},
		{name: "no container limit", ratio: 0.9, err: memlimit.ErrNoLimit, want: math.MaxInt64, wantFrom: "no memory limit", wantAsked: true},
		{name: "unreadable", ratio: 0.9, err: errors.New("open /sys/fs/cgroup/memory.max: permission denied"), want: math.MaxInt64, wantFrom: "could not be read", wantErr: true, wantAsked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMemory{limit: tc.limit, err: tc.err, runtime: cmp.Or(tc.runtime, math.MaxInt64)}
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

// A pod resized in place has a new cgroup limit and no restart: serve's follower sets
// the runtime's limit to the ratio of each new container limit it reads, and leaves it
// alone while the limit stays; a read that fails keeps the limit and is logged once
// until one succeeds; a container whose limit goes leaves the runtime without one. Each
// read answers from reads, which also paces the test with the follower; a tick sent
// waits until the follower is done with the one before.
func TestFollowMemoryLimit(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	type answer struct {
		n   uint64
		err error
	}
	reads := make(chan answer)
	var set []int64
	runtimeLimit := int64(966367641) // 0.9 GiB, as setMemoryLimit left it
	m := memoryHost{
		container: func() (uint64, error) { a := <-reads; return a.n, a.err },
		set: func(n int64) int64 {
			set = append(set, n)
			old := runtimeLimit
			runtimeLimit = n
			return old
		},
	}
	var logs strings.Builder
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followMemoryLimit(ctx, log, ticks, 0.9, m, gib)
	}()
	read := func(a answer) {
		ticks <- time.Time{}
		reads <- a
	}
	read(answer{n: gib})                                           // unchanged
	read(answer{n: 2 * gib})                                       // grown
	read(answer{err: errors.New("cgroup file gone")})              // failing: logged once,
	read(answer{err: errors.New("cgroup file gone")})              // not twice
	read(answer{n: gib / 2})                                       // shrunk
	read(answer{err: fmt.Errorf("none: %w", memlimit.ErrNoLimit)}) // no limit any more
	ticks <- time.Time{}                                           // the last read done
	cancel()
	reads <- answer{err: memlimit.ErrNoLimit} // the tick's read, unchanged
	<-done

	want := []int64{1932735283, 483183820, math.MaxInt64}
	if !slices.Equal(set, want) {
		t.Errorf("runtime limits set %v, want %v (0.9 of 2 GiB, of 0.5 GiB, then none)", set, want)
	}
	out := logs.String()
	if n := strings.Count(out, "reading the container's memory limit again failed"); n != 1 {
		t.Errorf("the failing read logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `"msg":"Go memory limit follows the container's"`); n != 3 {
		t.Errorf("%d changes logged, want 3:\n%s", n, out)
	}
	if !strings.Contains(out, `"container_limit":2147483648,"container_limit_before":1073741824,"go_mem_limit":1932735283,"go_mem_limit_before":966367641`) {
		t.Errorf("the resize's line does not give both limits, before and after:\n%s", out)
	}
}

// serve follows the container's limit while it runs (a pod resized in place): read
// again every memoryHost.every, here 10ms, its new limit sets the runtime's, logged.
func TestServeFollowsTheContainersLimit(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	var container atomic.Uint64
	container.Store(1 << 30)
	var mu sync.Mutex
	var set []int64
	env := map[string]string{
		"GATE_KAFKA_BROKERS": closedPort(t),
		"GATE_REDIS_URLS":    rs.URL(),
		"GATE_HTTP_ADDR":     "127.0.0.1:0",
	}
	g := startGateFunc(t, func(ctx context.Context, stderr io.Writer) error {
		h := testHost(env)
		h.memory = memoryHost{
			container: func() (uint64, error) { return container.Load(), nil },
			set: func(n int64) int64 {
				mu.Lock()
				defer mu.Unlock()
				set = append(set, n)
				return 0
			},
			every: 10 * time.Millisecond,
		}
		return run(ctx, []string{"serve"}, h, io.Discard, stderr)
	})
	container.Store(2 << 30) // resized
	waitFor(t, 10*time.Second, "the resize followed", func() bool {
		return strings.Contains(g.stderr.String(), `"msg":"Go memory limit follows the container's","container_limit":2147483648`)
	})
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int64{966367641, 1932735283}; !slices.Equal(set, want) {
		t.Errorf("runtime limits set %v, want %v (0.9 of 1 GiB at start, of 2 GiB once resized)", set, want)
	}
}
