package main

import (
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/rules"
)

// describeRule shows a match list's values apart, as gate rules check does: joined as
// they were, in: ['a,b', c] read [a,b,c], three values where the rule has two, and a tab
// in one split the line.
func TestDescribeRuleShowsMatchValuesApart(t *testing.T) {
	body := "rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:10]\n" +
		"    match: [{field: json:event, in: ['x,y', z, \"t\\tu\", 'p] and json:q in [r']}]\n"
	set, err := rules.Parse("rules.yaml", []byte(body), rules.Options{MinWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := describeRule(set.Rules[0])
	if want := `where json:event in ["x,y",z,"t\tu","p] and json:q in [r"]`; !strings.Contains(got, want) {
		t.Errorf("describeRule: %s\nwant it to hold %s", got, want)
	}
}
