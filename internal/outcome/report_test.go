package outcome

import (
	"testing"
	"time"
)

// A history of rows of different intervals (GATE_OUTCOMES_INTERVAL changed while gates rolled)
// ends, and was last limited, where its latest interval ends, as the summary says.
func TestHistoryMixedIntervals(t *testing.T) {
	h0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	rows := []Row{
		// gate A, hourly rows: limited from 14:00 to 15:00
		{Team: "42", Key: "42", Outcome: "overflow", Reason: "rate_limited", Gate: "a", IntervalStart: h0, IntervalEnd: h0.Add(time.Hour), Records: 10},
		// gate B, minute rows: limited in 14:30-14:31
		{Team: "42", Key: "42", Outcome: "overflow", Reason: "rate_limited", Gate: "b", IntervalStart: h0.Add(30 * time.Minute), IntervalEnd: h0.Add(31 * time.Minute), Records: 1},
	}
	h := TeamHistory(rows, "42")
	s := NewSummaries()
	for i := range rows {
		s.Add(&rows[i])
	}
	top := s.Top(1)
	if !h.LastLimited.Equal(h0.Add(time.Hour)) {
		t.Errorf("TeamHistory LastLimited %s, want %s (the hourly row's end); Summaries says %s",
			h.LastLimited.Format(time.TimeOnly), h0.Add(time.Hour).Format(time.TimeOnly), top[0].LastLimited.Format(time.TimeOnly))
	}
	if !h.Total.End.Equal(h0.Add(time.Hour)) {
		t.Errorf("TeamHistory Total.End %s, want %s", h.Total.End.Format(time.TimeOnly), h0.Add(time.Hour).Format(time.TimeOnly))
	}
}

// Records GATE_ON_UNDELIVERABLE=skip skipped (dropped, undeliverable) are counted as
// skipped, not limited: a team never limited is not said to be, nor listed among the most
// limited.
func TestUndeliverableIsNotLimited(t *testing.T) {
	h0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	rows := []Row{
		{Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Gate: "a", IntervalStart: h0, IntervalEnd: h0.Add(time.Minute), Records: 10},
		{Team: "42", Key: "42", Outcome: "dropped", Reason: "undeliverable", Gate: "a", IntervalStart: h0, IntervalEnd: h0.Add(time.Minute), Records: 3},
	}
	h := TeamHistory(rows, "42")
	if !h.FirstLimited.IsZero() || h.Total.Limited != 0 {
		t.Errorf("team 42 reported limited from %s, %d records (%s); its records were skipped as undeliverable, not limited",
			h.FirstLimited.Format(time.TimeOnly), h.Total.Limited, h.Total.LimitedBy())
	}
	s := NewSummaries()
	for i := range rows {
		s.Add(&rows[i])
	}
	if top := s.Top(10); len(top) != 0 {
		t.Errorf("gate outcomes -top lists %+v as limited", top)
	}
}

// TeamOf reads back only what TeamNames escapes: a team keyed alone whose id holds a
// '%' that is not an escape of ':' or '%' ("acme%20inc", "%41") is that team, not the
// team URL decoding makes of it ("acme inc", "A"), which gate outcomes would then list
// its records under, beside another team's.
func TestTeamOfOnlyReadsKeyEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"42": "42", "a%3Ab": "a:b", "100%25": "100%", "a%3Ab%25c": "a:b%c",
		"acme%20inc": "acme%20inc", "%41": "%41", "a%2Fb": "a%2Fb", "a%3ab": "a%3ab", "100%": "100%",
	} {
		if got := TeamOf(in); got != want {
			t.Errorf("TeamOf(%q) = %q, want %q", in, got, want)
		}
	}
	s := NewSummaries()
	for _, team := range []string{"A", "%41"} {
		s.Add(&Row{Team: team, Key: team, Outcome: "overflow", Reason: "rate_limited", Records: 1,
			IntervalStart: t0, IntervalEnd: t0.Add(time.Minute)})
	}
	if top := s.Top(10); len(top) != 2 {
		t.Errorf("-top of teams A and %%41: %+v, want two teams of 1 record each", top)
	}
}

// A dry run's records that enforcement would have sent elsewhere (accepted, reason
// dry_run) are accepted, not limited, and said in BY as "RULE dry_run", where a team a
// dry run would have limited read "never limited" with no sign of it (a review).
func TestDryRunSaysWhatWouldHaveLimited(t *testing.T) {
	h0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	rows := []Row{
		{Team: "dr", Key: "dr", Outcome: "accepted", Reason: "allowed", Gate: "a", IntervalStart: h0, IntervalEnd: h0.Add(time.Minute), Records: 240},
		{Team: "dr", Key: "dr:u1", Rule: "user", Outcome: "accepted", Reason: "dry_run", Gate: "a", IntervalStart: h0, IntervalEnd: h0.Add(time.Minute), Records: 60},
	}
	h := TeamHistory(rows, "dr")
	if h.Total.Accepted != 300 || h.Total.Limited != 0 || !h.FirstLimited.IsZero() {
		t.Errorf("dry run: accepted %d, limited %d (from %s), want 300 accepted, none limited", h.Total.Accepted, h.Total.Limited, h.FirstLimited)
	}
	if got := h.Intervals[0].ByString(); got != "user dry_run 60" {
		t.Errorf("BY %q, want %q", got, "user dry_run 60")
	}
	if got := h.Total.LimitedBy(); got != "" {
		t.Errorf("limited by %q, want nothing", got)
	}
}

// A team's gates are counted as they ran at once (MostGates), beside every name that wrote
// its rows over the range (Gates): a rollout's pods take new names, and the names alone
// made a fleet of 2 read as 4.
func TestHistoryCountsGatesAtOnce(t *testing.T) {
	h0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	var rows []Row
	for i, gates := range [][]string{{"gate-a", "gate-b"}, {"gate-a", "gate-c"}, {"gate-c", "gate-d"}} {
		at := h0.Add(time.Duration(i) * time.Minute)
		for _, g := range gates {
			for range 2 { // two rows of a gate in one interval count it once
				rows = append(rows, Row{Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Gate: g, IntervalStart: at, IntervalEnd: at.Add(time.Minute), Records: 1})
			}
		}
	}
	h := TeamHistory(rows, "42")
	if len(h.Gates) != 4 || h.MostGates != 2 {
		t.Errorf("gates %v, at most %d in an interval; want 4 names, at most 2", h.Gates, h.MostGates)
	}
	// A rollout from GATE_OUTCOMES_INTERVAL 60s to 30s: two gates write minutes, two
	// half minutes, all four at once. Counted by the intervals of one set of bounds alone,
	// the fleet read 2.
	rows = nil
	for m := range 3 {
		at := h0.Add(time.Duration(m) * time.Minute)
		for _, g := range []string{"gate-a", "gate-b"} {
			rows = append(rows, Row{Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Gate: g, IntervalStart: at, IntervalEnd: at.Add(time.Minute), Records: 1})
		}
		for half := range 2 {
			from := at.Add(time.Duration(half) * 30 * time.Second)
			for _, g := range []string{"gate-c", "gate-d"} {
				rows = append(rows, Row{Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Gate: g, IntervalStart: from, IntervalEnd: from.Add(30 * time.Second), Records: 1})
			}
		}
	}
	if h := TeamHistory(rows, "42"); h.MostGates != 4 {
		t.Errorf("two gates writing minutes and two half minutes: at most %d at once, want 4", h.MostGates)
	}
}
