package outcome

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRecord is Agg.Record as a gate routing BenchmarkEndToEnd's traffic calls it:
// 10,000 teams, Zipf-spread, each record's key in a value of its own (as it is in the
// record's bytes), most accepted, the busiest overflowing.
func BenchmarkRecord(b *testing.B) {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	const n = 1 << 16
	fates := make([]Fate, n)
	t0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	for i := range fates {
		t := z.Uint64()
		key := string([]byte("team-" + strconv.FormatUint(t, 10))) // its own bytes
		f := Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: key, Team: key, Bytes: 200, Threshold: 1000}
		if t < 3 {
			f.Kind, f.Reason, f.Rule = Overflow, "rate_limited", "team"
		}
		fates[i] = f
	}
	a := NewAgg(time.Minute, nil)
	i := 0
	for b.Loop() {
		a.Record(&fates[i&(n-1)])
		i++
	}
}
