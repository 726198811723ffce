package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// Set is a checked rule set, in file order. A Set is never changed once made: a reload
// makes a new one.
type Set struct {
	// Source names where the set came from: the file's path, or "GATE_ variables" for the
	// implicit rule of a gate without a rules file.
	Source string
	Rules  []Rule
	// Team is the file's team: (a key of one field), what outcome rows' team is read by
	// (route.Config.OutcomesTeam); zero when the file does not say, the router then taking
	// route.TeamField of the rules.
	Team route.KeyFrom
}

// OutcomesTeam is the key of one field outcome rows' team is read by under s: its team:,
// else route.TeamField of its rules.
func (s *Set) OutcomesTeam() route.KeyFrom {
	if !s.Team.IsZero() {
		return s.Team
	}
	rs := make([]route.Rule, len(s.Rules))
	for i, r := range s.Rules {
		rs[i] = route.Rule{Key: r.Key, Match: make([]route.RuleMatch, len(r.Match)), Shadow: r.Shadow}
	}
	return route.TeamField(rs)
}

// OutcomesFiling says how outcome rows are filed under s: the team field (OutcomesTeam),
// how it was chosen (the file's team:, or, not given, the rule it was taken from), and
// the rules whose key does not start with it, whose rows are filed under the record's
// team, their key after it. One text for gate rules check and the gate's rules line: a
// file without team: whose rules start with two fields (a team rule and one keyed by
// an IP and a user agent) may take the other for the team, silently otherwise.
func (s *Set) OutcomesFiling() (team route.KeyFrom, how string, apart []string) {
	team = s.OutcomesTeam()
	how = "team:"
	if s.Team.IsZero() {
		how = "not given: the first field of the first enforced rule's composite key, else of the first enforced rule without a match; team: sets it"
	}
	for _, r := range s.Rules {
		if r.Key.Members()[0].String() != team.String() {
			apart = append(apart, r.Name)
		}
	}
	return team, how, apart
}

// Rule is one rule of a Set.
type Rule struct {
	// Name is the rule's stable name: its metrics' label, its part of the Redis keys and
	// of the overrides' hash, its header value. Changing it starts its counts afresh.
	Name string
	// Key is what the rule counts by.
	Key route.KeyFrom
	// Match selects the records the rule applies to: every one must hold (none: every
	// record).
	Match []Match
	// Limits are the rule's windows and thresholds, the first one primary (its threshold
	// mode, its overrides); at least one, windows distinct.
	Limits []Limit
	// Adaptive is threshold_mode: adaptive, learning the first limit's threshold per key.
	Adaptive bool
	Mode     limit.Mode
	Cost     route.Cost
	Action   Action
	// Shadow counts, measures and logs the rule as if enforced, and never lets it change
	// where a record goes.
	Shadow bool
	// Force lists keys that take the rule's action whatever their level (as
	// GATE_FORCE_OVERFLOW for the gate without rules), counted as the mode counts.
	Force []string
	// SkipMissing (missing: skip) lets a record whose key field, header or record key is
	// absent or empty pass this rule unchecked, as a user rule for events without a
	// distinct_id; by default (missing: dead_letter) such a record is dead-lettered, as
	// GATE_KEY_FROM's is, so that nothing passes a limit unchecked unawares. A key that is
	// there but unreadable (not JSON, ambiguous, too long) is dead-lettered either way.
	SkipMissing bool
	// MaxKeys (max_keys), for a key of several fields: the distinct keys one team (the
	// key's first field) may have in a window before it is taken to be rotating
	// identities; OnCardinality (on_cardinality) says what its records then get: counted
	// as one key (collapse, the default), overflow, or tag. 0: no bound. Default
	// limit.DefaultKeyCardinality.
	MaxKeys       int64
	OnCardinality limit.CardinalityAction
	// AboveFloor (track: above_floor) counts the keys under their floor in a sketch,
	// neither cached nor written nor read (limit's sketch.go); track: all caches and
	// writes every key. Default: above_floor for a key of several fields or a rule with a
	// match, all otherwise.
	AboveFloor bool
	// ActionAt is where the action is written (zero when not: the default overflow), for
	// a problem of it found once the file is read (its topic missing at a reload), said
	// at its place as a parse problem is.
	ActionAt Place
}

// Enforces reports whether r, not in shadow, acts with an action of kind k: a shadow rule
// sends no record anywhere (its topic is not the gate's, its drop loses nothing).
func (r Rule) Enforces(k ActionKind) bool { return r.Action.Kind == k && !r.Shadow }

// Place is where a field is written in a rules file: its line and column, and its path
// (rules[1] "hot".action).
type Place struct {
	Line, Col int
	Path      string
}

// Limit is one window and its threshold, as an entry of GATE_LIMITS.
type Limit struct {
	Window    time.Duration
	Threshold int64
}

// String is the limit as a rules file or GATE_LIMITS writes it (1h:1000, not
// 1h0m0s:1000), for the messages people read; ParseLimit reads it back.
func (l Limit) String() string { return fmt.Sprintf("%s:%d", durtext.String(l.Window), l.Threshold) }

// MaxWindow bounds a limit's window (and GATE_WINDOW and GATE_MAX_EVENT_AGE): a key lives
// 2 × its window (plus the event clock's MaxEventAge), which must not overflow a
// time.Duration. Messages name it as 8784h (366 days).
const MaxWindow = 366 * 24 * time.Hour

// durationRE is a duration as time.ParseDuration writes one, whatever its size.
var durationRE = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// dayRE is a duration that starts with a number of days (1d, 1.5d, 1d12h), a unit
// time.ParseDuration does not know.
var dayRE = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)d`)

// bareRE is a number without a unit (60, 1.5), which time.ParseDuration refuses but for 0.
var bareRE = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// DurationOutOfRange reports whether s is written as a duration that time.ParseDuration
// refuses all the same: one past a time.Duration's range (about 2562047h either way),
// which its error does not tell from a typo.
func DurationOutOfRange(s string) bool {
	_, err := time.ParseDuration(s)
	return err != nil && durationRE.MatchString(s)
}

// ParseLimit reads one WINDOW:THRESHOLD: an entry of a rule's limits, and of GATE_LIMITS
// (internal/config reads those with it too, so the two take the same pairs). The window
// is a whole number of seconds, at least 1s, since a further limit's Redis keys are named
// by its window in seconds (config.RuleKeyPrefix, config.LimitKeyPrefix): 1500ms and 1900ms
// would both be /w1. The threshold is from 1 to limit.MaxThreshold. The rules between a
// list's windows (each distinct, each longer than GATE_TICK_INTERVAL) are the caller's.
// The error names s.
func ParseLimit(s string) (Limit, error) {
	w, t, ok := strings.Cut(s, ":")
	if !ok {
		return Limit{}, fmt.Errorf("%q has no ':' between window and threshold", s)
	}
	w, t = strings.TrimSpace(w), strings.TrimSpace(t)
	d, err := time.ParseDuration(w)
	tooLong := err != nil && DurationOutOfRange(w) && !strings.HasPrefix(w, "-")
	if !tooLong && err != nil && dayRE.MatchString(w) {
		// 1d, as gate replay takes it and the docs speak of windows: a whole number of
		// seconds all the same, which "not a whole number of seconds" would deny.
		how := "write a day as 24h"
		if n, err := strconv.ParseUint(strings.TrimSuffix(w, "d"), 10, 16); err == nil {
			how = fmt.Sprintf("write %dh for %s", n*24, w)
		}
		return Limit{}, fmt.Errorf("%q: window %q: durations have no unit d: %s", s, w, how)
	}
	if !tooLong && err != nil && bareRE.MatchString(w) {
		// 60:1000, seconds meant (as a TTL or a cron says them): a whole number of
		// seconds, which "not a whole number of seconds" would deny.
		how := "write it in s, m or h, such as 90s or 1.5m"
		if n, err := strconv.ParseUint(w, 10, 64); err == nil {
			how = fmt.Sprintf("write %ds for %d seconds", n, n)
		}
		return Limit{}, fmt.Errorf("%q: window %q has no unit: %s", s, w, how)
	}
	if !tooLong && err == nil && d <= 0 {
		// 0s, -1m, a bare 0 (which ParseDuration takes): whole numbers of seconds all
		// the same, which "not a whole number of seconds" would deny.
		return Limit{}, fmt.Errorf("%q: window %q is no time: want 1s or more, such as 1m", s, w)
	}
	if !tooLong && (err != nil || d < time.Second || d%time.Second != 0) {
		return Limit{}, fmt.Errorf("%q: window %q is not a whole number of seconds such as 1h", s, w)
	}
	if tooLong || d > MaxWindow {
		return Limit{}, fmt.Errorf("%q: window %q is longer than 8784h (366 days)", s, w)
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 1 || n > limit.MaxThreshold {
		return Limit{}, fmt.Errorf("%q: threshold %q is not a whole number from 1 to %d", s, t, int64(limit.MaxThreshold))
	}
	return Limit{Window: d, Threshold: n}, nil
}

// Match is one condition on a record: the value read by Field is (or, with Not, is not)
// one of Values. A record whose field cannot be read (absent, not a string or a number,
// no such header) matches no In list, and so matches every Not list.
type Match struct {
	Field  route.KeyFrom
	Values []string
	Not    bool
}

// MaxRules bounds a set: the router's bound (metrics are labelled by rule).
const MaxRules = route.MaxRules

// ActionKind is what a rule does to a record when the rule is over.
type ActionKind uint8

// The actions, weakest first: a record gets the strongest of the enforced rules over it.
const (
	// None: the rule was not over (or is a shadow rule).
	None ActionKind = iota
	// Tag keeps the record on the accepted topic, with a header naming the rule, for
	// consumers that degrade such records (as PostHog skips person processing).
	Tag
	// Overflow sends the record to the overflow topic.
	Overflow
	// Topic sends the record to a topic of the rule's own.
	Topic
	// Drop writes the record nowhere; the outcomes (GATE_OUTCOMES_TOPIC, which must be
	// set) count it, so nothing vanishes unrecorded.
	Drop
)

// Action is a rule's action when over: its kind, and for Topic the topic.
type Action struct {
	Kind  ActionKind
	Topic string
}

func (a Action) String() string {
	switch a.Kind {
	case None:
		return "none"
	case Tag:
		return "tag"
	case Overflow:
		return "overflow"
	case Drop:
		return "drop"
	}
	return "topic:" + a.Topic
}

// TopicProblems is msg, a problem of topic (missing, or closed to the gate) of kind
// (Problem.Kind), said at the action of each enforced rule of s that sends records to it,
// as a parse problem is said: FILE:LINE:COL: rules[1] "hot".action: msg.
func (s *Set) TopicProblems(topic, kind, msg string) Problems {
	var out Problems
	for _, r := range s.Rules {
		if r.Enforces(Topic) && r.Action.Topic == topic {
			out = append(out, &Problem{File: s.Source, Line: r.ActionAt.Line, Col: r.ActionAt.Col, Path: r.ActionAt.Path, Msg: msg, Kind: kind})
		}
	}
	return out
}

// TopicAt is where each enforced rule of s that sends records to topic names it, as a
// parse problem says a place (FILE:LINE:COL: rules[1] "hot".action), joined by "; ";
// "" when none does.
func (s *Set) TopicAt(topic string) string {
	var at []string
	for _, p := range s.TopicProblems(topic, "", "") {
		at = append(at, strings.TrimSuffix(p.Error(), ": "))
	}
	return strings.Join(at, "; ")
}

// Topics are the topics of the set's enforced topic:NAME actions, each once, in rule
// order: the gate's own topics of its rules, checked at start and before a reload is
// taken. A shadow rule's topic is not one: the rule never sends a record there, and
// trying a rule in shadow before its topic is created is what shadow is for.
func (s *Set) Topics() []string {
	var out []string
	for _, r := range s.Rules {
		if r.Enforces(Topic) && !slices.Contains(out, r.Action.Topic) {
			out = append(out, r.Action.Topic)
		}
	}
	return out
}
