package outcome

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/redistest"
)

// kcatJq is docs/outcomes.md's recipe for reading the rows without the gate: a sh block
// whose kcat command (up to its -q) pipes into jq.
var kcatJq = regexp.MustCompile("(?s)```sh\n(kcat -C [^\n]*? -q)( \\|.*?\n)```")

// TestDocsJqRecipe runs docs/outcomes.md's kcat | jq recipe, its kcat replaced by the
// records as kcat prints them (a value a line), on rows the gate encodes: two seals, each
// with its seal record, one of them written twice (an at-least-once row retried after its
// answer was lost), a folded row, a team of bytes that are not UTF-8, a shadow_over row.
// It must give each team's records by outcome as gate outcomes counts them: seal records
// left out, a row written again counted once.
func TestDocsJqRecipe(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("jq not on PATH (%v); CI=%s, so this is a failure, not a skip", err, os.Getenv("CI"))
		}
		t.Skip("jq not on PATH (the Debian package jq; set CI=true to make this a failure)")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := kcatJq.FindSubmatch(doc)
	if m == nil || !bytes.Contains(m[2], []byte("jq ")) {
		t.Fatalf("docs/outcomes.md has no sh block of kcat ... -q | jq ...: a reader is told to \"sum .records by .team and .outcome\" with no command that leaves out seal records and counts a row written again once")
	}

	b := NewBudget(4)
	a := NewAgg(time.Minute, b)
	rec := func(n int, f Fate) {
		for range n {
			a.Record(&f)
		}
	}
	var stream []byte
	seal := func(id string, times int) {
		rows := MergeAsEncoded(Seal("gate-0", id, a))
		buf, ends := AppendRowsJSON(nil, rows, nil)
		for range times {
			from := 0
			for _, end := range ends {
				stream = append(append(stream, buf[from:end]...), '\n')
				from = end
			}
		}
		stream = append(AppendSealJSON(stream, &SealInfo{Schema: SchemaVersion, Seal: id, Gate: "gate-0", Rows: len(rows),
			Sources: []Source{{Topic: "events", Partition: 0, FirstOffset: 0, LastOffset: 99}}}), '\n')
	}
	rec(5, Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10})
	rec(2, Fate{At: t0, Kind: Overflow, Rule: "user", Reason: "rate_limited", Key: "42:u1", Team: "42", Bytes: 10, Threshold: 5})
	rec(1, Fate{At: t0, Kind: ShadowOver, Rule: "watch", Reason: "rate_limited", Key: "42", Team: "42", Bytes: 10})
	rec(3, Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "t\xff", Team: "t\xff", Bytes: 10})
	rec(4, Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "7", Team: "7", Bytes: 10}) // past the budget: folded
	seal("gate-0/1764338400000-9f3a61c2/1", 2)                                              // written twice
	rec(1, Fate{At: t0.Add(time.Minute), Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10})
	rec(6, Fate{At: t0.Add(time.Minute), Kind: Accepted, Reason: "allowed", Key: "t\xfe", Team: "t\xfe", Bytes: 10})
	rec(1, Fate{At: t0.Add(time.Minute), Kind: Topic, Rule: "merges", Topic: "merges-slow", Reason: "rate_limited", Key: "42", Team: "42", Bytes: 10})
	seal("gate-0/1764338400000-9f3a61c2/2", 1)

	rowsFile := filepath.Join(t.TempDir(), "rows")
	if err := os.WriteFile(rowsFile, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cat "$ROWS"` + strings.ReplaceAll(string(m[2]), "jq ", jq+" ")
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "ROWS="+rowsFile)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v running\n%s\nstderr: %s", err, script, err.(*exec.ExitError).Stderr)
	}
	type sum struct {
		Team, Outcome string
		Records       int64
	}
	var got []sum
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var s sum
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("the recipe's output %s: %v", out, err)
		}
		got = append(got, s)
	}
	slices.SortFunc(got, func(x, y sum) int { return strings.Compare(x.Team+"\x00"+x.Outcome, y.Team+"\x00"+y.Outcome) })
	want := []sum{
		{"", "accepted", 4}, // folded: team 7's
		{"42", "accepted", 6},
		{"42", "overflow", 2},
		{"42", "shadow_over", 1},
		{"42", "topic:merges-slow", 1},
		{"t\uFFFD", "accepted", 9}, // t\xff and t\xfe read back alike
	}
	if !slices.Equal(got, want) {
		t.Errorf("the recipe\n%s\ngave %+v\n want %+v", script, got, want)
	}
}

// sealOverlapJq is docs/outcomes.md's recipe for finding the records an at-least-once
// gate routed twice: a sh block of kcat piped into a jq that reads the seal records.
var sealOverlapJq = regexp.MustCompile("(?s)```sh\n(kcat -C [^\n]*? -q)( \\| *\n *jq [^\n]*select\\(\\.seal\\).*?\n)```")

// TestDocsSealOverlapRecipe runs docs/outcomes.md's recipe for the input offsets two
// seals count (a replay after a crash, at least once: their rows count those records
// twice, which neither gate outcomes nor the rows recipe can tell) on seal records as
// the gate writes them: a seal, written twice (retried), and the seal of the next owner
// of its partition, which routed again from before its end. It must name the offsets
// both count and the two seals, and nothing else. Before, the docs said seal records'
// sources overlap and gave no way to find where.
func TestDocsSealOverlapRecipe(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("jq not on PATH (%v); CI=%s, so this is a failure, not a skip", err, os.Getenv("CI"))
		}
		t.Skip("jq not on PATH (the Debian package jq; set CI=true to make this a failure)")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := sealOverlapJq.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/outcomes.md has no sh block of kcat ... -q | jq ... select(.seal) ...: a reader told that records routed twice are two seals over overlapping offsets has no way to find them")
	}
	var stream []byte
	seal := func(id string, srcs ...Source) {
		a := NewAgg(time.Minute, NewBudget(4))
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: "42", Team: "42", Bytes: 10})
		rows := Seal("gate-0", id, a)
		buf, ends := AppendRowsJSON(nil, rows, nil)
		from := 0
		for _, end := range ends {
			stream = append(append(stream, buf[from:end]...), '\n')
			from = end
		}
		stream = append(AppendSealJSON(stream, &SealInfo{Schema: SchemaVersion, Seal: id, Gate: "gate-0", Rows: len(rows), Sources: srcs}), '\n')
	}
	seal("gate-0/1-a/7", Source{"events", 0, 100, 199}, Source{"events", 1, 0, 50})
	seal("gate-0/1-a/7", Source{"events", 0, 100, 199}, Source{"events", 1, 0, 50}) // written again
	seal("gate-0/2-b/1", Source{"events", 0, 150, 250})                             // crashed: routed again from 150
	seal("gate-1/3-c/1", Source{"events", 0, 251, 300}, Source{"events", 1, 51, 60})

	rowsFile := filepath.Join(t.TempDir(), "rows")
	if err := os.WriteFile(rowsFile, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cat "$ROWS"` + strings.ReplaceAll(string(m[2]), "jq ", jq+" ")
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "ROWS="+rowsFile)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v running\n%s\nstderr: %s", err, script, err.(*exec.ExitError).Stderr)
	}
	want := `{"topic":"events","partition":0,"first_offset":150,"last_offset":199,"seals":["gate-0/1-a/7","gate-0/2-b/1"]}`
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("the recipe\n%s\ngave %s\n want %s", script, got, want)
	}
}

// docsJSON is a json block of docs/outcomes.md.
var docsJSON = regexp.MustCompile("(?s)```json\n(.*?)```")

// TestDocsShowGoldens: docs/outcomes.md's examples of a row and of a seal record are the
// goldens (testdata/row.golden.json, testdata/seal.golden.json), their lines joined: the
// schema a reader is shown is the one the tests pin.
func TestDocsShowGoldens(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range docsJSON.FindAllSubmatch(doc, -1) {
		var b strings.Builder
		for line := range strings.Lines(string(m[1])) {
			b.WriteString(strings.TrimSpace(line))
		}
		shown[b.String()] = true
	}
	for _, name := range []string{"row.golden.json", "seal.golden.json"} {
		g, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if !shown[strings.TrimSpace(string(g))] {
			t.Errorf("docs/outcomes.md shows no json block of testdata/%s (%s): the documented schema and the pinned one differ", name, bytes.TrimSpace(g))
		}
	}
}
