package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memLimit is the Go runtime's soft memory limit as serve leaves it (setMemoryLimit):
// bytes, 0 for none, and where it came from, for the start-up line.
type memLimit struct {
	bytes int64
	from  string
	// container is the container's limit the runtime's was set from (0: not set from
	// it), which serve then follows (followMemoryLimit).
	container uint64
}

// memoryHost is what setMemoryLimit asks of the process: the container's memory limit
// (memlimit.FromCgroup in main; memlimit.ErrNoLimit when it has none) and the runtime's
// setter (debug.SetMemoryLimit: a negative value reads the limit without changing it).
// Apart from host's other fields so that the tests, which run serve in one process,
// leave the test binary's limit alone (nil: not set).
type memoryHost struct {
	container func() (uint64, error)
	set       func(int64) int64
	every     time.Duration // how often serve reads the container's again; 0: memoryFollowEvery
}

// setMemoryLimit sets the runtime's soft memory limit to ratio (GATE_MEMORY_LIMIT_RATIO)
// of the container's memory limit, unless GOMEMLIMIT is set (the runtime read it at
// start: an operator's value wins) or ratio is 0. Not the whole limit: the runtime
// counts only its own memory, and the kernel charges the container for socket buffers
// and its other memory too; at the whole limit the collector would let the heap grow
// until the kernel killed the process, rather than collect harder first. Without a
// container limit (or off Linux) the runtime keeps Go's default, none. A limit that
// cannot be read is no reason not to start: the error comes back with the memLimit
// saying none was set, for serve to log.
func setMemoryLimit(getenv func(string) string, ratio float64, m memoryHost) (memLimit, error) {
	if v := getenv("GOMEMLIMIT"); v != "" {
		b := m.set(-1)
		if b == math.MaxInt64 {
			b = 0 // GOMEMLIMIT=off: none, which the start-up line says as 0
		}
		return memLimit{bytes: b, from: "GOMEMLIMIT=" + v}, nil
	}
	if ratio == 0 {
		return memLimit{from: "none: GATE_MEMORY_LIMIT_RATIO=0"}, nil
	}
	n, err := m.container()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit):
		return memLimit{from: "none: the container has no memory limit"}, nil
	case err != nil:
		return memLimit{from: "none: the container's memory limit could not be read"},
			fmt.Errorf("reading the container's memory limit for the Go runtime's (GOMEMLIMIT sets one instead): %w", err)
	}
	b := shareOf(n, ratio)
	m.set(b)
	return memLimit{bytes: b, container: n, from: fmt.Sprintf("%s of the container's memory limit (%d bytes)", strconv.FormatFloat(ratio, 'f', -1, 64), n)}, nil
}

// memoryFollowEvery is how often serve reads the container's memory limit again
// (followMemoryLimit): a pod resized in place (Kubernetes' InPlacePodVerticalScaling)
// gets a new cgroup limit without a restart, and a runtime limit left at the old one
// either lets the heap grow past the new limit until the kernel kills the process
// (shrunk) or collects harder than it needs to (grown).
const memoryFollowEvery = time.Minute

// followMemoryLimit keeps the runtime's limit at ratio of the container's as the
// container's changes, reading it at each tick until ctx ends: started by serve when
// setMemoryLimit set a limit from the container's (m), whose limit then was last. A
// change is logged once, with both limits; a read that fails is logged once until one
// succeeds again, the limit left as it was; a container that no longer has a limit
// leaves the runtime without one too.
func followMemoryLimit(ctx context.Context, log *slog.Logger, ticks <-chan time.Time, ratio float64, m memoryHost, last uint64) {
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		n, err := m.container()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit):
			n = 0
		case err != nil:
			if !failing {
				log.Warn("reading the container's memory limit again failed; the Go memory limit stays as it was", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		if n == last {
			continue
		}
		b := int64(math.MaxInt64) // none
		if n > 0 {
			b = shareOf(n, ratio)
		}
		old := m.set(b)
		log.Info("Go memory limit follows the container's", "container_limit", n, "container_limit_before", last,
			"go_mem_limit", b, "go_mem_limit_before", old)
		last = n
	}
}

// shareOf is ratio of a container's limit of n bytes, in the runtime's terms.
func shareOf(n uint64, ratio float64) int64 {
	// float64(math.MaxInt64) is 2^63, past int64: converted, it would be negative.
	if f := float64(n) * ratio; f < math.MaxInt64 {
		return int64(f)
	}
	return math.MaxInt64
}
