package throttle

import (
	"sync"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
)

func TestEvery(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	e := NewEvery(10*time.Second, clk)
	step := func(advance time.Duration, wantOK bool, wantSuppressed int) {
		t.Helper()
		clk.Advance(advance)
		ok, n := e.Allow()
		if ok != wantOK || n != wantSuppressed {
			t.Fatalf("after %v: Allow() = %v, %d; want %v, %d", advance, ok, n, wantOK, wantSuppressed)
		}
	}
	step(0, true, 0) // the first is let through
	step(time.Second, false, 0)
	step(time.Second, false, 0)
	step(8*time.Second-1, false, 0)
	step(1, true, 3) // exactly interval after the last let through
	step(time.Minute, true, 0)
	step(0, false, 0)
	e.Reset()
	step(0, true, 1) // Reset lets the next one through, with the count kept
	step(0, false, 0)
	step(0, false, 0)
	e.Forget()
	step(10*time.Second, true, 0) // Forget drops the two held back; the pace stays
	step(0, false, 0)
}

// TestEveryConcurrent: of many callers at one instant, exactly one is let through, and
// the next one let through counts all the others.
func TestEveryConcurrent(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	e := NewEvery(time.Second, clk)
	const n = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
	)
	for range n {
		wg.Go(func() {
			if ok, _ := e.Allow(); ok {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 1 {
		t.Fatalf("%d callers let through at one instant, want 1", allowed)
	}
	clk.Advance(time.Second)
	if ok, suppressed := e.Allow(); !ok || suppressed != n-1 {
		t.Fatalf("Allow() = %v, %d; want true, %d", ok, suppressed, n-1)
	}
}

func TestEveryWallClock(t *testing.T) {
	t.Parallel()
	e := NewEvery(time.Hour, nil)
	if ok, _ := e.Allow(); !ok {
		t.Fatal("first Allow on the wall clock refused")
	}
	if ok, _ := e.Allow(); ok {
		t.Fatal("second Allow within the hour let through")
	}
}
