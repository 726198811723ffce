package rules

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fieldRow is a row of docs/rules.md's Fields table: its first cell, a field in backquotes.
var fieldRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")

// TestDocsFieldsTableIsTheRuleFields: docs/rules.md's Fields table lists every field a
// rule takes, and only those, in the order an unknown field's message lists them
// (ruleFields: "in the order the docs list them"). The message listed track last, the
// table before max_keys and on_cardinality.
func TestDocsFieldsTableIsTheRuleFields(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Fields\n")
	if !ok {
		t.Fatal("docs/rules.md has no ## Fields section")
	}
	table, _, _ = strings.Cut(table, "\n\n| field")
	var listed []string
	for _, m := range fieldRow.FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	if !slices.Equal(listed, ruleFields) {
		t.Errorf("docs/rules.md's Fields table lists %v; a rule takes %v, in the order an unknown field's message gives them", listed, ruleFields)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:t, limits: [1m:1], nope: 1}\n"), Options{})
	if want := "(want one of " + strings.Join(listed, ", ") + ")"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an unknown field: %v; want it to say %s", err, want)
	}
}

// TestOutcomesFilingNamesEnforcedRules: how OutcomesFiling says the outcome rows' team was
// chosen, for gate rules check and the rules in use line, is how route.TeamField chooses
// it (docs/rules.md: "the first field of the first enforced rule's composite key ..., else
// of the first enforced rule without a match"). A shadow rule keyed json:ip+ua listed
// first is passed over for the team rule's json:team_id; the text said "the first field
// of the first composite key", which is json:ip there.
func TestOutcomesFilingNamesEnforcedRules(t *testing.T) {
	set, err := Parse("rules.yaml", []byte("rules:\n"+
		"  - {name: ipua, key: json:ip+ua, limits: [1m:1000], shadow: true}\n"+
		"  - {name: team, key: json:team_id, limits: [1m:1000]}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	team, how, apart := set.OutcomesFiling()
	if team.String() != "json:team_id" || len(apart) != 1 || apart[0] != "ipua" {
		t.Fatalf("team %s, rows apart %v; want json:team_id, ipua's apart", team, apart)
	}
	if want := "the first field of the first enforced rule's composite key, else of the first enforced rule without a match"; !strings.Contains(how, want) {
		t.Errorf("how the team was chosen: %q; want it to say %q", how, want)
	}
}
