package limit

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// sketchCfg is a limiter whose floor is 1,000 records of a key a window (SyncFloor 0.01 ×
// 100,000, one gate), keys under it counted in the sketch.
func sketchCfg() Config {
	return Config{Window: time.Minute, Threshold: 100_000, SketchWidth: DefaultSketchWidth, SyncInterval: 15 * time.Second}
}

func sumCounts(sw *Sweep, team string) (n int64) {
	for _, c := range sw.Counts {
		if c.Team == team {
			n += c.N
		}
	}
	return n
}

// Keys under the floor are allowed, counted in the sketch and nowhere else: not cached,
// nothing written, nothing read.
func TestUntrackedKeysNeitherCachedNorWrittenNorRead(t *testing.T) {
	l, _, reg := newTest(t, sketchCfg())
	now := at(time.Second)
	for i := range 5000 {
		if d := l.CheckAt(now, fmt.Sprintf("user-%d", i), 1); d.Limited {
			t.Fatalf("user-%d limited at its first record: %+v", i, d)
		}
	}
	if n := l.Len(); n != 0 {
		t.Errorf("cached %d keys, want 0: each is 1 record of a floor of 1,000", n)
	}
	sw := sweep(t, l, at(2*time.Second))
	if len(sw.Counts) != 0 || len(sw.Reads) != 0 {
		t.Errorf("sweep: %d counts, %d reads, want none", len(sw.Counts), len(sw.Reads))
	}
	if got := metricValue(t, reg, "gate_limiter_untracked_checks_total", nil); got != 5000 {
		t.Errorf("gate_limiter_untracked_checks_total = %v, want 5000", got)
	}
	if got := metricValue(t, reg, "gate_limiter_untracked_floor", nil); got != 1000 {
		t.Errorf("gate_limiter_untracked_floor = %v, want 1000", got)
	}
}

// A routing goroutine's tally counts its checks answered from the sketch with their
// decisions, and AddTally adds both: the cache's hits (decisions less misses and untracked
// checks) never go negative in between.
func TestUntrackedChecksTallied(t *testing.T) {
	l, _, reg := newTest(t, sketchCfg())
	now := at(time.Second)
	var tally Tally
	for i := range 300 {
		l.CheckTally(now, fmt.Sprintf("user-%d", i), 1, &tally)
	}
	if got := metricValue(t, reg, "gate_limiter_untracked_checks_total", nil); got != 0 {
		t.Errorf("before AddTally: untracked checks %v, want 0 (tallied)", got)
	}
	l.AddTally(&tally)
	if got := metricValue(t, reg, "gate_limiter_untracked_checks_total", nil); got != 300 {
		t.Errorf("untracked checks %v, want 300", got)
	}
	if got := metricValue(t, reg, "gate_limiter_decisions_total", map[string]string{"decision": "allowed"}); got != 300 {
		t.Errorf("allowed %v, want 300", got)
	}
	if got := metricValue(t, reg, "gate_limiter_cache_total", map[string]string{"result": "hit"}); got != 0 {
		t.Errorf("cache hits %v, want 0: every check was answered from the sketch", got)
	}
}

// A key reaching its floor is cached with what the sketch counted of it, handed to the
// tick as its counts, and read on the next sweep.
func TestKeyReachingItsFloorIsPromotedWithItsCounts(t *testing.T) {
	l, _, _ := newTest(t, sketchCfg())
	// 400 in the previous window, 599 in this one, at its start (where the sliding
	// window still covers the whole of the previous one): 999, one short of the floor.
	for range 400 {
		l.CheckAt(at(50*time.Second), "runaway", 1)
	}
	sweep(t, l, at(60*time.Second)) // readies the next window's slot as a tick would
	for range 599 {
		l.CheckAt(at(60*time.Second), "runaway", 1)
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("cached %d keys at 999 records, want 0", n)
	}
	l.CheckAt(at(60*time.Second), "runaway", 1) // the 1,000th
	if n := l.Len(); n != 1 {
		t.Fatalf("cached %d keys at the floor, want 1", n)
	}
	sw := sweep(t, l, at(64*time.Second))
	var cur, prev int64
	for _, c := range sw.Counts {
		switch c.Epoch {
		case l.Epoch(at(time.Minute)):
			cur += c.N
		case l.Epoch(at(0)):
			prev += c.N
		}
	}
	if cur != 600 || prev != 400 {
		t.Errorf("counts handed to the tick: %d this window, %d the last, want 600 and 400", cur, prev)
	}
	if r := findRead(sw, "runaway"); r == nil || r.Reason != ReadFirst {
		t.Errorf("read of the promoted key = %+v, want a first read", r)
	}
}

// The floor is each gate's share: with 10 gates a key is cached at a tenth of what a
// gate alone caches it at, so that the fleet's count of a key under every gate's floor is
// under SyncFloor of its threshold.
func TestFleetSizeDividesTheFloor(t *testing.T) {
	l, _, _ := newTest(t, sketchCfg())
	l.SetFleetSize(10)
	for range 100 {
		l.CheckAt(at(time.Second), "u", 1)
	}
	if n := l.Len(); n != 1 {
		t.Errorf("cached %d keys after 100 records with 10 gates (floor 100), want 1", n)
	}
	if r := findRead(sweep(t, l, at(2*time.Second)), "u"); r == nil {
		t.Error("no read of a key at its floor with 10 gates: a key over its limit only fleet-wide would never be read")
	}
}

// A key with an override is always cached, at its own threshold: it may be far lower than
// the default the floor is taken from.
func TestOverriddenKeysAlwaysCached(t *testing.T) {
	cfg := sketchCfg()
	cfg.Overrides = map[string]int64{"small": 10}
	l, _, _ := newTest(t, cfg)
	for range 10 {
		l.CheckAt(at(time.Second), "small", 1)
	}
	if d := l.CheckAt(at(time.Second), "small", 1); !d.Limited {
		t.Errorf("an overridden key at 10 of 10: %+v, want limited", d)
	}
}

// A cached key whose level falls under half its floor goes back to the sketch, its
// counts handed to the tick, once the sketch holds nothing of it from before it was
// cached; one over its limit, or held, stays.
func TestQuietKeyReturnsToTheSketch(t *testing.T) {
	l, _, reg := newTest(t, sketchCfg())
	for range 1000 {
		l.CheckAt(at(time.Second), "once-busy", 1)
	}
	if l.Len() != 1 {
		t.Fatal("not promoted")
	}
	// Two windows later the key sends a record a minute: its level (local, never read
	// here) is its last windows' count, under half the floor.
	var handed int64
	for s := 2; s < 200; s++ {
		now := at(time.Duration(s) * time.Second)
		if s%60 == 0 {
			l.CheckAt(now, "once-busy", 1)
		}
		sw := sweep(t, l, now)
		handed += sumCounts(sw, "once-busy")
		for i := range sw.Reads {
			l.ApplyRead(&sw.Reads[i], 0, 0, now) // the fleet's count: nothing else
		}
		if sw.Demoted > 0 {
			if s < 120 {
				t.Errorf("demoted at %d s, while the sketch still held its counts of the first window", s)
			}
			break
		}
	}
	if l.Len() != 0 {
		t.Fatalf("the quiet key is still cached")
	}
	if handed < 1000 {
		t.Errorf("counts handed to the tick %d, want its 1,000 and more", handed)
	}
	if got := metricValue(t, reg, "gate_limiter_key_moves_total", map[string]string{"to": "sketch"}); got != 1 {
		t.Errorf(`gate_limiter_key_moves_total{to="sketch"} = %v, want 1`, got)
	}
}

// Identity rotation: a million keys seen once each take the sketch's fixed memory, not a
// cache entry each, and leave the keys that matter cached.
func TestRotatingKeysTakeNoMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap measurement: run without the race detector (make test-norace)")
	}
	l, _, _ := newTest(t, sketchCfg())
	for range 2000 {
		l.CheckAt(at(time.Second), "runaway", 1)
	}
	before := heapInUse()
	key := make([]byte, 0, 32)
	for i := range 1_000_000 {
		key = fmt.Appendf(key[:0], "rotating:%d", i)
		l.CheckAt(at(time.Second), string(key), 1)
	}
	after := heapInUse()
	if n := l.Len(); n != 1 {
		t.Errorf("cached %d keys, want the runaway alone", n)
	}
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Errorf("heap grew %d bytes over a million rotating keys, want under 1 MiB", grown)
	}
	runtime.KeepAlive(l)
}

// The sketch never undercounts: checks racing a key's promotion lose at most the records
// of the checks in flight as it is cached (one per goroutine), and count none twice.
func TestPromotionUnderConcurrentChecks(t *testing.T) {
	l, _, _ := newTest(t, sketchCfg())
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				l.CheckAt(at(time.Second), "k", 1)
			}
		}()
	}
	wg.Wait()
	got := sumCounts(sweep(t, l, at(2*time.Second)), "k")
	if got > workers*per || got < workers*per-workers {
		t.Errorf("counts handed to the tick %d, want %d less at most %d in flight at the promotion", got, workers*per, workers)
	}
}

// A full cache never evicts a key that could be over its limit: it grows past its
// capacity instead, and counts it.
func TestFullCacheKeepsHotKeys(t *testing.T) {
	l, _, reg := newTest(t, Config{Window: time.Minute, Threshold: 100, Capacity: 4, Shards: 1})
	for i := range 4 {
		l.CheckAt(at(time.Second), fmt.Sprintf("hot-%d", i), 60) // 60% of the threshold: normal
	}
	for i := range 100 {
		l.CheckAt(at(2*time.Second), fmt.Sprintf("cold-%d", i), 1)
	}
	for i := range 4 {
		if d := l.CheckAt(at(3*time.Second), fmt.Sprintf("hot-%d", i), 0); d.Level < 60 {
			t.Errorf("hot-%d at level %v after a flood of new keys, want 60: evicted", i, d.Level)
		}
	}
	if got := metricValue(t, reg, "gate_limiter_cache_overfull_total", nil); got == 0 {
		t.Error("gate_limiter_cache_overfull_total = 0, want the inserts that evicted nothing")
	}
}

// A limiter prefetches sketch lines only while most of its checks miss the cache: on after
// a sweep that follows mostly fresh keys, off again after one that follows cached keys.
func TestSketchPrefetchFollowsMisses(t *testing.T) {
	l, _, _ := newTest(t, sketchCfg())
	now := at(time.Second)
	if l.skPrefetch.Load() {
		t.Fatal("prefetching before any sweep")
	}
	for i := range 1000 {
		l.CheckAt(now, fmt.Sprintf("user-%d", i), 1)
	}
	sweep(t, l, at(2*time.Second))
	if !l.skPrefetch.Load() {
		t.Fatal("1,000 checks of fresh keys since the last sweep: not prefetching")
	}
	for range 4000 {
		l.CheckAt(at(2*time.Second), "hot", 1) // in the sketch to its floor (1,000), then cached
	}
	sweep(t, l, at(3*time.Second))
	if l.skPrefetch.Load() {
		t.Fatal("4,000 checks of one key, three in four of them cached, since the last sweep: still prefetching")
	}
}

// The prefetch's switch counts checks and sketch answers alike, both late when they wait
// in a routing goroutine's tally: a sweep between two flushes does not see a batch's keys
// missed without its checks. And with no floor (nothing untracked) it stays off, whatever
// the keys inserted.
func TestSketchPrefetchCountsAlike(t *testing.T) {
	l, _, _ := newTest(t, sketchCfg())
	now := at(time.Second)
	for range 2000 {
		l.CheckAt(now, "hot", 1) // cached past its floor (1,000)
	}
	sweep(t, l, at(2*time.Second))
	sweep(t, l, at(3*time.Second)) // no checks since: off
	// 150 keys with an override, cached (inserted) at their first check.
	ovr := map[string]int64{}
	for i := range 150 {
		ovr[fmt.Sprintf("new-%d", i)] = 50_000
	}
	if err := l.SetOverrides(ovr); err != nil {
		t.Fatal(err)
	}
	var tally Tally
	for range 10_000 {
		l.CheckTally(at(3*time.Second), "hot", 1, &tally)
	}
	for i := range 150 {
		for range 3 {
			l.CheckTally(at(3*time.Second), fmt.Sprintf("new-%d", i), 1, &tally)
		}
	}
	for range 200 {
		l.CheckAt(at(3*time.Second), "hot", 1)
	}
	sweep(t, l, at(4*time.Second)) // the tally not yet flushed
	if l.skPrefetch.Load() {
		t.Fatal("prefetching after a sweep that saw 200 cached checks and 150 keys inserted, a tally of their 10,450 checks waiting")
	}
	l.AddTally(&tally)
	sweep(t, l, at(5*time.Second))
	if l.skPrefetch.Load() {
		t.Fatal("prefetching after 10,450 checks, 450 of them of new keys")
	}

	cfg := sketchCfg()
	cfg.Threshold = 100 // a floor of 1 record: none, every key cached
	l, _, _ = newTest(t, cfg)
	for i := range 1000 {
		l.CheckAt(now, fmt.Sprintf("user-%d", i), 1)
	}
	sweep(t, l, at(2*time.Second))
	if l.skPrefetch.Load() {
		t.Fatal("prefetching sketch lines with no floor, nothing in the sketch")
	}
}

// A key counted in the sketch and then given an override while the gate runs keeps its
// sketch counts when promoted at its override: cap mode, 900 records admitted under the
// floor, then an override of 500 admits no more. Before, promotion carried nothing for a
// key with an override ("never counted in the sketch"), and the key started from 0
// under its new, lower threshold: up to a floor's worth over it for the window.
func TestLiveOverrideKeepsSketchCounts(t *testing.T) {
	cfg := sketchCfg() // floor 1,000
	cfg.Mode = Cap
	l, _, _ := newTest(t, cfg)
	now := at(time.Second)
	for range 900 {
		l.CheckAt(now, "k", 1)
	}
	if l.Len() != 0 {
		t.Fatalf("k cached at 900 records, under its floor")
	}
	if err := l.SetOverrides(map[string]int64{"k": 500}); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 1000 {
		if !l.CheckAt(now, "k", 1).Limited {
			admitted++
		}
	}
	if admitted > 0 {
		t.Errorf("k had 900 records admitted, then an override of 500: %d more admitted, want 0", admitted)
	}
	// Fewer than an eighth of the floor, then an override lower still: carried all the
	// same (its counts are its own, the override new).
	for range 120 {
		l.CheckAt(now, "small", 1)
	}
	if err := l.SetOverrides(map[string]int64{"k": 500, "small": 100}); err != nil {
		t.Fatal(err)
	}
	if d := l.CheckAt(now, "small", 1); !d.Limited {
		t.Errorf("small had 120 records admitted, then an override of 100: admitted again (%+v)", d)
	}
}

// A key promoted out of the sketch, evicted for capacity and seen again within the two
// windows the sketch holds its counts carries only what its first promotion did not:
// promoted again each time, it carried them again, once a cycle, written as records it
// never sent (an innocent key limited). Capacity 1, a key promoted at its floor, then 50
// overridden keys (always cached) each followed by the key again: what the tick is
// handed of it stays what it sent. Before, 51,000 for 1,050 records.
func TestEvictionCarriesOnce(t *testing.T) {
	cfg := sketchCfg() // floor 1,000
	cfg.Capacity, cfg.Shards = 1, 1
	l, _, _ := newTest(t, cfg)
	ovr := map[string]int64{}
	for i := range 50 {
		ovr[fmt.Sprintf("o%d", i)] = 100_000
	}
	if err := l.SetOverrides(ovr); err != nil {
		t.Fatal(err)
	}
	now := at(time.Second)
	sent := int64(0)
	for range 1000 {
		l.CheckAt(now, "a", 1)
		sent++
	}
	for i := range 50 {
		l.CheckAt(now, fmt.Sprintf("o%d", i), 1) // cached (an override): the cache is full
		l.CheckAt(now, "a", 1)
		sent++
	}
	if written := sumCounts(sweep(t, l, at(2*time.Second)), "a"); written < sent || written > sent+sent/10 {
		t.Errorf("a sent %d records; its counts handed to the tick: %d", sent, written)
	}
}

// A key promoted out of the sketch and then expired for being idle (GATE_CACHE_IDLE_TIMEOUT
// shorter than two windows: the default 300 s against a 1h rule) and seen again finds the
// counts its promotion carried still in the sketch: promoted again, it carries only what
// the first promotion did not. Before, 6,000 counts were handed to the tick for 1,005
// records.
func TestIdleExpiryCarriesOnce(t *testing.T) {
	cfg := sketchCfg() // floor 1,000
	cfg.Window = time.Hour
	cfg.IdleTimeout = 300 * time.Second
	l, _, _ := newTest(t, cfg)
	sent, written := int64(0), int64(0)
	for range 1000 {
		l.CheckAt(at(time.Second), "a", 1)
		sent++
	}
	written += sumCounts(sweep(t, l, at(2*time.Second)), "a")
	for c := range 5 {
		base := time.Duration(c+1) * 6 * time.Minute
		written += sumCounts(sweep(t, l, at(base)), "a") // idle past its timeout
		l.CheckAt(at(base+time.Second), "a", 1)
		sent++
		written += sumCounts(sweep(t, l, at(base+2*time.Second)), "a")
	}
	var last Sweep
	l.SweepAll(at(40*time.Minute), &last) // the last record's count, held as a cold team's
	written += sumCounts(&last, "a")
	if written != sent {
		t.Errorf("a sent %d records; its counts handed to the tick: %d", sent, written)
	}
}

// A key whose override predates both windows the sketch holds was never counted in it:
// promoted (at its first record, an override being always cached), it carries none of
// the noise the sketch's other keys leave in its counters, which would count against its
// own threshold (here 30 of 100 at worst).
func TestOverriddenKeysCarryNoNoise(t *testing.T) {
	cfg := sketchCfg()
	cfg.Overrides = map[string]int64{}
	for i := range 200 {
		cfg.Overrides[fmt.Sprintf("o%d", i)] = 100
	}
	l, _, _ := newTest(t, cfg)
	for i := range 400_000 {
		l.CheckAt(at(time.Second), fmt.Sprintf("u%d", i), 5)
	}
	for i := range 200 {
		l.CheckAt(at(time.Second), fmt.Sprintf("o%d", i), 1)
	}
	sw := sweep(t, l, at(2*time.Second))
	var carried, worst int64
	for i := range 200 {
		n := sumCounts(sw, fmt.Sprintf("o%d", i)) - 1
		carried += n
		worst = max(worst, n)
	}
	if carried > 0 {
		t.Errorf("200 keys with an override of 100, one record each: %d records of noise carried (worst %d)", carried, worst)
	}
}

// When the sketch's noise reaches the floor (a high load for its width: here a one-line
// sketch), every key's estimate is at its floor at its first record, so a key is promoted
// at once, carried in with its noise-corrected count (about 0). A sweep must not demote
// it by that corrected count, under an eighth of its floor, while its estimate, which
// promotes it again at its next record, is at the floor: it would cycle, its level never
// reaching the read floor, never read, and a key sending 450 records a tick (under half
// its floor of 1,000 a tick) for an hour would pass its threshold of 100,000 unlimited
// (it did). Demoted by its estimate, it stays cached, is read and limited.
func TestNoisyKeyStaysCachedAndRead(t *testing.T) {
	cfg := Config{Window: time.Hour, Threshold: 100_000, SketchWidth: 4, SyncInterval: 15 * time.Second}
	l, _, _ := newTest(t, cfg)
	// Fillers, one record each, bring every counter to the floor.
	for i := range 8000 {
		l.CheckAt(at(time.Second), fmt.Sprintf("filler-%d", i), 1)
	}
	var sent, reads int64
	limited := false
	for tick := 1; tick < 240; tick++ { // 15 s ticks through the hour
		now := at(time.Duration(tick) * 15 * time.Second)
		for range 450 {
			sent++
			if d := l.CheckAt(now, "k", 1); d.Limited {
				limited = true
			}
		}
		sw := sweep(t, l, now.Add(time.Second))
		if r := findRead(sw, "k"); r != nil {
			reads++
			// A gate alone: the fleet's count is what it wrote.
			l.ApplyRead(r, sent, 0, now.Add(time.Second))
		}
		for i := range sw.Reads {
			if sw.Reads[i].Team != "k" {
				l.ApplyRead(&sw.Reads[i], 0, 0, now.Add(time.Second))
			}
		}
	}
	if !limited {
		t.Errorf("k sent %d records in the window against a threshold of 100,000 and was never limited (read %d times)", sent, reads)
	}
}

// A check timed in an older window than a promotion before it (a routing goroutine's
// clock read of a batch begun before the boundary, another's in the next window) that
// promotes the key again, after an eviction, must not make the shard forget what the
// earlier promotion carried of the newer window: promoted once more in that window, the
// key carried those counts again, written as records it never sent. Capacity 1, so each
// overridden key's check evicts it. Before, window 2's count handed to the tick was its
// records plus the 26 its first promotion carried.
func TestStaleEpochPromotionCarriesOnce(t *testing.T) {
	cfg := sketchCfg() // floor 1,000, 1-minute windows
	cfg.Capacity, cfg.Shards = 1, 1
	l, _, _ := newTest(t, cfg)
	if err := l.SetOverrides(map[string]int64{"o0": 100_000, "o1": 100_000}); err != nil {
		t.Fatal(err)
	}
	ep2 := l.Epoch(at(120 * time.Second))
	cached := func(now time.Time) bool { _, _, ok := l.Untracked(now, "a"); return !ok }
	for range 300 { // window 0
		l.CheckAt(at(10*time.Second), "a", 1)
	}
	sweep(t, l, at(61*time.Second)) // readies window 2's counts, keeps window 0's
	for range 990 {                 // window 1, late: 995 of the sliding window's 1,000
		l.CheckAt(at(119*time.Second), "a", 1)
	}
	if cached(at(119 * time.Second)) {
		t.Fatal("a promoted in window 1")
	}
	var sent2 int64
	promote := func(now time.Time) { // window 2: until a's promotion, which carries
		for i := 0; !cached(now); i++ {
			if i == 1000 {
				t.Fatal("a never promoted")
			}
			l.CheckAt(now, "a", 1)
			sent2++
		}
	}
	promote(at(121 * time.Second))
	l.CheckAt(at(121*time.Second), "o0", 1) // evicts a
	// A check of window 1 promotes a again (window 0's 300 to carry), then is evicted.
	l.CheckAt(at(119*time.Second), "a", 10)
	if !cached(at(119 * time.Second)) {
		t.Fatal("a not promoted by its check in window 1")
	}
	l.CheckAt(at(122*time.Second), "o1", 1) // evicts a
	promote(at(122 * time.Second))
	var sw Sweep
	l.SweepAll(at(130*time.Second), &sw)
	var written2 int64
	for _, c := range sw.Counts {
		if c.Team == "a" && c.Epoch == ep2 {
			written2 += c.N
		}
	}
	if written2 != sent2 {
		t.Errorf("a sent %d records in window 2; its counts of window 2 handed to the tick: %d", sent2, written2)
	}
}

// A threshold whose floor is past what a sketch counter holds (2^32: bytes, a long
// window) still promotes a key at its floor, and limits it at its threshold: the counters
// must not wrap under the floor, leaving the key counted in the sketch, allowed, forever.
func TestFloorBeyondSketchCounterPromotes(t *testing.T) {
	const thr = 1_000_000_000_000 // a terabyte a window: floor 1e10 > 2^32
	l, _, _ := newTest(t, Config{Window: time.Hour, Threshold: thr, SketchWidth: DefaultSketchWidth})
	now := at(time.Second)
	const n = 100_000_000 // 100 MB a record
	var cached bool
	for i := range thr/n + 1 {
		d := l.CheckAt(now, "u", n)
		if l.Len() == 1 {
			cached = true
		}
		if i == thr/n && !d.Limited {
			t.Errorf("record %d at level %v: allowed, want limited at its threshold %d (cached: %v)", i+1, d.Level, int64(thr), cached)
		}
	}
	if !cached {
		t.Errorf("key of %d records never cached: its floor (%d) is past a sketch counter", int64(thr+n), int64(thr/100))
	}
}
