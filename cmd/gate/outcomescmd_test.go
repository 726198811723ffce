package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/outcome"
)

// gate outcomes reads the rows as a read_committed reader, each once, and prints a team's
// history and the most limited teams: a row written twice counts once, a row of an
// aborted transaction not at all, a row from before -since not at all.
func TestOutcomesCommand(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 2)
	now := time.Now().UTC().Truncate(time.Minute)
	row := func(at time.Time, id, team, key, rule, out, reason string, n int64) *kgo.Record {
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: id, Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
			Team: team, Key: key, Rule: rule, Outcome: out, Reason: reason, Records: n, Bytes: 100 * n}
		v := outcome.AppendJSON(nil, &r)
		return &kgo.Record{Topic: "outcomes", Key: []byte(team), Value: v, Timestamp: at.Add(30 * time.Second)}
	}
	m0, m1, m2 := now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-time.Minute)
	old := now.Add(-48 * time.Hour)
	committed := []*kgo.Record{
		row(old, "events/0/0-9", "42", "42", "", "accepted", "allowed", 1000), // before -since
		row(m0, "events/0/10-99", "42", "42", "", "accepted", "allowed", 500),
		row(m1, "events/0/100-199", "42", "42", "", "accepted", "allowed", 300),
		row(m1, "events/0/100-199", "42", "42:u1", "user", "overflow", "rate_limited", 200),
		row(m1, "events/0/100-199", "42", "42:u1", "user", "overflow", "rate_limited", 200), // written twice
		row(m2, "events/1/0-50", "42", "42", "merges", "topic:merges-slow", "rate_limited", 40),
		row(m2, "events/1/0-50", "42", "42", "watch", "shadow_over", "rate_limited", 7),
		row(m2, "events/1/0-50", "42", "", "", "dead_letter", "not_json", 3),
		row(m2, "events/1/0-50", "7", "7", "", "overflow", "forced", 9),
		row(m2, "events/1/0-50", "8", "8", "", "accepted", "allowed", 1),
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("outcomes-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	txn := func(recs []*kgo.Record, commit kgo.TransactionEndTry) {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(t.Context(), commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(committed, kgo.TryCommit)
	txn([]*kgo.Record{row(m2, "events/1/51-60", "42", "42:u2", "user", "overflow", "rate_limited", 1000)}, kgo.TryAbort)
	// A transaction still open at the end: its rows are not counted (as read_committed),
	// and the read ends all the same, its last offsets being that transaction's.
	open, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("outcomes-test-open"),
		kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	openRows := []*kgo.Record{row(m2, "g2/1/1", "42", "42:u3", "user", "overflow", "rate_limited", 1000), row(m2, "g2/1/1", "7", "7", "", "overflow", "forced", 1000)}
	if err := open.ProduceSync(t.Context(), openRows...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) string { return runOutcomes(t, env, args...) }
	got := run("42")
	for _, want := range []string{
		"team 42: 1,043 records from " + minute(m0) + " to " + minute(now),
		"limited from " + minute(m1) + " to " + minute(now) + ": 240 records (user overflow 200; merges topic:merges-slow 40)",
		minute(m1), "watch shadow_over 7",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gate outcomes 42 lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "1,000") || strings.Contains(got, minute(old)) {
		t.Errorf("gate outcomes 42 counts an aborted row or one from before -since:\n%s", got)
	}
	got = run("-top", "5")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "42 ") || !strings.HasPrefix(lines[3], "7 ") {
		t.Errorf("gate outcomes -top 5: want 42 then 7 (8 never limited):\n%s", got)
	}
	if got := run("nobody"); !strings.Contains(got, "team nobody: no outcomes") {
		t.Errorf("gate outcomes nobody:\n%s", got)
	}

	// -json: the same figures, under the field names docs/outcomes.md gives.
	decode := func(args ...string) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(run(args...)), &v); err != nil {
			t.Fatalf("gate outcomes %v: %v", args, err)
		}
		return v
	}
	h := decode("-json", "42")
	total, _ := h["total"].(map[string]any)
	ivs, _ := h["intervals"].([]any)
	if h["schema"] != 1.0 || h["topic"] != "outcomes" || h["team"] != "42" || total == nil || len(ivs) != 3 ||
		total["records"] != 1043.0 || total["limited"] != 240.0 || total["accepted"] != 800.0 || total["dead_letter"] != 3.0 || total["shadow_over"] != 7.0 ||
		h["first_limited"] != m1.Format(time.RFC3339) || h["last_limited"] != now.Format(time.RFC3339) || h["most_gates"] != 1.0 {
		t.Errorf("gate outcomes -json 42: %v", h)
	}
	if by, _ := total["by"].(map[string]any); by["user overflow"] != 200.0 || by["merges topic:merges-slow"] != 40.0 || by["watch shadow_over"] != 7.0 {
		t.Errorf("gate outcomes -json 42: total's by %v, want user overflow 200, merges topic:merges-slow 40, watch shadow_over 7", total["by"])
	}
	if iv, _ := ivs[1].(map[string]any); iv["start"] != m1.Format(time.RFC3339) || iv["end"] != m2.Format(time.RFC3339) || iv["limited"] != 200.0 || iv["accepted"] != 300.0 {
		t.Errorf("gate outcomes -json 42: second interval %v, want %s to %s, 300 accepted, 200 limited", ivs[1], minute(m1), minute(m2))
	}
	top := decode("-json", "-top", "5")
	teams, _ := top["teams"].([]any)
	if top["limited_teams"] != 2.0 || len(teams) != 2 {
		t.Fatalf("gate outcomes -json -top 5: %v, want teams 42 and 7 (8 never limited)", top)
	}
	if t42, _ := teams[0].(map[string]any); t42["team"] != "42" || t42["limited"] != 240.0 || t42["records"] != 1043.0 ||
		t42["limited_from"] != m1.Format(time.RFC3339) || t42["limited_until"] != now.Format(time.RFC3339) {
		t.Errorf("gate outcomes -json -top 5: first team %v", teams[0])
	} else if by, _ := t42["limited_by"].(map[string]any); len(by) != 2 || by["user overflow"] != 200.0 || by["merges topic:merges-slow"] != 40.0 {
		t.Errorf("gate outcomes -json -top 5: team 42 limited by %v, want user overflow 200 and merges topic:merges-slow 40 alone", t42["limited_by"])
	}
	if n := decode("-json", "nobody"); n["total"] != nil || n["intervals"] == nil || len(n["intervals"].([]any)) != 0 {
		t.Errorf("gate outcomes -json nobody: %v, want no total and no intervals", n)
	}
}

// -since D shows every interval that ends after D ago whole, the one D ago falls in too,
// though some of its rows were sealed before D ago; an interval that ended before is left
// out, and so is one that began before the read could see all of its rows. Records
// skipped as undeliverable are their own column, not limited. GATE_OUTCOMES_INTERVAL 1h.
func TestOutcomesSinceWholeIntervals(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	env["GATE_OUTCOMES_TOPIC"], env["GATE_OUTCOMES_INTERVAL"] = "outcomes", "1h"
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(t.Context(), 1, 1, nil, "outcomes"); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 15, 20, 0, 0, time.UTC) // -since 1h: from 14:20
	h := func(hh, mm int) time.Time { return time.Date(2026, 11, 28, hh, mm, 0, 0, time.UTC) }
	row := func(start time.Time, length time.Duration, sealed time.Time, out, reason string, n int64) *kgo.Record {
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/r/" + sealed.Format("1504") + out, Gate: "g1", IntervalStart: start,
			IntervalEnd: start.Add(length), Team: "42", Key: "42", Outcome: out, Reason: reason, Records: n}
		return &kgo.Record{Topic: "outcomes", Key: []byte("42"), Value: outcome.AppendJSON(nil, &r), Timestamp: sealed}
	}
	cl := kafkaClient(t, c)
	if err := cl.ProduceSync(t.Context(),
		row(h(13, 0), time.Hour, h(13, 59), "accepted", "allowed", 1),   // ended before from
		row(h(12, 0), 3*time.Hour, h(13, 30), "accepted", "allowed", 2), // began before the read: partly unseen
		row(h(14, 0), time.Hour, h(14, 10), "accepted", "allowed", 100), // sealed before from, its interval after
		row(h(14, 0), time.Hour, h(14, 30), "accepted", "allowed", 50),
		row(h(15, 0), time.Hour, h(15, 10), "accepted", "allowed", 7),
		row(h(15, 0), time.Hour, h(15, 11), "dropped", "undeliverable", 4),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{"-since", "1h", "42"}, getenvFrom(env), nil, clock.NewFake(now), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	got := stdout.String()
	for _, want := range []string{
		"team 42: 161 records from " + minute(h(14, 0)) + " to " + minute(h(16, 0)),
		"never limited",
		"SKIPPED",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gate outcomes -since 1h 42 lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, minute(h(13, 0))) || strings.Contains(got, minute(h(12, 0))) {
		t.Errorf("gate outcomes -since 1h 42 shows an interval that ended before 14:20, or one it saw only part of:\n%s", got)
	}
	// The one it saw part of is said: GATE_OUTCOMES_INTERVAL here is shorter than the
	// gate's that wrote it (support's shell at the default, the gates at 1h, say).
	if want := "gate outcomes: left out 1 row of intervals up to 3h long, longer than GATE_OUTCOMES_INTERVAL here (1h), which began before the read could see all their rows"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}

	// -since as a time and -until: the intervals that end after the one and begin before
	// the other, the one -until falls in whole; -since in days reads a day back.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-since", "2026-11-28T14:20:00Z", "-until", "2026-11-28T15:00:00Z", "42"}, "team 42: 150 records from " + minute(h(14, 0)) + " to " + minute(h(15, 0))},
		{[]string{"-since", "2026-11-28T14:20:00Z", "-until", "10m", "42"}, "team 42: 161 records from " + minute(h(14, 0)) + " to " + minute(h(16, 0))},
		{[]string{"-since", "1d", "42"}, "team 42: 164 records from " + minute(h(12, 0)) + " to " + minute(h(16, 0))},
		{[]string{"-since", "0d90m", "-until", "2026-11-28T14:59:59Z"}, "no team limited in outcomes from " + minute(h(13, 50)) + " to 2026-11-28 14:59:59Z"},
	} {
		stdout.Reset()
		stderr.Reset()
		if err := outcomesCmd(ctx, c.args, getenvFrom(env), nil, clock.NewFake(now), &stdout, &stderr); err != nil {
			t.Fatalf("gate outcomes %q: %v\n%s", c.args, err, stderr.String())
		}
		if !strings.Contains(stdout.String(), c.want) {
			t.Errorf("gate outcomes %q lacks %q:\n%s", c.args, c.want, stdout.String())
		}
	}
}

// -since and -until take a time or a duration before now, in days too, and are refused
// with a usage error that says what is wanted when they name no instant, or no span.
func TestOutcomesSinceUntilRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 15, 20, 0, 0, time.UTC)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-since", "7x"}, `-since "7x": want a time (RFC 3339, 2026-11-27T14:00:00Z) or a duration before now (24h, 7d)`},
		{[]string{"-since", "d"}, `-since "d": want a time`},
		{[]string{"-since", "1d-1h"}, `-since "1d-1h": want a time`},
		{[]string{"-since", ""}, "-since is empty"},
		{[]string{"-since", "0s"}, "-since 0s: want a positive duration before now"},
		{[]string{"-since", "2026-11-29T00:00:00Z"}, "is 2026-11-29 00:00:00Z, not before now (2026-11-28 15:20:00Z)"},
		{[]string{"-since", "1h", "-until", "2h"}, "-until 2h (2026-11-28 13:20:00Z) is not after -since 1h (2026-11-28 14:20:00Z)"},
		{[]string{"-until", "tuesday"}, `-until "tuesday": want a time`},
	} {
		var stdout, stderr bytes.Buffer
		err := outcomesCmd(t.Context(), c.args, func(string) string { return "" }, nil, clock.NewFake(now), &stdout, &stderr)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gate outcomes %q: error %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// A team whose id holds ':' (or '%') is one team to gate outcomes, though its rows name it
// two ways: as the events have it ("a:b") where a rule keyed by the team alone decided
// (accepted), as a composite key's first field escapes it ("a%3Ab", docs/outcomes.md)
// where a per-user rule limited it, each the Kafka key of its rows (two partitions here).
// Its history has both, and so has its line among the most limited.
func TestOutcomesTeamEscapedInCompositeKey(t *testing.T) {
	t.Parallel()
	const parts = 4
	c, env := outcomesTopicEnv(t, parts)
	raw, escaped := "a:b", "a%3Ab"
	p := kgo.StickyKeyPartitioner(nil).ForTopic("outcomes")
	if p.Partition(&kgo.Record{Key: []byte(raw)}, parts) == p.Partition(&kgo.Record{Key: []byte(escaped)}, parts) {
		t.Fatalf("%q and %q share a partition of %d: the test needs them apart", raw, escaped, parts)
	}
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	produceRows(t, c,
		testRow(at, raw, raw, "", "accepted", "allowed", 100),
		testRow(at, escaped, escaped+":u%3A1", "user", "overflow", "rate_limited", 30),
		testRow(at, "7", "7", "", "overflow", "rate_limited", 20),
	)
	run := func(args ...string) string { return runOutcomes(t, env, args...) }
	got := run(raw)
	for _, want := range []string{"team a:b: 130 records", "limited from " + minute(at) + " to " + minute(at.Add(time.Minute)) + ": 30 records (user overflow 30)"} {
		if !strings.Contains(got, want) {
			t.Errorf("gate outcomes %s lacks %q:\n%s", raw, want, got)
		}
	}
	got = run("-top", "5")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "a:b ") || !strings.Contains(lines[2], " 130 ") || !strings.HasPrefix(lines[3], "7 ") {
		t.Errorf("gate outcomes -top 5: want a:b (130 records, 30 limited) then 7:\n%s", got)
	}
}

// TestOutcomesTopNamesFoldedRows: the rows of keys folded past GATE_OUTCOMES_MAX_ROWS,
// and of records no key could be read from, have no team; -top lists their limited
// records under "(no key)", not under a blank name that reads as a misprinted team.
func TestOutcomesTopNamesFoldedRows(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	folded := testRow(at, "", "", "", "overflow", "rate_limited", 50)
	var r outcome.Row
	if err := json.Unmarshal(folded.Value, &r); err != nil {
		t.Fatal(err)
	}
	r.Folded = true
	folded.Value = outcome.AppendJSON(nil, &r)
	produceRows(t, c, folded, testRow(at, "7", "7", "", "overflow", "rate_limited", 20))
	lines := strings.Split(strings.TrimSpace(runOutcomes(t, env, "-top", "5")), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], outcome.NoKey+" ") || !strings.Contains(lines[2], " 50 ") || !strings.HasPrefix(lines[3], "7 ") {
		t.Errorf("gate outcomes -top 5: want %s (50 limited) then 7:\n%s", outcome.NoKey, strings.Join(lines, "\n"))
	}
}

// TestOutcomesNoKeyHistory: -top lists the rows of no team as "(no key)", and
// `gate outcomes '(no key)'` is their history. It read the partition "(no key)" would
// be keyed to and found nothing there: rows of no team are keyed by none, spread over
// every partition (the gates' folded rows), and a folded row is theirs, not another
// team's left out.
func TestOutcomesNoKeyHistory(t *testing.T) {
	t.Parallel()
	const parts = 4
	c, env := outcomesTopicEnv(t, parts)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	var recs []*kgo.Record
	for p, n := range []int64{30, 20} { // folded rows in two partitions, as gates spread them
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/" + strconv.Itoa(p), Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
			Outcome: "overflow", Reason: "rate_limited", Records: n, Folded: true}
		recs = append(recs, &kgo.Record{Topic: "outcomes", Partition: int32(p), Value: outcome.AppendJSON(nil, &r)})
	}
	unread := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/9", Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
		Outcome: "dead_letter", Reason: "not_json", Records: 5}
	recs = append(recs, &kgo.Record{Topic: "outcomes", Partition: 3, Value: outcome.AppendJSON(nil, &unread)})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A team whose id is "(no key)" is listed with them by -top, and read with them.
	produceRows(t, c, testRow(at, "7", "7", "", "overflow", "rate_limited", 20), testRow(at, outcome.NoKey, outcome.NoKey, "", "accepted", "allowed", 1))

	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{outcome.NoKey}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes %q: %v\n%s", outcome.NoKey, err, stderr.String())
	}
	got := stdout.String()
	for _, want := range []string{"team " + outcome.NoKey + ": 56 records", "50 records (overflow 50)"} {
		if !strings.Contains(got, want) {
			t.Errorf("gate outcomes %q lacks %q:\n%s", outcome.NoKey, want, got)
		}
	}
	if strings.Contains(stderr.String(), "folded") {
		t.Errorf("gate outcomes %q called its own rows another team's folded ones:\n%s", outcome.NoKey, stderr.String())
	}
}

// A team's records the gates folded (keys past GATE_OUTCOMES_MAX_ROWS) are in rows that
// name no team, and not in its history: gate outcomes TEAM says how many it saw in the
// intervals shown, where it said nothing and support read a team whose overflow was all
// folded as never limited. A folded row of an interval before -since is not counted.
func TestOutcomesTeamSaysRecordsWereFolded(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	folded := func(at time.Time, n int64) *kgo.Record {
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/" + strconv.FormatInt(n, 10), Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
			Outcome: "overflow", Reason: "rate_limited", Records: n, Folded: true}
		return &kgo.Record{Topic: "outcomes", Value: outcome.AppendJSON(nil, &r)}
	}
	produceRows(t, c, testRow(at, "42", "42", "", "accepted", "allowed", 100), folded(at, 1234), folded(at.Add(-48*time.Hour), 7))
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{"42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes 42: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "team 42: 100 records") || !strings.Contains(stdout.String(), "never limited") {
		t.Errorf("gate outcomes 42: want its 100 records, never limited:\n%s", stdout.String())
	}
	// -top lists limited teams only: the folded rows are (no key) there when they hold
	// limited records (it said "counts them all", and a reviewer found none listed).
	if got := stderr.String(); !strings.Contains(got, "1,234 records") || !strings.Contains(got, "folded") || !strings.Contains(got, "the limited ones among them as "+outcome.NoKey) {
		t.Errorf("gate outcomes 42 said nothing of the 1,234 records folded in its intervals:\n%s", got)
	}
	// -json says the same on stderr, stdout one JSON object a script can read whole.
	stdout.Reset()
	stderr.Reset()
	if err := outcomesCmd(ctx, []string{"-json", "42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes -json 42: %v\n%s", err, stderr.String())
	}
	var h map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &h); err != nil || h["team"] != "42" {
		t.Errorf("gate outcomes -json 42: %v; stdout:\n%s", err, stdout.String())
	}
	if got := stderr.String(); !strings.Contains(got, "1,234 records") || !strings.Contains(got, "folded") {
		t.Errorf("gate outcomes -json 42 said nothing on stderr of the 1,234 records folded in its intervals:\n%s", got)
	}
}

// outcomesTopicEnv is a broker with an outcomes topic of parts partitions and the
// environment that names it.
func outcomesTopicEnv(t *testing.T, parts int32) (*kfake.Cluster, map[string]string) {
	t.Helper()
	c, env := kafkaEnv(t)
	env["GATE_OUTCOMES_TOPIC"] = "outcomes"
	cl := kafkaClient(t, c)
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), parts, 1, nil, "outcomes"); err != nil {
		t.Fatal(err)
	}
	return c, env
}

// testRow is an outcome row of the interval from at, as a gate writes it, keyed by its
// team.
func testRow(at time.Time, team, key, rule, out, reason string, n int64) *kgo.Record {
	r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/1", Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
		Team: team, Key: key, Rule: rule, Outcome: out, Reason: reason, Records: n}
	return &kgo.Record{Topic: "outcomes", Key: []byte(team), Value: outcome.AppendJSON(nil, &r)}
}

func produceRows(t *testing.T, c *kfake.Cluster, rows ...*kgo.Record) {
	t.Helper()
	cl := kafkaClient(t, c)
	if err := cl.ProduceSync(t.Context(), rows...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// runOutcomes runs gate outcomes with args in env and returns what it printed.
func runOutcomes(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, args, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// A team is whatever bytes an event carried: one holding a terminal escape sequence or a
// tab is printed quoted, so that it neither reaches the terminal nor breaks the table's
// columns (as gate replay's report, gate team and gate overrides list print it).
func TestOutcomesTopQuotesOddTeams(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	const evil, tab = "evil\x1b]0;pwned\x07", "tab\tteam"
	produceRows(t, c, testRow(at, evil, evil, "", "overflow", "rate_limited", 30), testRow(at, tab, tab, "", "overflow", "rate_limited", 20))
	out := runOutcomes(t, env, "-top", "5")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if strings.ContainsAny(out, "\x1b\x07\t") || len(lines) != 4 ||
		!strings.HasPrefix(lines[2], strconv.Quote(evil)+" ") || !strings.HasPrefix(lines[3], strconv.Quote(tab)+" ") {
		t.Errorf("gate outcomes -top 5: want both teams quoted, one a line:\n%q", out)
	}
}

// -since reaching back before 1970 (a large D, "all of it") reads every row: Kafka takes a
// negative timestamp for a special offset or refuses it (UNSUPPORTED_VERSION), so the read
// asks from the epoch, no row being older.
func TestOutcomesSinceBeforeUnixEpoch(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 2)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	produceRows(t, c, testRow(at, "42", "42", "", "overflow", "rate_limited", 30))
	if got := runOutcomes(t, env, "-since", "600000h", "42"); !strings.Contains(got, "team 42: 30 records") {
		t.Errorf("gate outcomes -since 600000h 42:\n%s", got)
	}
	if got := runOutcomes(t, env, "-since", "600000h"); !strings.Contains(got, "\n42 ") {
		t.Errorf("gate outcomes -since 600000h:\n%s", got)
	}
}

// gate outcomes gives up after outcomesLimit, a limit of its own: the error says so and
// that a later -since reads less, not only "context deadline exceeded". Here the broker
// holds every fetch, as a read of a long -since on a busy topic takes long.
func TestOutcomesGivesUpNamingItsLimit(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	produceRows(t, c, testRow(time.Now().UTC().Truncate(time.Minute), "42", "42", "", "overflow", "rate_limited", 1))
	release := make(chan struct{})
	defer close(release)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	const limit, since = 300 * time.Millisecond, 24 * time.Hour
	start := time.Now()
	_, err := scanOutcomes(t.Context(), limit, "24h", "outcomes", start.Add(-since), "", func(*outcome.Row) {}, kgo.SeedBrokers(env["GATE_KAFKA_BROKERS"]))
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("gave up after %v, want about %v", took, limit)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the limit's deadline", err)
	}
	for _, want := range []string{"gate outcomes gave up after 300ms, its own limit", "-since 24h of outcomes", "later -since"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Rows that retention deletes after gate outcomes looked up where to read and before it
// read them are named on stderr, offsets and partition, and the rest is printed: the
// command neither waits for them (it did, until its 5-minute limit, when every row before
// the end went) nor leaves them out without a word.
func TestOutcomesSaysWhichRowsRetentionDeleted(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	var rows []*kgo.Record
	for range 4 {
		rows = append(rows, testRow(at, "42", "42", "", "overflow", "rate_limited", 10))
	}
	for i := range rows {
		var r outcome.Row
		if err := json.Unmarshal(rows[i].Value, &r); err != nil {
			t.Fatal(err)
		}
		r.ID = "g1/1-x/" + strconv.Itoa(i) // four seals, four rows
		rows[i].Value = outcome.AppendJSON(nil, &r)
	}
	produceRows(t, c, rows...)
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		c.SleepControl(func() {
			to := kadm.Offsets{}
			to.Add(kadm.Offset{Topic: "outcomes", Partition: 0, At: 3})
			if _, err := kadm.NewClient(adm).DeleteRecords(t.Context(), to); err != nil {
				t.Errorf("deleting records: %v", err)
			}
		})
		return nil, nil, false
	})
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{"42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes 42: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "team 42: 10 records") {
		t.Errorf("gate outcomes 42: want the row retention left:\n%s", stdout.String())
	}
	if want := "offsets 0 to 2 of outcomes partition 0 were deleted (retention)"; !strings.Contains(stderr.String(), want) {
		t.Errorf("gate outcomes 42: stderr lacks %q:\n%s", want, stderr.String())
	}
}

// A -since older than what retention kept of the outcomes topic is said on stderr: the
// partition, and when its oldest row left is from. Without it, "team 42: no outcomes in
// outcomes since ..." reads as a team that was never limited then, when its rows of then
// were deleted.
func TestOutcomesSaysRetentionDeletedSinceRows(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	now := time.Now().UTC().Truncate(time.Minute)
	old, kept := testRow(now.Add(-3*time.Hour), "42", "42", "", "overflow", "rate_limited", 500), testRow(now.Add(-time.Hour), "7", "7", "", "accepted", "allowed", 1)
	old.Timestamp, kept.Timestamp = now.Add(-3*time.Hour), now.Add(-time.Hour)
	produceRows(t, c, old, kept)
	cl := kafkaClient(t, c)
	to := kadm.Offsets{}
	to.Add(kadm.Offset{Topic: "outcomes", Partition: 0, At: 1})
	if _, err := kadm.NewClient(cl).DeleteRecords(t.Context(), to); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{"-since", "4h", "42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes -since 4h 42: %v\n%s", err, stderr.String())
	}
	if want := "outcomes partition 0 holds rows from " + minute(now.Add(-time.Hour)) + " on, retention having deleted those before"; !strings.Contains(stderr.String(), want) {
		t.Errorf("gate outcomes -since 4h 42: stderr lacks %q:\nstdout:\n%sstderr:\n%s", want, stdout.String(), stderr.String())
	}
}

// -top says when it lists fewer teams than were limited, and how many were: a team that
// limited as many records as the last one listed is left out by its name, and before
// nothing said so ("the 2 teams with the most records limited", three limited).
func TestOutcomesTopSaysWhatItLeavesOut(t *testing.T) {
	at := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	s := outcome.NewSummaries()
	for _, team := range []string{"a", "b", "c"} {
		s.Add(&outcome.Row{Team: team, Key: team, Outcome: "overflow", Reason: "rate_limited", Records: 5,
			IntervalStart: at, IntervalEnd: at.Add(time.Minute)})
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{2, "the 2 teams with the most records limited, of 3 limited, in outcomes since 2026-11-28 14:00:00Z (-top 3 lists them all)\n"},
		{3, "the 3 teams limited in outcomes since 2026-11-28 14:00:00Z, most records limited first\n"},
	} {
		var b strings.Builder
		if err := printMostLimited(&b, s.Top(c.n), s.Limited(), s.Rows(), "outcomes", "since "+minute(at)); err != nil {
			t.Fatal(err)
		}
		if head, _, _ := strings.Cut(b.String(), "TEAM"); head != c.want {
			t.Errorf("-top %d heading %q, want %q", c.n, head, c.want)
		}
	}
	// One team limited: not "the 1 teams limited" (a review's).
	one := outcome.NewSummaries()
	one.Add(&outcome.Row{Team: "a", Key: "a", Outcome: "overflow", Reason: "rate_limited", Records: 5, IntervalStart: at, IntervalEnd: at.Add(time.Minute)})
	var b strings.Builder
	if err := printMostLimited(&b, one.Top(5), one.Limited(), one.Rows(), "outcomes", "since "+minute(at)); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(b.String(), "TEAM"); head != "the one team limited in outcomes since 2026-11-28 14:00:00Z\n" {
		t.Errorf("one team limited: heading %q", head)
	}
}

// -top's RECORDS is the sum of the columns beside it: records a gate skipped as
// undeliverable have a column of their own, as in a team's history (they were in
// RECORDS alone, and a team's figures did not add up).
func TestOutcomesTopColumnsAddUp(t *testing.T) {
	at := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	s := outcome.NewSummaries()
	for _, r := range []outcome.Row{
		{Outcome: "accepted", Records: 1000},
		{Outcome: "overflow", Reason: "rate_limited", Records: 20},
		{Outcome: "dead_letter", Reason: "not_json", Records: 2},
		{Outcome: "dropped", Reason: "undeliverable", Records: 3},
	} {
		r.Team, r.Key, r.IntervalStart, r.IntervalEnd = "42", "42", at, at.Add(time.Minute)
		s.Add(&r)
	}
	var b strings.Builder
	if err := printMostLimited(&b, s.Top(1), s.Limited(), s.Rows(), "outcomes", "since "+minute(at)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "SKIPPED") || !strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "42 1,025 1,000 20 2 3 ") {
		t.Errorf("gate outcomes -top:\n%s\nwant 42's 1,025 records as 1,000 accepted, 20 limited, 2 dead letters and 3 skipped", b.String())
	}
}

// gate outcomes TEAM sums the team's rows into its intervals as it reads them: a busy
// team has a row from every gate at every seal (a second at least once, a tenth of one
// exactly once: millions a day), and holding them all before summing them took some 800
// bytes a row, gigabytes for a day of such a team, where its history is a line an
// interval. Not parallel: it measures the heap, with the collector set to run often.
func TestOutcomesTeamHistoryHoldsIntervalsNotRows(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations are not the command's (make test runs it without)")
	}
	c, env := outcomesTopicEnv(t, 1)
	// Bytes a row the read may hold: Scan's note of each row, and the fetches buffered
	// (some 150 in all here; holding the rows, 650 to 860).
	const n, perRow = 100_000, 300
	at := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	// Uncompressed, as a fetch's bytes are then its records' (a fetch is some 1 MB a
	// partition, what the read buffers whatever the rows it has read).
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("outcomes"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	for i := range n {
		start, gate := at.Add(time.Duration(i%30)*time.Minute), "gate-"+strconv.Itoa(i%10)
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: gate + "/1764338400000-9f3a61c2/" + strconv.Itoa(i), Gate: gate,
			IntervalStart: start, IntervalEnd: start.Add(time.Minute), Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed",
			Records: 1, Bytes: 100, Threshold: 5000, ThresholdSource: "static"}
		recs = append(recs, &kgo.Record{Key: []byte("42"), Value: outcome.AppendJSON(nil, &r), Timestamp: start.Add(time.Second)})
		if len(recs) == 10_000 {
			if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	// The heap's high mark while the command runs, over what it was before: the
	// collector running at a tenth more than what is live, what is live.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	err := outcomesCmd(ctx, []string{"-since", "1h", "42"}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatalf("gate outcomes 42: %v\n%s", err, stderr.String())
	}
	if want := "team 42: 100,000 records from " + minute(at) + " to " + minute(at.Add(30*time.Minute)) + " (gates: at most 1 an interval, 10 names in all)"; !strings.Contains(stdout.String(), want) {
		t.Errorf("gate outcomes 42 lacks %q:\n%s", want, stdout.String())
	}
	if held := float64(peak-base) / n; held > perRow {
		t.Errorf("gate outcomes 42 held %.0f bytes a row of the team's %d (%.1f MB), want at most %d", held, n, float64(peak-base)/(1<<20), perRow)
	}
}

// gate outcomes with a GATE_OUTCOMES_TOPIC the cluster does not have says so, naming the
// variable, rather than the broker's UNKNOWN_TOPIC_OR_PARTITION.
func TestOutcomesTopicMissingSaysSo(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	env["GATE_OUTCOMES_TOPIC"] = "nope"
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"outcomes", "-top", "5"}, testHost(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "reading nope (GATE_OUTCOMES_TOPIC's): listing the partitions of nope: the topic does not exist") {
		t.Errorf("gate outcomes with a missing topic: %v; want it to name GATE_OUTCOMES_TOPIC and say the topic does not exist", err)
	}
}

// TestOutcomesTeamFindsFoldedRowsInTheirPartition: the gates key the rows of no team
// (folded past GATE_OUTCOMES_MAX_ROWS) by the empty key, so they sit in that key's
// partition, and gate outcomes TEAM reads it beside the team's: a team whose records were
// all folded is told of them, not "no outcomes" alone. A review's team of 200 records,
// all folded into rows of other partitions than its own, read "no outcomes" without a
// word.
func TestOutcomesTeamFindsFoldedRowsInTheirPartition(t *testing.T) {
	t.Parallel()
	const parts = 4
	c, env := outcomesTopicEnv(t, parts)
	partOf := func(key []byte) int {
		return kgo.StickyKeyPartitioner(nil).ForTopic("outcomes").Partition(&kgo.Record{Key: key}, parts)
	}
	team := ""
	for i := 0; team == ""; i++ {
		if k := "late-" + strconv.Itoa(i); partOf([]byte(k)) != partOf([]byte{}) {
			team = k
		}
	}
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/1", Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
		Outcome: "accepted", Reason: "allowed", Records: 200, Folded: true}
	produceRows(t, c, &kgo.Record{Topic: "outcomes", Key: []byte{}, Value: outcome.AppendJSON(nil, &r)})
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{team}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes %s: %v\n%s", team, err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "no outcomes") || !strings.Contains(stderr.String(), "at least 200 records") {
		t.Errorf("gate outcomes %s (partition %d; folded rows in %d): want no outcomes of its own and the 200 folded records said:\n%s%s",
			team, partOf([]byte(team)), partOf([]byte{}), stdout.String(), stderr.String())
	}
}

// TestOutcomesSaysOneAsOne: a figure of 1 takes the singular ("1 record", "the team with
// the most records limited", where a review read "1 records" and "the 1 teams"), and -top
// heads the limited span's columns as the history says it: LIMITED FROM the first limited
// interval's start, UNTIL the last one's end.
func TestOutcomesSaysOneAsOne(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	produceRows(t, c, testRow(at, "7", "7", "team", "overflow", "rate_limited", 1), testRow(at, "8", "8", "team", "overflow", "rate_limited", 5))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"7"}, []string{"team 7: 1 record from", ": 1 record (team overflow 1)"}},
		{[]string{"-top", "1"}, []string{"the team with the most records limited, of 2 limited", "LIMITED FROM", "LIMITED UNTIL", minute(at.Add(time.Minute))}},
	} {
		out := runOutcomes(t, env, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("gate outcomes %v: want %q in\n%s", tc.args, w, out)
			}
		}
	}
}

// A broker that takes connections and never answers left gate outcomes silent for as
// long as the client's retries took (40 s in a review's), where gate replay says after
// brokerWait that it waits: gate outcomes says so too, naming the brokers.
func TestOutcomesSaysItWaitsForSilentBrokers(t *testing.T) {
	t.Parallel()
	stop, _ := saysItWaitsForSilentBrokers(t, map[string]string{"GATE_OUTCOMES_TOPIC": "outcomes"}, "outcomes", "42")
	stop()
}

// The history's first line counts the gates that wrote a team's rows at once, and says
// how many names wrote them in all when that is more: a rollout's pods write under new
// names, and "gates: 4" of a fleet of 2 sent support looking for gates that never ran.
func TestOutcomesHistoryCountsGatesAtOnce(t *testing.T) {
	t.Parallel()
	h0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	row := func(i int, gate string) outcome.Row {
		at := h0.Add(time.Duration(i) * time.Minute)
		return outcome.Row{Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Gate: gate, IntervalStart: at, IntervalEnd: at.Add(time.Minute), Records: 1}
	}
	for _, c := range []struct {
		rows []outcome.Row
		want string
	}{
		{[]outcome.Row{row(0, "a"), row(0, "b"), row(1, "c"), row(1, "d")}, "(gates: at most 2 an interval, 4 names in all)"},
		{[]outcome.Row{row(0, "a"), row(0, "b"), row(1, "a"), row(1, "b")}, "(gates: 2)"},
	} {
		var out bytes.Buffer
		if err := printHistory(&out, outcome.TeamHistory(c.rows, "42"), "outcomes", "since 1h"); err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(out.String(), "\n"); !strings.HasSuffix(first, c.want) {
			t.Errorf("first line %q, want it to end %q", first, c.want)
		}
	}
}

// Intervals of a fraction of a second (GATE_OUTCOMES_INTERVAL=1.5s, which divides an
// hour) print their starts with the fraction: a history of two such intervals printed
// both as 14:00:01Z, as the span's end (a review).
func TestOutcomesHistoryPrintsIntervalsBetweenSeconds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	iv := func(i int) outcome.Interval {
		start := t0.Add(time.Duration(i) * 1500 * time.Millisecond)
		return outcome.Interval{Start: start, End: start.Add(1500 * time.Millisecond), Accepted: 10, Limited: 2, By: map[string]int64{"user overflow": 2}}
	}
	h := outcome.History{Team: "42", Intervals: []outcome.Interval{iv(1), iv(2)}, Gates: []string{"g1"}, MostGates: 1,
		FirstLimited: iv(1).Start, LastLimited: iv(2).End}
	h.Total = outcome.Interval{Start: iv(1).Start, End: iv(2).End, Accepted: 20, Limited: 4, By: map[string]int64{"user overflow": 4}}
	var b strings.Builder
	if err := printHistory(&b, h, "outcomes", "since x"); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"from 2026-11-28 14:00:01.5Z to 2026-11-28 14:00:04.5Z",
		"limited from 2026-11-28 14:00:01.5Z to 2026-11-28 14:00:04.5Z",
		"\n2026-11-28 14:00:01.5Z ", "\n2026-11-28 14:00:03Z ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("history of 1.5s intervals lacks %q:\n%s", want, got)
		}
	}
}

// A team's history needs its own partitions only; the partition of the rows of no team
// (the folded rows', keyed by the empty key) is read beside them for the folded records.
// When that partition's leader dies mid-read (its broker down, no replica to take over),
// the history is printed all the same, exit status 0, and stderr names the partition
// not read whole, as when it cannot be listed at the start: the command failed whole,
// "reading outcomes partition 1: nothing fetched for 10s and its offsets cannot be
// listed", though the team's partition was read to its end.
func TestOutcomesTeamReadsOnWhenTheNoTeamPartitionDiesMidRead(t *testing.T) {
	t.Parallel() // it waits out the read's stall, 10 s, on a cluster of its own
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p := range int32(2) {
		if err := c.MoveTopicPartition("outcomes", p, p); err != nil { // partition p led by broker p
			t.Fatal(err)
		}
	}
	partOf := func(key []byte) int32 {
		return int32(kgo.StickyKeyPartitioner(nil).ForTopic("outcomes").Partition(&kgo.Record{Key: key}, 2))
	}
	noTeam := partOf([]byte{})
	team := ""
	for i := 0; team == ""; i++ {
		if k := "t" + strconv.Itoa(i); partOf([]byte(k)) != noTeam {
			team = k
		}
	}
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	own := testRow(at, team, team, "", "accepted", "allowed", 100)
	own.Partition = 1 - noTeam
	cl := kafkaClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(t.Context(), own).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Folded rows, each a batch of its own, more than one fetch of 1 KiB takes.
	for i := range 40 {
		r := outcome.Row{Schema: outcome.SchemaVersion, ID: "g1/1-x/" + strconv.Itoa(i), Gate: "g1", IntervalStart: at, IntervalEnd: at.Add(time.Minute),
			Outcome: "overflow", Reason: "rate_limited", Records: 1, Folded: true}
		rec := &kgo.Record{Topic: "outcomes", Partition: noTeam, Key: []byte{}, Value: outcome.AppendJSON(nil, &r)}
		if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// The no-team partition's broker answers its first three fetches (some of its rows
	// read), then nothing: its fetches and listings fail as a dead broker's connection does.
	var fetches atomic.Int32
	var down atomic.Bool
	gone := func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() == noTeam && down.Load() {
			return nil, errors.New("broker down"), true
		}
		return nil, nil, false
	}
	c.ControlKey(int16(kmsg.ListOffsets), gone)
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if c.CurrentNode() == noTeam && fetches.Add(1) > 3 {
			down.Store(true)
		}
		return gone(r)
	})
	env := map[string]string{"GATE_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "GATE_OUTCOMES_TOPIC": "outcomes",
		"GATE_KAFKA_FETCH_MAX_BYTES": "1024"}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := outcomesCmd(ctx, []string{team}, getenvFrom(env), nil, clock.Real{}, &stdout, &stderr); err != nil {
		t.Fatalf("gate outcomes %s (partition %d) with the no-team partition %d dead mid-read: %v\n%s", team, 1-noTeam, noTeam, err, stderr.String())
	}
	t.Logf("gate outcomes %s:\n%s%s", team, stdout.String(), stderr.String())
	if !strings.Contains(stdout.String(), "team "+team+": 100 records") {
		t.Errorf("gate outcomes %s: want its 100 records:\n%s", team, stdout.String())
	}
	if got := stderr.String(); !strings.Contains(got, "the rows of no team were not read whole") || !strings.Contains(got, "outcomes partition "+strconv.Itoa(int(noTeam))) {
		t.Errorf("gate outcomes %s: want stderr naming partition %d, the rows of no team not read whole:\n%s", team, noTeam, got)
	}
	// The folded rows read before the broker died are counted still.
	if got := stderr.String(); !regexp.MustCompile(`at least [1-9]\d* records? of the intervals .* (were|was) folded`).MatchString(got) {
		t.Errorf("gate outcomes %s: want the folded records read before the stop said:\n%s", team, got)
	}
}
