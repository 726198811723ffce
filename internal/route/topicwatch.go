package route

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// HeaderRuleTopicMissing is added to a record a rule would have sent to its own topic
// (action topic:NAME) while that topic is missing or closed to the gate: the record goes
// to the overflow topic instead, and the header names the topic it was meant for.
const HeaderRuleTopicMissing = "gate-rule-topic-missing"

// TopicWatch is what a gate knows of its rules' own topics (action topic:NAME): which
// ones it uses, and which of those are missing or closed to it now. One is shared by the
// gate's routers (a new one per rules reload) and its consumer, which marks a topic
// missing when a produce to it fails for want of the topic or its WRITE ACL, or when its
// periodic check finds it so, and back when the check finds it writable again.
//
// Its guarantee: while a rule's topic is marked missing, no router sends a record there;
// the record goes to the overflow topic with HeaderRuleTopicMissing, so that a rule's
// topic never holds up another team's records, nor the rule's own. Safe for concurrent
// use; a router reads one atomic flag per record sent to a rule's topic.
type TopicWatch struct {
	fallback string // the overflow topic
	mu       sync.Mutex
	flags    map[string]*atomic.Bool // by topic: true while missing
	used     map[string]bool         // the topics the rules in use send to
}

// NewTopicWatch returns a watch of no topic, whose records go to overflow (the gate's
// overflow topic) while their own topic is missing.
func NewTopicWatch(overflow string) *TopicWatch {
	return &TopicWatch{fallback: overflow, flags: map[string]*atomic.Bool{}, used: map[string]bool{}}
}

// Fallback is the topic a missing rule topic's records go to: the overflow topic.
func (w *TopicWatch) Fallback() string { return w.fallback }

// flag is topic's missing flag, made on first use.
func (w *TopicWatch) flag(topic string) *atomic.Bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.flags[topic]
	if f == nil {
		f = new(atomic.Bool)
		w.flags[topic] = f
	}
	return f
}

// Use makes topics the rule topics in use (a new rule set's): the watch checks these.
// A topic no longer in use keeps its mark: the old rules' router routes on until the new
// one is stored, and while its topic is missing its records must go on to overflow
// (RetiredGone marks one found missing after); a topic used again was checked by the
// reload, and its mark is cleared.
func (w *TopicWatch) Use(topics []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.used
	w.used = map[string]bool{}
	for _, t := range topics {
		w.used[t] = true
		if w.flags[t] == nil {
			w.flags[t] = new(atomic.Bool)
		} else if !old[t] {
			// In use again (a reload checked it first): whatever it was marked while no
			// rule used it (RetiredGone) is stale.
			w.flags[t].Store(false)
		}
	}
}

// Topics are the rule topics in use, sorted.
func (w *TopicWatch) Topics() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.used))
}

// Watched reports whether topic is a rule topic in use.
func (w *TopicWatch) Watched(topic string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.used[topic]
}

// RetiredGone marks topic missing when it was a rule topic in use and is no longer (a
// reload removed its rules, the topic deleted with them): records the old rules sent
// there may still be in flight, and go to the fallback like a missing topic's (Missing).
// Nothing watches it to mark it back; a reload that uses it again has it checked. It
// reports whether that changed its mark (false for a topic in use, or never one).
func (w *TopicWatch) RetiredGone(topic string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.flags[topic]
	return f != nil && !w.used[topic] && !f.Swap(true)
}

// Missing reports whether topic is marked missing.
func (w *TopicWatch) Missing(topic string) bool {
	w.mu.Lock()
	f := w.flags[topic]
	w.mu.Unlock()
	return f != nil && f.Load()
}

// SetMissing marks topic missing or back, and reports whether that changed its mark. A
// topic not in use is left alone (false).
func (w *TopicWatch) SetMissing(topic string, missing bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.used[topic] {
		return false
	}
	return w.flags[topic].Swap(missing) != missing
}

// CountRuleTopicMissing counts, in gate_rule_topic_records_total{reason="topic_missing"}
// of the rule named rule (a record's gate-overflow-rule), a record the consumer rerouted
// to the overflow topic after its produce to topic, the rule's, failed for want of it.
// Not when the rule sends elsewhere now: a reload moved it off the lost topic.
func (r *Router) CountRuleTopicMissing(rule, topic string) {
	for i := range r.rules {
		if st := &r.rules[i]; st.Action == ActionTopic && st.Name == rule && st.Topic == topic && r.ruleTopic[i][2] != nil {
			r.ruleTopic[i][2].Inc()
		}
	}
}
