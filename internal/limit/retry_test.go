package limit

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// retryTeam is a limiter of either clock and one team checked at the wall clock's time
// (its own event time under EventClock), in a one-hour window that holds every tier
// between reads: the leak is 1000 / 3600 per second under WallClock, and nothing within
// the window under EventClock.
type retryTeam struct {
	l *Limiter
}

func newRetryTeam(t *testing.T, lc Clock, mod func(*Config)) retryTeam {
	cfg := Config{
		Window: time.Hour, Threshold: 1000, SyncInterval: 8 * time.Second, Clock: lc,
		MaxEventAge: 10 * time.Minute, TTL: time.Hour, IdleTimeout: time.Hour,
	}
	if mod != nil {
		mod(&cfg)
	}
	l, _, _ := newTest(t, cfg)
	return retryTeam{l}
}

// check counts n records of team at at, at at's own time.
func (rt retryTeam) check(at time.Time, team string, n int64) Decision {
	return rt.l.CheckEventAt(at, at, team, n)
}

// read sweeps at s seconds, keeping team live first (under EventClock a window's entry
// is read only while checks use it), and returns the read planned for it, or nil.
func (rt retryTeam) read(t *testing.T, s int, team string) *Read {
	t.Helper()
	now := at(time.Duration(s) * time.Second)
	rt.check(now, team, 0)
	r := findRead(sweep(t, rt.l, now), team)
	if r != nil && r.Epoch != rt.l.Epoch(now) {
		t.Errorf("second %d: read of %q in epoch %d, want %d", s, team, r.Epoch, rt.l.Epoch(now))
	}
	return r
}

var bothClocks = []Clock{WallClock, EventClock}

// A read that failed (ApplyLocal) keeps the team due: it is read again on the next sweep,
// and on every sweep after through an outage, the view meanwhile rebuilt from local counts
// (fail-open). The first read that succeeds ends that and the tier's cadence takes over.
func TestFailedReadRetriedNextSweep(t *testing.T) {
	for _, lc := range bothClocks {
		t.Run(lc.String(), func(t *testing.T) {
			rt := newRetryTeam(t, lc, nil)
			rt.check(t0, "a", 20) // 2%: above the sync floor, idle tier
			rt.check(t0, "below", 9)
			r := rt.read(t, 0, "a")
			if r == nil || r.Reason != ReadFirst {
				t.Fatalf("first sweep: read %+v, want a first read", r)
			}
			rt.l.ApplyLocal(r, t0)
			if d := rt.check(t0, "a", 0); d.Level != 20 {
				t.Errorf("level after the failed read = %v, want 20 (rebuilt from local counts)", d.Level)
			}
			// The team view says the estimate is this gate's rebuild, not the fleet's: it
			// gave the rebuild's time as the read's, fresh through a whole outage.
			if s, ok := rt.l.Snapshot(t0, "a"); !ok || !s.Local {
				t.Errorf("snapshot after a failed read: %+v, want Local", s)
			}
			// Redis stays down three more ticks: every one retries, and the view keeps
			// draining (wall clock) with a record counted on each.
			for s := 1; s <= 3; s++ {
				rt.check(at(time.Duration(s)*time.Second), "a", 1)
				r := rt.read(t, s, "a")
				if r == nil || r.Reason != ReadRetry {
					t.Fatalf("second %d, after a failed read: read %+v, want reason %v", s, r, ReadRetry)
				}
				rt.l.ApplyLocal(r, at(time.Duration(s)*time.Second))
				want := 20 + float64(s)
				if lc == WallClock {
					want -= 1000.0 / 3600 * float64(s)
				}
				// Its rate is kept to three digits (bfloat16): within 0.4% of what drained.
				if got := rt.check(at(time.Duration(s)*time.Second), "a", 0).Level; math.Abs(got-want) > 0.004*1000.0/3600*float64(s)+1e-5 {
					t.Errorf("second %d: level %v after a failed read, want %v", s, got, want)
				}
			}
			// Redis answers: the fleet counted 30 more than this gate.
			r = rt.read(t, 4, "a")
			if r == nil || r.Reason != ReadRetry {
				t.Fatalf("second 4: read %+v, want reason %v", r, ReadRetry)
			}
			rt.l.ApplyRead(r, 53, 0, at(4*time.Second))
			if got := rt.check(at(4*time.Second), "a", 0).Level; got != 53 {
				t.Errorf("level after the read = %v, want 53", got)
			}
			if s, ok := rt.l.Snapshot(at(4*time.Second), "a"); !ok || s.Local {
				t.Errorf("snapshot after a read: %+v, want it not Local", s)
			}
			// 5%: idle above the floor, read at the low cadence (4 × 8 s) and no sooner.
			var secs []int
			var reasons []ReadReason
			for s := 5; s <= 70; s++ {
				if r := rt.read(t, s, "a"); r != nil {
					secs = append(secs, s)
					reasons = append(reasons, r.Reason)
					rt.l.ApplyRead(r, 53, 0, at(time.Duration(s)*time.Second))
				}
				if r := rt.read(t, s, "below"); r != nil {
					t.Fatalf("second %d: never-read team below the sync floor read: %+v", s, r)
				}
			}
			if want := []int{36, 68}; !slices.Equal(secs, want) {
				t.Errorf("after a successful read: read at seconds %v, want %v (the low cadence)", secs, want)
			}
			for i, reason := range reasons {
				if reason != ReadCadence {
					t.Errorf("read at %ds: reason %v, want %v", secs[i], reason, ReadCadence)
				}
			}
		})
	}
}

// A team read below the sync floor (its view older than TTL) whose read failed is retried
// until one read succeeds, and then left alone again: below the floor it is read at the
// TTL only, not on every tick for ever.
func TestFailedReadBelowFloorRetriedOnce(t *testing.T) {
	for _, lc := range bothClocks {
		t.Run(lc.String(), func(t *testing.T) {
			rt := newRetryTeam(t, lc, func(c *Config) { c.TTL = 20 * time.Second })
			rt.check(t0, "a", 10) // 1%: at the floor
			r := rt.read(t, 0, "a")
			if r == nil || r.Reason != ReadFirst {
				t.Fatalf("first sweep: read %+v, want a first read", r)
			}
			rt.l.ApplyRead(r, 0, 0, t0) // the store lost them: pressure 0
			var got []string
			for s := 1; s <= 60; s++ {
				r := rt.read(t, s, "a")
				if r == nil {
					continue
				}
				got = append(got, fmt.Sprintf("%d:%v", s, r.Reason))
				if s < 23 { // Redis down from second 20 to 22
					rt.l.ApplyLocal(r, at(time.Duration(s)*time.Second))
				} else {
					rt.l.ApplyRead(r, 0, 0, at(time.Duration(s)*time.Second))
				}
			}
			want := []string{"20:ttl", "21:retry", "22:retry", "23:retry", "43:ttl"}
			if !slices.Equal(got, want) {
				t.Errorf("reads %v, want %v", got, want)
			}
		})
	}
}

// A planned read neither applied nor failed (the tick put it off: over budget, writes
// carried) changes nothing: a retry stays due, a successful read is still needed.
func TestRetryStaysDueWhenPutOff(t *testing.T) {
	for _, lc := range bothClocks {
		t.Run(lc.String(), func(t *testing.T) {
			rt := newRetryTeam(t, lc, nil)
			rt.check(t0, "a", 20)
			rt.l.ApplyLocal(rt.read(t, 0, "a"), t0)
			for s := 1; s <= 3; s++ { // planned, never applied
				if r := rt.read(t, s, "a"); r == nil || r.Reason != ReadRetry {
					t.Fatalf("second %d: read %+v, want reason %v", s, r, ReadRetry)
				}
			}
			rt.l.ApplyRead(rt.read(t, 4, "a"), 20, 0, at(4*time.Second))
			if r := rt.read(t, 5, "a"); r != nil {
				t.Errorf("after a successful read: read %+v, want none", r)
			}
		})
	}
}

// The flag of a failed read is the low bit of readAt: the view's time is off by 1 ns at
// most, the snapshot shows the time of the read, and a read applied at an odd nanosecond
// (any wall clock's) clears it.
func TestFailedReadSnapshot(t *testing.T) {
	for _, lc := range bothClocks {
		t.Run(lc.String(), func(t *testing.T) {
			rt := newRetryTeam(t, lc, nil)
			rt.check(t0, "a", 20)
			now := t0.Add(time.Second + 12345) // an odd nanosecond
			rt.l.ApplyLocal(rt.read(t, 0, "a"), now)
			s, ok := rt.l.Snapshot(now, "a")
			if !ok || !s.ReadAt.Equal(now.Add(-1)) && !s.ReadAt.Equal(now) {
				t.Errorf("snapshot after a failed read: ReadAt %v, want %v", s.ReadAt, now)
			}
			next := now.Add(time.Second)
			r := findRead(sweep(t, rt.l, next), "a")
			if r == nil || r.Reason != ReadRetry {
				t.Fatalf("read %+v, want reason %v", r, ReadRetry)
			}
			a := rt.l.ApplyRead(r, 20, 0, next)
			if d := a.Staleness - time.Second; d < -1 || d > 1 {
				t.Errorf("staleness %v, want 1s (since the local rebuild)", a.Staleness)
			}
			if s, _ := rt.l.Snapshot(next, "a"); s.ReadAt.Sub(next).Abs() > 1 {
				t.Errorf("snapshot after the read: ReadAt %v, want %v", s.ReadAt, next)
			}
			// A read applied at an odd nanosecond is not taken for a failed one.
			later := next.Add(time.Second)
			rt.check(later, "a", 0)
			if r := findRead(sweep(t, rt.l, later), "a"); r != nil {
				t.Errorf("after a read applied at an odd nanosecond: read %+v, want none", r)
			}
		})
	}
}

// A read that failed keeps the fleet factor the last answered read learned, for the reads
// after it (the tick scales this gate's counts Redis refuses by it), while the rebuilt
// view's level counts this gate's records one each: fail-open. Packed as 1, one failed
// read during a refusal of every gate's writes left each gate counting its own refused
// records alone (TestFleetRefusingWritesKeepsLimitThroughAFailedRead, internal/tick).
func TestFailedReadKeepsTheFleetFactor(t *testing.T) {
	rt := newRetryTeam(t, WallClock, nil)
	rt.check(t0, "a", 20)
	r := rt.read(t, 0, "a")
	rt.l.ApplyRead(r, 20, 0, t0) // the first read: factor 1
	rt.check(at(time.Second), "a", 10)
	next := func(from int) (*Read, int) {
		for s := from; s <= 200; s++ {
			if r := rt.read(t, s, "a"); r != nil {
				return r, s
			}
		}
		t.Fatal("no read of the team in 200 s")
		return nil, 0
	}
	r, s := next(1)
	rt.l.ApplyRead(r, 20+50, 0, at(time.Duration(s)*time.Second)) // the fleet counted 50 as this gate counted 10
	learned := rt.l.FleetFactor(r)
	if learned <= 1 {
		t.Fatalf("fleet factor %v after a read of the fleet's 50 to this gate's 10, want above 1", learned)
	}
	rt.check(at(time.Duration(s+1)*time.Second), "a", 1)
	r, s = next(s + 1)
	now := at(time.Duration(s) * time.Second)
	rt.l.ApplyLocal(r, now)
	if got := rt.l.FleetFactor(r); got != learned {
		t.Errorf("fleet factor %v after a failed read, want the last answered read's %v", got, learned)
	}
	before := rt.check(now, "a", 0).Level
	if got := rt.check(now, "a", 1).Level; got != before {
		t.Fatalf("a check's level %v, want the level before its record (%v)", got, before)
	}
	if got := rt.check(now, "a", 0).Level; math.Abs(got-(before+1)) > 1e-9 {
		t.Errorf("level %v after one record on the rebuilt view, want %v: one each, fail-open", got, before+1)
	}
}

// A check racing a failed read's apply (ApplyLocal stores the view's estimate and its
// read time, two words) reads a level between the level before and after it. With the
// read time stored first, a check between the two stores took the last answered read's
// estimate, of half an hour before, as of now, undrained: a team at half its limit read
// at 1.005 × it, and was limited (and could be held for a window).
func TestCheckBetweenAFailedReadsStores(t *testing.T) {
	rt := newRetryTeam(t, WallClock, nil)
	rt.check(t0, "a", 20)
	next := func(from int) (*Read, int) {
		t.Helper()
		for s := from; s <= from+600; s++ {
			if r := rt.read(t, s, "a"); r != nil {
				return r, s
			}
		}
		t.Fatalf("no read of the team from second %d on for 600 s", from)
		return nil, 0
	}
	r := rt.read(t, 0, "a")
	rt.l.ApplyRead(r, 20, 1000, t0) // the fleet at its limit in the window before
	rt.check(at(1800*time.Second), "a", 1)
	r, s := next(1800)
	now := at(time.Duration(s) * time.Second)
	before := rt.check(now, "a", 0)
	if before.Limited || before.Level > 700 {
		t.Fatalf("level %v (limited %v) half an hour on, want the window before's 1,000 half aged out", before.Level, before.Limited)
	}
	var between Decision
	rt.l.afterViewEstimate = func() { between = rt.check(now, "a", 0) }
	rt.l.ApplyLocal(r, now)
	rt.l.afterViewEstimate = nil
	after := rt.check(now, "a", 0)
	if between.Limited || between.Level > max(before.Level, after.Level)+1e-9 {
		t.Errorf("a check between the failed read's two stores: level %v, limited %v; want at most the level before (%v) or after (%v)",
			between.Level, between.Limited, before.Level, after.Level)
	}
}
