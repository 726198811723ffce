package tick

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// newFloorFleet is newFleet with keys under the floor counted in the sketch, as a rule with
// a composite key has them (config.RuleLimitConfigs), and every gate told the fleet's size
// as countFleet tells it.
func newFloorFleet(t testing.TB, n int, mode limit.Mode, threshold int64, syncFloor float64) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	f := &fleet{clk: clock.NewFake(epochStart), tick: fleetWindow / 60, now: epochStart}
	for range n {
		g := newGate(t, f.clk,
			limit.Config{Window: fleetWindow, Threshold: threshold, Mode: mode, SyncInterval: fleetWindow / 4,
				SyncFloor: syncFloor, SketchWidth: limit.DefaultSketchWidth},
			Config{TickInterval: fleetWindow / 60, TickTimeout: time.Minute}, srv)
		g.l.SetFleetSize(n)
		f.gates = append(f.gates, g)
	}
	return f
}

// stepWith is fleet.step with background keys: each gate also checks noise records of
// keys seen once, which share the sketch's counters with the team's.
func (f *fleet) stepWith(t testing.TB, team string, perGate, noise int, seq *int) (allowed int) {
	t.Helper()
	for _, g := range f.gates {
		for range noise {
			*seq++
			g.l.CheckAt(f.now, fmt.Sprintf("noise-%d", *seq), 1)
		}
	}
	return f.step(t, team, perGate)
}

// A key over its limit only fleet-wide, each gate's share of it under the floor a gate
// alone would use (SyncFloor of its threshold), is still read and limited: every gate's
// floor is SyncFloor ÷ the fleet's size. 32 gates each send 4% of the threshold a window,
// under a floor of 5%: 1.28 × the threshold fleet-wide. Before the floor was divided no
// gate ever read the key, and the fleet admitted all of it.
func TestKeyOverOnlyFleetWideIsLimited(t *testing.T) {
	if raceEnabled {
		t.Skip("a fleet of 32 gates: run without the race detector (make test-norace)")
	}
	const gates, threshold = 32, 60_000
	f := newFloorFleet(t, gates, limit.Cap, threshold, 0.05)
	perGate := threshold * 4 / 100 / 60 // 4% of the threshold a window, per gate
	for w := range 5 {
		admitted := 0
		for range 60 {
			admitted += f.step(t, "team:user", perGate)
		}
		ratio := float64(admitted) / threshold
		t.Logf("cap, %d gates each under the one-gate floor, offered %.2f × threshold: window %d admitted %.3f × threshold",
			gates, float64(gates*perGate*60)/threshold, w, ratio)
		if w >= 2 && (ratio < fleetGoalLow || ratio > fleetGoalHigh) {
			t.Errorf("window %d: fleet admitted %.3f × threshold, want within [%.2f, %.2f]", w, ratio, fleetGoalLow, fleetGoalHigh)
		}
	}
}

// The fidelity goal holds for a runaway key among keys under the floor: a capped key at
// 2 × and 10 × its limit, with noise keys sharing the sketch, is admitted within [0.97,
// 1.03] × its threshold a window, fleet-wide, on 1, 4 and 16 gates
// (fleet_user_rule_admitted_worst_window in make bench is this figure, worst window).
func TestRunawayKeyFidelityWithTheSketch(t *testing.T) {
	t.Parallel()
	for _, gates := range []int{1, 4, 16} {
		for _, x := range []int{2, 10} {
			t.Run(fmt.Sprintf("%dgates/%dx", gates, x), func(t *testing.T) {
				if raceEnabled && gates*x > 8 {
					t.Skip("a large fleet: run without the race detector (make test-norace)")
				}
				t.Parallel()
				for w, ratio := range runawayWindows(t, gates, x) {
					t.Logf("window %d admitted %.3f × threshold", w, ratio)
					if w >= 2 && (ratio < fleetGoalLow || ratio > fleetGoalHigh) {
						t.Errorf("window %d: fleet admitted %.3f × threshold, want within [%.2f, %.2f]", w, ratio, fleetGoalLow, fleetGoalHigh)
					}
				}
			})
		}
	}
}

// runawayThreshold is the runaway key's threshold in runawayWindows: a floor of 120
// records a window on one gate, 30 on 4, 7 on 16.
const runawayThreshold = 12_000

// runawayWindows runs a capped runaway key at x × its threshold, spread over gates, with
// 20 noise keys seen once per gate and tick, for 5 windows, and returns each window's
// admitted ÷ threshold. It fails t if a gate caches more than the runaway's key and one
// other: the noise keys stay under the floor.
func runawayWindows(t testing.TB, gates, x int) []float64 {
	f := newFloorFleet(t, gates, limit.Cap, runawayThreshold, limit.DefaultSyncFloor)
	perGate := x * runawayThreshold / 60 / gates
	seq := 0
	var out []float64
	for range 5 {
		admitted := 0
		for range 60 {
			admitted += f.stepWith(t, "team:runaway", perGate, 20, &seq)
		}
		out = append(out, float64(admitted)/runawayThreshold)
	}
	for i, g := range f.gates {
		if n := g.l.Len(); n > 2 {
			t.Errorf("gate %d cached %d keys, want the runaway's alone: the noise keys are under the floor", i, n)
		}
	}
	return out
}

// BenchmarkFleetUserRule is TestRunawayKeyFidelityWithTheSketch's runs as a figure: the
// window farthest from 1 (admitted ÷ threshold, windows 2–4) over 1, 4 and 16 gates at 2 ×
// and 10 × (worst_window: fleet_user_rule_admitted_worst_window), over every iteration (a
// metric reported in the loop kept the last iteration's alone).
func BenchmarkFleetUserRule(b *testing.B) {
	worst := 1.0
	for b.Loop() {
		for _, gates := range []int{1, 4, 16} {
			for _, x := range []int{2, 10} {
				for _, r := range runawayWindows(b, gates, x)[2:] {
					if math.Abs(r-1) > math.Abs(worst-1) {
						worst = r
					}
				}
			}
		}
	}
	b.ReportMetric(worst, "worst_window")
}

// countFleet counts the gates that count themselves in each slot of FleetSlot: three gates
// find 3 once a whole slot holds them all, a gate that starts counts itself before the
// others count it, and one that stops drops out after two slots.
func TestFleetCountsItsGates(t *testing.T) {
	srv := redistest.Start(t)
	var gates []*gate
	for i := range 4 {
		gates = append(gates, newGate(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fc", Writer: fmt.Sprint("w", i)}, srv))
	}
	ctx := context.Background()
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + time.Second) }
	sizes := func(gs []*gate) []int {
		var out []int
		for _, g := range gs {
			out = append(out, g.l.FleetSize())
		}
		return out
	}
	for s := range 3 {
		for _, g := range gates[:3] {
			g.tk.countFleet(ctx, at(s))
		}
	}
	if got := sizes(gates[:3]); fmt.Sprint(got) != "[3 3 3]" {
		t.Errorf("three gates counted over three slots: sizes %v, want 3 each", got)
	}
	gates[3].tk.countFleet(ctx, at(3)) // starts: the last slots hold the other three
	if got := gates[3].l.FleetSize(); got != 4 {
		t.Errorf("a gate starting beside three: size %d, want 4 (itself included)", got)
	}
	for s := 3; s < 7; s++ {
		for _, g := range gates[1:] { // gate 0 stops
			g.tk.countFleet(ctx, at(s))
		}
	}
	if got := sizes(gates[1:]); fmt.Sprint(got) != "[3 3 3]" {
		t.Errorf("gate 0 stopped two slots ago: sizes %v, want 3 each", got)
	}
	if got := gates[1].tk.fleet.size; got != 3 {
		t.Errorf("fleet.size %d, want 3", got)
	}
}

// A key cached, evicted while under its limit (the cache full of others at their floor),
// and then seen again goes through the sketch to its floor once more and reads what the
// fleet counted of it, its own written counts included: nothing it counted is lost.
func TestEvictedKeySeenAgainCountedWhole(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 10_000, Capacity: 2, Shards: 1, SketchWidth: limit.DefaultSketchWidth}, Config{}, srv)
	ctx := context.Background()
	tick := func() {
		clk.Advance(time.Second)
		if r := g.tk.Tick(ctx); r.Errors != 0 {
			t.Fatalf("tick: %+v", r)
		}
	}
	g.l.CheckAt(clk.Now(), "t:k", 500) // at its floor (100) at once: cached
	tick()
	for _, other := range []string{"t:a", "t:b"} { // two more at their floor: k, seen least recently, goes
		g.l.CheckAt(clk.Now(), other, 200)
	}
	tick()
	if st, ok := g.l.Snapshot(clk.Now(), "t:k"); ok {
		t.Fatalf("t:k still cached: %+v", st)
	}
	for range 150 {
		g.l.CheckAt(clk.Now(), "t:k", 1) // through the sketch to its floor again
	}
	tick()
	tick()
	st, ok := g.l.Snapshot(clk.Now(), "t:k")
	if !ok {
		t.Fatal("t:k not cached again at its floor")
	}
	if st.Level < 640 || st.Level > 700 {
		t.Errorf("t:k level %.0f after its 500 and 150 more, want 650 (and the sketch's noise at most)", st.Level)
	}
}

// A gate that starts (or restarts) in a running fleet learns a key's count from Redis as
// soon as the key reaches its floor on it: it does not judge it on its own count.
func TestRestartedGateRelearnsAKey(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: time.Minute, Threshold: 10_000, SketchWidth: limit.DefaultSketchWidth}
	a := newGate(t, clk, lc, Config{Writer: "a"}, srv)
	ctx := context.Background()
	a.l.CheckAt(clk.Now(), "t:k", 9_000)
	clk.Advance(time.Second)
	if r := a.tk.Tick(ctx); r.Errors != 0 || r.Writes == 0 {
		t.Fatalf("gate a's tick: %+v", r)
	}
	b := newGate(t, clk, lc, Config{Writer: "b"}, srv) // a's replacement
	for range 100 {
		b.l.CheckAt(clk.Now(), "t:k", 1) // its floor
	}
	clk.Advance(time.Second)
	if r := b.tk.Tick(ctx); r.Errors != 0 {
		t.Fatalf("gate b's tick: %+v", r)
	}
	if d := b.l.CheckAt(clk.Now(), "t:k", 0); d.Level < 9_100 {
		t.Errorf("gate b's level of t:k %.0f, want the fleet's 9,100: it judged the key on its own count", d.Level)
	}
	for range 900 {
		b.l.CheckAt(clk.Now(), "t:k", 1)
	}
	if d := b.l.CheckAt(clk.Now(), "t:k", 0); !d.Limited {
		t.Errorf("t:k at 10,000 fleet-wide: %+v, want limited", d)
	}
}

// Divert, with the sketch: a key that jumps from half its limit to 5 × it, spread over 1,
// 4 or 16 gates among noise keys under the floor, is diverted (90% of its records or more
// in a tick) within 2 ticks of the exact fleet-wide count crossing its threshold.
func TestRunawayKeyDivertedWithTheSketch(t *testing.T) {
	t.Parallel()
	const threshold = 12_000
	for _, gates := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("%dgates", gates), func(t *testing.T) {
			if raceEnabled && gates > 4 {
				t.Skip("a large fleet: run without the race detector (make test-norace)")
			}
			t.Parallel()
			f := newFloorFleet(t, gates, limit.Divert, threshold, limit.DefaultSyncFloor)
			seq := 0
			var offered []int // per tick, fleet-wide
			crossed := -1
			step := func(x float64) (share float64) {
				perGate := int(x * threshold / 60 / float64(gates))
				allowed := f.stepWith(t, "team:runaway", perGate, 20, &seq)
				offered = append(offered, perGate*gates)
				sum := 0
				for _, n := range offered[max(0, len(offered)-60):] { // the exact sliding window: 60 ticks
					sum += n
				}
				if crossed < 0 && sum >= threshold {
					crossed = len(offered) - 1
				}
				return 1 - float64(allowed)/float64(perGate*gates)
			}
			for range 120 {
				if share := step(0.5); share != 0 {
					t.Fatalf("diverted %.2f at half its limit", share)
				}
			}
			for range 60 {
				if share := step(5); share >= 0.9 {
					if crossed < 0 {
						t.Fatalf("diverted before the exact count crossed")
					}
					ticks := len(offered) - 1 - crossed
					t.Logf("%d gates: 90%% diverted %d tick(s) after the exact count crossed", gates, ticks)
					if ticks > 2 {
						t.Errorf("90%% diverted %d ticks after the exact count crossed its threshold, want within 2", ticks)
					}
					return
				}
			}
			t.Fatal("never 90% diverted in 60 ticks at 5 ×")
		})
	}
}

// Redis stalls while countFleet's INCRBY is in flight: the client times out, Redis
// applies it when it wakes, and the next tick of the same slot sent INCRBY again. One gate
// counts once in a slot, or every gate of the fleet believes the fleet a gate larger for
// two slots (floors shrink, gate_fleet_gates lies).
func TestFleetCountStallCountsGateOnce(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	g := newGate(t, nil, limit.Config{Window: time.Minute},
		Config{KeyPrefix: "fs", Writer: "w0", TickTimeout: 10 * time.Second}, srv) // the stalled count alone waits stallWait (stallCtx)
	ctx := context.Background()
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int, off time.Duration) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + off) }
	slot := at(1, 0).UnixNano() / int64(FleetSlot)
	key := FleetKeyFor("fs", slot)

	g.tk.countFleet(ctx, at(0, time.Second)) // a first, clean count
	srv.Pause(t)
	g.tk.countFleet(stallCtx(ctx, t), at(1, time.Second)) // times out: Redis has the INCRBY in its socket
	srv.Resume(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := rc.Get(ctx, key).Int(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled INCRBY was never applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.tk.countFleet(ctx, at(1, 2*time.Second)) // the next tick, same slot
	if n, _ := rc.Get(ctx, key).Int(); n != 1 {
		t.Errorf("slot counter of one gate = %d after a stalled INCRBY and the next tick, want 1", n)
	}
	g.tk.countFleet(ctx, at(2, time.Second))
	if got := g.l.FleetSize(); got != 1 {
		t.Errorf("a lone gate finds a fleet of %d, want 1", got)
	}
}

// Run counts the fleet once a tick, after its read phase. At any tick interval the config
// allows (GATE_TICK_INTERVAL up to GATE_SYNC_INTERVAL, 15 s by default, and under the
// window), three gates that each count themselves on every tick find a fleet of 3: with
// ticks longer than two FleetSlots, every gate counts itself in one slot of three and
// reads only the two before it, which no gate counted in, and believes itself alone: every
// gate's floor is then SyncFloor × threshold, N times the floor's share, and a key under
// it on every gate is admitted fleet-wide up to N × SyncFloor of its threshold, unread.
func TestFleetCountsItsGatesAtLongTicks(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 7 * time.Second, 10 * time.Second, 12 * time.Second, 15 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			var gates []*gate
			for i := range 3 {
				gates = append(gates, newGate(t, nil, limit.Config{Window: time.Minute},
					Config{KeyPrefix: "fl", Writer: fmt.Sprint("w", i), TickInterval: interval}, srv))
			}
			ctx := context.Background()
			at := nextTick(time.Unix(1_800_000_000, 0), interval)
			for k := range 12 { // Run's calls: one a tick, after the read phase
				for i, g := range gates {
					// the gates' clocks a little apart, well within the quarter interval
					skew := time.Duration(i) * interval / 40
					g.tk.countFleet(ctx, at.Add(g.tk.readDelay()+skew))
				}
				if k >= 4 {
					for i, g := range gates {
						if got := g.l.FleetSize(); got != 3 {
							t.Fatalf("tick %d, gate %d: fleet size %d, want 3", k, i, got)
						}
					}
				}
				at = at.Add(interval)
			}
		})
	}
}

// A gate's rule sets' ticks share its fleet count (Config.Fleet): after a reload the new
// set's tick, running beside the old one for a tick, neither adds the gate to a slot the
// old one counted it in (gate_fleet_gates one too many for two slots, on every gate
// reading it) nor starts its limiters at a fleet of one, their floors the whole fleet's,
// until its first count comes back. Each tick kept a count of its own: both happened.
func TestFleetSharedByRuleSets(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	at := time.Unix(1_800_000_000, 0).Truncate(FleetSlot).Add(FleetSlot / 4)
	slot := at.UnixNano() / int64(FleetSlot)
	rdb := srv.Client(t)
	for _, s := range []int64{slot - 1, slot - 2} { // two other gates
		if err := rdb.Set(ctx, FleetKeyFor("fl", s), 2, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fleet := NewFleet()
	old := newGate(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fl", Writer: "w", Fleet: fleet}, srv)
	old.tk.countFleet(ctx, at)
	if got := old.l.FleetSize(); got != 3 {
		t.Fatalf("the first rule set's fleet %d, want 3", got)
	}
	reloaded := newGate(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fl", Writer: "w-r2", Fleet: fleet}, srv)
	if got := reloaded.l.FleetSize(); got != 3 {
		t.Errorf("the reloaded rule set's limiters start at a fleet of %d, want 3", got)
	}
	reloaded.tk.countFleet(ctx, at.Add(time.Second))
	old.tk.countFleet(ctx, at.Add(time.Second))
	if n, err := rdb.Get(ctx, FleetKeyFor("fl", slot)).Int(); err != nil || n != 1 {
		t.Errorf("the slot counts %d gates (%v), want 1: the gate counted once", n, err)
	}
	if got := reloaded.l.FleetSize(); got != 3 {
		t.Errorf("the reloaded rule set's fleet %d, want 3", got)
	}
}

// TestFleetDivertsNewTeamSpreadOverManyGates: a team none of 64 gates has seen, that
// starts at 2 × its limit spread evenly over them, is diverted within a few ticks of the
// fleet's count crossing its threshold, as a team that steps up from half its limit is.
// Each gate reads it once it passes the sync floor ÷ the fleet, but that first read gives a
// fleet factor of 1 and a level of a few percent: the team is idle on every gate, its own
// records (1/64 of the fleet's) reach the pending-read share only after 1.6 windows, and
// the idle cadence (4 × sync interval) next reads it a window later.
func TestFleetDivertsNewTeamSpreadOverManyGates(t *testing.T) {
	t.Parallel()
	const gates, threshold = 64, 60_000
	f := newFleet(t, gates, limit.Divert, threshold)
	for _, g := range f.gates {
		g.l.SetFleetSize(gates)
	}
	perGate := 2 * threshold / 60 / gates // 2 × the threshold a window, fleet-wide
	counted, crossed, admitted := 0, -1, 0
	for tick := range 2 * 60 {
		allowed := f.step(t, "team", perGate)
		counted += perGate * gates
		if crossed < 0 && counted >= threshold {
			crossed = tick
		}
		if allowed == 0 {
			t.Logf("%d gates: crossed at tick %d, diverted at tick %d, admitted %.3f × threshold", gates, crossed, tick, float64(admitted)/threshold)
			if tick > crossed+3 {
				t.Errorf("diverted %d ticks after the fleet crossed the threshold, want within 3; admitted %.3f × threshold", tick-crossed, float64(admitted)/threshold)
			}
			return
		}
		admitted += allowed
	}
	t.Fatalf("never diverted; admitted %.3f × threshold", float64(admitted)/threshold)
}

// A rule set's tick whose fleet count stalls (a lost reply) past the slot's end
// finishes after the other rule set's tick counted the gate in the next slot: the shared
// count must keep that later slot, or the next tick of that slot counts the gate again
// (every gate then finds the fleet one larger for two slots).
func TestFleetSharedStalledCountKeepsLaterSlot(t *testing.T) {
	t.Parallel() // it mostly waits (Redis, ticks): beside the package's other waiting tests
	srv := redistest.Start(t)
	stalled := redistest.Start(t) // the old rule set's connection, whose reply is lost
	ctx := context.Background()
	fleet := NewFleet()
	old := newGateWith(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fo", Writer: "w", Fleet: fleet, TickTimeout: 3 * time.Second},
		RedisOptions{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}, stalled)
	reloaded := newGate(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fo", Writer: "w-r2", Fleet: fleet}, srv)
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int, off time.Duration) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + off) }
	slot1 := at(1, 0).UnixNano() / int64(FleetSlot)

	stalled.Pause(t)
	done := make(chan struct{})
	go func() { old.tk.countFleet(ctx, at(0, FleetSlot-100*time.Millisecond)); close(done) }()
	for deadline := time.Now().Add(30 * time.Second); ; { // the old tick is adding the gate to slot 0
		fleet.mu.Lock()
		adding := fleet.adding
		fleet.mu.Unlock()
		if adding != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old tick never began adding the gate to slot 0")
		}
		time.Sleep(time.Millisecond)
	}
	reloaded.tk.countFleet(ctx, at(1, 100*time.Millisecond)) // the new rule set's tick, next slot
	<-done                                                   // the old tick times out
	stalled.Resume(t)
	reloaded.tk.countFleet(ctx, at(1, 1100*time.Millisecond)) // its next tick, same slot
	if n, err := srv.Client(t).Get(ctx, FleetKeyFor("fo", slot1)).Int(); err != nil || n != 1 {
		t.Errorf("slot counts the gate %d times (%v), want 1; fleet.counted %v", n, err, fleet.counted)
	}
}
