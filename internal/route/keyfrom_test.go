package route

import (
	"encoding/json"
	"errors"
	"fmt"
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
		{"json:team_id + distinct_id", `field "team_id " starts or ends with a space`},
		{"json: team_id", `field " team_id" starts or ends with a space`},
		{"json:a. b", `field "a. b": path part " b" starts or ends with a space`},
		{"header:", "empty header name"},
		{"header: ip", `header name " ip" starts or ends with a space`},
		{"header:ip\n", `header name "ip\n" starts or ends with a space`},
		// Invisible characters, copied from a page or a chat: no field or header of that
		// name is sent, as for a space.
		{"json:team_id\u200b", `field "team_id\u200b" starts or ends with an invisible character (U+200B)`},
		{"json:\u200bteam_id+distinct_id", `field "\u200bteam_id" starts or ends with an invisible character (U+200B)`},
		{"json:a.b\u2060", `field "a.b\u2060": path part "b\u2060" starts or ends with an invisible character (U+2060)`},
		{"header:ip\ufeff", `header name "ip\ufeff" starts or ends with an invisible character (U+FEFF)`},
		// Quotes around a name, as JSON writes member names: part of the name, which no
		// record has.
		{`json:"team_id"`, `field "\"team_id\"" is in quotes, which would be part of the name: write team_id`},
		{`json:team_id+'distinct_id'`, `field "'distinct_id'" is in quotes, which would be part of the name: write distinct_id`},
		{`json:"a.b"`, `field "\"a.b\"" is in quotes, which would be part of the name: write a.b`},
		{`header:"ip"`, `header name "\"ip\"" is in quotes, which would be part of the name: write ip`},
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
		{"composite too long, then missing", "json:a+b", `{"a":"` + strings.Repeat("x", 300) + `"}`, "", reasonFieldMissing, `json field "b" not found`},
		{"composite too long, then empty", "json:a+b", `{"a":"` + strings.Repeat("x", 300) + `","b":""}`, "", reasonFieldEmpty, `json field "b" is an empty string`},
		// A field there and unusable is the record's fault whichever field is missing and
		// in whatever order the key names them (docs/rules.md: dead-lettered either way).
		{"composite missing, then object", "json:b+a", `{"a":{"x":1}}`, "", reasonFieldType, `json field "a" is an object`},
		{"composite object, then missing", "json:a+b", `{"a":{"x":1}}`, "", reasonFieldType, `json field "a" is an object`},
		{"composite empty, then object", "json:a+b", `{"a":"","b":{"o":1}}`, "", reasonFieldType, `json field "b" is an object`},
		{"composite null, then array", "json:a+b", `{"a":null,"b":[1]}`, "", reasonFieldType, `json field "b" is an array`},
		{"composite null, then ambiguous", "json:a+b", `{"a":null,"b":1,"b":2}`, "", reasonAmbiguousTeam, `json field "b" appears more than once`},
		{"composite missing, then boolean, then array", "json:c+a+b", `{"a":true,"b":[1]}`, "", reasonFieldType, `json field "a" is a boolean`},
		{"composite too long, then missing, then object", "json:a+b+c", `{"a":"` + strings.Repeat("x", 300) + `","c":{}}`, "", reasonFieldType, `json field "c" is an object`},
		{"composite missing, then empty", "json:a+b", `{"b":""}`, "", reasonFieldMissing, `json field "a" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := mustKeyFrom(t, tt.from)
			var s Scratch
			team, f := k.teamFailure(&kgo.Record{Value: []byte(tt.value)}, &s, DefaultMaxKeyBytes)
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
	if team, f := k.teamFailure(rec, &s, 8); team != "abc:defg" || f.reason != reasonNone {
		t.Errorf("at the limit: %q, %v", team, f.reason)
	}
	if _, f := k.teamFailure(rec, &s, 7); f.reason != reasonKeyTooLong {
		t.Errorf("over the limit: %v", f.reason)
	}
	key := mustKeyFrom(t, "key")
	if _, f := key.teamFailure(&kgo.Record{Key: []byte("12345678")}, &s, 8); f.reason != reasonNone {
		t.Errorf("key at the limit: %v", f.reason)
	}
	if _, f := key.teamFailure(&kgo.Record{Key: []byte("123456789")}, &s, 8); f.reason != reasonKeyTooLong {
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
		// Given twice with two values: two teams read from one record (Kafka's Java
		// clients read the last, lastHeader), as from a JSON field given twice (a review:
		// the first was taken). Given twice alike, it is one team.
		{"header twice", "header:team", &kgo.Record{Headers: hdrs("team", "t1", "a", "1", "team", "t2")}, "", reasonAmbiguousTeam, `header "team" appears more than once, with different values`},
		{"header twice alike", "header:team", &kgo.Record{Headers: hdrs("team", "t1", "team", "t1")}, "t1", 0, ""},
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
			team, f := k.teamFailure(tt.rec, &Scratch{}, DefaultMaxKeyBytes)
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
	a, _ := k.teamFailure(&kgo.Record{Value: []byte(`{"token":"t","distinct_id":"aaaa"}`)}, &s, 256)
	if a != "t:aaaa" {
		t.Fatalf("first key %q", a)
	}
	keep := strings.Clone(a)
	b, _ := k.teamFailure(&kgo.Record{Value: []byte(`{"token":"t","distinct_id":"bbbb"}`)}, &s, 256)
	if b != "t:bbbb" || keep != "t:aaaa" {
		t.Fatalf("second key %q, first kept %q", b, keep)
	}
}

// A field that appears more than once where the key is read (the field itself, or for a
// dotted path any part of it in the object that holds that part) makes the team
// ambiguous: gjson reads the first, most decoders downstream the last, so a client could
// pick its team per reader. Such a record is dead-lettered (ambiguous_team), with or
// without validation. Duplicates elsewhere do not matter.
func TestTeamDuplicateField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, from, value string
		team              string
		reason            string // "" for a team read
		detail            string // dead letter only: a part of the detail sentence
		laxTeam           string // if set, the team read instead without validation
	}{
		{"twice", "json:team_id", `{"team_id":"a","x":1,"team_id":"b"}`, "", "ambiguous_team", `json field "team_id" appears more than once`, ""},
		{"twice, same value", "json:team_id", `{"team_id":1,"team_id":1}`, "", "ambiguous_team", "appears more than once", ""},
		{"three times", "json:team_id", `{"team_id":1,"team_id":2,"team_id":3}`, "", "ambiguous_team", "appears more than once", ""},
		{"white space", "json:team_id", "{ \"team_id\" : 1 ,\n\t\"team_id\"\r: 2 }", "", "ambiguous_team", "appears more than once", ""},
		{"second escaped", "json:team_id", `{"team_id":"a","team\u005fid":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"first escaped", "json:team_id", `{"t\u0065am_id":"a","team_id":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"first null", "json:team_id", `{"team_id":null,"team_id":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"second an object", "json:team_id", `{"team_id":"a","team_id":{"x":1}}`, "", "ambiguous_team", "appears more than once", ""},
		{"after nested and tricky strings", "json:team_id",
			`{"team_id":"a","x":{"team_id":"y"},"s":"\",\"team_id\":\"","l":[{"team_id":1},"]}"],"team_id":"b"}`,
			"", "ambiguous_team", "appears more than once", ""},
		{"parent twice", "json:properties.team", `{"properties":{"team":"a"},"properties":{"team":"b"}}`,
			"", "ambiguous_team", `json field "properties.team" is ambiguous: "properties" appears more than once`, ""},
		{"parent twice, first without field", "json:properties.team", `{"properties":{},"properties":{"team":"b"}}`,
			"", "ambiguous_team", `"properties" appears more than once`, ""},
		{"parent twice, first not an object", "json:properties.team", `{"properties":1,"properties":{"team":"b"}}`,
			"", "ambiguous_team", `"properties" appears more than once`, ""},
		{"nested field twice", "json:properties.team", `{"properties":{"team":"a","x":[1],"team":"b"}}`,
			"", "ambiguous_team", `"team" appears more than once`, ""},
		{"deep middle twice", "json:a.b.c", `{"a":{"b":{"c":1},"b":{"c":2}}}`, "", "ambiguous_team", `"b" appears more than once`, ""},
		{"in an array element", "json:a.0.b", `{"a":[{"b":1,"b":2}]}`, "", "ambiguous_team", `"b" appears more than once`, ""},
		{"composite second twice", "json:token+distinct_id", `{"token":"t","distinct_id":"u1","distinct_id":"u2"}`,
			"", "ambiguous_team", `json field "distinct_id" appears more than once`, ""},
		{"composite first twice", "json:token+distinct_id", `{"token":"t","distinct_id":"u1","token":"t2"}`,
			"", "ambiguous_team", `json field "token" appears more than once`, ""},

		// Found early, the rest is searched rather than read member by member
		// (noMemberAfter): every way a later duplicate can be written is still found.
		{"second escaped, upper-case hex", "json:team_id", `{"team_id":"a","x":"caf\u00e9","team\u005Fid":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"second with an escaped slash", "json:a/b", `{"a/b":"a","a\/b":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"second after a nested object", "json:team_id", `{"team_id":"a","p":{"q":[1,{"r":"}"}]},"team_id":"b"}`, "", "ambiguous_team", "appears more than once", ""},
		{"escapes later, no duplicate", "json:team_id", `{"team_id":"a","x":"caf\u00e9 \"team_id\"","a\/b":1}`, "a", "", "", ""},
		{"slash name, escapes later, no duplicate", "json:a/b", `{"a/b":"a","x":"\/\n"}`, "a", "", "", ""},
		{"name as a value later", "json:team_id", `{"team_id":"a","x":"team_id","y":["team_id"]}`, "a", "", "", ""},
		{"nested twice, not on the path", "json:team_id", `{"team_id":"a","x":{"team_id":"b","team_id":"c"}}`, "a", "", "", ""},
		{"other field twice", "json:team_id", `{"x":1,"x":2,"team_id":"a","y":[],"y":{}}`, "a", "", "", ""},
		{"field name in a string", "json:team_id", `{"team_id":"a","s":"\",\"team_id\":\"b"}`, "a", "", "", ""},
		{"longer and shorter names", "json:team_id", `{"team_id":"a","team_id2":"b","team_i":"c","Team_id":"d"}`, "a", "", "", ""},
		{"top field twice, dotted path", "json:properties.team", `{"team":"x","team":"y","properties":{"team":"a"}}`, "a", "", "", ""},
		{"twice in another object", "json:properties.team", `{"properties":{"team":"a"},"other":{"team":"b","team":"c"}}`, "a", "", "", ""},
		{"different array elements", "json:a.0.b", `{"a":[{"b":1},{"b":2}]}`, "1", "", "", ""},
		{"composite, each once", "json:token+distinct_id", `{"distinct_id":"u1","x":{"token":1},"token":"t"}`, "t:u1", "", "", ""},

		// A value that breaks off: not JSON when validated. Without validation the gate reads
		// the object as far as it goes, and a field there once gives the team (no decoder
		// reads any team from such a value), but a field there twice is still ambiguous,
		// and so dead-lettered (not_json, as the value is checked when the team is not read).
		{"twice, then garbage", "json:team_id", `{"team_id":"a","team_id":"b"}x`, "", "not_json", "value is not valid JSON", ""},
		{"twice, then cut short", "json:team_id", `{"team_id":"a","team_id":"b","x":[1,`, "", "not_json", "value is not valid JSON", ""},
		{"twice, then broken", "json:team_id", `{"team_id":"a","team_id":"b" "x":1}`, "", "not_json", "value is not valid JSON", ""},
		{"dotted twice, then cut short", "json:p.team", `{"p":{"team":"a","team":"b","x":"`, "", "not_json", "value is not valid JSON", ""},
		{"cut short in the field", "json:team_id", `{"team_id":"a`, "", "not_json", "value is not valid JSON", ""},
		{"cut short after the field", "json:team_id", `{"team_id":"a","x":1,`, "", "not_json", "value is not valid JSON", "a"},
		{"cut short in a later string", "json:team_id", `{"team_id":"a","event":"$pagev`, "", "not_json", "value is not valid JSON", "a"},
		{"unquoted later key", "json:team_id", `{"team_id":"a", team_id:"b"}`, "", "not_json", "value is not valid JSON", "a"},
		{"dotted, cut short in the parent", "json:properties.team", `{"properties":{"team":"a"},"x":`, "", "not_json", "value is not valid JSON", "a"},
		{"dotted, cut short inside", "json:properties.team", `{"properties":{"team":"a","x":[`, "", "not_json", "value is not valid JSON", "a"},
		{"cut short before the field", "json:team_id", `{"x":[1,2],"team_id":"a`, "", "not_json", "value is not valid JSON", ""},
	}
	for _, tt := range tests {
		for _, lax := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/lax=%v", tt.name, lax), func(t *testing.T) {
				t.Parallel()
				k := mustKeyFrom(t, tt.from)
				k.lax = lax
				wantTeam, wantReason := tt.team, tt.reason
				if lax && tt.laxTeam != "" {
					wantTeam, wantReason = tt.laxTeam, ""
				}
				team, f := k.teamFailure(&kgo.Record{Value: []byte(tt.value)}, &Scratch{}, DefaultMaxKeyBytes)
				if team != wantTeam || f.reason.String() != wantReason {
					t.Fatalf("team(%s) = %q, %q; want %q, %q", tt.value, team, f.reason, wantTeam, wantReason)
				}
				if wantReason == "" {
					return
				}
				if d := k.detail(f, DefaultMaxKeyBytes); !strings.Contains(d, tt.detail) {
					t.Errorf("detail %q, want it to contain %q", d, tt.detail)
				}
			})
		}
	}
}

// A composite key (json:A+B) encodes each field so that distinct tuples of values never
// share a key: ':' joins the fields, and within a field '%' is written %25 and ':' %3A.
// A field holding neither, the usual case, appears as is, and a single-field key is never
// encoded.
func TestCompositeKeyEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, value string
		team        string
	}{
		{"json:a+b", `{"a":"phc","b":"u1"}`, "phc:u1"},
		{"json:a+b", `{"a":"x:y","b":"z"}`, "x%3Ay:z"},
		{"json:a+b", `{"a":"x","b":"y:z"}`, "x:y%3Az"},
		{"json:a+b", `{"a":"x%3Ay","b":"z"}`, "x%253Ay:z"},
		{"json:a+b", `{"a":"x","b":"y%3Az"}`, "x:y%253Az"},
		{"json:a+b", `{"a":"100%","b":"x"}`, "100%25:x"},
		{"json:a+b", `{"a":":","b":":"}`, "%3A:%3A"},
		{"json:a+b", `{"a":"x\u003ay","b":"z"}`, "x%3Ay:z"},
		{"json:a+b", `{"a":2,"b":-1.5e3}`, "2:-1.5e3"},
		{"json:a+b+c", `{"a":"x:","b":"y","c":"z"}`, "x%3A:y:z"},
		{"json:a+b+c", `{"a":"x","b":":y","c":"z"}`, "x:%3Ay:z"},
		{"json:a+b+c", `{"a":"x","b":"y","c":"z"}`, "x:y:z"},
		{"json:a", `{"a":"x:y%3A"}`, "x:y%3A"},
	}
	seen := map[string]string{} // key source and team -> the values, as decoded
	for _, tt := range tests {
		k := mustKeyFrom(t, tt.from)
		team, f := k.teamFailure(&kgo.Record{Value: []byte(tt.value)}, &Scratch{}, DefaultMaxKeyBytes)
		if team != tt.team || f.reason != reasonNone {
			t.Errorf("%s %s: team %q, %q; want %q", tt.from, tt.value, team, f.reason, tt.team)
		}
		var decoded map[string]any
		if err := json.Unmarshal([]byte(tt.value), &decoded); err != nil {
			t.Fatal(err)
		}
		values := fmt.Sprint(decoded)
		if other, ok := seen[tt.from+" "+team]; ok && other != values {
			t.Errorf("%s: %s and %s share the team %q", tt.from, other, values, team)
		}
		seen[tt.from+" "+team] = values
	}
}

// MaxKeyBytes bounds the encoded key.
func TestCompositeKeyEncodedLength(t *testing.T) {
	t.Parallel()
	k := mustKeyFrom(t, "json:a+b")
	rec := &kgo.Record{Value: []byte(`{"a":"::","b":"x"}`)} // %3A%3A:x, 8 bytes
	if team, f := k.teamFailure(rec, &Scratch{}, 8); team != "%3A%3A:x" || f.reason != reasonNone {
		t.Errorf("at the limit: %q, %v", team, f.reason)
	}
	if _, f := k.teamFailure(rec, &Scratch{}, 7); f.reason != reasonKeyTooLong {
		t.Errorf("over the limit: %v", f.reason)
	} else if d := k.detail(f, 7); !strings.Contains(d, "8 bytes or more") {
		t.Errorf("detail %q", d)
	}
}

// teamFailure is team with the failure's details, as the tests check them: the reason
// team returns and what it kept in s.why.
func (k *KeyFrom) teamFailure(rec *kgo.Record, s *Scratch, maxKey int) (string, failure) {
	team, code := k.team(rec, s, maxKey)
	if code == reasonNone {
		return team, failure{}
	}
	if s.why.reason != code {
		panic(fmt.Sprintf("team failed with %v, its details say %v", code, s.why.reason))
	}
	return team, s.why
}

// A string team holding a lone UTF-16 surrogate escape followed by another \u escape is
// read as encoding/json reads it: the lone surrogate is U+FFFD and the next escape is a
// character of its own. gjson's unescape, used before, swallowed that next escape, so
// distinct teams ("t\ud800\u0041", "t\ud800\u0042") shared one key, "t\uFFFD".
func TestLoneSurrogateThenEscape(t *testing.T) {
	for _, from := range []string{"json:team_id", "json:team_id+u"} {
		k, err := ParseKeyFrom(from)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, raw := range []string{
			`"t\ud800\u0041"`, `"t\ud800\u0042"`, `"t\ud800"`,
			`"\udc00\ud800"`, `"\ud800\ud800\udc00"`,
		} {
			var want string
			if err := json.Unmarshal([]byte(raw), &want); err != nil {
				t.Fatal(err)
			}
			if k.Composite() {
				want += ":u1"
			}
			v := []byte(`{"team_id":` + raw + `,"u":"u1"}`)
			team, code := k.team(&kgo.Record{Value: v}, &Scratch{}, 1<<10)
			if code != reasonNone || team != want {
				t.Errorf("%s: %s: team %q (%v), encoding/json reads %q", from, v, team, code, want)
			}
			if other, dup := seen[team]; dup {
				t.Errorf("%s: %s and %s, two teams to encoding/json, share the key %q", from, other, raw, team)
			}
			seen[team] = raw
		}
	}
}

// A key written for a composite rule (a force entry, GATE_FORCE_OVERFLOW, gate overrides
// set) but not escaped is refused with the key escaped, where that can be told: every way
// of joining too many parts into the rule's values, and a lone '%' written %25; with an
// example of the rule's own fields.
func TestCheckKeyShowsEscapedForm(t *testing.T) {
	t.Parallel()
	k2 := mustKeyFrom(t, "json:token+distinct_id")
	k3 := mustKeyFrom(t, "json:a+b+c")
	tests := []struct {
		k         KeyFrom
		key, want string
	}{
		{k2, "phc_x:user:1", `has 3 parts, escaped: "phc_x:user%3A1" or "phc_x%3Auser:1": `},
		{k2, "phc_x::1", `has 3 parts, escaped: "phc_x:%3A1" or "phc_x%3A:1": `},
		{k2, ":a:b", `has 3 parts, escaped: "%3Aa:b": `},
		{k2, "phc_x:50%off", `holds a '%' not written %25 (escaped: "phc_x:50%25off"): `},
		{k2, "p%:u%2", `holds a '%' not written %25 (escaped: "p%25:u%252"): `},
		{k2, "phc_x:user%3a1", `holds %3a, which the gate never writes (a value's ':' is %3A)`},
		{k2, "phc_x", `has 1 parts: `},
		{k2, "a:b:c:d:e:f", `has 6 parts: `}, // 5 ways: none listed
		{k3, "a:b:c:d", `has 4 parts, escaped: "a:b:c%3Ad" or "a:b%3Ac:d" or "a%3Ab:c:d": `},
	}
	for _, tt := range tests {
		err := tt.k.CheckKey(tt.key, 0)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckKey(%q) = %v, want it to contain %q", tt.key, err, tt.want)
		}
	}
	// The example is of the rule's own fields: it said token and distinct_id whatever they
	// were.
	kt := mustKeyFrom(t, "json:team_id+session.id+distinct_id")
	if err := kt.CheckKey("42:s:u:1", 0); err == nil || !strings.Contains(err.Error(), "(team_id 42 and session.id 43 and distinct_id user:1: 42:43:user%3A1)") {
		t.Errorf("CheckKey of team_id+session.id+distinct_id = %v, want its example of its fields", err)
	}
	for _, key := range []string{"phc_x:user%3A1", "a%25:b", "phc_x%3Auser:1"} {
		if err := k2.CheckKey(key, 0); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
}

// Without validation (the default), a team string the gate cannot decode is no team: an
// escape that is none (\q, a \u with fewer than four hex digits) or a raw control byte
// (JSON requires it escaped) dead-letters the record (not_json), as validation would.
// unescape used to stop there, as gjson does, so "a\qb" and "a\qc" were both counted as
// team "a", a team of their own to a lenient decoder downstream; and a raw control byte
// was kept, "2<LF>" a key of its own beside "2" (a review).
func TestUndecodableTeamStringNotTruncated(t *testing.T) {
	k := mustKeyFrom(t, "json:team_id+u")
	k.lax = true
	for _, tt := range []struct {
		team string // the raw team_id string, between its quotes
		want string // "": dead-lettered not_json
	}{
		{`a\qb`, ""},
		{`a\qc`, ""},
		{`a\u00`, ""},
		{`a\u12x4`, ""},
		{"a\\nb\x01c", ""},
		{"ab\x01c", ""},
		{"2\n", ""},
		{"a\\nb", "a\nb:u1"}, // escaped, a control byte is fine
	} {
		for _, single := range []bool{false, true} {
			kk, want := k, tt.want
			if single {
				kk = mustKeyFrom(t, "json:team_id")
				kk.lax = true
				want = strings.TrimSuffix(want, ":u1")
			}
			var s Scratch
			v := []byte(`{"team_id":"` + tt.team + `","u":"u1"}`)
			team, f := kk.teamFailure(&kgo.Record{Value: v}, &s, DefaultMaxKeyBytes)
			switch {
			case want == "" && (f.reason != reasonNotJSON || team != ""):
				t.Errorf("%s on %q: team %q (%v), want not_json", kk, v, team, f.reason)
			case want != "" && (f.reason != reasonNone || team != want):
				t.Errorf("%s on %q: team %q (%v), want %q", kk, v, team, f.reason, want)
			}
		}
	}
}

// Without validation, a number is the team only when it is whole: what follows it, past
// white space, ends the member (',', '}' or ']'). An id written without its quotes was
// read up to the first byte no number holds, so that two UUIDs sharing their first 12
// bytes (123e4567-e89b-…, 123e4567-e89c-…) were one team, "123e4567-e89", and 12abc was
// team 12; and a value cut off inside its team number was counted as a shorter one.
func TestTeamNumberMustBeWhole(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  string // "": dead-lettered not_json
	}{
		{`{"team_id":123e4567-e89b-12d3-a456-426614174000}`, ""},
		{`{"team_id":123e4567-e89c-12d3-a456-426614174000}`, ""},
		{`{"team_id":12abc}`, ""},
		{`{"team_id":0x1F}`, ""},
		{`{"team_id":12 34}`, ""},
		{`{"team_id":12`, ""},        // cut off: 12, or 123?
		{`{"team_id":12 `, ""},       // cut off before its '}'
		{`{"team_id":12 , "x`, "12"}, // cut off after the member: read as far as it goes
		{`{"team_id":12}`, "12"},
		{`{"team_id":-1.5e3 }`, "-1.5e3"},
		{`{"team_id":12}x`, "12"},
	} {
		for _, from := range []string{"json:team_id", "json:p.0"} {
			v := tt.value
			if from == "json:p.0" {
				// The same number as an array's first element: {"p":[12abc]}.
				v = strings.Replace(strings.Replace(v, `"team_id":`, `"p":[`, 1), "}", "]}", 1)
			}
			for _, outcomes := range []bool{false, true} {
				k := mustKeyFrom(t, from)
				k.lax = true
				s := &Scratch{}
				if outcomes {
					s.Outcomes = fuzzAgg
				}
				team, f := k.teamFailure(&kgo.Record{Value: []byte(v)}, s, DefaultMaxKeyBytes)
				switch {
				case tt.want == "" && (f.reason != reasonNotJSON || team != ""):
					t.Errorf("%s on %s (outcomes %v): team %q (%v), want not_json", from, v, outcomes, team, f.reason)
				case tt.want != "" && (f.reason != reasonNone || team != tt.want):
					t.Errorf("%s on %s (outcomes %v): team %q (%v), want %q", from, v, outcomes, team, f.reason, tt.want)
				}
			}
		}
	}
}

// json:team_id+header:ip read a JSON member named "header:ip", which no record has: every
// record dead-lettered (field_missing) without a word at start (a review). A composite
// key joins JSON fields only: refused, saying so. A member whose name holds ':' is
// still one field.
func TestParseKeyFromCompositeOfAnotherSource(t *testing.T) {
	for _, s := range []string{"json:team_id+header:ip", "json:team_id+json:distinct_id"} {
		if _, err := ParseKeyFrom(s); err == nil || !strings.Contains(err.Error(), "names a source of its own") {
			t.Errorf("ParseKeyFrom(%q) = %v, want it refused as another source", s, err)
		}
	}
	for _, s := range []string{"json:a:b", "json:team_id+$set:once", "json:team_id+key"} {
		if _, err := ParseKeyFrom(s); err != nil {
			t.Errorf("ParseKeyFrom(%q) = %v, want it read", s, err)
		}
	}
}
