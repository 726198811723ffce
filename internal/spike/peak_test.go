package spike

import "testing"

// TestFoldPeriodCountsTheWeek: a team whose busy day's threshold is over the floor is
// folded every MinFoldEvery on that day, as FoldPeriod says of a team over it: Peak
// takes the day's weekly factor. Without it, the team's peak was its average day's, under
// the floor, and the team was folded less often on the days it sends most.
func TestFoldPeriodCountsTheWeek(t *testing.T) {
	c := cfg(t)
	var p Profile
	p.Windows, p.Epoch = 10*1440, 10*1440+600 // a day of weekday 3
	d := c.weekday(p.Epoch)
	for s := range p.Season {
		p.Season[s] = toF16(1, 0, s)
	}
	// The average day's baseline at 0.7 × what the floor takes, the busy day's at 1.4 ×.
	p.Level = float32(0.7 * c.Floor / c.Factor)
	for i := range p.Week {
		p.Week[i] = 0.9
	}
	p.Week[d] = 2
	thr, _ := c.Threshold(&p, p.Epoch+1)
	if thr <= c.Floor {
		t.Fatalf("threshold %.1f, want it over the floor %.0f: the test tests nothing", thr, c.Floor)
	}
	if got, want := c.FoldPeriod(&p), c.foldWindows(MinFoldEvery); got != want {
		t.Errorf("threshold %.1f over the floor %.0f: folded every %d windows, want %d", thr, c.Floor, got, want)
	}
	// The day before the busy day: its next fold may be on the busy day.
	p.Epoch -= 1440
	if got, want := c.FoldPeriod(&p), c.foldWindows(MinFoldEvery); got != want {
		t.Errorf("the day before the busy day: folded every %d windows, want %d", got, want)
	}
	// Two days before: the average day's own period.
	p.Epoch -= 1440
	if got, want := c.FoldPeriod(&p), c.foldWindows(MinFoldEvery); got == want {
		t.Errorf("two days before the busy day: folded every %d windows, want fewer folds (its threshold the floor)", got)
	}
}
