package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memLimit is the Go runtime's soft memory limit as serve leaves it (setMemoryLimit):
// bytes, 0 for none, and where it came from, for the start-up line.
type memLimit struct {
	bytes int64
	from  string
}

// memoryHost is what setMemoryLimit asks of the process: the container's memory limit
// (memlimit.FromCgroup in main; memlimit.ErrNoLimit when it has none) and the runtime's
// setter (debug.SetMemoryLimit: a negative value reads the limit without changing it).
// Apart from host's other fields so that the tests, which run serve in one process,
// leave the test binary's limit alone (nil: not set).
type memoryHost struct {
	container func() (uint64, error)
	set       func(int64) int64
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
		return memLimit{bytes: m.set(-1), from: "GOMEMLIMIT=" + v}, nil
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
	// float64(math.MaxInt64) is 2^63, past int64: converted, it would be negative.
	b := int64(math.MaxInt64)
	if f := float64(n) * ratio; f < math.MaxInt64 {
		b = int64(f)
	}
	m.set(b)
	return memLimit{bytes: b, from: fmt.Sprintf("%s of the container's memory limit (%d bytes)", strconv.FormatFloat(ratio, 'f', -1, 64), n)}, nil
}
