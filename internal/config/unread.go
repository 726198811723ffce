package config

import (
	"fmt"
	"time"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/spike"
)

// Unread is a setting given a value other than its default that the modes chosen do not
// read: it does nothing. Not refused, as GATE_MAX_EVENT_AGE off the event clock is: these
// belong to a mode an operator switches off and on again (adaptive thresholds or divert
// turned off during an incident, exactly once tried), and a gate that refused to start
// over the mode's other settings left in place would fail the switch back when it is
// needed most. The gate says so at start instead (serve), once a setting.
type Unread struct {
	Key   string // the variable, GATE_...
	Value string // as set
	Why   string // the setting that makes it unread, and what reads it instead
}

// Unread returns the settings the configuration's modes do not read, in a fixed order.
func (c Config) Unread() []Unread {
	var u []Unread
	add := func(key, value, why string) {
		u = append(u, Unread{Key: envPrefix + "_" + key, Value: value, Why: why})
	}
	if c.Delivery.value() == consume.ExactlyOnce && c.CommitInterval != consume.DefaultCommitInterval {
		add("COMMIT_INTERVAL", durtext.String(c.CommitInterval),
			"GATE_DELIVERY=exactly-once commits offsets in each transaction, every GATE_TRANSACTION_INTERVAL")
	}
	// With a rules file each rule has its own modes (GATE_LIMIT_MODE and
	// GATE_THRESHOLD_MODE unset), and its divert and adaptive rules read these.
	if c.RulesFile != "" {
		return u
	}
	if c.LimitMode == limit.Cap && c.DivertHold.d > 0 {
		add("DIVERT_HOLD", durtext.String(c.DivertHold.d), "GATE_LIMIT_MODE=cap diverts no team, so holds none")
	}
	if c.ThresholdMode != adaptiveMode {
		const why = "GATE_THRESHOLD_MODE=static learns no threshold"
		dur := func(key string, v, def time.Duration) {
			if v != def {
				add(key, durtext.String(v), why)
			}
		}
		if c.AdaptiveFactor != spike.DefaultFactor {
			add("ADAPTIVE_FACTOR", fmt.Sprint(c.AdaptiveFactor), why)
		}
		if c.AdaptiveFloor != spike.DefaultFloor {
			add("ADAPTIVE_FLOOR", fmt.Sprint(c.AdaptiveFloor), why)
		}
		if c.AdaptiveCeiling != 0 {
			add("ADAPTIVE_CEILING", fmt.Sprint(c.AdaptiveCeiling), why)
		}
		dur("ADAPTIVE_HALF_LIFE", c.AdaptiveHalfLife, spike.DefaultLevelHalfLife)
		dur("ADAPTIVE_MAX_SPIKE", c.AdaptiveMaxSpike, spike.DefaultMaxSpike)
		dur("ADAPTIVE_MIN_HISTORY", c.AdaptiveMinHistory, spike.DefaultMinHistory)
	}
	return u
}
