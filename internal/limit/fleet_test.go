package limit

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
)

// fleetSim is n limiters sharing one team's counts, as the tick shares them through the
// store: each tick every gate writes what it counted and then reads, one after the other,
// so a gate's read sees the gates before it this tick and the gates after it as of the
// tick before (what a fleet's unaligned ticks do, on average). When aligned, every gate
// writes, then every gate reads (Read.Fresh), as the tick's Run does. The shared counts
// are a map: the limiter knows no transport, and its contract is ApplyRead's.
type fleetSim struct {
	t       *testing.T
	clk     *clock.Fake
	gates   []*Limiter
	counts  map[int64]int64 // the team's shared count by epoch
	now     time.Time
	acc     float64
	next    int // round robin over the gates
	thr     float64
	tick    time.Duration
	log     []time.Time // offered records in the exact sliding window
	window  time.Duration
	aligned bool
}

func newFleetSim(t *testing.T, n int, mode Mode) *fleetSim { return newFleetSimThr(t, n, mode, 6000) }

// newFleetSimThr is newFleetSim with the team's threshold: at 600 a window, each of 16
// gates sees under one record a tick of a team at 1.2 × its limit.
func newFleetSimThr(t *testing.T, n int, mode Mode, thr float64) *fleetSim {
	f := &fleetSim{t: t, clk: clock.NewFake(t0), counts: map[int64]int64{}, now: t0, thr: thr,
		tick: time.Second, window: time.Minute}
	for range n {
		l, err := New(Config{Window: f.window, Threshold: int64(f.thr), Mode: mode, SyncInterval: 15 * time.Second,
			ColdWriteInterval: -1}, f.clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.gates = append(f.gates, l)
	}
	return f
}

// step offers one tick of traffic at x × the limit, spread evenly over the tick and round
// robin over the gates, then ticks every gate. It returns the records offered, those
// limited, and the instant the exact sliding-window count first reached the threshold
// this tick (zero if it did not).
func (f *fleetSim) step(x float64) (offered, limited int, crossAt time.Time) {
	f.acc += x * f.thr * float64(f.tick) / float64(f.window)
	k := int(f.acc)
	f.acc -= float64(k)
	for j := range k {
		at := f.now.Add(time.Duration(j) * f.tick / time.Duration(k))
		i := 0
		for i < len(f.log) && !f.log[i].After(at.Add(-f.window)) {
			i++
		}
		f.log = append(f.log[i:], at)
		if crossAt.IsZero() && float64(len(f.log)-1) >= f.thr {
			crossAt = at
		}
		offered++
		if f.gates[f.next%len(f.gates)].CheckAt(at, "team", 1).Limited {
			limited++
		}
		f.next++
	}
	f.now = f.now.Add(f.tick)
	f.clk.Set(f.now)
	sweeps := make([]Sweep, len(f.gates))
	read := func(i int) {
		for j := range sweeps[i].Reads {
			r := &sweeps[i].Reads[j]
			r.Fresh = f.aligned
			f.gates[i].ApplyRead(r, f.counts[r.Epoch], f.counts[r.Epoch-1], f.now)
		}
	}
	for i, l := range f.gates {
		l.Sweep(f.now, &sweeps[i])
		for _, c := range sweeps[i].Counts {
			f.counts[c.Epoch] += c.N
		}
		if !f.aligned {
			read(i)
		}
	}
	if f.aligned {
		for i := range f.gates {
			read(i)
		}
	}
	return offered, limited, crossAt
}

// divertTicks steps at x × the limit until a tick at or after the team's crossing has 90%
// of its records limited, and returns the ticks from the crossing to that tick's end; it
// fails the test if that never happens within two windows.
func (f *fleetSim) divertTicks(x float64) float64 {
	var crossed time.Time
	for range 120 {
		off, lim, at := f.step(x)
		if crossed.IsZero() {
			crossed = at
		}
		if !crossed.IsZero() && float64(lim) >= 0.9*float64(off) {
			return f.now.Sub(crossed).Seconds() / f.tick.Seconds()
		}
	}
	f.t.Fatalf("never 90%% diverted (crossed at %v)", crossed)
	return 0
}

// capWithinThreshold steps six windows at x × the limit and fails the test if any window
// from the third on admits outside [0.97, 1.03] × the threshold.
func (f *fleetSim) capWithinThreshold(x float64) {
	for w := range 6 {
		admitted := 0
		for range 60 {
			off, lim, _ := f.step(x)
			admitted += off - lim
		}
		if r := float64(admitted) / f.thr; w >= 2 && (r < 0.97 || r > 1.03) {
			f.t.Errorf("window %d: admitted %.3f × the threshold, want within [0.97, 1.03]", w, r)
		}
	}
}

// TestFleetSeesATeamCrossTogether: between reads each gate counts every record of its own
// as 1 / its share of the fleet's, measured from its reads, and adds what the others have
// counted but not yet written. Eight gates sharing a team evenly learn a share of 1/8; a
// team jumping from half its limit to 2 × is then diverted by every gate within two ticks
// of crossing its limit, and a team at 5 × in cap mode is admitted its threshold per
// window. Before, each gate saw 1/8 of the traffic move between reads, and the estimate
// drained at threshold / window meanwhile: the fleet took 3 ticks to divert the team, and
// admitted 1.034 × in cap mode.
func TestFleetSeesATeamCrossTogether(t *testing.T) {
	const n = 8
	t.Run("divert", func(t *testing.T) {
		f := newFleetSim(t, n, Divert)
		for range 180 { // three windows at half the limit
			f.step(0.5)
		}
		for i, l := range f.gates {
			st, ok := l.Snapshot(f.now, "team")
			if !ok || math.Abs(st.FleetShare*n-1) > 0.25 {
				t.Errorf("gate %d: fleet share %.3f after three windows, want 1/%d ± 25%%", i, st.FleetShare, n)
			}
		}
		if ticks := f.divertTicks(2); ticks > 2 {
			t.Errorf("90%% of the team diverted %.2f ticks after it crossed its limit, want ≤ 2", ticks)
		}
	})
	t.Run("cap", func(t *testing.T) {
		newFleetSim(t, n, Cap).capWithinThreshold(5)
	})
}

// TestAlignedFleetDivertsWithinTwoTicks: sixteen gates whose ticks are aligned (every gate
// writes, then every gate reads) see a team cross its limit as one gate would. Each read
// then misses none of the others' counts, and between reads the last read's estimate is a
// floor under each gate's level: a gate sees one record in sixteen, and its prediction of
// the others' records since the read would otherwise dip under the threshold between its
// own records. Before (ticks one after another, no floor), a team stepping from half its
// limit to 1.2 × was 90% diverted 2.08 ticks after it crossed. The floor needs the aligned
// reads: with it, reads half a tick late (and the half tick they miss added) held a team
// at 10 × in cap mode to 0.967 × its threshold. Here cap mode stays within [0.97, 1.03].
func TestAlignedFleetDivertsWithinTwoTicks(t *testing.T) {
	const n = 16
	for _, x := range []float64{1.2, 2, 10} {
		t.Run(fmt.Sprintf("divert %g×", x), func(t *testing.T) {
			f := newFleetSimThr(t, n, Divert, 600)
			f.aligned = true
			for range 180 { // three windows at half the limit
				f.step(0.5)
			}
			if ticks := f.divertTicks(x); ticks > 2 {
				t.Errorf("90%% of the team diverted %.2f ticks after it crossed its limit, want ≤ 2", ticks)
			}
		})
	}
	t.Run("cap 10×", func(t *testing.T) {
		f := newFleetSimThr(t, n, Cap, 600)
		f.aligned = true
		f.capWithinThreshold(10)
	})
}
