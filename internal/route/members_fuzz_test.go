package route

import (
	"bytes"
	"encoding/json"
	"testing"
)

var fuzzMemberNames = []string{"team_id", "a/b", `a"b`, `a\b`, "é", "\t", "x", "ab", "\u00e9t\u00e9", "a\x00"}

// members finds each of a set of names once, twice (-1) or not at all, as encoding/json
// decodes the object's member names, escapes and the early stop included.
func FuzzMembersAgainstEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"team_id":1,"a\/b":2,"a\"b":3,"a\\b":4,"\u00e9":5,"\t":6,"x":7,"ab":8}`))
	f.Add([]byte(`{"x":1,"team\u005fid":2,"team_id":3}`))
	f.Add([]byte(`{"x":1, "y":{"x":2}, "x" : 3}`))
	f.Add([]byte(`{"\ufffd":1,"\ud800":2}`))
	f.Add([]byte("{\"a\\u0000\":1,\"a\\u0000\":2}"))
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) {
			return
		}
		tr := bytes.TrimLeft(v, " \t\r\n")
		if len(tr) == 0 || tr[0] != '{' {
			return
		}
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		n, err := decodeNode(d)
		if err != nil {
			return
		}
		// Each member's value as encoding/json reads it: for a name that appears once,
		// members must point at that member's value, not another's of the same name
		// elsewhere (nested, or in a string).
		var raws map[string]json.RawMessage
		if err := json.Unmarshal(v, &raws); err != nil {
			t.Fatalf("encoding/json: %v on valid %q", err, v)
		}
		js := string(v)
		for a := 0; a < len(fuzzMemberNames); a++ {
			for b := a; b < len(fuzzMemberNames); b++ {
				set := []string{fuzzMemberNames[a]}
				if b != a {
					set = append(set, fuzzMemberNames[b])
				}
				names := make([]memberName, len(set))
				for i, s := range set {
					names[i] = newMemberName(s)
				}
				at := make([]int, len(set))
				if members(js, firstNonSpace(js), names, at, nil, nil) < 0 {
					t.Fatalf("malformed on valid %q", v)
				}
				for i, s := range set {
					cnt := 0
					for _, k := range n.keys {
						if k == s {
							cnt++
						}
					}
					got := at[i]
					ok := cnt == 0 && got == 0 || cnt == 1 && got > 0 || cnt > 1 && got == -1
					if !ok {
						t.Fatalf("name %q (set %q): at %d, encoding/json count %d, value %q", s, set, got, cnt, v)
					}
					if cnt == 1 {
						end := skipValue(js, got)
						if end < 0 || js[got:end] != string(raws[s]) {
							t.Fatalf("name %q (set %q): value at %d reads %q, encoding/json %q, value %q", s, set, got, js[got:max(end, got)], raws[s], v)
						}
					}
				}
			}
		}
	})
}
