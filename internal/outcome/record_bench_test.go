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

// BenchmarkSeal is a consumer's seal as BenchmarkOutcomes' exactly-once gate makes it:
// two routing goroutines' Aggs, each of half of 100,000 records (a transaction's worth)
// over 10,000 Zipf-spread teams, most teams in both, merged into one row per team and
// encoded (Seal, AppendRowsJSON). Recording is untimed: ns/row and the allocations are
// the seal's.
func BenchmarkSeal(b *testing.B) {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	fates := make([]Fate, 100_000)
	t0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	for i := range fates {
		key := strconv.FormatUint(z.Uint64(), 10)
		fates[i] = Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: key, Team: key, Bytes: 200, Threshold: 1000}
	}
	aggs := []*Agg{NewAgg(time.Minute, nil), NewAgg(time.Minute, nil)}
	rows := 0
	var buf []byte
	var ends []int
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range fates {
			aggs[i&1].Record(&fates[i])
		}
		b.StartTimer()
		rs := Seal("gate-0", "gate-0/1764338400000-9f3a61c2/7", aggs...)
		rows += len(rs)
		buf, ends = AppendRowsJSON(buf[:0], rs, ends[:0])
	}
	b.ReportMetric(float64(rows)/float64(b.N), "rows/seal")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
}

// BenchmarkBumpHeld is Agg.BumpHashed, the router's count of a record whose row exists,
// over BenchmarkRecord's 10,000 Zipf-spread teams, each held over its limit after its
// first record (accepted): every record after is an overflow, a key's second row (a
// team's records come in runs of one row). Every team's two rows are made first,
// untimed. The rows are 10,000 × 2 × some 150 bytes, more than a core's caches hold.
func BenchmarkBumpHeld(b *testing.B) {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9_999)
	const n = 1 << 16
	t0 := time.Date(2026, 11, 28, 14, 0, 0, 0, time.UTC)
	a := NewAgg(time.Minute, nil)
	keys := make([]string, 10_000)
	hs := make([]uint64, len(keys))
	for t := range keys {
		keys[t] = "team-" + strconv.Itoa(t)
		a.Record(&Fate{At: t0, Kind: Accepted, Reason: "allowed", Key: keys[t], Team: keys[t], Bytes: 200})
		a.Record(&Fate{At: t0, Kind: Overflow, Reason: "rate_limited", Rule: "team", Key: keys[t], Team: keys[t], Bytes: 200})
		hs[t] = a.Touch(keys[t])
	}
	ts := make([]uint64, n)
	for i := range ts {
		ts[i] = z.Uint64()
	}
	i := 0
	for b.Loop() {
		t := ts[i&(n-1)]
		if !a.BumpHashed(hs[t], t0, keys[t], Overflow, "team", "", "rate_limited", 200) {
			b.Fatal("a row not found")
		}
		i++
	}
}
