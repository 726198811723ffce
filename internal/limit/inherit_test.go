package limit

import (
	"testing"
	"time"
)

// TestInheritStateKeepsHoldsAndCountsOnce: a limiter built for a reloaded rule that did
// not change takes over, from the one it replaces, each team's last read, what that one
// counted since, and its hold, so a held team stays held, and is released when its hold
// would have ended; the new limiter hands none of the old one's counts to its tick, which
// the old one's last sweep writes.
func TestInheritStateKeepsHoldsAndCountsOnce(t *testing.T) {
	old, _, _ := newTest(t, holdConfig())
	// a and b: read at 600 of 600, held from the first sweep (1 s), ageing out at 10/s,
	// under the release level (480) from 12 s, less a's own records.
	establish(t, old, t0, "a", 600)
	establish(t, old, t0, "b", 600)
	old.CheckAt(t0, "a", 0)
	old.CheckAt(t0, "b", 0)
	sweepEvery(t, old, 0, 5*time.Second)
	old.CheckAt(at(5*time.Second), "a", 30) // handed to old's tick by the next sweep
	sweepEvery(t, old, 5*time.Second, 14*time.Second)
	old.CheckAt(at(14500*time.Millisecond), "a", 20) // unsent at the reload
	now := at(15 * time.Second)

	l, _, _ := newTest(t, holdConfig())
	l.InheritState(old)
	for _, team := range []string{"a", "b"} {
		was, _ := old.Snapshot(now, team)
		got, ok := l.Snapshot(now, team)
		if !ok || got.Level != was.Level || got.Estimate != was.Estimate || !got.ReadAt.Equal(was.ReadAt) || !got.HeldSince.Equal(was.HeldSince) || !got.ReleaseAt.Equal(was.ReleaseAt) {
			t.Errorf("%s after the reload: %+v (cached %v), want as before it: %+v", team, got, ok, was)
		}
	}
	// b is at 450, under its threshold: held only by its hold.
	if d := l.CheckAt(now, "b", 0); !d.Limited || !d.Held {
		t.Errorf("b, held, at %.0f of 600 after the reload: %+v, want held", d.Level, d)
	}

	// Old's final flush writes a's 20; the new limiter's sweeps hand nothing of a's 50.
	var flush Sweep
	old.SweepAll(at(15100*time.Millisecond), &flush)
	var n int64
	for _, c := range flush.Counts {
		if c.Team == "a" {
			n += c.N
		}
	}
	if n != 20 {
		t.Errorf("old limiter's final flush: %d of a's records, want the 20 unsent", n)
	}
	// b is released when the old limiter, sweeping on, releases it: its hold ends
	// DivertHold after its level was last over the release level, not after the reload.
	released := 0
	for s := 16; s <= 25; s++ {
		sw := sweep(t, l, at(time.Duration(s)*time.Second))
		for _, c := range sw.Counts {
			t.Errorf("new limiter's sweep at %d s hands %+v to its tick: counted by the old one", s, c)
		}
		sweep(t, old, at(time.Duration(s)*time.Second))
		now := at(time.Duration(s)*time.Second + 500*time.Millisecond)
		want, got := old.CheckAt(now, "b", 0), l.CheckAt(now, "b", 0)
		if got.Held != want.Held {
			t.Errorf("b at %d.5 s: %+v; the old limiter's %+v", s, got, want)
		}
		if !got.Held && released == 0 {
			released = s
		}
	}
	if released < 20 || released > 23 {
		t.Errorf("b released at the sweep of %d s, want 20–23 s: under the release level from about 12 s", released)
	}
}

// TestInheritStateEventClock: under the event clock a limiter built for a reloaded rule
// that did not change takes over each window's cache: a team read over its limit in a
// lagging partition's window and in the live one stays limited in both, the next window's
// entry is seeded from the live one's count as before, and the new limiter hands none of
// the old one's counts to its tick. It started empty and let the team through.
func TestInheritStateEventClock(t *testing.T) {
	cfg := eventConfig(10*time.Second, 100)
	old, _, _ := newTest(t, cfg)
	now := t0.Add(time.Minute) // a window start
	lag := t0.Add(-2 * time.Minute)
	for _, at := range []time.Time{lag, now} {
		for range 30 {
			old.CheckEventAt(now, at.Add(time.Second), "acme", 1)
		}
	}
	sw := sweep(t, old, now)
	for _, at := range []time.Time{lag, now} {
		var r *Read
		for i := range sw.Reads {
			if sw.Reads[i].Team == "acme" && sw.Reads[i].Epoch == old.Epoch(at) {
				r = &sw.Reads[i]
			}
		}
		if r == nil {
			t.Fatalf("reads %+v, want one of acme in epoch %d", sw.Reads, old.Epoch(at))
		}
		old.ApplyRead(r, 150, 80, now) // the fleet's counts: over the limit
	}
	old.CheckEventAt(now, lag.Add(2*time.Second), "acme", 5) // unsent at the reload

	l, _, _ := newTest(t, cfg)
	l.InheritState(old)
	wall := now.Add(9 * time.Second)
	for _, at := range []time.Time{lag.Add(3 * time.Second), now.Add(3 * time.Second), now.Add(10 * time.Second)} {
		want := old.CheckEventAt(wall, at, "acme", 0)
		got := l.CheckEventAt(wall, at, "acme", 0)
		if !got.Limited || got.Level != want.Level {
			t.Errorf("acme at %s after the reload: level %.0f limited %v, want level %.0f limited %v as before it",
				at.Sub(now), got.Level, got.Limited, want.Level, want.Limited)
		}
	}
	if s := sweep(t, l, wall); len(s.Counts) != 0 {
		t.Errorf("new limiter's sweep hands %+v to its tick: counted by the old one", s.Counts)
	}
}

// TestInheritStateUnderARaisedThreshold: a reload that raises a rule's threshold keeps
// each team's count (the same window, the same Redis keys) and judges it by the new
// threshold: a team held under the old one and under the new release level now is
// released by the new limiter's first sweep, as an override raised releases it, whether
// the old limiter's sweeps had tracked the hold (b) or a check had set it since the last
// one (a). That one was taken up by the new sweep as held under the new threshold, and
// stayed held for DivertHold.
func TestInheritStateUnderARaisedThreshold(t *testing.T) {
	old, _, _ := newTest(t, holdConfig()) // 600
	establish(t, old, t0, "a", 590)       // under its threshold: not held
	establish(t, old, t0, "b", 600)       // held, and the sweeps track it
	sweep(t, old, at(time.Second))
	now := at(1500 * time.Millisecond)
	old.CheckAt(now, "a", 30)
	if d := old.CheckAt(now, "a", 0); !d.Held { // at 605, since the sweep
		t.Fatalf("a at its threshold: %+v, want held", d)
	}
	if d := old.CheckAt(now, "b", 0); !d.Held {
		t.Fatalf("b: %+v, want held", d)
	}

	cfg := holdConfig()
	cfg.Threshold = 1000 // release level 800: a and b, at about 600, are under it
	l, _, _ := newTest(t, cfg)
	if !l.InheritState(old) {
		t.Fatal("InheritState took nothing over under a changed threshold")
	}
	for _, team := range []string{"a", "b"} {
		was, _ := old.Snapshot(now, team)
		got, ok := l.Snapshot(now, team)
		if !ok || got.Level != was.Level || !got.ReadAt.Equal(was.ReadAt) {
			t.Errorf("%s after the reload: %+v (cached %v), want its count as before: %+v", team, got, ok, was)
		}
	}
	for _, team := range []string{"a", "b"} {
		if d := l.CheckAt(now, team, 0); !d.Held {
			t.Errorf("%s right after the reload, before the new limiter's first sweep: %+v, want held still", team, d)
		}
	}
	sweep(t, l, at(2*time.Second))
	for _, team := range []string{"a", "b"} {
		if d := l.CheckAt(at(2500*time.Millisecond), team, 0); d.Limited || d.Held {
			t.Errorf("%s at %.0f under a threshold raised to 1000, after the first sweep: %+v, want released", team, d.Level, d)
		}
	}

	// Lowered: the same counts are over it, and both stay limited.
	cfg.Threshold = 300
	low, _, _ := newTest(t, cfg)
	low.InheritState(old)
	sweep(t, low, at(2*time.Second))
	for _, team := range []string{"a", "b"} {
		if d := low.CheckAt(at(2500*time.Millisecond), team, 0); !d.Limited {
			t.Errorf("%s at %.0f under a threshold lowered to 300: %+v, want limited", team, d.Level, d)
		}
	}
}
