package outcome

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/capturegate/gate/internal/limit"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden.json")

// checkGolden compares got with testdata/name, which -update-golden rewrites to got
// first.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: encoding changed:\n got %s\nwant %s(go test ./internal/outcome -update-golden, and say so in docs/outcomes.md)", name, got, want)
	}
}

// jsonNames returns the JSON names of v's struct fields, and of the struct fields of
// its slices' elements (Sources' Source), by their tags: the fields a golden must show.
func jsonNames(v reflect.Type) []string {
	var names []string
	for f := range v.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = f.Name
		}
		names = append(names, name)
		if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			for _, n := range jsonNames(f.Type.Elem()) {
				names = append(names, name+"."+n)
			}
		}
	}
	return names
}

// goldenNames returns the names of the members of the JSON object js, and of the
// objects in its arrays' ("sources.topic").
func goldenNames(t *testing.T, js []byte) map[string]bool {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	names := map[string]bool{}
	for k, v := range m {
		names[k] = true
		if a, ok := v.([]any); ok {
			for _, e := range a {
				if o, ok := e.(map[string]any); ok {
					for k2 := range o {
						names[k+"."+k2] = true
					}
				}
			}
		}
	}
	return names
}

// sameRow reports whether a and b are the same row, their times the same instants.
func sameRow(a, b Row) bool {
	if !a.IntervalStart.Equal(b.IntervalStart) || !a.IntervalEnd.Equal(b.IntervalEnd) {
		return false
	}
	a.IntervalStart, a.IntervalEnd, b.IntervalStart, b.IntervalEnd = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a == b
}

// checkRowGolden checks row r against golden name: AppendJSON writes it, encoding/json
// writes it (Row's tags), and Decode reads it back as r, every field.
func checkRowGolden(t *testing.T, name string, r Row) []byte {
	t.Helper()
	got := append(AppendJSON(nil, &r), '\n')
	checkGolden(t, name, got)
	want, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(js, '\n'), want) {
		t.Errorf("%s: encoding/json (Row's tags) writes\n%s\nwant %s", name, js, want)
	}
	back, err := Decode(want)
	if err != nil || !sameRow(back, r) {
		t.Errorf("%s: decoded %+v, %v; want %+v", name, back, err, r)
	}
	return want
}

var t0 = time.Date(2026, 11, 28, 14, 2, 30, 0, time.UTC)

// The encoding of a row is the schema docs/outcomes.md documents: a change to it fails
// here, and needs SchemaVersion's rules (a field renamed or gone is a new version).
func TestSchemaGolden(t *testing.T) {
	a := NewAgg(time.Minute, nil)
	a.Record(&Fate{At: t0, Kind: Topic, Rule: "merges", Topic: "merges-slow", Reason: "rate_limited", Key: "42:u%3A1", Team: "42", Bytes: 1000, Threshold: 5000})
	a.Record(&Fate{At: t0.Add(time.Second), Kind: Topic, Rule: "merges", Topic: "merges-slow", Reason: "rate_limited", Key: "42:u%3A1", Team: "42", Bytes: 24, Threshold: 5000})
	rows := Seal("gate-0", "gate-0/1764338400000-9f3a61c2/7", a)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	got := checkRowGolden(t, "row.golden.json", rows[0])
	back, err := Decode(got)
	if err != nil || back.Records != 2 || back.Bytes != 1024 || back.Outcome != "topic:merges-slow" || !back.IntervalStart.Equal(t0.Truncate(time.Minute)) {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

// A folded row (the keys past GATE_OUTCOMES_MAX_ROWS, summed) is pinned as the row of
// TestSchemaGolden is: its "folded":true, which that row, not folded, leaves out, and
// its empty key and team. Between them the two goldens show every field of Row.
func TestSchemaGoldenFolded(t *testing.T) {
	a := NewAgg(time.Minute, NewBudget(1))
	a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10, Threshold: 5000}) // the budget
	a.Record(&Fate{At: t0, Kind: Overflow, Rule: "team", Reason: "rate_limited", Key: "7", Team: "7", Bytes: 300, Threshold: 100})
	a.Record(&Fate{At: t0.Add(time.Second), Kind: Overflow, Rule: "team", Reason: "rate_limited", Key: "8", Team: "8", Bytes: 212, Threshold: 100, Forced: true})
	var folded []Row
	for _, r := range Seal("gate-0", "gate-0/1764338400000-9f3a61c2/7", a) {
		if r.Folded {
			folded = append(folded, r)
		}
	}
	if len(folded) != 1 || folded[0].Records != 2 || folded[0].Key != "" || folded[0].Team != "" {
		t.Fatalf("folded rows %+v, want one of 2 records, no key", folded)
	}
	got := checkRowGolden(t, "row_folded.golden.json", folded[0])
	plain, err := os.ReadFile("testdata/row.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	shown := goldenNames(t, got)
	for k := range goldenNames(t, plain) {
		shown[k] = true
	}
	for _, name := range jsonNames(reflect.TypeFor[Row]()) {
		if !shown[name] {
			t.Errorf("Row's field %q is in neither row.golden.json nor row_folded.golden.json: pin it", name)
		}
	}
}

// A seal's record is pinned as a row is: every field of SealInfo and of its Sources,
// as AppendSealJSON writes them, read back as they were, and told from a row.
func TestSealSchemaGolden(t *testing.T) {
	s := SealInfo{Schema: SchemaVersion, Seal: "gate-0/1764338400000-9f3a61c2/7", Gate: "gate-0", Rows: 3,
		Sources: []Source{{Topic: "events", Partition: 3, FirstOffset: 100, LastOffset: 199}}}
	got := append(AppendSealJSON(nil, &s), '\n')
	checkGolden(t, "seal.golden.json", got)
	want, err := os.ReadFile("testdata/seal.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var back SealInfo
	if err := json.Unmarshal(want, &back); err != nil || fmt.Sprintf("%+v", back) != fmt.Sprintf("%+v", s) {
		t.Errorf("seal.golden.json reads back as %+v, %v; want %+v", back, err, s)
	}
	if _, err := Decode(want); !errors.Is(err, ErrSealRecord) {
		t.Errorf("Decode(seal.golden.json) = %v, want ErrSealRecord", err)
	}
	shown := goldenNames(t, want)
	for _, name := range jsonNames(reflect.TypeFor[SealInfo]()) {
		if !shown[name] {
			t.Errorf("SealInfo's field %q is not in seal.golden.json: pin it", name)
		}
	}
}

// A row's threshold_source is where its threshold came from when its first record was
// routed: forced for a forced key, whatever its limit says (its override here), the
// limit's source otherwise (override), static for a threshold without a limit, and
// none without a key or a threshold. Learned: route's TestOutcomeThresholdSourceLearned.
func TestRowThresholdSource(t *testing.T) {
	lim, err := limit.New(limit.Config{Threshold: 1000, Overrides: map[string]int64{"o": 50, "f": 60}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAgg(time.Minute, nil)
	for _, f := range []Fate{
		{Key: "s", Kind: Accepted, Reason: "allowed", Threshold: 5},
		{Key: "o", Kind: Overflow, Reason: "rate_limited", Threshold: 50, Limiter: lim},
		{Key: "d", Kind: Accepted, Reason: "allowed", Threshold: 1000, Limiter: lim},
		{Key: "f", Kind: Overflow, Reason: "forced", Threshold: 60, Limiter: lim, Forced: true},
		{Key: "g", Kind: Overflow, Reason: "forced", Threshold: 7, Forced: true},
		{Key: "n", Kind: Accepted, Reason: "allowed"},
		{Kind: DeadLetter, Reason: "not_json", Threshold: 9, Forced: true},
	} {
		f.At, f.Team = t0, f.Key
		a.Record(&f)
	}
	got := map[string]string{}
	for _, r := range Seal("g", "s", a) {
		got[r.Key] = fmt.Sprintf("%d %s", r.Threshold, r.ThresholdSource)
	}
	want := map[string]string{"s": "5 static", "o": "50 override", "d": "1000 static", "f": "60 forced", "g": "7 forced", "n": "0 ", "": "0 "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("thresholds by key:\n got %v\nwant %v", got, want)
	}
}

// A row's interval is the one its record was routed in: one seal across a minute's end
// gives a row for each minute.
func TestIntervalsSplitRows(t *testing.T) {
	a := NewAgg(time.Minute, nil)
	for _, at := range []time.Time{t0, t0.Add(29 * time.Second), t0.Add(31 * time.Second)} {
		a.Record(&Fate{At: at, Kind: Accepted, Reason: "allowed", Key: "7", Team: "7"})
	}
	rows := Seal("g", "s", a)
	if len(rows) != 2 || rows[0].Records != 2 || rows[1].Records != 1 ||
		!rows[0].IntervalEnd.Equal(rows[1].IntervalStart) || rows[1].IntervalEnd.Sub(rows[1].IntervalStart) != time.Minute {
		t.Errorf("rows %+v", rows)
	}
}

// The budget bounds the rows held: keys past it are summed into one folded row per
// interval, rule, outcome and reason, no record lost; a seal gives the budget back.
func TestBudgetFoldsTheRest(t *testing.T) {
	b := NewBudget(3)
	a, other := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
	other.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "x", Team: "x", Bytes: 1})
	keys := []string{"1", "2", "3", "4", "5", "1", "5"}
	for _, k := range keys {
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: k, Team: k, Bytes: 10})
	}
	if b.Used() != 3 {
		t.Errorf("budget used %d, want 3", b.Used())
	}
	if n := a.Folded(); n != 4 {
		t.Errorf("folded %d records, want 4 (3, 4, 5, 5)", n)
	}
	rows := Seal("g", "s", a)
	var total int64
	var folded *Row
	for i := range rows {
		total += rows[i].Records
		if rows[i].Folded {
			folded = &rows[i]
		}
	}
	if total != int64(len(keys)) || folded == nil || folded.Records != 4 || folded.Bytes != 40 || folded.Key != "" || len(rows) != 3 {
		t.Errorf("rows %+v: want 1 and 2 exact and the rest (4 records) folded", rows)
	}
	if b.Used() != 1 {
		t.Errorf("after the seal the budget holds %d rows, want the other Agg's 1", b.Used())
	}
	a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "5", Team: "5"})
	if rows := Seal("g", "s", a); len(rows) != 1 || rows[0].Folded {
		t.Errorf("after a seal a new key is exact again: %+v", rows)
	}
}

// A key kept before the budget was spent keeps its rows after: a team accepted first
// and then overflowed, or counted again in the next interval, is in its own rows with
// every record (its history shows its limiting), never in the folded row.
func TestBudgetKeepsKeptKeys(t *testing.T) {
	b := NewBudget(2)
	a := NewAgg(time.Minute, b)
	a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "heavy", Team: "heavy"})
	a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "small", Team: "small"})
	for range 1000 {
		a.Record(&Fate{At: t0, Kind: Overflow, Reason: "rate_limited", Key: "heavy", Team: "heavy"})
	}
	a.Record(&Fate{At: t0.Add(time.Minute), Kind: Accepted, Reason: "allowed", Key: "heavy", Team: "heavy"})
	a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "late", Team: "late"})
	if n := a.Folded(); n != 1 {
		t.Errorf("folded %d records, want 1 (the late key's)", n)
	}
	if b.Used() != 4 {
		t.Errorf("budget used %d, want 4: heavy's further rows count against the cap too", b.Used())
	}
	rows := Seal("g", "s", a)
	if h := TeamHistory(rows, "heavy"); h.Total.Limited != 1000 || h.Total.Accepted != 2 {
		t.Errorf("team heavy's history: %d accepted, %d limited; want 2 and 1000 (rows %+v)", h.Total.Accepted, h.Total.Limited, rows)
	}
	for _, r := range rows {
		if r.Folded && r.Records != 1 {
			t.Errorf("folded row %+v: want the late key's one record", r)
		}
	}
	if b.Used() != 0 {
		t.Errorf("after the seal the budget holds %d rows, want 0", b.Used())
	}
}

// mixedKeys are n keys of every kind an Agg tells apart: short, longer than a slot holds
// sharing a prefix, slotKey long and shorter ("" among them), and composite.
func mixedKeys(n int) []string {
	long := strings.Repeat("k", 40)
	var keys []string
	for i := range n {
		switch i % 5 {
		case 0:
			keys = append(keys, strconv.Itoa(i))
		case 1:
			keys = append(keys, long+strconv.Itoa(i)) // longer than slotKey, same prefix
		case 2:
			keys = append(keys, strings.Repeat("x", slotKey)[:i/5%(slotKey+1)]) // slotKey and shorter, "" among them
		default:
			keys = append(keys, "team-"+strconv.Itoa(i)+":u-"+strconv.Itoa(i%7))
		}
	}
	return keys
}

// TestAggMatchesReference: whatever the keys (short, longer than a slot holds, empty,
// sharing prefixes), intervals (across their ends, before 1970), kinds, rules and
// reasons, with or without Bump first (as the router calls it), across seals and past
// the budget, an Agg's rows are a plain map's sums: every record counted once, in the
// row of its key, interval, kind, rule and reason, or folded once the budget is spent
// when its key has no row yet.
func TestAggMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := mixedKeys(3000)
	rules, reasons := []string{"", "team", "user"}, []string{"allowed", "rate_limited", "tagged"}
	type id struct {
		iv                int64
		kind              Kind
		rule, reason, key string
		folded            bool
	}
	for _, budget := range []int64{0, 500} {
		b := NewBudget(budget)
		a := NewAgg(time.Minute, b)
		for seal := range 4 {
			want := map[id][2]int64{}
			base := t0.Add(time.Duration(seal-2) * 40 * time.Second)
			if seal == 3 {
				base = time.Unix(-90, 0) // before 1970: intervals below zero
			}
			rowsHeld := map[id]bool{}
			keysHeld := map[string]bool{} // keys with a row of their own: their other rows are never folded
			for n := range 20_000 {
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(3) == 0 {
					key = keys[n%50] // a busy few
				}
				f := Fate{At: base.Add(time.Duration(rng.IntN(90_000)) * time.Millisecond), Kind: Kind(rng.IntN(int(numKinds))),
					Rule: rules[rng.IntN(3)], Reason: reasons[rng.IntN(3)], Key: string([]byte(key)), Bytes: rng.IntN(1000)}
				f.Team = f.Key
				if rng.IntN(4) == 0 {
					// The same rule and reason at another place: the pair last looked up
					// is found by where its bytes are first, by the bytes then.
					f.Rule, f.Reason = string([]byte(f.Rule)), string([]byte(f.Reason))
				}
				k := id{iv: a.interval(f.At), kind: f.Kind, rule: f.Rule, reason: f.Reason, key: f.Key}
				if budget > 0 && !rowsHeld[k] && !(k.key != "" && keysHeld[k.key]) && int64(len(rowsHeld)) >= budget {
					k.key, k.folded = "", true
				} else {
					rowsHeld[k], keysHeld[k.key] = true, true
				}
				w := want[k]
				want[k] = [2]int64{w[0] + 1, w[1] + int64(f.Bytes)}
				if rng.IntN(2) == 0 && a.Bump(f.At, f.Key, f.Team, f.Kind, f.Rule, f.Topic, f.Reason, f.Bytes) {
					continue
				}
				a.Record(&f)
			}
			got := map[id][2]int64{}
			for _, r := range Seal("g", "s", a) {
				k := id{iv: r.IntervalStart.UnixNano() / int64(time.Minute), rule: r.Rule, reason: r.Reason, key: r.Key, folded: r.Folded}
				if r.IntervalStart.UnixNano() < 0 {
					k.iv = (r.IntervalStart.UnixNano() - int64(time.Minute) + 1) / int64(time.Minute)
				}
				for kind := range numKinds {
					if out := kind.String(); out == r.Outcome || (kind == Topic && strings.HasPrefix(r.Outcome, "topic:")) {
						k.kind = kind
					}
				}
				if _, dup := got[k]; dup {
					t.Fatalf("budget %d, seal %d: two rows for %+v", budget, seal, k)
				}
				got[k] = [2]int64{r.Records, r.Bytes}
			}
			sameCounts(t, fmt.Sprintf("budget %d, seal %d", budget, seal), got, want)
		}
	}
}

// TestIndexComparesKeys: two keys of the same hash (a 64-bit collision, which no test
// can find, so made here) are two keys: the index compares the keys, short ones in the
// slot, long ones at their row, not only their hashes.
func TestIndexComparesKeys(t *testing.T) {
	if n := unsafe.Sizeof(slot{}); n != 64 {
		t.Errorf("a slot is %d bytes: the index reads one cache line (64 bytes) a record", n)
	}
	long := strings.Repeat("k", slotKey+5)
	for _, pair := range [][2]string{{"team-1", "team-2"}, {"team-1", "team-1x"}, {long + "a", long + "b"}, {"", "a"}, {long, long[:slotKey]}} {
		a := NewAgg(time.Minute, nil)
		const h = 42 // both keys' hash
		f := Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: pair[0], Team: pair[0]}
		first, at := a.find(pair[0], h)
		a.add(first, at, h, a.interval(t0), &f)
		if got, _ := a.find(pair[0], h); got != 0 {
			t.Errorf("%q: found row %d, want 0", pair[0], got)
		}
		if got, _ := a.find(pair[1], h); got != -1 {
			t.Errorf("%q, hashed as %q: found row %d, want none", pair[1], pair[0], got)
		}
	}
}

// Recording a key that has its row allocates nothing.
func TestRecordNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := NewAgg(time.Minute, NewBudget(10))
	key := []byte("team-42")
	f := Fate{At: t0, Kind: Overflow, Rule: "r", Reason: "rate_limited", Bytes: 5}
	f.Key = string(key)
	f.Team = f.Key
	a.Record(&f)
	if n := testing.AllocsPerRun(1000, func() { a.Record(&f) }); n != 0 {
		t.Errorf("%v allocations a record, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { a.Bump(f.At, f.Key, f.Team, f.Kind, f.Rule, f.Topic, f.Reason, f.Bytes) }); n != 0 {
		t.Errorf("%v allocations a bump, want 0", n)
	}
	g := f
	g.Team = "" // a key of no team: its row is hashed apart from the team's (rowHash)
	a.Record(&g)
	if n := testing.AllocsPerRun(1000, func() { a.Bump(g.At, g.Key, g.Team, g.Kind, g.Rule, g.Topic, g.Reason, g.Bytes) }); n != 0 {
		t.Errorf("%v allocations a bump of a key of no team, want 0", n)
	}
}

// AppendJSON writes what encoding/json writes for a Row, byte for byte, whatever its
// strings hold: the schema is encoding/json's, the speed is not.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	for _, r := range []Row{
		{Schema: 1, ID: "g/1/2", Gate: "g", IntervalStart: t0, IntervalEnd: t0.Add(time.Minute), Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 3, Bytes: 9},
		{Schema: 1, ID: "g/1/2", Gate: "g\"<>&", IntervalStart: t0.Add(123 * time.Millisecond), IntervalEnd: t0, Team: "t\x00\n\\é\u2028", Key: "bad\xffutf8", Rule: "r", Outcome: "topic:x", Reason: "forced", Records: -1, Bytes: 1 << 62, Threshold: 7, ThresholdSource: "override", Folded: true},
		{},
	} {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSON(nil, &r); !bytes.Equal(got, want) {
			t.Errorf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	}
}

// AppendRowsJSON writes each row as AppendJSON does, whichever of the fields it encodes
// once for rows in a row change between them: the interval (also only its zone, which
// the encoding shows), the id, the gate, the schema.
func TestAppendRowsJSON(t *testing.T) {
	est := time.FixedZone("EST", -5*3600)
	base := Row{Schema: 1, ID: "g/1/2", Gate: "g", IntervalStart: t0, IntervalEnd: t0.Add(time.Minute), Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 3, Bytes: 9}
	var rows []Row
	for i, change := range []func(r *Row){
		func(r *Row) {},
		func(r *Row) { r.Team, r.Key, r.Records = "43", "43:u\\1", 7 },
		func(r *Row) { r.IntervalStart, r.IntervalEnd = t0.Add(time.Minute), t0.Add(2*time.Minute) },
		func(r *Row) { r.IntervalStart = r.IntervalStart.In(est) }, // the same instant, written otherwise
		func(r *Row) { r.ID = "g/1/3" },
		func(r *Row) { r.Gate = "g<\\"; r.Folded = true },
		func(r *Row) { r.Schema = 2 },
		func(r *Row) {},
	} {
		r := base
		if i > 0 {
			r = rows[i-1]
		}
		change(&r)
		rows = append(rows, r)
	}
	b, ends := AppendRowsJSON([]byte("x"), rows, nil)
	if len(ends) != len(rows) {
		t.Fatalf("%d ends for %d rows", len(ends), len(rows))
	}
	from := 1
	for i := range rows {
		if got, want := b[from:ends[i]], AppendJSON(nil, &rows[i]); !bytes.Equal(got, want) {
			t.Errorf("row %d:\n got %s\nwant %s", i, got, want)
		}
		from = ends[i]
	}
}

// A seal's record says which input ranges its rows count; Decode tells it from a row.
func TestSealRecord(t *testing.T) {
	v := AppendSealJSON(nil, &SealInfo{Schema: 1, Seal: "g/1/2", Gate: "g", Rows: 3, Sources: []Source{{Topic: "events", Partition: 3, FirstOffset: 100, LastOffset: 199}}})
	if want := `{"schema":1,"seal":"g/1/2","gate":"g","rows":3,"sources":[{"topic":"events","partition":3,"first_offset":100,"last_offset":199}]}`; string(v) != want {
		t.Errorf("seal record %s, want %s", v, want)
	}
	if _, err := Decode(v); !errors.Is(err, ErrSealRecord) {
		t.Errorf("Decode(seal record) = %v, want ErrSealRecord", err)
	}
}

// BumpHashed with the hash Touch returned counts as Bump does, and with another key's
// hash counts nothing (the router passes the first rule's team's hash, and a later
// rule's key may have replaced it): Record then counts the record in its own row.
func TestBumpHashed(t *testing.T) {
	a := NewAgg(time.Minute, nil)
	at := time.Unix(1_800_000_000, 0)
	a.Record(&Fate{At: at, Kind: Accepted, Key: "t1", Team: "t1", Bytes: 10})
	a.Record(&Fate{At: at, Kind: Accepted, Key: "t2", Team: "t2", Bytes: 10})
	h1 := a.Touch("t1")
	if !a.BumpHashed(h1, at, "t1", Accepted, "", "", "", 10) {
		t.Fatal("BumpHashed with t1's own hash did not count t1")
	}
	if a.BumpHashed(h1, at, "t2", Accepted, "", "", "", 10) {
		t.Fatal("BumpHashed counted t2 with t1's hash")
	}
	rows := Seal("g", "s", a)
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Key] += r.Records
	}
	if got["t1"] != 2 || got["t2"] != 1 {
		t.Errorf("rows %v, want t1 2 and t2 1", got)
	}
}

// TestBumpSwitchesRuns: a key whose records come in runs of one row then another
// (accepted, held and overflowing, accepted again, then a new interval) is counted
// exactly in each row through BumpHashed, the slot following each run (bumpFront), and
// its rows are sealed in the order they were first made.
func TestBumpSwitchesRuns(t *testing.T) {
	a := NewAgg(time.Minute, nil)
	at := time.Unix(1_800_000_000, 0)
	h := a.Touch("t1")
	type run struct {
		at     time.Time
		kind   Kind
		rule   string
		reason string
		n      int
	}
	runs := []run{
		{at, Accepted, "", "allowed", 5},
		{at, Overflow, "team", "rate_limited", 7},
		{at, Accepted, "", "allowed", 3},
		{at, Tagged, "user", "tagged", 2},
		{at, Overflow, "team", "rate_limited", 4},
		{at.Add(time.Minute), Overflow, "team", "rate_limited", 6},
		{at, Accepted, "", "allowed", 1}, // a late record of the first interval
	}
	for _, r := range runs {
		for range r.n {
			if !a.BumpHashed(h, r.at, "t1", r.kind, r.rule, "", r.reason, 10) {
				a.Record(&Fate{At: r.at, Kind: r.kind, Rule: r.rule, Reason: r.reason, Key: "t1", Team: "t1", Bytes: 10})
			}
		}
	}
	var got []string
	for _, r := range Seal("g", "s", a) {
		got = append(got, fmt.Sprintf("%d %s %s %d/%d", r.IntervalStart.Unix(), r.Outcome, r.Rule, r.Records, r.Bytes))
	}
	iv := at.Truncate(time.Minute).Unix()
	want := []string{
		fmt.Sprintf("%d accepted  9/90", iv),
		fmt.Sprintf("%d overflow team 11/110", iv),
		fmt.Sprintf("%d tagged user 2/20", iv),
		fmt.Sprintf("%d overflow team 6/60", iv+60),
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSealMergesAggs: rows counted by several Aggs sharing a budget (a gate's routing
// goroutines), through Touch and BumpHashed or Record as the router counts them, seal
// into one row per interval, outcome, rule, reason and key, or one folded row per
// interval, outcome, rule and reason for the records of keys past the budget, each the
// sum of every Agg's records and bytes: what a plain map counts, across seals. A key's
// row takes a row of the budget in each Agg that counts it; a key with a row in an Agg
// is never folded there.
func TestSealMergesAggs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	keys := mixedKeys(500)
	type id struct {
		iv                int64
		kind              string
		rule, reason, key string
		folded            bool
	}
	for _, c := range []struct {
		aggs   int
		budget int64
	}{{2, 0}, {3, 0}, {5, 0}, {2, 300}, {5, 300}} {
		b := NewBudget(c.budget)
		var aggs []*Agg
		for range c.aggs {
			aggs = append(aggs, NewAgg(time.Minute, b))
		}
		for seal := range 3 {
			want := map[id][2]int64{}
			held := map[int]map[id]bool{} // by Agg: the rows it made
			kept := map[string]bool{}     // the keys any Agg made rows of: kept by all (Budget.kept)
			for range 20_000 {
				f := Fate{At: t0.Add(time.Duration(rng.IntN(120)) * time.Second), Kind: Kind(rng.IntN(int(numKinds))),
					Rule: []string{"", "r"}[rng.IntN(2)], Reason: "x", Key: string([]byte(keys[rng.IntN(len(keys))])), Bytes: rng.IntN(100)}
				f.Team = f.Key
				if f.Kind == Topic {
					f.Topic = "t"
				}
				ai := rng.IntN(c.aggs)
				a := aggs[ai]
				k := id{a.interval(f.At), kindOut(f), f.Rule, f.Reason, f.Key, false}
				if held[ai] == nil {
					held[ai] = map[id]bool{}
				}
				rows := 0
				for _, h := range held {
					rows += len(h)
				}
				switch {
				case held[ai][k]:
				case c.budget == 0 || int64(rows) < c.budget || k.key != "" && kept[k.key]:
					held[ai][k], kept[k.key] = true, true
				default:
					k.key, k.folded = "", true
				}
				w := want[k]
				want[k] = [2]int64{w[0] + 1, w[1] + int64(f.Bytes)}
				if f.Key != "" && rng.IntN(2) == 0 && a.BumpHashed(a.Touch(f.Key), f.At, f.Key, f.Kind, f.Rule, f.Topic, f.Reason, f.Bytes) {
					continue
				}
				a.Record(&f)
			}
			got := map[id][2]int64{}
			for _, r := range Seal("g", "s", aggs...) {
				k := id{r.IntervalStart.UnixNano() / int64(time.Minute), r.Outcome, r.Rule, r.Reason, r.Key, r.Folded}
				if _, dup := got[k]; dup {
					t.Fatalf("%+v, seal %d: two rows %+v", c, seal, k)
				}
				got[k] = [2]int64{r.Records, r.Bytes}
			}
			sameCounts(t, fmt.Sprintf("%+v, seal %d", c, seal), got, want)
			if b.Used() != 0 {
				t.Errorf("%+v, seal %d: the budget holds %d rows after the seal, want 0", c, seal, b.Used())
			}
		}
	}
}

// Aggs of different intervals seal together without merging: each one's rows are its
// own, of its own interval.
func TestSealKeepsOtherIntervals(t *testing.T) {
	minute, tenSec := NewAgg(time.Minute, nil), NewAgg(10*time.Second, nil)
	f := Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 1}
	minute.Record(&f)
	tenSec.Record(&f)
	tenSec.Record(&f)
	rows := Seal("g", "s", minute, tenSec)
	if len(rows) != 2 || rows[0].Records != 1 || rows[0].IntervalEnd.Sub(rows[0].IntervalStart) != time.Minute ||
		rows[1].Records != 2 || rows[1].IntervalEnd.Sub(rows[1].IntervalStart) != 10*time.Second {
		t.Errorf("rows %+v: want the minute's one record and the ten seconds' two, apart", rows)
	}
}

// sameCounts fails t unless got, the sealed rows' records and bytes by row, are want's.
func sameCounts[K comparable](t *testing.T, what string, got, want map[K][2]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s: row %+v counts %v, want %v", what, k, got[k], w)
		}
	}
}

// kindOut is f's Row.Outcome.
func kindOut(f Fate) string {
	if f.Kind == Topic {
		return "topic:" + f.Topic
	}
	return f.Kind.String()
}

// A rule's topic is part of its rows' outcome (topic:NAME): records one rule sent to two
// topics within one seal (the rules file reloaded with the rule's topic changed) are in
// two rows, each counting what went to its topic.
func TestTopicRowsKeepTheirTopic(t *testing.T) {
	a := NewAgg(time.Minute, nil)
	f := Fate{At: t0, Kind: Topic, Rule: "merges", Topic: "merges-slow", Reason: "rate_limited", Key: "42", Team: "42", Bytes: 10}
	a.Record(&f)
	g := f
	g.Topic, g.Bytes = "merges-slower", 1
	a.Record(&g) // the reloaded rule's topic
	g.At = t0.Add(time.Second)
	if !a.Bump(g.At, g.Key, g.Team, g.Kind, g.Rule, g.Topic, g.Reason, g.Bytes) {
		t.Error("Bump did not count a record of merges-slower's row")
	}
	got := map[string][2]int64{}
	for _, r := range Seal("g", "s", a) {
		got[r.Outcome] = [2]int64{r.Records, r.Bytes}
	}
	if want := map[string][2]int64{"topic:merges-slow": {1, 10}, "topic:merges-slower": {2, 2}}; !maps.Equal(got, want) {
		t.Errorf("rows by outcome %v, want %v", got, want)
	}
}

// A row's threshold is the key's when the row's first record was routed
// (docs/outcomes.md): merged at the seal, a row two routing goroutines counted takes the
// threshold and source of the goroutine that routed its first record, whichever Agg is
// listed first.
func TestSealKeepsFirstRecordsThreshold(t *testing.T) {
	early := Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "42", Team: "42", Bytes: 1, Threshold: 100}
	late := early
	late.At, late.Threshold, late.Forced = t0.Add(20*time.Second), 7, true
	for _, order := range []string{"late first", "early first"} {
		a0, a1 := NewAgg(time.Minute, nil), NewAgg(time.Minute, nil)
		if order == "late first" {
			a0.Record(&late)
			a1.Record(&early)
		} else {
			a0.Record(&early)
			a1.Record(&late)
		}
		rows := Seal("g", "s", a0, a1)
		if len(rows) != 1 || rows[0].Records != 2 {
			t.Fatalf("%s: rows %+v, want one of 2 records", order, rows)
		}
		if r := rows[0]; r.Threshold != 100 || r.ThresholdSource != "static" {
			t.Errorf("%s: threshold %d (%s), want 100 (static): the row's first record's", order, r.Threshold, r.ThresholdSource)
		}
	}
}

// TestKeptKeyKeptByEveryAgg: a key kept by one routing goroutine's Agg before the cap is
// kept by every Agg of the budget after it, as docs/outcomes.md promises (a team's
// limiting never leaves its history): the consumer hands a partition's polls to whichever
// goroutine is free, so a team's overflow is often routed by another goroutine than its
// first accepted record. Before, it went to the folded row, and `gate outcomes heavy`
// showed a team never limited.
func TestKeptKeyKeptByEveryAgg(t *testing.T) {
	b := NewBudget(2)
	a0, a1 := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
	for _, k := range []string{"heavy", "small"} {
		a0.Record(&Fate{At: t0, Kind: Accepted, Key: k, Team: k, Bytes: 10})
	}
	a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "team", Reason: "rate_limited", Key: "heavy", Team: "heavy", Bytes: 10})
	a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "team", Reason: "rate_limited", Key: "new", Team: "new", Bytes: 10})
	rows := Seal("g", "id", a0, a1)
	var heavyOver, folded int64
	for _, r := range rows {
		switch {
		case r.Folded:
			folded += r.Records
		case r.Key == "heavy" && r.Outcome == "overflow":
			heavyOver += r.Records
		}
	}
	if heavyOver != 1 || folded != 1 {
		t.Fatalf("heavy's overflow %d (want 1) and folded %d (want 1, the key that came after the cap): %+v", heavyOver, folded, rows)
	}
	// The next seal starts afresh: nothing is kept from the last.
	a0.Record(&Fate{At: t0, Kind: Accepted, Key: "x", Team: "x"})
	a0.Record(&Fate{At: t0, Kind: Accepted, Key: "y", Team: "y"})
	a1.Record(&Fate{At: t0, Kind: Overflow, Key: "heavy", Team: "heavy"})
	for _, r := range Seal("g", "id2", a0, a1) {
		if r.Key == "heavy" {
			t.Fatalf("heavy kept from the last seal: %+v", r)
		}
	}
}

// TestKeptKeyOfScratchKept: a Fate's Key may alias the record or the router's scratch,
// which the next record writes over (Fate's doc: a new row copies it); the budget's kept
// keys must be the rows' own copies, or a key kept before the cap is forgotten, or taken
// for another, as soon as its buffer is reused, and its overflow routed by another
// goroutine goes to the folded row (a composite key, joined in the router's key buffer).
func TestKeptKeyOfScratchKept(t *testing.T) {
	b := NewBudget(2)
	a0, a1 := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
	buf := []byte("heavy")
	key := unsafe.String(&buf[0], len(buf)) // as the router's bytesString
	a0.Record(&Fate{At: t0, Kind: Accepted, Key: key, Team: key, Bytes: 10})
	copy(buf, "small") // the next record's key, in the same buffer
	a0.Record(&Fate{At: t0, Kind: Accepted, Key: key, Team: key, Bytes: 10})
	a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "team", Reason: "rate_limited", Key: "heavy", Team: "heavy", Bytes: 10})
	var heavyOver, folded int64
	for _, r := range Seal("g", "id", a0, a1) {
		switch {
		case r.Folded:
			folded += r.Records
		case r.Key == "heavy" && r.Outcome == "overflow":
			heavyOver += r.Records
		}
	}
	if heavyOver != 1 || folded != 0 {
		t.Fatalf("heavy's overflow %d (want 1), folded %d (want 0): heavy was kept before the cap", heavyOver, folded)
	}
}

// A gate's memory for rows stays within twice what one routing goroutine's Agg keeps for
// GATE_OUTCOMES_MAX_ROWS, however many goroutines (one per CPU) it routes on and however
// its keys move between them: each Agg keeps between seals the room it last needed, not
// the room of its busiest seal. Before, an Agg kept the room of its busiest seal, so a
// load of many keys that one goroutine, then another, routed (a partition of rotating
// keys: when the cap is reached) left every one with room for the cap: 8 goroutines
// kept 4.9 times one's.
func TestSealKeepsBoundedMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const max, n = 20_000, 8
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// kept is the heap the Aggs keep after seals in which the keys of each came from the
	// Aggs pick gives.
	kept := func(aggs int, pick func(seal, k int) int) uint64 {
		h0 := heap()
		b := NewBudget(max)
		as := make([]*Agg, aggs)
		for i := range as {
			as[i] = NewAgg(time.Minute, b)
		}
		var rows []Row
		for seal := range 2 * aggs {
			for k := range max {
				key := "team-" + strconv.Itoa(seal*max+k)
				as[pick(seal, k)].Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: key, Team: key, Bytes: 100})
			}
			rows = SealAppend(rows[:0], "g", "s", as...)
			clear(rows)
		}
		h := heap() - h0
		runtime.KeepAlive(as)
		runtime.KeepAlive(rows)
		return h
	}
	one := kept(1, func(int, int) int { return 0 })
	for _, tc := range []struct {
		name string
		pick func(seal, k int) int
	}{
		{"spread", func(_, k int) int { return k % n }},
		{"moving", func(seal, _ int) int { return seal % n }},
	} {
		got := kept(n, tc.pick)
		t.Logf("%s over %d Aggs: %d bytes a row kept, one Agg %d", tc.name, n, got/max, one/max)
		if got > 2*one {
			t.Errorf("%s over %d Aggs: %d bytes a row kept, %.1f times one Agg's %d: want at most twice",
				tc.name, n, got/max, float64(got)/float64(one), one/max)
		}
	}
}

// TestKeptTeamKeepsItsUsersLimiting: under a rule keyed by team and user, a team's
// accepted records count in its team's row and its limited ones in a row per user, a key
// of its own. Once GATE_OUTCOMES_MAX_ROWS is reached, a user of a team kept before the cap
// (by its own row, or a user's, in any Agg) is counted in its team's row of that rule,
// outcome and reason, as a team's row under a composite key is written (key the team, no
// threshold), not in the folded row of no team: docs/outcomes.md promises that a team's
// limiting never leaves its history. A team not kept is folded as before. Before, every
// user past the cap went to the folded row, and the team's history showed no limiting.
func TestKeptTeamKeepsItsUsersLimiting(t *testing.T) {
	b := NewBudget(3)
	a0, a1 := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
	a0.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10})
	a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "9:u0", Team: "9", Bytes: 10, Threshold: 5})
	a0.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "7", Team: "7", Bytes: 10}) // the cap
	for i := range 50 {
		u := strconv.Itoa(i)
		a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "42:u" + u, Team: "42", Bytes: 10, Threshold: 5})
		a0.Record(&Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "9:u" + u + "x", Team: "9", Bytes: 10, Threshold: 5, Forced: true})
		a1.Record(&Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "5:u" + u, Team: "5", Bytes: 10, Threshold: 5})
	}
	if n := a0.Folded() + a1.Folded(); n != 50 {
		t.Errorf("folded %d records, want 50 (team 5's: no key of it came before the cap)", n)
	}
	rows := Seal("g", "s", a0, a1)
	for team, want := range map[string]int64{"42": 50, "9": 51, "5": 0} {
		if h := TeamHistory(rows, team); h.Total.Limited != want {
			t.Errorf("team %s's history: %d limited, want %d (rows %+v)", team, h.Total.Limited, want, rows)
		}
	}
	for _, r := range rows {
		if r.Key == r.Team && r.Rule == "user" && (r.Threshold != 0 || r.ThresholdSource != "") {
			t.Errorf("team row %+v of users counted past the cap: want no threshold, as a team's row under a composite key", r)
		}
	}
	if len(rows) > 3+2+1 {
		t.Errorf("%d rows: want the cap's 3, teams 42's and 9's rows of their users and one folded (%+v)", len(rows), rows)
	}
	if b.Used() != 0 {
		t.Errorf("after the seal the budget holds %d rows, want 0", b.Used())
	}
}

// TestHeavyKeysKeepTheirRowsOverTheCap tests docs/outcomes.md's claim for first come,
// first kept: a key that sends much arrives early in each seal, so the keys that matter
// keep exact rows when the cap is reached. A fleet's fresh key on every event (a
// distinct_id a record, Zipf-spread teams): a million keys, Zipf 1.1, 300,000 records a
// seal, a cap of 1,000 rows, three seals. In each, the 20 keys that sent most have rows of
// their own counting every record of theirs, and the rows, folded ones with them, count
// every record.
func TestHeavyKeysKeepTheirRowsOverTheCap(t *testing.T) {
	const (
		keys, perSeal, cap, top = 1_000_000, 300_000, 1_000, 20
	)
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, keys-1)
	b := NewBudget(cap)
	a := NewAgg(time.Minute, b)
	for seal := range 3 {
		sent := map[string]int64{}
		for range perSeal {
			k := "k" + strconv.FormatUint(z.Uint64(), 10)
			sent[k]++
			a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: k, Team: k, Bytes: 1})
		}
		rows := Seal("g", strconv.Itoa(seal), a)
		exact := map[string]int64{}
		var total, folded int64
		for _, r := range rows {
			total += r.Records
			if r.Folded {
				folded += r.Records
			} else {
				exact[r.Key] += r.Records
			}
		}
		if total != perSeal || folded == 0 {
			t.Fatalf("seal %d: rows count %d records (%d folded), want %d with some folded", seal, total, folded, perSeal)
		}
		heavy := slices.SortedFunc(maps.Keys(sent), func(x, y string) int { return cmp.Compare(sent[y], sent[x]) })[:top]
		var inHeavy int64
		for _, k := range heavy {
			inHeavy += sent[k]
			if exact[k] != sent[k] {
				t.Errorf("seal %d: key %s sent %d records, its own row counts %d (folded past the cap)", seal, k, sent[k], exact[k])
			}
		}
		t.Logf("seal %d: %d keys, %d rows kept exact (%d records), %d records folded; the %d heaviest keys sent %d", seal, len(sent), len(exact), perSeal-folded, folded, top, inHeavy)
	}
}

// A team whose id holds a ':' is spelled two ways in its rows: as a team rule's key
// ("c:1") and as a composite key's first field, escaped ("c%3A1", TeamOf reads it back).
// Kept under one spelling before the cap, it is kept under the other: its users' records
// past the cap count in its row of their rule, not in the folded row of no team (a
// reviewer's run: 60 of the team's 61 records, all 40 limited, folded, `gate outcomes
// c:1` saying it was never limited, where a team without ':' kept them).
func TestKeptTeamSpelledEitherWayKeepsItsUsers(t *testing.T) {
	for _, first := range []string{"c:1", "c%3A1"} {
		t.Run(first, func(t *testing.T) {
			b := NewBudget(2)
			a := NewAgg(time.Minute, b)
			// The team kept by a record of its own (a team rule's key, or a user's team row).
			a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: first, Team: first, Bytes: 10})
			a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "other", Team: "other", Bytes: 10}) // the cap
			for i := range 20 {
				u := strconv.Itoa(i)
				a.Record(&Fate{At: t0, Kind: Overflow, Rule: "team-user", Reason: "rate_limited", Key: "c%3A1:u" + u, Team: "c%3A1", Bytes: 10, Threshold: 5})
				a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "c:1", Team: "c:1", Bytes: 10})
			}
			if n := a.Folded(); n != 0 {
				t.Errorf("folded %d records of a kept team, want 0", n)
			}
			h := TeamHistory(Seal("g", "s", a), "c:1")
			if h.Total.Limited != 20 || h.Total.Accepted != 21 {
				t.Errorf("team c:1's history: %d accepted, %d limited; want 21 and 20", h.Total.Accepted, h.Total.Limited)
			}
		})
	}
}

// A row's identity holds its team: a key of no team (a user id under a rule keyed by
// users, read from a record whose team cannot be read: key "42", team "") is another row
// than a team's of the same bytes (team 42's row of that rule, which its users past
// GATE_OUTCOMES_MAX_ROWS are counted in). Numeric user and team ids meet: the two were
// one row, keyed by the index by the key alone, the team's overflow and the records of
// no team summed under whichever came first's team, and a key of no team kept the team of
// its bytes kept past the cap (Budget.kept), or the other way round.
func TestKeyOfNoTeamApartFromTheTeamOfItsBytes(t *testing.T) {
	teamUsers := func(a *Agg, n int) {
		for i := range n {
			f := Fate{At: t0, Kind: Overflow, Rule: "users", Reason: "rate_limited", Key: "42:u" + strconv.Itoa(i), Team: "42", Bytes: 10, Threshold: 5}
			if !a.Bump(f.At, f.Key, f.Team, f.Kind, f.Rule, f.Topic, f.Reason, f.Bytes) {
				a.Record(&f)
			}
		}
	}
	noTeam := func(a *Agg, n int) {
		for range n {
			f := Fate{At: t0, Kind: Overflow, Rule: "users", Reason: "rate_limited", Key: "42", Bytes: 100, Threshold: 5}
			if !a.Bump(f.At, f.Key, f.Team, f.Kind, f.Rule, f.Topic, f.Reason, f.Bytes) { // as the router counts
				a.Record(&f)
			}
		}
	}
	type row struct {
		team, key string
		folded    bool
	}
	rowsOf := func(rows []Row) map[row]int64 {
		got := map[row]int64{}
		for _, r := range rows {
			if r.Rule == "users" {
				got[row{r.Team, r.Key, r.Folded}] += r.Records
			}
		}
		return got
	}
	t.Run("team-kept", func(t *testing.T) {
		b := NewBudget(2)
		a, other := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10}) // team 42 kept
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "7", Team: "7", Bytes: 10})   // the cap
		teamUsers(a, 10)
		noTeam(a, 3)
		noTeam(other, 2) // merged at the seal, through the first Agg's index
		got := rowsOf(Seal("g", "s", a, other))
		want := map[row]int64{{"42", "42", false}: 10, {"", "", true}: 5} // a key of no team new past the cap: folded
		if !maps.Equal(got, want) {
			t.Errorf("rows of rule users %v, want %v", got, want)
		}
	})
	t.Run("no-team-kept", func(t *testing.T) {
		b := NewBudget(2)
		a, other := NewAgg(time.Minute, b), NewAgg(time.Minute, b)
		noTeam(a, 3)                                                                               // key 42 of no team kept
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "7", Team: "7", Bytes: 10}) // the cap
		teamUsers(a, 10)
		teamUsers(other, 4)
		got := rowsOf(Seal("g", "s", a, other))
		want := map[row]int64{{"", "42", false}: 3, {"", "", true}: 14} // team 42 not kept: its users folded
		if !maps.Equal(got, want) {
			t.Errorf("rows of rule users %v, want %v", got, want)
		}
	})
	t.Run("no-cap", func(t *testing.T) {
		a, other := NewAgg(time.Minute, nil), NewAgg(time.Minute, nil)
		for _, x := range []*Agg{a, other} {
			x.Record(&Fate{At: t0, Kind: Overflow, Rule: "users", Reason: "rate_limited", Key: "42", Team: "42", Bytes: 10})
			noTeam(x, 2)
		}
		got := rowsOf(Seal("g", "s", a, other))
		want := map[row]int64{{"42", "42", false}: 2, {"", "42", false}: 4}
		if !maps.Equal(got, want) {
			t.Errorf("rows of rule users %v, want %v", got, want)
		}
	})
}
