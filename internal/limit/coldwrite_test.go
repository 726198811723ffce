package limit

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"
)

// TestColdTeamsWrittenOncePerInterval: a team in the idle tier, not due for a read, with
// little waiting, keeps its counts in its entry and hands them to the tick once per
// ColdWriteInterval, at a phase of its own; every count reaches the tick, once. Teams are
// spread over the interval, so each sweep hands over a share of them.
func TestColdTeamsWrittenOncePerInterval(t *testing.T) {
	for _, c := range []Clock{WallClock, EventClock} {
		t.Run(c.String(), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1_000_000, Clock: c, ColdWriteInterval: 10 * time.Second})
			const teams = 1000
			now := t0
			counted := map[string]int64{}
			written := map[string]int64{}
			writesPerSweep := []int{}
			for s := range 40 {
				for i := range teams {
					team := fmt.Sprintf("t%d", i)
					l.CheckEventAt(now, now, team, 1)
					counted[team]++
				}
				now = now.Add(time.Second)
				sw := new(Sweep)
				l.Sweep(now, sw)
				teamsWritten := map[string]bool{}
				for _, cnt := range sw.Counts {
					written[cnt.Team] += cnt.N
					teamsWritten[cnt.Team] = true
				}
				if s > 0 {
					writesPerSweep = append(writesPerSweep, len(teamsWritten))
				}
			}
			// After the first sweep (every team at once), about teams / 10 per sweep.
			for i, n := range writesPerSweep {
				if n < teams/10/2 || n > teams/10*2 {
					t.Errorf("sweep %d handed over %d teams' counts, want about %d (a tenth of the cold teams)", i+1, n, teams/10)
				}
			}
			allHandedOver(t, l, now, counted, written)
		})
	}
}

// TestColdWriteExceptions: a team's counts go on the next sweep, whatever its phase, when it
// is not idle or when its waiting counts reach ColdWriteShare of its threshold. (A team due
// for a read is drained too, so the read includes them: the read tests cover it, as every
// read's accounting depends on it.)
func TestColdWriteExceptions(t *testing.T) {
	for _, c := range []Clock{WallClock, EventClock} {
		t.Run(c.String(), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 10_000, Clock: c, ColdWriteInterval: time.Minute, SyncFloor: 0.09})
			now := t0
			sw := new(Sweep)
			l.Sweep(now, sw) // the first sweep hands over everything; the interval starts here
			has := func(sw *Sweep, team string) bool {
				for _, cnt := range sw.Counts {
					if cnt.Team == team {
						return true
					}
				}
				return false
			}
			// Find a team whose phase does not fall in the next second.
			var cold string
			for i := range 100 {
				team := fmt.Sprintf("cold-%d", i)
				l.CheckEventAt(now, now, team, 1)
				now2 := now.Add(time.Second)
				probe := l.coldWrites(now2.UnixNano(), false)
				if probe.drain(team, 0, 1, 10_000, false) == drainNone {
					cold = team
					break
				}
			}
			if cold == "" {
				t.Fatal("no cold team found")
			}
			l.CheckEventAt(now, now, "warm", 1_500) // 15%: low tier
			l.CheckEventAt(now, now, "share", 60)   // 0.6% waiting: over ColdWriteShare
			now = now.Add(time.Second)
			l.Sweep(now, sw)
			if has(sw, cold) {
				t.Errorf("a cold team's counts were handed over before its phase: %+v", sw.Counts)
			}
			for _, team := range []string{"warm", "share"} {
				if !has(sw, team) {
					t.Errorf("%s: counts held back, want them handed over at once", team)
				}
			}
			if sw.Held == 0 {
				t.Error("Held = 0, want the cold teams counted as held")
			}
		})
	}
}

// TestColdTeamWritesEachWindowOnce: at the default interval (one window, wall clock) a cold
// team's phase point hands over the counts of the windows that have ended and keeps the
// current window's for its next point, so each window's count of a cold team reaches the
// tick in one piece: one write, one key created, where handing over everything at the
// point split most windows' counts in two (a write, and the creation of its key, on each
// side of the window's start). Every count still reaches the tick, once, and never later
// than the window after its own (a sweep drops what is older).
func TestColdTeamWritesEachWindowOnce(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1_000_000})
	const teams = 600
	now := t0
	counted := map[string]int64{}
	written := map[string]int64{}
	pieces := map[string]int{} // "team/epoch": how many Counts carried it
	for s := range 4 * 60 {
		for i := range teams {
			team := fmt.Sprintf("t%d", i)
			l.CheckAt(now, team, 1)
			counted[team]++
		}
		now = now.Add(time.Second)
		sw := new(Sweep)
		l.Sweep(now, sw)
		if sw.Stale != 0 {
			t.Fatalf("second %d: %d counts dropped as stale", s, sw.Stale)
		}
		cur := l.Epoch(now)
		for _, c := range sw.Counts {
			written[c.Team] += c.N
			if s == 0 {
				continue // the first sweep hands over everything
			}
			if c.Epoch >= cur {
				t.Fatalf("second %d: %s's count of the current window %d handed over at its phase point", s, c.Team, c.Epoch)
			}
			pieces[fmt.Sprintf("%s/%d", c.Team, c.Epoch)]++
		}
	}
	split := 0
	for _, n := range pieces {
		if n > 1 {
			split++
		}
	}
	if split != 0 || len(pieces) < 2*teams {
		t.Errorf("%d of %d (team, window) counts handed over in more than one piece, want none", split, len(pieces))
	}
	allHandedOver(t, l, now, counted, written)
}

// allHandedOver adds what a final flush (SweepAll) hands over to written, and checks that
// every team's counts reached the tick, all of them once.
func allHandedOver(t *testing.T, l *Limiter, now time.Time, counted, written map[string]int64) {
	t.Helper()
	sw := new(Sweep)
	l.SweepAll(now, sw)
	for _, c := range sw.Counts {
		written[c.Team] += c.N
	}
	for team, n := range counted {
		if written[team] != n {
			t.Fatalf("%s: %d handed to the tick, want the %d counted", team, written[team], n)
		}
	}
}

// At the default ColdWriteInterval (one window) a cold team's count of window A reaches the
// tick by the end of window A+1, with sweeps about a second apart throughout. A team whose
// phase point fell in the last tick of a window had it seen by a sweep just before the
// boundary one window (A's counts not ended: kept) and just after it the next (one tick
// 0.1–0.25 s late): that sweep was in window A+2, and A's count was dropped as stale.
func TestColdCountsSurviveALateTick(t *testing.T) {
	const W = 10 * time.Second
	l, _, _ := newTest(t, Config{Window: W, Threshold: 1_000_000})
	var team string
	var off time.Duration
	for i := 0; ; i++ {
		team = fmt.Sprintf("team-%d", i)
		off = time.Duration(maphash.String(l.seed, team) % uint64(W))
		if off >= 100*time.Millisecond && off <= 250*time.Millisecond {
			break
		}
	}
	written, stale := int64(0), int64(0)
	sweepAt := func(at time.Time) {
		sw := sweep(t, l, at)
		for _, c := range sw.Counts {
			if c.Team == team {
				written += c.N
			}
		}
		stale += sw.Stale
	}
	// t0 is a window boundary: epoch A starts at t0.
	sweepAt(t0.Add(50 * time.Millisecond)) // the first sweep (hands over everything)
	l.CheckAt(t0.Add(60*time.Millisecond), team, 1)
	// Ticks a second apart, the last one 20 ms after the team's point in window A
	// (t0 + W − off), still in window A.
	p1 := t0.Add(W - off + 20*time.Millisecond)
	for k := 9; k >= 0; k-- {
		sweepAt(p1.Add(-time.Duration(k) * time.Second))
	}
	// Ticks a second apart through window A+1; the one after its point comes 20 ms past
	// the boundary (late by off − 0 … a quarter second).
	for k := 1; k <= 9; k++ {
		sweepAt(p1.Add(time.Duration(k) * time.Second))
	}
	sweepAt(t0.Add(2*W + 20*time.Millisecond))
	// And a while more.
	for k := 1; k <= 25; k++ {
		sweepAt(t0.Add(2*W + 20*time.Millisecond + time.Duration(k)*time.Second))
	}
	if written != 1 || stale != 0 {
		t.Fatalf("team %q (phase %v): written %d, stale %d; want the one record written, none stale", team, off, written, stale)
	}
}
