package main

import (
	"encoding/json"
	"io"
	"time"

	"github.com/capturegate/gate/internal/outcome"
)

// outcomesJSONSchema is the version of gate outcomes -json's output (docs/outcomes.md):
// raised when a field changes meaning or goes, not when one is added.
const outcomesJSONSchema = 1

// jsonInterval is an outcome.Interval as gate outcomes -json prints it: the table's
// columns, and By's counts by "RULE OUTCOME".
type jsonInterval struct {
	Start      time.Time        `json:"start"`
	End        time.Time        `json:"end"`
	Records    int64            `json:"records"` // Interval.Records
	Accepted   int64            `json:"accepted"`
	Tagged     int64            `json:"tagged"`
	Limited    int64            `json:"limited"`
	DeadLetter int64            `json:"dead_letter"`
	Skipped    int64            `json:"skipped"`
	ShadowOver int64            `json:"shadow_over"`
	By         map[string]int64 `json:"by"`
}

func toJSONInterval(iv outcome.Interval) jsonInterval {
	by := iv.By
	if by == nil {
		by = map[string]int64{} // {} rather than null: a script reads by[...] alike
	}
	return jsonInterval{Start: iv.Start.UTC(), End: iv.End.UTC(), Records: iv.Records(),
		Accepted: iv.Accepted, Tagged: iv.Tagged, Limited: iv.Limited, DeadLetter: iv.DeadLetter, Skipped: iv.Skipped,
		ShadowOver: iv.ShadowOver, By: by}
}

// jsonHistory is a team's history as gate outcomes -json TEAM prints it.
type jsonHistory struct {
	Schema int       `json:"schema"`
	Topic  string    `json:"topic"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until,omitzero"` // -until, when given
	Team   string    `json:"team"`
	// Total sums the intervals; its start and end are the first's and the last's. A team
	// without outcomes in the range has no total and no intervals.
	Total        *jsonInterval  `json:"total,omitempty"`
	FirstLimited time.Time      `json:"first_limited,omitzero"` // the first limited interval's start
	LastLimited  time.Time      `json:"last_limited,omitzero"`  // the last limited interval's end
	Gates        []string       `json:"gates"`                  // every name that wrote the rows
	MostGates    int            `json:"most_gates"`             // the most that wrote rows of one interval
	Intervals    []jsonInterval `json:"intervals"`
}

func historyJSON(h outcome.History, topic string, since, until time.Time) jsonHistory {
	out := jsonHistory{Schema: outcomesJSONSchema, Topic: topic, Since: since.UTC(), Until: until.UTC(), Team: h.Team,
		FirstLimited: h.FirstLimited.UTC(), LastLimited: h.LastLimited.UTC(), Gates: h.Gates, MostGates: h.MostGates,
		Intervals: make([]jsonInterval, 0, len(h.Intervals))}
	if out.Gates == nil {
		out.Gates = []string{}
	}
	for _, iv := range h.Intervals {
		out.Intervals = append(out.Intervals, toJSONInterval(iv))
	}
	if len(h.Intervals) > 0 {
		t := toJSONInterval(h.Total)
		out.Total = &t
	}
	return out
}

// jsonTeam is a team of gate outcomes -json's most limited.
type jsonTeam struct {
	Team         string           `json:"team"`
	Records      int64            `json:"records"`
	Accepted     int64            `json:"accepted"`
	Limited      int64            `json:"limited"`
	DeadLetter   int64            `json:"dead_letter"`
	Skipped      int64            `json:"skipped"`
	LimitedFrom  time.Time        `json:"limited_from"`
	LimitedUntil time.Time        `json:"limited_until"`
	LimitedBy    map[string]int64 `json:"limited_by"`
}

// jsonMostLimited is gate outcomes -json without TEAM.
type jsonMostLimited struct {
	Schema       int        `json:"schema"`
	Topic        string     `json:"topic"`
	Since        time.Time  `json:"since"`
	Until        time.Time  `json:"until,omitzero"`
	Rows         int        `json:"rows"`          // the rows read
	LimitedTeams int        `json:"limited_teams"` // the teams limited, listed or not (-top)
	Top          []jsonTeam `json:"teams"`         // the -top most limited, most records limited first
}

func mostLimitedJSON(top []outcome.Summary, limited, rows int, topic string, since, until time.Time) jsonMostLimited {
	out := jsonMostLimited{Schema: outcomesJSONSchema, Topic: topic, Since: since.UTC(), Until: until.UTC(), Rows: rows, LimitedTeams: limited,
		Top: make([]jsonTeam, 0, len(top))}
	for _, s := range top {
		out.Top = append(out.Top, jsonTeam{Team: s.Team, Records: s.Records, Accepted: s.Accepted, Limited: s.Limited,
			DeadLetter: s.DeadLetter, Skipped: s.Skipped, LimitedFrom: s.FirstLimited.UTC(), LimitedUntil: s.LastLimited.UTC(),
			LimitedBy: s.LimitedBy})
	}
	return out
}

// printJSON writes v indented, a newline after it.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
