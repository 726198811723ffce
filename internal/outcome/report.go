package outcome

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/keypart"
)

// Limited reports whether an outcome keeps a record from the accepted topic for its
// limit: overflow, a rule's topic or dropped. A tagged record is accepted; a dead letter
// is not about its limit.
func Limited(outcome string) bool {
	return outcome == "overflow" || outcome == "dropped" || strings.HasPrefix(outcome, "topic:")
}

// limitedRow reports whether r's records were kept from the accepted topic by a limit: a
// record GATE_ON_UNDELIVERABLE=skip skipped (dropped, reason undeliverable) was not.
func limitedRow(r *Row) bool { return Limited(r.Outcome) && !skippedRow(r) }

func skippedRow(r *Row) bool { return r.Outcome == "dropped" && r.Reason == "undeliverable" }

// Interval is one interval of a team's history: its records by outcome, summed over the
// rows (gates, partitions, seals) that counted them.
type Interval struct {
	Start, End time.Time
	// Accepted counts tagged records too; Tagged is those of them with a tag. Skipped is
	// the records GATE_ON_UNDELIVERABLE=skip skipped: neither limited nor dead-lettered.
	Accepted, Tagged, Limited, DeadLetter, Skipped, ShadowOver int64
	// By is what limited or tagged the records, "RULE OUTCOME" (no rule: the gate's
	// GATE_LIMITS), shadow rules over, "RULE shadow_over", and in a dry run what would have
	// limited the records accepted, "RULE dry_run": records each.
	By map[string]int64
}

// Records is every record the interval counts once: accepted (tagged ones among them),
// limited, dead-lettered or skipped. Shadow rules' counts are of records counted already.
func (iv *Interval) Records() int64 { return iv.Accepted + iv.Limited + iv.DeadLetter + iv.Skipped }

// History is a team's outcomes over time.
type History struct {
	Team      string
	Intervals []Interval // by start, only those with records
	Total     Interval   // the sums; Start and End the first and last interval's
	// FirstLimited and LastLimited are the first interval with a limited record's start
	// and the last one's end; zero when none was.
	FirstLimited, LastLimited time.Time
	// Gates are the names of the gates that wrote the rows, over the whole range; MostGates
	// is the most that wrote rows of intervals holding one instant (mostAtOnce: gates of
	// another GATE_OUTCOMES_INTERVAL write other bounds). A gate's name is its host's, and a pod
	// replaced (a rollout, a restart elsewhere) writes under a new one: over a day Gates can
	// list several times the gates that ever ran at once.
	Gates     []string
	MostGates int
}

// TeamNames returns the names a team's rows give it (Row.Team): the team as the events
// have it, in the rows of a rule keyed by the team alone (and of the records it
// accepted), and, for a team holding ':' or '%', the team as a composite key's first field
// escapes it, in the rows of a rule keyed by the team and more fields. A team holding
// neither has one name. Each is as a row reads back (asEncoded): a byte that is not UTF-8
// is U+FFFD in a row's team and its Kafka key (MergeAsEncoded), so "t\xff" (a binary
// record key, as gate team quotes it) would otherwise match none of its rows.
func TeamNames(team string) []string {
	team = asEncoded(team)
	if esc := keypart.Escape(team); esc != team {
		return []string{team, esc}
	}
	return []string{team}
}

// TeamOf returns the team a row's Team names, a composite key's escapes read back, so
// that a team's rows are one team's whichever rule wrote them (TeamNames' inverse). A
// team keyed alone whose id holds an escape itself ("a%3Ab") is taken for the team it
// would escape ("a:b"): the row does not say which it is. Any other '%' is the team's own
// ("acme%20inc", keyed alone): only what keypart.Escape writes is read back.
func TeamOf(rowTeam string) string { return keypart.Value(rowTeam) }

// TeamHistory sums rows of team (by any of its TeamNames) into its history.
func TeamHistory(rows []Row, team string) History {
	s := NewTeamSum(team)
	for i := range rows {
		s.Add(&rows[i])
	}
	return s.History()
}

// TeamSum sums one team's rows into its history as they are read (Scan), without holding
// the rows: its state is an Interval per interval the team has rows in, and its gates. A
// busy team has a row from every gate at every seal (each second at least once, each
// tenth of one exactly once), millions a day, where its history is one line an interval.
type TeamSum struct {
	team    string
	names   []string
	byStart map[span]*Interval
	gates   map[string]int32 // each gate's index, in the order met
	ivGates map[span][]int32 // the gates of each interval, by index
}

// span is an interval's bounds in Unix ns.
type span struct{ start, end int64 }

// NewTeamSum returns team's empty TeamSum. NoKey's sums the rows Summaries lists under
// it: those of no team, and of a team whose id is NoKey.
func NewTeamSum(team string) *TeamSum {
	names := TeamNames(team)
	if team == NoKey {
		names = append(names, "")
	}
	return &TeamSum{team: team, names: names, byStart: map[span]*Interval{}, gates: map[string]int32{}, ivGates: map[span][]int32{}}
}

// Of reports whether r is a row of the team (by any of its TeamNames): one Add counts.
func (s *TeamSum) Of(r *Row) bool { return slices.Contains(s.names, r.Team) }

// Add counts r in its interval if it is a row of the team (by any of its TeamNames).
func (s *TeamSum) Add(r *Row) {
	if !s.Of(r) {
		return
	}
	g, ok := s.gates[r.Gate]
	if !ok {
		g = int32(len(s.gates))
		s.gates[r.Gate] = g
	}
	k := span{r.IntervalStart.UnixNano(), r.IntervalEnd.UnixNano()}
	if gs := s.ivGates[k]; !slices.Contains(gs, g) {
		s.ivGates[k] = append(gs, g)
	}
	iv := s.byStart[k]
	if iv == nil {
		iv = &Interval{Start: r.IntervalStart, End: r.IntervalEnd, By: map[string]int64{}}
		s.byStart[k] = iv
	}
	iv.add(r)
}

// History is the team's history from the rows added.
func (s *TeamSum) History() History {
	h := History{Team: s.team}
	for _, iv := range s.byStart {
		h.Intervals = append(h.Intervals, *iv)
	}
	slices.SortFunc(h.Intervals, func(a, b Interval) int { return cmp.Or(a.Start.Compare(b.Start), a.End.Compare(b.End)) })
	h.Total.By = map[string]int64{}
	for i, iv := range h.Intervals {
		if i == 0 {
			h.Total.Start = iv.Start
		}
		if iv.End.After(h.Total.End) {
			h.Total.End = iv.End
		}
		h.Total.Accepted += iv.Accepted
		h.Total.Tagged += iv.Tagged
		h.Total.Limited += iv.Limited
		h.Total.DeadLetter += iv.DeadLetter
		h.Total.Skipped += iv.Skipped
		h.Total.ShadowOver += iv.ShadowOver
		for k, n := range iv.By {
			h.Total.By[k] += n
		}
		if iv.Limited > 0 {
			if h.FirstLimited.IsZero() {
				h.FirstLimited = iv.Start
			}
			if iv.End.After(h.LastLimited) {
				h.LastLimited = iv.End
			}
		}
	}
	h.Gates = slices.Sorted(maps.Keys(s.gates))
	h.MostGates = mostAtOnce(s.ivGates)
	return h
}

// mostAtOnce is the most gates that wrote rows of intervals holding one instant, from
// each interval's gates: at the start of each interval, those of every interval then
// running. Not of one interval alone: gates of another GATE_OUTCOMES_INTERVAL (a rollout
// changing it) write intervals of other bounds, and a fleet of 4 split so read 2.
func mostAtOnce(ivGates map[span][]int32) int {
	spans := slices.SortedFunc(maps.Keys(ivGates), func(a, b span) int { return cmp.Compare(a.start, b.start) })
	most := 0
	var running []span // the intervals begun and not ended at the instant looked at
	seen := map[int32]struct{}{}
	for _, sp := range spans {
		running = slices.DeleteFunc(running, func(r span) bool { return r.end <= sp.start })
		running = append(running, sp)
		clear(seen)
		for _, r := range running {
			for _, g := range ivGates[r] {
				seen[g] = struct{}{}
			}
		}
		most = max(most, len(seen))
	}
	return most
}

func (iv *Interval) add(r *Row) {
	by := strings.TrimSpace(r.Rule + " " + r.Outcome)
	switch {
	case r.Outcome == "accepted":
		iv.Accepted += r.Records
		if r.Reason == reasonDryRun {
			// A dry run's record enforcement would have sent elsewhere: accepted, and
			// said in BY as "RULE dry_run" (a review read "never limited" with no sign
			// that a dry run would have limited the team).
			iv.By[strings.TrimSpace(r.Rule+" "+reasonDryRun)] += r.Records
		}
	case r.Outcome == "tagged":
		iv.Accepted += r.Records
		iv.Tagged += r.Records
		iv.By[by] += r.Records
	case r.Outcome == "dead_letter":
		iv.DeadLetter += r.Records
	case skippedRow(r):
		iv.Skipped += r.Records
	case r.Outcome == "shadow_over":
		iv.ShadowOver += r.Records
		iv.By[by] += r.Records
	case Limited(r.Outcome):
		iv.Limited += r.Records
		iv.By[by] += r.Records
	}
}

// reasonDryRun is a dry run's reason for a record enforcement would have sent elsewhere
// (route.ReasonDryRun).
const reasonDryRun = "dry_run"

// ByString is By as one line, most records first: "user overflow 1,200; merges topic:slow 40".
func (iv *Interval) ByString() string { return iv.by(func(string) bool { return true }) }

// LimitedBy is ByString of what limited the records only (no tags, no shadow rules).
func (iv *Interval) LimitedBy() string {
	return iv.by(limitedKey)
}

// limitedByCounts is LimitedBy's counts, a map of its own.
func (iv *Interval) limitedByCounts() map[string]int64 {
	m := map[string]int64{}
	for k, n := range iv.By {
		if limitedKey(k) {
			m[k] = n
		}
	}
	return m
}

// limitedKey reports whether By's key k ("RULE OUTCOME") names an outcome that limits.
func limitedKey(k string) bool { return Limited(k[strings.LastIndexByte(k, ' ')+1:]) }

func (iv *Interval) by(keep func(string) bool) string {
	var keys []string
	for k := range iv.By {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(iv.By[b], iv.By[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %s", k, Thousands(iv.By[k]))
	}
	return strings.Join(parts, "; ")
}

// Summary is one team's totals, for the most limited teams.
type Summary struct {
	Team                                            string
	Records, Accepted, Limited, DeadLetter, Skipped int64 // Records the sum of the others
	FirstLimited, LastLimited                       time.Time
	// LimitedBy is its records by what limited them, "RULE OUTCOME" (Interval.By's
	// limiting keys).
	LimitedBy map[string]int64
}

// By is what limited the team, as a history's line says it (Interval.LimitedBy).
func (s *Summary) By() string {
	iv := Interval{By: s.LimitedBy}
	return iv.ByString()
}

// Summaries sums rows into each team's totals as they are read (Scan), for the most
// limited teams without holding the rows: a team's state is its totals and the bounds of
// its limited intervals, whatever its rows.
type Summaries struct {
	teams map[string]*teamTotals
	rows  int
}

type teamTotals struct {
	total                     Interval
	firstLimited, lastLimited time.Time
}

// NewSummaries returns empty Summaries.
func NewSummaries() *Summaries { return &Summaries{teams: map[string]*teamTotals{}} }

// NoKey is the team Summaries list the rows of no team under: the keys folded once
// GATE_OUTCOMES_MAX_ROWS was reached, and records no key could be read from.
const NoKey = "(no key)"

// Add counts r in its team's totals (TeamOf its Team; NoKey's for a row of no team).
func (s *Summaries) Add(r *Row) {
	s.rows++
	team := TeamOf(r.Team)
	if team == "" {
		team = NoKey
	}
	t := s.teams[team]
	if t == nil {
		t = &teamTotals{total: Interval{By: map[string]int64{}}}
		s.teams[team] = t
	}
	t.total.add(r)
	// As TeamHistory's: the first interval with a limited record's start, the last one's
	// end.
	if limitedRow(r) && r.Records > 0 {
		if t.firstLimited.IsZero() || r.IntervalStart.Before(t.firstLimited) {
			t.firstLimited = r.IntervalStart
		}
		if r.IntervalEnd.After(t.lastLimited) {
			t.lastLimited = r.IntervalEnd
		}
	}
}

// Rows is how many rows were added.
func (s *Summaries) Rows() int { return s.rows }

// Limited is how many teams were limited: Top's list when n is at least that.
func (s *Summaries) Limited() int {
	n := 0
	for _, t := range s.teams {
		if !t.firstLimited.IsZero() {
			n++
		}
	}
	return n
}

// Top returns the n teams with the most limited records (ties by team), each with its
// totals; teams never limited are left out.
func (s *Summaries) Top(n int) []Summary {
	var out []Summary
	for team, t := range s.teams {
		if t.firstLimited.IsZero() {
			continue
		}
		tt := t.total
		out = append(out, Summary{Team: team, Records: tt.Records(), Accepted: tt.Accepted, Limited: tt.Limited,
			DeadLetter: tt.DeadLetter, Skipped: tt.Skipped, FirstLimited: t.firstLimited, LastLimited: t.lastLimited,
			LimitedBy: tt.limitedByCounts()})
	}
	slices.SortFunc(out, func(a, b Summary) int { return cmp.Or(cmp.Compare(b.Limited, a.Limited), cmp.Compare(a.Team, b.Team)) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Thousands writes n with commas: 1234567 is 1,234,567.
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
