package rules

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// teamCase is a line of deploy/helm/testdata/rulesteam-cases.txt: a rules file's team:
// and whether the gate takes it.
type teamCase struct {
	value string
	taken bool
}

// readTeamCases reads the cases the chart's rulesTeam check is tested with.
func readTeamCases(t *testing.T) []teamCase {
	t.Helper()
	f, err := os.Open("../../deploy/helm/testdata/rulesteam-cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []teamCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verdict, quoted, ok := strings.Cut(line, "\t")
		v, err := strconv.Unquote(quoted)
		if !ok || err != nil || verdict != "taken" && verdict != "refused" {
			t.Fatalf("rulesteam-cases.txt: %q: want taken or refused, a tab, a quoted value", line)
		}
		out = append(out, teamCase{v, verdict == "taken"})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRulesTeamCasesAsTheChartHasThem: the gate takes a rules file's team: exactly as the
// cases the chart's rulesTeam check is tested with say (deploy/helm TestRulesTeamChecked):
// the chart's check, a pattern, refused header:x-team+id, a header the gate reads, and
// rendered json:a..b and "json:team_id " for gates that refuse them (a review).
func TestRulesTeamCasesAsTheChartHasThem(t *testing.T) {
	cases := readTeamCases(t)
	if len(cases) < 10 {
		t.Fatalf("%d cases: the file is not what the test reads", len(cases))
	}
	for _, tc := range cases {
		file := "team: " + strconv.Quote(tc.value) + "\nrules:\n  - {name: team, key: json:team_id, limits: ['1m:10']}\n"
		_, err := Parse("rules.yaml", []byte(file), Options{})
		if taken := err == nil; taken != tc.taken {
			t.Errorf("team: %q: the gate takes it %v (%v), rulesteam-cases.txt says %v", tc.value, taken, err, tc.taken)
		}
	}
}
