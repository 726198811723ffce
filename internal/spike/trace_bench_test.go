package spike

import (
	"flag"
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// spikeChart is where BenchmarkSpikeTrace draws one spiking team (make bench:
// bench/spike.svg); empty draws nothing.
var spikeChart = flag.String("spike-chart", "", "draw one spiking team's traffic, baseline, threshold and diverted records to this SVG")

// The trace of issue 22: 10,000 teams over 7 days of one-minute windows. Sizes are Zipf
// (the largest ~50,000 records a minute, the smallest ~2); each team has a daily cycle of
// its own amplitude (0–0.7) and peak hour; a tenth grow 50% a week; 3% get one to three
// spikes of 5, 20 or 100 × their usual volume lasting 10 to 120 minutes, from day 2 on
// (day 1 is the history a team needs). Counts are Poisson around the usual volume.
const (
	trTeams   = 10_000
	trDays    = 7
	trWindows = trDays * 1440
)

type trSpike struct {
	start, end int64 // windows [start, end)
	x          float64
}

type trTeam struct {
	mean, amp, peak, growth float64
	spikes                  []trSpike
	seed                    uint64
}

func (t *trTeam) usual(e int64) float64 {
	h := float64(e%1440) / 60
	return t.mean * (1 + t.amp*math.Cos(2*math.Pi*(h-t.peak)/24)) * math.Pow(1+t.growth, float64(e)/(7*1440))
}

// spikeAt is the index of the spike window e is in, or -1.
func (t *trTeam) spikeAt(e int64) int {
	for i, s := range t.spikes {
		if e >= s.start && e < s.end {
			return i
		}
	}
	return -1
}

// nearPeak reports whether window e is within an hour of the team's daily peak.
func (t *trTeam) nearPeak(e int64) bool {
	d := math.Abs(float64(e%1440)/60 - t.peak)
	return math.Min(d, 24-d) <= 1
}

func trTrace() []trTeam {
	r := rand.New(rand.NewPCG(22, 7))
	teams := make([]trTeam, trTeams)
	for i := range teams {
		t := &teams[i]
		t.mean = 50_000 / math.Pow(float64(i+1), 1.1)
		t.amp = 0.7 * r.Float64()
		t.peak = 24 * r.Float64()
		if r.IntN(10) == 0 {
			t.growth = 0.5
		}
		t.seed = r.Uint64()
		if r.IntN(100) < 3 {
			for range 1 + r.IntN(3) {
				start := int64(1440 + r.IntN(trWindows-1440-120))
				t.spikes = append(t.spikes, trSpike{start, start + int64(10+r.IntN(111)), []float64{5, 20, 100}[r.IntN(3)]})
			}
		}
	}
	return teams
}

func poisson(r *rand.Rand, mu float64) float64 {
	if mu > 30 {
		return math.Max(0, math.Round(mu+math.Sqrt(mu)*r.NormFloat64()))
	}
	l, k, p := math.Exp(-mu), 0.0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// diverted is what divert mode sends to overflow of a window of count c after one of
// count prev, at threshold thr: the sliding count prev × (1 − f) + c × f runs over the
// window (f from 0 to 1), and the records arriving while it is at or over thr go.
func divertedDivert(prev, c, thr float64) float64 {
	a, b := prev, c // sliding count at f = 0 and f = 1
	switch {
	case a >= thr && b >= thr:
		return c
	case a < thr && b < thr:
		return 0
	}
	f := (thr - a) / (b - a) // the crossing
	if b >= thr {
		return c * (1 - f)
	}
	return c * f
}

// trScore sums one threshold policy's outcome over the trace.
type trScore struct {
	spikeVol, spikeDiv     float64   // divert: records in spike windows, and diverted
	excess, excessDiv      float64   // cap: spike records over the usual volume, and diverted
	otherDiv, otherDivCap  float64   // diverted outside spikes (divert, cap)
	calmVol, calmDiv       float64   // teams with no spike: records, diverted (divert)
	peakDiv                float64   // teams with no spike: diverted within an hour of their daily peak
	detect, detectVol      []float64 // per spike detected: windows to detect it, its volume
	undetected, spikesSeen int
	calmDivCap, peakDivCap float64
}

func (s *trScore) add(t *trTeam, e int64, prev, c, thr float64, inSpike, spiky bool) {
	d := divertedDivert(prev, c, thr)
	dc := math.Max(0, c-thr)
	if inSpike {
		s.spikeVol += c
		s.spikeDiv += d
		s.excess += math.Max(0, c-t.usual(e))
		s.excessDiv += math.Min(dc, math.Max(0, c-t.usual(e)))
		return
	}
	s.otherDiv += d
	s.otherDivCap += dc
	if !spiky {
		s.calmVol += c
		s.calmDiv += d
		s.calmDivCap += dc
		if t.nearPeak(e) {
			s.peakDiv += d
			s.peakDivCap += dc
		}
	}
}

func (s *trScore) metrics() (recall, precision, falseShare, peak, recallCap, precisionCap, falseShareCap, peakCap float64) {
	recall = s.spikeDiv / s.spikeVol
	precision = s.spikeDiv / math.Max(s.spikeDiv+s.otherDiv, 1)
	falseShare = s.calmDiv / s.calmVol
	recallCap = s.excessDiv / s.excess
	precisionCap = s.excessDiv / math.Max(s.excessDiv+s.otherDivCap, 1)
	falseShareCap = s.calmDivCap / s.calmVol
	return recall, precision, falseShare, s.peakDiv, recallCap, precisionCap, falseShareCap, s.peakDivCap
}

// trLearner learns one team as the gate does (limit's adaptive thresholds): window F is
// final two windows on, so it is folded during window F + 2, and only at the windows
// NextFold names, every FoldPeriod windows (MinFoldEvery to an hour), each fold standing
// for the windows since the last (FoldScheduled). The first fold is the first window with records.
type trLearner struct {
	c      Config
	team   string
	p      Profile
	counts [3]float64 // the counts of the last three windows, by epoch mod 3
}

// observe takes window e's final count, then folds the window two back if it is due.
func (l *trLearner) observe(e int64, cnt float64) {
	l.counts[e%3] = cnt
	f := e - 2
	if f < 0 {
		return
	}
	n := l.counts[f%3]
	switch {
	case l.p.Windows == 0 && n == 0:
		return // nothing to start from yet
	case l.p.Windows == 0:
		l.c.Fold(&l.p, f, n)
	case l.c.NextFold(&l.p, l.team) <= f:
		l.c.FoldScheduled(&l.p, f, n)
	}
}

// BenchmarkSpikeTrace scores the adaptive threshold against the best single static
// threshold chosen in hindsight (the one diverting spikes best, by F1 of spike volume in
// divert mode, from a grid of 16 over 10 to 10^7 a minute), on the trace above, days 2 to
// 7, both modes. Divert: a window's records go to overflow while the sliding count is at
// or over the threshold; cap: what a window holds over the threshold. Recall is the share
// of spike windows' records diverted (cap: of their excess over the usual volume);
// precision the share of diverted records that were in a spike; false overflow the share
// of spike-free teams' records diverted; peak the records diverted within an hour of a
// spike-free team's daily peak; detection the windows from a spike's start to the first
// with ≥ 90% of it diverted (divert), the mean over spikes detected weighed by their
// volume, and the median. Each team is learned as the gate learns it (trLearner). A
// simulation of windows: run it with -benchtime 1x.
func BenchmarkSpikeTrace(b *testing.B) {
	if f := flag.Lookup("test.benchtime"); f == nil || f.Value.String() != "1x" {
		b.Skip("a simulation: run with -benchtime 1x")
	}
	c, err := Config{Window: time.Minute}.WithDefaults()
	if err != nil {
		b.Fatal(err)
	}
	teams := trTrace()
	grid := make([]float64, 16)
	for i := range grid {
		grid[i] = 10 * math.Pow(1e6, float64(i)/float64(len(grid)-1))
	}
	for b.Loop() {
		static := make([]trScore, len(grid))
		var adaptive trScore
		for i := range teams {
			t := &teams[i]
			r := rand.New(rand.NewPCG(t.seed, 1))
			ln := trLearner{c: c, team: strconv.Itoa(i)}
			var prev float64
			detected := make([]bool, len(t.spikes))
			spiky := len(t.spikes) > 0
			for e := int64(0); e < trWindows; e++ {
				mu := t.usual(e)
				k := t.spikeAt(e)
				if k >= 0 {
					mu *= t.spikes[k].x
				}
				cnt := poisson(r, mu)
				thr, learned := c.Threshold(&ln.p, e)
				ln.observe(e, cnt)
				if e >= 1440 {
					if !learned {
						thr = math.Inf(1) // too little history: the static threshold (scored apart)
					}
					adaptive.add(t, e, prev, cnt, thr, k >= 0, spiky)
					for g := range static {
						static[g].add(t, e, prev, cnt, grid[g], k >= 0, spiky)
					}
					if k >= 0 && !detected[k] && divertedDivert(prev, cnt, thr) >= 0.9*cnt {
						detected[k] = true
						s := t.spikes[k]
						adaptive.detect = append(adaptive.detect, float64(e-s.start+1))
						adaptive.detectVol = append(adaptive.detectVol, t.mean*s.x*float64(s.end-s.start))
					}
				}
				prev = cnt
			}
			for k := range t.spikes {
				adaptive.spikesSeen++
				if !detected[k] {
					adaptive.undetected++
				}
			}
		}
		if *spikeChart != "" {
			if err := drawTeam(c, teams, *spikeChart); err != nil {
				b.Fatal(err)
			}
		}
		// The best static threshold, by F1 in divert mode.
		bi, bf := 0, -1.0
		for k := range static {
			r, p, _, _, _, _, _, _ := static[k].metrics()
			if f := 2 * p * r / math.Max(p+r, 1e-12); f > bf {
				bi, bf = k, f
			}
		}
		ar, ap, af, apk, arc, apc, afc, apkc := adaptive.metrics()
		sr, sp, sf, spk, src, spc, sfc, spkc := static[bi].metrics()
		// Detection weighed by each spike's volume: a spike of a team sending a few records
		// a minute, under the floor, matters as little as it weighs.
		var mean, vol float64
		for i, d := range adaptive.detect {
			mean += d * adaptive.detectVol[i]
			vol += adaptive.detectVol[i]
		}
		mean /= math.Max(vol, 1)
		med := append([]float64(nil), adaptive.detect...)
		sort.Float64s(med)
		b.ReportMetric(ar, "adaptive_spike_recall")
		b.ReportMetric(ap, "adaptive_spike_precision")
		b.ReportMetric(af, "adaptive_false_overflow_share")
		b.ReportMetric(apk, "adaptive_peak_false_overflow")
		b.ReportMetric(mean, "adaptive_detect_windows")
		if len(med) > 0 {
			b.ReportMetric(med[len(med)/2], "adaptive_detect_windows_median")
		}
		b.ReportMetric(float64(adaptive.undetected), "adaptive_spikes_undetected")
		b.ReportMetric(float64(adaptive.spikesSeen), "spikes")
		b.ReportMetric(arc, "adaptive_spike_recall_cap")
		b.ReportMetric(apc, "adaptive_spike_precision_cap")
		b.ReportMetric(afc, "adaptive_false_overflow_share_cap")
		b.ReportMetric(apkc, "adaptive_peak_false_overflow_cap")
		b.ReportMetric(sr, "adaptive_spike_recall_static")
		b.ReportMetric(sp, "adaptive_spike_precision_static")
		b.ReportMetric(sf, "adaptive_false_overflow_share_static")
		b.ReportMetric(spk, "adaptive_peak_false_overflow_static")
		b.ReportMetric(src, "adaptive_spike_recall_cap_static")
		b.ReportMetric(spc, "adaptive_spike_precision_cap_static")
		b.ReportMetric(sfc, "adaptive_false_overflow_share_cap_static")
		b.ReportMetric(spkc, "adaptive_peak_false_overflow_cap_static")
		b.ReportMetric(grid[bi], "static_best_threshold_per_min")
	}
}

// drawTeam draws the team with the largest spike of 20 × or more, over the day before its
// spike and the day after, in ten-minute sums: its records, its baseline and threshold,
// and what divert mode sent to overflow.
func drawTeam(c Config, teams []trTeam, path string) error {
	ti, si := -1, -1
	for i := range teams {
		for k, s := range teams[i].spikes {
			if s.x >= 20 && s.start >= 2*1440 && s.start < trWindows-1440 && (ti < 0 || teams[i].mean > teams[ti].mean) {
				ti, si = i, k
			}
		}
	}
	if ti < 0 {
		return fmt.Errorf("no spike of 20 x or more to draw")
	}
	t := &teams[ti]
	sp := t.spikes[si]
	from, to := sp.start-1440, sp.start+1440
	series := make([]plotter.XYs, 4) // records, baseline, threshold, diverted: per 10 min
	r := rand.New(rand.NewPCG(t.seed, 1))
	ln := trLearner{c: c, team: strconv.Itoa(ti)}
	var prev float64
	var sums [4]float64
	for e := int64(0); e < to; e++ {
		mu := t.usual(e)
		if k := t.spikeAt(e); k >= 0 {
			mu *= t.spikes[k].x
		}
		cnt := poisson(r, mu)
		thr, learned := c.Threshold(&ln.p, e)
		base := c.Baseline(&ln.p, e)
		ln.observe(e, cnt)
		if e >= from {
			d := 0.0
			if learned {
				d = divertedDivert(prev, cnt, thr)
			}
			for j, v := range [4]float64{cnt, base, thr, d} {
				sums[j] += v
			}
			if (e-from)%10 == 9 {
				h := float64(e-from-9) / 60
				for j := range sums {
					if sums[j] > 0 {
						series[j] = append(series[j], plotter.XY{X: h, Y: sums[j] / 10})
					}
					sums[j] = 0
				}
			}
		}
		prev = cnt
	}
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("one team (%.0f records/min on average), a %g × spike for %d min", t.mean, sp.x, sp.end-sp.start)
	pl.X.Label.Text = "hours, from a day before the spike"
	pl.Y.Label.Text = "records per minute (10-minute means)"
	pl.Y.Scale = plot.LogScale{}
	pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Add(plotter.NewGrid())
	styles := []struct {
		label  string
		col    color.RGBA
		dashed bool
	}{
		{"records", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, false},
		{"baseline", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, false},
		{"threshold (4 × baseline)", color.RGBA{R: 0x40, G: 0x40, B: 0x40, A: 0xff}, true},
		{"diverted", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, false},
	}
	for j, st := range styles {
		if len(series[j]) == 0 {
			continue
		}
		l, err := plotter.NewLine(series[j])
		if err != nil {
			return fmt.Errorf("plotting %s: %w", st.label, err)
		}
		l.Color, l.Width = st.col, vg.Points(1.2)
		if st.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		pl.Add(l)
		pl.Legend.Add(st.label, l)
	}
	if err := pl.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return nil
}
