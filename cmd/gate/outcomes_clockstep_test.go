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

// A gate whose clock stepped back just after it routed a record seals that record's row
// with a timestamp (its clock's) a little before the row's interval began. gate outcomes
// -since finds rows by their timestamps, reading from one interval before -since: an
// interval shown whole must hold such a row too, not read short by it.
func TestOutcomesSinceFindsRowsSealedAsTheClockSteppedBack(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	iv := time.Date(2026, 11, 28, 14, 59, 0, 0, time.UTC) // the interval [14:59, 15:00)
	row := func(id string, sealed time.Time, n int64) *kgo.Record {
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: id, Gate: "g1", IntervalStart: iv, IntervalEnd: iv.Add(time.Minute),
			Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: n}
		return &kgo.Record{Topic: "outcomes", Key: []byte("42"), Value: outcome.AppendJSON(nil, &r), Timestamp: sealed}
	}
	cl := kafkaClient(t, c)
	if err := cl.ProduceSync(t.Context(),
		row("g1/r/1", iv.Add(-500*time.Millisecond), 5), // routed at 14:59:00.3, sealed after the clock stepped back 0.8 s
		row("g1/r/2", iv.Add(30*time.Second), 10),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 15, 20, 0, 0, time.UTC)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{"-since", "2026-11-28T14:59:59.9Z", "42"}, getenvFrom(env), nil, clock.NewFake(now), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// -since 14:59:59.9: the interval 14:59 is shown, whole, its rows read from 14:58:59.9
	// before the fix, which the first row's timestamp is before.
	if want := "team 42: 15 records"; !strings.Contains(stdout.String(), want) {
		t.Errorf("gate outcomes lacks %q:\n%s%s", want, stdout.String(), stderr.String())
	}
}
