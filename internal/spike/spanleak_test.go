package spike

import (
	"testing"
	"time"
)

// TestFoldSpanTakesNoRateIntoAnUnlearnedHour: a team first seen at 07:50, quiet (200 a
// minute) but from 08:00 to 20:00 (4,000). Folded every 20 minutes, its second fold's
// span reaches back into hour 7, whose season nothing had learned (its first window set
// the level alone), and took those windows at the busy hour's rate: hour 7's season
// learned the busy volume, its threshold there 2.7 × what its volume makes it the next
// day. A span's windows in an hour not learned yet, or observed in one, are not learned
// from: their volume relative to the observed window's is not known.
func TestFoldSpanTakesNoRateIntoAnUnlearnedHour(t *testing.T) {
	c := cfg(t)
	start := int64(7*60 + 50)
	usualOf := func(e int64) float64 {
		if e < start {
			return 0
		}
		if m := e % 1440; m >= 8*60 && m < 20*60 {
			return 4000
		}
		return 200
	}
	for _, days := range []int64{2, 4, 7} {
		end := days*1440 + 6*60 // 06:00
		run := runShape(t, c, end, usualOf)
		for _, m := range []int64{6*60 + 30, 7*60 + 10, 7*60 + 30} {
			e := days*1440 + m
			thr, ok := c.Threshold(&run.p, e)
			if r := thr / (c.Factor * usualOf(e)); !ok || r > 2 {
				t.Errorf("day %d, %s: threshold %.0f, %.1f × the factor times the usual volume (learned %v), want at most 2 ×", days, time.Duration(m)*time.Minute, thr, r, ok)
			}
		}
	}
}

// TestSpanSkippingAfterAGapEndsTheSpike: a team in a spike, then nothing folded for hours
// (silence), then a fold whose span starts in an hour not learned yet: the gap ends the
// spike, as any gap does, and a spike seen at the fold is a new one, not the one before
// the gap that would soon have lasted MaxSpike and re-learned the team at it.
func TestSpanSkippingAfterAGapEndsTheSpike(t *testing.T) {
	c := cfg(t)
	var p Profile
	p.Windows, p.Level, p.Recent = 10*1440, 1000, 1000
	for s := range p.Season {
		if s != 3 {
			p.Season[s] = toF16(1, 0, s)
		}
	}
	last := int64(10*1440 + 1*60) // 01:00
	p.Epoch, p.SpikeFrom = last, last-30
	obs := int64(10*1440 + 4*60 + 5) // 04:05: the span reaches back into hour 3
	c.FoldSpan(&p, obs, 10*1000, 20)
	if p.SpikeFrom <= last || p.Relearned != 0 {
		t.Errorf("spike from window %d, re-learned at %d: want a new spike after the gap (%d to %d), not the one before it lasting MaxSpike", p.SpikeFrom, p.Relearned, last+1, obs-20)
	}
}
