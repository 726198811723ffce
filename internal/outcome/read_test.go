package outcome

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// outcomesTopic is a kfake cluster with an "outcomes" topic of parts partitions, and a
// client producing to it; both close at t's end.
func outcomesTopic(t *testing.T, parts int32) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// Scan of one team reads only the partition its rows are keyed to and passes only its
// rows: what a Scan of every team passes of that team, each once, without reading the others' (a record
// that is no row elsewhere is not even seen). gate outcomes TEAM then holds one team's
// rows, not the topic's.
func TestScanOneTeam(t *testing.T) {
	c, cl := outcomesTopic(t, 4)
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
	read, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), "", func(r *Row) { all = append(all, *r) }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || read.Skipped != 1 || len(all) != 400 {
		t.Fatalf("Scan of every team: %d rows, %d skipped, %v; want 400 and 1", len(all), read.Skipped, err)
	}
	var want, got []string
	for _, r := range all {
		if r.Team == team {
			want = append(want, fmt.Sprint(r))
		}
	}
	read, err = Scan(t.Context(), "outcomes", start.Add(-time.Hour), team, func(r *Row) { got = append(got, fmt.Sprint(*r)) }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || read.Skipped != 0 {
		t.Fatalf("Scan %s: %d skipped, %v; want 0 (the record that is no row is in another partition)", team, read.Skipped, err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 20 || !slices.Equal(got, want) {
		t.Errorf("Scan %s passed %d rows, the Scan of every team %d of the team's", team, len(got), len(want))
	}
}

// A team of bytes that are not UTF-8 (a binary record key) has its rows written with each
// such byte U+FFFD, the Kafka key too (MergeAsEncoded): Scan of the team as the events
// have it ("t\xfe", as gate team quotes it) reads that partition and passes those rows,
// and TeamHistory sums them, where both found nothing.
func TestScanOneTeamNotUTF8(t *testing.T) {
	const parts = 8
	c, cl := outcomesTopic(t, parts)
	const team = "t\xfe"
	p := kgo.StickyKeyPartitioner(nil).ForTopic("outcomes")
	if p.Partition(&kgo.Record{Key: []byte(team)}, parts) == p.Partition(&kgo.Record{Key: []byte(asEncoded(team))}, parts) {
		t.Fatalf("%q and its encoding share a partition of %d: the test needs them apart", team, parts)
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	rows := MergeAsEncoded([]Row{
		{Schema: SchemaVersion, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute), Team: team, Key: team,
			Outcome: "accepted", Reason: "allowed", Records: 7},
		{Schema: SchemaVersion, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute), Team: team, Key: team + ":u1",
			Rule: "user", Outcome: "overflow", Reason: "rate_limited", Records: 5},
	})
	for i := range rows { // keyed as the gate keys them (consume's seal): by the row's team
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte(rows[i].Team), Value: AppendJSON(nil, &rows[i])}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var got []Row
	if _, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), team, func(r *Row) { got = append(got, *r) }, kgo.SeedBrokers(c.ListenAddrs()...)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("Scan %q passed %d rows, want 2", team, len(got))
	}
	if h := TeamHistory(got, team); h.Total.Accepted != 7 || h.Total.Limited != 5 {
		t.Errorf("TeamHistory %q: %d accepted, %d limited; want 7 and 5", team, h.Total.Accepted, h.Total.Limited)
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
		limitedBy := map[string]int64{} // the history's counts by what limited, tags and shadow rules left out
		for k, n := range tt.By {
			if f := strings.Fields(k); Limited(f[len(f)-1]) {
				limitedBy[k] = n
			}
		}
		want := Summary{Team: sum.Team, Records: tt.Accepted + tt.Limited + tt.DeadLetter, Accepted: tt.Accepted, Limited: tt.Limited,
			DeadLetter: tt.DeadLetter, FirstLimited: h.FirstLimited, LastLimited: h.LastLimited, LimitedBy: limitedBy}
		if fmt.Sprint(sum) != fmt.Sprint(want) || sum.By() != tt.LimitedBy() {
			t.Errorf("team %s:\n summed %+v\nhistory %+v", sum.Team, sum, want)
		}
	}
	if s.Rows() != len(rows) {
		t.Errorf("Rows() = %d, want %d", s.Rows(), len(rows))
	}
}

// Retention can delete the offsets a Scan looked up before it fetches them (or while it
// reads). The Scan reads what is left, says which offsets were gone, and ends: it does
// not wait for records that will never come, which is what it did when every offset
// before the end was deleted (until its caller's deadline; gate outcomes' 5 minutes).
func TestScanRowsDeletedMeanwhile(t *testing.T) {
	for _, deleteTo := range []int64{6, 10} {
		t.Run(fmt.Sprintf("below %d of 10", deleteTo), func(t *testing.T) {
			c, cl := outcomesTopic(t, 1)
			start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
			var recs []*kgo.Record
			for i := range 10 {
				r := Row{Schema: SchemaVersion, ID: "g/1/" + strconv.Itoa(i), Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
					Team: "42", Key: "42", Outcome: "overflow", Reason: "rate_limited", Records: int64(i)}
				recs = append(recs, &kgo.Record{Key: []byte("42"), Value: AppendJSON(nil, &r)})
			}
			if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			// Retention, between the Scan's lookup of its offsets and its first fetch.
			c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.DropControl()
				c.SleepControl(func() {
					to := kadm.Offsets{}
					to.Add(kadm.Offset{Topic: "outcomes", Partition: 0, At: deleteTo})
					if _, err := kadm.NewClient(cl).DeleteRecords(t.Context(), to); err != nil {
						t.Errorf("deleting the records below %d: %v", deleteTo, err)
					}
				})
				return nil, nil, false
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			var got []int64
			read, err := Scan(ctx, "outcomes", start.Add(-time.Hour), "", func(r *Row) { got = append(got, r.Records) }, kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			var want []int64
			for i := deleteTo; i < 10; i++ {
				want = append(want, i)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Scan passed the rows %v, want %v (those retention left)", got, want)
			}
			if wantGone := []Gone{{Partition: 0, From: 0, To: deleteTo}}; !slices.Equal(read.Gone, wantGone) {
				t.Errorf("Scan says %+v were gone, want %+v", read.Gone, wantGone)
			}
		})
	}
}

// A since older than what retention kept reads from the oldest row left: the rows from
// since up to it may have been deleted, and the Scan says so, partition and the oldest
// row's time, rather than passing what is left as if it were all since then. A since the
// partition still holds rows from says nothing; nor does a partition nothing was deleted
// from.
func TestScanSaysRetentionTrimmedSince(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	now := time.Now().UTC().Truncate(time.Second)
	rec := func(p int32, sealed time.Time) *kgo.Record {
		r := Row{Schema: SchemaVersion, ID: "g/1/" + sealed.Format(time.RFC3339), Gate: "g", IntervalStart: sealed.Truncate(time.Minute),
			IntervalEnd: sealed.Truncate(time.Minute).Add(time.Minute), Team: "42", Key: "42", Outcome: "overflow", Reason: "rate_limited", Records: 1}
		return &kgo.Record{Topic: "outcomes", Partition: p, Key: []byte("42"), Value: AppendJSON(nil, &r), Timestamp: sealed}
	}
	// Partition 0: a row of 3 h ago, deleted, and one of 1 h ago, kept. Partition 1: a row
	// of 3 h ago, kept.
	if err := cl.ProduceSync(t.Context(), rec(0, now.Add(-3*time.Hour)), rec(0, now.Add(-time.Hour)), rec(1, now.Add(-3*time.Hour))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	to := kadm.Offsets{}
	to.Add(kadm.Offset{Topic: "outcomes", Partition: 0, At: 1})
	if _, err := kadm.NewClient(cl).DeleteRecords(t.Context(), to); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		since time.Duration
		want  []Trimmed
	}{
		{4 * time.Hour, []Trimmed{{Partition: 0, Oldest: now.Add(-time.Hour)}}},
		{30 * time.Minute, nil}, // partition 0 holds a row from before then
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		n := 0
		read, err := Scan(ctx, "outcomes", now.Add(-tc.since), "", func(*Row) { n++ }, kgo.SeedBrokers(c.ListenAddrs()...))
		cancel()
		if err != nil {
			t.Fatalf("Scan since %v ago: %v", tc.since, err)
		}
		if len(read.Trimmed) != len(tc.want) || (len(tc.want) > 0 && (read.Trimmed[0].Partition != tc.want[0].Partition || !read.Trimmed[0].Oldest.Equal(tc.want[0].Oldest))) {
			t.Errorf("Scan since %v ago (%d rows) says %+v were trimmed by retention, want %+v", tc.since, n, read.Trimmed, tc.want)
		}
	}
}

// Rows a newer gate wrote (a newer schema) are counted apart from records that are no
// rows at all, with the newest schema met: a reader of an older version then says its
// figures are short by rows it cannot read, and which version can. Before, both were one
// count of "not outcome rows".
func TestScanCountsNewerSchemaRows(t *testing.T) {
	c, cl := outcomesTopic(t, 1)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	row := func(schema int, id string) *kgo.Record {
		r := Row{Schema: schema, ID: id, Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 1}
		return &kgo.Record{Key: []byte("42"), Value: AppendJSON(nil, &r)}
	}
	recs := []*kgo.Record{row(SchemaVersion, "g/1/1"), row(SchemaVersion+1, "g/1/2"), row(SchemaVersion+2, "g/1/3"),
		{Key: []byte("42"), Value: []byte("not a row")}}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	n := 0
	read, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), "", func(*Row) { n++ }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || read.Skipped != 3 || read.Newer != 2 || read.NewestSchema != SchemaVersion+2 {
		t.Errorf("passed %d rows, skipped %d, newer %d (newest schema %d); want 1, 3, 2 (schema %d)",
			n, read.Skipped, read.Newer, read.NewestSchema, SchemaVersion+2)
	}
}

// A newer schema may change a field's type (what makes a new number: a field that
// changes meaning), so that its rows do not decode as this schema's at all. They are
// still rows of a newer schema, counted as such: before, gate outcomes called them
// "records ... not outcome rows of schema 1" and never said a newer gate wrote them.
func TestScanCountsNewerSchemaRowsOfChangedFields(t *testing.T) {
	c, cl := outcomesTopic(t, 1)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	newer := fmt.Sprintf(`{"schema":%d,"id":"g/1/1","gate":"g","interval_start":%q,"interval_end":%q,"team":"42","key":"42",`+
		`"rule":"","outcome":"accepted","reason":"allowed","records":"12","bytes":{"value":1200},"threshold":0,"threshold_source":""}`,
		SchemaVersion+1, start.Format(time.RFC3339), start.Add(time.Minute).Format(time.RFC3339))
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte("42"), Value: []byte(newer)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	read, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), "42", func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	if read.Skipped != 1 || read.Newer != 1 || read.NewestSchema != SchemaVersion+1 {
		t.Errorf("skipped %d, newer %d (newest schema %d); want 1, 1 (schema %d): a row of schema %d whose fields changed type",
			read.Skipped, read.Newer, read.NewestSchema, SchemaVersion+1, SchemaVersion+1)
	}
}

// The rows of a newer schema a Scan says it could not count are rows it would have
// counted: not a newer gate's seal records (keyed by the gate, no rows), not the rows of
// an aborted transaction (a read_committed reader has none), and, for one team, not
// another team's rows on its partition. Before, each was one more row "not counted",
// and gate outcomes 42 said team 42's figures were short by rows that were not its own.
func TestScanCountsOnlyNewerRowsItWouldCount(t *testing.T) {
	c, cl := outcomesTopic(t, 1)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	row := func(schema int, team string) *kgo.Record {
		r := Row{Schema: schema, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: team, Key: team, Outcome: "accepted", Reason: "allowed", Records: 1}
		return &kgo.Record{Key: []byte(team), Value: AppendJSON(nil, &r)}
	}
	seal := &kgo.Record{Key: []byte("g"), Value: []byte(`{"schema":2,"seal":"g/1/1","gate":"g","rows":2,"sources":[]}`)}
	if err := cl.ProduceSync(t.Context(), row(SchemaVersion, "42"), row(SchemaVersion+1, "42"), row(SchemaVersion+1, "7"), seal).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"), kgo.TransactionalID("newer"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(t.Context(), row(SchemaVersion+1, "42")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(t.Context(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	for team, want := range map[string]int{"42": 1, "": 2} {
		read, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), team, func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		if read.Newer != want || read.Skipped != want {
			t.Errorf("Scan of team %q: %d rows of a newer schema (%d skipped), want %d", team, read.Newer, read.Skipped, want)
		}
	}
}

// A partition whose leader stops answering once the read has begun (its broker down, no
// replica to take over) fails the read, naming the partition, rather than holding it to
// gate outcomes' 5-minute limit, whose error blamed a long -since ("give a later
// -since"), which would not help.
func TestScanFailsWhenALeaderIsUnavailable(t *testing.T) {
	t.Parallel() // it waits out stallAfter, 10 s, on a cluster of its own
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p := range int32(2) {
		if err := c.MoveTopicPartition("outcomes", p, p); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	for p := range int32(2) {
		r := Row{Schema: SchemaVersion, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 1}
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Partition: p, Key: []byte("42"), Value: AppendJSON(nil, &r)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var down atomic.Bool
	gone := func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() == 1 && down.Load() {
			return nil, errors.New("broker 1 is down"), true // the connection closed
		}
		return nil, nil, false
	}
	c.ControlKey(int16(kmsg.ListOffsets), gone)
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		down.Store(true) // the offsets are listed: the read has begun
		return gone(r)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	began := time.Now()
	_, err = Scan(ctx, "outcomes", start.Add(-time.Hour), "", func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...))
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("after %s: %v (context: %v), want an error naming partition 1 before the context's end", time.Since(began).Round(time.Second), err, ctx.Err())
	}
	t.Logf("after %s: %v", time.Since(began).Round(time.Second), err)
}

// A partition whose leader is unavailable from the start (its broker down, no replica to
// take over) fails a Scan that would read it, naming it, and holds up no Scan of a team
// whose rows are elsewhere: gate outcomes of such a team failed at once, listing the
// offsets of every partition, with franz-go's word for the closed connection ("is SASL
// missing?"), though its partition answered.
func TestScanOneTeamWhileAnotherPartitionIsDown(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p := range int32(2) {
		if err := c.MoveTopicPartition("outcomes", p, p); err != nil {
			t.Fatal(err)
		}
	}
	team := ""
	for i := 0; team == ""; i++ {
		if k := strconv.Itoa(i); kgo.StickyKeyPartitioner(nil).ForTopic("outcomes").Partition(&kgo.Record{Key: []byte(k)}, 2) == 0 {
			team = k
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	r := Row{Schema: SchemaVersion, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
		Team: team, Key: team, Outcome: "accepted", Reason: "allowed", Records: 1}
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte(team), Value: AppendJSON(nil, &r)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	down := func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() == 1 {
			return nil, errors.New("broker 1 is down"), true // the connection closed
		}
		return nil, nil, false
	}
	c.ControlKey(int16(kmsg.ListOffsets), down)
	c.ControlKey(int16(kmsg.Fetch), down)
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	n := 0
	read, err := Scan(ctx, "outcomes", start.Add(-time.Hour), team, func(*Row) { n++ }, kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil || n != 1 {
		t.Errorf("Scan of team %s (partition 0) with partition 1 down: %d rows, %v; want its 1 row", team, n, err)
	}
	// Partition 1 is also where the rows of no team are (the empty key's): a team's read
	// leaves them out, and says so, rather than fail for them.
	if partitionOf("outcomes", []byte{}, 2) == 1 && (read.FoldedUnread == nil || !strings.Contains(read.FoldedUnread.Error(), "partition 1")) {
		t.Errorf("Scan of team %s with the folded rows' partition down: FoldedUnread %v, want it naming partition 1", team, read.FoldedUnread)
	}
	if _, err := Scan(ctx, "outcomes", start.Add(-time.Hour), "", func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...)); err == nil || !strings.Contains(err.Error(), "partition 1") {
		t.Errorf("Scan of every team with partition 1 down: %v, want an error naming partition 1", err)
	}
}

// What a Scan keeps of each row it passes, to count a row written again once, is what
// docs/outcomes.md says it is: a reader budgets gate outcomes' memory by it, and without
// TEAM it keeps that of every row read. The docs said 16 bytes a row, the hash's size; in
// the map that holds the hashes a row takes 35 to 56 bytes, as full as the map has grown.
func TestScanKeepsWhatTheDocsSayOfARow(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations are not a reader's (make test runs it without)")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(\d+) bytes a\s+row to count each once`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/outcomes.md does not say how many bytes a row gate outcomes keeps to count each once")
	}
	said, _ := strconv.Atoi(string(m[1]))
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 300_000 // the map more than half full at the end: 36 to 44 bytes a row measured
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var recs []*kgo.Record
	for i := range n {
		r := Row{Schema: SchemaVersion, ID: "g/1/" + strconv.Itoa(i), Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 1}
		recs = append(recs, &kgo.Record{Key: []byte("42"), Value: AppendJSON(nil, &r)})
		if len(recs) == 10_000 {
			if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	// The heap live (after a collection), the least of five looks at the first tenth of
	// the rows and at the last: what the Scan kept of the rows between, its fetches'
	// records, which come and go, left out.
	first, last := uint64(math.MaxUint64), uint64(math.MaxUint64)
	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	seen := 0
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	if _, err := Scan(ctx, "outcomes", start.Add(-time.Hour), "", func(*Row) {
		seen++
		switch {
		case seen <= n/10 && seen%(n/50) == 0:
			first = min(first, live())
		case seen > n-n/10 && seen%(n/50) == 0:
			last = min(last, live())
		}
	}, kgo.SeedBrokers(c.ListenAddrs()...)); err != nil || seen != n {
		t.Fatalf("Scan passed %d rows of %d: %v", seen, n, err)
	}
	if kept := (float64(last) - float64(first)) / (n - n/10); kept > float64(said) {
		t.Errorf("Scan kept %.1f bytes a row to count each once (rows %d to %d); docs/outcomes.md says %d", kept, n/10, n, said)
	}
}

// The gates write rows all the while a Scan reads: a partition read to its end goes on
// receiving them. A partition whose leader stops answering fails the read after a stall
// all the same, naming it; the rows fetched from the partitions already read were taken
// for progress, and the read waited for its caller's limit (gate outcomes' 5 minutes,
// whose error blames a long -since).
func TestScanFailsWhenALeaderIsUnavailableOnABusyTopic(t *testing.T) {
	t.Parallel() // it waits out stallAfter, 10 s, on a cluster of its own
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for p := range int32(2) {
		if err := c.MoveTopicPartition("outcomes", p, p); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("outcomes"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	row := func(p int32, seq int) *kgo.Record {
		r := Row{Schema: SchemaVersion, ID: "g/1/" + strconv.Itoa(seq), Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: "42", Key: "42", Outcome: "accepted", Reason: "allowed", Records: 1}
		return &kgo.Record{Partition: p, Key: []byte("42"), Value: AppendJSON(nil, &r)}
	}
	for p := range int32(2) {
		if err := cl.ProduceSync(t.Context(), row(p, 0)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var down atomic.Bool
	gone := func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() == 1 && down.Load() {
			return nil, errors.New("broker 1 is down"), true // the connection closed
		}
		return nil, nil, false
	}
	c.ControlKey(int16(kmsg.ListOffsets), gone)
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		down.Store(true) // the offsets are listed: the read has begun
		return gone(r)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	// A gate writing a row to partition 0, whose broker answers, every 100 ms.
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for seq := 1; ctx.Err() == nil; seq++ {
			_ = cl.ProduceSync(ctx, row(0, seq)).FirstErr()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	_, err = Scan(ctx, "outcomes", start.Add(-time.Hour), "", func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...))
	took := time.Since(began).Round(time.Second)
	cancel()
	<-writing
	if err == nil || took > 35*time.Second || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("after %s: %v, want an error naming partition 1 within 35 s (a stall, then its offsets not listed)", took, err)
	}
	t.Logf("after %s: %v", took, err)
}

// A topic listed with no partitions (the metadata of a topic being created or deleted)
// fails a Scan, of every team or of one, with an error naming the topic: Scan divided by
// its partition count, placing a team's names and the folded rows' empty key
// (partitionOf), and panicked with an integer division by zero.
func TestScanTopicOfNoPartitions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outcomes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	host, port, err := net.SplitHostPort(c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	// Every metadata answer lists the topic with no partitions, as a broker does while
	// it is created or deleted.
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = req.Version
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(p)
		resp.Brokers = append(resp.Brokers, b)
		resp.ControllerID = 0
		st := kmsg.NewMetadataResponseTopic()
		st.Topic = kmsg.StringPtr("outcomes")
		st.TopicID = [16]byte{1}
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	for _, team := range []string{"", "42"} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := Scan(ctx, "outcomes", time.Now().Add(-time.Hour), team, func(*Row) {}, kgo.SeedBrokers(c.ListenAddrs()...))
		cancel()
		if !errors.Is(err, ErrNoPartitions) || !strings.Contains(err.Error(), "outcomes") {
			t.Errorf("Scan of team %q of a topic of no partitions: %v, want ErrNoPartitions naming the topic", team, err)
		}
	}
}

// A row's team is part of what makes it the same row written again: a seal's row of a
// key of no team (a user id "42" read from a record whose team cannot be read) and team
// 42's row of that rule, outcome and reason, keyed "42" too, are two rows, both passed.
// Scan dropped the second as the first written again.
func TestScanTellsRowsApartByTeam(t *testing.T) {
	c, cl := outcomesTopic(t, 1)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var recs []*kgo.Record
	for _, team := range []string{"42", "", "42"} { // team 42's row written again
		r := Row{Schema: SchemaVersion, ID: "g/1/1", Gate: "g", IntervalStart: start, IntervalEnd: start.Add(time.Minute),
			Team: team, Key: "42", Rule: "users", Outcome: "overflow", Reason: "rate_limited", Records: 5}
		recs = append(recs, &kgo.Record{Key: []byte(team), Value: AppendJSON(nil, &r)})
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var teams []string
	if _, err := Scan(t.Context(), "outcomes", start.Add(-time.Hour), "", func(r *Row) { teams = append(teams, r.Team) }, kgo.SeedBrokers(c.ListenAddrs()...)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(teams) != fmt.Sprint([]string{"42", ""}) {
		t.Errorf("Scan passed rows of teams %q, want team 42's once and the row of no team", teams)
	}
	// As MergeAsEncoded merges rows that encode alike: not those of two teams.
	rows := []Row{{Team: "42", Key: "42\xff", Rule: "users", Records: 1}, {Team: "", Key: "42\xfe", Rule: "users", Records: 1}}
	if got := MergeAsEncoded(rows); len(got) != 2 {
		t.Errorf("MergeAsEncoded of a team's row and a row of no team: %+v, want both", got)
	}
}
