package main

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

type teamRouter struct{}

func (teamRouter) RouteInto(time.Time, *kgo.Record, *route.Scratch, *kgo.Record) route.Outcome {
	return route.Outcome{}
}
func (teamRouter) DeadLetter(*kgo.Record, string, string) *kgo.Record { return nil }
func (teamRouter) CountDeadLettered()                                 {}
func (teamRouter) TeamOf(*kgo.Record, *route.Scratch) string          { return "42" }

// The demo's counting router reads teams as the gate's router does: the consumer counts
// the outcome rows of the records it decides itself (a dead letter after a refusal)
// under their team only through TeamOf, which the embedding hid (the demo counted them
// under no team).
func TestStatsRouterReadsTeams(t *testing.T) {
	r := (&devStats{}).wrap(teamRouter{})
	tr, ok := r.(interface {
		TeamOf(*kgo.Record, *route.Scratch) string
	})
	if !ok || tr.TeamOf(&kgo.Record{}, nil) != "42" {
		t.Fatalf("the wrapped router reads no team (TeamOf offered: %v)", ok)
	}
}

// The view's top keys show each key's level against the threshold of the rule that sent
// it away. A key's records decided by another rule of the same key set its figures, and
// the view paired them with the sending rule: a reviewer's gate-dev showed team 1005
// "level=245/100000,rule=runaway", 100000 being another rule's threshold (forcer's).
func TestTopKeyFiguresAreItsRules(t *testing.T) {
	s := newDevStats()
	s.record(route.Outcome{Route: route.Overflow, Rule: "hot", KeyRule: "hot", Team: "1", Decision: limit.Decision{Level: 150, Threshold: 100}})
	s.record(route.Outcome{Route: route.Accepted, KeyRule: "team", Team: "1", Decision: limit.Decision{Level: 1446, Threshold: 2000}})
	ts := s.snapshot(time.Now(), 0, nil).teams["1"]
	if ts.rule != "hot" || ts.last.Threshold != 100 || ts.last.Level != 150 {
		t.Errorf("key 1 shown as level %v / %d of rule %q; want 150 / 100 of hot, the rule that sent it away", ts.last.Level, ts.last.Threshold, ts.rule)
	}
	// Its own rule's later checks move it: sent away no more, it drains.
	s.record(route.Outcome{Route: route.Accepted, KeyRule: "hot", Team: "1", Decision: limit.Decision{Level: 90, Threshold: 100}})
	if ts := s.snapshot(time.Now(), 0, nil).teams["1"]; ts.last.Level != 90 {
		t.Errorf("key 1's level %v after its rule's check at 90", ts.last.Level)
	}
	// Without a rules file no rule is named, and every check is the one limit's.
	s.record(route.Outcome{Route: route.Overflow, Team: "2", Decision: limit.Decision{Level: 20, Threshold: 10}})
	s.record(route.Outcome{Route: route.Accepted, Team: "2", Decision: limit.Decision{Level: 8, Threshold: 10}})
	if ts := s.snapshot(time.Now(), 0, nil).teams["2"]; ts.last.Level != 8 {
		t.Errorf("key 2's level %v after the limit's check at 8", ts.last.Level)
	}
}
