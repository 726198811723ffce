package limit

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestLongTeams: teams longer than an entry holds, several sharing their first bytes,
// each found again through rebuilds, and kept as copies: the caller's buffer is reused.
func TestLongTeams(t *testing.T) {
	l, err := New(Config{Threshold: 1000, Shards: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	buf := make([]byte, 0, 512)
	name := func(i int) string {
		return fmt.Sprintf("phc_shared_prefix_%d%s", i, strings.Repeat("x", i%300))
	}
	for i := range 2000 {
		buf = append(buf[:0], name(i)...)
		l.CheckAt(now, string(buf[:len(buf):len(buf)]), int64(i+1))
		// The caller's bytes change: the cache must have kept a copy.
		for j := range buf {
			buf[j] = '?'
		}
	}
	for i := range 2000 {
		s, ok := l.Snapshot(now, name(i))
		if !ok || s.Team != name(i) || s.Pending != int64(i+1) {
			t.Fatalf("team %d: %+v %v, want its own state with %d pending", i, s, ok, i+1)
		}
	}
	if l.Len() != 2000 {
		t.Errorf("Len() = %d, want 2000", l.Len())
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
