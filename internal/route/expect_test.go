package route

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// Expect reads every enforced rule's key as RouteInto does (a match first) and puts in
// each rule's limiters the keys of two or more of the records, each once, counting
// nothing: a composite key whose bytes the next record's read writes over is kept as it
// was (a copy), a key of one record and a shadow rule's are left out, a record no rule
// can read is skipped.
func TestExpectPutsInTheKeysOfSeveralRecords(t *testing.T) {
	lc := []limit.Config{{Window: time.Minute, Threshold: 1000}}
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "user", Key: mustKey(t, "json:team_id+distinct_id"), Action: ActionOverflow}, lc},
		ruleSpec{Rule{Name: "team", Key: mustKey(t, "json:team_id"), Action: ActionOverflow}, lc},
		ruleSpec{Rule{Name: "events", Key: mustKey(t, "json:team_id"), Action: ActionOverflow,
			Match: []RuleMatch{{Field: mustKey(t, "json:event"), Values: []string{"$pageview"}}}}, lc},
		ruleSpec{Rule{Name: "shadow", Key: mustKey(t, "json:team_id"), Action: ActionOverflow, Shadow: true}, lc},
	)
	var recs []*kgo.Record
	add := func(team, user, event string) {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"team_id":%q,"distinct_id":%q,"event":%q}`, team, user, event)})
	}
	add("a", "u1", "$pageview")
	add("a", "u1", "$pageview")
	add("a", "u2", "$identify")
	add("b", "u1", "$pageview") // team b: one record
	add("c", "v1", "x")         // team c: a fresh user a record
	add("c", "v2", "x")
	recs = append(recs, &kgo.Record{Value: []byte("not json")})
	if n := f.r.Expect(t0, recs, new(Scratch)); n != 4 {
		t.Errorf("Expect put %d keys in, want 4 (a/u1, a, c, a's events)", n)
	}
	want := map[string][]string{"user": {"a:u1"}, "team": {"a", "c"}, "events": {"a"}, "shadow": nil}
	for rule, keys := range want {
		var sw limit.Sweep
		f.lims[rule][0].Sweep(t0, &sw)
		var got []string
		for _, r := range sw.Reads {
			if r.Reason != limit.ReadPrimed {
				t.Errorf("rule %s: %q read as %v, want primed", rule, r.Team, r.Reason)
			}
			got = append(got, r.Team)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Errorf("rule %s: keys put in %q, want %q", rule, got, keys)
		}
		if len(sw.Counts) != 0 {
			t.Errorf("rule %s: counted %+v, want nothing", rule, sw.Counts)
		}
	}
}
