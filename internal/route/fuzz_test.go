package route

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
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
	)
}

// fuzzKeyFroms are the key sources FuzzTeam and FuzzRoute pick from.
var fuzzKeyFroms = []string{
	"json:team_id", "json:properties.team", "json:token+distinct_id", "json:properties.team+distinct_id",
	"json:a*b", "json:0", "header:team", "key",
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
		team, fail := k.team(rec, s, max)
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
		if utf8.ValidString(raw) && !strings.Contains(raw, `\u`) && team != want {
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
