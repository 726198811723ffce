package spike

import "testing"

// TestFoldRelearnsWithinMaxSpike: a team folded every window (Fold, each window's result
// applying from the next) that steps up for good to 20 × its volume is diverted from the
// step for MaxSpike at most: the window MaxSpike after the step's first is accepted.
func TestFoldRelearnsWithinMaxSpike(t *testing.T) {
	c := cfg(t)
	maxW := int64(c.MaxSpike / c.Window)
	var p Profile
	step := int64(3*1440 + 14*60)
	over, first := int64(0), int64(-1)
	for e := int64(0); e < step+2*maxW; e++ {
		v := usual(1000, 0.3, 0, e)
		if e >= step {
			v *= 20
		}
		if thr, ok := c.Threshold(&p, e); ok && v >= thr && e >= step {
			over++
			if first < 0 {
				first = e
			}
		}
		c.Fold(&p, e, v)
	}
	if first != step {
		t.Fatalf("the step's first window over the threshold at %d, want %d", first, step)
	}
	if over > maxW {
		t.Errorf("a lasting step to 20 ×: %d windows over the threshold, want at most MaxSpike's %d (Relearned at %d, %d after the step)", over, maxW, p.Relearned, p.Relearned-step)
	}
}

// TestFoldSpanOfOneIsFold: FoldSpan with a span of 1 is Fold, as its doc says, in a
// lasting step up too: the spike is re-learned at the same window, and the profiles agree.
func TestFoldSpanOfOneIsFold(t *testing.T) {
	c := cfg(t)
	var a, b Profile
	step := int64(3*1440 + 14*60)
	for e := int64(0); e < step+int64(2*c.MaxSpike/c.Window); e++ {
		v := usual(1000, 0.3, 0, e)
		if e >= step {
			v *= 20
		}
		c.Fold(&a, e, v)
		c.FoldSpan(&b, e, v, 1)
	}
	if a.Relearned != b.Relearned || a != b {
		t.Errorf("FoldSpan(span 1) re-learned the step at %d after it, Fold at %d: want the same profile", b.Relearned-step, a.Relearned-step)
	}
}
