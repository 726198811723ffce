package limit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/spike"
)

// Mode says which records count toward a team's window.
type Mode uint8

const (
	// Divert counts every record, allowed or not, so the window measures the team's offered
	// rate: a team above its threshold goes wholly to overflow until its rate falls back
	// under, which keeps each team in one lane (and in order) downstream. The default.
	Divert Mode = iota
	// Cap counts only allowed records, so each team gets up to its threshold per window and
	// the excess overflows, as with a quota.
	Cap
)

// String returns the mode's configuration name.
func (m Mode) String() string {
	switch m {
	case Divert:
		return "divert"
	case Cap:
		return "cap"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode reads a mode's configuration name ("divert" or "cap").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "divert", "":
		return Divert, nil
	case "cap":
		return Cap, nil
	}
	return 0, fmt.Errorf("%w: %q (want divert or cap)", ErrBadMode, s)
}

// UnmarshalText lets configuration decoders read a Mode.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Clock says which time a record is counted and judged at.
type Clock uint8

const (
	// WallClock counts and judges every record at the time it is checked. The default.
	WallClock Clock = iota
	// EventClock counts and judges a record in the window of its own timestamp (see
	// CheckEventAt): a gate replaying a backlog at ten times the normal rate sees each
	// window's traffic in its own window, not ten windows' worth in one.
	EventClock
)

// String returns the clock's configuration name.
func (c Clock) String() string {
	switch c {
	case WallClock:
		return "wall"
	case EventClock:
		return "event"
	}
	return fmt.Sprintf("Clock(%d)", uint8(c))
}

// ParseClock reads a clock's configuration name ("wall" or "event").
func ParseClock(s string) (Clock, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "wall", "":
		return WallClock, nil
	case "event":
		return EventClock, nil
	}
	return 0, fmt.Errorf("%w: %q (want wall or event)", ErrBadClock, s)
}

// UnmarshalText lets configuration decoders read a Clock.
func (c *Clock) UnmarshalText(b []byte) error {
	v, err := ParseClock(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// MaxThreshold is the largest threshold a team can have: thresholds share a word with a
// generation number so that a check reads a team's threshold with one atomic load.
const MaxThreshold = 1<<thresholdBits - 1

// Errors a caller can test with errors.Is.
var (
	ErrBadMode      = errors.New("limit: unknown mode")
	ErrBadClock     = errors.New("limit: unknown clock")
	ErrBadThreshold = errors.New("limit: threshold out of range")
	ErrBadConfig    = errors.New("limit: invalid configuration")
)

// Config holds the limiter's settings. The zero value of a field means its default.
type Config struct {
	// Window is the length of one epoch of the shared counter. Default 60 s.
	Window time.Duration
	// Threshold is the default limit per window for a team without an override.
	// Default 1,000,000.
	Threshold int64
	// Overrides maps a team to its own threshold. It can be replaced later with
	// SetOverrides.
	Overrides map[string]int64
	// Mode chooses which records count. Default Divert.
	Mode Mode
	// Clock chooses the time a record is counted and judged at. Default WallClock; with
	// EventClock, records are checked with CheckEventAt.
	Clock Clock
	// MaxEventAge bounds how old a record's timestamp may be under EventClock: an older
	// one is counted and judged as if it were MaxEventAge old, and a timestamp more than
	// MaxFutureSkew ahead of the wall clock as if it were now. Both are counted
	// (gate_limiter_event_time_clamped_total). The bound also sets how many windows of
	// state are kept, and how long Redis keeps each window's counts. Default 15 min.
	MaxEventAge time.Duration

	// SyncInterval is the base read cadence: a normal-pressure team is read this often,
	// low and idle ones every 4 × SyncInterval, hot ones every ½ × SyncInterval. Default
	// 15 s. Shorter means fresher views and more Redis reads.
	SyncInterval time.Duration
	// HotEveryTick reads hot teams (pressure ≥ 80%) on every tick instead of every
	// ½ × SyncInterval. Default on (see DefaultHotEveryTick): it cuts the time a fleet takes
	// to divert a team that jumps over its limit from ~20 s to ~2 s for a few extra reads
	// of busy teams only.
	HotEveryTick *bool
	// PendingReadShare reads a team on the next tick once the records counted locally
	// since its last read reach this share of its threshold ÷ the fleet's size
	// (SetFleetSize). Default 0.05; negative disables. Smaller catches a jump sooner and
	// costs more reads.
	PendingReadShare float64
	// SyncFloor is the pressure below which an idle team is never read, so a flood of
	// teams seen once does not become a flood of reads. Default 0.01 (1% of the threshold).
	SyncFloor float64
	// ColdWriteInterval is how often a cold team's counts are handed to the tick to be
	// written, instead of every tick. Cold: in the idle tier (pressure under 10%), not due
	// for a read, and fewer counts waiting than ColdWriteShare of its threshold; any other
	// team's counts go every tick. Most of a Zipf workload's teams are cold and send a
	// record or two a second: writing each once a window instead of every second is most
	// of what the fleet's Redis is spared (docs/benchmarks.md). Teams are spread over the
	// interval by their hash, so each tick writes a share.
	//
	// At the default, one window (wall clock), a cold team's point hands over the counts
	// of the windows that have ended and keeps the current window's for its next point:
	// each window's count is then one write and one key created, not two (one on each
	// side of the window's start): the tick cost Redis a quarter less (0.0526 → 0.0394
	// CPU-s per million events at 100k Zipf teams, docs/benchmarks.md). The cost: other
	// gates see a cold team's counts from here up to two windows late (up to one at a
	// shorter interval, which hands over everything), which matters little below 10% of
	// its threshold and is at most ColdWriteShare of it per gate; the moment it warms up
	// (or a read of it is due) its counts go at once.
	// Default Window; at most Window; negative writes every team every tick.
	ColdWriteInterval time.Duration
	// ColdWriteShare: a cold team whose waiting counts reach this share of its threshold
	// is written on the next tick. It bounds what each gate holds back of a team that is
	// rising but not yet read. Default 0.005.
	ColdWriteShare float64

	// DivertHold and DivertRelease make a diverted team stay diverted (Divert mode, wall
	// clock; Cap admits up to the threshold by design and is unchanged). Once a team's
	// level reaches its threshold it is held in overflow until its level has stayed under
	// DivertRelease × its threshold for DivertHold, on every gate: a gate holding a team
	// says so through the shared store on each tick while the team is over the release
	// level, and a gate that reads that is held too (hold.go). Without it a team near its
	// limit switches between the accepted and overflow topics on every crossing, and its
	// events, split between a fast and a slow pipeline, are reordered downstream.
	//
	// DivertHold: default Window; negative holds nothing past the release level (and
	// nothing is shared). Longer keeps a team that calmed down in the slower overflow
	// pipeline longer; shorter lets a team whose bursts come further apart than the hold
	// switch on each. DivertRelease: default 0.8, in (0, 1]; 1 releases as soon as the
	// level is under the threshold, as before (with a negative hold: today's divert).
	// Lower keeps a team just under its limit diverted.
	DivertHold    time.Duration
	DivertRelease float64

	// Adaptive, when set, learns each team's threshold from its own history (internal/spike,
	// adaptive.go): clamp(Factor × baseline, Floor, Ceiling) once the team has MinHistory
	// of it, shared by the fleet through the store. Precedence: an override, then the
	// learned threshold, then Threshold (a team with too little history). nil: static, the
	// check unchanged. Its Window is this Config's (zero) and must divide an hour; the wall
	// clock only.
	Adaptive *spike.Config

	// SketchWidth, when positive, counts keys below the fleet floor in a sketch of this
	// many counters a row instead of caching them (sketch.go): 3 × 4 × SketchWidth × 4
	// bytes of memory, fixed (DefaultSketchWidth: 3 MiB). Such keys are then neither
	// written nor read. Zero or negative caches every key: each is written, and read above
	// SyncFloor ÷ the fleet's size. Not used with Adaptive or EventClock, which cache every
	// key.
	SketchWidth int

	// KeyCardinality, with SketchWidth, bounds the distinct keys one team (a composite
	// key's first part) may have in a window before it is taken to be rotating identities
	// (cardinality.go), and OnCardinality says what becomes of its records then. Zero: no
	// bound.
	KeyCardinality int64
	OnCardinality  CardinalityAction

	// Capacity bounds how many teams are cached. Default 300,000.
	Capacity int
	// TTL is the longest a cached team's global view may go unread: past it, the team is
	// read again from scratch on the next tick. Unlike deleting and re-creating the entry,
	// this lets nothing through while the view is rebuilt. Default 600 s.
	TTL time.Duration
	// IdleTimeout expires a team not checked for this long. Default 300 s.
	IdleTimeout time.Duration
	// Shards is the number of independently locked parts of the cache, rounded up to a
	// power of two. Default 256.
	Shards int

	// HashSeed seeds the hash a key is looked up by; the zero Seed is a random one. A
	// gate gives its limiters and its outcome aggregates one seed, so that the hash of a
	// record's team, made once for its outcome row, serves the check too
	// (CheckTallyHashed).
	HashSeed maphash.Seed
}

// Defaults for Config.
const (
	DefaultWindow           = 60 * time.Second
	DefaultThreshold        = 1_000_000
	DefaultSyncInterval     = 15 * time.Second
	DefaultHotEveryTick     = true
	DefaultPendingReadShare = 0.05
	DefaultSyncFloor        = 0.01
	DefaultColdWriteShare   = 0.005
	DefaultDivertRelease    = 0.8
	DefaultCapacity         = 300_000
	DefaultTTL              = 600 * time.Second
	DefaultIdleTimeout      = 300 * time.Second
	DefaultShards           = 256
	DefaultMaxEventAge      = 15 * time.Minute

	// MaxFutureSkew is how far ahead of the wall clock a record's timestamp may be before
	// it is clamped to now: producers' clocks drift, and a record stamped a few seconds
	// ahead is not an error worth counting.
	MaxFutureSkew = 5 * time.Second
)

// minShardKeys is the capacity a shard keeps at least, by default: fewer shards for a
// small capacity (Config.Shards).
const minShardKeys = 16

// MaxEventWindows bounds MaxEventAge / Window with the event clock: one slot of state
// per window is kept. CheckEventAge applies it.
const MaxEventWindows = 1 << 20

// CheckEventAge reports a MaxEventAge too long for window: more than MaxEventWindows
// windows of it.
func CheckEventAge(maxEventAge, window time.Duration) error {
	if window > 0 && maxEventAge/window > MaxEventWindows {
		return fmt.Errorf("max event age %s: at most %d windows of %s", durtext.String(maxEventAge), MaxEventWindows, durtext.String(window))
	}
	return nil
}

// Validate reports what New would refuse in c.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults fills zero fields and checks the result.
func (c Config) withDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.HotEveryTick == nil {
		v := DefaultHotEveryTick
		c.HotEveryTick = &v
	}
	if c.PendingReadShare == 0 {
		c.PendingReadShare = DefaultPendingReadShare
	}
	if c.SyncFloor == 0 {
		c.SyncFloor = DefaultSyncFloor
	}
	if c.ColdWriteInterval == 0 {
		c.ColdWriteInterval = c.Window
	}
	if c.ColdWriteShare == 0 {
		c.ColdWriteShare = DefaultColdWriteShare
	}
	if c.Clock == EventClock {
		// Holds are kept per team, and an event-clock team has one entry per window: not
		// supported yet, so nothing is held unless asked for (an error below).
		if c.DivertHold == 0 {
			c.DivertHold = -1
		}
		if c.DivertRelease == 0 {
			c.DivertRelease = 1
		}
	}
	if c.DivertHold == 0 {
		c.DivertHold = c.Window
	}
	if c.DivertRelease == 0 {
		c.DivertRelease = DefaultDivertRelease
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Shards == 0 {
		// At least minShardKeys of the capacity a shard: a full cache evicts from the
		// shard a new key lands in, choosing among its keys, and a capacity spread thinner
		// (GATE_CACHE_CAPACITY=10 over 256 shards) left a shard one key or none to choose
		// from, a hot team's with its level among them (TestCapacityKeepsTheHotKeyOfASecond).
		c.Shards = DefaultShards
		for c.Shards > 1 && c.Capacity/c.Shards < minShardKeys {
			c.Shards /= 2
		}
	}
	if c.MaxEventAge == 0 {
		c.MaxEventAge = DefaultMaxEventAge
	}
	var errs []error
	if c.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("window %s: must be at least 1ms", durtext.String(c.Window)))
	}
	if err := checkThreshold(c.Threshold); err != nil {
		errs = append(errs, fmt.Errorf("default threshold: %w", err))
	}
	for team, t := range c.Overrides {
		if err := checkThreshold(t); err != nil {
			errs = append(errs, fmt.Errorf("override for team %q: %w", team, err))
		}
	}
	if c.Mode != Divert && c.Mode != Cap {
		errs = append(errs, fmt.Errorf("%w: %d", ErrBadMode, c.Mode))
	}
	if c.Clock != WallClock && c.Clock != EventClock {
		errs = append(errs, fmt.Errorf("%w: %d", ErrBadClock, c.Clock))
	}
	if c.MaxEventAge < 0 {
		errs = append(errs, fmt.Errorf("max event age %s: must be positive", durtext.String(c.MaxEventAge)))
	} else if c.Clock == EventClock && c.Window >= time.Millisecond {
		// Only the event clock keeps a slot per window back to MaxEventAge; the wall
		// clock never reads it.
		if err := CheckEventAge(c.MaxEventAge, c.Window); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("sync interval %s: must be positive", durtext.String(c.SyncInterval)))
	}
	if c.ColdWriteInterval > c.Window {
		// Past a window a cold count could be displaced by the next epoch's in its slot.
		errs = append(errs, fmt.Errorf("cold write interval %s: must not exceed the window %s", durtext.String(c.ColdWriteInterval), durtext.String(c.Window)))
	}
	if c.ColdWriteShare < 0 || c.ColdWriteShare > 1 {
		errs = append(errs, fmt.Errorf("cold write share %v: must be within 0..1", c.ColdWriteShare))
	}
	if c.PendingReadShare > 1 {
		errs = append(errs, fmt.Errorf("pending read share %g: must be at most 1", c.PendingReadShare))
	}
	if c.SyncFloor < 0 || c.SyncFloor >= tierLow {
		errs = append(errs, fmt.Errorf("sync floor %g: must be in [0, %g)", c.SyncFloor, tierLow))
	}
	if c.DivertRelease <= 0 || c.DivertRelease > 1 {
		errs = append(errs, fmt.Errorf("divert release %g: must be in (0, 1]", c.DivertRelease))
	}
	if c.Clock == EventClock && (c.DivertHold > 0 || c.DivertRelease < 1) {
		errs = append(errs, fmt.Errorf("divert hold %s, release %g: not supported with the event clock (hold < 0 and release 1 only)", durtext.String(c.DivertHold), c.DivertRelease))
	}
	if c.Adaptive != nil {
		a := *c.Adaptive
		if a.Window == 0 {
			a.Window = c.Window
		}
		switch a, err := a.WithDefaults(); {
		case err != nil:
			errs = append(errs, fmt.Errorf("adaptive thresholds: %w", err))
		case a.Window != c.Window:
			errs = append(errs, fmt.Errorf("adaptive thresholds: window %s, limiter's %s: must be the same", durtext.String(a.Window), durtext.String(c.Window)))
		case c.Clock == EventClock:
			errs = append(errs, errors.New("adaptive thresholds: not supported with the event clock"))
		default:
			c.Adaptive = &a
		}
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("capacity %d: must be at least 1", c.Capacity))
	}
	if c.TTL < 0 || c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("ttl %s, idle timeout %s: must be positive", durtext.String(c.TTL), durtext.String(c.IdleTimeout)))
	} else if c.IdleTimeout > 0 && c.IdleTimeout < time.Second {
		// Entries keep when they were last seen in whole seconds (sweep): under a second,
		// every entry expired at every sweep.
		errs = append(errs, fmt.Errorf("idle timeout %s: must be at least 1s", durtext.String(c.IdleTimeout)))
	}
	if c.KeyCardinality < 0 {
		errs = append(errs, fmt.Errorf("key cardinality %d: must not be negative", c.KeyCardinality))
	}
	if c.OnCardinality > CardinalityTag {
		errs = append(errs, fmt.Errorf("on cardinality %d: want collapse, overflow or tag", c.OnCardinality))
	}
	if c.SketchWidth > 1<<26 {
		errs = append(errs, fmt.Errorf("sketch width %d: at most %d", c.SketchWidth, 1<<26))
	}
	if c.Shards < 1 || c.Shards > 1<<16 {
		errs = append(errs, fmt.Errorf("shards %d: must be in [1, 65536]", c.Shards))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	for c.Shards&(c.Shards-1) != 0 {
		c.Shards++
	}
	return c, nil
}

func checkThreshold(t int64) error {
	if t < 1 || t > MaxThreshold {
		return fmt.Errorf("%w: %d (want 1..%d)", ErrBadThreshold, t, int64(MaxThreshold))
	}
	return nil
}
