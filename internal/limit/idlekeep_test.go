package limit

import (
	"fmt"
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

// TestIdleExpiryNeverEarly: a team idle for less than the idle timeout stays cached. The
// cache notes when a team was seen in whole seconds, so a team seen late in a second and
// swept early in a later one was taken for a second more idle: at a 1 s timeout it was
// expired after 100 ms, and its next record met as first contact.
func TestIdleExpiryNeverEarly(t *testing.T) {
	for _, clk := range []Clock{WallClock, EventClock} {
		// The event clock keeps a window's entry at least 2 s (sweepEvent).
		for _, idle := range []time.Duration{time.Second, 3 * time.Second} {
			t.Run(fmt.Sprintf("%s/%v", clk, idle), func(t *testing.T) {
				l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, IdleTimeout: idle, Clock: clk})
				seen := at(900 * time.Millisecond)
				if clk == EventClock {
					l.CheckEventAt(seen, seen, "a", 1)
				} else {
					l.CheckAt(seen, "a", 1)
				}
				var expired int
				for _, d := range []time.Duration{0, 500 * time.Millisecond, 899 * time.Millisecond} {
					now := seen.Add(idle - 900*time.Millisecond + d)
					expired += sweep(t, l, now).Expired
					// cached looks in the wall clock's cache; an event window's entry is
					// in its window's table, its expiry counted all the same.
					if expired > 0 || clk == WallClock && !cached(l, "a") {
						t.Fatalf("seen at %v, idle timeout %v: expired by the sweep at %v (idle %v)",
							seen.Sub(t0), idle, now.Sub(t0), now.Sub(seen))
					}
				}
				// Idle past the timeout (and the second it may be rounded by): expired.
				for _, d := range []time.Duration{2 * time.Second, 3 * time.Second} {
					expired += sweep(t, l, seen.Add(idle+d)).Expired
				}
				if expired != 1 {
					t.Errorf("idle %v with a %v timeout: %d expired, want 1", idle+3*time.Second, idle, expired)
				}
			})
		}
	}
}
