package limit

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/capturegate/gate/internal/clock"
)

// TestIndexConcurrent churns a small cache (inserts, capacity evictions, table rebuilds,
// idle expiry by sweeps) while other goroutines check: a check must always get its own
// team's entry, and the index must agree with Len afterwards.
func TestIndexConcurrent(t *testing.T) {
	l, err := New(Config{Threshold: 1000, Capacity: 300, Shards: 4, IdleTimeout: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	teams := make([]string, 2000)
	for i := range teams {
		teams[i] = fmt.Sprintf("team-%d", i)
		if i%3 == 0 {
			teams[i] += "-with-a-name-longer-than-an-entry-holds"
		}
	}
	base := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20_000 {
				team := teams[(i*7+g*131)%len(teams)]
				now := base.Add(time.Duration(i) * time.Millisecond)
				l.CheckAt(now, team, 1)
				h := hashOf(l, team)
				tab := l.shards[h&l.mask].idx.tab.Load()
				if e, _ := tab.lookup(h, team); e != nil && tab.team(e) != team {
					t.Errorf("lookup(%q) = entry of %q", team, tab.team(e))
					return
				}
			}
		})
	}
	wg.Go(func() {
		var sw Sweep
		for i := range 50 {
			l.Sweep(base.Add(time.Duration(i)*400*time.Millisecond), &sw)
		}
	})
	wg.Wait()
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		live := 0
		tab := sh.idx.tab.Load()
		sh.idx.all(func(_ uint32, e *entry, team string) bool {
			h := hashOf(l, team)
			if h&l.mask != uint64(i) {
				t.Errorf("%q is in shard %d, its hash says %d", team, i, h&l.mask)
			}
			if got, _ := tab.lookup(h, team); got != e {
				t.Errorf("%q: its lookup finds another slot than its own", team)
			}
			live++
			return true
		})
		if live != sh.idx.len() {
			t.Errorf("shard %d: %d live slots, index says %d", i, live, sh.idx.len())
		}
		n += live
		sh.mu.Unlock()
	}
	if n != l.Len() || n > 300 {
		t.Errorf("index holds %d teams, Len() = %d, capacity 300", n, l.Len())
	}
}

// TestMovesLoseNoCount checks from several goroutines while the cache grows (each table
// rebuilt many times), evicts at capacity and expires idle teams, and sweeps as the tick
// does: every record counted must reach the tick exactly once. A check whose entry a
// rebuild copied or a removal drained just before it counted must count again in the
// team's current entry; one that counted before the copy must not.
func TestMovesLoseNoCount(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{
		{"wall", Config{Mode: Divert, Window: 24 * time.Hour, Threshold: MaxThreshold, Capacity: 500, Shards: 2, IdleTimeout: time.Second}},
		{"event", Config{Mode: Divert, Window: 24 * time.Hour, Threshold: MaxThreshold, Capacity: 500, Shards: 2, Clock: EventClock, MaxEventAge: 24 * time.Hour, IdleTimeout: time.Second}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			l, err := New(mode.cfg, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			const goroutines, perG = 4, 30_000
			var counted, swept atomic.Int64
			stop := make(chan struct{})
			sweeper := make(chan struct{})
			go func() {
				defer close(sweeper)
				var sw Sweep
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					// Every tenth sweep a second later: teams idle for a second expire.
					if i%10 == 0 {
						clk.Advance(time.Second)
					}
					l.Sweep(clk.Now(), &sw)
					for _, c := range sw.Counts {
						swept.Add(c.N)
					}
					swept.Add(sw.Stale)
				}
			}()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range perG {
						// Teams come and go: each goroutine moves through 3,000 of them,
						// a few hot ones kept busy throughout; one in three is longer
						// than an entry holds inline.
						team := fmt.Sprintf("t%d", (i/10+g*7)%3000)
						if i%3 == 0 {
							team = "a-longer-team-" + team
						}
						if i%4 == 0 {
							team = fmt.Sprintf("hot-%d", i%8)
						}
						now := clk.Now()
						l.CheckEventAt(now, now, team, 1)
						counted.Add(1)
					}
				})
			}
			wg.Wait()
			close(stop)
			<-sweeper
			var sw Sweep
			l.SweepAll(clk.Now(), &sw)
			for _, c := range sw.Counts {
				swept.Add(c.N)
			}
			swept.Add(sw.Stale)
			if got, want := swept.Load(), counted.Load(); got != want {
				t.Errorf("the sweeps handed the tick %d records, checks counted %d", got, want)
			}
		})
	}
}

// TestLongTeams: teams longer than an entry holds (in the table's arena), several sharing
// their first bytes, of lengths whose length prefix takes one, two and three bytes, one
// larger than a new arena, each found again through arena growths and rebuilds, and kept
// as copies: the caller's bytes alias a buffer it reuses, as the router's alias a record's.
// A team's string taken from the cache stays as it was through all of it.
func TestLongTeams(t *testing.T) {
	l, err := New(Config{Threshold: 1000, Shards: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	buf := make([]byte, 0, 1<<17)
	name := func(i int) string {
		if i == 1000 {
			return "phc_shared_prefix_huge_" + strings.Repeat("h", 100_000)
		}
		return fmt.Sprintf("phc_shared_prefix_%d%s", i, strings.Repeat("x", i%300))
	}
	var taken []string // strings from the cache, taken as it grows
	for i := range 2000 {
		buf = append(buf[:0], name(i)...)
		l.CheckAt(now, unsafe.String(&buf[0], len(buf)), int64(i+1))
		// The caller's bytes change: the cache must have kept a copy.
		for j := range buf {
			buf[j] = '?'
		}
		if i%97 == 0 {
			s, ok := l.Snapshot(now, name(i))
			if !ok {
				t.Fatalf("team %d not cached", i)
			}
			taken = append(taken, s.Team)
		}
	}
	for i := range 2000 {
		s, ok := l.Snapshot(now, name(i))
		if !ok || s.Team != name(i) || s.Pending != int64(i+1) {
			t.Fatalf("team %d: %+v %v, want its own state with %d pending", i, s, ok, i+1)
		}
	}
	for k, s := range taken {
		if s != name(k*97) {
			t.Errorf("the string taken for team %d changed to %.40q", k*97, s)
		}
	}
	if l.Len() != 2000 {
		t.Errorf("Len() = %d, want 2000", l.Len())
	}
}

// TestArenaTagCollision: a long team whose hash tag and length match an entry's is still
// compared byte for byte; and a rebuild keeps the arena in the order teams were first
// cached, not the order of the new table's slots.
func TestArenaTagCollision(t *testing.T) {
	tab := newTable(minTableSize)
	a, b := "a-team-longer-than-inline", "b-team-longer-than-inline"
	const h = 0x0123456789abcdef
	e := &tab.ents[0]
	tab.setTeam(e, h, a)
	e.state.Store(stateLive)
	if !tab.isLong(e, h, a) {
		t.Fatal("the entry is not its own team's")
	}
	if tab.isLong(e, h, b) {
		t.Fatal("a team of the same length and tag taken for another")
	}
	if off, tag := e.arenaRef(); off != 0 || tag != arenaTag(h) {
		t.Errorf("arenaRef = %d, %#x; want 0, %#x", off, tag, arenaTag(h))
	}

	l, err := New(Config{Threshold: 1000, Shards: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	team := func(i int) string { return fmt.Sprintf("team-cached-in-order-%04d", i) }
	for i := range 500 {
		l.CheckAt(now, team(i), 1)
	}
	sh := &l.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tab = sh.idx.tab.Load()
	last := -1
	for i := range 500 {
		h := hashOf(l, team(i))
		e, _ := tab.lookup(h, team(i))
		if e == nil {
			t.Fatalf("%s not found", team(i))
		}
		off, _ := e.arenaRef()
		if int(off) <= last {
			t.Fatalf("%s at arena offset %d, before the team cached before it (%d)", team(i), off, last)
		}
		last = int(off)
	}
}

// TestReadFollowsMove: a read planned by a sweep is applied to its team's entry wherever a
// rebuild moved it since; not to a new entry of the same team made after the first left
// the cache, whose counts the read does not account for.
func TestReadFollowsMove(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	l, err := New(Config{Threshold: 1000, Shards: 1, Capacity: 100_000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	l.CheckAt(now, "moved", 500)
	l.CheckAt(now, "gone", 500)
	var sw Sweep
	l.Sweep(now, &sw)
	reads := map[string]*Read{}
	for i := range sw.Reads {
		reads[sw.Reads[i].Team] = &sw.Reads[i]
	}
	if reads["moved"] == nil || reads["gone"] == nil {
		t.Fatalf("reads planned: %+v, want both teams first reads", sw.Reads)
	}
	before := l.shards[0].idx.tab.Load()
	for i := range 1000 { // several rebuilds
		l.CheckAt(now, fmt.Sprintf("filler-%d", i), 1)
	}
	if l.shards[0].idx.tab.Load() == before {
		t.Fatal("no rebuild")
	}
	// "gone" leaves the cache and comes back: a new entry, 1 pending.
	sh := &l.shards[0]
	sh.mu.Lock()
	h := hashOf(l, "gone")
	e, _ := sh.idx.tab.Load().lookup(h, "gone")
	sh.idx.remove(e)
	l.count.Add(-1)
	sh.mu.Unlock()
	l.CheckAt(now, "gone", 1)

	l.ApplyRead(reads["moved"], 700, 0, now)
	l.ApplyRead(reads["gone"], 700, 0, now)
	if s, _ := l.Snapshot(now, "moved"); s.ReadAt.IsZero() || s.Estimate != 700 || s.Pending != 0 {
		t.Errorf("moved: %+v, want the read applied (estimate 700, nothing pending)", s)
	}
	if s, _ := l.Snapshot(now, "gone"); !s.ReadAt.IsZero() || s.Pending != 1 {
		t.Errorf("gone: %+v, want the new entry untouched (never read, 1 pending)", s)
	}
}

func hashOf(l *Limiter, team string) uint64 { return maphash.String(l.seed, team) }

// Prefetch reads the index without a lock while inserts grow and rebuild it: it must
// neither race nor cache anything (Len is the keys checked, not those prefetched), on a
// limiter past prefetchKeys, one under it and one on the event clock.
func TestPrefetchCachesNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		keys int
	}{
		{"wall", Config{Threshold: 1000, Shards: 4}, prefetchKeys + 4000},
		{"small", Config{Threshold: 1000, Shards: 4}, 100},
		{"event", Config{Threshold: 1000, Shards: 4, Clock: EventClock, MaxEventAge: time.Minute}, prefetchKeys + 4000},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _, _ := newTest(t, c.cfg)
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := range c.keys {
					l.CheckAt(at(time.Second), fmt.Sprintf("team-%d", i), 1)
				}
			})
			for i := range 3 * c.keys {
				l.Prefetch(fmt.Sprintf("absent-%d", i))
				l.Prefetch(fmt.Sprintf("team-%d", i%c.keys))
			}
			wg.Wait()
			if n := l.Len(); n != c.keys {
				t.Errorf("Len %d after %d keys checked and others prefetched, want %d", n, c.keys, c.keys)
			}
		})
	}
}
