package gate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

// limitsDesc describes the limits a gate enforces, as the gates of a fleet compare them
// (tick.Config.LiveLimits): a line per limit, its Redis key prefix and what changes how a
// key is counted or judged under it (window, threshold, mode, clock, holds, static
// overrides, learned thresholds, the key cardinality bound), after its rule's line (its
// key, match, action, shadow, missing keys, force list and tracking; the implicit rule of a
// gate without a file has GATE_KEY_FROM and GATE_FORCE_OVERFLOW). Settings that change
// only this gate's pace or memory (sync intervals, cache sizes, hash seeds) are left out:
// gates may differ in them without counting a key differently.
func limitsDesc(rs []ruleDesc, tlims []tick.Limit) string {
	var b strings.Builder
	i := 0
	for _, r := range rs {
		b.WriteString(r.line)
		b.WriteByte('\n')
		for range r.limits {
			c := tlims[i].Lim.Config()
			fmt.Fprintf(&b, "  %s window=%s threshold=%d mode=%s clock=%s max_event_age=%s hold=%s release=%g cardinality=%d/%s",
				tlims[i].KeyPrefix, c.Window, c.Threshold, c.Mode, c.Clock, c.MaxEventAge, c.DivertHold, c.DivertRelease, c.KeyCardinality, c.OnCardinality)
			if c.Adaptive != nil {
				fmt.Fprintf(&b, " adaptive=%+v", *c.Adaptive)
			}
			for _, k := range slices.Sorted(maps.Keys(c.Overrides)) {
				fmt.Fprintf(&b, " override[%q]=%d", k, c.Overrides[k])
			}
			b.WriteByte('\n')
			i++
		}
	}
	return b.String()
}

// ruleDesc is a rule's line of limitsDesc and how many of the tick's limits are its.
type ruleDesc struct {
	line   string
	limits int
}

// ruleDescOf describes r as limitsDesc does.
func ruleDescOf(r rules.Rule) ruleDesc {
	var match []string
	for _, m := range r.Match {
		not := ""
		if m.Not {
			not = "!"
		}
		match = append(match, fmt.Sprintf("%s%s=%q", m.Field, not, m.Values))
	}
	return ruleDesc{
		line: fmt.Sprintf("rule %q key=%s match=[%s] action=%s shadow=%t mode=%s cost=%s adaptive=%t skip_missing=%t above_floor=%t force=%q",
			r.Name, r.Key, strings.Join(match, " "), r.Action, r.Shadow, r.Mode, r.Cost, r.Adaptive, r.SkipMissing, r.AboveFloor, r.Force),
		limits: len(r.Limits),
	}
}

// fixedDescOf describes the implicit rule of a gate without a rules file, of n limits.
func fixedDescOf(keyFrom fmt.Stringer, force []string, n int) ruleDesc {
	return ruleDesc{line: fmt.Sprintf("GATE_ variables key=%s force=%q", keyFrom, force), limits: n}
}
