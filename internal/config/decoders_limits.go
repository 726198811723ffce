package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

// overrideList is GATE_OVERRIDES: team=limit pairs separated by commas.
type overrideList map[string]int64

func (overrideList) want() string {
	return fmt.Sprintf("team=limit pairs separated by commas such as team1=5000,team2=200000, each limit from 1 to %d", int64(limit.MaxThreshold))
}

// Decode parses the pairs strictly: a mistyped override silently ignored would give a
// team the default threshold, so every malformed entry is an error.
func (o *overrideList) Decode(text string) error {
	m := make(overrideList)
	for i, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		// The limit is after the last '=': a limit holds none, a team may (a base64 id's
		// padding), as the keys the gate builds and gate overrides set takes do.
		eq := strings.LastIndexByte(entry, '=')
		if eq < 0 {
			return fmt.Errorf("entry %q has no '='", entry)
		}
		team, lim := strings.TrimSpace(entry[:eq]), strings.TrimSpace(entry[eq+1:])
		if team == "" {
			return fmt.Errorf("entry %q has no team", entry)
		}
		if err := listSeparatorIn(team, afterLimit.MatchString(team)); err != nil {
			return err
		}
		if err := invisibleAtEdge(team); err != nil {
			return err
		}
		if _, dup := m[team]; dup {
			return fmt.Errorf("team %q appears twice", team)
		}
		n, err := strconv.ParseInt(lim, 10, 64)
		if err != nil || n < 1 || n > limit.MaxThreshold {
			return fmt.Errorf("team %q: limit %q is not a whole number from 1 to %d", team, lim, int64(limit.MaxThreshold))
		}
		m[team] = n
	}
	*o = m
	return nil
}

// extraLimit is one entry of GATE_LIMITS.
type extraLimit struct {
	Window    time.Duration
	Threshold int64
}

// limitList is GATE_LIMITS: window:threshold pairs separated by commas.
type limitList []extraLimit

func (limitList) want() string {
	return fmt.Sprintf("window:threshold pairs separated by commas such as 1h:20000000,24h:200000000, each window a whole number of seconds and each threshold from 1 to %d", int64(limit.MaxThreshold))
}

// Decode parses the pairs strictly, each as a rule's limits are (rules.ParseLimit); the
// rules between values (distinct windows, longer than a tick) are checked with the other
// variables.
func (l *limitList) Decode(text string) error {
	var out limitList
	for i, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		e, err := rules.ParseLimit(entry)
		if err != nil {
			return fmt.Errorf("entry %w", err)
		}
		for _, o := range out {
			if o.Window == e.Window {
				return fmt.Errorf("window %s appears twice", durtext.String(e.Window))
			}
		}
		out = append(out, extraLimit(e))
	}
	*l = out
	return nil
}

// String is the list as GATE_LIMITS spells it.
func (l limitList) String() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Window.String() + ":" + strconv.FormatInt(e.Threshold, 10)
	}
	return strings.Join(parts, ",")
}

// thresholdMode is GATE_THRESHOLD_MODE.
type thresholdMode string

const (
	staticMode   thresholdMode = "static"
	adaptiveMode thresholdMode = "adaptive"
)

func (thresholdMode) want() string { return "static or adaptive" }

func (m *thresholdMode) Decode(text string) error {
	switch s := thresholdMode(strings.ToLower(strings.TrimSpace(text))); s {
	case staticMode, adaptiveMode:
		*m = s
		return nil
	}
	return fmt.Errorf("unknown threshold mode %q", text)
}

// divertHold is GATE_DIVERT_HOLD: unset (one window), 0 (no hold) or a duration.
type divertHold struct {
	d   time.Duration
	set bool
}

func (divertHold) want() string { return "a duration such as 60s, or 0 for no hold" }

// Decode takes a duration; "0" is no hold.
func (h *divertHold) Decode(text string) error {
	if text == "" {
		*h = divertHold{}
		return nil
	}
	d, err := time.ParseDuration(text)
	switch {
	case err != nil && rules.DurationOutOfRange(text):
		// Said as Load says it of the other durations: "not a duration" read as a typo.
		return errors.New("out of range (a duration is at most 2562047h)")
	case err != nil && text != "0":
		return fmt.Errorf("not a duration: %q", text)
	}
	*h = divertHold{d: d, set: true}
	return nil
}

// String is the value as `gate env` shows it.
func (h divertHold) String() string {
	if !h.set {
		return ""
	}
	return h.d.String()
}

// limit maps the setting to limit.Config.DivertHold: 0 (the window) when unset, negative
// for none; and none under the event clock, which keeps no holds.
func (h divertHold) limit(clk limit.Clock) time.Duration {
	switch {
	case clk == limit.EventClock || h.set && h.d == 0:
		return -1
	case !h.set:
		return 0
	}
	return h.d
}

// clockSetting is GATE_CLOCK.
type clockSetting struct{ limit.Clock }

func (clockSetting) want() string { return "wall or event" }

// eventTimeFrom is GATE_EVENT_TIME_FROM.
type eventTimeFrom struct{ route.EventTimeFrom }

func (eventTimeFrom) want() string { return "timestamp or json:FIELD" }
