package spike

import (
	"flag"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

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
	spikeVol, spikeDiv       float64 // divert: records in spike windows, and diverted
	excess, excessDiv        float64 // cap: spike records over the usual volume, and diverted
	otherDiv, otherDivCap    float64 // diverted outside spikes (divert, cap)
	calmVol, calmDiv         float64 // teams with no spike: records, diverted (divert)
	peakDiv                  float64 // diverted within an hour of a team's daily peak, outside spikes
	detect                   []float64
	undetected, spikesSeen   int
	calmDivCap, peakDivCap   float64
	spikeDivCap, spikeVolCap float64
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
	}
	if t.nearPeak(e) {
		s.peakDiv += d
		s.peakDivCap += dc
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

// BenchmarkSpikeTrace scores the adaptive threshold against the best single static
// threshold chosen in hindsight (the one diverting spikes best, by F1 of spike volume in
// divert mode, from a grid of 16 over 10 to 10^7 a minute), on the trace above, days 2 to
// 7, both modes. Divert: a window's records go to overflow while the sliding count is at
// or over the threshold; cap: what a window holds over the threshold. Recall is the share
// of spike windows' records diverted (cap: of their excess over the usual volume);
// precision the share of diverted records that were in a spike; false overflow the share
// of spike-free teams' records diverted; peak the records diverted within an hour of a
// team's daily peak, outside spikes; detection the windows from a spike's start to the
// first with ≥ 90% of it diverted (divert), mean over spikes detected. A simulation of
// windows: run it with -benchtime 1x.
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
			var p Profile
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
				thr, learned := c.Threshold(&p, e)
				c.Fold(&p, e, cnt)
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
						adaptive.detect = append(adaptive.detect, float64(e-t.spikes[k].start+1))
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
		sort.Float64s(adaptive.detect)
		var mean float64
		for _, d := range adaptive.detect {
			mean += d
		}
		mean /= math.Max(float64(len(adaptive.detect)), 1)
		b.ReportMetric(ar, "adaptive_spike_recall")
		b.ReportMetric(ap, "adaptive_spike_precision")
		b.ReportMetric(af, "adaptive_false_overflow_share")
		b.ReportMetric(apk, "adaptive_peak_false_overflow")
		b.ReportMetric(mean, "adaptive_detect_windows")
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
