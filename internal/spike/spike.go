// Package spike learns a team's usual volume per window from its own history, for spike
// protection: an adaptive threshold, clamp(Factor × baseline, Floor, Ceiling), in place of
// one static threshold for every team.
//
// Guarantees:
//
//   - Deterministic: a Profile is a pure function of the counts folded into it, in order, and
//     of the Config. Gates that fold the same shared counts hold the same profile, and so
//     derive the same threshold, with no coordination beyond the counts.
//   - Bounded: a Profile is ProfileSize (128) bytes whatever the history.
//   - Robust to a daily and a weekly cycle: the baseline is a level times a factor per hour
//     of the day times a factor per day of the week (an evening peak, or a Monday after a
//     quiet weekend, is the team's usual volume, not a spike, once the team has seen that
//     day of the week: one first seen on a weekend takes its first Monday's rise for a
//     spike until MaxSpike); to steady growth: the level follows the deseasonalised volume
//     within a day or so; and to the spike it is meant to
//     catch: a window over the threshold is not learned from, and one between Clip × and
//     Factor × the baseline is learned from as Clip × it.
//   - A spike ends: a team over its threshold, and over Clip × its baseline since, for
//     MaxSpike is re-learned at the volume it has sent lately (Profile.Recent), so a
//     lasting step up (a launch, a large customer) is accepted again within MaxSpike of
//     its start, even one the day's cycle brings back under the threshold; a real spike
//     shorter than that is caught whole. An incident longer than MaxSpike, re-learned so,
//     is re-learned again at what the team sends when, within the day, it falls under a
//     Factor'th of that.
//   - Silence is not a volume: a window with no records is not learned from, so a team
//     coming back from a pause of hours or days at its usual volume is not a spike.
//   - A burst at the same hour three days running (a nightly batch import) is a daily
//     pattern: from the third day's first fold that hour's season follows its highest
//     windows, so the import is accepted whatever part of the hour it fills, and for as
//     long as it comes each day (the hour's season then falls back at SeasonHalfLife).
//     Days while the team is still being learned count, but an import present from a
//     team's start can take until its seventh night: its hour's season learns it that
//     first day, then falls back, and it is a burst again for a night or three. One
//     shorter than the fold period can fall between the folds every day, unseen, and
//     stays diverted. Within a fold period of an hour holding an import, a window's
//     threshold is that hour's, so that an import's part in the next hour, which the
//     folds may never observe, is not diverted every night.
//   - A fall is no spike: a window's threshold is at least the window before's, since a
//     limiter's sliding count starts each window at the count of the window before, so a
//     team whose volume falls by more than Factor on the hour every day (a business day's
//     close) is not over its threshold in the window after.
//   - A team with less than MinHistory of history has no learned threshold (Threshold
//     returns false): the static one applies. Its first window is not its level for good:
//     one within its first hour under a Factor'th of the baseline starts it again. Until
//     it has a week, the days of the week it has not seen count as its average day.
//
// The package knows nothing of Kafka or Redis: the caller folds each window's final count
// (Fold) and asks for a window's threshold (Threshold).
package spike

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/capturegate/gate/internal/durtext"
)

// Slots is how many parts of the day the seasonal profile keeps: one per hour.
const Slots = 24

// Days is how many days of the week the weekly profile keeps.
const Days = 7

// Config holds the learner's settings. The zero value of a field means its default.
type Config struct {
	// Window is the length of one window, whose count is folded at a time. Required.
	Window time.Duration
	// Factor: the threshold is Factor × the baseline. Default 4. Lower catches smaller
	// spikes and diverts more of a team's own noise; higher lets spikes under it through.
	Factor float64
	// Floor and Ceiling clamp the learned threshold. Floor keeps a small team's noise (a
	// few records a window, often zero) from being a spike; Ceiling bounds what a large
	// team may send. Default Floor 100 per window; Ceiling 0: none.
	Floor, Ceiling float64
	// LevelHalfLife is how fast the level follows the team's volume, deseasonalised: a
	// change is half learned after this long. Default 72 h (GATE_ADAPTIVE_HALF_LIFE): a
	// quiet weekend moves it less than the week's profile learns the weekend, and growth
	// of 50% a week (0.25% an hour) is followed; a lasting step over Factor is learned by
	// MaxSpike instead.
	LevelHalfLife time.Duration
	// SeasonHalfLife is how fast the hourly profile follows a change in the daily cycle,
	// counted in days of that hour's windows. Default 3 days.
	SeasonHalfLife time.Duration
	// MinHistory is how much history a team needs before its threshold is learned; until
	// then the static threshold applies. Default 24 h: one whole daily cycle.
	MinHistory time.Duration
	// Clip: a window between Clip × and Factor × the baseline is learned from as Clip × it,
	// so a rise that is not a spike still moves the level, slowly. Default 1.5.
	Clip float64
	// WeekHalfLife is how fast the weekly profile follows a change in the week's shape,
	// counted in weeks of that day's windows. Default 2 weeks.
	WeekHalfLife time.Duration
	// MaxSpike bounds a spike: a team in one this long (over its threshold, and over
	// Clip × its baseline since) is re-learned at the volume it has sent lately, so that
	// a lasting step up is accepted again within it. Default 3 h: an hour over the
	// longest spikes real traffic shows and the trace holds (10 to 120 minutes), which
	// are still caught whole; shorter accepts a launch sooner and lets a long spike
	// through once it passes the bound.
	MaxSpike time.Duration
}

// Defaults for Config.
const (
	DefaultFactor         = 4
	DefaultFloor          = 100
	DefaultLevelHalfLife  = 72 * time.Hour
	DefaultSeasonHalfLife = 3 * 24 * time.Hour
	DefaultMinHistory     = 24 * time.Hour
	DefaultClip           = 1.5
	DefaultWeekHalfLife   = 14 * 24 * time.Hour
	DefaultMaxSpike       = 3 * time.Hour
	// RecentHalfLife is the half-life of Profile.Recent, the volume a spike that lasts
	// is re-learned at: an hour, so that by MaxSpike it is the new volume within 2^-3.
	RecentHalfLife = time.Hour
)

// ErrBadConfig is returned (wrapped) for invalid settings.
var ErrBadConfig = errors.New("spike: invalid configuration")

// WithDefaults returns c with defaults filled in, or an error naming the first invalid field.
func (c Config) WithDefaults() (Config, error) {
	if c.Window <= 0 || c.Window > time.Hour || (time.Hour)%c.Window != 0 {
		return c, fmt.Errorf("%w: window %s must divide an hour", ErrBadConfig, durtext.String(c.Window))
	}
	if c.Factor == 0 {
		c.Factor = DefaultFactor
	}
	if c.Floor == 0 {
		c.Floor = DefaultFloor
	}
	if c.LevelHalfLife == 0 {
		c.LevelHalfLife = DefaultLevelHalfLife
	}
	if c.SeasonHalfLife == 0 {
		c.SeasonHalfLife = DefaultSeasonHalfLife
	}
	if c.MinHistory == 0 {
		c.MinHistory = DefaultMinHistory
	}
	if c.Clip == 0 {
		c.Clip = DefaultClip
	}
	if c.WeekHalfLife == 0 {
		c.WeekHalfLife = DefaultWeekHalfLife
	}
	if c.MaxSpike == 0 {
		c.MaxSpike = DefaultMaxSpike
	}
	switch {
	case c.Factor <= 1:
		return c, fmt.Errorf("%w: factor %g must be above 1", ErrBadConfig, c.Factor)
	case c.Clip < 1 || c.Clip >= c.Factor:
		return c, fmt.Errorf("%w: clip %g must be in [1, factor %g)", ErrBadConfig, c.Clip, c.Factor)
	case c.Floor < 0 || c.Ceiling < 0 || (c.Ceiling > 0 && c.Ceiling < c.Floor):
		return c, fmt.Errorf("%w: floor %g, ceiling %g: want 0 ≤ floor ≤ ceiling (0: none)", ErrBadConfig, c.Floor, c.Ceiling)
	case c.LevelHalfLife < c.Window || c.SeasonHalfLife < 24*time.Hour || c.MinHistory < 0:
		return c, fmt.Errorf("%w: level half-life %s (at least a window), season half-life %s (at least a day), min history %s", ErrBadConfig, durtext.String(c.LevelHalfLife), durtext.String(c.SeasonHalfLife), durtext.String(c.MinHistory))
	case c.WeekHalfLife < 7*24*time.Hour:
		return c, fmt.Errorf("%w: week half-life %s, want at least a week", ErrBadConfig, durtext.String(c.WeekHalfLife))
	case c.MaxSpike < MaxFoldEvery+2*c.Window || c.MaxSpike > 7*24*time.Hour:
		return c, fmt.Errorf("%w: max spike %s, want from %s (a fold period and two windows) to a week", ErrBadConfig, durtext.String(c.MaxSpike), durtext.String(MaxFoldEvery+2*c.Window))
	}
	return c, nil
}

// Profile is one team's learned history: ProfileSize bytes in binary form.
type Profile struct {
	// Epoch is the last window folded in (unix time / Window); Windows how many were
	// learned from, or spanned by a fold but not learned from (FoldSpan, in an hour not
	// learned yet): the team's history; silent windows are not. Capped at MaxUint32.
	Epoch   int64
	Windows uint32
	// Level is the team's usual volume per window with the daily and weekly cycles taken
	// out.
	Level float32
	// Season is the daily cycle: the volume per window in each hour of the day (UTC) as a
	// multiple of Level, 0 meaning not learned yet (taken as 1).
	Season [Slots]float16
	// Week is the weekly cycle: the volume per window on each day of the week (UTC) as a
	// multiple of Level, 0 meaning not learned yet (taken as 1). A float32: a day's
	// factor moves by a 1440th of a gap a window, under a bfloat16's resolution.
	Week [Days]float32
	// Recent is the team's volume per window lately, deseasonalised, spikes included
	// (half-life RecentHalfLife): what a spike that lasts MaxSpike is re-learned at.
	Recent float32
	// SpikeFrom is the first window of the spike the team is in (over its threshold
	// then, and over Clip × its baseline in every window folded since), 0 when none;
	// Relearned the last window a spike was ended by re-learning the team at its new
	// volume, 0 when never.
	SpikeFrom, Relearned int64
	// Today, Yesterday and Before have bit h set when a window of hour h of the day of
	// Epoch, of the day before and of the day before that was a burst: over the
	// threshold, or what it would be while the team is being learned (so that an import
	// on a team's first day counts); in a pattern hour, over Factor × the team's level
	// for its day, whatever the hour's season.
	Today, Yesterday, Before uint32
	// Pattern has bit h set while hour h holds a daily pattern (a nightly import): a
	// burst in an hour that had one on each of the two days before. A pattern hour's
	// season follows its highest windows (Clip ÷ Factor × theirs), not its average, so an
	// import filling part of the hour is under the threshold whatever part; it rises at
	// most Clip × a window, so a spike well over the import in that hour is still caught.
	// An hour stays a pattern while each day brings it a burst.
	Pattern uint32
}

// float16 is a bfloat16: the top half of a float32. Three significant digits are plenty
// for a seasonal factor, but not for the steps it learns by (a fraction of a percent a
// window), which rounding to nearest would lose: toF16 rounds stochastically, with a
// dither that is a function of the window and the slot, so that every gate rounds alike
// and the factor follows its counts on average.
type float16 uint16

func toF16(f float64, epoch int64, slot int) float16 {
	b := math.Float32bits(float32(f))
	dither := uint32(splitmix(uint64(epoch)*Slots+uint64(slot)) & 0xffff)
	if b&0x7f800000 == 0x7f800000 || b+dither < b {
		return float16(b >> 16) // Inf or NaN: as is
	}
	return float16((b + dither) >> 16)
}

// splitmix is SplitMix64's finaliser: a well-mixed hash of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (h float16) float() float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// perDay is how many windows a day holds.
func (c Config) perDay() int64 { return int64(24 * time.Hour / c.Window) }

// slot is the hour of the day (UTC) of window epoch.
func (c Config) slot(epoch int64) int {
	perDay := c.perDay()
	return int(floorMod(epoch, perDay) * Slots / perDay)
}

// day is the day of window epoch since the Unix epoch, and weekday its day of the week
// (0 a Thursday: the days are indexes, not names).
func (c Config) day(epoch int64) int64   { return floorDiv(epoch, c.perDay()) }
func (c Config) weekday(epoch int64) int { return int(floorMod(c.day(epoch), Days)) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return ((a % b) + b) % b }

func (p *Profile) season(s int) float64 {
	if v := p.Season[s].float(); v > 0 {
		return v
	}
	return 1
}

func (p *Profile) week(d int) float64 {
	if v := p.Week[d]; v > 0 {
		return float64(v)
	}
	return 1
}

// Baseline is the team's usual volume in window epoch: Level × the season of its hour ×
// the factor of its day of the week.
func (c Config) Baseline(p *Profile, epoch int64) float64 {
	return c.atSeason(p, epoch, p.season(c.slot(epoch)))
}

// atSeason is the team's volume in window epoch at season sv: Level × sv × the factor of
// its day of the week.
func (c Config) atSeason(p *Profile, epoch int64, sv float64) float64 {
	return float64(p.Level) * sv * p.week(c.weekday(epoch))
}

// Learned reports whether p holds MinHistory of history.
func (c Config) Learned(p *Profile) bool {
	return time.Duration(p.Windows)*c.Window >= c.MinHistory
}

// Threshold is the learned threshold of window epoch, clamp(Factor × baseline, Floor,
// Ceiling), the baseline taking a neighbouring import hour's season at the hour's edge
// (judgedSeason), and true; or false while the team has too little history (the static
// threshold applies). It is at least the window before's (ownThreshold): a limiter's
// sliding count starts a window at the count of the window before, so a team whose
// volume falls by more than Factor on the hour, every day (a business day's close, the
// end of a nightly import filling whole hours), judged by the new hour's threshold alone
// was over it for most of the window after, and diverted there every day for good. The
// cost: a spike in the window right after a fall is caught from the window after it.
func (c Config) Threshold(p *Profile, epoch int64) (float64, bool) {
	if !c.Learned(p) {
		return 0, false
	}
	return max(c.ownThreshold(p, epoch), c.ownThreshold(p, epoch-1)), true
}

// ownThreshold is window epoch's threshold for its own count: clamp(Factor × baseline,
// Floor, Ceiling), the baseline's season judgedSeason's. The fold judges a window's count
// by it: a count, unlike a sliding one, holds nothing of the window before.
func (c Config) ownThreshold(p *Profile, epoch int64) float64 {
	t := max(c.Factor*c.atSeason(p, epoch, c.judgedSeason(p, epoch)), c.Floor)
	if c.Ceiling > 0 {
		t = min(t, c.Ceiling)
	}
	return t
}

// judgedSeason is the season window epoch's threshold takes: its hour's, or, in the
// part of its hour a neighbouring hour that holds an import reaches (reachSide: at the
// hour's end a fold period less the window observed, 19 minutes with windows of a minute;
// at its start three windows more, 22 minutes), that hour's when higher. An hour holds an
// import if it is a pattern hour, or if its season is over Clip × both its neighbours'
// (isolated). An import seldom starts on the hour: one from 05:29 to
// 06:15 fills a quarter of hour 6, which the folds, one window in MinFoldEvery at the same
// minutes every day, may never observe, so that hour's season would never learn it and
// its part of the import would be diverted every night for good. The cost: a spike
// starting right after a nightly import, under the import's own threshold, is caught only
// once it leaves the reached part. The edge of a plateau (a business day's first hour,
// as high as the next) and a daily cycle reach nothing.
func (c Config) judgedSeason(p *Profile, epoch int64) float64 {
	s := c.slot(epoch)
	sv := p.season(s)
	if n := c.reachFrom(epoch); n >= 0 {
		if ns := p.season(n); ns > sv && (p.Pattern&(1<<n) != 0 || ns >= c.Clip*sv && c.isolated(p, n, ns)) {
			return ns
		}
	}
	return sv
}

// isolated reports whether hour n's season ns is over Clip × both its neighbours': a
// burst an hour or so long, as an import is, not the edge of a plateau (a business day's
// first hour has the next as high, and reaches nothing).
func (c Config) isolated(p *Profile, n int, ns float64) bool {
	return ns >= c.Clip*p.season((n+Slots-1)%Slots) && ns >= c.Clip*p.season((n+1)%Slots)
}

// reachFrom is the neighbouring hour that may reach window epoch (reachSide): the hour
// before at the start of epoch's hour, the hour after at its end, or -1 in between.
func (c Config) reachFrom(epoch int64) int {
	switch c.reachSide(epoch) {
	case 1:
		return (c.slot(epoch) + Slots - 1) % Slots
	case 2:
		return (c.slot(epoch) + 1) % Slots
	}
	return -1
}

// ThresholdPart names the part of the day window epoch's threshold is constant over, for
// a caller that caches it: two windows with the same part have the same threshold from
// the same profile. An hour has three parts of its own threshold (ownThreshold): its start
// and its end, which a neighbouring hour may reach (reachSide), and the rest; and the
// first window of each is a part of its own, which takes the part before's when higher
// (Threshold).
func (c Config) ThresholdPart(epoch int64) int64 {
	own := c.ownPart(epoch)
	if own != c.ownPart(epoch-1) {
		return 2*own + 1
	}
	return 2 * own
}

// ownPart names the part of the day window epoch's own threshold (ownThreshold) is
// constant over.
func (c Config) ownPart(epoch int64) int64 {
	hour := floorDiv(epoch, int64(time.Hour/c.Window))
	return hour*3 + int64(c.reachSide(epoch))
}

// reachSide is 1 for a window in the first windows of its hour that a neighbouring hour
// reaches, 2 in the last, 0 otherwise. At an hour's end the reach is the most of it the
// folds can leave unobserved: a fold period (MinFoldEvery, for a team over the floor) less
// the window observed. At its start it is foldLag windows more: until the fold of the
// hour's first observed window applies, the hour's own season is what the day before's
// last folds of it left, and for an import filling most of the hour from its start, which
// the folds see one window in three of, that dips under the import every night (the
// trace's worst import team, 15:57 to 16:34, lost 16:19 on two nights: 204,710 records at
// its peak). Each side up to half an hour. With windows of MinFoldEvery or longer every
// window is observed, and nothing is reached.
func (c Config) reachSide(epoch int64) int {
	perHour := int64(time.Hour / c.Window)
	reach, i := min(c.foldWindows(MinFoldEvery)-1, perHour/2), floorMod(epoch, perHour)
	switch {
	case reach == 0:
		return 0
	case i < min(reach+foldLag, perHour/2):
		return 1
	case i >= perHour-reach:
		return 2
	}
	return 0
}

// foldLag is the windows after window F whose thresholds are still computed without F's
// count: a gate folds F during F + 2, once its count is final (limit's adaptive tick),
// and the threshold of F + 3 is the first computed after that fold.
const foldLag = 3

// SpikeEnds is the window by which p's current spike ends by re-learning if it lasts
// (MaxSpike after its first window), and true; false when p is in no spike.
func (c Config) SpikeEnds(p *Profile) (int64, bool) {
	if p.SpikeFrom == 0 {
		return 0, false
	}
	return p.SpikeFrom + c.maxSpikeWindows(), true
}

func (c Config) maxSpikeWindows() int64 { return max(int64(c.MaxSpike/c.Window), 1) }

// Fold learns window epoch's final count. Windows must be folded in order, each once: a
// window at or before p.Epoch is ignored; windows skipped since p.Epoch are not learned
// from (silence is not a volume). It reports whether the window was over its learned
// threshold (a spike, not learned from unless it recurs daily or has lasted MaxSpike):
// its own hour's, which a count, holding nothing of the window before, is judged by.
func (c Config) Fold(p *Profile, epoch int64, count float64) (spike bool) {
	// The next fold, of window epoch+1, applies from window epoch+2.
	return c.foldLead(p, epoch, count, 2, true)
}

// foldLead is Fold for a caller whose next fold applies from window epoch+lead: a spike
// is re-learned at the last fold before it would last MaxSpike. A window not
// observed (one FoldSpan takes at the observed one's rate) is learned from but is no
// burst and raises no pattern hour: taken at the rate of an observed window elsewhere in
// the day, with that hour's season, it would keep a pattern hour's bursts coming after
// its import stopped.
func (c Config) foldLead(p *Profile, epoch int64, count float64, lead int64, observed bool) bool {
	if p.Windows > 0 && epoch <= p.Epoch {
		return false
	}
	c.advance(p, epoch)
	if count <= 0 {
		// Silence: not learned from (a pause is not the team's new normal), but no
		// longer a spike either.
		p.SpikeFrom = 0
		return false
	}
	p.addWindow()
	if p.Windows == 1 {
		p.Level, p.Recent = float32(count), float32(count)
		return false
	}
	s, d := c.slot(epoch), c.weekday(epoch)
	sv, wv := p.season(s), p.week(d)
	level := float64(p.Level)
	perSlotPerDay := float64(time.Hour / c.Window)
	if !c.Learned(p) && float64(p.Windows) <= perSlotPerDay+1 && count*c.Factor < level*sv*wv {
		// Within the team's first hour, a window under a Factor'th of the baseline: the
		// first window, which set the level, was no usual one (a queue's flush at 50 ×
		// the team's volume), and the team is learned again from this window. Kept,
		// that level was the baseline of every hour the first day had not reached,
		// their seasons learned from it slowly: the threshold 16 to 24 × what the usual
		// volume makes it on day 2, and every spike under that let through. Only in the
		// first hour: later the hours' seasons hold the day's shape, which a drop by
		// Factor may be part of.
		*p = Profile{Epoch: epoch, Windows: 1, Level: float32(count), Recent: float32(count)}
		return false
	}
	// Recent takes every window, spikes included: the volume a lasting spike becomes.
	wr := c.weight(RecentHalfLife)
	p.Recent = float32(max(float64(p.Recent)+wr*(count/(sv*wv)-float64(p.Recent)), 0))
	bit := uint32(1) << s
	// A burst: over what the threshold is (or, while the team is being learned, would be),
	// the hour's season included; in a pattern hour, its season left out, since that
	// hour's season is the pattern's own volume.
	burst := observed && level > 0 && (count >= max(c.Factor*level*sv*wv, c.Floor) ||
		p.Pattern&bit != 0 && count >= max(c.Factor*level*wv, c.Floor))
	if burst {
		p.Today |= bit
	}
	if c.Learned(p) {
		if observed && p.Pattern&bit != 0 && level > 0 {
			// A pattern hour: its season is at least what admits this window with
			// room, so the import is not a spike whatever part of the hour it fills;
			// but it rises by Clip at most, so a spike far over the import is not
			// learned as it.
			sv = c.follow(p, epoch, s, sv, min(count/(level*wv), c.Factor*sv))
		}
		thr := c.ownThreshold(p, epoch)
		if burst && p.Yesterday&p.Before&bit != 0 && p.Pattern&bit == 0 {
			// A burst in an hour that had one on the two days before too: a daily
			// pattern, from now on followed at its highest (Pattern), its season
			// taking this window at once. Two days, not one: a spike that happens to
			// come back at the same hour the next day (three teams of the trace's 300
			// with spikes) is still caught; one day would accept the nightly import a
			// night sooner. A burst, not a window over the threshold: in the part of
			// the hour a neighbouring hour's season reaches (judgedSeason), the import's
			// window may be under the threshold and still over its own hour's. Over the
			// threshold in an hour that is a pattern already, past what it may follow
			// (above): a spike.
			p.Pattern |= bit
			c.follow(p, epoch, s, sv, count/(level*wv))
			p.SpikeFrom = 0
			return count >= thr
		}
		if count >= thr {
			if p.SpikeFrom == 0 {
				p.SpikeFrom = epoch
			}
			if epoch+lead-p.SpikeFrom > c.maxSpikeWindows() {
				// The spike has lasted: it is the team's new volume. Re-learned at the
				// last fold before the bound: the next one applies from window
				// epoch+lead, past SpikeFrom+MaxSpike; one applying from that window
				// itself still accepts the team within the bound.
				p.Level, p.SpikeFrom, p.Relearned = p.Recent, 0, epoch
			}
			return true
		}
		clip := c.Clip * max(level*sv*wv, c.Floor/c.Factor)
		switch {
		case p.Relearned != 0 && epoch-p.Relearned <= c.perDay() && float64(p.Recent) < level/c.Factor:
			// Re-learned at a new volume within the day, and sending under a Factor'th of
			// it since (Recent, an hour's half-life: some two hours): that was an incident
			// longer than MaxSpike, not a lasting step up, and the team is re-learned at
			// what it sends now. Left to the level's half-life (72 h), a 4-hour incident
			// at 10 × kept the threshold 36 × the usual volume two days on. Only after a
			// re-learning: a team whose week is not learned yet sends as little on its
			// first weekend, which is no step down.
			p.Level, p.SpikeFrom = min(p.Recent, float32(count/(sv*wv))), 0
			return false
		case count < clip:
			// Back under Clip × the baseline: the spike is over.
			p.SpikeFrom = 0
		case p.SpikeFrom != 0 && epoch+lead-p.SpikeFrom > c.maxSpikeWindows():
			// Between that and the threshold, a team sending a little more than
			// usual, or at a new level near its threshold, is still in its spike, and
			// is re-learned if it stays: a lasting step up that the hours of the day
			// bring under the threshold (one at the day's trough, over it at its first
			// windows only) would otherwise be learned clipped by the level while the
			// day's factor of the week took the rest, and at midnight, at the next
			// day's factor, it would be a spike again (the trace's worst step-up team
			// was diverted 15 hours after its step). Re-learned at what it sends now
			// when that is less than Recent, which may still hold a spike far over the
			// threshold from before the team settled here.
			p.Level, p.SpikeFrom, p.Relearned = min(p.Recent, float32(count/(sv*wv))), 0, epoch
			return false
		}
		level += c.weight(c.LevelHalfLife) * (min(count, clip)/(sv*wv) - level)
	} else {
		level += c.weight(c.LevelHalfLife) * (count/(sv*wv) - level)
	}
	p.Level = float32(max(level, 0))
	if level <= 0 {
		return false
	}
	// A slot sees one window in Slots of a day, a weekday one in Days of a week: each
	// learns at its own windows' pace, from the count itself, not clipped: a window under
	// the threshold in an hour whose volume is uneven (a nightly import filling half of
	// it) is that hour's usual volume; clipped, the hour's factor would sink under it.
	// Early on (no season yet) the season learns fast: the first day's shape. The week is
	// learned once a day's shape is.
	ws := -math.Expm1(-math.Ln2 / (perSlotPerDay * float64(c.SeasonHalfLife) / float64(24*time.Hour)))
	if !c.Learned(p) {
		ws = max(ws, 1/perSlotPerDay)
	}
	sv += ws * (count/(level*wv) - sv)
	p.Season[s] = toF16(max(sv, 1e-3), epoch, s)
	if c.Learned(p) {
		perDay := float64(c.perDay())
		ww := -math.Expm1(-math.Ln2 / (perDay * float64(c.WeekHalfLife) / float64(7*24*time.Hour)))
		if time.Duration(p.Windows)*c.Window < c.MinHistory+7*24*time.Hour {
			ww = max(ww, 1/perDay) // the first week: each day's level as it comes
		}
		wv += ww * (count/(level*sv) - wv)
		p.Week[d] = float32(max(wv, 1e-3))
	}
	return false
}

// advance moves p's epoch to window epoch, after p.Epoch: its days turn (turnDay), and
// windows skipped since the last fold are silence (no gate looked at the team), which ends
// a spike as a silent window does, or a team back from a pause in a new spike would be
// taken for one in the spike before it, and re-learned at its first fold.
func (c Config) advance(p *Profile, epoch int64) {
	if epoch > p.Epoch+1 {
		p.SpikeFrom = 0
	}
	c.turnDay(p, epoch)
	p.Epoch = epoch
}

// addWindow counts a window of the team's history in Windows, capped at MaxUint32.
func (p *Profile) addWindow() {
	if p.Windows < math.MaxUint32 {
		p.Windows++
	}
}

// follow raises hour s's season sv to what admits a window of r × the team's level (for
// its day of the week) at Clip × its volume, and returns it: a pattern hour's season
// follows its highest windows.
func (c Config) follow(p *Profile, epoch int64, s int, sv, r float64) float64 {
	if want := r * c.Clip / c.Factor; want > sv {
		sv = want
		p.Season[s] = toF16(sv, epoch, s)
	}
	return sv
}

// weight is the per-window weight of an exponential average of half-life h:
// 1 − 2^(−window / h).
func (c Config) weight(h time.Duration) float64 {
	return -math.Expm1(-math.Ln2 * float64(c.Window) / float64(h))
}

// turnDay moves Today to Yesterday and Yesterday to Before when epoch is on the next day
// after p.Epoch's, and ends the patterns of the hours that had no burst on the day that
// ended: an import that stopped is not followed for ever. Two days or more later, nothing
// of before is kept.
func (c Config) turnDay(p *Profile, epoch int64) {
	if p.Windows == 0 && p.Epoch == 0 {
		return
	}
	switch c.day(epoch) - c.day(p.Epoch) {
	case 0:
	case 1:
		p.Pattern &= p.Today
		p.Before, p.Yesterday, p.Today = p.Yesterday, p.Today, 0
	default:
		p.Pattern, p.Before, p.Yesterday, p.Today = 0, 0, 0, 0
	}
}

// FoldScheduled folds window f, one NextFold named for p, with its final count: FoldSpan
// over the windows since p's last fold, up to two fold periods. A fleet stores a fold only
// if one of the gates that made it writes it (each does with a probability, about two of
// them), so now and then none does: the next fold then covers both periods at the observed
// rate instead of leaving the first unlearned. Longer gaps are silence, as Fold takes
// them: a team no gate looked at was not sending, and is not learned from.
func (c Config) FoldScheduled(p *Profile, f int64, count float64) (spike bool) {
	span := c.FoldPeriod(p)
	next := f + span
	if p.Windows > 0 {
		span = min(max(span, f-p.Epoch), 2*span)
	}
	return c.foldSpan(p, f, count, span, next+3) // folded at next+2, applying from the window after
}

// FoldSpan learns window epoch's final count as the volume of the span windows ending at
// epoch, of which only the last was observed: each earlier one is folded at the same
// deseasonalised rate (count scaled by its hour's and day's factors against epoch's), not
// as silence. It lets a caller fold a team every span windows instead of every window, at
// the cost of learning from one window in span; windows before the span since p.Epoch are
// not learned from, as Fold does, nor is a span whose observed window is silent. A span of
// 1 or less is Fold. It reports whether the observed window was over its learned
// threshold: then so is the span, which is not learned from.
func (c Config) FoldSpan(p *Profile, epoch int64, count float64, span int64) (spike bool) {
	// As Fold: the next fold, of window epoch+span, applies from the window after it.
	return c.foldSpan(p, epoch, count, span, epoch+max(span, 1)+1)
}

// foldSpan is FoldSpan for a caller whose next fold applies to every record from window
// applies on.
func (c Config) foldSpan(p *Profile, epoch int64, count float64, span, applies int64) bool {
	if p.Windows > 0 && epoch <= p.Epoch {
		return false
	}
	lead := max(applies-epoch, 1)
	if span <= 1 || p.Windows == 0 {
		return c.foldLead(p, epoch, count, lead, true)
	}
	first := max(epoch-span+1, p.Epoch+1)
	// The rate each window of the span is taken at: the factors as they were before the
	// span, so that folding it does not feed back into itself.
	obs, obsDay := c.slot(epoch), c.weekday(epoch)
	rate := count / (p.season(obs) * p.week(obsDay))
	var seasons [Slots]float64
	for s := range seasons {
		seasons[s] = p.season(s)
	}
	var weeks [Days]float64
	for d := range weeks {
		weeks[d] = p.week(d)
	}
	for e := first; e < epoch; e++ {
		// A window in the observed one's hour and day is taken at its count: the season
		// of that hour then learns as fast as when every window is folded.
		n := count
		if s, d := c.slot(e), c.weekday(e); s != obs || d != obsDay {
			if p.Season[s] == 0 || p.Season[obs] == 0 {
				// Of two hours, one not learned yet (taken as 1): how their volumes
				// compare is not known, and the window is not learned from. Taken at the
				// observed window's rate, a team first seen in a quiet hour that turns
				// busy on the next had the quiet hour's season learn the busy volume,
				// its threshold there 2.7 × what its volume makes it the next day. Not
				// silence either: the epoch moves on, as a fold would move it, and the
				// window is history (Windows), the team sending in it. Windows skipped
				// before it end a spike, as in foldLead.
				c.advance(p, e)
				p.addWindow()
				continue
			}
			n = rate * seasons[s] * weeks[d]
		}
		c.foldLead(p, e, n, applies-e, false)
	}
	return c.foldLead(p, epoch, count, lead, true)
}

// The fold cadence. A caller that folds every window learns from every window; one that
// keeps a store's cost down folds a team every FoldPeriod windows (FoldSpan), at windows
// NextFold names: both functions of the profile and the team's name alone, so that every
// gate of a fleet agrees on them with no coordination.
const (
	// MinFoldEvery and MaxFoldEvery bound a team's fold period. A team is folded every
	// MinFoldEvery while its learned threshold is above the floor; the further under it,
	// the less often, down to hourly (its threshold is the floor whatever its exact
	// baseline). Thresholds follow the level, whose half-life is hours: a fold every few
	// minutes loses little (BenchmarkSpikeTrace measures the learner at this cadence; at
	// 10, 20 and 30 minutes its recall was 0.9626, 0.9626 and 0.9640, its windows to
	// divert 1.648, 1.623 and 1.625). Each fold costs every gate a look (four keys read),
	// the most of what adaptive thresholds cost Redis: 20 minutes halves it against 10.
	MinFoldEvery = 20 * time.Minute
	MaxFoldEvery = time.Hour
)

// foldWindows is d in windows, at least one.
func (c Config) foldWindows(d time.Duration) int64 { return max(int64(d/c.Window), 1) }

// FoldPeriod is how many windows apart p is folded. A team whose threshold would be the
// floor at twice its peak baseline is folded every MaxFoldEvery (its level, with a
// half-life of hours, cannot double within one); one above the floor every MinFoldEvery;
// in between, in proportion.
func (c Config) FoldPeriod(p *Profile) int64 {
	lo, hi := c.foldWindows(MinFoldEvery), c.foldWindows(MaxFoldEvery)
	r := c.Floor / (c.Factor * c.Peak(p)) // +Inf for a silent team
	switch {
	case r >= 2:
		return hi
	case r <= 1:
		return lo
	}
	return lo + int64((r-1)*float64(hi-lo))
}

// NextFold is the next window after p's epoch to fold: the first whose number plus the
// team's phase (a hash of its name) is a multiple of the period, so that teams' folds are
// spread over it.
func (c Config) NextFold(p *Profile, team string) int64 {
	k := c.FoldPeriod(p)
	h := fnv.New64a()
	h.Write([]byte(team))
	phase := int64(h.Sum64() % uint64(c.foldWindows(MaxFoldEvery)))
	f := p.Epoch + 1
	return f + ((-(f+phase))%k+k)%k
}

// Peak is the team's highest baseline over the day of its last fold and the day after
// (the next fold is within MaxFoldEvery): Level × its largest hourly season × the larger
// of those days' weekly factors. Without the weekly factor a team's busy day, its
// threshold over the floor, was folded as if under it (every 37 windows, not 20, for a
// day at 2 × where the others are at 0.9 ×, its threshold 1.4 × the floor).
func (c Config) Peak(p *Profile) float64 {
	top := 0.0
	for s := range Slots {
		top = max(top, p.season(s))
	}
	d := c.weekday(p.Epoch)
	return float64(p.Level) * top * max(p.week(d), p.week((d+1)%Days))
}

// ProfileSize is the length of a Profile's binary form. UnmarshalBinary still reads the
// earlier forms: PrePatternProfileSize bytes, before daily patterns (Pattern none), and
// OldProfileSize, before weekly cycles and spike ends.
const (
	ProfileSize           = 128
	PrePatternProfileSize = 124
	OldProfileSize        = 64
)

// ErrBadProfile is returned (wrapped) by UnmarshalBinary for data that is not a profile.
var ErrBadProfile = errors.New("spike: not a profile")

// MarshalBinary encodes p in ProfileSize bytes, little-endian: Epoch (8 bytes, first, so
// that a compare-and-set can compare the epoch alone), Windows (4), Level's float32 bits
// (4), each Season's 2 bytes (48), each Week's float32 bits (28), Recent's float32 bits
// (4), Before (4), SpikeFrom (8), Relearned (8), Today (4), Yesterday (4), Pattern (4).
func (p *Profile) MarshalBinary() ([]byte, error) {
	return p.AppendBinary(make([]byte, 0, ProfileSize))
}

// AppendBinary appends p's binary form (MarshalBinary) to b.
func (p *Profile) AppendBinary(b []byte) ([]byte, error) {
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(p.Epoch))
	b = le.AppendUint32(b, p.Windows)
	b = le.AppendUint32(b, math.Float32bits(p.Level))
	for _, s := range p.Season {
		b = le.AppendUint16(b, uint16(s))
	}
	for _, w := range p.Week {
		b = le.AppendUint32(b, math.Float32bits(w))
	}
	b = le.AppendUint32(b, math.Float32bits(p.Recent))
	b = le.AppendUint32(b, p.Before)
	b = le.AppendUint64(b, uint64(p.SpikeFrom))
	b = le.AppendUint64(b, uint64(p.Relearned))
	b = le.AppendUint32(b, p.Today)
	b = le.AppendUint32(b, p.Yesterday)
	b = le.AppendUint32(b, p.Pattern)
	return b, nil
}

// UnmarshalBinary decodes MarshalBinary's form, or the 64-byte form of earlier versions
// (its level, hours and history kept; the week and the rest start unlearned). It refuses
// data of another length and a level that is negative or not finite, leaving p unchanged.
func (p *Profile) UnmarshalBinary(b []byte) error {
	if len(b) != ProfileSize && len(b) != PrePatternProfileSize && len(b) != OldProfileSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadProfile, len(b), ProfileSize)
	}
	le := binary.LittleEndian
	var q Profile
	q.Epoch = int64(le.Uint64(b))
	q.Windows = le.Uint32(b[8:])
	q.Level = math.Float32frombits(le.Uint32(b[12:]))
	q.Recent = q.Level
	for i := range q.Season {
		q.Season[i] = float16(le.Uint16(b[16+2*i:]))
	}
	if len(b) >= PrePatternProfileSize {
		for i := range q.Week {
			q.Week[i] = math.Float32frombits(le.Uint32(b[64+4*i:]))
		}
		q.Recent = math.Float32frombits(le.Uint32(b[92:]))
		q.Before = le.Uint32(b[96:])
		q.SpikeFrom = int64(le.Uint64(b[100:]))
		q.Relearned = int64(le.Uint64(b[108:]))
		q.Today = le.Uint32(b[116:])
		q.Yesterday = le.Uint32(b[120:])
	}
	if len(b) == ProfileSize {
		q.Pattern = le.Uint32(b[124:])
	}
	vals := append([]float32{q.Level, q.Recent}, q.Week[:]...)
	for _, h := range q.Season {
		vals = append(vals, float32(h.float()))
	}
	for _, v := range vals {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: level %v, recent %v, week %v, a season %v", ErrBadProfile, q.Level, q.Recent, q.Week, v)
		}
	}
	*p = q
	return nil
}
