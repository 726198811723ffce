package limit

import (
	"testing"
	"time"
)

// A check of a negative cost counts nothing, as a cached key's does (only n > 0 is
// counted). A key under its floor, answered from the sketch, had it added to its 32-bit
// counters: −1 on a key not yet counted read as 2^32 − 1 records, and the key's next
// record promoted it carrying four billion records of this window, over its limit for
// the rest of it (on one counted already, it took records off).
func TestNegativeCostOfAnUntrackedKeyCountsNothing(t *testing.T) {
	l, _, _ := newTest(t, Config{Mode: Divert, Window: time.Minute, Threshold: 1000, SketchWidth: DefaultSketchWidth})
	if l.untrackedFloor.Load() == 0 {
		t.Fatal("no untracked floor: the test needs keys under it counted in the sketch")
	}
	l.CheckAt(t0, "k", -1)
	l.CheckAt(t0, "k", 1)
	if d := l.CheckAt(t0, "k", 1); d.Limited || d.Level > 10 {
		t.Errorf("after a check of cost −1 and one of 1 the key's level is %v (limited %v), want its 1 record", d.Level, d.Limited)
	}
}
