package route

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// While a rule's topic is marked missing, its records go to the overflow topic naming
// the topic they were for, and every other record is routed as ever; once the topic is
// back they go to it again.
func TestRuleTopicMissingGoesToOverflow(t *testing.T) {
	w := NewTopicWatch(topicOverflow)
	f := newRuleFixture(t, Config{RuleTopics: w},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "events_merges",
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$identify"}}}},
			[]limit.Config{{Window: time.Minute, Threshold: 1}}},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow},
			[]limit.Config{{Window: time.Minute, Threshold: 1000}}},
	)
	w.Use([]string{"events_merges"})
	if got := w.Topics(); !slices.Equal(got, []string{"events_merges"}) {
		t.Fatalf("watched %v", got)
	}
	f.r.Route(f.clk.Now(), event("t1", "u", "$identify"), nil) // reaches the threshold of 1
	if out, _ := f.r.Route(f.clk.Now(), event("t1", "u", "$identify"), nil); out.Topic != "events_merges" {
		t.Fatalf("over the merges rule with its topic there: to %s", out.Topic)
	}
	if !w.SetMissing("events_merges", true) || w.SetMissing("events_merges", true) || !w.Missing("events_merges") {
		t.Fatal("SetMissing does not report the change once")
	}
	if w.SetMissing("not_a_rule_topic", true) {
		t.Error("a topic no rule uses was marked")
	}
	out, o := f.r.Route(f.clk.Now(), event("t1", "u", "$identify"), nil)
	if out.Topic != topicOverflow || o.Route != Overflow || o.Rule != "merges" || o.Reason != ReasonRateLimited {
		t.Errorf("over the merges rule with its topic missing: %s %s %s rule %q, want %s", out.Topic, o.Route, o.Reason, o.Rule, topicOverflow)
	}
	if got := headerValues(out, HeaderRuleTopicMissing); !slices.Equal(got, []string{"events_merges"}) {
		t.Errorf("%s: %v", HeaderRuleTopicMissing, got)
	}
	if got := headerValues(out, HeaderOverflowRule); !slices.Equal(got, []string{"merges"}) {
		t.Errorf("%s: %v", HeaderOverflowRule, got)
	}
	// Another team, and the same team's other events, are routed as ever.
	for _, rec := range []*kgo.Record{event("t2", "u", "$pageview"), event("t1", "u", "$pageview")} {
		if out, _ := f.r.Route(f.clk.Now(), rec, nil); out.Topic != topicAccepted {
			t.Errorf("%s to %s, want accepted", rec.Value, out.Topic)
		}
	}
	if n := testutil.ToFloat64(f.r.ruleTopic[0][2]); n != 1 {
		t.Errorf("gate_rule_topic_records_total{merges, topic_missing} = %v, want 1", n)
	}
	w.SetMissing("events_merges", false)
	if out, _ := f.r.Route(f.clk.Now(), event("t1", "u", "$identify"), nil); out.Topic != "events_merges" || len(headerValues(out, HeaderRuleTopicMissing)) != 0 {
		t.Errorf("topic back: to %s, headers %v", out.Topic, out.Headers)
	}
	// A rule set without the topic: the watch forgets it.
	w.Use(nil)
	if w.Watched("events_merges") || w.Missing("events_merges") {
		t.Error("a topic no longer used is still watched")
	}
}

// A topic a reload retired is marked missing once its produce fails for want of it
// (RetiredGone: once, so that the failure is said once), never one in use or never used;
// and a reload that uses it again clears the mark, the reload having checked the topic.
func TestRetiredGone(t *testing.T) {
	w := NewTopicWatch(topicOverflow)
	w.Use([]string{"a"})
	if w.RetiredGone("a") || w.RetiredGone("never") || w.Missing("a") {
		t.Fatal("a topic in use, or never one, marked by RetiredGone")
	}
	w.Use(nil)
	if !w.RetiredGone("a") || !w.Missing("a") {
		t.Fatal("a retired topic not marked missing")
	}
	if w.RetiredGone("a") {
		t.Error("a retired topic's mark changed twice")
	}
	w.Use([]string{"a"})
	if w.Missing("a") {
		t.Error("a topic used again still marked missing from its retirement")
	}
}

// A reload that drops the rule of a topic marked missing leaves the mark: the old router
// routes on until the new one is stored, and its records for the topic go to overflow as
// before, not to the missing topic, where each would fail (an exactly-once transaction
// aborted) before it was rerouted. The mark was cleared by Use, before the new router took
// over.
func TestMissingMarkKeptWhenItsRuleIsDropped(t *testing.T) {
	w := NewTopicWatch(topicOverflow)
	f := newRuleFixture(t, Config{RuleTopics: w},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "events_merges"},
			[]limit.Config{{Window: time.Minute, Threshold: 1}}},
	)
	w.Use([]string{"events_merges"})
	w.SetMissing("events_merges", true)
	w.Use(nil) // a reload without the rule, its router not yet stored
	f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil)
	if out, _ := f.r.Route(f.clk.Now(), event("t1", "u", "e"), nil); out.Topic != topicOverflow {
		t.Errorf("the old router, over the rule, sent to %s, want %s: the topic is missing", out.Topic, topicOverflow)
	}
	if !w.Missing("events_merges") || w.RetiredGone("events_merges") {
		t.Error("the retired topic's mark was lost, or is said again")
	}
	w.Use([]string{"events_merges"})
	if w.Missing("events_merges") {
		t.Error("a topic used again (the reload checked it) still marked missing")
	}
}

// A record a rule would send to its own topic while that topic is marked missing is
// counted in an outcome row of overflow, under the rule and the reason it was over for
// (rate_limited, or forced), as docs/outcomes.md says: its row names no topic (the
// record's gate-rule-topic-missing header does). One whose topic is there is counted
// under topic:NAME.
func TestRuleTopicMissingOutcomeRow(t *testing.T) {
	w := NewTopicWatch(topicOverflow)
	f := newRuleFixture(t, Config{RuleTopics: w},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "events_merges"},
			[]limit.Config{{Window: time.Minute, Threshold: 1}}},
	)
	w.Use([]string{"events_merges"})
	agg := outcome.NewAgg(time.Minute, nil)
	s := Scratch{Outcomes: agg}
	var out kgo.Record
	for range 2 { // the first within the threshold, the second over it
		f.r.RouteInto(f.clk.Now(), event("t1", "u", "$identify"), &s, &out)
	}
	w.SetMissing("events_merges", true)
	f.r.RouteInto(f.clk.Now(), event("t1", "u", "$identify"), &s, &out)
	if out.Topic != topicOverflow {
		t.Fatalf("over the rule with its topic missing: to %s, want %s", out.Topic, topicOverflow)
	}
	want := map[string]int64{
		"t1|t1||accepted|allowed":                       1,
		"t1|t1|merges|topic:events_merges|rate_limited": 1,
		"t1|t1|merges|overflow|rate_limited":            1,
	}
	if got := rowsOf(agg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
}

// A record the consumer reroutes after its produce to a rule's topic failed is counted
// topic_missing under the rule only while the rule still sends to that topic: a reload
// that moved the rule from a lost topic to another counted the lost topic's retried
// records against the rule's new one (a review).
func TestCountRuleTopicMissingOfTheRulesOwnTopic(t *testing.T) {
	f := newRuleFixture(t, Config{RuleTopics: NewTopicWatch(topicOverflow)},
		ruleSpec{Rule{Name: "merges", Key: mustKey(t, "json:team_id"), Action: ActionTopic, Topic: "events_merges_v2"},
			[]limit.Config{{Window: time.Minute, Threshold: 1}}},
	)
	f.r.CountRuleTopicMissing("merges", "events_merges") // the topic it sent to before the reload
	if n := testutil.ToFloat64(f.r.ruleTopic[0][2]); n != 0 {
		t.Errorf("a record for the rule's old topic counted: topic_missing = %v, want 0", n)
	}
	f.r.CountRuleTopicMissing("merges", "events_merges_v2")
	if n := testutil.ToFloat64(f.r.ruleTopic[0][2]); n != 1 {
		t.Errorf("a record for the rule's topic: topic_missing = %v, want 1", n)
	}
}
