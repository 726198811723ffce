package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// deepValue returns a JSON object nested depth levels deep, with team_id at the top level
// after it when teamLast: a value no sample file should hold, made here instead.
func deepValue(depth int, teamLast bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"p":`)
	b.WriteString(strings.Repeat(`{"a":[`, depth))
	b.WriteString("1")
	b.WriteString(strings.Repeat(`]}`, depth))
	if teamLast {
		b.WriteString(`,"team_id":5`)
	}
	b.WriteString("}")
	return b.Bytes()
}

// fuzzSeeds returns the sample events and a few made values.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, v := range readEvents(tb) {
		seeds = append(seeds, v)
	}
	return append(seeds,
		deepValue(64, true),
		deepValue(4_999, true), // 9,999 levels
		deepValue(5_000, true), // 10,001 levels
		[]byte(`{"a":`+strings.Repeat("[", 20_000)),
		[]byte(`{"team_id":"\ud800"}`),
		[]byte(`{"team_id":"a\u0000b"}`),
		[]byte(`{"properties":{"team":"t"},"distinct_id":"u","token":"x","team_id":1e400}`),
		[]byte(`{"team_id":"a","x":{"team_id":1},"team\u005fid":"b"}`),
		[]byte(`{"properties":{"team":"a"},"properties":{"team":"b"},"token":"t","distinct_id":1,"token":2}`),
		[]byte(`{"p":[{"team":1,"team":2}],"properties":{"x":1,"team":"a","team":"b"}}`),
		[]byte(`{"team_id":"a","event":"$pagev`),
	)
}

// fuzzAgg is the outcomes aggregate FuzzTeam reads with: only touched, never sealed.
var fuzzAgg = outcome.NewAgg(60e9, nil)

// fuzzKeyFroms are the key sources FuzzTeam and FuzzRoute pick from.
var fuzzKeyFroms = []string{
	"json:team_id", "json:properties.team", "json:token+distinct_id", "json:properties.team+distinct_id",
	"json:a*b", "json:0", "json:p.0.team", "header:team", "key",
}

// FuzzTeam reads a team key from arbitrary value, key and header bytes with every kind of
// key source, and checks the result against encoding/json where it can.
func FuzzTeam(f *testing.F) {
	for i, v := range fuzzSeeds(f) {
		f.Add(v, []byte("k"), []byte("t"), uint8(i))
	}
	f.Add([]byte(nil), []byte(nil), []byte(nil), uint8(6))
	f.Fuzz(func(t *testing.T, value, key, hdr []byte, pick uint8) {
		from := fuzzKeyFroms[int(pick)%len(fuzzKeyFroms)]
		k := mustKeyFrom(t, from)
		const max = 64
		rec := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: "team", Value: hdr}}}
		s := &Scratch{}
		team, fail := k.teamFailure(rec, s, max)
		if (team == "") != (fail.reason != reasonNone) {
			t.Fatalf("%s: team %q with reason %q", from, team, fail.reason)
		}
		if fail.reason != reasonNone && k.detail(fail, max) == "" {
			t.Fatalf("%s: no detail for %q", from, fail.reason)
		}
		if len(team) > max {
			t.Fatalf("%s: team of %d bytes, max %d", from, len(team), max)
		}
		switch from {
		case "header:team":
			if fail.reason == reasonNone && team != string(hdr) {
				t.Fatalf("header team %q, want %q", team, hdr)
			}
			return
		case "key":
			if fail.reason == reasonNone && team != string(key) {
				t.Fatalf("key team %q, want %q", team, key)
			}
			return
		}
		// encoding/json agrees on what is a JSON object, nesting limit (10,000) included.
		object := json.Valid(value) && bytes.TrimLeft(value, " \t\r\n")[0] == '{'
		if object != (fail.reason != reasonNotJSON) {
			t.Fatalf("%s: json.Valid object %v, reason %q, value %q", from, object, fail.reason, value)
		}
		// Without validation, a JSON object gives the same answer; anything else must only
		// not crash.
		lax := k
		lax.lax = true
		laxTeam, laxFail := lax.teamFailure(rec, &Scratch{}, max)
		if object && (laxTeam != team || laxFail != fail) {
			t.Fatalf("%s: lax %q %+v, validated %q %+v, value %q", from, laxTeam, laxFail, team, fail, value)
		}
		// A router telling outcomes has the team's row touched as soon as its field is found
		// (touchAhead), and may return the value touched: the same answer either way.
		for _, kk := range []KeyFrom{k, lax} {
			wantTeam, wantFail := kk.teamFailure(rec, &Scratch{}, max)
			wantTeam = strings.Clone(wantTeam)
			gotTeam, gotFail := kk.teamFailure(rec, &Scratch{Outcomes: fuzzAgg}, max)
			if gotTeam != wantTeam || gotFail != wantFail {
				t.Fatalf("%s (lax %v): with outcomes %q %+v, without %q %+v, value %q", from, kk.lax, gotTeam, gotFail, wantTeam, wantFail, value)
			}
		}
		if !object {
			return
		}
		// A field that appears more than once where it is read, as encoding/json sees the
		// value, makes it ambiguous_team. With several fields, read in order, the reason is
		// ambiguous_team only if some field is ambiguous, and always if the first is.
		ambiguous := make([]bool, len(k.fields))
		for i, fl := range k.fields {
			ambiguous[i] = refAmbiguous(t, value, strings.Split(fl.name, "."))
		}
		isAmbiguous := fail.reason == reasonAmbiguousTeam
		if !slices.Contains(ambiguous, true) && isAmbiguous || ambiguous[0] && !isAmbiguous ||
			len(ambiguous) == 1 && ambiguous[0] != isAmbiguous {
			t.Fatalf("%s: ambiguous %v (encoding/json), reason %q, value %q", from, ambiguous, fail.reason, value)
		}
		// Where no field is ambiguous, the gate reads what gjson.Get reads.
		if !slices.Contains(ambiguous, true) {
			if refTeam, refReason := gjsonTeam(k, value, max); team != refTeam || fail.reason != refReason {
				t.Fatalf("%s: team %q, %q; gjson.Get reads %q, %q; value %q", from, team, fail.reason, refTeam, refReason, value)
			}
		}
		if from != "json:team_id" || fail.reason != reasonNone {
			return
		}
		// A string team is what encoding/json decodes, for valid UTF-8 text; a number's is
		// its text as written.
		raw := gjson.Get(bytesString(value), "team_id").Raw
		if raw[0] != '"' {
			if team != raw {
				t.Fatalf("number team %q, raw %q", team, raw)
			}
			return
		}
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("team_id %s: encoding/json: %v", raw, err)
		}
		if utf8.ValidString(raw) && team != want { // escapes too: decoded as encoding/json does
			t.Fatalf("team %q, encoding/json says %q", team, want)
		}
	})
}

// FuzzRoute routes arbitrary records through routers of every kind and checks the
// package's guarantees: exactly one of the three topics, the value, timestamp and input
// headers preserved, the reason and gate headers consistent with the route.
func FuzzRoute(f *testing.F) {
	for i, v := range fuzzSeeds(f) {
		f.Add(v, []byte("k"), []byte("t"), uint8(i))
	}
	f.Add([]byte(nil), []byte(nil), []byte(nil), uint8(2))

	type router struct {
		r   *Router
		cfg Config
	}
	var routers []router
	for i, from := range fuzzKeyFroms {
		cfg := Config{
			KeyFrom: mustKeyFrom(f, from), DryRun: i%3 == 1, OverflowKeepKey: i%2 == 0,
			ForceOverflow: []string{"2", "x:u"}, MaxKeyBytes: 64,
		}
		mode := limit.Divert
		if i%2 == 1 {
			mode = limit.Cap
		}
		fx := newFixture(f, cfg, limit.Config{Threshold: 3, Mode: mode})
		routers = append(routers, router{fx.r, fx.r.Config()})
	}
	topics := map[string]Route{topicAccepted: Accepted, topicOverflow: Overflow, topicDead: DeadLetter}

	f.Fuzz(func(t *testing.T, value, key, hdr []byte, pick uint8) {
		rt := routers[int(pick)%len(routers)]
		in := input("", "", "a", "1", "team", string(hdr), "team", "second")
		in.Key, in.Value = key, value
		valueCopy := bytes.Clone(value)
		headersCopy := len(in.Headers)
		out, o := rt.r.Route(t0, in, &Scratch{})

		route, ok := topics[out.Topic]
		if !ok || route != o.Route {
			t.Fatalf("topic %q for route %v", out.Topic, o.Route)
		}
		if !bytes.Equal(in.Value, valueCopy) || len(in.Headers) != headersCopy || in.Topic != topicIn {
			t.Fatalf("input record changed")
		}
		if !bytes.Equal(out.Value, value) || (len(value) > 0 && &out.Value[0] != &value[0]) {
			t.Fatalf("value not preserved")
		}
		if out.Timestamp != in.Timestamp || out.Partition != 0 || out.Context != nil {
			t.Fatalf("timestamp %v partition %d context %v", out.Timestamp, out.Partition, out.Context)
		}
		for i, h := range in.Headers {
			if out.Headers[i].Key != h.Key || !bytes.Equal(out.Headers[i].Value, h.Value) {
				t.Fatalf("header %d: %q, want %q", i, out.Headers[i].Key, h.Key)
			}
		}
		gate := out.Headers[len(in.Headers):]
		if r, known := reasonRoute(o.Reason); !known || r != o.Route {
			t.Fatalf("reason %q on route %v", o.Reason, o.Route)
		}
		if r, known := reasonRoute(o.EnforcedReason); !known || r != o.Enforced {
			t.Fatalf("enforced reason %q on route %v", o.EnforcedReason, o.Enforced)
		}
		if (o.Team == "") != (o.Enforced == DeadLetter) || len(o.Team) > rt.cfg.MaxKeyBytes {
			t.Fatalf("team %q on enforced route %v", o.Team, o.Enforced)
		}
		if rt.cfg.DryRun && (o.Route != Accepted || (o.Reason == ReasonDryRun) == (o.Enforced == Accepted)) {
			t.Fatalf("dry run: %+v", o)
		}
		switch o.Route {
		case Accepted:
			if len(gate) != 0 || !bytes.Equal(out.Key, key) {
				t.Fatalf("accepted: gate headers %s, key %q", fmtHeaders(gate), out.Key)
			}
		case Overflow:
			if len(gate) != 1 || gate[0].Key != HeaderOverflowReason || string(gate[0].Value) != o.Reason {
				t.Fatalf("overflow: gate headers %s", fmtHeaders(gate))
			}
			if rt.cfg.OverflowKeepKey != (out.Key != nil) && len(key) > 0 {
				t.Fatalf("overflow: key %q, keep key %v", out.Key, rt.cfg.OverflowKeepKey)
			}
		case DeadLetter:
			if len(gate) != 3 || gate[0].Key != HeaderError || string(gate[0].Value) != o.Reason ||
				gate[1].Key != HeaderErrorDetail || len(gate[1].Value) == 0 ||
				gate[2].Key != HeaderSource || string(gate[2].Value) != "events_raw/3/1234" {
				t.Fatalf("dead letter: gate headers %s", fmtHeaders(gate))
			}
			if !bytes.Equal(out.Key, key) {
				t.Fatalf("dead letter: key %q", out.Key)
			}
		}
	})
}

// reasonRoute returns the route reason s belongs to, and whether s is a known reason.
func reasonRoute(s string) (Route, bool) {
	for c := reasonAllowed; c < numReasons; c++ {
		if c.String() == s {
			return c.route(), true
		}
	}
	return 0, false
}

// gjsonTeam reads k's team from the JSON object value with gjson.Get, as the gate did
// before it read fields itself: the reference for values without duplicate fields.
func gjsonTeam(k KeyFrom, value []byte, maxKey int) (string, reasonCode) {
	js := bytesString(value)
	var key []byte
	long := false // too long: key_too_long once every field is read (a later one may be missing)
	for i, f := range k.fields {
		r := gjson.Get(js, f.path)
		var val string
		switch r.Type {
		case gjson.String:
			if r.Str == "" {
				return "", reasonFieldEmpty
			}
			val = r.Str
			// gjson swallows the \u escape after a lone surrogate; the gate decodes escapes
			// as encoding/json does.
			if strings.Contains(r.Raw, `\u`) && utf8.ValidString(r.Raw) {
				var dec string
				if json.Unmarshal([]byte(r.Raw), &dec) == nil {
					val = dec
				}
			}
		case gjson.Number:
			val = r.Raw
		case gjson.Null:
			return "", reasonFieldMissing
		default:
			return "", reasonFieldType
		}
		if len(k.fields) == 1 {
			key = append(key, val...) // a single field is its value, not encoded
		} else {
			if i > 0 {
				key = append(key, ':')
			}
			key = keypart.Append(key, val)
		}
		if len(key) > maxKey {
			long = true
		}
	}
	if long {
		return "", reasonKeyTooLong
	}
	return string(key), reasonNone
}

// jsonNode is a JSON value as encoding/json reads it, with an object's members in order,
// duplicates kept: the reference FuzzTeam checks duplicate fields against.
type jsonNode struct {
	kind    json.Delim // '{', '[', or 0 for anything else
	keys    []string   // an object's member names, in order
	members []*jsonNode
}

// decodeNode reads the next value from d.
func decodeNode(d *json.Decoder) (*jsonNode, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return &jsonNode{}, nil
	}
	n := &jsonNode{kind: delim}
	for d.More() {
		if delim == '{' {
			key, err := d.Token()
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, key.(string))
		}
		m, err := decodeNode(d)
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, m)
	}
	if _, err := d.Token(); err != nil { // the closing delimiter
		return nil, err
	}
	return n, nil
}

// refAmbiguous reports whether, in the valid JSON value, a part of the path appears more
// than once in the object holding it, following the path as gjson does (a part of digits
// indexes an array).
func refAmbiguous(t *testing.T, value []byte, path []string) bool {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber() // 1e400 is valid JSON, out of float64's range
	n, err := decodeNode(d)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("decoding a valid value: %v", err)
	}
	for _, part := range path {
		switch n.kind {
		case '{':
			found := -1
			for i, key := range n.keys {
				if key != part {
					continue
				}
				if found >= 0 {
					return true
				}
				found = i
			}
			if found < 0 {
				return false
			}
			n = n.members[found]
		case '[':
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(n.members) || strings.TrimLeft(part, "0123456789") != "" {
				return false
			}
			n = n.members[i]
		default:
			return false
		}
	}
	return false
}

// FuzzCompositeKey checks that a composite key is one-to-one: the key of two field values
// splits at ':' into two parts that percent-decode back to the values, so two distinct
// pairs never share a key; and that CheckKey takes every key so built.
func FuzzCompositeKey(f *testing.F) {
	f.Add("x:y", "z", "x", "y:z")
	f.Add("x%3Ay", "z", "x:y", "z")
	f.Add("%", "%25", "%25", "%")
	f.Add("a:", ":b", "a::", "b")
	f.Add("phc", "u1", "phc", "u1")
	k := mustKeyFrom(f, "json:a+b")
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		// key returns the team of {"a":x,"b":y}, and the values as a decoder reads them back
		// (invalid UTF-8 becomes U+FFFD); ok is false when a value is empty (field_empty).
		key := func(x, y string) (team string, vals [2]string, ok bool) {
			v, err := json.Marshal(map[string]string{"a": x, "b": y})
			if err != nil {
				t.Fatal(err)
			}
			var back struct{ A, B string }
			if err := json.Unmarshal(v, &back); err != nil {
				t.Fatal(err)
			}
			vals = [2]string{back.A, back.B}
			team, fail := k.teamFailure(&kgo.Record{Value: v}, &Scratch{}, 1<<20)
			if fail.reason != reasonNone {
				if back.A != "" && back.B != "" {
					t.Fatalf("%s: %q", v, fail.reason)
				}
				return "", vals, false
			}
			parts := strings.Split(team, ":")
			if len(parts) != 2 {
				t.Fatalf("%s: team %q has %d parts", v, team, len(parts))
			}
			for i, p := range parts {
				if got := keypart.Value(p); got != vals[i] {
					t.Fatalf("%s: team %q part %d decodes to %q, want %q", v, team, i, got, vals[i])
				}
			}
			// Every key the gate builds is one an operator may write (a force list).
			if err := k.CheckKey(team, 0); err != nil {
				t.Fatalf("%s: CheckKey refuses the gate's own key %q: %v", v, team, err)
			}
			return strings.Clone(team), vals, true
		}
		ta, va, okA := key(a1, a2)
		tb, vb, okB := key(b1, b2)
		if okA && okB && (ta == tb) != (va == vb) {
			t.Fatalf("values %q and %q: teams %q and %q", va, vb, ta, tb)
		}
	})
}

// FuzzOneRuleFileRoutesAsFileless routes arbitrary records through each pair of
// TestRulesOneRuleFileRoutesAsFileless (the file-less gate and a one-rule file saying
// the same) and checks that both write the same record, but for what the rule's name
// adds (docs/rules.md). Seeded from that test's inputs.
func FuzzOneRuleFileRoutesAsFileless(f *testing.F) {
	for i, in := range diffInputs() {
		var hdr []byte
		if len(in.Headers) > 0 {
			hdr = in.Headers[0].Value
		}
		f.Add(in.Value, in.Key, hdr, uint8(i), i%5 == 0)
	}
	var pairs []*diffPair
	for _, c := range diffCases() {
		p := newDiffPair(f, c)
		p.sA.Outcomes, p.sB.Outcomes = nil, nil // rows unbounded over a fuzzing run
		pairs = append(pairs, p)
	}
	f.Fuzz(func(t *testing.T, value, key, hdr []byte, pick uint8, tick bool) {
		p := pairs[int(pick)%len(pairs)]
		if tick {
			p.clkA.Advance(time.Second)
			p.clkB.Advance(time.Second)
		}
		in := input("", "", "a", "1", "team", string(hdr), "team", "second")
		in.Key, in.Value = key, value
		p.route(t, in)
	})
}
