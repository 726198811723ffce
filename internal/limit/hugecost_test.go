package limit

import (
	"math"
	"testing"
	"time"
)

// checkWithin runs f, failing the test if it has not returned within a second: a check
// that loops for good would otherwise hang the test binary.
func checkWithin(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("%s: still running after a second (a check looping for good)", what)
	}
}

// Checks of a huge cost in divert mode, each clamped to MaxThreshold, add up within a
// tick past the unsent word's room for a count (2^47): the sum reached the word's moved
// bit, every check of the team then took the entry for one moved and looped for good
// trying to count in the team's current entry, which was the same one.
func TestHugeCostsSummedInATickDoNotHangChecks(t *testing.T) {
	l, _, _ := newTest(t, Config{Mode: Divert, Window: time.Minute, Threshold: 1000})
	checkWithin(t, "20 checks of cost MaxInt64", func() {
		for range 20 {
			l.CheckAt(t0, "big", math.MaxInt64)
		}
	})
	checkWithin(t, "a check of cost 1 after them", func() {
		if d := l.CheckAt(t0, "big", 1); !d.Limited {
			t.Errorf("the team is not limited after 20 checks of cost MaxInt64: level %v", d.Level)
		}
	})
	checkWithin(t, "a sweep after them", func() {
		sw := sweep(t, l, t0.Add(time.Second))
		var n int64
		for _, c := range sw.Counts {
			if c.N < 0 {
				t.Errorf("count %+v is negative", c)
			}
			n += c.N
		}
		if n < 8*MaxThreshold {
			t.Errorf("the sweep hands the tick %d records of the team, want at least 8 × MaxThreshold", n)
		}
	})
}

// Under the event clock a check's cost was not clamped as the wall clock's is: a cost of
// MaxInt64 and one more record reached the count word's moved bit, and the check looped
// for good (recountEvent) finding the same entry.
func TestEventHugeCostDoesNotHangChecks(t *testing.T) {
	cfg := eventConfig(time.Minute, 1000)
	cfg.Mode = Divert
	l, _, _ := newTest(t, cfg)
	checkWithin(t, "checks of cost MaxInt64 and 1", func() {
		l.CheckEventAt(t0, t0, "big", math.MaxInt64)
		l.CheckEventAt(t0, t0, "big", 1)
	})
	checkWithin(t, "a check after them", func() {
		if d := l.CheckEventAt(t0, t0, "big", 1); !d.Limited {
			t.Errorf("the team is not limited after a check of cost MaxInt64: level %v", d.Level)
		}
	})
}

// A key under its floor, counted in the sketch, checked with a cost near MaxInt64: the
// sketch's count plus the cost overflowed int64, read as under the floor, and the record
// was admitted uncached and added to the sketch's 32-bit counters cut to 2^32 − 1, which
// took one record off the key's count rather than put it over its limit. The cost is
// clamped before the sketch sees it, as it was before the count.
func TestHugeCostOfAnUntrackedKeyIsLimited(t *testing.T) {
	l, _, _ := newTest(t, Config{Mode: Divert, Window: time.Minute, Threshold: 1000, SketchWidth: DefaultSketchWidth})
	if l.untrackedFloor.Load() == 0 {
		t.Fatal("no untracked floor: the test needs keys under it counted in the sketch")
	}
	l.CheckAt(t0, "k", 1) // under the floor: in the sketch
	if d := l.CheckAt(t0, "k", math.MaxInt64); d.Level < float64(d.Threshold) && l.Len() == 0 {
		t.Errorf("a check of cost MaxInt64 answered from the sketch, level %v, nothing cached", d.Level)
	}
	if d := l.CheckAt(t0, "k", 1); !d.Limited {
		t.Errorf("after a check of cost MaxInt64 the key is not limited: level %v, threshold %d", d.Level, d.Threshold)
	}
}
