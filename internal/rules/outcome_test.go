package rules

import (
	"slices"
	"testing"

	"github.com/capturegate/gate/internal/limit"
)

// set is a Set of rules with the given actions, modes and shadow flags.
func set(rs ...Rule) *Set { return &Set{Rules: rs} }

func TestOutcomeStrongestWins(t *testing.T) {
	tag := Rule{Name: "tag", Action: Action{Kind: Tag}}
	ovf := Rule{Name: "ovf", Action: Action{Kind: Overflow}}
	t1 := Rule{Name: "t1", Action: Action{Kind: Topic, Topic: "one"}}
	t2 := Rule{Name: "t2", Action: Action{Kind: Topic, Topic: "two"}}
	shadow := Rule{Name: "shadow", Action: Action{Kind: Topic, Topic: "s"}, Shadow: true}
	s := set(tag, ovf, t1, t2, shadow)
	for _, c := range []struct {
		name       string
		over       []int
		want       Action
		rule       int
		mask, shad uint64
	}{
		{"none over", nil, Action{}, 0, 0, 0},
		{"tag only", []int{0}, tag.Action, 0, 1, 0},
		{"overflow over tag", []int{0, 1}, ovf.Action, 1, 3, 0},
		{"a topic over overflow", []int{1, 2}, t1.Action, 2, 6, 0},
		{"two topics: the earlier rule's", []int{2, 3}, t1.Action, 2, 12, 0},
		{"a shadow rule changes nothing", []int{4}, Action{}, 0, 0, 16},
		{"shadow beside tag", []int{0, 4}, tag.Action, 0, 1, 16},
	} {
		var o Outcome
		for i := range s.Rules {
			o.Add(s, i, slices.Contains(c.over, i))
		}
		if o.Action != c.want || (c.want.Kind != None && o.Rule != c.rule) || o.Over != c.mask || o.ShadowOver != c.shad {
			t.Errorf("%s: %+v, want action %v of rule %d, over %b, shadow %b", c.name, o, c.want, c.rule, c.mask, c.shad)
		}
		if o.Away() != (c.want.Kind >= Overflow) {
			t.Errorf("%s: Away = %v", c.name, o.Away())
		}
	}
}

// A cap rule does not count a record an earlier enforced rule sent away; a divert rule
// counts it (its window is the offered rate); a tag or a shadow rule sends nothing away.
func TestOutcomeCheck(t *testing.T) {
	user := Rule{Name: "user", Action: Action{Kind: Overflow}}
	tagger := Rule{Name: "tagger", Action: Action{Kind: Tag}}
	shadow := Rule{Name: "shadow", Action: Action{Kind: Overflow}, Shadow: true}
	teamCap := Rule{Name: "team-cap", Mode: limit.Cap, Action: Action{Kind: Overflow}}
	teamDivert := Rule{Name: "team-divert", Mode: limit.Divert, Action: Action{Kind: Overflow}}
	for _, c := range []struct {
		name  string
		first Rule
		over  bool
		later Rule
		check bool
	}{
		{"user over, team cap", user, true, teamCap, false},
		{"user over, team divert", user, true, teamDivert, true},
		{"user under, team cap", user, false, teamCap, true},
		{"tag over, team cap", tagger, true, teamCap, true},
		{"shadow over, team cap", shadow, true, teamCap, true},
	} {
		s := set(c.first, c.later)
		var o Outcome
		if !o.Check(s, 0) {
			t.Fatalf("%s: the first rule is not checked", c.name)
		}
		o.Add(s, 0, c.over)
		if got := o.Check(s, 1); got != c.check {
			t.Errorf("%s: Check = %v, want %v", c.name, got, c.check)
		}
	}
}

func TestMatchHolds(t *testing.T) {
	in := Match{Values: []string{"$identify", "$merge_dangerously"}}
	notIn := Match{Values: []string{"internal"}, Not: true}
	for _, c := range []struct {
		m    Match
		v    string
		ok   bool
		want bool
	}{
		{in, "$identify", true, true}, {in, "$pageview", true, false}, {in, "", false, false},
		{notIn, "internal", true, false}, {notIn, "sdk", true, true}, {notIn, "", false, true},
	} {
		if got := c.m.Holds(c.v, c.ok); got != c.want {
			t.Errorf("%+v.Holds(%q, %v) = %v", c.m, c.v, c.ok, got)
		}
	}
}
