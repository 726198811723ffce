package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/capturegate/gate/internal/durtext"
)

// Validate checks each value's range and the rules between values: every rule on the
// configuration lives here, in validate and the validate methods of Config's parts it
// calls. The libraries check again (limit.New, tick.New, ...), but they read a zero
// as "the default", and their messages name struct fields; here a zero is rejected where
// it would be silently replaced, and every message names the variable to fix. Where a
// rule is a package's own (a topic name, the cluster key prefix, the event-age bound, the
// enums), that package's function decides and Validate only words the message. The rules
// between values run once every value is sane. The error is a Problems.
func (c Config) Validate() error {
	if p := c.validate(true, windowVar); len(p) > 0 {
		return p
	}
	return nil
}

// validate is Validate, the rules between values only if between. Each part of Config
// checks its own values, then, once every value is sane, the rules between them; the rules
// between the values of several parts are here. Problems are reported in the calls' order.
// window names GATE_WINDOW's value in the messages: windowVar, or limitsWindow when it is
// GATE_LIMITS's first pair's.
func (c Config) validate(between bool, window string) Problems {
	var p Problems
	bad := report(func(key, want string) {
		key = envPrefix + "_" + key
		p.add(&varError{Key: key, Value: c.shown(key), Want: want})
	})

	c.Limiter.validate(bad, window)
	c.Redis.validate(bad)
	c.Kafka.validate(bad)
	c.Process.validate(bad)
	if len(p) > 0 || !between {
		return p // the rules between values assume each value is sane
	}

	c.Kafka.validateBetween(bad)
	c.Redis.validateBetween(bad)
	// An override's team is a key as GATE_KEY_FROM builds it, as GATE_FORCE_OVERFLOW's is.
	for _, t := range slices.Sorted(maps.Keys(c.Overrides)) {
		if err := c.KeyFrom.CheckKey(t, c.MaxKeyBytes); err != nil {
			bad("OVERRIDES", fmt.Sprintf("keys as GATE_KEY_FROM builds them: %v", err))
			break
		}
	}
	// A tick as long as the window would let a whole epoch pass between two writes. A
	// rules file's windows are its rules' (GATE_WINDOW unset): the rules check each one
	// against the tick.
	if c.RulesFile == "" && c.TickInterval >= c.Window {
		bad("TICK_INTERVAL", fmt.Sprintf("a duration shorter than %s (%s)", window, durtext.String(c.Window)))
	}
	// Each further limit needs its own epochs, and a tick per epoch at least.
	for _, e := range c.Limits {
		if e.Window == c.Window {
			bad("LIMITS", fmt.Sprintf("windows other than %s (%s): each limit needs its own", window, durtext.String(c.Window)))
			break
		}
		if e.Window <= c.TickInterval {
			bad("LIMITS", fmt.Sprintf("windows longer than GATE_TICK_INTERVAL (%s)", durtext.String(c.TickInterval)))
			break
		}
	}
	c.Limiter.validateBetween(bad)
	// Reads happen on ticks: a sync interval shorter than a tick could not be honoured.
	if c.SyncInterval < c.TickInterval {
		bad("SYNC_INTERVAL", fmt.Sprintf("a duration no shorter than GATE_TICK_INTERVAL (%s)", durtext.String(c.TickInterval)))
	}
	return p
}

// report is how a check reports a bad value: by its variable's name after the GATE_
// prefix, and what the variable wants.
type report func(key, want string)

// positive reports a duration that is not above zero.
func (bad report) positive(key string, d time.Duration) {
	if d <= 0 {
		bad(key, "a duration above zero such as "+durationExample(key))
	}
}

// atLeast reports a whole number under lo.
func (bad report) atLeast(key string, n, lo int) {
	if n < lo {
		bad(key, fmt.Sprintf("a whole number of at least %d", lo))
	}
}

// shown is the value of variable key as an error shows it: secrets and passwords
// redacted by their types' String, a duration as an operator writes one (1h30m, not
// time.Duration's 1h30m0s). Load's errors quote the value as set; this is for the checks
// made after it, where the environment's string is gone (a rules file's rule against
// GATE_ADAPTIVE_*).
func (c Config) shown(key string) string {
	for _, f := range configFields() {
		if f.key == key {
			v := reflect.ValueOf(c).FieldByIndex(f.index).Interface()
			if d, ok := v.(time.Duration); ok {
				return durtext.String(d)
			}
			return fmt.Sprint(v)
		}
	}
	return ""
}
