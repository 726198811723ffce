package rules

import "github.com/capturegate/gate/internal/limit"

// MaxRules bounds a set: metrics are labelled by rule, and an Outcome keeps the rules
// over in one word each.
const MaxRules = 64

// Outcome is what the rules checked so far decided for one record. The zero value is
// "nothing over yet": take rules in file order, asking Check whether to check each rule
// that matches, and Add each verdict. Outcome allocates nothing.
type Outcome struct {
	// Action is the strongest enforced action of the rules over so far, and Rule the
	// index of the rule it is from (meaningful when Action.Kind is not None).
	Action Action
	Rule   int
	// Over has bit i set when enforced rule i was over, whatever its action; ShadowOver
	// when shadow rule i was: what it would have done is its Action.
	Over, ShadowOver uint64
}

// Check reports whether rule i of s is to be checked, and so counted, for a record the
// rules before it decided o for: a cap rule does not count a record an earlier enforced
// rule sends away (see the package's counting guarantee).
func (o *Outcome) Check(s *Set, i int) bool {
	return !(s.Rules[i].Mode == limit.Cap && o.Action.sendsAway())
}

// Add takes rule i's verdict: over or not.
func (o *Outcome) Add(s *Set, i int, over bool) {
	if !over {
		return
	}
	r := &s.Rules[i]
	if r.Shadow {
		o.ShadowOver |= 1 << uint(i)
		return
	}
	o.Over |= 1 << uint(i)
	// Strictly stronger only: between two topics (or two of a kind) the earlier rule's.
	if r.Action.Kind > o.Action.Kind {
		o.Action, o.Rule = r.Action, i
	}
}

// Away reports whether the record leaves the accepted topic: an enforced rule over sends
// it to overflow or a topic.
func (o *Outcome) Away() bool { return o.Action.sendsAway() }
