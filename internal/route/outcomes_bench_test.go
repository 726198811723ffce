package route

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
)

// BenchmarkRouteOutcomesTurns routes the end-to-end benches' records (about 200 bytes,
// 10k teams, Zipf 1.1: internal/consume's benchRecords) through a router without a rules
// file, with outcomes off and on (Scratch.Outcomes), in turns of 1<<18 records, each
// round starting with the other, on one goroutine as a partition worker routes: what
// recording outcomes costs the routing alone, the broker's and the client's work left
// out (outcomes_vs_off_ratio in make bench has them). The Agg is sealed after every
// turn, untimed, as the consumer seals once a commit interval: a turn's first record of
// each team makes its row anew.
func BenchmarkRouteOutcomesTurns(b *testing.B) { benchRouteOutcomesTurns(b, 0) }

// BenchmarkRouteOutcomesEvicted is BenchmarkRouteOutcomesTurns with the caches the gate's
// other work shares with the routing modelled: after each record, in both turns, 2 KB
// cleared on through 16 MB (the client decodes, batches and compresses, and the broker
// on the same two cores writes, some kilobytes a record), so that a team's lines leave
// the caches between two of its records as in the gate (BenchmarkOutcomes), not as in
// the routing alone. Its on ÷ off is outcomes' cost where their lines are waited for.
func BenchmarkRouteOutcomesEvicted(b *testing.B) { benchRouteOutcomesTurns(b, 2<<10) }

// benchRouteOutcomesTurns is BenchmarkRouteOutcomesTurns clearing evict bytes (0: none)
// between two records.
func benchRouteOutcomesTurns(b *testing.B, evict int) {
	const turn = 1 << 18
	var junk []byte
	at := 0
	if evict > 0 {
		junk = make([]byte, 16<<20)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	recs := make([]*kgo.Record, turn)
	for i := range recs {
		recs[i] = input(fmt.Sprintf(`{"team_id":"team-%d","event":"$pageview","distinct_id":"user-%d","properties":{"$current_url":"https://example.com/a/b","$browser":"Firefox","seq":%d}}`, z.Uint64(), i%5000, i), "k")
	}
	// One hash seed for the limiter and the Agg, as a gate gives them (the check then
	// takes the hash Touch made of the team).
	seed := maphash.MakeSeed()
	f := newFixture(b, Config{}, limit.Config{Threshold: limit.MaxThreshold, HashSeed: seed})
	aggs := []*outcome.Agg{nil, outcome.NewAggSeeded(time.Minute, nil, seed)}
	meds := inTurns(b, []string{"off", "on"}, func(i int) float64 {
		s := Scratch{Outcomes: aggs[i]}
		var out kgo.Record
		start := time.Now()
		for i, rec := range recs {
			f.r.RouteInto(t0, rec, &s, &out)
			if evict > 0 {
				if at+evict > len(junk) {
					at = 0
				}
				clear(junk[at : at+evict])
				at += evict
			}
			if i&255 == 255 {
				s.Flush()
			}
		}
		s.Flush()
		ns := float64(time.Since(start).Nanoseconds()) / turn
		if aggs[i] != nil {
			outcome.Seal("g", "s", aggs[i]) // untimed: a gate seals once a commit interval
		}
		return ns
	})
	b.ReportMetric(meds[1]/meds[0], "on/off")
	b.ReportMetric(0, "ns/op")
}
