package limit

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/capturegate/gate/internal/clock"
)

// t0 is the fake clock's start: the first instant of an epoch for every window used here
// (1 s, 10 s, 60 s, 1 h).
var t0 = time.Unix(1_800_000_000, 0)

func init() {
	if t0.Unix()%3600 != 0 {
		panic("t0 must be aligned to a one-hour epoch")
	}
}

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// newTest returns a limiter on a fake clock set to t0, with its own metrics registry.
func newTest(t *testing.T, cfg Config) (*Limiter, *clock.Fake, *prometheus.Registry) {
	t.Helper()
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	l, err := New(cfg, clk, reg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return l, clk, reg
}

// sweep runs one sweep at now into a fresh Sweep.
func sweep(t *testing.T, l *Limiter, now time.Time) *Sweep {
	t.Helper()
	sw := new(Sweep)
	l.Sweep(now, sw)
	return sw
}

// findRead returns the read planned for team in sw, or nil.
func findRead(sw *Sweep, team string) *Read {
	for i := range sw.Reads {
		if sw.Reads[i].Team == team {
			return &sw.Reads[i]
		}
	}
	return nil
}

// mustRead returns the read planned for team in sw, failing the test if there is none.
func mustRead(t *testing.T, sw *Sweep, team string) *Read {
	t.Helper()
	r := findRead(sw, team)
	if r == nil {
		t.Fatalf("sweep planned no read for %q (reads: %+v)", team, sw.Reads)
	}
	return r
}

type countKey struct {
	team  string
	epoch int64
}

// countsOf aggregates counts by (team, epoch); duplicates would mean a record was handed
// out twice, so they are summed rather than hidden.
func countsOf(counts []Count) map[countKey]int64 {
	m := make(map[countKey]int64)
	for _, c := range counts {
		m[countKey{c.Team, c.Epoch}] += c.N
	}
	return m
}

func totalOf(counts []Count) int64 {
	var n int64
	for _, c := range counts {
		n += c.N
	}
	return n
}

func sortedCounts(counts []Count) []Count {
	out := slices.Clone(counts)
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.N, b.N))
	})
	return out
}

// establish gives team a global view of est read at now, with nothing pending: it counts
// enough records to be read, sweeps, and applies a read answering est.
func establish(t *testing.T, l *Limiter, now time.Time, team string, est int64) *Sweep {
	t.Helper()
	thr := l.Threshold(team)
	n := max(1, int64(math.Ceil(l.cfg.SyncFloor*float64(thr))))
	l.CheckAt(now, team, n)
	sw := sweep(t, l, now)
	r := mustRead(t, sw, team)
	if r.Reason != ReadFirst {
		t.Fatalf("first read of %q: reason %v, want %v", team, r.Reason, ReadFirst)
	}
	// All of it in the previous window: at t0, the start of a window, the estimate is
	// prev × (1 − 0) and ages out at prev / window from here.
	l.ApplyRead(r, 0, est, now)
	if got := l.CheckAt(now, team, 0).Level; got != float64(est) {
		t.Fatalf("level of %q right after a read of %d = %v, want %d", team, est, got, est)
	}
	return sw
}

func approxEqual(got, want float64) bool {
	return math.Abs(got-want) <= 1e-6*math.Max(1, math.Abs(want))
}

// cached reports whether team is in the limiter's cache.
func cached(l *Limiter, team string) bool {
	h := maphash.String(l.seed, team)
	sh := &l.shards[h&l.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, _ := sh.idx.tab.Load().lookup(h, team)
	return e != nil
}

// metricValue returns the value of the sample of family name whose labels include want,
// or fails the test.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			return sampleValue(m)
		}
	}
	t.Fatalf("no sample %s%v", name, want)
	return 0
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return math.NaN()
}

// ---------------------------------------------------------------------------------------
// Epochs

func TestEpoch(t *testing.T) {
	tests := []struct {
		window time.Duration
		t      time.Time
		want   int64
	}{
		{60 * time.Second, t0, 30_000_000},
		{60 * time.Second, at(59*time.Second + 999_999_999), 30_000_000},
		{60 * time.Second, at(60 * time.Second), 30_000_001},
		{60 * time.Second, at(-time.Nanosecond), 29_999_999},
		{60 * time.Second, time.Unix(0, 0), 0},
		{60 * time.Second, time.Unix(59, 0), 0},
		{60 * time.Second, time.Unix(-1, 0), -1}, // floor, not truncation
		{60 * time.Second, time.Unix(-60, 0), -1},
		{60 * time.Second, time.Unix(-61, 0), -2},
		{7 * time.Second, time.Unix(20, 0), 2},
		{7 * time.Second, time.Unix(21, 0), 3},
		{1500 * time.Millisecond, time.Unix(3, 0), 2},
		{1500 * time.Millisecond, time.Unix(2, 999_999_999), 1},
		{time.Hour, t0, 500_000},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.window, tc.t.UnixNano()), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: tc.window})
			if got := l.Epoch(tc.t); got != tc.want {
				t.Errorf("Epoch(%v) with window %s = %d, want %d", tc.t, tc.window, got, tc.want)
			}
		})
	}
}

// Counts drained by a sweep carry the epoch of the check, not of the sweep.
func TestSweepCountsCarryCheckEpoch(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000})
	e := l.Epoch(t0)
	l.CheckAt(at(59*time.Second+999*time.Millisecond), "a", 2) // end of epoch e
	l.CheckAt(at(59*time.Second), "a", 1)                      // still e
	l.CheckAt(at(60*time.Second), "a", 3)                      // start of e+1
	l.CheckAt(at(60*time.Second), "b", 4)
	sw := sweep(t, l, at(61*time.Second))

	want := []Count{{"a", e, 3}, {"a", e + 1, 3}, {"b", e + 1, 4}}
	if got := sortedCounts(sw.Counts); !slices.Equal(got, want) {
		t.Errorf("counts = %+v, want %+v", got, want)
	}
	if sw.Stale != 0 {
		t.Errorf("stale = %d, want 0", sw.Stale)
	}
	// Drained counts are handed out once.
	if sw2 := sweep(t, l, at(62*time.Second)); len(sw2.Counts) != 0 {
		t.Errorf("second sweep counts = %+v, want none", sw2.Counts)
	}
}

// A sweep whose time was read just before an epoch boundary, racing a check made just after
// it (the tick reads its clock, then spends milliseconds visiting teams while workers keep
// checking), must not lose that check's count: the package promises every counted record
// reaches a sweep exactly once unless its team is evicted or a whole window passes without
// a sweep. Neither happens here.
func TestSweepKeepsCountsCheckedAfterSweepTime(t *testing.T) {
	l, _, reg := newTest(t, Config{Window: time.Minute, Threshold: 1000})
	e := l.Epoch(t0)
	l.CheckAt(at(60*time.Second), "a", 5) // epoch e+1
	sw1 := sweep(t, l, at(60*time.Second-time.Millisecond))
	sw2 := sweep(t, l, at(61*time.Second))

	got := countsOf(append(slices.Clone(sw1.Counts), sw2.Counts...))
	want := map[countKey]int64{{"a", e + 1}: 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts over both sweeps = %v, want %v (sweep at epoch %d: counts %+v stale %d; sweep at epoch %d: counts %+v stale %d)",
			got, want, e, sw1.Counts, sw1.Stale, e+1, sw2.Counts, sw2.Stale)
	}
	if sw1.Stale+sw2.Stale != 0 {
		t.Errorf("stale = %d + %d, want 0: no window passed without a sweep", sw1.Stale, sw2.Stale)
	}
	if d := metricValue(t, reg, "gate_limiter_displaced_counts_total", nil); d != 0 {
		t.Errorf("displaced = %v, want 0", d)
	}
}

// ---------------------------------------------------------------------------------------
// Estimate, leak, level

// TestApplyReadAfterTheBoundary: a read planned before a window's end and applied after
// it (a tick interval that does not divide the window, whose read phase a quarter tick
// after the sweep falls past the boundary; a tick held past it) holds the counts of the
// window that ended and the one before. The team's estimate then is the ended window's
// count sliding out through the new one, as a read planned after the boundary would have
// it; before, it was that count whole, draining at the rate of the window before it: a
// team whose traffic fell (5000, then 1000 at its limit) drained 5 times too fast, let
// through under half its real level six seconds on; one whose traffic rose (0, then 1000)
// did not drain at all until its next read.
func TestApplyReadAfterTheBoundary(t *testing.T) {
	const thr = 1000
	for _, tc := range []struct {
		name       string
		curr, prev int64
		applied    time.Duration // after the boundary
		later      time.Duration // after the boundary, a look at the level some seconds on
		want       []float64     // the level then and then
	}{
		{"traffic fell", 1000, 5000, 500 * time.Millisecond, 6 * time.Second, []float64{1000 * (1 - 0.5/60), 900}},
		{"traffic rose", 1000, 0, 500 * time.Millisecond, 6 * time.Second, []float64{1000 * (1 - 0.5/60), 900}},
		{"two windows on", 1000, 5000, 60 * time.Second, 66 * time.Second, []float64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr})
			planned := at(59500 * time.Millisecond)
			l.CheckAt(planned, "a", 20) // over the sync floor: read
			r := mustRead(t, sweep(t, l, planned), "a")
			if r.Epoch != l.Epoch(t0) {
				t.Fatalf("read epoch = %d, want %d (planned in the window that ends at 60 s)", r.Epoch, l.Epoch(t0))
			}
			applied := at(time.Minute + tc.applied)
			l.ApplyRead(r, tc.curr, tc.prev, applied)
			for i, now := range []time.Time{applied, at(time.Minute + tc.later)} {
				if got := l.CheckAt(now, "a", 0).Level; math.Abs(got-tc.want[i]) > 1 {
					t.Errorf("read of the window ending at 60 s (%d, the one before %d) applied at %v: level at %v = %.1f, want %.1f",
						tc.curr, tc.prev, applied.Sub(t0), now.Sub(t0), got, tc.want[i])
				}
			}
		})
	}
}

func TestApplyReadWeightedEstimate(t *testing.T) {
	const thr = 1000
	tests := []struct {
		name       string
		apply      time.Duration // after the start of the read's epoch
		curr, prev int64
		want       float64
	}{
		{"start of epoch", 0, 20, 100, 120},
		{"quarter", 15 * time.Second, 20, 100, 95},
		{"half", 30 * time.Second, 20, 100, 70},
		{"last second", 59 * time.Second, 20, 100, 100.0/60 + 20},
		{"no previous", 45 * time.Second, 20, 0, 20},
		{"only previous", 15 * time.Second, 0, 100, 75},
		// The ended window's count slides out through the next (TestApplyReadAfterTheBoundary).
		{"applied in next epoch", 70 * time.Second, 20, 100, 20 * 50.0 / 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr})
			l.CheckAt(t0, "a", 20)
			sw := sweep(t, l, t0)
			r := mustRead(t, sw, "a")
			if r.Epoch != l.Epoch(t0) {
				t.Fatalf("read epoch = %d, want %d", r.Epoch, l.Epoch(t0))
			}
			now := at(tc.apply)
			// Level just before: never read, so pending only.
			a := l.ApplyRead(r, tc.curr, tc.prev, now)
			if want := (20 - tc.want) / thr; !approxEqual(a.Drift, want) {
				t.Errorf("drift = %v, want %v", a.Drift, want)
			}
			if a.Staleness != 0 {
				t.Errorf("staleness of a first read = %v, want 0", a.Staleness)
			}
			// Checked at the apply time: no leak yet, and nothing pending.
			if got := l.CheckAt(now, "a", 0).Level; !approxEqual(got, tc.want) {
				t.Errorf("level = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestApplyReadStalenessAndDrift(t *testing.T) {
	const thr = 600
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr})
	establish(t, l, t0, "a", 300)          // 300 in the last window: 5/s age out
	l.CheckAt(at(10*time.Second), "a", 40) // local: 300 - 50 + 40 = 290
	sw := sweep(t, l, at(10*time.Second))
	r := findRead(sw, "a")
	if r == nil {
		t.Fatalf("no read planned with 40 pending (share %g of %d)", l.cfg.PendingReadShare, thr)
	}
	if r.Reason != ReadPending {
		t.Errorf("reason = %v, want %v", r.Reason, ReadPending)
	}
	a := l.ApplyRead(r, 400, 0, at(10*time.Second))
	if a.Staleness != 10*time.Second {
		t.Errorf("staleness = %v, want 10s", a.Staleness)
	}
	if want := (290.0 - 400) / thr; math.Abs(a.Drift-want) > 1e-3 {
		t.Errorf("drift = %v, want %v", a.Drift, want)
	}
}

// TestEstimateAgesOut: between reads the fleet's count ages out as the sliding-window
// estimate does when nothing more comes in, at prev / window (here 300 in the last window:
// 5 per second), down to 0 and never below, with what this gate counted on top.
func TestEstimateAgesOut(t *testing.T) {
	const thr = 600
	tests := []struct {
		name    string
		est     int64
		after   time.Duration
		pending int64 // counted at T+after before the probe
		want    float64
	}{
		{"at read", 300, 0, 0, 300},
		{"100 ms", 300, 100 * time.Millisecond, 0, 299.5},
		{"10 s", 300, 10 * time.Second, 0, 250},
		{"59 s", 300, 59 * time.Second, 0, 5},
		{"aged out exactly", 300, time.Minute, 0, 0},
		{"never below zero", 300, 90 * time.Second, 0, 0},
		{"long after", 300, time.Hour, 0, 0},
		{"pending on top of an ageing estimate", 300, 10 * time.Second, 7, 257},
		{"pending on top of an aged-out estimate", 300, 90 * time.Second, 5, 5},
		{"estimate above threshold", 1200, 30 * time.Second, 0, 600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, clk, _ := newTest(t, Config{Window: time.Minute, Threshold: thr})
			establish(t, l, t0, "a", tc.est)
			clk.Set(at(tc.after))
			if tc.pending > 0 {
				l.Check("a", tc.pending)
			}
			// The rate is kept to three digits (bfloat16): within 0.4% of what aged out.
			got := l.Check("a", 0).Level
			if tol := 0.004*math.Max(float64(tc.est)+float64(tc.pending)-tc.want, 0) + 1e-6; math.Abs(got-tc.want) > tol {
				t.Errorf("level %v after a read of %d = %v, want %v ± %.3f", tc.after, tc.est, got, tc.want, tol)
			}
		})
	}
}

// Pending records do not drain: only the estimate does.
func TestPendingDoesNotLeak(t *testing.T) {
	l, clk, _ := newTest(t, Config{Window: time.Minute, Threshold: 600})
	l.Check("a", 5)
	clk.Advance(10 * time.Minute)
	if got := l.Check("a", 0).Level; got != 5 {
		t.Errorf("level of a never-read team 10m later = %v, want 5 (its pending count)", got)
	}
}

// ---------------------------------------------------------------------------------------
// Decisions, modes, tiers

func TestDecisionSequence(t *testing.T) {
	const thr = 10
	l, _, _ := newTest(t, Config{Threshold: thr})
	for i := range 15 {
		d := l.CheckAt(t0, "a", 1)
		if d.Level != float64(i) {
			t.Errorf("check %d: level = %v, want %d (the level before this record)", i, d.Level, i)
		}
		if want := i >= thr; d.Limited != want {
			t.Errorf("check %d at level %v: limited = %v, want %v", i, d.Level, d.Limited, want)
		}
		if d.Threshold != thr {
			t.Errorf("check %d: threshold = %d, want %d", i, d.Threshold, thr)
		}
		if want := TierOf(float64(i) / thr); d.Tier != want {
			t.Errorf("check %d: tier = %v, want %v", i, d.Tier, want)
		}
	}
}

func TestFirstContactAllowed(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		thr  int64
		n    int64
	}{
		{"divert threshold 1", Divert, 1, 1},
		{"divert huge batch", Divert, 10, 1_000_000},
		{"cap threshold 1", Cap, 1, 1},
		{"cap huge batch", Cap, 10, 1_000_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTest(t, Config{Threshold: tc.thr, Mode: tc.mode})
			d := l.CheckAt(t0, "a", tc.n)
			want := Decision{verdict: verdict{Limited: false, Tier: Idle}, Threshold: tc.thr, Level: 0}
			if d != want {
				t.Errorf("first check = %+v, want %+v", d, want)
			}
			d = l.CheckAt(t0, "a", 1)
			if !d.Limited || d.Level != float64(tc.n) || d.Tier != Hot {
				t.Errorf("second check = %+v, want limited at level %d, hot", d, tc.n)
			}
		})
	}
}

// Limited exactly when the level reaches the threshold, including a draining estimate.
func TestLimitedAtThresholdBoundary(t *testing.T) {
	const thr = 600
	// No hold: the boundary of the level itself (hold_test.go covers holds).
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr, DivertHold: -1, DivertRelease: 1})
	establish(t, l, t0, "a", thr)
	if d := l.CheckAt(t0, "a", 0); !d.Limited || d.Level != thr {
		t.Errorf("at level == threshold: %+v, want limited", d)
	}
	if d := l.CheckAt(at(100*time.Millisecond), "a", 0); d.Limited || d.Level >= thr {
		t.Errorf("100 ms later (level ~599): %+v, want allowed", d)
	}
	// One record pending brings it back to the threshold (599 + 1 = 600, within rounding).
	l.CheckAt(at(100*time.Millisecond), "a", 2)
	if d := l.CheckAt(at(100*time.Millisecond), "a", 0); !d.Limited {
		t.Errorf("with 2 pending on ~599: %+v, want limited", d)
	}
}

func TestDivertVersusCap(t *testing.T) {
	const thr, checks = 10, 15
	tests := []struct {
		mode                      Mode
		wantAllowed, wantLimited  int
		wantCounted, wantFinalLvl int64
	}{
		{Divert, 10, 5, 15, 15},
		{Cap, 10, 5, 10, 10},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			l, _, reg := newTest(t, Config{Threshold: thr, Mode: tc.mode})
			var allowed, limited int
			for i := range checks {
				d := l.CheckAt(t0, "a", 1)
				if d.Limited {
					limited++
				} else {
					allowed++
				}
				if i >= thr && !d.Limited {
					t.Errorf("check %d: allowed at level %v, want limited", i, d.Level)
				}
			}
			if allowed != tc.wantAllowed || limited != tc.wantLimited {
				t.Errorf("allowed/limited = %d/%d, want %d/%d", allowed, limited, tc.wantAllowed, tc.wantLimited)
			}
			// Pending, seen through the level.
			if got := l.CheckAt(t0, "a", 0).Level; got != float64(tc.wantFinalLvl) {
				t.Errorf("level after %d checks = %v, want %d", checks, got, tc.wantFinalLvl)
			}
			sw := sweep(t, l, t0)
			want := []Count{{"a", l.Epoch(t0), tc.wantCounted}}
			if !slices.Equal(sw.Counts, want) {
				t.Errorf("counts = %+v, want %+v", sw.Counts, want)
			}
			// Every further check is limited, in both modes, until a read.
			for i := range 5 {
				if d := l.CheckAt(t0, "a", 1); !d.Limited {
					t.Errorf("further check %d: %+v, want limited", i, d)
				}
			}
			sw = sweep(t, l, t0)
			wantMore := map[Mode]int64{Divert: 5, Cap: 0}[tc.mode]
			if got := totalOf(sw.Counts); got != wantMore {
				t.Errorf("counts of 5 limited checks = %d, want %d", got, wantMore)
			}
			// 1 probe + 5 further checks, all limited; allowed unchanged.
			if got := metricValue(t, reg, "gate_limiter_decisions_total", map[string]string{"decision": "limited"}); got != float64(tc.wantLimited+1+5) {
				t.Errorf("limited decisions metric = %v, want %d", got, tc.wantLimited+6)
			}
		})
	}
}

// n = 0 asks without counting.
func TestCheckZeroCountsNothing(t *testing.T) {
	for _, mode := range []Mode{Divert, Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Threshold: 10, Mode: mode})
			for range 100 {
				l.CheckAt(t0, "a", 0)
			}
			if d := l.CheckAt(t0, "a", 0); d.Level != 0 || d.Limited {
				t.Errorf("after 100 zero checks: %+v, want level 0, allowed", d)
			}
			if sw := sweep(t, l, t0); len(sw.Counts) != 0 {
				t.Errorf("counts = %+v, want none", sw.Counts)
			}
		})
	}
}

func TestTierOf(t *testing.T) {
	tests := []struct {
		p    float64
		want Tier
	}{
		{0, Idle},
		{0.0999, Idle},
		{0.1, Low},
		{0.4999, Low},
		{0.5, Normal},
		{0.7999, Normal},
		{0.8, Hot},
		{1, Hot},
		{5, Hot},
		{math.Inf(1), Hot},
		{-1, Idle},
	}
	for _, tc := range tests {
		if got := TierOf(tc.p); got != tc.want {
			t.Errorf("TierOf(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// The check's tier (computed without a division) agrees with TierOf(level/threshold), the
// tier a sweep uses, on every boundary.
func TestTierOfLevelAgreesWithTierOf(t *testing.T) {
	for thr := 1.0; thr <= 2000; thr++ {
		for _, b := range []float64{tierLow, tierNormal, tierHot} {
			edge := math.Ceil(b * thr)
			for _, lvl := range []float64{edge - 1, edge, edge + 1} {
				if lvl < 0 {
					continue
				}
				if a, s := tierOfLevel(lvl, thr), TierOf(lvl/thr); a != s {
					t.Fatalf("level %v threshold %v: tierOfLevel = %v, TierOf = %v", lvl, thr, a, s)
				}
			}
		}
	}
}

func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{Idle.String(), "idle"},
		{Low.String(), "low"},
		{Normal.String(), "normal"},
		{Hot.String(), "hot"},
		{Tier(9).String(), "unknown"},
		{ReadFirst.String(), "first"},
		{ReadPending.String(), "pending"},
		{ReadHot.String(), "hot"},
		{ReadCadence.String(), "cadence"},
		{ReadTTL.String(), "ttl"},
		{ReadRetry.String(), "retry"},
		{ReadReason(9).String(), "unknown"},
		{Divert.String(), "divert"},
		{Cap.String(), "cap"},
		{Mode(7).String(), "Mode(7)"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// A check's tier follows the level left by the previous checks, at once.
func TestTierChangesOnNextCheck(t *testing.T) {
	l, _, reg := newTest(t, Config{Window: time.Minute, Threshold: 100})
	steps := []struct {
		n    int64
		want Tier // tier of this check, from the level before it
	}{
		{10, Idle},   // level 0
		{40, Low},    // level 10
		{30, Normal}, // level 50
		{0, Hot},     // level 80
		{0, Hot},
	}
	for i, s := range steps {
		if d := l.CheckAt(t0, "a", s.n); d.Tier != s.want {
			t.Errorf("step %d: tier = %v (level %v), want %v", i, d.Tier, d.Level, s.want)
		}
	}
	for _, tr := range []struct{ from, to string }{{"idle", "low"}, {"low", "normal"}, {"normal", "hot"}} {
		if got := metricValue(t, reg, "gate_limiter_tier_transitions_total", map[string]string{"from": tr.from, "to": tr.to}); got != 1 {
			t.Errorf("transitions %s→%s = %v, want 1", tr.from, tr.to, got)
		}
	}

	// Down again as the estimate ages out: 90 in the last window, 1.5 per second.
	l2, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 100})
	establish(t, l2, t0, "b", 90)
	for _, s := range []struct {
		after time.Duration
		want  Tier
	}{
		{0, Hot},                   // 90
		{12 * time.Second, Normal}, // 72
		{30 * time.Second, Low},    // 45
		{55 * time.Second, Idle},   // 7.5
		{time.Hour, Idle},          // 0
	} {
		if d := l2.CheckAt(at(s.after), "b", 0); d.Tier != s.want {
			t.Errorf("%v after a read of 90: tier = %v (level %v), want %v", s.after, d.Tier, d.Level, s.want)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Read cadence

func TestReadFirst(t *testing.T) {
	const thr = 1000 // floor 1% = 10 records
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr, SyncInterval: 8 * time.Second})
	l.CheckAt(t0, "below", 9)
	l.CheckAt(t0, "at", 10)
	l.CheckAt(t0, "above", 900)
	for tick := range 20 {
		now := at(time.Duration(tick) * time.Second)
		sw := sweep(t, l, now)
		if r := findRead(sw, "below"); r != nil {
			t.Fatalf("tick %d: never-read team below the sync floor read: %+v", tick, r)
		}
		for _, team := range []string{"at", "above"} {
			r := findRead(sw, team)
			if r == nil {
				t.Fatalf("tick %d: never-read team %q above the floor not read", tick, team)
			}
			if r.Reason != ReadFirst || r.Epoch != l.Epoch(now) {
				t.Errorf("tick %d: read of %q = %+v, want reason first, epoch %d", tick, team, r, l.Epoch(now))
			}
		}
		if tick == 0 {
			r := findRead(sw, "above")
			if !approxEqual(r.Pressure, 0.9) || r.Tier != Hot {
				t.Errorf("read of above: pressure %v tier %v, want 0.9 hot", r.Pressure, r.Tier)
			}
		}
	}
	// One more record lifts "below" to the floor: read on the next sweep.
	l.CheckAt(at(20*time.Second), "below", 1)
	if r := findRead(sweep(t, l, at(20*time.Second)), "below"); r == nil || r.Reason != ReadFirst {
		t.Errorf("team at the floor: read %+v, want a first read", r)
	}
}

// readTimes gives team a view of est at t0, then sweeps once a second for ticks seconds,
// applying every read of it with the same answer. It returns the seconds at which the team
// was read, and why.
func readTimes(t *testing.T, cfg Config, est int64, ticks int) ([]int, []ReadReason) {
	t.Helper()
	l, _, _ := newTest(t, cfg)
	establish(t, l, t0, "team", est)
	var secs []int
	var reasons []ReadReason
	for s := 1; s <= ticks; s++ {
		now := at(time.Duration(s) * time.Second)
		sw := sweep(t, l, now)
		if r := findRead(sw, "team"); r != nil {
			secs = append(secs, s)
			reasons = append(reasons, r.Reason)
			l.ApplyRead(r, est, 0, now)
		}
	}
	return secs, reasons
}

func every(step, upTo int) []int {
	var s []int
	for i := step; i <= upTo; i += step {
		s = append(s, i)
	}
	return s
}

func TestReadCadence(t *testing.T) {
	off := false
	on := true
	// A one-hour window makes the leak 1000/3600 per second: tiers hold between reads.
	base := Config{
		Window: time.Hour, Threshold: 1000, SyncInterval: 8 * time.Second,
		PendingReadShare: -1, TTL: time.Hour, IdleTimeout: time.Hour,
	}
	const ticks = 70
	tests := []struct {
		name   string
		mod    func(*Config)
		est    int64
		want   []int
		reason ReadReason
	}{
		{"hot every tick (default)", nil, 900, every(1, ticks), ReadHot},
		{"hot every tick (explicit)", func(c *Config) { c.HotEveryTick = &on }, 900, every(1, ticks), ReadHot},
		{"hot, every tick off: half the sync interval", func(c *Config) { c.HotEveryTick = &off }, 900, every(4, ticks), ReadCadence},
		{"normal: every sync interval", nil, 650, every(8, ticks), ReadCadence},
		{"normal with every tick off", func(c *Config) { c.HotEveryTick = &off }, 650, every(8, ticks), ReadCadence},
		{"low: every 4 sync intervals", nil, 300, every(32, ticks), ReadCadence},
		{"idle above the floor: as low", nil, 50, every(32, ticks), ReadCadence},
		{"idle below the floor: never", nil, 5, nil, 0},
		{"idle at zero: never", nil, 0, nil, 0},
		{"ttl forces a read of an idle team", func(c *Config) { c.TTL = 20 * time.Second }, 0, every(20, ticks), ReadTTL},
		{"ttl before the low cadence", func(c *Config) { c.TTL = 20 * time.Second }, 300, every(20, ticks), ReadTTL},
		{"cadence before the ttl", func(c *Config) { c.TTL = 20 * time.Second }, 650, every(8, ticks), ReadCadence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			secs, reasons := readTimes(t, cfg, tc.est, ticks)
			if !slices.Equal(secs, tc.want) {
				t.Errorf("read at seconds %v, want %v", secs, tc.want)
			}
			for i, r := range reasons {
				if r != tc.reason {
					t.Errorf("read %d at %ds: reason %v, want %v", i, secs[i], r, tc.reason)
					break
				}
			}
		})
	}
}

func TestPendingRead(t *testing.T) {
	tests := []struct {
		name  string
		share float64
		want  bool
	}{
		{"default share 5%", 0, true},
		{"explicit 5%", 0.05, true},
		{"disabled", -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTest(t, Config{
				Window: time.Hour, Threshold: 1000, SyncInterval: 8 * time.Second,
				PendingReadShare: tc.share, TTL: time.Hour, IdleTimeout: time.Hour,
			})
			establish(t, l, t0, "a", 0)
			l.CheckAt(at(time.Second), "a", 49)
			if r := findRead(sweep(t, l, at(time.Second)), "a"); r != nil {
				t.Errorf("49 pending of 1000: read %+v, want none", r)
			}
			l.CheckAt(at(2*time.Second), "a", 1)
			r := findRead(sweep(t, l, at(2*time.Second)), "a")
			switch {
			case tc.want && r == nil:
				t.Fatalf("50 pending of 1000 (5%%): no read")
			case tc.want && r.Reason != ReadPending:
				t.Errorf("reason = %v, want %v", r.Reason, ReadPending)
			case !tc.want && r != nil:
				t.Errorf("pending reads disabled: read %+v, want none", r)
			}
			if r == nil {
				return
			}
			// After the read, pending restarts from zero.
			l.ApplyRead(r, 50, 0, at(2*time.Second))
			l.CheckAt(at(3*time.Second), "a", 49)
			if r := findRead(sweep(t, l, at(3*time.Second)), "a"); r != nil {
				t.Errorf("49 pending since the last read: read %+v, want none", r)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------
// ApplyRead and pending

func TestApplyReadResetsPending(t *testing.T) {
	const thr = 1000
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: thr, SyncInterval: 8 * time.Second})
	e := l.Epoch(t0)
	l.CheckAt(t0, "a", 30)
	sw := sweep(t, l, t0)
	r := mustRead(t, sw, "a")
	if got := countsOf(sw.Counts)[countKey{"a", e}]; got != 30 {
		t.Fatalf("drained %d, want 30", got)
	}
	// Drained but not yet read: still pending.
	if got := l.CheckAt(t0, "a", 0).Level; got != 30 {
		t.Errorf("level between sweep and read = %v, want 30", got)
	}
	// Counted while the read is in flight: not part of it.
	l.CheckAt(t0, "a", 7)
	l.ApplyRead(r, 30, 0, t0) // the store holds our 30
	if got := l.CheckAt(t0, "a", 0).Level; got != 37 {
		t.Errorf("level after the read = %v, want 30 (estimate) + 7 (pending)", got)
	}

	// The next tick writes the 7 and reads a store that holds 30 + 7 + 50.
	l.CheckAt(t0, "a", 50)
	sw = sweep(t, l, t0)
	if got := countsOf(sw.Counts)[countKey{"a", e}]; got != 57 {
		t.Errorf("second sweep drained %d, want 57", got)
	}
	r = mustRead(t, sw, "a")
	if r.Reason != ReadPending {
		t.Errorf("reason = %v, want %v", r.Reason, ReadPending)
	}
	l.ApplyRead(r, 87, 0, t0)
	if got := l.CheckAt(t0, "a", 0).Level; got != 87 {
		t.Errorf("level after the second read = %v, want 87 and nothing pending", got)
	}
}

// ---------------------------------------------------------------------------------------
// Overrides

func TestOverrides(t *testing.T) {
	// No hold: a raised override frees a held team only at the next sweep (hold_test.go).
	l, _, _ := newTest(t, Config{Threshold: 100, Overrides: map[string]int64{"big": 1000, "small": 5}, DivertHold: -1, DivertRelease: 1})
	for team, want := range map[string]int64{"big": 1000, "small": 5, "other": 100} {
		if got := l.Threshold(team); got != want {
			t.Errorf("Threshold(%q) = %d, want %d", team, got, want)
		}
		if d := l.CheckAt(t0, team, 5); d.Threshold != want {
			t.Errorf("check %q: threshold %d, want %d", team, d.Threshold, want)
		}
	}
	if d := l.CheckAt(t0, "small", 0); !d.Limited {
		t.Errorf("small at 5/5: %+v, want limited", d)
	}

	// A swap applies to teams already cached.
	if err := l.SetOverrides(map[string]int64{"small": 50, "new": 7}); err != nil {
		t.Fatal(err)
	}
	for team, want := range map[string]int64{"big": 100, "small": 50, "new": 7, "other": 100} {
		d := l.CheckAt(t0, team, 0)
		if d.Threshold != want || l.Threshold(team) != want {
			t.Errorf("after swap, %q: check threshold %d, Threshold %d, want %d", team, d.Threshold, l.Threshold(team), want)
		}
	}
	if d := l.CheckAt(t0, "small", 0); d.Limited {
		t.Errorf("small at 5/50: %+v, want allowed", d)
	}

	// An invalid threshold rejects the whole set.
	for _, bad := range []int64{0, -1, MaxThreshold + 1} {
		err := l.SetOverrides(map[string]int64{"small": 1, "big": bad})
		if !errors.Is(err, ErrBadThreshold) {
			t.Errorf("SetOverrides with %d: err = %v, want ErrBadThreshold", bad, err)
		}
		if got := l.Overrides(); !equalMaps(got, map[string]int64{"small": 50, "new": 7}) {
			t.Errorf("after a rejected set: overrides %v, want the old ones", got)
		}
		if d := l.CheckAt(t0, "small", 0); d.Threshold != 50 {
			t.Errorf("after a rejected set: small threshold %d, want 50", d.Threshold)
		}
	}
	// The largest threshold is accepted.
	if err := l.SetOverrides(map[string]int64{"max": MaxThreshold}); err != nil {
		t.Errorf("SetOverrides(MaxThreshold): %v", err)
	}
	if d := l.CheckAt(t0, "max", 0); d.Threshold != MaxThreshold {
		t.Errorf("threshold %d, want MaxThreshold %d", d.Threshold, int64(MaxThreshold))
	}

	// nil clears.
	if err := l.SetOverrides(nil); err != nil {
		t.Fatal(err)
	}
	if got := l.Overrides(); len(got) != 0 {
		t.Errorf("after nil: overrides %v, want none", got)
	}
	for _, team := range []string{"big", "small", "max", "other"} {
		if d := l.CheckAt(t0, team, 0); d.Threshold != 100 {
			t.Errorf("after nil, %q threshold %d, want the default 100", team, d.Threshold)
		}
	}
}

func TestOverridesAreCopied(t *testing.T) {
	in := map[string]int64{"a": 5}
	l, _, _ := newTest(t, Config{Threshold: 100, Overrides: in})
	in["a"] = 6
	if got := l.Threshold("a"); got != 5 {
		t.Errorf("config map changed after New: threshold %d, want 5", got)
	}
	m := map[string]int64{"a": 7}
	if err := l.SetOverrides(m); err != nil {
		t.Fatal(err)
	}
	m["a"] = 8
	out := l.Overrides()
	out["a"] = 9
	if got := l.CheckAt(t0, "a", 0).Threshold; got != 7 {
		t.Errorf("threshold %d, want 7: maps passed in or out must not alias the limiter's", got)
	}
}

// The overrides generation is 20 bits wide and wraps; a team whose cached threshold was
// taken under a generation must not reuse it when the counter comes back to that number.
func TestOverridesGenerationWrap(t *testing.T) {
	if testing.Short() {
		t.Skip("a million SetOverrides")
	}
	l, _, _ := newTest(t, Config{Threshold: 100})
	if err := l.SetOverrides(map[string]int64{"a": 5}); err != nil {
		t.Fatal(err)
	}
	if d := l.CheckAt(t0, "a", 0); d.Threshold != 5 {
		t.Fatalf("threshold %d, want 5", d.Threshold)
	}
	// A full cycle of generations with the team never checked nor swept.
	for range genMask {
		if err := l.SetOverrides(nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := l.CheckAt(t0, "a", 0); d.Threshold != 100 {
		t.Errorf("after %d swaps to no overrides: threshold %d, want the default 100", genMask, d.Threshold)
	}
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------------------
// Configuration

func TestConfigDefaults(t *testing.T) {
	l, _, _ := newTest(t, Config{})
	c := l.Config()
	if c.Window != DefaultWindow || c.Threshold != DefaultThreshold || c.SyncInterval != DefaultSyncInterval ||
		c.HotEveryTick == nil || *c.HotEveryTick != DefaultHotEveryTick ||
		c.PendingReadShare != DefaultPendingReadShare || c.SyncFloor != DefaultSyncFloor ||
		c.Capacity != DefaultCapacity || c.TTL != DefaultTTL || c.IdleTimeout != DefaultIdleTimeout ||
		c.Shards != DefaultShards || c.Mode != Divert {
		t.Errorf("defaults = %+v", c)
	}
	if l.Clock() == nil {
		t.Error("Clock() = nil")
	}
	if l.Len() != 0 {
		t.Errorf("Len() = %d, want 0", l.Len())
	}
}

func TestNewNilClockAndRegistry(t *testing.T) {
	l, err := New(Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Clock().(clock.Real); !ok {
		t.Errorf("Clock() = %T, want clock.Real", l.Clock())
	}
	if d := l.Check("a", 1); d.Limited {
		t.Errorf("first check on the wall clock: %+v", d)
	}
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Config{}, nil, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{}, nil, reg); err == nil {
		t.Error("second limiter on the same registry: no error, want a duplicate registration error")
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr []error // nil: valid
	}{
		{"zero", Config{}, nil},
		{"window negative", Config{Window: -time.Second}, []error{ErrBadConfig}},
		{"window under 1ms", Config{Window: 999 * time.Microsecond}, []error{ErrBadConfig}},
		{"window 1ms", Config{Window: time.Millisecond}, nil},
		{"threshold negative", Config{Threshold: -1}, []error{ErrBadConfig, ErrBadThreshold}},
		{"threshold too large", Config{Threshold: MaxThreshold + 1}, []error{ErrBadConfig, ErrBadThreshold}},
		{"threshold max", Config{Threshold: MaxThreshold}, nil},
		{"threshold 1", Config{Threshold: 1}, nil},
		{"override zero", Config{Overrides: map[string]int64{"a": 0}}, []error{ErrBadConfig, ErrBadThreshold}},
		{"override negative", Config{Overrides: map[string]int64{"a": -5}}, []error{ErrBadConfig, ErrBadThreshold}},
		{"override too large", Config{Overrides: map[string]int64{"a": MaxThreshold + 1}}, []error{ErrBadConfig, ErrBadThreshold}},
		{"mode unknown", Config{Mode: Mode(2)}, []error{ErrBadConfig, ErrBadMode}},
		{"sync interval negative", Config{SyncInterval: -time.Second}, []error{ErrBadConfig}},
		{"pending share above 1", Config{PendingReadShare: 1.5}, []error{ErrBadConfig}},
		{"pending share 1", Config{PendingReadShare: 1}, nil},
		{"pending share negative disables", Config{PendingReadShare: -1}, nil},
		{"sync floor negative", Config{SyncFloor: -0.01}, []error{ErrBadConfig}},
		{"sync floor at low tier", Config{SyncFloor: 0.1}, []error{ErrBadConfig}},
		{"sync floor above 1", Config{SyncFloor: 2}, []error{ErrBadConfig}},
		{"sync floor just below low tier", Config{SyncFloor: 0.099}, nil},
		{"capacity negative", Config{Capacity: -1}, []error{ErrBadConfig}},
		{"capacity 1", Config{Capacity: 1}, nil},
		{"ttl negative", Config{TTL: -time.Second}, []error{ErrBadConfig}},
		{"idle timeout negative", Config{IdleTimeout: -time.Second}, []error{ErrBadConfig}},
		{"shards negative", Config{Shards: -1}, []error{ErrBadConfig}},
		{"shards too many", Config{Shards: 1<<16 + 1}, []error{ErrBadConfig}},
		{"shards max", Config{Shards: 1 << 16}, nil},
		{"several at once", Config{Window: -1, Capacity: -1, Mode: Mode(9)}, []error{ErrBadConfig, ErrBadMode}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.cfg, clock.NewFake(t0), nil)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("New: %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New: no error, want %v", tc.wantErr)
			}
			if l != nil {
				t.Errorf("New returned a limiter with an error")
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %q does not wrap %v", err, want)
				}
			}
		})
	}
}

// Every problem is reported, not only the first.
func TestConfigValidationReportsAll(t *testing.T) {
	_, err := New(Config{Window: -1, Capacity: -1}, nil, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"window", "capacity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestShardsRoundedToPowerOfTwo(t *testing.T) {
	for in, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 100: 128, 256: 256, 257: 512} {
		l, _, _ := newTest(t, Config{Shards: in})
		if got := l.Config().Shards; got != want || len(l.shards) != want || l.mask != uint64(want-1) {
			t.Errorf("Shards %d: config %d, %d shards, mask %d; want %d", in, got, len(l.shards), l.mask, want)
		}
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"divert", Divert, false},
		{"cap", Cap, false},
		{"CAP", Cap, false},
		{" Divert ", Divert, false},
		{"", Divert, false}, // unset means the default
		{"capped", 0, true},
		{"token", 0, true},
		{"div ert", 0, true},
		{"1", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMode(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadMode) {
					t.Errorf("ParseMode(%q) error = %v, want ErrBadMode", tc.in, err)
				}
			} else if err != nil || got != tc.want {
				t.Errorf("ParseMode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}

			m := Mode(42)
			err = m.UnmarshalText([]byte(tc.in))
			if tc.wantErr {
				if !errors.Is(err, ErrBadMode) {
					t.Errorf("UnmarshalText(%q) error = %v, want ErrBadMode", tc.in, err)
				}
				if m != 42 {
					t.Errorf("UnmarshalText(%q) failed but changed the mode to %v", tc.in, m)
				}
			} else if err != nil || m != tc.want {
				t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tc.in, m, err, tc.want)
			}
		})
	}
	// Round trip.
	for _, m := range []Mode{Divert, Cap} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Capacity, expiry, stale epochs

func TestCapacity(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		shards   int
		teams    int
	}{
		{"one shard", 8, 1, 100},
		{"four shards", 64, 4, 2000},
		{"default shards", 1000, 0, 20_000},
		{"capacity below shard count", 16, 0, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _, reg := newTest(t, Config{Threshold: 1000, Capacity: tc.capacity, Shards: tc.shards})
			maxLen := 0
			for i := range tc.teams {
				l.CheckAt(t0, fmt.Sprintf("team-%d", i), 1)
				maxLen = max(maxLen, l.Len())
			}
			if maxLen > tc.capacity {
				t.Errorf("Len() reached %d with Capacity %d (%d shards)", maxLen, tc.capacity, len(l.shards))
			}
			evicted := metricValue(t, reg, "gate_limiter_evictions_total", map[string]string{"reason": "capacity"})
			if want := float64(tc.teams - l.Len()); evicted != want {
				t.Errorf("capacity evictions = %v, want %v (teams %d, cached %d)", evicted, want, tc.teams, l.Len())
			}
			if evicted == 0 {
				t.Error("no evictions")
			}
			sw := sweep(t, l, t0)
			if got := totalOf(sw.Counts); got != int64(tc.teams) {
				t.Errorf("counts = %d, want %d: an evicted team's counts must reach the next sweep", got, tc.teams)
			}
			for k, n := range countsOf(sw.Counts) {
				if n != 1 {
					t.Errorf("team %q epoch %d counted %d, want 1", k.team, k.epoch, n)
				}
			}
			if sw.Stale != 0 || sw.Entries != l.Len() {
				t.Errorf("sweep stale %d entries %d, want 0 and Len() %d", sw.Stale, sw.Entries, l.Len())
			}
			// Orphans are handed out once.
			if sw := sweep(t, l, t0); len(sw.Counts) != 0 {
				t.Errorf("second sweep counts %d records, want none", totalOf(sw.Counts))
			}
		})
	}
}

// The victim is the least recently seen team of its shard's sample.
func TestCapacityEvictsLeastRecentlySeen(t *testing.T) {
	l, clk, _ := newTest(t, Config{Threshold: 1000, Capacity: 4, Shards: 1})
	for _, team := range []string{"a", "b", "c", "d"} {
		l.Check(team, 1)
		clk.Advance(time.Second)
	}
	l.Check("a", 1) // a is now the most recent
	clk.Advance(time.Second)
	l.Check("e", 1)
	for team, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true, "e": true} {
		if got := cached(l, team); got != want {
			t.Errorf("cached(%q) = %v, want %v", team, got, want)
		}
	}
	if l.Len() != 4 {
		t.Errorf("Len() = %d, want 4", l.Len())
	}
	// b's record survives its eviction.
	sw := sweep(t, l, clk.Now())
	if got := countsOf(sw.Counts)[countKey{"b", l.Epoch(t0)}]; got != 1 {
		t.Errorf("evicted b: counts %+v, want b counted once", sw.Counts)
	}
	if got := totalOf(sw.Counts); got != 6 {
		t.Errorf("total counts %d, want 6", got)
	}
}

func TestIdleExpiry(t *testing.T) {
	l, clk, reg := newTest(t, Config{Window: time.Minute, Threshold: 1000, IdleTimeout: 30 * time.Second, ColdWriteInterval: -1})
	e := l.Epoch(t0)
	l.Check("old", 3)
	l.Check("fresh", 1)
	clk.Advance(20 * time.Second)
	l.Check("fresh", 2)

	clk.Advance(8 * time.Second) // old idle 28 s
	sw := sweep(t, l, clk.Now())
	if sw.Expired != 0 || l.Len() != 2 || sw.Entries != 2 {
		t.Errorf("at 28 s idle: expired %d, Len %d, entries %d; want 0, 2, 2", sw.Expired, l.Len(), sw.Entries)
	}
	l.Check("old", 4) // not yet swept: stays with old, and revives it
	// t0+59s: still epoch e. Idle 31 s: a team is expired up to a second past the timeout
	// (idleSeconds), as the cache notes when it was seen in whole seconds.
	clk.Advance(31 * time.Second)
	l.Check("fresh", 1)
	sw = sweep(t, l, clk.Now()) // old idle 31 s, fresh 0 s
	if sw.Expired != 1 {
		t.Errorf("expired = %d, want 1", sw.Expired)
	}
	if l.Len() != 1 || sw.Entries != 1 || !cached(l, "fresh") || cached(l, "old") {
		t.Errorf("after expiry: Len %d, entries %d, fresh cached %v, old cached %v; want 1, 1, true, false",
			l.Len(), sw.Entries, cached(l, "fresh"), cached(l, "old"))
	}
	if want := (map[countKey]int64{{"old", e}: 4, {"fresh", e}: 1}); !maps2Equal(countsOf(sw.Counts), want) {
		t.Errorf("counts = %v, want %v: an expired team's unsent counts go out with its expiry", countsOf(sw.Counts), want)
	}
	if got := metricValue(t, reg, "gate_limiter_evictions_total", map[string]string{"reason": "idle"}); got != 1 {
		t.Errorf("idle evictions = %v, want 1", got)
	}
	if got := metricValue(t, reg, "gate_limiter_cache_entries", nil); got != 1 {
		t.Errorf("cache entries = %v, want 1", got)
	}
	// Seen again, it starts afresh.
	if d := l.Check("old", 1); d.Level != 0 || d.Limited {
		t.Errorf("expired team seen again: %+v, want level 0", d)
	}
}

func maps2Equal(a, b map[countKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestStaleEpochs(t *testing.T) {
	t.Run("swept two epochs late", func(t *testing.T) {
		l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000})
		e := l.Epoch(t0)
		l.CheckAt(t0, "a", 4)                  // epoch e
		l.CheckAt(at(60*time.Second), "a", 3)  // e+1
		sw := sweep(t, l, at(121*time.Second)) // e+2
		if want := []Count{{"a", e + 1, 3}}; !slices.Equal(sw.Counts, want) {
			t.Errorf("counts = %+v, want %+v", sw.Counts, want)
		}
		if sw.Stale != 4 {
			t.Errorf("stale = %d, want 4", sw.Stale)
		}
		// Stale records were never written, so they are not pending either.
		if got := l.CheckAt(at(121*time.Second), "a", 0).Level; got != 3 {
			t.Errorf("level = %v, want 3 (the written e+1 counts only)", got)
		}
	})
	t.Run("displaced by a check two epochs later", func(t *testing.T) {
		l, _, reg := newTest(t, Config{Window: time.Minute, Threshold: 1000})
		e := l.Epoch(t0)
		l.CheckAt(t0, "a", 4)                  // epoch e
		l.CheckAt(at(120*time.Second), "a", 5) // e+2: same slot
		sw := sweep(t, l, at(121*time.Second))
		if want := []Count{{"a", e + 2, 5}}; !slices.Equal(sw.Counts, want) {
			t.Errorf("counts = %+v, want %+v", sw.Counts, want)
		}
		if got := metricValue(t, reg, "gate_limiter_displaced_counts_total", nil); got != 4 {
			t.Errorf("displaced = %v, want 4", got)
		}
		if got := l.CheckAt(at(121*time.Second), "a", 0).Level; got != 5 {
			t.Errorf("level = %v, want 5", got)
		}
	})
	t.Run("evicted, then swept two epochs late", func(t *testing.T) {
		l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, Capacity: 1, Shards: 1})
		e := l.Epoch(t0)
		l.CheckAt(t0, "a", 4)
		l.CheckAt(at(60*time.Second), "b", 2) // evicts a; a's e counts become orphans
		l.CheckAt(at(61*time.Second), "c", 3) // evicts b
		sw := sweep(t, l, at(121*time.Second))
		if want := []Count{{"b", e + 1, 2}, {"c", e + 1, 3}}; !slices.Equal(sortedCounts(sw.Counts), want) {
			t.Errorf("counts = %+v, want %+v", sw.Counts, want)
		}
		if sw.Stale != 4 {
			t.Errorf("stale = %d, want 4", sw.Stale)
		}
	})
	t.Run("never a count older than the previous epoch", func(t *testing.T) {
		l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1_000_000})
		for s := 0; s < 600; s += 7 {
			l.CheckAt(at(time.Duration(s)*time.Second), "a", 1)
			if s%100 == 0 {
				now := at(time.Duration(s) * time.Second)
				sw := sweep(t, l, now)
				for _, c := range sw.Counts {
					if c.Epoch < l.Epoch(now)-1 || c.Epoch > l.Epoch(now) {
						t.Errorf("sweep at epoch %d: count %+v", l.Epoch(now), c)
					}
				}
			}
		}
	})
}

// ---------------------------------------------------------------------------------------
// Sweep figures and metrics

func TestSweepTiersAndEntries(t *testing.T) {
	l, _, reg := newTest(t, Config{Threshold: 100})
	for team, n := range map[string]int64{"idle": 5, "low": 20, "normal": 60, "hot": 90, "over": 150} {
		l.CheckAt(t0, team, n)
	}
	sw := sweep(t, l, t0)
	if sw.Entries != 5 {
		t.Errorf("entries = %d, want 5", sw.Entries)
	}
	if want := [numTiers]int{1, 1, 1, 2}; sw.Tiers != want {
		t.Errorf("tiers = %v, want %v", sw.Tiers, want)
	}
	for tier, want := range map[string]float64{"idle": 1, "low": 1, "normal": 1, "hot": 2} {
		if got := metricValue(t, reg, "gate_limiter_tier_entities", map[string]string{"tier": tier}); got != want {
			t.Errorf("tier_entities{tier=%q} = %v, want %v", tier, got, want)
		}
	}
	if got := metricValue(t, reg, "gate_limiter_cache_entries", nil); got != 5 {
		t.Errorf("cache entries = %v, want 5", got)
	}
	// All five are above the 1% floor and never read.
	if len(sw.Reads) != 5 {
		t.Errorf("reads = %d, want 5", len(sw.Reads))
	}
	for _, r := range sw.Reads {
		if r.Tier != TierOf(r.Pressure) {
			t.Errorf("read %+v: tier does not match pressure", r)
		}
	}
	if got := metricValue(t, reg, "gate_limiter_cache_total", map[string]string{"result": "sync_queued"}); got != 5 {
		t.Errorf("sync_queued = %v, want 5", got)
	}
}

// Sweep reuses its argument: nothing from the previous sweep is left in it.
func TestSweepResetsInto(t *testing.T) {
	l, _, _ := newTest(t, Config{Threshold: 100, IdleTimeout: time.Second})
	l.CheckAt(t0, "a", 50)
	var sw Sweep
	l.Sweep(t0, &sw)
	if len(sw.Counts) != 1 || len(sw.Reads) != 1 || sw.Entries != 1 {
		t.Fatalf("first sweep: %+v", sw)
	}
	l.Sweep(at(time.Hour), &sw) // a expires; nothing counted since
	if len(sw.Counts) != 0 || len(sw.Reads) != 0 || sw.Entries != 0 || sw.Expired != 1 || sw.Tiers != [numTiers]int{} {
		t.Errorf("second sweep: %+v, want only one expiry", sw)
	}
}

func TestMetrics(t *testing.T) {
	l, _, reg := newTest(t, Config{Threshold: 2})
	l.CheckAt(t0, "a", 1) // allowed, miss, idle
	l.CheckAt(t0, "a", 1) // allowed, level 1: normal
	l.CheckAt(t0, "a", 1) // limited, level 2: hot
	l.CheckAt(t0, "b", 1) // allowed, miss
	sweep(t, l, t0)       // reads both (first)

	const want = `
# HELP gate_limiter_decisions_total Checks answered, by decision (allowed, limited).
# TYPE gate_limiter_decisions_total counter
gate_limiter_decisions_total{decision="allowed"} 3
gate_limiter_decisions_total{decision="limited"} 1
# HELP gate_limiter_cache_total Cache results: hit and miss per check, sync_queued per read planned by the tick.
# TYPE gate_limiter_cache_total counter
gate_limiter_cache_total{result="hit"} 2
gate_limiter_cache_total{result="miss"} 2
gate_limiter_cache_total{result="sync_queued"} 2
# HELP gate_limiter_tier_transitions_total Tier changes seen by checks.
# TYPE gate_limiter_tier_transitions_total counter
gate_limiter_tier_transitions_total{from="idle",to="normal"} 1
gate_limiter_tier_transitions_total{from="normal",to="hot"} 1
# HELP gate_limiter_cache_entries Teams in the local cache.
# TYPE gate_limiter_cache_entries gauge
gate_limiter_cache_entries 2
# HELP gate_limiter_evictions_total Teams removed from the cache, by reason (capacity, idle).
# TYPE gate_limiter_evictions_total counter
gate_limiter_evictions_total{reason="capacity"} 0
gate_limiter_evictions_total{reason="idle"} 0
# HELP gate_limiter_displaced_counts_total Counted records dropped because no tick collected them for a whole window.
# TYPE gate_limiter_displaced_counts_total counter
gate_limiter_displaced_counts_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gate_limiter_decisions_total", "gate_limiter_cache_total", "gate_limiter_tier_transitions_total",
		"gate_limiter_cache_entries", "gate_limiter_evictions_total", "gate_limiter_displaced_counts_total",
	); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(newCollector(l)); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// ---------------------------------------------------------------------------------------
// Concurrency and allocations

// Checks on many goroutines, with a tick sweeping, applying reads and swapping overrides
// beside them: every counted record reaches exactly one sweep.
func TestConcurrentChecksAndSweeps(t *testing.T) {
	const (
		workers = 8
		checks  = 10_000
		teams   = 5
	)
	// Start 50 s into an epoch and move at most 20 s, so the run crosses one epoch
	// boundary and no count can be stale.
	start := at(50 * time.Second)
	clk := clock.NewFake(start)
	l, err := New(Config{Window: time.Minute, Threshold: 20_000, SyncInterval: 2 * time.Second}, clk, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, teams)
	for i := range names {
		names[i] = fmt.Sprintf("team-%d", i)
	}
	allowedThr := map[int64]bool{20_000: true, 1_000: true, 50_000: true}

	store := map[countKey]int64{} // the shared counters, as Redis would hold them
	var total, stale int64
	var sweeps int
	collect := func(now time.Time, sw *Sweep) {
		l.Sweep(now, sw)
		sweeps++
		stale += sw.Stale
		for _, c := range sw.Counts {
			total += c.N
			store[countKey{c.Team, c.Epoch}] += c.N
		}
		for i := range sw.Reads {
			r := &sw.Reads[i]
			l.ApplyRead(r, store[countKey{r.Team, r.Epoch}], store[countKey{r.Team, r.Epoch - 1}], now)
		}
	}

	var wg sync.WaitGroup
	done := make(chan struct{})
	var perTeam [teams]int64
	var mu sync.Mutex
	var badThr []int64
	for w := range workers {
		wg.Go(func() {
			var mine [teams]int64
			for i := range checks {
				k := (w + i) % teams
				d := l.Check(names[k], 1)
				mine[k]++
				if !allowedThr[d.Threshold] {
					mu.Lock()
					badThr = append(badThr, d.Threshold)
					mu.Unlock()
				}
			}
			mu.Lock()
			for k := range mine {
				perTeam[k] += mine[k]
			}
			mu.Unlock()
		})
	}
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		var sw Sweep
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			now := clk.Now()
			if now.Sub(start) < 20*time.Second {
				now = clk.Advance(100 * time.Millisecond)
			}
			collect(now, &sw)
			var ov map[string]int64
			switch i % 3 {
			case 1:
				ov = map[string]int64{names[0]: 1_000, names[1]: 50_000}
			case 2:
				ov = map[string]int64{names[0]: 50_000}
			}
			if err := l.SetOverrides(ov); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-tickDone

	var sw Sweep
	collect(clk.Now(), &sw)
	if stale != 0 {
		t.Errorf("stale = %d, want 0", stale)
	}
	if total != workers*checks {
		t.Errorf("counts over %d sweeps = %d, want %d (lost or duplicated records)", sweeps, total, workers*checks)
	}
	got := map[string]int64{}
	for k, n := range store {
		got[k.team] += n
	}
	for k, name := range names {
		if got[name] != perTeam[k] {
			t.Errorf("%s: counted %d, checked %d", name, got[name], perTeam[k])
		}
	}
	if len(badThr) > 0 {
		t.Errorf("checks saw thresholds outside every override set: %v", badThr[:min(5, len(badThr))])
	}
	if l.Len() != teams {
		t.Errorf("Len() = %d, want %d", l.Len(), teams)
	}
	t.Logf("%d sweeps", sweeps)
}

func TestCheckAllocatesNothingForCachedTeam(t *testing.T) {
	for _, mode := range []Mode{Divert, Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Threshold: 1000, Mode: mode})
			l.CheckAt(t0, "a-team-with-a-longer-name-than-sixteen-bytes", 1)
			l.CheckAt(t0, "b", 1)
			if n := testing.AllocsPerRun(1000, func() {
				l.CheckAt(t0, "a-team-with-a-longer-name-than-sixteen-bytes", 1)
				l.CheckAt(t0, "b", 1)
			}); n != 0 {
				t.Errorf("CheckAt allocs = %v, want 0", n)
			}
			// The team key may alias a reused buffer.
			buf := []byte("b")
			if n := testing.AllocsPerRun(1000, func() {
				l.CheckAt(t0, string(buf), 1) // converted in the call: the compiler need not copy
			}); n != 0 {
				t.Errorf("CheckAt(string(buf)) allocs = %v, want 0", n)
			}
			if n := testing.AllocsPerRun(1000, func() { l.Check("b", 1) }); n != 0 {
				t.Errorf("Check allocs = %v, want 0", n)
			}
		})
	}
}

// The cache keeps its own copy of a team's name: the caller's bytes may be reused.
func TestTeamKeyCopied(t *testing.T) {
	l, _, _ := newTest(t, Config{Threshold: 1000, ColdWriteInterval: -1})
	for _, n := range []int{1, 16, 17, 32, 48, 64, 65, 200} {
		buf := []byte(strings.Repeat("x", n))
		team := string(buf) // stays valid
		l.CheckAt(t0, unsafeString(buf), 3)
		for i := range buf {
			buf[i] = 'y'
		}
		if !cached(l, team) {
			t.Errorf("len %d: team not found after the caller's buffer changed", n)
		}
		sw := sweep(t, l, t0)
		if want := []Count{{team, l.Epoch(t0), 3}}; !slices.Equal(sw.Counts, want) {
			t.Errorf("len %d: counts %+v, want %+v", n, sw.Counts, want)
		}
	}
}

// unsafeString views b as a string without copying, as a consumer handing a record's bytes
// to the check does.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// TestStripeSpreadsNeighbouringStacks guards the decision counters' striping: goroutines
// started together get stacks next to each other, as small as 2 KiB, and must land on
// distinct stripes, or two cores write one line on every check.
func TestStripeSpreadsNeighbouringStacks(t *testing.T) {
	const unit = 2 << 10 // the smallest goroutine stack
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		base := uintptr(rng.Uint64N(1<<47)) &^ (unit - 1)
		var seen [decisionStripes]bool
		for k := range 32 { // 64 KiB of neighbouring 2 KiB stacks
			s := stripeOf(base + uintptr(k)*unit + uintptr(rng.IntN(unit)))
			if s >= decisionStripes {
				t.Fatalf("stripeOf = %d, want < %d", s, decisionStripes)
			}
			if seen[s] {
				t.Fatalf("stacks %d KiB apart from %#x share stripe %d", k*2, base, s)
			}
			seen[s] = true
		}
	}
}

// A check counting n ≥ 2^47 records set the moved bit of its own live entry's unsent word
// (n << epochTagBits reached bit 63), and the team's next check looped in recount for
// good: every insert returned the same live entry, whose word said moved. A check's n is
// capped at MaxThreshold, which decides the same.
func TestCheckHugeNReturns(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000})
	done := make(chan Decision, 1)
	go func() {
		l.CheckAt(t0, "team", 1<<47)
		done <- l.CheckAt(t0, "team", 1)
	}()
	select {
	case d := <-done:
		if !d.Limited {
			t.Errorf("a team at 2^47 of a threshold of 1000 not limited: %+v", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a check after CheckAt(n = 2^47) did not return in 30 s")
	}
}

// TestClockJumps: counts left unswept across a jump of the wall clock. A jump forward
// further than the 16-bit epoch tag reaches (a suspend, a paused VM, a frozen container)
// leaves counts whose tag no longer tells their epoch: they are stale, not counts of a
// window to come. A step back (NTP) leaves counts of windows later than the clock's
// now: they are records admitted a moment ago, counted in the current window rather than
// lost to the slot's next check or written to a window that has not come.
func TestClockJumps(t *testing.T) {
	const win = time.Minute
	for _, gap := range []int64{32768, 40000, 65534} {
		t.Run(fmt.Sprintf("forward %d windows, swept", gap), func(t *testing.T) {
			l, _, _ := newTest(t, Config{Window: win, Threshold: 1000})
			l.CheckAt(t0, "a", 4)
			sw := sweep(t, l, t0.Add(time.Duration(gap)*win+time.Second))
			if len(sw.Counts) != 0 || sw.Stale != 4 {
				t.Errorf("counts %+v, stale %d; want none and 4 stale", sw.Counts, sw.Stale)
			}
			if got := l.CheckAt(t0.Add(time.Duration(gap)*win+time.Second), "a", 0).Level; got != 0 {
				t.Errorf("level = %v, want 0", got)
			}
		})
	}
	t.Run("forward 40000 windows, a check first", func(t *testing.T) {
		l, _, reg := newTest(t, Config{Window: win, Threshold: 1000})
		l.CheckAt(t0, "a", 4)
		now := t0.Add(40000*win + time.Second) // the same slot's parity
		l.CheckAt(now, "a", 5)
		sw := sweep(t, l, now)
		if want := []Count{{"a", l.Epoch(now), 5}}; !slices.Equal(sw.Counts, want) {
			t.Errorf("counts = %+v, want %+v", sw.Counts, want)
		}
		if got := metricValue(t, reg, "gate_limiter_displaced_counts_total", nil); got != 4 {
			t.Errorf("displaced = %v, want 4", got)
		}
	})
	t.Run("back two windows, a check first", func(t *testing.T) {
		l, _, reg := newTest(t, Config{Window: win, Threshold: 1000})
		e := l.Epoch(t0)
		l.CheckAt(at(2*win), "a", 5) // e+2, the clock ahead
		l.CheckAt(t0, "a", 4)        // e, stepped back: the same slot
		sw := sweep(t, l, at(time.Second))
		if want := []Count{{"a", e, 9}}; !slices.Equal(sw.Counts, want) {
			t.Errorf("counts = %+v, want %+v", sw.Counts, want)
		}
		if sw.Stale != 0 {
			t.Errorf("stale = %d, want 0", sw.Stale)
		}
		if got := metricValue(t, reg, "gate_limiter_displaced_counts_total", nil); got != 0 {
			t.Errorf("displaced = %v, want 0", got)
		}
		if got := l.CheckAt(at(time.Second), "a", 0).Level; got != 9 {
			t.Errorf("level = %v, want 9", got)
		}
	})
	t.Run("back three windows, swept first", func(t *testing.T) {
		l, _, _ := newTest(t, Config{Window: win, Threshold: 1000})
		e := l.Epoch(t0)
		l.CheckAt(at(3*win), "a", 5) // e+3, the clock ahead
		sw := sweep(t, l, at(time.Second))
		if want := []Count{{"a", e, 5}}; !slices.Equal(sw.Counts, want) || sw.Stale != 0 {
			t.Errorf("counts = %+v, stale %d; want %+v, none stale", sw.Counts, sw.Stale, want)
		}
	})
}

// TestReadDueAfterClockStepBack: a team whose view was read at a time the clock has
// stepped back from since is due for a read. Its view ages out by the time since the read,
// which the clock no longer tells: a team read near its limit would otherwise keep that
// level, and stay limited, until the clock caught up with the read (unless read as hot).
func TestReadDueAfterClockStepBack(t *testing.T) {
	f := false
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 600, HotEveryTick: &f})
	establish(t, l, at(time.Hour), "a", 600) // limited, Hot
	back := at(time.Second)
	if d := l.CheckAt(back, "a", 0); d.Level != 600 {
		t.Fatalf("right after the step back: %+v, want level 600 (no read yet)", d)
	}
	sw := sweep(t, l, back)
	r := findRead(sw, "a")
	if r == nil {
		t.Fatalf("no read planned for a team whose view was read an hour ahead of the clock")
	}
	l.ApplyRead(r, 0, 0, back)
	if d := l.CheckAt(back, "a", 0); d.Level != 0 {
		t.Errorf("after the read: %+v, want level 0", d)
	}
}

// A capacity under the shards' number bounds the whole cache, not each shard: GATE_CACHE_CAPACITY
// once said such a capacity may hold up to about 256 teams, and a chart alert was then set
// against 256 at least, which a cache of 100 never reaches.
func TestSmallCapacityHoldsItsCapacity(t *testing.T) {
	for _, capacity := range []int{1, 10, 100, 300} {
		l, err := New(Config{Threshold: 1000, Capacity: capacity}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5000 {
			l.Check(fmt.Sprint("team-", i), 1)
		}
		if n := l.Len(); n > capacity {
			t.Errorf("capacity %d holds %d teams", capacity, n)
		}
	}
}

// A full cache whose keys are all seen within the same second (a capacity below the keys
// a second brings: GATE_CACHE_CAPACITY=10 beside the demo's hundreds of teams) chose
// its victim among equally recent keys by where its sample began: a team at 3 × its
// limit was evicted, its level with it, every few records, and a review's gate limited
// none of its 60,000 records. Among keys seen in the same second the one with the lowest
// level goes: the hot team keeps its level and is limited once over, as with a cache
// that holds it.
func TestCapacityKeepsTheHotKeyOfASecond(t *testing.T) {
	l, _, _ := newTest(t, Config{Threshold: 100, Capacity: 10})
	limited := 0
	for i := range 3000 {
		if i%3 == 0 {
			if l.Check("hot", 1).Limited {
				limited++
			}
			continue
		}
		l.Check(fmt.Sprintf("cold-%d", i), 1) // a team of one record, all in one second
	}
	// 1,000 records of the hot team at a threshold of 100: all but the first 100 or so
	// over, on the clock that never moved.
	if limited < 800 {
		t.Errorf("the hot team was limited %d times of 1,000 at a threshold of 100, want 800 or more: evicted with its level among keys of one second", limited)
	}
	if !cached(l, "hot") {
		t.Error("the hot team is not cached")
	}
}
