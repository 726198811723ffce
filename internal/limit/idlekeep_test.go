package limit

import (
	"testing"
	"time"
)

// TestIdleExpiryKeepsATeamOverItsLimit: under a window longer than the idle timeout (an
// hour limit of GATE_LIMITS, 300 s idle), a team over its limit that pauses for the idle
// timeout is still over it when it comes back, and is limited on its first record then,
// as a full cache would have kept it (evictOne); before, the sweep dropped it and its
// next records were first contact, admitted until it had sent its sync floor again.
func TestIdleExpiryKeepsATeamOverItsLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hold    time.Duration
		release float64
	}{{"held", 0, 0}, {"no hold", -1, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			idleKeepsOverLimit(t, Config{Window: time.Hour, Threshold: 1000, IdleTimeout: 30 * time.Second, DivertHold: tc.hold, DivertRelease: tc.release})
		})
	}
}

func idleKeepsOverLimit(t *testing.T, cfg Config) {
	l, _, _ := newTest(t, cfg)
	l.CheckAt(t0, "a", 1000)
	r := mustRead(t, sweep(t, l, t0), "a")
	l.ApplyRead(r, 1000, 0, t0) // the fleet's count of the window: 1000, at its threshold
	if d := l.CheckAt(t0, "a", 0); !d.Limited {
		t.Fatalf("at its threshold: %+v, want limited", d)
	}
	// Idle for 31 s, read on every sweep (hot), the window still holding 1000.
	for s := 1; s <= 31; s++ {
		now := at(time.Duration(s) * time.Second)
		sw := sweep(t, l, now)
		if r := findRead(sw, "a"); r != nil {
			l.ApplyRead(r, 1000, 0, now)
		}
	}
	if !cached(l, "a") {
		t.Errorf("a team at its threshold, idle past the idle timeout, was dropped from the cache")
	}
	if d := l.CheckAt(at(32*time.Second), "a", 1); !d.Limited {
		t.Errorf("back after 31 s idle, 1000 of 1000 in the window: %+v, want limited", d)
	}
	// A team far under its limit still expires.
	l.CheckAt(at(32*time.Second), "b", 1)
	for s := 33; s <= 70; s++ {
		now := at(time.Duration(s) * time.Second)
		sw := sweep(t, l, now)
		for i := range sw.Reads {
			l.ApplyRead(&sw.Reads[i], 1000, 0, now)
		}
		if s < 70 {
			l.CheckAt(now, "a", 1) // a keeps sending
		}
	}
	if cached(l, "b") {
		t.Errorf("b, 1 of 1000 and idle past the idle timeout, still cached")
	}
}

// TestEventIdleExpiryKeepsATeamOverItsLimit is TestIdleExpiryKeepsATeamOverItsLimit under
// the event clock: a window's entry idle for the idle timeout (shorter than two windows)
// is kept while the fleet's count of its window has the team at half its threshold or
// more, so the team's next record in that window is judged on it.
func TestEventIdleExpiryKeepsATeamOverItsLimit(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Hour, Threshold: 1000, IdleTimeout: 30 * time.Second, Clock: EventClock})
	l.CheckEventAt(t0, t0, "a", 1000)
	r := mustRead(t, sweep(t, l, t0), "a")
	l.ApplyRead(r, 1000, 0, t0)
	if d := l.CheckEventAt(t0, t0, "a", 0); !d.Limited {
		t.Fatalf("at its threshold: %+v, want limited", d)
	}
	for s := 1; s <= 31; s++ {
		now := at(time.Duration(s) * time.Second)
		sw := sweep(t, l, now)
		if r := findRead(sw, "a"); r != nil {
			l.ApplyRead(r, 1000, 0, now)
		}
	}
	now := at(32 * time.Second)
	if d := l.CheckEventAt(now, now, "a", 1); !d.Limited {
		t.Errorf("back after 31 s idle, 1000 of 1000 in the window: %+v, want limited", d)
	}
	// A team far under its limit still expires.
	l.CheckEventAt(now, now, "b", 1)
	var expired int
	for s := 33; s <= 70; s++ {
		now := at(time.Duration(s) * time.Second)
		sw := sweep(t, l, now)
		expired += sw.Expired
		for i := range sw.Reads {
			l.ApplyRead(&sw.Reads[i], 1000, 0, now)
		}
		if s < 70 {
			l.CheckEventAt(now, now, "a", 1)
		}
	}
	if expired != 1 {
		t.Errorf("expired %d entries, want 1 (b, 1 of 1000, idle past the idle timeout)", expired)
	}
}
