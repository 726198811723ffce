package route

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// Without validation (the default) a record is read only as far as its key needs; what is
// read must still be JSON, or the gate counts a key no decoder downstream reads, and
// splits a team (a review of keys against real traffic). Each case routes through a
// router without a rules file (the touch-ahead path, which reads a plain value as it
// finds it) and one with two rules (the shared pass), and reads the key as the team view
// does; each must agree with validation.
func TestLaxReadingStaysJSON(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		team        string // "": dead-lettered not_json
		detail      string // in the dead letter's detail
	}{
		// Several events in one record, as a proxy batching line by line writes them:
		// counted once, under the first event's team, the second's uncounted.
		{"two events, a line each", "{\"team_id\":2,\"event\":\"a\"}\n{\"team_id\":3,\"event\":\"b\"}", "", "more follows its object"},
		{"two events on a line", `{"team_id":2} {"team_id":3}`, "", "more follows its object"},
		{"garbage after the walk's end", `{"team_id":2,"x":{}}x{"team_id":3}`, "", "more follows its object"},
		{"a trailing newline", "{\"team_id\":2}\n", "2", ""},
		{"trailing white space", "{\"team_id\":2} \t\r\n", "2", ""},
		// Numbers by JSON's grammar, not by their characters: 02 was a key beside 2.
		{"a leading zero", `{"team_id":02}`, "", "not valid JSON"},
		{"a negative leading zero", `{"team_id":-02}`, "", "not valid JSON"},
		{"a dash inside", `{"team_id":1-2}`, "", "not valid JSON"},
		{"a dash alone", `{"team_id":-}`, "", "not valid JSON"},
		{"no digit after the point", `{"team_id":1.}`, "", "not valid JSON"},
		{"no digit before the point", `{"team_id":.5}`, "", "not valid JSON"},
		{"no exponent digits", `{"team_id":1e}`, "", "not valid JSON"},
		{"a number", `{"team_id":2}`, "2", ""},
		{"a negative number", `{"team_id":-2}`, "-2", ""},
		{"zero", `{"team_id":0}`, "0", ""},
		{"a fraction and an exponent", `{"team_id":0.5e-1}`, "0.5e-1", ""},
		{"an exponent", `{"team_id":2E+3}`, "2E+3", ""},
		// A raw control byte, which JSON requires escaped: "2<LF>" was a key beside "2".
		{"a raw newline", "{\"team_id\":\"2\n\"}", "", "not valid JSON"},
		{"a raw NUL", "{\"team_id\":\"2\x00\"}", "", "not valid JSON"},
		{"an escaped newline", `{"team_id":"2\n"}`, "2\n", ""},
		// Named, not "not valid JSON" alone: no viewer shows it.
		{"a byte order mark", "\xEF\xBB\xBF{\"team_id\":2}", "", "byte order mark"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, validate := range []bool{false, true} {
				for _, rules := range []bool{false, true} {
					var r *Router
					var counts func() map[string]int64 // the team rule's, or the limiter's
					if rules {
						rf := newRuleFixture(t, Config{ValidateJSON: validate},
							ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 100}}},
							ruleSpec{Rule{Name: "user", Key: mustKeyFrom(t, "json:team_id+distinct_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Threshold: 100}}})
						r, counts = rf.r, func() map[string]int64 { return rf.counts("team") }
					} else {
						f := newFixture(t, Config{ValidateJSON: validate}, limit.Config{Threshold: 100})
						r, counts = f.r, f.counts
					}
					out, o := r.Route(t0, input(tc.value, ""), &Scratch{})
					where := map[bool]string{false: "lax", true: "validated"}[validate] + map[bool]string{false: ", no rules", true: ", two rules"}[rules]
					if tc.team == "" {
						if o.Route != DeadLetter || o.Reason != ReasonNotJSON {
							t.Errorf("%s: %s %s (team %q), counts %v; want not_json", where, o.Route, o.Reason, o.Team, counts())
						} else if detail := string(headerValue(out, HeaderErrorDetail)); !validate && !strings.Contains(detail, tc.detail) {
							t.Errorf("%s: dead letter detail %q, want it to say %q", where, detail, tc.detail)
						}
						continue
					}
					if o.Route != Accepted || o.Team != tc.team {
						t.Errorf("%s: %s %s, team %q; want accepted as team %q", where, o.Route, o.Reason, o.Team, tc.team)
					}
					if want := map[string]int64{tc.team: 1}; !maps.Equal(counts(), want) {
						t.Errorf("%s: counts %v, want %v", where, counts(), want)
					}
				}
			}
		})
	}
}

// An input record's own copies of the headers the gate writes are left off every output:
// a reader taking the first header of a name read the producer's gate-overflow-reason,
// ahead of the gate's, and an accepted record the gate never tagged carried the gate-tag
// its producer wrote (a review). Other headers, gate-* ones the gate does not write
// among them, go through in their order; an accepted record without such headers shares
// the input's slice, as before (no allocation: TestRouteAllocs).
func TestInputGateHeadersLeftOff(t *testing.T) {
	f := newRuleFixture(t, Config{},
		ruleSpec{Rule{Name: "team", Key: mustKeyFrom(t, "json:team_id"), Action: ActionOverflow}, []limit.Config{{Threshold: 1}}})
	forged := []string{"trace", "t1", HeaderTag, "vip-bypass", HeaderOverflowReason, "forced", HeaderError, "spoofed", "gate-original-timestamp", "7", "gate-mine", "x"}
	keys := func(out *kgo.Record) []string {
		var ks []string
		for _, h := range out.Headers {
			ks = append(ks, h.Key+"="+string(h.Value))
		}
		return ks
	}
	var s Scratch
	out, o := f.r.Route(t0, input(`{"team_id":2}`, "", forged...), &s)
	if want := []string{"trace=t1", "gate-original-timestamp=7", "gate-mine=x"}; o.Route != Accepted || !slices.Equal(keys(out), want) {
		t.Errorf("accepted: %s, headers %v; want %v", o.Route, keys(out), want)
	}
	out, o = f.r.Route(t0, input(`{"team_id":2}`, "", forged...), &s) // over its limit of 1
	if want := []string{"trace=t1", "gate-original-timestamp=7", "gate-mine=x", HeaderOverflowReason + "=" + ReasonRateLimited, HeaderOverflowRule + "=team"}; o.Route != Overflow || !slices.Equal(keys(out), want) {
		t.Errorf("overflow: %s, headers %v; want %v", o.Route, keys(out), want)
	}
	out, o = f.r.Route(t0, input(`{"team":2}`, "", forged...), &s)
	if ks := keys(out); o.Route != DeadLetter || slices.Contains(ks, HeaderError+"=spoofed") || slices.Contains(ks, HeaderTag+"=vip-bypass") {
		t.Errorf("dead letter: %s, headers %v; want the gate's own error alone", o.Route, ks)
	}
}
