package limit

import (
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// benchWindowChecks is BenchmarkCheckUntracked's checks a window: a million a minute, the
// sketch's design load (sketch.go), whatever b.N is.
const benchWindowChecks = 1 << 20

// BenchmarkCheckUntracked is the check of a key under the floor (sketch.go) beside a
// cached key's, in one process: "untracked" checks keys of 100k teams × 50 users, each
// under a floor of 300 (threshold 30,000), "cached" the same keys with every key cached
// (SketchWidth 0, capacity 300,000 against 5 million keys: evicting), the keys built in a reused buffer as the router's are; "rotating" is
// "untracked" with one record in five from a team with a fresh key each, found rotating
// and collapsed; "candidates" is "untracked" with 1,000 teams under a max_keys of 1,000,
// each with a thousand records a window and so a candidate for rotation (cardinality.go),
// though none rotates. A minute passes every benchWindowChecks checks, with its sweep
// (untimed).
func BenchmarkCheckUntracked(b *testing.B) {
	for _, v := range []struct {
		name     string
		sketch   int
		rotating bool
		teams    int
		bound    int64
	}{
		{"untracked", DefaultSketchWidth, false, 100_000, DefaultKeyCardinality},
		{"rotating", DefaultSketchWidth, true, 100_000, DefaultKeyCardinality},
		{"candidates", DefaultSketchWidth, false, 1000, 1000},
		{"cached", 0, false, 100_000, DefaultKeyCardinality},
	} {
		b.Run(v.name, func(b *testing.B) {
			l, err := New(Config{Window: time.Minute, Threshold: 30_000, SketchWidth: v.sketch, KeyCardinality: v.bound}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			var buf []byte
			seq := 0
			key := func(i int) string {
				if v.rotating && i%5 == 0 {
					seq++
					buf = strconv.AppendInt(append(buf[:0], "rot:id-"...), int64(seq), 10)
					return unsafe.String(&buf[0], len(buf))
				}
				buf = strconv.AppendInt(append(strconv.AppendInt(append(buf[:0], "team-"...), int64(i%v.teams), 10), ":user-"...), int64(i/v.teams%50), 10)
				return unsafe.String(&buf[0], len(buf))
			}
			for i := range 1 << 20 {
				l.CheckAt(now, key(i*7919), 1)
			}
			var sw Sweep
			l.Sweep(now, &sw) // finds rot rotating
			if v.bound < DefaultKeyCardinality {
				n := 0
				if cs := l.card.cands.Load(); cs != nil {
					n = len(cs.list)
				}
				if n < v.teams/2 {
					b.Fatalf("%d candidates, want most of the %d teams", n, v.teams)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.CheckAt(now, key(i*7919), 1)
				if i++; i%benchWindowChecks == 0 {
					// A window's load and no more: left in one window, the sketch's
					// counters grew by b.N ÷ its width, every key reached its floor past
					// some ten million checks, and the figure became the caching one's.
					b.StopTimer()
					now = now.Add(time.Minute)
					l.Sweep(now, &sw)
					b.StartTimer()
				}
			}
		})
	}
}
