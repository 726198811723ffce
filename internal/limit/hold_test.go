package limit

import (
	"testing"
	"time"
)

// holdConfig: a 600-per-minute team whose estimate, once read at 600 (all of it in the last
// window), ages out at 10 per second: under the release level (480) from 12 s on.
func holdConfig() Config {
	return Config{Window: time.Minute, Threshold: 600, DivertHold: 10 * time.Second, DivertRelease: 0.8}
}

// sweepEvery sweeps l once a second from (from, to], applying no read.
func sweepEvery(t *testing.T, l *Limiter, from, to time.Duration) {
	t.Helper()
	for d := from + time.Second; d <= to; d += time.Second {
		sweep(t, l, at(d))
	}
}

// TestHoldKeepsATeamDiverted: a team that reached its threshold stays limited after its
// level falls back under it, until the level has stayed under DivertRelease × threshold
// for DivertHold; without a hold (today's divert) it is allowed the moment it is under.
func TestHoldKeepsATeamDiverted(t *testing.T) {
	l, _, reg := newTest(t, holdConfig())
	establish(t, l, t0, "a", 600)
	if d := l.CheckAt(t0, "a", 0); !d.Limited || !d.Held {
		t.Fatalf("at its threshold: %+v, want limited and held", d)
	}
	sweepEvery(t, l, 0, 20*time.Second)
	// Level 395 at 20.5 s: under the threshold for 20 s, under the release level for ~8.
	if d := l.CheckAt(at(20500*time.Millisecond), "a", 0); !d.Limited || !d.Held {
		t.Errorf("20.5 s on, level %.0f, under 480 since ~12 s: %+v, want still held", d.Level, d)
	}
	st, ok := l.Snapshot(at(20500*time.Millisecond), "a")
	if !ok || !st.HeldSince.Equal(at(time.Second)) || st.ReleaseAt.Before(at(21*time.Second)) || st.ReleaseAt.After(at(22*time.Second)) {
		t.Errorf("team view while held: since %v, release at %v; want since 1 s (the first sweep), release at 21–22 s", st.HeldSince.Sub(t0), st.ReleaseAt.Sub(t0))
	}
	// Top lists a held team before one under its limit whose pressure is higher: every
	// record of the held one is still sent away, and the runbook looks for teams in
	// overflow in gate team -top.
	now := at(20500 * time.Millisecond)
	l.CheckAt(now, "b", 500)
	if b, _ := l.Snapshot(now, "b"); b.Limited || b.Pressure() <= st.Pressure() {
		t.Fatalf("b: %+v, want under its limit with a pressure over held a's %.2f", b, st.Pressure())
	}
	if top := l.Top(now, 1); len(top) != 1 || top[0].Team != "a" {
		t.Errorf("Top(1) while a is held: %+v, want a (limited) before b (higher pressure, not limited)", top)
	}
	sweepEvery(t, l, 20*time.Second, 23*time.Second)
	if d := l.CheckAt(at(23*time.Second), "a", 0); d.Limited || d.Held {
		t.Errorf("23 s on, under the release level for over 10 s: %+v, want released", d)
	}
	if st, _ := l.Snapshot(at(23*time.Second), "a"); !st.HeldSince.IsZero() {
		t.Errorf("team view after the release: held since %v, want not held", st.HeldSince)
	}
	if got := metricValue(t, reg, "gate_limiter_divert_starts_total", map[string]string{"source": "local"}); got != 1 {
		t.Errorf("divert starts (local) = %v, want 1", got)
	}
	if got := metricValue(t, reg, "gate_limiter_divert_releases_total", map[string]string{"reason": "calm"}); got != 1 {
		t.Errorf("divert releases (calm) = %v, want 1", got)
	}

	// Today's divert: no hold, release at the threshold.
	cfg := holdConfig()
	cfg.DivertHold, cfg.DivertRelease = -1, 1
	b, _, _ := newTest(t, cfg)
	establish(t, b, t0, "a", 600)
	if d := b.CheckAt(at(time.Second), "a", 0); d.Limited || d.Held {
		t.Errorf("no hold, level %.0f a second later: %+v, want allowed", d.Level, d)
	}
}

// TestHoldRaisedOverrideReleases: a held team whose threshold is raised above its level is
// released at the next sweep, hold or not.
func TestHoldRaisedOverrideReleases(t *testing.T) {
	l, _, _ := newTest(t, holdConfig())
	establish(t, l, t0, "a", 600)
	l.CheckAt(t0, "a", 0)
	sweep(t, l, at(time.Second))
	if err := l.SetOverrides(map[string]int64{"a": 2000}); err != nil {
		t.Fatal(err)
	}
	if d := l.CheckAt(at(1500*time.Millisecond), "a", 0); !d.Held {
		t.Errorf("before the next sweep: %+v, want still held", d)
	}
	sweep(t, l, at(2*time.Second))
	if d := l.CheckAt(at(2*time.Second), "a", 0); d.Limited || d.Held {
		t.Errorf("after the sweep, threshold 2000 over level %.0f: %+v, want released", d.Level, d)
	}
}

// TestHoldSharedByFlag: a held team over its release level is handed to the tick as a flag
// on every sweep; a gate reading the flag holds the team too, with the flag's times, and
// releases it a hold after the flag's last time over; a flag under another threshold is
// ignored.
func TestHoldSharedByFlag(t *testing.T) {
	a, _, _ := newTest(t, holdConfig())
	establish(t, a, t0, "team", 600)
	a.CheckAt(t0, "team", 0)
	sw := sweep(t, a, at(time.Second))
	if len(sw.Holds) != 1 || sw.Holds[0].Team != "team" || sw.Holds[0].Threshold != 600 || !sw.Holds[0].LastOver.Equal(at(time.Second)) {
		t.Fatalf("sweep's hold flags: %+v, want one for team, threshold 600, last over at 1 s", sw.Holds)
	}
	if !a.HoldsShared() || a.DivertHold() != 10*time.Second {
		t.Errorf("HoldsShared %v, DivertHold %v; want true, 10s", a.HoldsShared(), a.DivertHold())
	}

	// Gate b sees the team at 500 (normal pressure): its read asks for the flag.
	b, _, breg := newTest(t, holdConfig())
	b.CheckAt(at(time.Second), "team", 10)
	r := mustRead(t, sweep(t, b, at(time.Second)), "team")
	b.ApplyRead(r, 0, 500, at(time.Second))
	if d := b.CheckAt(at(time.Second), "team", 0); d.Limited {
		t.Fatalf("b at 500 before its next read: %+v, want allowed", d)
	}
	b.CheckAt(at(2*time.Second), "team", 1)
	r = mustRead(t, sweep(t, b, at(2*time.Second)), "team")
	if !r.Hold {
		t.Fatalf("read of a team at normal pressure: Hold false, want the flag fetched")
	}
	b.ApplyRead(r, 0, 500, at(2*time.Second))
	f := sw.Holds[0]
	f.Threshold = 700 // an override since: ignored
	b.ApplyHold(r, f)
	if d := b.CheckAt(at(2*time.Second), "team", 0); d.Limited {
		t.Errorf("after a flag under another threshold: %+v, want allowed", d)
	}
	b.ApplyHold(r, sw.Holds[0])
	if d := b.CheckAt(at(2*time.Second), "team", 0); !d.Limited || !d.Held {
		t.Errorf("after the fleet's flag: %+v, want held", d)
	}
	if got := metricValue(t, breg, "gate_limiter_divert_starts_total", map[string]string{"source": "fleet"}); got != 1 {
		t.Errorf("divert starts (fleet) = %v, want 1", got)
	}
	// b's level (~480, ageing out) is under the release level: it releases a hold after
	// the flag's last time over (1 s), at the 11 s sweep.
	sweepEvery(t, b, 2*time.Second, 10*time.Second)
	if d := b.CheckAt(at(10500*time.Millisecond), "team", 0); !d.Held {
		t.Errorf("10.5 s: %+v, want held until 11 s", d)
	}
	sweepEvery(t, b, 10*time.Second, 11*time.Second)
	if d := b.CheckAt(at(11*time.Second), "team", 0); d.Held {
		t.Errorf("11 s: %+v, want released (flag last over at 1 s, hold 10 s)", d)
	}
}

// TestHoldOffInCapMode: cap mode admits up to the threshold by design and holds nothing.
func TestHoldOffInCapMode(t *testing.T) {
	cfg := holdConfig()
	cfg.Mode = Cap
	l, _, _ := newTest(t, cfg)
	establish(t, l, t0, "a", 600)
	if d := l.CheckAt(t0, "a", 0); !d.Limited || d.Held {
		t.Fatalf("cap mode at the threshold: %+v, want limited, not held", d)
	}
	if d := l.CheckAt(at(time.Second), "a", 0); d.Limited {
		t.Errorf("cap mode a second later, level %.0f: %+v, want allowed", d.Level, d)
	}
}

// TestHoldAfterClockStepBack: a hold whose last time over the release level is later than
// the clock after it stepped back (NTP) is released DivertHold after the team calms down,
// not once the clock has caught up with that time as well.
func TestHoldAfterClockStepBack(t *testing.T) {
	l, _, _ := newTest(t, holdConfig())
	establish(t, l, at(time.Hour), "a", 600)
	if d := l.CheckAt(at(time.Hour), "a", 0); !d.Held {
		t.Fatalf("at its threshold: %+v, want held", d)
	}
	// Tracked, over the release level at 1 h + 1 s; its read there finds it calm.
	sw := sweep(t, l, at(time.Hour+time.Second))
	l.ApplyRead(mustRead(t, sw, "a"), 0, 0, at(time.Hour+time.Second))
	// The clock steps back an hour.
	sweepEvery(t, l, 0, 15*time.Second)
	if d := l.CheckAt(at(15*time.Second), "a", 0); d.Held {
		t.Errorf("under the release level for 15 s after the step back (hold 10 s): %+v, want released", d)
	}
}

// TestHoldStaleFlagIgnored: a flag read after its hold is over (last time over a hold or
// more ago: a SET that reached the store late, a gate whose clock is behind) does not hold
// the team: the next sweep would release it at once, and in between its records would go
// to overflow, two switches for nothing.
func TestHoldStaleFlagIgnored(t *testing.T) {
	b, _, breg := newTest(t, holdConfig())
	b.CheckAt(at(20*time.Second), "team", 10)
	r := mustRead(t, sweep(t, b, at(20*time.Second)), "team")
	b.ApplyRead(r, 500, 0, at(20*time.Second))
	b.CheckAt(at(21*time.Second), "team", 1)
	r = mustRead(t, sweep(t, b, at(21*time.Second)), "team")
	if !r.Hold {
		t.Fatalf("read of a team at normal pressure: Hold false")
	}
	b.ApplyRead(r, 500, 0, at(21*time.Second))
	// Held since 1 s, last over at 10 s: the hold (10 s) ended at 20 s.
	b.ApplyHold(r, HoldFlag{Team: "team", Since: at(time.Second), LastOver: at(10 * time.Second), Threshold: 600})
	if d := b.CheckAt(at(21500*time.Millisecond), "team", 0); d.Held {
		t.Errorf("after a flag whose hold ended a second ago: %+v, want not held", d)
	}
	if got := metricValue(t, breg, "gate_limiter_divert_starts_total", map[string]string{"source": "fleet"}); got != 0 {
		t.Errorf("divert starts (fleet) = %v, want 0", got)
	}
}
