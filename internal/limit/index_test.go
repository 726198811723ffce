package limit

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"time"
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
				if e, _, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, team); e != nil && e.team() != team {
					t.Errorf("lookup(%q) = entry of %q", team, e.team())
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
		sh.idx.all(func(h uint64, _ uint32, e *entry) bool {
			if got := hashOf(l, e.team()) &^ seenMask; got != h {
				t.Errorf("slot hash of %q = %x, want %x", e.team(), h, got)
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

func hashOf(l *Limiter, team string) uint64 { return maphash.String(l.seed, team) }
