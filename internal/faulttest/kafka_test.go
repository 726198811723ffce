package faulttest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGateNeedsAsDocumented: GateNeeds.ACLs grants what docs/operations.md's table "What
// the gate needs from the cluster" lists, row by row, so that the tests that build a
// cluster with ACLs from it (and leave one out to see the gate name it) test the
// documented set. An operation a row gives for another command (`gate outcomes`,
// `gate replay`) is not the gate's.
func TestGateNeedsAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	n := GateNeeds{Input: "in", Group: "group", Outputs: []string{"out"}, TransactionalID: "txn"}
	granted := map[kmsg.ACLResourceType]map[string][]string{}
	for _, a := range n.ACLs() {
		if granted[a.Resource] == nil {
			granted[a.Resource] = map[string][]string{}
		}
		granted[a.Resource][a.Name] = append(granted[a.Resource][a.Name], a.Operation.String())
	}
	rows := []struct {
		first string // the row's first cell, or its start
		res   kmsg.ACLResourceType
		name  string
	}{
		{"`GATE_INPUT_TOPIC`", kmsg.ACLResourceTypeTopic, "in"},
		{"`GATE_ACCEPTED_TOPIC`, `GATE_OVERFLOW_TOPIC`, `GATE_DEAD_LETTER_TOPIC`", kmsg.ACLResourceTypeTopic, "out"},
		{"`GATE_OUTCOMES_TOPIC`, when set", kmsg.ACLResourceTypeTopic, "out"},
		{"each enforced rule's own topic", kmsg.ACLResourceTypeTopic, "out"},
		{"group `GATE_GROUP_ID`", kmsg.ACLResourceTypeGroup, "group"},
		{"cluster", kmsg.ACLResourceTypeCluster, "kafka-cluster"},
		{"transactional id (`GATE_DELIVERY=exactly-once`)", kmsg.ACLResourceTypeTransactionalId, "txn"},
	}
	// The section's table: the ACL operations cell of each row, by its first cell
	// ("| first | needs | ACL operations |").
	_, section, _ := strings.Cut(string(doc), "### What the gate needs from the cluster\n")
	ops := map[string]string{}
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		body, ok := strings.CutPrefix(line, "|")
		if !ok {
			if inTable {
				break // the table ended
			}
			continue
		}
		inTable = true
		if cells := strings.Split(strings.TrimSuffix(body, "|"), "|"); len(cells) == 3 {
			ops[strings.TrimSpace(cells[0])] = cells[2]
		}
	}
	other := regexp.MustCompile("\\([^)]*for `gate [^)]*\\)")
	op := regexp.MustCompile("`([A-Z_]+)`")
	for _, r := range rows {
		cell, ok := ops[r.first]
		for first, c := range ops {
			if !ok && strings.HasPrefix(first, r.first+" (") { // a row whose first cell goes on
				cell, ok = c, true
			}
		}
		if !ok {
			t.Errorf("docs/operations.md: no row %q in the table of what the gate needs", r.first)
			continue
		}
		var documented []string
		for _, m := range op.FindAllStringSubmatch(other.ReplaceAllString(cell, ""), -1) {
			documented = append(documented, m[1])
		}
		got := slices.Clone(granted[r.res][r.name])
		slices.Sort(got)
		slices.Sort(documented)
		if !slices.Equal(got, documented) {
			t.Errorf("row %q: GateNeeds.ACLs grants %v, the docs list %v", r.first, got, documented)
		}
	}
}
