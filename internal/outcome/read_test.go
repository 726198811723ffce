package outcome

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Scan of one team reads only the partition its rows are keyed to and passes only its
// rows: what a Scan of every team passes of that team, each once, without reading the others' (a record
// that is no row elsewhere is not even seen). gate outcomes TEAM then holds one team's
// rows, not the topic's.
func TestScanOneTeam(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var recs []*kgo.Record
	for i := range 400 {
		team := "team-" + strconv.Itoa(i%20)
		r := Row{Schema: SchemaVersion, ID: "g/1/" + strconv.Itoa(i), Gate: "g", IntervalStart: start.Add(time.Duration(i%5) * time.Minute),
			Team: team, Key: team, Outcome: []string{"accepted", "overflow"}[i%2], Reason: "x", Records: int64(i)}
		r.IntervalEnd = r.IntervalStart.Add(time.Minute)
		rec := &kgo.Record{Key: []byte(team), Value: AppendJSON(nil, &r)}
		recs = append(recs, rec)
		if i%7 == 0 {
			recs = append(recs, &kgo.Record{Key: rec.Key, Value: rec.Value}) // written again
		}
	}
	team := "team-3"
	part := kgo.StickyKeyPartitioner(nil).ForTopic("outcomes").Partition(&kgo.Record{Key: []byte(team)}, 4)
	other := ""
	for i := 0; other == ""; i++ {
		if k := "x" + strconv.Itoa(i); kgo.StickyKeyPartitioner(nil).ForTopic("outcomes").Partition(&kgo.Record{Key: []byte(k)}, 4) != part {
			other = k
		}
	}
	recs = append(recs, &kgo.Record{Key: []byte(other), Value: []byte("not a row")})
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var all []Row
	skipped, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), "", func(r *Row) { all = append(all, *r) }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || skipped != 1 || len(all) != 400 {
		t.Fatalf("Scan of every team: %d rows, %d skipped, %v; want 400 and 1", len(all), skipped, err)
	}
	var want, got []string
	for _, r := range all {
		if r.Team == team {
			want = append(want, fmt.Sprint(r))
		}
	}
	skipped, err = Scan(t.Context(), "outcomes", start.Add(-time.Hour), team, func(r *Row) { got = append(got, fmt.Sprint(*r)) }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || skipped != 0 {
		t.Fatalf("Scan %s: %d skipped, %v; want 0 (the record that is no row is in another partition)", team, skipped, err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 20 || !slices.Equal(got, want) {
		t.Errorf("Scan %s passed %d rows, the Scan of every team %d of the team's", team, len(got), len(want))
	}
}

// Summaries, summing rows as they come, give what TeamHistory gives each team from all
// its rows: the totals, what limited it, its first and last limited interval.
func TestSummariesAreHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	outcomes := []string{"accepted", "tagged", "overflow", "topic:slow", "dropped", "dead_letter", "shadow_over"}
	var rows []Row
	for range 5000 {
		at := t0.Truncate(time.Minute).Add(time.Duration(rng.IntN(30)) * time.Minute)
		team := "t" + strconv.Itoa(rng.IntN(40))
		rows = append(rows, Row{Team: team, Key: team, Rule: []string{"", "user", "merges"}[rng.IntN(3)], Outcome: outcomes[rng.IntN(len(outcomes))],
			IntervalStart: at, IntervalEnd: at.Add(time.Minute), Records: int64(rng.IntN(3)), Gate: "g"})
	}
	s := NewSummaries()
	for i := range rows {
		s.Add(&rows[i])
	}
	top := s.Top(1000)
	if len(top) == 0 {
		t.Fatal("no team limited")
	}
	for _, sum := range top {
		h := TeamHistory(rows, sum.Team)
		tt := h.Total
		want := Summary{Team: sum.Team, Records: tt.Accepted + tt.Limited + tt.DeadLetter, Accepted: tt.Accepted, Limited: tt.Limited,
			DeadLetter: tt.DeadLetter, FirstLimited: h.FirstLimited, LastLimited: h.LastLimited, By: tt.LimitedBy()}
		if fmt.Sprint(sum) != fmt.Sprint(want) {
			t.Errorf("team %s:\n summed %+v\nhistory %+v", sum.Team, sum, want)
		}
	}
	if s.Rows() != len(rows) {
		t.Errorf("Rows() = %d, want %d", s.Rows(), len(rows))
	}
}
