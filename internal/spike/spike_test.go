package spike

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// team is a synthetic team: its usual volume per one-minute window at epoch e (minutes
// since a midnight UTC), with a daily cycle of amplitude amp peaking at 20:00 and growth
// per week.
func usual(mean, amp, growthPerWeek float64, e int64) float64 {
	h := float64(e%1440) / 60
	return mean * (1 + amp*math.Cos(2*math.Pi*(h-20)/24)) * math.Pow(1+growthPerWeek, float64(e)/(7*1440))
}

func cfg(t *testing.T) Config {
	t.Helper()
	c, err := Config{Window: time.Minute}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProfileAtMost128Bytes: the profile the fleet shares stays within 128 bytes, in
// memory and in Redis.
func TestProfileAtMost128Bytes(t *testing.T) {
	if n := unsafe.Sizeof(Profile{}); n > 128 || ProfileSize > 128 {
		t.Errorf("Profile is %d bytes in memory, %d in binary; want at most 128", n, ProfileSize)
	}
}

// TestDailyPeakIsNotASpike: a team whose evening peak is 4.5 × its night trough (amplitude
// 0.64) and which grows 50% a week is never over its learned threshold, and its threshold
// at the peak stays above the peak.
func TestDailyPeakIsNotASpike(t *testing.T) {
	c := cfg(t)
	var p Profile
	for e := int64(0); e < 7*1440; e++ {
		v := usual(1000, 0.64, 0.5, e)
		if c.Fold(&p, e, v) {
			t.Fatalf("minute %d (%.1f h into day %d): %.0f taken for a spike (baseline %.0f)", e, float64(e%1440)/60, e/1440, v, c.Baseline(&p, e))
		}
		thr, ok := c.Threshold(&p, e+1)
		if e > 2*1440 && !ok {
			t.Fatalf("minute %d, past two days of history: no learned threshold", e+1)
		}
		if ok && e > 2*1440 && thr < 2*usual(1000, 0.64, 0.5, e+1) {
			t.Fatalf("minute %d: threshold %.0f under twice the usual %.0f", e+1, thr, usual(1000, 0.64, 0.5, e+1))
		}
	}
	if _, ok := c.Threshold(&Profile{Windows: 1439}, 0); ok {
		t.Error("a team with 1439 minutes of history has a learned threshold; want the static one until a day")
	}
}

// TestSpikeIsCaughtAndNotLearned: on day 3, a team jumps to 5 × its usual volume for two
// hours: every minute of it is over the threshold, and afterwards its baseline is within 5%
// of that of the same team without the spike.
func TestSpikeIsCaughtAndNotLearned(t *testing.T) {
	c := cfg(t)
	var p, control Profile
	start := int64(2*1440 + 14*60)
	for e := int64(0); e < 3*1440; e++ {
		v := usual(500, 0.5, 0, e)
		c.Fold(&control, e, v)
		inSpike := e >= start && e < start+120
		if inSpike {
			v *= 5
		}
		if got := c.Fold(&p, e, v); got != inSpike {
			t.Fatalf("minute %d: spike %v, want %v (count %.0f, baseline %.0f)", e, got, inSpike, v, c.Baseline(&p, e))
		}
	}
	for _, e := range []int64{start, 3*1440 + 20*60} {
		if a, b := c.Baseline(&p, e), c.Baseline(&control, e); math.Abs(a/b-1) > 0.05 {
			t.Errorf("baseline for %.0f h after the spike %.0f, without it %.0f: pulled by the spike", float64(e%1440)/60, a, b)
		}
	}
}

// TestFoldDeterministic: two gates folding the same counts hold the same profile; a window
// folded twice, or out of order, is ignored; skipped windows are not learned from.
func TestFoldDeterministic(t *testing.T) {
	c := cfg(t)
	var a, b Profile
	for e := int64(0); e < 2000; e++ {
		v := usual(300, 0.3, 0, e)
		c.Fold(&a, e, v)
		c.Fold(&b, e, v)
		c.Fold(&b, e, 1e9) // folded again: ignored
	}
	if a != b {
		t.Errorf("profiles differ after the same counts: %+v vs %+v", a, b)
	}
	lvl := a.Level
	c.Fold(&a, 2000+120, 0) // two silent hours, and a silent window folded
	if a.Level != lvl || a.Epoch != 2000+120 {
		t.Errorf("level %v at epoch %d after two silent hours, %v before: want it kept, the epoch moved on", a.Level, a.Epoch, lvl)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Window: 7 * time.Minute},
		{Window: time.Minute, Factor: 1},
		{Window: time.Minute, Clip: 5},
		{Window: time.Minute, Floor: 10, Ceiling: 5},
		{Window: time.Minute, SeasonHalfLife: time.Hour},
	} {
		if _, err := c.WithDefaults(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestProfileBinaryRoundTrip: a learned profile reads back as written, in 64 bytes whose
// first 8 are its epoch; data of another length or with a level that is no count is refused.
func TestProfileBinaryRoundTrip(t *testing.T) {
	c := cfg(t)
	var p Profile
	for e := int64(0); e < 2*1440; e++ {
		c.Fold(&p, e, usual(500, 0.5, 0, e))
	}
	p.Today, p.Yesterday, p.Before, p.Pattern = 1<<3, 1<<4|1<<3, 1<<5, 1<<3 // every field set
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != ProfileSize {
		t.Fatalf("%d bytes, want %d", len(b), ProfileSize)
	}
	if got := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16; got != p.Epoch {
		t.Errorf("first bytes hold %d, want the epoch %d", got, p.Epoch)
	}
	var q Profile
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Errorf("read back %+v, want %+v", q, p)
	}
	for _, bad := range [][]byte{b[:ProfileSize-1], append(b[:ProfileSize:ProfileSize], 0), b[:63], nil} {
		if err := q.UnmarshalBinary(bad); err == nil {
			t.Errorf("%d bytes accepted", len(bad))
		}
	}
	nan := append([]byte(nil), b...)
	nan[12], nan[13], nan[14], nan[15] = 0, 0, 0xc0, 0x7f // NaN
	if err := q.UnmarshalBinary(nan); err == nil {
		t.Error("a NaN level accepted")
	}
	if q != p {
		t.Error("a refused decode changed the profile")
	}
	// The 124-byte form, before daily patterns: all of it kept, no pattern hour.
	var pre Profile
	if err := pre.UnmarshalBinary(b[:PrePatternProfileSize]); err != nil {
		t.Fatalf("the 124-byte form refused: %v", err)
	}
	if want := p; true {
		want.Pattern = 0
		if pre != want {
			t.Errorf("the 124-byte form read as %+v, want %+v", pre, want)
		}
	}
	// The 64-byte form of earlier versions: its epoch, history, level and hours kept.
	var old Profile
	if err := old.UnmarshalBinary(b[:OldProfileSize]); err != nil {
		t.Fatalf("the 64-byte form refused: %v", err)
	}
	if old.Epoch != p.Epoch || old.Windows != p.Windows || old.Level != p.Level || old.Season != p.Season || old.Recent != p.Level {
		t.Errorf("the 64-byte form read as %+v, want the epoch, windows, level and seasons of %+v", old, p)
	}
}

// TestFoldSpanFollowsFold: folding a steady team once every 10 windows (the observed
// window standing for its span) learns the same level as folding every window, within 5%,
// and a span whose observed window is a spike is not learned from.
func TestFoldSpanFollowsFold(t *testing.T) {
	c := cfg(t)
	var every, span Profile
	for e := int64(0); e < 3*1440; e++ {
		v := usual(300, 0.5, 0, e)
		c.Fold(&every, e, v)
		if e%10 == 9 {
			c.FoldSpan(&span, e, v, 10)
		}
	}
	if d := int(every.Windows) - int(span.Windows); d < 0 || d >= 10 { // the first span is its window alone
		t.Errorf("span folds counted %d windows, every-window folds %d", span.Windows, every.Windows)
	}
	for _, e := range []int64{3*1440 + 60, 3*1440 + 20*60} {
		a, b := c.Baseline(&every, e), c.Baseline(&span, e)
		if math.Abs(a-b) > 0.05*a {
			t.Errorf("window %d: baseline %.1f folding every 10th, %.1f folding every window", e, b, a)
		}
	}
	before := span
	if !c.FoldSpan(&span, 3*1440+9, 50*c.Baseline(&span, 3*1440+9), 10) {
		t.Fatal("a 50x window not reported as a spike")
	}
	if span.Level != before.Level {
		t.Errorf("a spike's span moved the level from %v to %v", before.Level, span.Level)
	}
}

// TestFoldScheduledCoversMissedFold: a fold no gate stored is covered by the next one at the
// observed rate, so a steady team's level does not drop; a gap past two periods is silence,
// which is not learned from either.
func TestFoldScheduledCoversMissedFold(t *testing.T) {
	c := cfg(t)
	var steady Profile
	for e := int64(0); e < 2*1440; e++ {
		c.Fold(&steady, e, usual(300, 0, 0, e))
	}
	period := c.FoldPeriod(&steady)
	next := c.NextFold(&steady, "t")
	all, missed, gone := steady, steady, steady
	for f := next; f < next+6*period; f += period {
		c.FoldScheduled(&all, f, 300)
		if f != next+2*period { // this fold was stored by no gate
			c.FoldScheduled(&missed, f, 300)
		}
	}
	c.FoldScheduled(&gone, next+5*period, 300) // nothing for five periods: no gate looked
	if d := math.Abs(float64(missed.Level-all.Level)) / float64(all.Level); d > 0.001 {
		t.Errorf("level %v after a missed fold, %v with every fold: off by %.2f%%, want the period covered at the observed rate", missed.Level, all.Level, 100*d)
	}
	if d := math.Abs(float64(gone.Level-all.Level)) / float64(all.Level); d > 0.001 {
		t.Errorf("level %v after five silent periods, %v with every fold: want the silence not learned", gone.Level, all.Level)
	}
}

// TestThresholdPart: a threshold is constant within each part ThresholdPart names, and a
// neighbouring import hour's reach begins and ends on a part's edge: with one-minute
// windows, the first 22 minutes of an hour (a fold period less the window observed, and
// the fold's lag), the last 19 and the rest; with windows of MinFoldEvery or more, every
// window is observed and an hour is one part. The first window of each part is a part of
// its own, and takes the part before's threshold when higher (the sliding count there
// starts at the window before's count): the window after the reach, and with windows of
// MinFoldEvery or more the first window after the import's hour. A business day's first
// hour, as high as the next, reaches nothing: the hour before it keeps its own threshold.
func TestThresholdPart(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		parts  int
		reach  int64 // windows, at an hour's end
		start  int64 // windows, at an hour's start
	}{{time.Minute, 6, 19, 22}, {10 * time.Second, 6, 119, 122}, {10 * time.Minute, 5, 1, 3}, {30 * time.Minute, 2, 0, 0}, {time.Hour, 1, 0, 0}} {
		c, err := Config{Window: tc.window}.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		// Hour 6 holds an import; hours 5 and 7 do not.
		var p Profile
		p.Level, p.Windows = 100, 1<<20
		for s := range p.Season {
			p.Season[s] = toF16(1, 0, s)
		}
		p.Season[6] = toF16(20, 0, 6)
		perHour := int64(time.Hour / tc.window)
		seen := map[int64]float64{}
		for e := 5 * perHour; e < 8*perHour; e++ {
			thr, _ := c.Threshold(&p, e)
			part := c.ThresholdPart(e)
			if prev, ok := seen[part]; ok && prev != thr {
				t.Errorf("window %s: part %d has thresholds %g and %g", tc.window, part, prev, thr)
			}
			seen[part] = thr
		}
		if len(seen) != 3*tc.parts {
			t.Errorf("window %s: %d parts over three hours, want %d", tc.window, len(seen), 3*tc.parts)
		}
		own, imp := 4*100.0, 4*100.0*20
		at := func(e int64) float64 { thr, _ := c.Threshold(&p, e); return thr }
		if want := map[bool]float64{true: imp, false: own}[tc.reach > 0]; math.Abs(at(6*perHour-1)-want) > 0.5 {
			t.Errorf("window %s: window %d before the import's hour has threshold %g, want %g", tc.window, 6*perHour-1, at(6*perHour-1), want)
		}
		// After it, the import's threshold: reached, or (windows of MinFoldEvery or more)
		// as the window after the import's hour, whose sliding count starts at its count.
		if e := 7 * perHour; math.Abs(at(e)-imp) > 0.5 {
			t.Errorf("window %s: window %d after the import's hour has threshold %g, want the import's %g", tc.window, e, at(e), imp)
		}
		if e := 7*perHour + 1; tc.reach == 0 && math.Abs(at(e)-own) > 0.5 {
			t.Errorf("window %s: window %d, the second after the import's hour, has threshold %g, want its own %g", tc.window, e, at(e), own)
		}
		if tc.reach > 0 {
			if e := 6*perHour - 1 - tc.reach; math.Abs(at(e)-own) > 0.5 {
				t.Errorf("window %s: window %d, %d windows before the import's hour, has threshold %g, want its own %g", tc.window, e, tc.reach+1, at(e), own)
			}
			// After the hour the import is in, its reach lasts until the fold of the next
			// hour's first observed window applies (foldLag), and the window after the
			// reach takes it too (its sliding count starts at the reach's last window).
			if e := 7*perHour + tc.start; math.Abs(at(e)-imp) > 0.5 {
				t.Errorf("window %s: window %d, %d into the hour after the import's, has threshold %g, want the import's %g", tc.window, e, tc.start, at(e), imp)
			}
			if e := 7*perHour + tc.start + 1; math.Abs(at(e)-own) > 0.5 {
				t.Errorf("window %s: window %d, %d into the hour after the import's, has threshold %g, want its own %g", tc.window, e, tc.start+1, at(e), own)
			}
		}
		// A plateau from hour 6 on: hour 6 is not isolated, and reaches nothing.
		q := p
		for s := 6; s < 18; s++ {
			q.Season[s] = toF16(20, 0, s)
		}
		if thr, _ := c.Threshold(&q, 6*perHour-1); math.Abs(thr-own) > 0.5 {
			t.Errorf("window %s: the window before a business day's first hour has threshold %g, want its own %g", tc.window, thr, own)
		}
	}
}

// UnmarshalBinary refuses a level, recent or week
// factor that is not finite, and an hour's season too: it took one of +Inf (bfloat16 0x7f80), and the
// learned threshold was then +Inf: over any ceiling-less clamp, and 1 once the limiter
// converted it to int64.
func TestUnmarshalRefusesNonFiniteSeason(t *testing.T) {
	c, err := Config{Window: time.Minute}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	p := Profile{Epoch: 29_000_000, Windows: 1440, Level: 100, Recent: 100}
	b, _ := p.MarshalBinary()
	s := c.slot(p.Epoch + 1)
	b[16+2*s], b[16+2*s+1] = 0x80, 0x7f // season of that hour: +Inf
	var q Profile
	if err := q.UnmarshalBinary(b); err == nil {
		thr, _ := c.Threshold(&q, p.Epoch+1)
		t.Fatalf("a profile with an infinite season was accepted; its threshold: %v (finite: %v)", thr, !math.IsInf(thr, 0) && !math.IsNaN(thr))
	}
}

// TestSpikeDoesNotLastAcrossSkippedWindows: a team caught in a 30-minute spike of 100 ×
// that then stops (no window folded: the gates forgot it) and comes back six hours later
// with another 100 × spike, of an hour, has that spike caught whole, whether folded every
// window or at the windows NextFold names. Skipped windows are silence, which ends a
// spike: the first spike's start was kept across them, the second was taken for a spike
// that had lasted MaxSpike at its first fold, and the team was re-learned at Recent (the
// first spike's volume), accepting the second and every spike under 30 × for days.
func TestSpikeDoesNotLastAcrossSkippedWindows(t *testing.T) {
	c := cfg(t)
	first := int64(3*1440 + 14*60)
	second := first + 30 + 6*60
	for _, scheduled := range []bool{false, true} {
		var p Profile
		for e := int64(0); e < first+30; e++ {
			v := usual(1000, 0.3, 0, e)
			if e >= first {
				v *= 100
			}
			c.Fold(&p, e, v)
		}
		if p.SpikeFrom == 0 {
			t.Fatalf("scheduled %v: the first spike not caught", scheduled)
		}
		caught := 0
		for e := second; e < second+60; e++ {
			v := 100 * usual(1000, 0.3, 0, e)
			if thr, ok := c.Threshold(&p, e); ok && v >= thr {
				caught++
			}
			switch {
			case !scheduled:
				c.Fold(&p, e, v)
			case e == second || c.NextFold(&p, "t") <= e:
				c.FoldScheduled(&p, e, v)
			}
		}
		if caught != 60 || p.Relearned != 0 {
			t.Errorf("scheduled %v: back after 6 h with a 100 × spike of 60 windows: %d over the threshold, re-learned at window %d (level %v); want all 60, not re-learned",
				scheduled, caught, p.Relearned, p.Level)
		}
	}
}
