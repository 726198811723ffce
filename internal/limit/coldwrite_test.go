package limit

import (
	"fmt"
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
			sw := new(Sweep)
			l.SweepAll(now, sw)
			for _, cnt := range sw.Counts {
				written[cnt.Team] += cnt.N
			}
			for team, n := range counted {
				if written[team] != n {
					t.Fatalf("%s: %d handed to the tick, want the %d counted", team, written[team], n)
				}
			}
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
				if !probe.drain(hashOf(l, team), 0, 1, 10_000, false) {
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
