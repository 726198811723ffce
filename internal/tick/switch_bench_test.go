package tick

import (
	"cmp"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// The divert-hold scenarios (issue 24): one team in divert mode, threshold 3,000 per 10 s,
// an input topic of 4 partitions whose records go round robin, each partition owned by one
// of n gates, every gate ticking each second against one real redis-server on a fake clock.
// A switch is a change of topic (accepted ↔ overflow) between two consecutive records of
// one partition, in offset order: a point where a person's events can be reordered
// downstream. Switches are summed over the partitions.
const (
	swThreshold  = 3000
	swWindow     = 10 * time.Second
	swPartitions = 4
)

// swRun is one scenario's fleet and what it saw.
type swRun struct {
	tb    testing.TB
	clk   *clock.Fake
	gates []*gate
	now   time.Time
	acc   float64
	next  int               // round robin over the partitions
	last  [swPartitions]int // per partition: 0 none yet, 1 accepted, 2 overflow
	sw    int               // switches, all partitions
	div   int               // records diverted
	log   []time.Time       // offered records in the exact sliding window
	team  string
}

func newSwRun(tb testing.TB, srv *redistest.Server, n int, hold bool, team string) *swRun {
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: swWindow, Threshold: swThreshold, Mode: limit.Divert, SyncInterval: swWindow / 4}
	if !hold {
		lc.DivertHold, lc.DivertRelease = -1, 1 // divert as before holds
	}
	r := &swRun{tb: tb, clk: clk, now: epochStart, team: team}
	for range n {
		r.gates = append(r.gates, newGate(tb, clk, lc, Config{TickInterval: time.Second}, srv))
	}
	return r
}

// second offers one second of traffic at x × the limit, spread evenly, then ticks every
// gate. It returns the exact sliding-window count at the second's end.
func (r *swRun) second(x float64) int {
	r.acc += x * swThreshold * float64(time.Second) / float64(swWindow)
	k := int(r.acc)
	r.acc -= float64(k)
	for j := range k {
		at := r.now.Add(time.Duration(j) * time.Second / time.Duration(k))
		i := 0
		for i < len(r.log) && !r.log[i].After(at.Add(-swWindow)) {
			i++
		}
		r.log = append(r.log[i:], at)
		p := r.next % swPartitions
		r.next++
		d := r.gates[p%len(r.gates)].l.CheckAt(at, r.team, 1)
		state := 1
		if d.Limited {
			state = 2
			r.div++
		}
		if r.last[p] != 0 && r.last[p] != state {
			r.sw++
		}
		r.last[p] = state
	}
	r.now = r.now.Add(time.Second)
	r.clk.Set(r.now)
	for _, g := range r.gates {
		g.tk.WritePhase(r.tb.Context()) // as Run ticks: every gate writes, then every gate reads
	}
	for _, g := range r.gates {
		g.tk.ReadPhase(r.tb.Context())
	}
	return len(r.log)
}

// held reports whether every gate, or any, holds the team now.
func (r *swRun) held() (all, any bool) {
	all = true
	for _, g := range r.gates {
		d := g.l.CheckAt(r.now, r.team, 0)
		all, any = all && d.Limited, any || d.Limited
	}
	return all, any
}

// BenchmarkDivertSwitches measures how often a team in divert mode switches topics
// (issue 24), with holds (GATE_DIVERT_HOLD one window, GATE_DIVERT_RELEASE 0.8: "ours")
// and without ("baseline", the divert before holds), for 1, 2 and 4 gates:
//
//   - switches_per_min_swing_nN: a minute swinging around the limit, 1.33 × for 3 s then
//     0.67 × for 3 s;
//   - switches_steady_nN: a minute steady at 1.2 ×;
//   - diverted_x0.8_nN: records diverted in a minute at 0.8 × (none, or false overflow);
//   - release_after_calm_s_nN: after 20 s at 2 ×, traffic falls to 0.3 ×: seconds from
//     the exact sliding-window count falling under the release level (under the threshold
//     for the baseline) to the last gate releasing the team; release_spread_s_nN, from the
//     first gate releasing it to the last.
//
// A simulation on a fake clock: run it with -benchtime 1x; any other benchtime skips it.
func BenchmarkDivertSwitches(b *testing.B) {
	if f := flag.Lookup("test.benchtime"); f == nil || f.Value.String() != "1x" {
		b.Skip("a simulation on a fake clock: run with -benchtime 1x")
	}
	srv := redistest.Start(b)
	for _, variant := range []string{"ours", "baseline"} {
		b.Run(variant, func(b *testing.B) {
			var m map[string]float64
			for b.Loop() {
				m = divertSwitches(b, srv, variant == "ours")
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, cmp.Compare)
			for _, k := range keys {
				b.ReportMetric(m[k], k)
			}
		})
	}
}

func divertSwitches(tb testing.TB, srv *redistest.Server, hold bool) map[string]float64 {
	m := map[string]float64{}
	scenario := 0
	run := func(n int) *swRun {
		scenario++
		return newSwRun(tb, srv, n, hold, fmt.Sprintf("team-%v-%d", hold, scenario))
	}
	for _, n := range []int{1, 2, 4} {
		r := run(n)
		for s := range 60 {
			x := 1.33
			if s%6 >= 3 {
				x = 0.67
			}
			r.second(x)
		}
		m[fmt.Sprintf("switches_per_min_swing_n%d", n)] = float64(r.sw)

		r = run(n)
		for range 60 {
			r.second(1.2)
		}
		m[fmt.Sprintf("switches_steady_n%d", n)] = float64(r.sw)

		r = run(n)
		for range 60 {
			r.second(0.8)
		}
		m[fmt.Sprintf("diverted_x0.8_n%d", n)] = float64(r.div)

		r = run(n)
		for range 20 {
			r.second(2)
		}
		release := 0.8
		if !hold {
			release = 1
		}
		var calm, first, last time.Time
		for range 60 {
			count := r.second(0.3)
			if calm.IsZero() && float64(count) < release*swThreshold {
				calm = r.now
			}
			all, any := r.held()
			if first.IsZero() && !all {
				first = r.now
			}
			if last.IsZero() && !any {
				last = r.now
			}
		}
		if calm.IsZero() || last.IsZero() {
			tb.Fatalf("%d gates, hold %v: the spike never calmed (%v) or was never released (%v)", n, hold, calm, last)
		}
		m[fmt.Sprintf("release_after_calm_s_n%d", n)] = last.Sub(calm).Seconds()
		m[fmt.Sprintf("release_spread_s_n%d", n)] = last.Sub(first).Seconds()
	}
	return m
}
