package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

// RulesOptions are what a rules file is checked against: the topics the gate already
// uses (a rule's topic:NAME may be none of them) and the clock.
func (c Config) RulesOptions() rules.Options {
	o := rules.Options{
		Topics: map[string]string{
			c.InputTopic: "GATE_INPUT_TOPIC", c.AcceptedTopic: "GATE_ACCEPTED_TOPIC",
			c.OverflowTopic: "GATE_OVERFLOW_TOPIC", c.DeadLetterTopic: "GATE_DEAD_LETTER_TOPIC",
		},
		EventClock:  c.Clock.Clock == limit.EventClock,
		MinWindow:   c.TickInterval,
		Outcomes:    c.OutcomesTopic != "",
		MaxKeyBytes: c.MaxKeyBytes,
	}
	if c.OutcomesTopic != "" {
		o.Topics[c.OutcomesTopic] = "GATE_OUTCOMES_TOPIC"
	}
	// A rule whose limits the gate's settings make unbuildable (an adaptive rule's window
	// against GATE_ADAPTIVE_MAX_SPIKE, say) is a problem of the file, found when read.
	o.Check = func(r rules.Rule) error {
		if r.Adaptive && len(r.Limits) > 0 {
			// GATE_ADAPTIVE_* were checked against GATE_WINDOW (or an hour); an adaptive
			// rule learns over its first window, which may want more of them: say which
			// variable, as the gate's start does, not the learner's field ("max spike").
			var err error
			c.Limiter.validateAdaptiveWindow(func(key, want string) {
				key = envPrefix + "_" + key
				if err == nil { // the first: one a rule, as the limiter's check gives
					err = &varError{Key: key, Value: c.shown(key), Want: want}
				}
			}, true, r.Limits[0].Window, "the rule's first window", "two of the rule's first windows")
			if err != nil {
				return fmt.Errorf("limit %s (threshold_mode: adaptive): %w", r.Limits[0], err)
			}
		}
		for i, lc := range c.RuleLimitConfigs(r) {
			if err := lc.Validate(); err != nil {
				return fmt.Errorf("limit %s: %w", r.Limits[i], err)
			}
		}
		return nil
	}
	return o
}

// RulesFileEnv is getenv as a gate started with GATE_RULES_FILE=path reads it, for
// checking the file at path in an environment that may not name it (gate rules check):
// Load then checks the environment as a gate with rules, not as one without (its
// GATE_TICK_INTERVAL and GATE_COLD_WRITE_INTERVAL against GATE_WINDOW's default, which no
// rule uses). The variables a rules file replaces read as unset: a shell's GATE_KEY_FROM
// is not the file's problem.
func RulesFileEnv(getenv func(string) string, path string) func(string) string {
	return func(key string) string {
		if key == envPrefix+"_RULES_FILE" {
			return path
		}
		if v, ok := strings.CutPrefix(key, envPrefix+"_"); ok && slices.Contains(rulesReplace, v) {
			return ""
		}
		return getenv(key)
	}
}

// RulePrefix is {prefix}:rule:{name}, which names what a rule keeps by its name alone:
// its live overrides' hash ({prefix}:rule:{name}:overrides), kept whatever else of the
// rule changes, and its events-cost counters (RuleKeyPrefix).
func (c Config) RulePrefix(name string) string { return c.RedisPrefix + ":rule:" + name }

// RuleKeyPrefix is the Redis key prefix of r's limit i: {prefix}:rule:{name} for its
// first limit, {prefix}:rule:{name}/w{seconds} for the others, and with cost: bytes
// {prefix}:rule:{name}/bytes and {prefix}:rule:{name}/bytes/w{seconds}. A count is in the
// rule's unit, so a rule whose cost changes under the same name starts its counts afresh,
// as one whose window does: bytes read as events would make every key far over its
// limit. Events, the default, keep the keys rules always had. A rule's keys never meet
// another rule's, nor a further window's its first's, nor a bytes rule's an events
// rule's: a rule name holds no ':' or '/', so no key of one prefix followed by ':' and a
// key can spell a key of another. Nor do two windows of a rule meet: a parsed rule's
// windows are distinct whole numbers of seconds (rules.ParseLimit, as GATE_LIMITS's), so
// {seconds} is exact and one-to-one (TestRuleKeyPrefixWindows). The gate without rules
// keeps {prefix} (and GATE_LIMITS' {prefix}:w{seconds}), as before rules, with
// {prefix}/bytes in its place with GATE_COST=bytes (PrimaryKeyPrefix).
func (c Config) RuleKeyPrefix(r rules.Rule, i int) string {
	p := c.RulePrefix(r.Name)
	if r.Cost == route.CostBytes {
		p += "/bytes"
	}
	if i > 0 {
		p += "/w" + strconv.FormatInt(int64(r.Limits[i].Window/time.Second), 10)
	}
	return p
}

// RuleLimitConfigs returns the limiter settings of each of r's limits: the gate's own
// (GATE_SYNC_*, GATE_CACHE_*, GATE_DIVERT_*, the clock) with the rule's window, threshold
// and mode, a cold-write interval of at most the window, and on its first limit in
// adaptive mode the learner (GATE_ADAPTIVE_*) over that window. A rule's overrides are
// its own hash's (RulePrefix), not GATE_OVERRIDES, which is the gate's without rules.
func (c Config) RuleLimitConfigs(r rules.Rule) []limit.Config {
	out := make([]limit.Config, len(r.Limits))
	for i, l := range r.Limits {
		lc := c.LimitConfig()
		lc.Window, lc.Threshold, lc.Mode = l.Window, l.Threshold, r.Mode
		lc.Overrides = nil
		lc.ColdWriteInterval = min(lc.ColdWriteInterval, l.Window)
		lc.Adaptive = nil
		if i > 0 && lc.DivertHold == 0 {
			lc.DivertHold = r.Limits[0].Window // unset: the rule's primary window, for each limit
		}
		if r.AboveFloor {
			// Keys below the fleet floor are neither cached nor written nor read: a per-user
			// rule costs Redis what its users near their limits cost (limit's sketch.go).
			lc.SketchWidth = limit.DefaultSketchWidth
		}
		if i == 0 && r.Key.Composite() && r.AboveFloor {
			// A team rotating identities is found and handled by the primary limit.
			lc.KeyCardinality, lc.OnCardinality = r.MaxKeys, r.OnCardinality
		}
		if i == 0 && r.Adaptive {
			a := c.Limiter
			a.ThresholdMode, a.Window = adaptiveMode, l.Window
			lc.Adaptive = a.adaptive()
		}
		out[i] = lc
	}
	return out
}

// RouteRule maps r to the router's rule over its limiters lims (one per r.Limits).
func RouteRule(r rules.Rule, lims []*limit.Limiter) route.Rule {
	rr := route.Rule{Name: r.Name, Key: r.Key, SkipMissing: r.SkipMissing, Limiters: lims, Cost: r.Cost, Shadow: r.Shadow, Topic: r.Action.Topic, Forced: slices.Clone(r.Force)}
	switch r.Action.Kind {
	case rules.Tag:
		rr.Action = route.ActionTag
	case rules.Overflow:
		rr.Action = route.ActionOverflow
	case rules.Topic:
		rr.Action = route.ActionTopic
	case rules.Drop:
		rr.Action = route.ActionDrop
	}
	for _, m := range r.Match {
		rr.Match = append(rr.Match, route.RuleMatch{Field: m.Field, Values: m.Values, Not: m.Not})
	}
	return rr
}
