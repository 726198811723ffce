package limit

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func eventConfig(window time.Duration, thr int64) Config {
	return Config{Window: window, Threshold: thr, Clock: EventClock, MaxEventAge: 10 * time.Minute}
}

// replay checks one team's records, rate per window evenly spread over windows windows
// of event time ending at the wall clock's start, while the wall clock runs through
// windows/speed windows: a backlog caught up at speed × the normal rate. The limiter is
// swept every second of wall time, each planned read applied locally (one gate: its own
// counts are the fleet's). It returns the records limited in each window of event time.
func replay(t *testing.T, l *Limiter, clk interface{ Set(time.Time) }, event bool, rate, windows, speed int) []int {
	t.Helper()
	w := l.cfg.Window
	start := t0.Add(-time.Duration(windows) * w) // the backlog's first record
	total := rate * windows
	limited := make([]int, windows)
	lastSweep := t0
	for i := range total {
		evt := start.Add(time.Duration(i) * w / time.Duration(rate))
		wall := t0.Add(time.Duration(i) * w / time.Duration(rate*speed))
		clk.Set(wall)
		if wall.Sub(lastSweep) >= time.Second {
			sw := sweep(t, l, wall)
			for j := range sw.Reads {
				l.ApplyLocal(&sw.Reads[j], wall)
			}
			lastSweep = wall
		}
		var d Decision
		if event {
			d = l.CheckEventAt(wall, evt, "acme", 1)
		} else {
			d = l.CheckAt(wall, "acme", 1)
		}
		if d.Limited {
			limited[i/rate]++
		}
	}
	return limited
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// A gate ten windows behind catches up at ten times the normal rate: with the event clock
// a team within its limit is never limited; with the wall clock it is.
func TestEventClockBacklogReplay(t *testing.T) {
	for _, rate := range []int{600, 900} { // 60% and 90% of the limit
		ev, clk, _ := newTest(t, eventConfig(10*time.Second, 1000))
		limited := replay(t, ev, clk, true, rate, 10, 10)
		if n := sum(limited); n != 0 {
			t.Errorf("event clock, %d/window of 1000: %d records limited (by window %v), want 0", rate, n, limited)
		}
		wall, wclk, _ := newTest(t, Config{Window: 10 * time.Second, Threshold: 1000})
		wlimited := replay(t, wall, wclk, false, rate, 10, 10)
		if n := sum(wlimited); n == 0 {
			t.Errorf("wall clock, %d/window of 1000 at 10× speed: nothing limited, want the catch-up to overflow", rate)
		} else {
			t.Logf("%d/window of 1000 replayed at 10×: wall clock limited %d of %d (%.0f%%), event clock 0",
				rate, n, rate*10, 100*float64(n)/float64(rate*10))
		}
	}
}

// A team over its limit is still limited when replayed: in divert mode from the moment its
// level reaches the limit; in cap mode it gets about its limit per window.
func TestEventClockReplayLimitsTeamsOver(t *testing.T) {
	l, clk, _ := newTest(t, eventConfig(10*time.Second, 1000))
	limited := replay(t, l, clk, true, 2000, 10, 10)
	if allowed := 2000 - limited[0]; allowed < 1000 || allowed > 1001 {
		t.Errorf("divert, first window: %d allowed, want the limit (1000)", allowed)
	}
	for i, n := range limited[1:] {
		if n != 2000 {
			t.Errorf("divert, window %d: %d of 2000 limited, want all (the team sends twice its limit)", i+1, n)
		}
	}

	cfg := eventConfig(10*time.Second, 1000)
	cfg.Mode = Cap
	l, clk, _ = newTest(t, cfg)
	limited = replay(t, l, clk, true, 2000, 10, 10)
	for i, n := range limited {
		if allowed := 2000 - n; allowed < 900 || allowed > 1100 {
			t.Errorf("cap, window %d: %d allowed, want about the limit (1000)", i, allowed)
		}
	}
}

// Partitions at different lags keep to their own windows: a team at 60% in a window five
// minutes back and at 60% now is within its limit in both, and a burst in the old window
// limits the team there only.
func TestEventClockLagsDoNotMix(t *testing.T) {
	l, _, _ := newTest(t, eventConfig(10*time.Second, 1000))
	now := t0.Add(5 * time.Second)
	old := t0.Add(-5 * time.Minute)
	for i := range 600 {
		off := time.Duration(i) * 5 * time.Second / 600 // both halfway through their windows
		if d := l.CheckEventAt(now, old.Add(off), "acme", 1); d.Limited {
			t.Fatalf("lagging partition: record %d limited at level %.0f", i, d.Level)
		}
		if d := l.CheckEventAt(now, t0.Add(off), "acme", 1); d.Limited {
			t.Fatalf("live partition: record %d limited at level %.0f", i, d.Level)
		}
	}
	// The same records on the wall clock add up to 120%: the limit is reached.
	w, _, _ := newTest(t, Config{Window: 10 * time.Second, Threshold: 1000})
	var wl int
	for range 1200 {
		if w.CheckAt(now, "acme", 1).Limited {
			wl++
		}
	}
	if wl == 0 {
		t.Error("wall clock: 1200 records in one window were all allowed")
	}

	// A burst in the old window limits it, not the live one.
	for range 500 {
		l.CheckEventAt(now, old.Add(6*time.Second), "acme", 1)
	}
	if d := l.CheckEventAt(now, old.Add(7*time.Second), "acme", 1); !d.Limited {
		t.Errorf("lagging partition after a burst: level %.0f, want limited", d.Level)
	}
	if d := l.CheckEventAt(now, t0.Add(6*time.Second), "acme", 1); d.Limited {
		t.Errorf("live partition after the lagging one's burst: limited at level %.0f", d.Level)
	}
}

// Timestamps older than MaxEventAge count as that old; ones ahead of the wall clock by
// more than MaxFutureSkew count as now; both are counted in the metric.
func TestEventClockClamps(t *testing.T) {
	l, _, reg := newTest(t, eventConfig(10*time.Second, 1000))
	now := t0.Add(time.Minute)
	l.CheckEventAt(now, now.Add(-24*time.Hour), "old", 1)
	l.CheckEventAt(now, now.Add(-10*time.Minute-time.Nanosecond), "old", 1)
	l.CheckEventAt(now, now.Add(-10*time.Minute+time.Second), "edge", 1) // within the bound
	l.CheckEventAt(now, now.Add(time.Hour), "future", 1)
	l.CheckEventAt(now, now.Add(MaxFutureSkew/2), "skew", 1) // within the skew
	l.CheckEventAt(now, time.Time{}, "zero", 1)

	if v := metricValue(t, reg, "gate_limiter_event_time_clamped_total", map[string]string{"reason": "too_old"}); v != 2 {
		t.Errorf("too_old clamps: %v, want 2", v)
	}
	if v := metricValue(t, reg, "gate_limiter_event_time_clamped_total", map[string]string{"reason": "future"}); v != 1 {
		t.Errorf("future clamps: %v, want 1", v)
	}
	sw := sweep(t, l, now)
	got := map[string]map[int64]int64{}
	for _, c := range sw.Counts {
		if got[c.Team] == nil {
			got[c.Team] = map[int64]int64{}
		}
		got[c.Team][c.Epoch] += c.N
	}
	want := map[string]map[int64]int64{
		"old":    {l.Epoch(now.Add(-10 * time.Minute)): 2},
		"edge":   {l.Epoch(now.Add(-10*time.Minute + time.Second)): 1},
		"future": {l.Epoch(now): 1},
		"skew":   {l.Epoch(now.Add(MaxFutureSkew / 2)): 1},
		"zero":   {l.Epoch(now): 1},
	}
	for team, eps := range want {
		for ep, n := range eps {
			if got[team][ep] != n {
				t.Errorf("%s: counts %v, want %d in epoch %d", team, got[team], n, ep)
			}
		}
	}
}

// A read sets the window's count and the one before; the next check is judged on them.
func TestEventClockReadsPerWindow(t *testing.T) {
	cfg := eventConfig(10*time.Second, 1000)
	l, _, _ := newTest(t, cfg)
	now := t0.Add(time.Minute)
	old := t0.Add(-2 * time.Minute) // window start
	for range 20 {                  // 2% of the limit: above the sync floor
		l.CheckEventAt(now, old.Add(time.Second), "acme", 1)
	}
	sw := sweep(t, l, now)
	if len(sw.Counts) != 1 || sw.Counts[0].Epoch != l.Epoch(old) || sw.Counts[0].N != 20 {
		t.Fatalf("counts %+v, want 20 in epoch %d", sw.Counts, l.Epoch(old))
	}
	r := findRead(sw, "acme")
	if r == nil || r.Epoch != l.Epoch(old) || r.Reason != ReadFirst {
		t.Fatalf("reads %+v, want a first read of acme in epoch %d", sw.Reads, l.Epoch(old))
	}
	// The fleet counted 700 in the window (our 20 included) and 400 in the one before.
	l.ApplyRead(r, 700, 400, now)
	d := l.CheckEventAt(now, old.Add(5*time.Second), "acme", 0) // halfway
	if want := 400*0.5 + 700; d.Level != want {
		t.Errorf("level after the read: %.1f, want %.1f", d.Level, want)
	}
	// The next window's first entry starts from this gate's view of this one.
	d = l.CheckEventAt(now, old.Add(10*time.Second), "acme", 0)
	if d.Level != 700 {
		t.Errorf("level at the next window's start: %.1f, want 700 (the window before, seeded)", d.Level)
	}
	if d.Limited {
		t.Error("limited at 70%")
	}
}

// Windows older than MaxEventAge, and emptied ones, are dropped; the metrics never go back.
func TestEventClockDropsOldWindows(t *testing.T) {
	cfg := eventConfig(10*time.Second, 1000)
	cfg.MaxEventAge = time.Minute
	l, _, reg := newTest(t, cfg)
	for i := range 5 {
		l.CheckEventAt(t0, t0.Add(-time.Duration(i)*10*time.Second), "acme", 1)
	}
	if l.Len() != 5 {
		t.Fatalf("Len %d, want 5 (one entry per window)", l.Len())
	}
	misses := metricValue(t, reg, "gate_limiter_cache_total", map[string]string{"result": "miss"})
	sw := sweep(t, l, t0.Add(time.Second))
	if len(sw.Counts) != 5 {
		t.Fatalf("counts %+v, want 5 windows", sw.Counts)
	}
	// Three minutes on, nothing seen: every entry idles out and its table is dropped.
	sweep(t, l, t0.Add(3*time.Minute))
	sweep(t, l, t0.Add(3*time.Minute+time.Second))
	if l.Len() != 0 {
		t.Errorf("Len %d after the entries idled out, want 0", l.Len())
	}
	for i := range l.ring {
		if tb := l.ring[i].Load(); tb != nil {
			t.Errorf("ring slot %d still holds window %d", i, tb.epoch)
		}
	}
	if m := metricValue(t, reg, "gate_limiter_cache_total", map[string]string{"result": "miss"}); m != misses {
		t.Errorf("cache misses went from %v to %v as tables were dropped", misses, m)
	}
}

// Counts are conserved under concurrent checks across windows and sweeps: every record
// counted is handed to the tick once, in its own window.
func TestEventClockConcurrentConservation(t *testing.T) {
	cfg := eventConfig(time.Second, 1_000_000)
	l, _, _ := newTest(t, cfg)
	const workers, perWorker = 4, 20_000
	var got sync.Map // epoch → *atomic.Int64
	var stop atomic.Bool
	var sweeps sync.WaitGroup
	now := t0.Add(time.Minute)
	collect := func(sw *Sweep) {
		for _, c := range sw.Counts {
			v, _ := got.LoadOrStore(c.Epoch, new(atomic.Int64))
			v.(*atomic.Int64).Add(c.N)
		}
	}
	sweeps.Go(func() {
		sw := new(Sweep)
		for !stop.Load() {
			l.Sweep(now, sw)
			collect(sw)
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				// Each worker is a partition at its own lag, over 10 windows.
				evt := now.Add(-time.Duration(w*10+i%10) * time.Second)
				l.CheckEventAt(now, evt, teams[i%64], 1)
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	sweeps.Wait()
	sw := new(Sweep)
	l.SweepAll(now, sw)
	collect(sw)
	var total int64
	got.Range(func(k, v any) bool {
		n := v.(*atomic.Int64).Load()
		total += n
		if n != perWorker/10 {
			t.Errorf("epoch %d: %d counted, want %d", k, n, perWorker/10)
		}
		return true
	})
	if total != workers*perWorker {
		t.Errorf("%d counted in all, want %d", total, workers*perWorker)
	}
}

var teams = func() []string {
	ts := make([]string, 64)
	for i := range ts {
		ts[i] = "team-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return ts
}()

func TestParseClock(t *testing.T) {
	for in, want := range map[string]Clock{"wall": WallClock, "": WallClock, "Event": EventClock} {
		if got, err := ParseClock(in); err != nil || got != want {
			t.Errorf("ParseClock(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseClock("processing"); err == nil {
		t.Error("ParseClock(processing): no error")
	}
	if _, err := New(Config{Clock: EventClock, Window: time.Millisecond, MaxEventAge: time.Hour}, nil, nil); err == nil {
		t.Error("an hour of 1 ms windows: no error")
	}
	if _, err := New(Config{Clock: EventClock, MaxEventAge: -time.Second}, nil, nil); err == nil {
		t.Error("negative max event age: no error")
	}
}

// BenchmarkCheckEventClock compares the event-clock check with the wall-clock one on the
// same Zipf keys, each record a few seconds old (one window), serial and parallel.
func BenchmarkCheckEventClock(b *testing.B) {
	const nkeys = 1 << 20
	keys := zipfKeys(nkeys, benchTeams)
	mask := len(keys) - 1
	for _, clk := range []Clock{WallClock, EventClock} {
		l, err := New(Config{Threshold: 1 << 40, Clock: clk}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		at := now.Add(-3 * time.Second)
		for _, k := range keys {
			l.CheckEventAt(now, at, k, 1)
		}
		for _, par := range []bool{false, true} {
			name := clk.String() + "/serial"
			if par {
				name = clk.String() + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				body := func(pb interface{ Next() bool }) {
					i := 0
					var any bool
					for pb.Next() {
						any = any != l.CheckEventAt(now, at, keys[i&mask], 1).Limited
						i++
					}
					sinkBool.Store(any)
				}
				if par {
					b.RunParallel(func(pb *testing.PB) { body(pb) })
				} else {
					body(loopNext{b: b})
				}
			})
		}
	}
}

// A window's table starts sized for the window before's keys: refilled with the same keys,
// nearly no shard's table is rebuilt. Each table started at the smallest size, and every
// shard rebuilt its table a dozen times over as a window filled (a replay spent an eighth
// of its time there).
func TestEventClockWindowTableSizedFromTheLast(t *testing.T) {
	l, _, _ := newTest(t, eventConfig(time.Minute, MaxThreshold))
	const keys = 20_000
	key := func(i int) string { return "team-" + strconv.Itoa(i) }
	fill := func(at time.Time) {
		for i := range keys {
			l.CheckEventAt(at, at, key(i), 1)
		}
	}
	e0 := t0.Truncate(time.Minute)
	fill(e0)
	e1 := e0.Add(time.Minute)
	l.CheckEventAt(e1, e1, key(0), 1) // makes the next window's table
	tbl := l.tableIfAny(floorDiv(e1.UnixNano(), l.windowNs))
	if tbl == nil {
		t.Fatal("no table for the next window")
	}
	before := make([]*table, len(tbl.shards))
	for i := range tbl.shards {
		before[i] = tbl.shards[i].idx.tab.Load()
	}
	fill(e1)
	rebuilt := 0
	for i := range tbl.shards {
		if tbl.shards[i].idx.tab.Load() != before[i] {
			rebuilt++
		}
	}
	if rebuilt > len(tbl.shards)/10 {
		t.Errorf("%d of %d shards rebuilt their table refilling the window before's %d keys, want under a tenth", rebuilt, len(tbl.shards), keys)
	}
}

// Under the event clock a window's full cache never evicts a key over half its
// threshold, and keeping every key it looks at grows past its capacity as the wall
// clock's does, saying so alike: gate_limiter_cache_overfull_total and Sweep.Overfull,
// which the tick logs. Before, eviction read an event entry's level as a wall-clock
// entry's (0 here) and evicted such keys, their counts starting afresh, and neither
// figure counted the windows' caches.
func TestEventCacheOverfullCounted(t *testing.T) {
	cfg := eventConfig(time.Minute, 10)
	cfg.Capacity, cfg.Shards = 1, 1
	l, _, reg := newTest(t, cfg)
	for _, k := range []string{"a", "b", "c"} {
		for range 6 { // over half of 10: never evicted
			l.CheckEventAt(t0, t0, k, 1)
		}
	}
	if n := l.Len(); n != 3 {
		t.Errorf("%d keys cached, want the 3, each at 6 of 10", n)
	}
	sw := sweep(t, l, t0.Add(time.Second))
	if sw.Overfull == 0 {
		t.Errorf("Sweep.Overfull = 0 with 3 keys in a cache of 1 that may evict none")
	}
	if got := metricValue(t, reg, "gate_limiter_cache_overfull_total", nil); got == 0 {
		t.Errorf("gate_limiter_cache_overfull_total = 0")
	}
}

// GATE_CACHE_CAPACITY bounds each window's cache under the event clock, and a key idle
// in a window stays cached there up to two windows, so gate_limiter_cache_entries (every
// window's keys) reaches the capacity with each window's cache far under it.
// gate_limiter_cache_fullest_entries is what the capacity is held to: the fullest
// window's keys (the one cache's under the wall clock), which an alert compares with it.
// Before, only the sum was exported, and the chart's alert fired on it.
func TestCacheFullestEntries(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cfg           Config
		entries, full float64
	}{
		{"event", eventConfig(time.Minute, 1000), 10, 6},
		{"wall", Config{Window: time.Minute, Threshold: 1000}, 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Capacity = 10
			l, _, reg := newTest(t, tc.cfg)
			for i := range 6 { // the window before: 6 keys
				l.CheckEventAt(t0, t0.Add(-time.Minute), "a"+strconv.Itoa(i), 1)
			}
			for i := range 4 { // this one: 4
				l.CheckEventAt(t0, t0, "b"+strconv.Itoa(i), 1)
			}
			if got := metricValue(t, reg, "gate_limiter_evictions_total", map[string]string{"reason": "capacity"}); got != 0 {
				t.Fatalf("%v keys evicted for capacity, want none", got)
			}
			if got := metricValue(t, reg, "gate_limiter_cache_entries", nil); got != tc.entries {
				t.Errorf("gate_limiter_cache_entries = %v, want %v", got, tc.entries)
			}
			if got := metricValue(t, reg, "gate_limiter_cache_fullest_entries", nil); got != tc.full {
				t.Errorf("gate_limiter_cache_fullest_entries = %v, want %v (capacity %d)", got, tc.full, tc.cfg.Capacity)
			}
			// The sweep says the same, for the tick's log of a cache past its capacity.
			if sw := sweep(t, l, t0); sw.Fullest != int(tc.full) || sw.Entries != int(tc.entries) {
				t.Errorf("Sweep.Fullest = %d, Entries = %d; want %v and %v", sw.Fullest, sw.Entries, tc.full, tc.entries)
			}
		})
	}
}

// A full window's cache under the event clock judges a key as a check in the window can:
// a lagging partition's records, early in their window whatever the wall clock, weigh
// nearly all of the window before. A key at 7.2 of 10 so (8 the window before, 6 s into
// this one) is over half its threshold and never evicted: cap mode admits it 3 more
// records. Before, eviction weighed the window before by the wall clock's progress (none
// of it, minutes later), evicted the key at each new one, and admitted it 15.
func TestEventEvictionOfLaggingKey(t *testing.T) {
	cfg := eventConfig(time.Minute, 10)
	cfg.Capacity, cfg.Shards, cfg.Mode = 1, 1, Cap
	l, _, _ := newTest(t, cfg)
	wall := t0.Add(5 * time.Minute)
	for range 8 {
		l.CheckEventAt(wall, t0.Add(-30*time.Second), "a", 1)
	}
	ev := t0.Add(6 * time.Second)
	admitted := 0
	for round := range 5 {
		for range 10 {
			if d := l.CheckEventAt(wall, ev, "a", 1); !d.Limited {
				admitted++
			}
		}
		l.CheckEventAt(wall, ev, "b"+strconv.Itoa(round), 1)
	}
	if admitted != 3 {
		t.Errorf("a, at 7.2 of 10 at its first record in the window, admitted %d more, want 3", admitted)
	}
}
