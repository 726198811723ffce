package tick

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// fleet is several gates, each a limiter with its own tick, sharing one Redis and one fake
// clock, with the reference ratios at a 10 s window: tick = window / 60, sync interval =
// window / 4.
type fleet struct {
	clk   *clock.Fake
	gates []*gate
	tick  time.Duration
	now   time.Time
}

const fleetWindow = 10 * time.Second

// The goal for a capped team's admitted records per window ÷ its threshold, fleet-wide
// (README's headline table, docs/benchmarks.md: "within [0.97, 1.03]").
const fleetGoalLow, fleetGoalHigh = 0.97, 1.03

func newFleet(t *testing.T, n int, mode limit.Mode, threshold int64) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	f := &fleet{clk: clock.NewFake(epochStart), tick: fleetWindow / 60, now: epochStart}
	for range n {
		f.gates = append(f.gates, newGate(t, f.clk,
			limit.Config{Window: fleetWindow, Threshold: threshold, Mode: mode, SyncInterval: fleetWindow / 4},
			// The fake clock paces the ticks; the deadline only has to outlast a loaded
			// machine (the default, 3/4 of a 167 ms tick, is real time).
			Config{TickInterval: fleetWindow / 60, TickTimeout: time.Minute}, srv))
	}
	return f
}

// step offers perGate records of team to every gate, spread over one tick, then runs every
// gate's tick. It returns how many were allowed.
func (f *fleet) step(t testing.TB, team string, perGate int) (allowed int) {
	t.Helper()
	for j := range perGate {
		at := f.now.Add(time.Duration(j) * f.tick / time.Duration(perGate))
		for _, g := range f.gates {
			if !g.l.CheckAt(at, team, 1).Limited {
				allowed++
			}
		}
	}
	f.now = f.now.Add(f.tick)
	f.clk.Set(f.now)
	for _, g := range f.gates {
		if r := g.tk.Tick(context.Background()); r.Errors != 0 {
			t.Fatalf("tick failed: %+v", r)
		}
	}
	return allowed
}

// TestFleetCapAdmitsOneThresholdPerWindow: two gates that each see half of a team's traffic
// at 2 × its limit together admit one threshold per window, within the goal README's
// headline table and docs/benchmarks.md give for a capped team in a fleet: [0.97, 1.03] ×
// the threshold, in the steady windows 2..7 BenchmarkFidelity measures.
//
// The bound is the goal itself, with no margin for spread: the run is deterministic (a
// fake clock, one goroutine, the same Redis commands in the same order), and gave 1.000 in
// every steady window in each of 10 runs (5 of them under -race, beside another test's
// load), 0.03 inside either edge; one record is 1/6000 of the ratio. A fleet model that
// overestimates the other gate's traffic by half (the fleet factor × 1.5 in
// limit.ApplyRead) admits 0.926 and fails here; the old bound, [0.9, 1.1], passed it.
func TestFleetCapAdmitsOneThresholdPerWindow(t *testing.T) {
	t.Parallel()
	const threshold = 6000
	f := newFleet(t, 2, limit.Cap, threshold)
	perGate := 2 * threshold / 60 / 2 // 2 × threshold per window, split evenly
	for w := range 8 {
		admitted := 0
		for range 60 {
			admitted += f.step(t, "team", perGate)
		}
		ratio := float64(admitted) / threshold
		t.Logf("cap, 2 gates, offered 2.00 × threshold: window %d admitted %.3f × threshold", w, ratio)
		if w >= 2 && (ratio < fleetGoalLow || ratio > fleetGoalHigh) {
			t.Errorf("window %d: fleet admitted %.3f × threshold, want within [%.2f, %.2f]", w, ratio, fleetGoalLow, fleetGoalHigh)
		}
	}
}

// TestFleetDivertsTeamOverLimit: a team that jumps from 0.5 × to 5 × its limit is diverted
// wholly by every gate within a few seconds; before the jump nothing is diverted.
func TestFleetDivertsTeamOverLimit(t *testing.T) {
	t.Parallel()
	const threshold = 6000
	f := newFleet(t, 2, limit.Divert, threshold)
	perTick := func(x float64) int { return int(x * threshold / 60 / 2) }
	for i := range 3 * 60 {
		if allowed := f.step(t, "team", perTick(0.5)); allowed != 2*perTick(0.5) {
			t.Fatalf("tick %d at 0.5 × limit: %d of %d allowed", i, allowed, 2*perTick(0.5))
		}
	}
	overAdmitted, ticks := 0, 0
	for ; ticks < 3*60; ticks++ {
		allowed := f.step(t, "team", perTick(5))
		if allowed == 0 {
			break
		}
		overAdmitted += allowed
	}
	took := time.Duration(ticks) * f.tick
	t.Logf("divert, 2 gates, 0.5 → 5 × threshold: fully diverted after %s, admitted %.3f × threshold meanwhile",
		took, float64(overAdmitted)/threshold)
	if took > fleetWindow/2 {
		t.Errorf("took %s to divert the team, want within half a window (%s)", took, fleetWindow/2)
	}
	// Once diverted it stays diverted while it keeps sending 5 × its limit.
	for i := range 60 {
		if allowed := f.step(t, "team", perTick(5)); allowed != 0 {
			t.Fatalf("tick %d after diversion: %d allowed", i, allowed)
		}
	}
}

// docs/operations.md's metric reference names every command gate_limiter_redis_commands_total
// counts, the fleet count's among them (every 5 s, or every tick of a longer interval), so that an operator reading the
// commands by command finds each series explained.
func TestRedisCommandsDocumented(t *testing.T) {
	f := newFleet(t, 1, limit.Cap, 6000)
	g := f.gates[0]
	g.tk.countFleet(context.Background(), f.now)
	for range 3 {
		f.step(t, "t1", 200) // over its limit: writes, reads and a hold flag
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for l := range strings.SplitSeq(string(doc), "\n") {
		if strings.HasPrefix(l, "| `gate_limiter_redis_commands_total{command}`") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("docs/operations.md: no metric reference row for gate_limiter_redis_commands_total")
	}
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, mf := range mfs {
		if mf.GetName() != "gate_limiter_redis_commands_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			cmd := m.GetLabel()[0].GetValue()
			seen = append(seen, cmd)
			if !regexp.MustCompile(`\b` + cmd + `\b`).MatchString(row) {
				t.Errorf("command=%q is counted but not named in docs/operations.md's row: %s", cmd, row)
			}
		}
	}
	if !slices.Contains(seen, "incrby") || !slices.Contains(seen, "mget") {
		t.Errorf("commands counted: %v; want the fleet count's and the reads'", seen)
	}
}

// TestLoneGateShareStaysWholeAcrossIdleWindows: a gate alone keeps its share of a team's
// traffic at 1 through a team's bursts, one a window, and its idle seconds between them.
// The read across an epoch boundary took the fleet's growth as the estimate's share of
// the time since, counting the last window's records, seen at the read before, as grown
// when none came: the share fell to 0.56 at the first boundary and swung from 0.37 to
// 0.93 after, each record of the next burst counting 1 / share times (a review: cap mode
// admitted 158, 64, 76 of bursts the sliding window had room for more of; here the
// second burst got 9 of the 20 the window's room held).
func TestLoneGateShareStaysWholeAcrossIdleWindows(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: 10 * time.Second, Threshold: 200, Mode: limit.Cap}, Config{KeyPrefix: "sh"}, srv)
	var accepted []int
	for w := range 4 {
		clk.Advance(time.Second)
		n := 0
		for range 1000 {
			if !g.l.Check("b", 1).Limited {
				n++
			}
		}
		accepted = append(accepted, n)
		for s := range 9 {
			clk.Advance(time.Second)
			g.tk.Tick(context.Background())
			if st, ok := g.l.Snapshot(clk.Now(), "b"); !ok || st.FleetShare < 0.99 {
				t.Fatalf("window %d, second %d: share %.3f, want 1 for a gate alone (accepted so far %v)", w, s+2, st.FleetShare, accepted)
			}
		}
	}
	// The sliding window's room one second into a window after a full one: about 200 ×
	// 0.1 = 20; after one of about 20, nearly the whole threshold.
	if accepted[1] < 15 || accepted[1] > 25 || accepted[2] < 150 {
		t.Errorf("bursts accepted %v, want about 200, 20, 180+, ...", accepted)
	}
}

// TestTwoGatesShareABurstyTeamOnAlignedTicks: two gates ticking as Run ticks them (every
// gate's write phase, then every gate's read phase), a capped team sending one burst of
// 1,000 records a window, a second into it, half to each gate. The first bursts are
// first contact, each gate admitting the threshold by its own count (share 1 until a read
// measures it: the burst of the window after, all limited in cap mode, is counted by no
// one and measures nothing), so 2 × the threshold twice; from the fourth window on the
// fleet admits what the sliding window has room for, within a tenth of the threshold, and
// each gate's share is a half: 400, 0, 400, 0, 212, 10, 202, 0, then 200, 0 a window pair.
// Whole ticks run in turn (Tick, a gate reading before the other wrote) gave 400, 0, 223,
// 85, 70, 149, 33, 158, 100, 61, 148, 34, always under the room but never settling: the
// running share is measured on aligned reads, as every gate reads in production.
func TestTwoGatesShareABurstyTeamOnAlignedTicks(t *testing.T) {
	const thr = 200
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	var gs []*gate
	for range 2 {
		gs = append(gs, newGate(t, clk, limit.Config{Window: 10 * time.Second, Threshold: thr, Mode: limit.Cap},
			Config{KeyPrefix: "burst", TickInterval: time.Second, TickTimeout: time.Minute}, srv))
	}
	var accepted []int
	for w := range 12 {
		clk.Advance(time.Second)
		n := 0
		for i := range 1000 {
			if !gs[i%2].l.Check("b", 1).Limited {
				n++
			}
		}
		accepted = append(accepted, n)
		for range 9 {
			clk.Advance(time.Second)
			for _, g := range gs {
				if r := g.tk.WritePhase(t.Context()); r.Errors != 0 {
					t.Fatalf("write phase failed: %+v", r)
				}
			}
			for _, g := range gs {
				if r := g.tk.ReadPhase(t.Context()); r.Errors != 0 {
					t.Fatalf("read phase failed: %+v", r)
				}
			}
		}
		if w < 4 {
			continue
		}
		for i, g := range gs {
			if st, ok := g.l.Snapshot(clk.Now(), "b"); !ok || st.FleetShare < 0.45 || st.FleetShare > 0.55 {
				t.Errorf("window %d: gate %d's share %.3f, want about 0.5 (accepted %v)", w, i, st.FleetShare, accepted)
			}
		}
	}
	if accepted[0] > 2*thr || accepted[2] > 2*thr {
		t.Errorf("first bursts accepted %v: more than each gate's threshold", accepted[:3])
	}
	for w := 4; w < len(accepted); w++ {
		// The sliding window's room a second into window w: the threshold less nine
		// tenths of what the window before admitted.
		room := max(0, thr-accepted[w-1]*9/10)
		if d := accepted[w] - room; d > thr/10 || d < -thr/10 {
			t.Errorf("window %d accepted %d where the sliding window had room for %d (accepted %v)", w, accepted[w], room, accepted)
		}
	}
}
