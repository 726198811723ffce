package main

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/route"
)

type teamRouter struct{}

func (teamRouter) RouteInto(time.Time, *kgo.Record, *route.Scratch, *kgo.Record) route.Outcome {
	return route.Outcome{}
}
func (teamRouter) DeadLetter(*kgo.Record, string, string) *kgo.Record { return nil }
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
