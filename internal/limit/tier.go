package limit

import "time"

// Tier is a team's pressure band: how close its level is to its threshold. The tier sets
// how often the team's global view is read from the shared store.
type Tier uint8

// The tiers, from coolest to hottest.
const (
	// Idle: pressure below 10%. Never read unless above the sync floor; then as Low.
	Idle Tier = iota
	// Low: pressure in [10%, 50%). Read every 4 × sync interval.
	Low
	// Normal: pressure in [50%, 80%). Read every sync interval.
	Normal
	// Hot: pressure of 80% or more. Read every tick (or every ½ × sync interval when
	// HotEveryTick is off).
	Hot
	numTiers
)

// Tier boundaries on pressure = level / threshold (the reference design's).
const (
	tierLow    = 0.10
	tierNormal = 0.50
	tierHot    = 0.80
)

var tierNames = [numTiers]string{"idle", "low", "normal", "hot"}

// String returns the tier's name as used in metrics.
func (t Tier) String() string {
	if t < numTiers {
		return tierNames[t]
	}
	return "unknown"
}

// TierOf returns the tier of a pressure (level / threshold).
func TierOf(pressure float64) Tier {
	switch {
	case pressure >= tierHot:
		return Hot
	case pressure >= tierNormal:
		return Normal
	case pressure >= tierLow:
		return Low
	}
	return Idle
}

// tierOfLevel is TierOf(level / threshold) without the division.
func tierOfLevel(level, threshold float64) Tier {
	switch {
	case level >= tierHot*threshold:
		return Hot
	case level >= tierNormal*threshold:
		return Normal
	case level >= tierLow*threshold:
		return Low
	}
	return Idle
}

// cadence returns how long a team of tier t may go between reads.
func (c *Config) cadence(t Tier) time.Duration {
	switch t {
	case Hot:
		if *c.HotEveryTick {
			return 0
		}
		return c.SyncInterval / 2
	case Normal:
		return c.SyncInterval
	}
	return 4 * c.SyncInterval
}
