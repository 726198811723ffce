// Package throttle paces repeated log lines: a failure that repeats every second (a
// broker down, Redis unreachable) logs its first line at once, then at most one line
// per interval, each saying how many were left out since the one before.
package throttle

import (
	"sync"
	"time"

	"github.com/capturegate/gate/internal/clock"
)

// Every lets through at most one event per interval. It is safe for concurrent use.
type Every struct {
	interval time.Duration
	clock    clock.Clock

	mu         sync.Mutex
	last       time.Time // when an event was last let through; zero: never, or since Reset
	suppressed int       // events held back since then
}

// NewEvery returns an Every that lets an event through at most once per interval, as
// clk tells the time (nil: the wall clock). The first event is let through.
func NewEvery(interval time.Duration, clk clock.Clock) *Every {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Every{interval: interval, clock: clk}
}

// Allow reports whether to log now: true for the first event, and then for the first
// one at least interval after the last let through. When true, suppressed is how many
// events were held back since the last one let through; the count then starts again.
func (e *Every) Allow() (ok bool, suppressed int) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && now.Sub(e.last) < e.interval {
		e.suppressed++
		return false, 0
	}
	suppressed, e.last, e.suppressed = e.suppressed, now, 0
	return true, suppressed
}

// Reset forgets the last event let through: the next Allow returns true. The count of
// events held back is kept for it.
func (e *Every) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last = time.Time{}
}

// Forget drops the count of events held back since the last one let through, which the
// caller has accounted for otherwise (a line summing a failure's whole stretch); the pace
// stays.
func (e *Every) Forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.suppressed = 0
}
