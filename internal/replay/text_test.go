package replay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A key is whatever bytes an event carried: the text report prints one that is not
// plain text quoted, in its own cell. A raw 0xff is text/tabwriter's escape character
// (it swallowed the rest of the table, tabs and all), a tab or a newline would shift
// the columns or start a row, and an escape sequence would reach the terminal.
func TestWriteTextQuotesOddKeys(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	odd := []string{"a\xffb", "title\x1b]0;pwned\x07", "tab\there", "new\nline"}
	r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Records: 10,
		Candidates: []CandidateReport{{Name: "a", Rules: []RuleFate{{Rule: "r\xff"}}, DeadLetters: map[string]int64{"why\x1b[2J": 1}, KeysAffected: 5}, {Name: "b"}}}
	for i, k := range append(odd, "plain") {
		r.Candidates[0].Keys = append(r.Candidates[0].Keys, KeyReport{Rule: "r", Key: k, Team: k, Limited: int64(10 - i), FirstLimited: at, LastLimited: at})
		r.Diff = append(r.Diff, TeamDiff{Team: k, A: int64(10 - i), Change: int64(10 - i)})
	}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !utf8.ValidString(out) || strings.ContainsAny(out, "\t\x1b\x07") {
		t.Errorf("the report holds a key's raw bytes (invalid UTF-8, a tab or an escape):\n%q", out)
	}
	for _, k := range odd {
		if q := `"` + strings.NewReplacer("\xff", `\xff`, "\x1b", `\x1b`, "\x07", `\a`, "\t", `\t`, "\n", `\n`).Replace(k) + `"`; !strings.Contains(out, q) {
			t.Errorf("key %q is not shown quoted, as %s:\n%s", k, q, out)
		}
	}
	// Every row of the keys table has its columns where the header has them.
	lines := strings.Split(out, "\n")
	headers := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "RULE  KEY") {
			continue
		}
		headers++
		col := strings.Index(l, "LIMITED")
		for _, row := range lines[i+1 : i+6] {
			if len(row) <= col || row[col-1] != ' ' || !strings.ContainsRune("0123456789", rune(row[col])) {
				t.Errorf("a key's row is out of its columns (LIMITED at %d):\n%s\n%s", col, l, row)
			}
		}
	}
	if headers != 1 {
		t.Errorf("%d keys tables (a line starting RULE  KEY), want 1: no row's columns checked:\n%s", headers, out)
	}
}

// A key limited under its threshold (a forced team at 0.96 of it) is not shown at its
// threshold by either report: the ratios are rounded down, not to nearest (the page
// showed 0.96 as "1.0×", the text 0.996 as "1.00 × 100"); an exact one keeps its digits.
func TestPeakRatioNotRoundedUpToThreshold(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Records: 10,
		Candidates: []CandidateReport{{Name: "a", KeysAffected: 3, Keys: []KeyReport{
			{Rule: "r", Key: "forced", Team: "forced", Limited: 5, FirstLimited: at, LastLimited: at, Threshold: 100, PeakRatio: 0.996},
			{Rule: "r", Key: "near", Team: "near", Limited: 4, FirstLimited: at, LastLimited: at, Threshold: 100, PeakRatio: 0.96},
			{Rule: "r", Key: "over", Team: "over", Limited: 3, FirstLimited: at, LastLimited: at, Threshold: 100, PeakRatio: 2.3},
		}}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"0.99 × 100", "0.96 × 100", "2.30 × 100"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text report lacks %q:\n%s", want, text)
		}
	}
	b.Reset()
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "1.00×") {
		t.Errorf("the page shows a key under its threshold at 1.00×")
	}
	// The page's figures are the text's (it gave one decimal where the text gave two).
	for _, want := range []string{"<td>0.99×</td>", "<td>0.96×</td>", "<td>2.30×</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// With -against, the text lists the first maxDiffRows teams limited differently and says
// how many more there are, as the page does: it cut the rest off without a word, under
// a header counting them all.
func TestWriteTextSaysTeamsNotListed(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Candidates: []CandidateReport{{Name: "a"}, {Name: "b"}}}
	for i := range maxDiffRows + 12 {
		r.Diff = append(r.Diff, TeamDiff{Team: fmt.Sprintf("team%03d", i), A: int64(1000 - i), Change: int64(1000 - i)})
	}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "62 teams limited differently") || strings.Contains(out, fmt.Sprintf("team%03d", maxDiffRows)) {
		t.Fatalf("the diff's header or rows are not as expected:\n%s", out)
	}
	if !strings.Contains(out, "and 12 more teams") {
		t.Errorf("the text lists %d of 62 teams and does not say 12 are left out:\n%s", maxDiffRows, out)
	}
}

// One team limited differently is said as one: the header read "1 teams".
func TestWriteTextOneTeamLimitedDifferently(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Candidates: []CandidateReport{{Name: "a"}, {Name: "b"}},
		Diff: []TeamDiff{{Team: "loud", A: 10, Change: 10}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "\n1 team limited differently") {
		t.Errorf("the diff's header for one team:\n%s", out)
	}
}

// A rules file's per-rule rows count the records whose fate each rule decided, not every
// record it checked as the gate's gate_rule_records_total does: a review read an
// overflow rule's ACCEPTED of 0 beside thousands accepted, and dead letters summing to
// less than the total's (a value no JSON object is no rule's), as wrong figures. Both
// reports say what a row counts under the table; the gate's limits without a rules file,
// one row of every record, need no such line.
func TestRulesTableSaysWhatARowCounts(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rules []RuleFate
		want  bool
	}{
		{[]RuleFate{{Rule: "team-user"}, {Rule: "team"}}, true},
		{[]RuleFate{{Rule: ""}}, false},
	} {
		r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Records: 10, Candidates: []CandidateReport{{Name: "a", Rules: c.rules}}}
		var b bytes.Buffer
		if err := WriteText(&b, r); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "each rule: the records whose fate it decided"); got != c.want {
			t.Errorf("rules %v: the text says what a row counts: %v, want %v:\n%s", c.rules, got, c.want, b.String())
		}
		b.Reset()
		if err := WriteHTML(&b, r); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "Each rule: the records whose fate it decided"); got != c.want {
			t.Errorf("rules %v: the page says what a row counts: %v, want %v", c.rules, got, c.want)
		}
	}
}

// The text's range is to the second, as the page's is (a range of 45 s read "from
// 05:03Z to 05:03Z"), and its diff's change is grouped by thousands as the columns
// beside it are (it read -12227 beside 12,227).
func TestWriteTextRangeToTheSecondAndChangeGrouped(t *testing.T) {
	at := time.Date(2024, 5, 1, 5, 3, 5, 0, time.UTC)
	r := &Report{Topic: "events", From: at, To: at.Add(45 * time.Second), Records: 10, Candidates: []CandidateReport{{Name: "a"}, {Name: "b"}},
		Diff: []TeamDiff{{Team: "t1", A: 0, B: 12227, Change: -12227}, {Team: "t2", A: 1500, B: 0, Change: 1500}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"from 2024-05-01 05:03:05Z to 2024-05-01 05:03:50Z", "-12,227", "+1,500"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, b.String())
		}
	}
}

// Two sets that limit alike but tag differently are not said to be alike without a word
// of their tags (a review read "limit every team alike" beside 15,460 more records tagged
// by one).
func TestWriteTextAlikeSaysTagsDiffer(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	r := &Report{Topic: "events", From: at, To: at.Add(time.Hour), Records: 20000,
		Candidates: []CandidateReport{{Name: "a", Total: Totals{Tagged: 15460}}, {Name: "b"}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "a and b limit every team alike; they tag differently: 15,460 and 0 records tagged"; !strings.Contains(b.String(), want) {
		t.Errorf("want %q:\n%s", want, b.String())
	}
}
