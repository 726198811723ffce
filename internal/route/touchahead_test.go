package route

import (
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// TestTouchAheadChecksAsWithout routes the same records through two routers of one
// limit each, one that hashes its key as soon as its field is found and has the
// limiter's slot fetched with that hash (prefetchOwn, as every gate without a rules file
// has it, and one whose file's one rule reads the team) and one that does not, with and without outcomes: each record goes where it
// went without, and each key counts as much, keys of every shape a value can have
// (numbers, strings, escaped ones that are not touched, a field found twice, one missing,
// one too long, one first and one last).
func TestTouchAheadChecksAsWithout(t *testing.T) {
	values := []string{
		`{"team_id":"t1","event":"e"}`,
		`{"event":"e","team_id":"t2"}`,
		`{"team_id":42,"x":[1,2,{"team_id":3}]}`,
		`{"team_id":-7.5}`,
		`{"team_id":"t\u00e9"}`,
		`{"team_id":"a\"b"}`,
		`{"team_id":"t1","team_id":"t2"}`,
		`{"event":"e"}`,
		`{"team_id":""}`,
		`{"team_id":null}`,
		`{"team_id":"` + string(make([]byte, 300)) + `"}`,
		`{"team_id":"t3"`,
		`not json`,
	}
	// A router without a rules file, and one of a file whose one rule reads the team:
	// both have their one JSON reader hash its key ahead.
	routers := map[string]func(t *testing.T, lcfg limit.Config) (*Router, *limit.Limiter){
		"no file": func(t *testing.T, lcfg limit.Config) (*Router, *limit.Limiter) {
			f := newFixture(t, Config{}, lcfg)
			return f.r, f.lim
		},
		"one rule": func(t *testing.T, lcfg limit.Config) (*Router, *limit.Limiter) {
			f := newRuleFixture(t, Config{}, ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{lcfg}})
			return f.r, f.lims["team"][0]
		},
	}
	for kind, newRouter := range routers {
		for _, outcomes := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/outcomes=%v", kind, outcomes), func(t *testing.T) {
				touchAheadAsWithout(t, values, newRouter, outcomes)
			})
		}
	}
}

func touchAheadAsWithout(t *testing.T, values []string, newRouter func(*testing.T, limit.Config) (*Router, *limit.Limiter), outcomes bool) {
	seed := maphash.MakeSeed()
	lcfg := limit.Config{Threshold: 3, HashSeed: seed}
	onR, onLim := newRouter(t, lcfg)
	offR, offLim := newRouter(t, lcfg)
	if !onR.rules[0].prefetchOwn {
		t.Fatal("the router's one JSON reader does not hash its key ahead")
	}
	offR.rules[0].prefetchOwn = false
	var sOn, sOff Scratch
	if outcomes {
		sOn.Outcomes = outcome.NewAggSeeded(0, nil, seed)
		sOff.Outcomes = outcome.NewAggSeeded(0, nil, seed)
	}
	var outOn, outOff kgo.Record
	for round := range 6 {
		for _, v := range values {
			in := input(v, "k")
			a := onR.RouteInto(t0, in, &sOn, &outOn)
			b := offR.RouteInto(t0, input(v, "k"), &sOff, &outOff)
			if a.Route != b.Route || a.Reason != b.Reason || a.Team != b.Team || a.Decision != b.Decision {
				t.Fatalf("round %d, %s: %s %s %q %+v with the key hashed ahead, %s %s %q %+v without",
					round, v, a.Route, a.Reason, a.Team, a.Decision, b.Route, b.Reason, b.Team, b.Decision)
			}
			if outOn.Topic != outOff.Topic || len(outOn.Headers) != len(outOff.Headers) {
				t.Fatalf("round %d, %s: written to %s with %d headers, without to %s with %d", round, v, outOn.Topic, len(outOn.Headers), outOff.Topic, len(outOff.Headers))
			}
		}
	}
	for _, team := range []string{"t1", "t2", "42", "-7.5", "té", `a"b`} {
		a, okA := onLim.Snapshot(t0, team)
		b, okB := offLim.Snapshot(t0, team)
		if okA != okB || a.Pending != b.Pending || a.Limited != b.Limited {
			t.Errorf("%q: pending %d limited %v (cached %v) hashed ahead, %d %v (%v) without", team, a.Pending, a.Limited, okA, b.Pending, b.Limited, okB)
		}
		if !okA || a.Pending == 0 {
			t.Errorf("%q: not counted (cached %v, pending %d)", team, okA, a.Pending)
		}
	}
}
