package config

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/spike"
)

// Limiter is Config's variables for the limiter, its overrides, cache and clock.
type Limiter struct {
	// The limiter (internal/limit).
	LimitMode          limit.Mode    `envconfig:"LIMIT_MODE" default:"divert" desc:"Which records count toward a team's window (default divert): divert counts every record, so a team over its threshold goes wholly to overflow and keeps its order there, while cap counts only accepted records, so a team gets up to its threshold per window but its records split between the two topics while it is over."`
	DivertHold         divertHold    `envconfig:"DIVERT_HOLD" default:"" desc:"In divert mode, how long a team that reached its threshold stays diverted once its level is back under GATE_DIVERT_RELEASE of it, on every gate (a held team's flag is shared through Redis in the tick's own commands), or 0 for no hold; one GATE_WINDOW when unset (default none), for each limit of GATE_LIMITS too, and with a rules file a rule's first window for each of its limits. A team swinging around its limit then stays in the overflow topic instead of switching on every crossing, which reorders its events downstream, and a longer hold keeps a team that calmed down in the slower overflow pipeline longer. Not supported with GATE_CLOCK=event (set 0 or leave unset: nothing is held); ignored in cap mode."`
	DivertRelease      float64       `envconfig:"DIVERT_RELEASE" default:"0.8" desc:"In divert mode, the share of its threshold a held team's level must stay under for GATE_DIVERT_HOLD before it is released, above 0 and at most 1 (default 0.8); 1 with GATE_DIVERT_HOLD=0 is the divert of 0.1.0, switching the moment the level crosses the threshold either way, and lower keeps a team just under its limit diverted. Ignored with GATE_CLOCK=event, and in cap mode but for one use: with GATE_THRESHOLD_MODE=adaptive a spike ends when its level is under this share of the threshold it started over."`
	Window             time.Duration `envconfig:"WINDOW" default:"60s" desc:"Length of one epoch of the fleet-wide counter, the period a threshold applies to (default 60s, at least 2ms, at most 8784h: 366 days); a longer window smooths bursts but remembers an overrun for longer."`
	Threshold          int64         `envconfig:"THRESHOLD" default:"1000000" desc:"Events per window a team may send across the whole fleet before it is limited, for teams without an override (default 1000000); lower protects downstream sooner, higher lets bigger bursts through."`
	ThresholdMode      thresholdMode `envconfig:"THRESHOLD_MODE" default:"static" desc:"How a team's threshold is set: static (GATE_THRESHOLD, or its override) or adaptive (learned from the team's own history: clamp(GATE_ADAPTIVE_FACTOR x its usual volume per window at that hour of the day and day of the week, GATE_ADAPTIVE_FLOOR, GATE_ADAPTIVE_CEILING), shared by the fleet through Redis, once it has GATE_ADAPTIVE_MIN_HISTORY of history; GATE_THRESHOLD until then) (default static); an override still wins, adaptive needs a GATE_WINDOW that divides an hour and the wall clock, and with GATE_LIMITS it applies to the primary limit only. Adaptive catches a team sending far more than it usually does, whatever its size, for a profile per team in Redis (128 bytes, about 300 of Redis memory with its key and expiry) and a few more keys in the tick's reads."`
	AdaptiveFactor     float64       `envconfig:"ADAPTIVE_FACTOR" default:"4" desc:"With GATE_THRESHOLD_MODE=adaptive, a team's threshold as a multiple of its usual volume, above 1.5 and at most 1000 (default 4); lower catches smaller spikes and diverts more of a team's own noise, higher lets spikes under it through."`
	AdaptiveFloor      int64         `envconfig:"ADAPTIVE_FLOOR" default:"100" desc:"With GATE_THRESHOLD_MODE=adaptive, the lowest learned threshold per window (default 100), so that a small team's noise (a few events a window, often none) is no spike; higher spares more small teams, lower protects against them sooner."`
	AdaptiveCeiling    int64         `envconfig:"ADAPTIVE_CEILING" default:"0" desc:"With GATE_THRESHOLD_MODE=adaptive, the highest learned threshold per window, 0 for none or at least GATE_ADAPTIVE_FLOOR (default 0); it bounds what a very large team may send, as GATE_THRESHOLD does in static mode."`
	AdaptiveHalfLife   time.Duration `envconfig:"ADAPTIVE_HALF_LIFE" default:"72h" desc:"With GATE_THRESHOLD_MODE=adaptive, how fast a team's learned level follows its volume (the daily and weekly cycles taken out): a change is half learned after this long, at least GATE_WINDOW (with a rules file, each adaptive rule's first window) (default 72h: a quiet weekend moves it less than the week's profile learns the weekend, and growth of 50% a week is followed); shorter follows growth sooner but lets a weekend pull a business-day team's threshold down, longer is slower to learn a lasting step under GATE_ADAPTIVE_FACTOR. A step over it is learned by GATE_ADAPTIVE_MAX_SPIKE."`
	AdaptiveMaxSpike   time.Duration `envconfig:"ADAPTIVE_MAX_SPIKE" default:"3h" desc:"With GATE_THRESHOLD_MODE=adaptive, how long a team may be in a spike (over its learned threshold, then over 1.5 x its usual volume) before the spike ends: it is re-learned at the volume it has sent lately and accepted again (a lasting step up, such as a launch or a large customer, is not a spike for ever), from 1h plus two GATE_WINDOWs (with a rules file, two of each adaptive rule's first window) to 168h (default 3h: an hour over the longest real spikes, 10 to 120 minutes, which are still caught whole for a team folded every window; docs/design.md says when a small team's are not); GATE_THRESHOLD's overrides and GATE_ADAPTIVE_CEILING still cap the team."`
	AdaptiveMinHistory time.Duration `envconfig:"ADAPTIVE_MIN_HISTORY" default:"24h" desc:"With GATE_THRESHOLD_MODE=adaptive, how much history a team needs before its threshold is learned, GATE_THRESHOLD applying until then, at least GATE_WINDOW (with a rules file, each adaptive rule's first window) (default 24h: one whole daily cycle, so that a team's evening peak is known before it can be taken for a spike)."`
	Limits             limitList     `envconfig:"LIMITS" default:"" desc:"Several limits per team, as comma-separated window:threshold pairs such as 1m:1000000,1h:20000000 (default none), GATE_WINDOW and GATE_THRESHOLD being the one limit without it; the first pair is the primary limit, in place of GATE_WINDOW and GATE_THRESHOLD (which must then be unset), keyed {prefix}:{team}:{epoch} as ever, and each further one, a whole number of seconds longer than GATE_TICK_INTERVAL, at most 8784h (366 days) and distinct from the others, has its own keys {prefix}:w{seconds}:{team}:{epoch} ({prefix}/bytes:... for both with GATE_COST=bytes); a record overflows when any limit is over (header gate-overflow-limit names which); an override (GATE_OVERRIDES or live) sets a team's primary threshold and scales each further limit by the same factor, rounded, at least 1."`
	RulesFile          string        `envconfig:"RULES_FILE" default:"" desc:"A YAML file of rules (docs/rules.md), each with its own key, match, limits, mode, cost, threshold mode, action (overflow, tag, topic:NAME or drop), force list and shadow flag, in place of the one limit of GATE_KEY_FROM (default none); without it that one limit is kept, with its keys as ever; every problem in it stops the gate at start naming its line and field; each gate reads it again every 5s, counted from its own start, and puts a valid change in use at that read, without a restart; a change it cannot use (a problem in the file, or a rule's topic new to it that does not exist or refuses the gate's writes: one the rules in use send to already is watched instead) is refused, logged and counted in gate_rules_loads_total, and the rules in use stay; each rule's keys are {prefix}:rule:{name}:{key}:{epoch} ({prefix}:rule:{name}/bytes:... with cost: bytes) and its live overrides the hash {prefix}:rule:{name}:overrides; GATE_KEY_FROM, GATE_WINDOW, GATE_THRESHOLD, GATE_LIMITS, GATE_LIMIT_MODE, GATE_COST, GATE_THRESHOLD_MODE, GATE_OVERRIDES and GATE_FORCE_OVERFLOW must then be unset."`
	Overrides          overrideList  `envconfig:"OVERRIDES" default:"" desc:"Per-team thresholds as comma-separated team=limit pairs such as team1=5000,team2=200000 (default none); teams not listed use GATE_THRESHOLD, and the list is the base the live overrides (GATE_OVERRIDES_REFRESH) are laid over; its length costs nothing per record."`
	OverridesRefresh   time.Duration `envconfig:"OVERRIDES_REFRESH" default:"60s" desc:"How often every gate reads the live per-team limits from the hash {prefix}:overrides in the first Redis instance, managed with gate overrides set/delete (default 60s); the live set is laid over GATE_OVERRIDES (a team in it takes its live limit, one deleted from it falls back to GATE_OVERRIDES or GATE_THRESHOLD), and a Redis error or a missing hash keeps the current limits."`

	// The live overrides' size (internal/overrides).
	OverridesMaxEntries int `envconfig:"OVERRIDES_MAX_ENTRIES" default:"1000000" desc:"Most teams the live overrides hash may hold (default 1000000): a larger one is not read, every gate keeping the limits in force and counting gate_overrides_refresh_errors_total{cause=too_large}, and gate overrides list refusing it too; a million teams take each gate about a second to read, in commands of about a millisecond each, and a few hundred MB of memory."`

	SyncInterval      time.Duration `envconfig:"SYNC_INTERVAL" default:"15s" desc:"How often a team at normal pressure (50-80% of its threshold) is read from Redis, low teams (10-50%, and idle ones above GATE_SYNC_FLOOR) every 4 times that and hot ones (80% or more) every tick, every half of it with GATE_HOT_EVERY_TICK=false (default 15s, no shorter than GATE_TICK_INTERVAL, at most 8784h: 366 days); shorter gives every gate a fresher fleet-wide view for more Redis reads."`
	HotEveryTick      bool          `envconfig:"HOT_EVERY_TICK" default:"true" desc:"Read teams at 80% of their threshold or more on every tick instead of every half GATE_SYNC_INTERVAL (default true); it cuts the time a fleet takes to divert a team that jumps over its limit from about 20s to about 2s, for a few extra reads of busy teams only."`
	PendingReadShare  float64       `envconfig:"PENDING_READ_SHARE" default:"0.05" desc:"Read a team on the next tick once the events this gate counted since its last read reach this share of the team's threshold divided by the gates in the fleet, above 0 and at most 1, or never if negative (default 0.05); smaller catches a sudden jump sooner and costs more reads."`
	SyncFloor         float64       `envconfig:"SYNC_FLOOR" default:"0.01" desc:"Pressure (level / threshold, above 0 and below 0.1) under which a team seen only in passing is never read from Redis (default 0.01), divided by the gates in the fleet; a rule keyed by several fields (a user within a team) neither caches nor writes a key under it (docs/design.md). Higher keeps a flood of one-off teams from becoming a flood of reads, at the cost of judging more small teams on local counts alone."`
	ColdWriteInterval time.Duration `envconfig:"COLD_WRITE_INTERVAL" default:"" desc:"How often a cold team's counts are written to Redis instead of every tick, a cold team being one under 10% of its threshold, not due for a read, with less than 0.5% of its threshold waiting, at most GATE_WINDOW, once per GATE_WINDOW when unset or 0 (default none), each window's counts then going in one write after the window ends; most teams of a long-tailed workload are cold, and writing each once a window is most of what cuts the Redis work per gate to about an eighth (docs/benchmarks.md); other gates see a cold team's counts up to two windows late (one at a shorter interval), at most 0.5% of its threshold per gate, and GATE_TICK_INTERVAL writes every team on every tick."`
	CacheCapacity     int           `envconfig:"CACHE_CAPACITY" default:"300000" desc:"Most teams kept in memory, by each limit (each limit of GATE_LIMITS and of a rule has its own cache, and with GATE_CLOCK=event each window its own), the least recently seen of a small sample being evicted past it (default 300000); a team at half its threshold or more, or held, is never evicted, and when every team sampled is one the cache grows past it (gate_limiter_cache_overfull_total); larger keeps more teams' fleet-wide views for more memory, and an evicted team that comes back starts again from first contact."`
	CacheTTL          time.Duration `envconfig:"CACHE_TTL" default:"600s" desc:"Longest a cached team's fleet-wide view may go without a read before it is read again (default 600s); shorter bounds how stale a quiet team's view gets, for more reads."`
	CacheIdleTimeout  time.Duration `envconfig:"CACHE_IDLE_TIMEOUT" default:"300s" desc:"A team not seen for this long is dropped from memory (default 300s, at least 1s), unless its last read found it at half its threshold or more, or it is held: such a team is kept until its window ages it out (with GATE_CLOCK=event, a window's entry is dropped after the shorter of this and two windows idle, at least 2s); shorter frees memory sooner, but a team that returns is treated as first contact until its next read."`
	Clock             clockSetting  `envconfig:"CLOCK" default:"wall" desc:"Which time a record is counted and judged at: wall (when the gate reads it) or event (its own timestamp, from GATE_EVENT_TIME_FROM), so that a gate catching up on a backlog at ten times the normal rate judges each window's traffic in its own window instead of sending well-behaved teams to overflow (default wall); with event, every gate keeps a window of state per window a team is seen in, and Redis keeps each window's counts GATE_MAX_EVENT_AGE longer."`
	EventTimeFrom     eventTimeFrom `envconfig:"EVENT_TIME_FROM" default:"timestamp" desc:"With GATE_CLOCK=event, where a record's time is read: timestamp (the Kafka record timestamp) or json:FIELD (a top-level or dotted field holding an RFC 3339 string or a Unix time in seconds, milliseconds, microseconds or nanoseconds as a JSON number, not a string) (default timestamp); a record whose field is missing, unreadable, before 1970 or 0 (a producer's unset time, such as Go's zero time 0001-01-01T00:00:00Z or an unset number 0) is judged at its record timestamp and counted in gate_event_time_unreadable_total, and one with no record timestamp (Kafka's -1 or 0: a message of format v0, or a client that set none) is judged now and counted there too."`
	MaxEventAge       time.Duration `envconfig:"MAX_EVENT_AGE" default:"15m" desc:"With GATE_CLOCK=event, the oldest a record's time may be: an older one is counted and judged as if it were this old, and one more than 5s ahead of the gate's clock as if it were now, both counted in gate_limiter_event_time_clamped_total (default 15m); longer lets a longer backlog replay in its own windows, for more Redis memory (each window's counts are kept this much longer); at most 8784h (366 days) and at most 1048576 of the shortest window; on the wall clock only its default is taken (any other value would bound nothing)."`
}

// The primary window as errors name it: GATE_WINDOW, or GATE_LIMITS's first pair's,
// GATE_WINDOW being unset beside it.
const (
	windowVar    = envPrefix + "_WINDOW"
	limitsWindow = envPrefix + "_LIMITS's first window"
)

// LimitConfig maps Config to the limiter's settings. Every field is set explicitly, so
// none falls back to a library default the operator did not see in `gate env`.
func (c Limiter) LimitConfig() limit.Config {
	hot := c.HotEveryTick
	return limit.Config{
		Window:            c.Window,
		Threshold:         c.Threshold,
		Overrides:         maps.Clone(map[string]int64(c.Overrides)),
		Mode:              c.LimitMode,
		SyncInterval:      c.SyncInterval,
		HotEveryTick:      &hot,
		PendingReadShare:  c.PendingReadShare,
		SyncFloor:         c.SyncFloor,
		ColdWriteInterval: c.ColdWriteInterval,
		DivertHold:        c.DivertHold.limit(c.Clock.Clock),
		DivertRelease:     c.divertRelease(),
		Capacity:          c.CacheCapacity,
		TTL:               c.CacheTTL,
		IdleTimeout:       c.CacheIdleTimeout,
		Clock:             c.Clock.Clock,
		MaxEventAge:       c.MaxEventAge,
		Adaptive:          c.adaptive(),
		// Every team is cached and written: teams are a bounded set, and operators' tools
		// (gate team, the overrides) read them. A rule whose key has several parts (a
		// user within a team), unbounded, counts its keys under the floor in a sketch
		// instead (RuleLimitConfigs).
		SketchWidth: 0,
	}
}

// OverridesConfig maps Config to the live overrides' settings; the caller adds Extra.
// The timeout bounds a whole read of the hash, in many short commands (each also bounded
// by GATE_REDIS_READ_TIMEOUT), so it is no shorter than overrides.DefaultTimeout.
func (c Config) OverridesConfig() overrides.Config {
	return overrides.Config{
		Key:        overrides.Key(c.RedisPrefix),
		Base:       maps.Clone(map[string]int64(c.Overrides)),
		Interval:   c.OverridesRefresh,
		Timeout:    max(overrides.DefaultTimeout, c.RedisDialTimeout+c.RedisWriteTimeout+c.RedisReadTimeout),
		MaxEntries: c.OverridesMaxEntries,
	}
}

// ExtraLimitConfigs returns one limiter configuration per GATE_LIMITS entry: the primary's
// settings with the entry's window and threshold, and the overrides scaled by
// threshold / the primary's threshold (GATE_LIMITS' first, which Load puts in Threshold:
// GATE_THRESHOLD itself is unset beside GATE_LIMITS), as the live ones are
// (overrides.Extra{Threshold: that threshold, Primary: Threshold}).
func (c Limiter) ExtraLimitConfigs() []limit.Config {
	out := make([]limit.Config, len(c.Limits))
	for i, e := range c.Limits {
		lc := c.LimitConfig()
		lc.Window, lc.Threshold = e.Window, e.Threshold
		lc.Overrides = overrides.Scale(lc.Overrides, e.Threshold, c.Threshold)
		// At most its window, as a rule's further limit's (RuleLimitConfigs).
		lc.ColdWriteInterval = min(lc.ColdWriteInterval, e.Window)
		if lc.DivertHold == 0 {
			// Unset: one GATE_WINDOW, the primary's, as for the primary: the limiter's
			// default, its own window, held a team a day after it calmed under a 24h limit.
			lc.DivertHold = c.Window
		}
		lc.Adaptive = nil // adaptive thresholds are the primary limit's only
		out[i] = lc
	}
	return out
}

// PrimaryKeyPrefix is the Redis key prefix of the gate without rules' primary limit:
// {prefix}, as ever, and with GATE_COST=bytes {prefix}/bytes. A count is in GATE_COST's
// unit, so a gate restarted with GATE_COST changed starts its counts afresh, as a bytes
// rule's does (RuleKeyPrefix): bytes read as events made every team far over its limit,
// diverted and held, and events read as bytes let every team through. The counters, hold
// flags and learned profiles are under it; the live overrides ({prefix}:overrides), the
// writers' sequence keys and the fleet's count stay under {prefix}, whatever the unit. No
// key under {prefix}/bytes is one under {prefix}: the next byte differs (':' or '/').
func (c Config) PrimaryKeyPrefix() string {
	if c.Cost.Cost == route.CostBytes {
		return c.RedisPrefix + "/bytes"
	}
	return c.RedisPrefix
}

// LimitKeyPrefix is the Redis key prefix of GATE_LIMITS entry i: {prefix}:w{seconds}
// ({prefix}/bytes:w{seconds} with GATE_COST=bytes, PrimaryKeyPrefix).
func (c Config) LimitKeyPrefix(i int) string {
	return c.PrimaryKeyPrefix() + ":w" + strconv.FormatInt(int64(c.Limits[i].Window/time.Second), 10)
}

// divertRelease is GATE_DIVERT_RELEASE for the limiter: 1 under the event clock, which
// keeps no holds.
func (c Limiter) divertRelease() float64 {
	if c.Clock.Clock == limit.EventClock {
		return 1
	}
	return c.DivertRelease
}

// validate checks the limiter's variables' values, each on its own, and what adaptive
// mode needs of them; window names the primary window (Config.validate).
func (c Limiter) validate(bad report, window string) {
	// Longer than a tick, whose interval is 1ms at least.
	if c.Window < 2*time.Millisecond {
		bad("WINDOW", "a duration of at least 2ms such as 60s")
	} else if c.Window > rules.MaxWindow {
		bad("WINDOW", "a duration of at most 8784h (366 days) such as 60s")
	}
	if c.Threshold < 1 || c.Threshold > limit.MaxThreshold {
		bad("THRESHOLD", fmt.Sprintf("a whole number from 1 to %d", int64(limit.MaxThreshold)))
	}
	// Low and idle teams are read every 4 x the interval: past a quarter of the longest
	// duration that overflowed, and they were read on every tick.
	if c.SyncInterval <= 0 || c.SyncInterval > rules.MaxWindow {
		bad("SYNC_INTERVAL", "a duration above zero of at most 8784h (366 days) such as 15s")
	}
	bad.positive("OVERRIDES_REFRESH", c.OverridesRefresh)
	bad.atLeast("OVERRIDES_MAX_ENTRIES", c.OverridesMaxEntries, 1)
	if c.PendingReadShare == 0 || c.PendingReadShare > 1 {
		bad("PENDING_READ_SHARE", "a share above 0 and at most 1 such as 0.05, or a negative number to disable")
	}
	if c.SyncFloor <= 0 || c.SyncFloor >= 0.1 {
		bad("SYNC_FLOOR", "a share above 0 and below 0.1 such as 0.01")
	}
	if c.DivertHold.d < 0 {
		bad("DIVERT_HOLD", "a duration of 0 or more such as 60s, or unset for one window")
	} else if c.DivertHold.d > 0 && c.Clock.Clock == limit.EventClock {
		bad("DIVERT_HOLD", "0 or unset with GATE_CLOCK=event (holds are not kept under the event clock)")
	}
	if c.DivertRelease <= 0 || c.DivertRelease > 1 {
		bad("DIVERT_RELEASE", "a share above 0 and at most 1 such as 0.8")
	}
	c.validateAdaptive(bad, window)
	// A rules file's windows are its rules' (GATE_WINDOW unset): each rule's limit takes
	// the interval capped at its own window (RuleLimitConfigs).
	if c.ColdWriteInterval < 0 || c.RulesFile == "" && c.windowOK() && c.ColdWriteInterval > c.Window {
		bad("COLD_WRITE_INTERVAL", fmt.Sprintf("a duration of at most the window (%s), such as 30s, or 0 or unset for once a window", durtext.String(c.Window)))
	}
	bad.atLeast("CACHE_CAPACITY", c.CacheCapacity, 1)
	bad.positive("CACHE_TTL", c.CacheTTL)
	// Entries keep the time they were last seen in whole seconds: under a second every
	// entry would expire at every sweep.
	if c.CacheIdleTimeout < time.Second {
		bad("CACHE_IDLE_TIMEOUT", "a duration of at least 1s such as 300s")
	}
	bad.positive("MAX_EVENT_AGE", c.MaxEventAge)
}

// validateBetween checks the rules between the limiter's variables, once every value is
// sane.
func (c Limiter) validateBetween(bad report) {
	if c.EventTimeFrom.String() != "timestamp" && c.Clock.Clock != limit.EventClock {
		bad("EVENT_TIME_FROM", "timestamp unless GATE_CLOCK=event")
	}
	// On the wall clock every record is judged when the gate reads it, whatever its age:
	// a bound on its age set there would do nothing, most likely with GATE_CLOCK=event
	// meant and missing.
	if c.MaxEventAge != limit.DefaultMaxEventAge && c.Clock.Clock != limit.EventClock {
		bad("MAX_EVENT_AGE", fmt.Sprintf("unset (or its default, %s) unless GATE_CLOCK=event: the wall clock judges every record when the gate reads it", durtext.String(limit.DefaultMaxEventAge)))
	}
	// The event clock keeps a window of state per window back to GATE_MAX_EVENT_AGE.
	if c.Clock.Clock == limit.EventClock {
		shortest := c.Window
		for _, e := range c.Limits {
			shortest = min(shortest, e.Window)
		}
		if limit.CheckEventAge(c.MaxEventAge, shortest) != nil {
			bad("MAX_EVENT_AGE", fmt.Sprintf("a duration of at most %d of the shortest window (%s)", limit.MaxEventWindows, durtext.String(shortest)))
		} else if c.MaxEventAge > rules.MaxWindow {
			// A key lives 2 × its window plus this, each at most a year: no overflow.
			bad("MAX_EVENT_AGE", "a duration of at most 8784h (366 days) such as 1h")
		}
	}
}

// windowOK reports whether GATE_WINDOW is one validate takes: the values checked against
// it are checked only then, so that a bad window is reported alone, not through
// variables the operator never set (nor, dividing an hour by a window of 0, a panic).
func (c Limiter) windowOK() bool {
	return c.Window >= time.Millisecond && c.Window <= rules.MaxWindow
}

// validateAdaptive checks the GATE_ADAPTIVE_* values, whatever the mode (a bad value is
// bad before it is used), and what adaptive mode needs of the rest.
func (c Limiter) validateAdaptive(bad report, window string) {
	if !(c.AdaptiveFactor > spike.DefaultClip) || c.AdaptiveFactor > 1000 {
		bad("ADAPTIVE_FACTOR", "a number above 1.5 and at most 1000 such as 4")
	}
	if c.AdaptiveFloor < 1 || c.AdaptiveFloor > limit.MaxThreshold {
		bad("ADAPTIVE_FLOOR", fmt.Sprintf("a whole number from 1 to %d such as 100", int64(limit.MaxThreshold)))
	}
	if c.AdaptiveCeiling != 0 && (c.AdaptiveCeiling < c.AdaptiveFloor || c.AdaptiveCeiling > limit.MaxThreshold) {
		bad("ADAPTIVE_CEILING", fmt.Sprintf("0 for none, or a whole number from GATE_ADAPTIVE_FLOOR (%d) to %d", c.AdaptiveFloor, int64(limit.MaxThreshold)))
	}
	if c.RulesFile != "" {
		// GATE_WINDOW is unset with a rules file, its default no window of the gate's:
		// each adaptive rule's durations are checked against its own first window as the
		// file is read (RulesOptions' Check). Checked against the default, a file with a
		// rule of 10 s was refused GATE_ADAPTIVE_MAX_SPIKE=1h1m, which it takes, and one
		// with no adaptive rule GATE_ADAPTIVE_MIN_HISTORY=30s (a review). Here only what
		// no window changes.
		if c.AdaptiveHalfLife <= 0 {
			bad("ADAPTIVE_HALF_LIFE", "a duration above zero such as 72h, at least each adaptive rule's first window")
		}
		if c.AdaptiveMaxSpike < spike.MaxFoldEvery || c.AdaptiveMaxSpike > 7*24*time.Hour {
			bad("ADAPTIVE_MAX_SPIKE", fmt.Sprintf("a duration from %s to 168h such as 3h, at least an hour and two of each adaptive rule's first windows", durtext.String(spike.MaxFoldEvery)))
		}
		if c.AdaptiveMinHistory <= 0 {
			bad("ADAPTIVE_MIN_HISTORY", "a duration above zero such as 24h, at least each adaptive rule's first window")
		}
		return
	}
	// In static mode the learner runs on adaptive rules only, whose windows divide an
	// hour: a static GATE_WINDOW over an hour does not make these values bad.
	w, name, two := c.Window, window, "two GATE_WINDOWs"
	if window != windowVar {
		two = "twice " + window
	}
	if c.ThresholdMode != adaptiveMode && w > time.Hour {
		w, name, two = time.Hour, "an adaptive rule's longest window", "two hours"
	}
	ok := c.windowOK()
	c.validateAdaptiveWindow(bad, ok, w, name, two)
	if c.ThresholdMode != adaptiveMode {
		return
	}
	switch {
	case ok && (c.Window > time.Hour || time.Hour%c.Window != 0): // a bad window is its own problem
		bad("THRESHOLD_MODE", fmt.Sprintf("static unless %s (%s) divides an hour, such as 60s (adaptive learns per hour of the day)", window, durtext.String(c.Window)))
	case c.Clock.Clock == limit.EventClock:
		bad("THRESHOLD_MODE", "static with GATE_CLOCK=event (learned thresholds are kept under the wall clock only)")
	}
}

// validateAdaptiveWindow checks the GATE_ADAPTIVE_* durations against w, the window
// learned over (name and two say which: GATE_WINDOW, or an adaptive rule's first window);
// against w only when ok (a bad GATE_WINDOW is its own problem).
func (c Limiter) validateAdaptiveWindow(bad report, ok bool, w time.Duration, name, two string) {
	if ok && c.AdaptiveHalfLife < w {
		bad("ADAPTIVE_HALF_LIFE", fmt.Sprintf("a duration of at least %s (%s) such as 72h", name, durtext.String(w)))
	}
	if lo := spike.MaxFoldEvery + 2*w; ok && c.AdaptiveMaxSpike < lo || c.AdaptiveMaxSpike > 7*24*time.Hour {
		bad("ADAPTIVE_MAX_SPIKE", fmt.Sprintf("a duration from %s (an hour and %s) to 168h such as 3h", durtext.String(lo), two))
	}
	if ok && c.AdaptiveMinHistory < w {
		bad("ADAPTIVE_MIN_HISTORY", fmt.Sprintf("a duration of at least %s (%s) such as 24h", name, durtext.String(w)))
	}
}

// adaptive is the learner's configuration in adaptive mode, nil in static mode.
func (c Limiter) adaptive() *spike.Config {
	if c.ThresholdMode != adaptiveMode {
		return nil
	}
	return &spike.Config{
		Window:        c.Window,
		Factor:        c.AdaptiveFactor,
		Floor:         float64(c.AdaptiveFloor),
		Ceiling:       float64(c.AdaptiveCeiling),
		LevelHalfLife: c.AdaptiveHalfLife,
		MinHistory:    c.AdaptiveMinHistory,
		MaxSpike:      c.AdaptiveMaxSpike,
	}
}
