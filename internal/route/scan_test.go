package route

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// stringEndLoop is stringEnd as a plain byte loop (gjson's way): the reference for
// TestStringEnd and BenchmarkStringEnd.
func stringEndLoop(js string, i int) int {
	for ; i < len(js); i++ {
		switch js[i] {
		case '"':
			return i
		case '\\':
			i++
		}
	}
	return scanMalformed
}

// stringEndIndexByte is stringEnd jumping from quote to quote with strings.IndexByte, for
// BenchmarkStringEnd.
func stringEndIndexByte(js string, i int) int {
	start := i
	for {
		q := strings.IndexByte(js[i:], '"')
		if q < 0 {
			return scanMalformed
		}
		if q += i; !escaped(js, start, q) {
			return q
		}
		i = q + 1
	}
}

func TestStringEnd(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		``, `"`, `\`, `\"`, `\\"`, `\\\"x"`, `abc"`, `a\"b"`, `日本語"`,
		`0123456789abcdef\"ghijklmnop"`, `aaaaaaa\`, `aaaaaaaaaaaaa\"`, `aaaaaaa"`, `aaaaaaaa"`,
		strings.Repeat(`\\`, 9) + `"`, strings.Repeat(`\`, 17) + `""`, strings.Repeat(`\"`, 20) + `x"y"`,
		"\xff\x80\x22\x22", `{}[]"`, `#"`, `!"`,
	} {
		for _, prefix := range []string{"", `"`, `\`, `xx`} {
			js := prefix + s
			if got, want := stringEnd(js, len(prefix)), stringEndLoop(js, len(prefix)); got != want {
				t.Errorf("stringEnd(%q, %d) = %d, want %d", js, len(prefix), got, want)
			}
		}
	}
}

// stringEnd agrees with the byte loop on random strings up to 300 bytes long, of runs of
// backslashes and quotes: runs that cross its words' edges, of odd and even lengths, and
// starts anywhere in them.
func TestStringEndRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 8))
	alphabet := []string{"a", "a", "a", `\`, `\`, `"`, `\\`, `\"`}
	for range 20_000 {
		var b strings.Builder
		for n := rng.IntN(300); b.Len() < n; {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		js := b.String()
		for _, i := range []int{0, rng.IntN(len(js) + 1)} {
			if got, want := stringEnd(js, i), stringEndLoop(js, i); got != want {
				t.Fatalf("stringEnd(%q, %d) = %d, want %d", js, i, got, want)
			}
		}
	}
}

// FuzzStringEnd checks stringEnd against the byte loop on any bytes from any start.
func FuzzStringEnd(f *testing.F) {
	f.Add(strings.Repeat(`a\"`, 30)+`"`, 0)
	f.Add(strings.Repeat(`\`, 63)+`""`, 1)
	f.Fuzz(func(t *testing.T, js string, i int) {
		if i < 0 || i > len(js) {
			return
		}
		if got, want := stringEnd(js, i), stringEndLoop(js, i); got != want {
			t.Fatalf("stringEnd(%q, %d) = %d, want %d", js, i, got, want)
		}
	})
}

func TestSkipNested(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		js   string
		want int
	}{
		{`{}`, 2},
		{`[]x`, 2},
		{`{"a":[1,{"b":"}"}],"c":"\"]"} tail`, 29},
		{`[[[[[[[[[[1]]]]]]]]]]`, 21},
		{`{"a":"` + strings.Repeat("x", 40) + `"}`, 48},
		{`{"a":"{{{{{{{{[[[[[[[["}`, 24},
		{`{"a":1`, scanMalformed},
		{`{"a":"}`, scanMalformed},
	} {
		if got := skipNested(tt.js, 0); got != tt.want {
			t.Errorf("skipNested(%q) = %d, want %d", tt.js, got, tt.want)
		}
	}
}

// unescapedIs agrees with encoding/json on what a member name means, escapes and broken
// surrogates included.
func TestUnescapedIs(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`team\u005fid`, `\u0074eam_id`, `team_id\u0000`, `\"q\"`, `a\\b`, `a\/b`, `\b\f\n\r\t`,
		`\u00e9quipe`, `\u00E9quipe`, `\ud83d\ude80`, `\ud83d`, `\ud83dx`, `\ude80\ud83d`, `\ud83d\u0041`,
		`\ud83d\ud83d\ude80`, `\u12`, `\x`, `plain`, `\u`, `\`,
	} {
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			for _, name := range []string{"", "x", raw} { // invalid: matches nothing with a backslash
				if unescapedIs(raw, name) && strings.Contains(raw, `\`) {
					t.Errorf("unescapedIs(%q, %q) on an invalid escape", raw, name)
				}
			}
			continue
		}
		if !unescapedIs(raw, want) {
			t.Errorf("unescapedIs(%q, %q) = false, encoding/json reads it so", raw, want)
		}
		for _, other := range []string{want + "x", strings.TrimSuffix(want, want[len(want)-1:]), "x" + want} {
			if unescapedIs(raw, other) {
				t.Errorf("unescapedIs(%q, %q) = true, encoding/json reads %q", raw, other, want)
			}
		}
	}
}

// BenchmarkStringEnd finds the end of the long string of embedded JSON in the sample
// events, full of escaped quotes, three ways: the numbers behind stringEnd's comment.
func BenchmarkStringEnd(b *testing.B) {
	for _, name := range []string{"team_id_int.json", "large_team_id_last.json"} {
		v := string(readEvent(b, name))
		start := strings.Index(v, `"data":"`) + len(`"data":"`)
		want := stringEnd(v, start)
		for _, f := range []struct {
			name string
			fn   func(string, int) int
		}{{"swar", stringEnd}, {"indexbyte", stringEndIndexByte}, {"loop", stringEndLoop}} {
			b.Run(name+"/"+f.name, func(b *testing.B) {
				if f.fn(v, start) != want {
					b.Fatal("disagrees with stringEnd")
				}
				b.SetBytes(int64(want - start))
				for b.Loop() {
					f.fn(v, start)
				}
			})
		}
	}
}

// members finds a name whatever its length (the lengths are told apart by a bit each, the
// last for every name of 63 bytes or more) and however the value escapes it.
func TestMembersNameLengths(t *testing.T) {
	long := strings.Repeat("n", 63)
	longer := strings.Repeat("n", 90)
	js := `{"a":1,"` + long + `":2,"` + longer + `x":3,"` + longer + `":4,"team\u005fid":5,"` + strings.Repeat("m", 7) + `":6}`
	var names []memberName
	for _, n := range []string{"a", long, longer, "team_id", "zzzzzzz", "absent"} {
		names = append(names, newMemberName(n))
	}
	at := make([]int, len(names))
	if members(js, 0, names, at, nil, nil) < 0 {
		t.Fatal("malformed")
	}
	var got []string
	for _, i := range at {
		if i <= 0 {
			got = append(got, "-")
			continue
		}
		got = append(got, js[i:i+1])
	}
	if want := []string{"1", "2", "4", "5", "-", "-"}; !slices.Equal(got, want) {
		t.Errorf("values %v, want %v", got, want)
	}
}

// A value cut off anywhere is dead-lettered as not JSON, whatever the key source: never a
// panic, which would stop every gate reading the record. Cut after a dotted key's
// top-level name, the scan found the name's value at the value's end; cut after a
// backslash, the look for an escaped name ran past it.
func TestCutOffValuesAreDeadLettered(t *testing.T) {
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, value string }{
		{"json:properties.team", `{"properties":`},
		{"json:properties.team", `{"a":1,"properties": `},
		{"json:team_id", `{"team_id":"abc\`},
		{"json:team_id", `{"team_id":\`},
		{"json:team_id+distinct_id", `{"team_id":"a","distinct_id":"b\`},
		{"json:team_id", `{"team_id":`},
		{"json:team_id", `{"team_id": `},
		{"json:p.0.team", `{"p":`},
		{"json:p.0.team", `{"p":[`},
		{"json:properties.team", `{"properties":{"team":`},
	} {
		// Through a rules router too, whose fields are read in one shared pass.
		rr := newRuleFixture(t, Config{}, ruleSpec{Rule{Name: "r", Key: mustKeyFrom(t, c.from), Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}},
			ruleSpec{Rule{Name: "u", Key: mustKeyFrom(t, "json:distinct_id+team_id"), SkipMissing: true, Action: ActionOverflow}, []limit.Config{{Threshold: 1000}}})
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s, %q, with rules: Route panics: %v", c.from, c.value, p)
				}
			}()
			if _, o := rr.r.Route(t0, &kgo.Record{Value: []byte(c.value)}, &Scratch{}); o.Route != DeadLetter || o.Reason != "not_json" {
				t.Errorf("%s, %q, with rules: %s %s, want dead-lettered not_json", c.from, c.value, o.Route, o.Reason)
			}
		}()
		for _, validate := range []bool{false, true} {
			r, err := New(Config{KeyFrom: mustKeyFrom(t, c.from), ValidateJSON: validate, AcceptedTopic: "a", OverflowTopic: "o", DeadLetterTopic: "d"}, l, nil)
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s, %q (validate %t): Route panics: %v", c.from, c.value, validate, p)
					}
				}()
				out, o := r.Route(t0, &kgo.Record{Value: []byte(c.value)}, &Scratch{})
				if o.Route != DeadLetter || o.Reason != "not_json" || out.Topic != "d" {
					t.Errorf("%s, %q (validate %t): %s %s to %q, want dead-lettered not_json", c.from, c.value, validate, o.Route, o.Reason, out.Topic)
				}
			}()
		}
	}
}

// members gives the end of each value it walked past, the end skipValue finds, so that
// a rule reading it (fieldValue) need not find it again; one where it stopped early, or
// of a name found twice, it leaves unset or as skipValue has it.
func TestMembersEnds(t *testing.T) {
	js := `{"s":"a\"b}","n":-12.5e3 ,"o":{"x":[1,"]"]},"dup":1,"dup":"two","t":true,"last":"z"}`
	names := []memberName{newMemberName("s"), newMemberName("n"), newMemberName("o"), newMemberName("t"), newMemberName("dup"), newMemberName("last")}
	at, ends := make([]int, len(names)), make([]int, len(names))
	if members(js, 0, names, at, ends, nil) < 0 {
		t.Fatal("malformed")
	}
	for j, n := range names {
		if at[j] <= 0 {
			continue // dup: read again by whoever reads it (ambiguous)
		}
		if ends[j] == 0 {
			if n.s != "last" {
				t.Errorf("%s: no end, though members walked past it", n.s)
			}
			continue // where it stopped early
		}
		if want := skipValue(js, at[j]); ends[j] != want {
			t.Errorf("%s: end %d (%q), want %d (%q)", n.s, ends[j], js[at[j]:ends[j]], want, js[at[j]:want])
		}
	}
}
