package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/outcome"
)

// rowOf is an outcome row of iv's length starting at at, keyed by its team, sealed ten
// seconds into it.
func rowOf(at time.Time, id, gate, team, key, out, reason string, n int64, iv time.Duration) *kgo.Record {
	r := outcome.Row{Schema: outcome.SchemaVersion, ID: id, Gate: gate, IntervalStart: at, IntervalEnd: at.Add(iv),
		Team: team, Key: key, Outcome: out, Reason: reason, Records: n}
	return &kgo.Record{Topic: "outcomes", Key: []byte(team), Value: outcome.AppendJSON(nil, &r), Timestamp: at.Add(10 * time.Second)}
}

// gate outcomes '(no key)' says it left rows out only of its own: another team's row of an
// hourly interval begun before the read (a gate with GATE_OUTCOMES_INTERVAL=1h) is none of
// its history, and said it was short (a review).
func TestOutcomesLeftOutCountsOnlyTheTeamsRows(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 2)
	now := time.Now().UTC().Truncate(time.Minute)
	hour := now.Add(-time.Hour).Truncate(time.Hour)
	hourly := rowOf(hour, "g9/1/1", "g9", "42", "42", "overflow", "rate_limited", 5, time.Hour)
	hourly.Timestamp = now.Add(-time.Minute)
	produceRows(t, c, hourly, rowOf(now.Add(-2*time.Minute), "g1/1/1", "g1", "", "", "overflow", "rate_limited", 9, time.Minute))
	since := hour.Add(30 * time.Minute).Format(time.RFC3339)
	for _, who := range []string{"(no key)", "7"} {
		var stdout, stderr bytes.Buffer
		if err := outcomesCmd(context.Background(), []string{"-since", since, who}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stderr.String(), "left out") {
			t.Errorf("gate outcomes %s says it left out rows, all of them team 42's:\n%s", who, stderr.String())
		}
	}
	// Team 42's own hourly row is said.
	var stdout, stderr bytes.Buffer
	if err := outcomesCmd(context.Background(), []string{"-since", since, "42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "left out 1 row") {
		t.Errorf("gate outcomes 42 does not say its hourly row was left out:\n%s", stderr.String())
	}
}

// A team's history holding intervals of two lengths (a rollout that changed
// GATE_OUTCOMES_INTERVAL) says each one's length: the 14:00 minute and the 14:00 hour
// printed alike (a review).
func TestHistoryIntervalsOfOneStartTellApart(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	rows := []outcome.Row{
		{Schema: 1, ID: "old/1/1", Gate: "old", IntervalStart: t0, IntervalEnd: t0.Add(time.Minute), Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 100},
		{Schema: 1, ID: "new/1/1", Gate: "new", IntervalStart: t0, IntervalEnd: t0.Add(time.Hour), Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 5000},
	}
	var b bytes.Buffer
	if err := printHistory(&b, outcome.TeamHistory(rows, "42"), "outcomes", "since x"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"14:00:00Z +1m ", "14:00:00Z +1h "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("history without %q:\n%s", want, b.String())
		}
	}
}

// A gate whose clock stepped back just after it routed a record seals that record's row
// with a timestamp (its clock's) a little before the row's interval began. gate outcomes
// -since finds rows by their timestamps: an interval it shows whole must hold such a row
// too, not read short by it (before, it read from one interval before -since, which the
// row's timestamp is before).
func TestOutcomesSinceFindsRowsSealedAsTheClockSteppedBack(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	iv := time.Date(2026, 11, 28, 14, 59, 0, 0, time.UTC) // the interval [14:59, 15:00)
	stepped := rowOf(iv, "g1/r/1", "g1", "42", "42", "accepted", "allowed", 5, time.Minute)
	stepped.Timestamp = iv.Add(-500 * time.Millisecond) // routed at 14:59:00.3, sealed after the clock stepped back 0.8 s
	produceRows(t, c, stepped, rowOf(iv, "g1/r/2", "g1", "42", "42", "accepted", "allowed", 10, time.Minute))
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	now := clock.NewFake(time.Date(2026, 11, 28, 15, 20, 0, 0, time.UTC))
	if err := outcomesCmd(ctx, []string{"-since", "2026-11-28T14:59:59.9Z", "42"}, getenvFrom(env), nil, now, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if want := "team 42: 15 records"; !strings.Contains(stdout.String(), want) {
		t.Errorf("gate outcomes lacks %q:\n%s%s", want, stdout.String(), stderr.String())
	}
}
