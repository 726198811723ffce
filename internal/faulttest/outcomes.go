package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/outcome"
)

// Tally is records by team and outcome (an outcome row's Team and Outcome).
type Tally map[string]map[string]int64

func (t Tally) add(team, kind string, n int64) {
	if t[team] == nil {
		t[team] = map[string]int64{}
	}
	t[team][kind] += n
}

// Total is the records of team, every outcome.
func (t Tally) Total(team string) int64 {
	var n int64
	for _, c := range t[team] {
		n += c
	}
	return n
}

// OutputTally tallies the distinct test records (IDHeader) among outputs by team (the
// value's team_id; "" for a value that is no JSON object with one, as the gate's outcome
// row of a dead letter has it) and outcome, kinds giving each output topic's outcome
// (accepted, overflow, dead_letter). A record on the outputs twice (at least once, routed
// again after a crash) counts once, under its first copy's topic: known by its IDHeader,
// or, on a dead letter the gate stripped of its headers, by the input position it names
// (gate-source, as Check finds it); one with neither counts each time.
func OutputTally(outputs []*kgo.Record, kinds map[string]string) Tally {
	t := Tally{}
	seen := map[string]bool{}
	for _, r := range outputs {
		key, ok := Header(r, IDHeader)
		if !ok {
			if src, has := Header(r, sourceHeader); has {
				key, ok = sourceHeader+"="+src, true
			}
		}
		if ok && seen[key] {
			continue
		}
		seen[key] = ok
		var v struct {
			Team string `json:"team_id"`
		}
		team := ""
		if json.Unmarshal(r.Value, &v) == nil {
			team = v.Team
		}
		t.add(team, kinds[r.Topic], 1)
	}
	return t
}

// RowTally tallies the records outcome rows count by team and outcome, shadow_over rows
// left out: they are beside a record's own outcome, not one.
func RowTally(rows []outcome.Row) Tally {
	t := Tally{}
	for _, r := range rows {
		if r.Outcome != "shadow_over" {
			t.add(r.Team, r.Outcome, r.Records)
		}
	}
	return t
}

// Differences lists, sorted, each team and outcome whose count differs between got (the
// outcome rows') and want (the output topics'), of every team and outcome either has.
func Differences(got, want Tally) []string {
	var out []string
	seen := map[[2]string]bool{}
	for _, m := range []Tally{want, got} {
		for team, kinds := range m {
			for kind := range kinds {
				if k := [2]string{team, kind}; !seen[k] {
					seen[k] = true
					if g, w := got[team][kind], want[team][kind]; g != w {
						out = append(out, fmt.Sprintf("team %q %s: outcomes count %d, the output topics hold %d", team, kind, g, w))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// ReadRows reads the outcome rows of topic written in the last hour, as a read_committed
// reader (gate outcomes) has them (outcome.Scan), opts the reading client's (brokers,
// TLS, SASL). It fails the test on an error or a record that is no row of this schema.
func ReadRows(t testing.TB, topic string, opts ...kgo.Opt) []outcome.Row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows []outcome.Row
	read, err := outcome.Scan(ctx, topic, time.Now().Add(-time.Hour), "", func(r *outcome.Row) { rows = append(rows, *r) }, opts...)
	if err != nil || read.Skipped > 0 {
		t.Fatalf("reading the outcomes of %s: %v (%d records skipped)", topic, err, read.Skipped)
	}
	return rows
}
