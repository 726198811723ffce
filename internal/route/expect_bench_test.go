package route

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkExpect is what priming costs a record (route.Router.Expect: its keys read and
// counted, the keys of two or more marked), beside routing it (BenchmarkRoute's json
// row): a poll of 10,000 of the sample event across 100 teams, with the file-less gate's
// one rule, as a gate primes a partition's first poll (all its records) and, while the
// partition lags, an eighth of each later poll's.
func BenchmarkExpect(b *testing.B) {
	event := readEvent(b, "team_id_int.json")
	c := routeCases(b)[0] // json: the file-less gate's rule
	r, _ := c.setup(b)
	recs := make([]*kgo.Record, 10_000)
	for i := range recs {
		v := bytes.Replace(event, []byte(`"team_id":2`), []byte(`"team_id":`+strconv.Itoa(i%100)), 1)
		recs[i] = &kgo.Record{Value: v, Headers: benchHeaders}
	}
	var s Scratch
	b.ReportAllocs()
	for b.Loop() {
		r.Expect(t0, recs, &s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
