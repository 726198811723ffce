package route

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseKeyFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		src    source
		header string
		paths  []string // gjson paths of a json source
	}{
		{"json:team_id", sourceJSON, "", []string{"team_id"}},
		{"json:properties.team", sourceJSON, "", []string{"properties.team"}},
		{"json:token+distinct_id", sourceJSON, "", []string{"token", "distinct_id"}},
		{"json:a.b+c.d.e", sourceJSON, "", []string{"a.b", "c.d.e"}},
		{"json:$team", sourceJSON, "", []string{`\$team`}},
		{"json:te*m?|x#@y", sourceJSON, "", []string{`te\*m\?\|x\#\@y`}},
		{"json:@this", sourceJSON, "", []string{`\@this`}},
		{"json:a:b", sourceJSON, "", []string{"a:b"}},
		{"header:team", sourceHeader, "team", nil},
		{"header:X-Team:id", sourceHeader, "X-Team:id", nil},
		{"key", sourceKey, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			k, err := ParseKeyFrom(tt.in)
			if err != nil {
				t.Fatalf("ParseKeyFrom(%q): %v", tt.in, err)
			}
			if k.src != tt.src || k.header != tt.header {
				t.Errorf("source %d header %q, want %d %q", k.src, k.header, tt.src, tt.header)
			}
			var paths []string
			for _, f := range k.fields {
				paths = append(paths, f.path)
			}
			if strings.Join(paths, " ") != strings.Join(tt.paths, " ") {
				t.Errorf("paths %q, want %q", paths, tt.paths)
			}
			if got := k.String(); got != tt.in {
				t.Errorf("String() = %q, want %q", got, tt.in)
			}
			var u KeyFrom
			if err := u.UnmarshalText([]byte(tt.in)); err != nil || u.String() != tt.in {
				t.Errorf("UnmarshalText: %v, %q", err, u.String())
			}
			if b, _ := k.MarshalText(); string(b) != tt.in {
				t.Errorf("MarshalText() = %q", b)
			}
		})
	}
}

func TestParseKeyFromErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `unknown source "" (want json:FIELD, header:NAME or key)`},
		{"foo", `unknown source "foo" (want json:FIELD, header:NAME or key)`},
		{"foo:bar", `unknown source "foo" (want json:FIELD, header:NAME or key)`},
		{"JSON:team_id", `unknown source "JSON"`},
		{"json", "source json needs an argument"},
		{"header", "source header needs an argument"},
		{"json:", "empty field (want json:FIELD)"},
		{"json:a+", "field 2 of 2 is empty"},
		{"json:+a", "field 1 of 2 is empty"},
		{"json:a..b", `field "a..b": path part 2 of 3 is empty`},
		{"json:.a", `field ".a": path part 1 of 2 is empty`},
		{"json:a.", `field "a.": path part 2 of 2 is empty`},
		{"header:", "empty header name"},
		{"key:x", "source key takes no argument"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := ParseKeyFrom(tt.in)
			if err == nil {
				t.Fatalf("ParseKeyFrom(%q): no error", tt.in)
			}
			if !errors.Is(err, ErrBadKeyFrom) {
				t.Errorf("error %v does not wrap ErrBadKeyFrom", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			var k KeyFrom
			if err := k.UnmarshalText([]byte(tt.in)); err == nil || !k.IsZero() {
				t.Errorf("UnmarshalText(%q) = %v, left %q", tt.in, err, k.String())
			}
		})
	}
}

func mustKeyFrom(t testing.TB, s string) KeyFrom {
	t.Helper()
	k, err := ParseKeyFrom(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTeamJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, from, value string
		team              string
		reason            reasonCode
		detail            string // dead letter only: a part of the detail sentence
	}{
		{"int", "json:team_id", `{"team_id":42}`, "42", 0, ""},
		{"string", "json:team_id", `{"team_id":"42"}`, "42", 0, ""},
		{"negative float as written", "json:team_id", `{"team_id":-1.50e3}`, "-1.50e3", 0, ""},
		{"white space", "json:team_id", " \n\t{ \"team_id\" :\n 7 }\r\n", "7", 0, ""},
		{"later field", "json:team_id", `{"a":{"team_id":1},"b":[1,{"x":"}"}],"team_id":"t"}`, "t", 0, ""},
		{"dotted", "json:properties.team", `{"team":"top","properties":{"x":1,"team":"nested"}}`, "nested", 0, ""},
		{"deep dotted", "json:a.b.c", `{"a":{"b":{"c":3}}}`, "3", 0, ""},
		{"escaped string", "json:team_id", `{"team_id":"te\"am"}`, `te"am`, 0, ""},
		{"unicode escape", "json:team_id", `{"team_id":"\u00e9quipe"}`, "équipe", 0, ""},
		{"unicode", "json:team_id", `{"team_id":"東京🚀"}`, "東京🚀", 0, ""},
		{"invalid utf-8 kept", "json:team_id", "{\"team_id\":\"t\xffm\"}", "t\xffm", 0, ""},
		{"literal star", "json:te*m", `{"team":"wild","te*m":"lit"}`, "lit", 0, ""},
		{"literal question", "json:te?m", `{"team":"wild","te?m":"lit"}`, "lit", 0, ""},
		{"literal pipe hash at", "json:a|b#c@d", `{"a":{"b":1},"a|b#c@d":"lit"}`, "lit", 0, ""},
		{"literal modifier", "json:@this", `{"@this":"lit"}`, "lit", 0, ""},
		{"literal bang", "json:!true", `{"!true":"lit"}`, "lit", 0, ""},
		{"composite", "json:token+distinct_id", `{"distinct_id":"u1","token":"phc_x"}`, "phc_x:u1", 0, ""},
		{"composite number and dotted", "json:team_id+p.user", `{"team_id":2,"p":{"user":"u"}}`, "2:u", 0, ""},
		{"duplicate key: first wins", "json:team_id", `{"team_id":1,"team_id":2}`, "1", 0, ""},

		{"empty value", "json:team_id", ``, "", reasonNotJSON, "value is empty"},
		{"space only", "json:team_id", "  \n", "", reasonNotJSON, "value is not valid JSON"},
		{"plain text", "json:team_id", `team_id=2`, "", reasonNotJSON, "value is not valid JSON"},
		{"binary", "json:team_id", "\x1f\x8b\x08\x00\xff", "", reasonNotJSON, "value is not valid JSON"},
		{"truncated", "json:team_id", `{"team_id":2,"event":"$pagev`, "", reasonNotJSON, "value is not valid JSON"},
		{"garbage before", "json:team_id", `xx{"team_id":2}`, "", reasonNotJSON, "value is not valid JSON"},
		{"garbage after", "json:team_id", `{"team_id":2}x`, "", reasonNotJSON, "value is not valid JSON"},
		{"array", "json:team_id", `[{"team_id":2}]`, "", reasonNotJSON, "value is an array, not a JSON object"},
		{"string value", "json:team_id", `"team_id"`, "", reasonNotJSON, "value is a string, not a JSON object"},
		{"null value", "json:team_id", `null`, "", reasonNotJSON, "value is null, not a JSON object"},
		{"number value", "json:team_id", ` 2 `, "", reasonNotJSON, "value is a number, not a JSON object"},
		{"missing", "json:team_id", `{"team":2}`, "", reasonFieldMissing, `json field "team_id" not found`},
		{"null", "json:team_id", `{"team_id":null}`, "", reasonFieldMissing, `json field "team_id" not found or null`},
		{"nested missing", "json:properties.team", `{"properties":{}}`, "", reasonFieldMissing, `"properties.team"`},
		{"parent not object", "json:properties.team", `{"properties":"x"}`, "", reasonFieldMissing, `"properties.team"`},
		{"wildcard not applied", "json:te*m", `{"team":"x"}`, "", reasonFieldMissing, `"te*m"`},
		{"composite missing second", "json:token+distinct_id", `{"token":"phc"}`, "", reasonFieldMissing, `"distinct_id"`},
		{"true", "json:team_id", `{"team_id":true}`, "", reasonFieldType, `json field "team_id" is a boolean, want a string or a number`},
		{"false", "json:team_id", `{"team_id":false}`, "", reasonFieldType, "a boolean"},
		{"object", "json:team_id", `{"team_id":{"id":2}}`, "", reasonFieldType, "an object"},
		{"array field", "json:team_id", `{"team_id":[2]}`, "", reasonFieldType, "an array"},
		{"empty string", "json:team_id", `{"team_id":""}`, "", reasonFieldEmpty, `json field "team_id" is an empty string`},
		{"composite empty first", "json:token+distinct_id", `{"token":"","distinct_id":"u"}`, "", reasonFieldEmpty, `"token"`},
		{"nested 10000 deep", "json:team_id", `{"team_id":1,"x":` + strings.Repeat("[", 9_999) + strings.Repeat("]", 9_999) + `}`, "1", 0, ""},
		{"nested 10001 deep", "json:team_id", `{"team_id":1,"x":` + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + `}`, "", reasonNotJSON, "value nests deeper than 10000 levels"},
		{"many brackets, shallow", "json:team_id", `{"team_id":1,"x":[` + strings.Repeat("[],{},", 6_000) + `"[[[[{{{{"]}`, "1", 0, ""},
		{"brackets in strings", "json:team_id", `{"team_id":1,"x":"` + strings.Repeat("[", 20_000) + `"}`, "1", 0, ""},
		{"escaped quotes in strings", "json:team_id", `{"team_id":1,"x":"` + strings.Repeat(`\"[`, 20_000) + `"}`, "1", 0, ""},
		{"deep garbage", "json:team_id", strings.Repeat("]", 5_000) + strings.Repeat("[", 6_000), "", reasonNotJSON, "value is not valid JSON"},
		{"too long", "json:team_id", `{"team_id":"` + strings.Repeat("x", 257) + `"}`, "", reasonKeyTooLong, "longer than the 256 bytes allowed (257 bytes or more)"},
		{"composite too long", "json:a+b", `{"a":"` + strings.Repeat("x", 200) + `","b":"` + strings.Repeat("y", 56) + `"}`, "", reasonKeyTooLong, "257 bytes or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := mustKeyFrom(t, tt.from)
			var s Scratch
			team, f := k.team(&kgo.Record{Value: []byte(tt.value)}, &s, DefaultMaxKeyBytes)
			if team != tt.team || f.reason != tt.reason {
				t.Fatalf("team(%q) = %q, %q; want %q, %q", tt.value, team, f.reason, tt.team, tt.reason)
			}
			if tt.reason == reasonNone {
				return
			}
			if d := k.detail(f, DefaultMaxKeyBytes); !strings.Contains(d, tt.detail) {
				t.Errorf("detail %q, want it to contain %q", d, tt.detail)
			}
		})
	}
}

func TestTeamAtMaxKeyBytes(t *testing.T) {
	t.Parallel()
	var s Scratch
	k := mustKeyFrom(t, "json:a+b")
	// 3 + 1 + 4 = 8 bytes: at the limit is fine, one over is not.
	rec := &kgo.Record{Value: []byte(`{"a":"abc","b":"defg"}`)}
	if team, f := k.team(rec, &s, 8); team != "abc:defg" || f.reason != reasonNone {
		t.Errorf("at the limit: %q, %v", team, f.reason)
	}
	if _, f := k.team(rec, &s, 7); f.reason != reasonKeyTooLong {
		t.Errorf("over the limit: %v", f.reason)
	}
	key := mustKeyFrom(t, "key")
	if _, f := key.team(&kgo.Record{Key: []byte("12345678")}, &s, 8); f.reason != reasonNone {
		t.Errorf("key at the limit: %v", f.reason)
	}
	if _, f := key.team(&kgo.Record{Key: []byte("123456789")}, &s, 8); f.reason != reasonKeyTooLong {
		t.Errorf("key over the limit: %v", f.reason)
	}
}

func TestTeamHeaderAndKey(t *testing.T) {
	t.Parallel()
	hdrs := func(kv ...string) []kgo.RecordHeader {
		var h []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			h = append(h, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return h
	}
	tests := []struct {
		name, from string
		rec        *kgo.Record
		team       string
		reason     reasonCode
		detail     string
	}{
		{"header", "header:team", &kgo.Record{Headers: hdrs("a", "1", "team", "t1")}, "t1", 0, ""},
		{"header first wins", "header:team", &kgo.Record{Headers: hdrs("team", "t1", "team", "t2")}, "t1", 0, ""},
		{"header not json", "header:team", &kgo.Record{Value: []byte("\xff"), Headers: hdrs("team", "t1")}, "t1", 0, ""},
		{"header case-sensitive", "header:team", &kgo.Record{Headers: hdrs("Team", "t1")}, "", reasonHeaderMissing, `header "team" not found`},
		{"header missing", "header:team", &kgo.Record{}, "", reasonHeaderMissing, `header "team" not found`},
		{"header empty", "header:team", &kgo.Record{Headers: hdrs("team", "")}, "", reasonFieldEmpty, `header "team" is empty`},
		{"header nil", "header:team", &kgo.Record{Headers: []kgo.RecordHeader{{Key: "team"}}}, "", reasonFieldEmpty, `header "team" is empty`},
		{"header too long", "header:team", &kgo.Record{Headers: hdrs("team", strings.Repeat("t", 257))}, "", reasonKeyTooLong, "257 bytes"},
		{"key", "key", &kgo.Record{Key: []byte("k1"), Value: []byte("not json")}, "k1", 0, ""},
		{"key binary", "key", &kgo.Record{Key: []byte{0, 0xff, 1}}, "\x00\xff\x01", 0, ""},
		{"key nil", "key", &kgo.Record{}, "", reasonKeyMissing, "record key is empty"},
		{"key empty", "key", &kgo.Record{Key: []byte{}}, "", reasonKeyMissing, "record key is empty"},
		{"key too long", "key", &kgo.Record{Key: make([]byte, 300)}, "", reasonKeyTooLong, "300 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := mustKeyFrom(t, tt.from)
			team, f := k.team(tt.rec, &Scratch{}, DefaultMaxKeyBytes)
			if team != tt.team || f.reason != tt.reason {
				t.Fatalf("team = %q, %q; want %q, %q", team, f.reason, tt.team, tt.reason)
			}
			if tt.reason != reasonNone {
				if d := k.detail(f, DefaultMaxKeyBytes); !strings.Contains(d, tt.detail) {
					t.Errorf("detail %q, want it to contain %q", d, tt.detail)
				}
			}
		})
	}
}

// A composite key is joined in the scratch buffer: the buffer is reused, and a key read
// before is overwritten by the next one, as Outcome.Team documents.
func TestCompositeScratchReuse(t *testing.T) {
	t.Parallel()
	k := mustKeyFrom(t, "json:token+distinct_id")
	var s Scratch
	a, _ := k.team(&kgo.Record{Value: []byte(`{"token":"t","distinct_id":"aaaa"}`)}, &s, 256)
	if a != "t:aaaa" {
		t.Fatalf("first key %q", a)
	}
	keep := strings.Clone(a)
	b, _ := k.team(&kgo.Record{Value: []byte(`{"token":"t","distinct_id":"bbbb"}`)}, &s, 256)
	if b != "t:bbbb" || keep != "t:aaaa" {
		t.Fatalf("second key %q, first kept %q", b, keep)
	}
}
