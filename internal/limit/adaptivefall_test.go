package limit

import (
	"testing"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveBusinessDayCloseNotASpike: a team at 2,000 records a minute from 08:00 to
// 18:00 UTC and 100 at night, for days, closes at 18:00 as every day: in the first seconds
// of 18:00 it is at its usual volume and is not diverted. The sliding count there is still
// the 17:59 window's 2,000, and 18:00's own learned threshold is 4 × the night's 100:
// judged by it, every business-day team whose volume falls by more than the factor on an
// hour was diverted for most of the minute after it closed, and logged a spike, every day.
func TestAdaptiveBusinessDayCloseNotASpike(t *testing.T) {
	for _, mode := range []Mode{Cap, Divert} {
		t.Run(mode.String(), func(t *testing.T) {
			l := adaptiveLimiter(t, Config{Mode: mode})
			c := l.adapt.cfg
			close := adaptT0.Add(10 * time.Hour) // 18:00 UTC
			ec := l.Epoch(close)
			if h := (ec % 1440) / 60; h != 18 {
				t.Fatalf("close is at hour %d, want 18", h)
			}
			usual := func(e int64) float64 {
				if m := ((e % 1440) + 1440) % 1440; m >= 8*60 && m < 18*60 {
					return 2000
				}
				return 100
			}
			var p spike.Profile
			for e := ec - 8*1440; e < ec-1; e++ {
				c.Fold(&p, e, usual(e))
			}
			at := close.Add(2 * time.Second)
			l.CheckAt(at, "t", 1)
			var sw Sweep
			l.Sweep(at, &sw)
			for i := range sw.Reads {
				r := &sw.Reads[i]
				if r.Team != "t" {
					continue
				}
				l.ApplyRead(r, 1, 2000, at) // the fleet's counts: 17:59's 2,000, 18:00's first
				l.ApplyProfile(r, p, true, 0, at)
			}
			own, _ := c.Threshold(&p, ec+1)
			d := l.CheckAt(at, "t", 1)
			if d.Limited {
				t.Errorf("at 18:00:02, a team at its usual volume after its business day: limited at threshold %d (18:01's %.0f)", d.Threshold, own)
			}
			l.Sweep(at, &sw)
			if len(sw.Spikes) != 0 {
				t.Errorf("spikes %+v at the close of the business day, want none", sw.Spikes)
			}
			// From 18:01 on, the night's threshold: 17:59's count has left the sliding one.
			next := close.Add(time.Minute + 2*time.Second)
			l.CheckAt(next, "t", 1)
			l.Sweep(next, &sw)
			if d := l.CheckAt(next, "t", 0); float64(d.Threshold) > own+1 {
				t.Errorf("at 18:01:02: threshold %d, want the night's %.0f", d.Threshold, own)
			}
		})
	}
}
