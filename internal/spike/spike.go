// Package spike learns a team's usual volume per window from its own history, for spike
// protection (issue 22): an adaptive threshold, clamp(Factor × baseline, Floor, Ceiling),
// in place of one static threshold for every team.
//
// Guarantees:
//
//   - Deterministic: a Profile is a pure function of the counts folded into it, in order, and
//     of the Config. Gates that fold the same shared counts hold the same profile, and so
//     derive the same threshold, with no coordination beyond the counts.
//   - Bounded: a Profile is 64 bytes whatever the history.
//   - Robust to a daily cycle: the baseline is a level times a factor per hour of the day
//     (a team's evening peak is its usual volume at that hour, not a spike); to steady
//     growth: the level follows the deseasonalised volume within hours; and to the spike
//     it is meant to catch: a window over the threshold is not learned from, and one
//     between Clip × and Factor × the baseline is learned from as Clip × it.
//   - A team with less than MinHistory of history has no learned threshold (Threshold
//     returns false): the static one applies.
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
)

// Slots is how many parts of the day the seasonal profile keeps: one per hour.
const Slots = 24

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
	// change is half learned after this long. Default 3 h: fast enough for growth of 50% a
	// week (0.25% an hour), slow enough that an hour of a moderate rise (under Factor) moves
	// it less than a third of the way.
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
}

// Defaults for Config.
const (
	DefaultFactor         = 4
	DefaultFloor          = 100
	DefaultLevelHalfLife  = 3 * time.Hour
	DefaultSeasonHalfLife = 3 * 24 * time.Hour
	DefaultMinHistory     = 24 * time.Hour
	DefaultClip           = 1.5
)

// ErrBadConfig is returned (wrapped) for invalid settings.
var ErrBadConfig = errors.New("spike: invalid configuration")

// WithDefaults returns c with defaults filled in, or an error naming the first invalid field.
func (c Config) WithDefaults() (Config, error) {
	if c.Window <= 0 || c.Window > time.Hour || (time.Hour)%c.Window != 0 {
		return c, fmt.Errorf("%w: window %s must divide an hour", ErrBadConfig, c.Window)
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
	switch {
	case c.Factor <= 1:
		return c, fmt.Errorf("%w: factor %g must be above 1", ErrBadConfig, c.Factor)
	case c.Clip < 1 || c.Clip >= c.Factor:
		return c, fmt.Errorf("%w: clip %g must be in [1, factor %g)", ErrBadConfig, c.Clip, c.Factor)
	case c.Floor < 0 || c.Ceiling < 0 || (c.Ceiling > 0 && c.Ceiling < c.Floor):
		return c, fmt.Errorf("%w: floor %g, ceiling %g: want 0 ≤ floor ≤ ceiling (0: none)", ErrBadConfig, c.Floor, c.Ceiling)
	case c.LevelHalfLife < c.Window || c.SeasonHalfLife < 24*time.Hour || c.MinHistory < 0:
		return c, fmt.Errorf("%w: level half-life %s (at least a window), season half-life %s (at least a day), min history %s", ErrBadConfig, c.LevelHalfLife, c.SeasonHalfLife, c.MinHistory)
	}
	return c, nil
}

// Profile is one team's learned history: 64 bytes.
type Profile struct {
	// Epoch is the last window folded in (unix time / Window); Windows how many were,
	// capped at MaxUint32.
	Epoch   int64
	Windows uint32
	// Level is the team's usual volume per window with the daily cycle taken out.
	Level float32
	// Season is the daily cycle: the volume per window in each hour of the day (UTC) as a
	// multiple of Level, 0 meaning not learned yet (taken as 1).
	Season [Slots]float16
}

// float16 is a bfloat16: the top half of a float32. Three significant digits are plenty
// for a seasonal factor.
type float16 uint16

func toF16(f float64) float16 {
	b := math.Float32bits(float32(f))
	return float16((b + 0x7fff + b>>16&1) >> 16)
}

func (h float16) float() float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// slot is the hour of the day (UTC) of window epoch.
func (c Config) slot(epoch int64) int {
	perDay := int64(24 * time.Hour / c.Window)
	return int(((epoch%perDay)+perDay)%perDay) * Slots / int(perDay)
}

func (p *Profile) season(s int) float64 {
	if v := p.Season[s].float(); v > 0 {
		return v
	}
	return 1
}

// Baseline is the team's usual volume in window epoch: Level × the season of its hour.
func (c Config) Baseline(p *Profile, epoch int64) float64 {
	return float64(p.Level) * p.season(c.slot(epoch))
}

// Learned reports whether p holds MinHistory of history.
func (c Config) Learned(p *Profile) bool {
	return time.Duration(p.Windows)*c.Window >= c.MinHistory
}

// Threshold is the learned threshold of window epoch, clamp(Factor × baseline, Floor,
// Ceiling), and true; or false while the team has too little history (the static
// threshold applies).
func (c Config) Threshold(p *Profile, epoch int64) (float64, bool) {
	if !c.Learned(p) {
		return 0, false
	}
	t := max(c.Factor*c.Baseline(p, epoch), c.Floor)
	if c.Ceiling > 0 {
		t = min(t, c.Ceiling)
	}
	return t, true
}

// Fold learns window epoch's final count. Windows must be folded in order, each once:
// a window at or before p.Epoch is ignored; windows skipped since p.Epoch are folded as
// empty (the team sent nothing then). It reports whether the window was over its learned
// threshold (a spike, not learned from).
func (c Config) Fold(p *Profile, epoch int64, count float64) (spike bool) {
	if p.Windows > 0 && epoch <= p.Epoch {
		return false
	}
	if p.Windows > 0 {
		// Silent windows between: at most a day of them matters (the level has long
		// decayed by then); beyond, fold one silent window per hour slot.
		gap := epoch - p.Epoch - 1
		perDay := int64(24 * time.Hour / c.Window)
		for e := epoch - min(gap, perDay); e < epoch; e++ {
			c.fold(p, e, 0)
		}
	}
	return c.fold(p, epoch, count)
}

func (c Config) fold(p *Profile, epoch int64, count float64) bool {
	p.Epoch = epoch
	if p.Windows < math.MaxUint32 {
		p.Windows++
	}
	s := c.slot(epoch)
	if p.Windows == 1 {
		p.Level = float32(count)
		return false
	}
	base := float64(p.Level) * p.season(s)
	if c.Learned(p) {
		if thr, _ := c.Threshold(p, epoch); count >= thr {
			return true // a spike: not learned from
		}
		count = min(count, c.Clip*max(base, c.Floor/c.Factor))
	}
	level := float64(p.Level)
	// Per-window weights of the two exponential averages: 1 − 2^(−window / half-life);
	// a slot sees one window in Slots × ... of them, so its weight counts its own windows.
	wl := -math.Expm1(-math.Ln2 * float64(c.Window) / float64(c.LevelHalfLife))
	perSlotPerDay := float64(time.Hour / c.Window)
	ws := -math.Expm1(-math.Ln2 / (perSlotPerDay * float64(c.SeasonHalfLife) / float64(24*time.Hour)))
	level += wl * (count/p.season(s) - level)
	p.Level = float32(max(level, 0))
	if level > 0 {
		// Early on (no season yet) learn the season fast: the first day's shape.
		if !c.Learned(p) {
			ws = max(ws, 1/perSlotPerDay)
		}
		sv := p.season(s)
		sv += ws * (count/level - sv)
		p.Season[s] = toF16(max(sv, 1e-3))
	}
	return false
}

// FoldScheduled folds window f, one NextFold named for p, with its final count: FoldSpan
// over the windows since p's last fold, up to two fold periods. A fleet stores a fold only
// if one of the gates that made it writes it (each does with a probability, about two of
// them), so now and then none does: the next fold then covers both periods at the observed
// rate instead of learning the first as silence, which would pull the level down (by
// about 1 − 2^(−period / half-life) each time). Longer gaps are silence, as Fold takes
// them: a team no gate looked at was not sending.
func (c Config) FoldScheduled(p *Profile, f int64, count float64) (spike bool) {
	span := c.FoldPeriod(p)
	if p.Windows > 0 {
		span = min(max(span, f-p.Epoch), 2*span)
	}
	return c.FoldSpan(p, f, count, span)
}

// FoldSpan learns window epoch's final count as the volume of the span windows ending at
// epoch, of which only the last was observed: each earlier one is folded at the same
// deseasonalised rate (count scaled by its hour's season against epoch's), not as silence.
// It lets a caller fold a team every span windows instead of every window, at the cost of
// learning from one window in span; windows before the span since p.Epoch are folded as
// empty, as Fold does. A span of 1 or less is Fold. It reports whether the observed window
// was over its learned threshold: then so is the span, which is not learned from.
func (c Config) FoldSpan(p *Profile, epoch int64, count float64, span int64) (spike bool) {
	if p.Windows > 0 && epoch <= p.Epoch {
		return false
	}
	if span <= 1 || p.Windows == 0 {
		return c.Fold(p, epoch, count)
	}
	first := max(epoch-span+1, p.Epoch+1)
	// The rate each window of the span is taken at: the seasons as they were before the
	// span, so that folding it does not feed back into itself.
	rate := count / p.season(c.slot(epoch))
	var seasons [Slots]float64
	for s := range seasons {
		seasons[s] = p.season(s)
	}
	obs := c.slot(epoch)
	for e := first; e < epoch; e++ {
		// A window in the observed one's hour is taken at its count: the season of that
		// hour then learns as fast as when every window is folded.
		n := count
		if s := c.slot(e); s != obs {
			n = rate * seasons[s]
		}
		c.Fold(p, e, n)
	}
	return c.Fold(p, epoch, count)
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

// Peak is the team's highest baseline over the day: Level × its largest hourly season.
func (c Config) Peak(p *Profile) float64 {
	top := 0.0
	for s := range Slots {
		top = max(top, p.season(s))
	}
	return float64(p.Level) * top
}

// ProfileSize is the length of a Profile's binary form.
const ProfileSize = 64

// ErrBadProfile is returned (wrapped) by UnmarshalBinary for data that is not a profile.
var ErrBadProfile = errors.New("spike: not a profile")

// MarshalBinary encodes p in 64 bytes, little-endian: Epoch (8 bytes, first, so that a
// compare-and-set can compare the epoch alone), Windows (4), Level's float32 bits (4),
// then each Season's 2 bytes.
func (p *Profile) MarshalBinary() ([]byte, error) {
	return p.AppendBinary(make([]byte, 0, ProfileSize))
}

// AppendBinary appends p's binary form (MarshalBinary) to b.
func (p *Profile) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(p.Epoch))
	b = binary.LittleEndian.AppendUint32(b, p.Windows)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(p.Level))
	for _, s := range p.Season {
		b = binary.LittleEndian.AppendUint16(b, uint16(s))
	}
	return b, nil
}

// UnmarshalBinary decodes MarshalBinary's form. It refuses data of another length and a
// level that is negative or not finite, leaving p unchanged.
func (p *Profile) UnmarshalBinary(b []byte) error {
	if len(b) != ProfileSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadProfile, len(b), ProfileSize)
	}
	level := math.Float32frombits(binary.LittleEndian.Uint32(b[12:]))
	if !(level >= 0) || math.IsInf(float64(level), 0) {
		return fmt.Errorf("%w: level %v", ErrBadProfile, level)
	}
	var q Profile
	q.Epoch = int64(binary.LittleEndian.Uint64(b))
	q.Windows = binary.LittleEndian.Uint32(b[8:])
	q.Level = level
	for i := range q.Season {
		q.Season[i] = float16(binary.LittleEndian.Uint16(b[16+2*i:]))
	}
	*p = q
	return nil
}
