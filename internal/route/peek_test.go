package route

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/limit"
)

// FuzzPeekAgreesWithRules: wherever a router with rules reads a key of which m is a
// member, m.Peek reads m's value, the one in the key (replay deals records to its
// workers by Peek: parallel.go). With and without validation, with a match rule first.
func FuzzPeekAgreesWithRules(f *testing.F) {
	for i, v := range fuzzSeeds(f) {
		f.Add(v, uint8(i))
	}
	f.Add([]byte(`{"token":"a","x":1,"distinct_id":"b","event":"e"}`), uint8(0))
	f.Add([]byte(`{"token":"a","distinct_id":"b","token":"c"}`), uint8(1))
	f.Add([]byte(`{"properties":{"team":"a"},"token":"x:%","distinct_id":"b"`), uint8(2))
	sets := [][]string{
		{"json:token+distinct_id", "json:token", "json:token+event"},
		{"json:properties.team+distinct_id", "json:properties.team"},
		{"json:distinct_id+token", "json:token"},
	}
	f.Fuzz(func(t *testing.T, value []byte, pick uint8) {
		keys := sets[int(pick)%len(sets)]
		member := mustKeyFrom(t, keys[len(keys)-1]).Members()[0]
		for _, validate := range []bool{false, true} {
			var rules []Rule
			for i, k := range keys {
				l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				ru := Rule{Name: string(rune('a' + i)), Key: mustKeyFrom(t, k), Limiters: []*limit.Limiter{l}, Action: ActionTag, SkipMissing: true}
				if i == 0 && pick%2 == 0 {
					ru.Match = []RuleMatch{{Field: mustKeyFrom(t, "json:event"), Values: []string{"x"}, Not: true}}
				}
				rules = append(rules, ru)
			}
			r, err := NewRules(Config{AcceptedTopic: "a", OverflowTopic: "o", DeadLetterTopic: "d", ValidateJSON: validate}, rules, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := &kgo.Record{Value: value}
			s := &Scratch{}
			js, code := "", reasonNone
			if r.plan.shared {
				js, code = r.rulesJSON(rec, s)
			}
			var ps Scratch
			pv, pok := member.Peek(rec, &ps)
			pv = strings.Clone(pv)
			for i := range r.rules {
				if code != reasonNone {
					break
				}
				st := &r.rules[i]
				key, kf := r.read(&st.Key, rec, js, false, s, r.maxKey)
				if kf != reasonNone {
					continue
				}
				// the member's part of the key
				parts := strings.Split(key, ":")
				var want string
				for j, m := range st.Key.Members() {
					if m.String() == member.String() {
						want = parts[j]
						if !st.Key.Composite() {
							want = key
						}
					}
				}
				if !st.Key.Composite() {
					if !pok || pv != want {
						t.Fatalf("validate %v %s: key %q, Peek %q %v on %q", validate, st.Key, key, pv, pok, value)
					}
				} else if !pok || string(keypart.Append(nil, pv)) != want {
					t.Fatalf("validate %v %s: key %q, Peek %q %v on %q", validate, st.Key, key, pv, pok, value)
				}
			}
		}
	})
}
