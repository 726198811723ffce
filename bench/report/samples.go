package main

import (
	"math"
	"slices"
)

// Samples holds every value seen per benchmark and unit, in input order (-count=N gives N).
type Samples map[string]map[string][]float64

func (s Samples) add(name, unit string, v float64) {
	if s[name] == nil {
		s[name] = map[string][]float64{}
	}
	s[name][unit] = append(s[name][unit], v)
}

// Mean is the mean of the values for name and unit; ok is false when there are none.
func (s Samples) Mean(name, unit string) (float64, bool) {
	vs := s[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs)), true
}

// notFinite is the first of vs that is NaN or infinite, if any. Median and Farthest return
// it: a run that printed no number makes the figure none, as it does a mean (Measure
// leaves it out of the figures and make bench fails on it), where sorting or comparing
// distances skipped it and the other runs' figure stood.
func notFinite(vs []float64) (float64, bool) {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return v, true
		}
	}
	return 0, false
}

// Farthest is the value for name and unit farthest from v (the first of two as far): a
// "worst window" over several runs is the worst run's, which a mean of the runs let a run
// on the other side of v hide. ok is false when there are none.
func (s Samples) Farthest(name, unit string, v float64) (float64, bool) {
	vs := s[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	if x, ok := notFinite(vs); ok {
		return x, true
	}
	far := vs[0]
	for _, x := range vs[1:] {
		if math.Abs(x-v) > math.Abs(far-v) {
			far = x
		}
	}
	return far, true
}

// putRatio puts the mean of unit over benchmark a under keyA and over b under keyB (an
// empty key: not put), and a ÷ b under ratio, each when what it needs was measured.
func (s Samples) putRatio(out map[string]float64, unit, a, keyA, b, keyB, ratio string) {
	va, okA := s.Mean(a, unit)
	vb, okB := s.Mean(b, unit)
	if okA && keyA != "" {
		out[keyA] = va
	}
	if okB && keyB != "" {
		out[keyB] = vb
	}
	if okA && okB && vb > 0 && ratio != "" {
		out[ratio] = va / vb
	}
}

// Median is the median of the values for name and unit (the mean of the middle two for
// an even count); ok is false when there are none. The hot path's figures use it: they
// come from several interleaved runs on a noisy machine, where one slow run moves a mean.
func (s Samples) Median(name, unit string) (float64, bool) {
	vs := slices.Clone(s[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	if x, ok := notFinite(vs); ok {
		return x, true
	}
	slices.Sort(vs)
	m := len(vs) / 2
	if len(vs)%2 == 0 {
		return (vs[m-1] + vs[m]) / 2, true
	}
	return vs[m], true
}

// medianRatio is the median of unit over benchmark a ÷ its median over b; ok is false
// when either was not measured (or b's median is not positive).
func (s Samples) medianRatio(a, b, unit string) (float64, bool) {
	va, okA := s.Median(a, unit)
	vb, okB := s.Median(b, unit)
	if !okA || !okB || vb <= 0 {
		return 0, false
	}
	return va / vb, true
}

// worstRatio pairs the values of a and b for unit in run order (run i of a with run i of
// b) and returns the worst of a ÷ b: the least, or with higher the greatest.
func worstRatio(s Samples, a, b, unit string, higher bool) (float64, bool) {
	as, bs := s[a][unit], s[b][unit]
	n := min(len(as), len(bs))
	worst, ok := 0.0, false
	for i := range n {
		if bs[i] <= 0 {
			continue
		}
		r := as[i] / bs[i]
		if !ok || higher && r > worst || !higher && r < worst {
			worst, ok = r, true
		}
	}
	return worst, ok
}
