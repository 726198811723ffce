package limit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/jellydator/ttlcache/v3"
)

// The stack names jellydator/ttlcache for the entity cache. These measure it doing that
// job, beside the limiter's own sharded index, so the choice rests on figures
// (docs/benchmarks.md, "Why not ttlcache on the per-record path").

func newTTLCache(capacity int) *ttlcache.Cache[string, *entry] {
	return ttlcache.New(
		ttlcache.WithCapacity[string, *entry](uint64(capacity)),
		ttlcache.WithTTL[string, *entry](DefaultIdleTimeout), // idle expiry: Get extends it
	)
}

// BenchmarkTTLCacheGet is the lookup the check would do if ttlcache held the entries:
// Get moves the item in its LRU list and its expiry heap under one exclusive lock.
func BenchmarkTTLCacheGet(b *testing.B) {
	keys := zipfKeys(1<<20, benchTeams)
	c := newTTLCache(DefaultCapacity)
	for _, k := range keys {
		if !c.Has(k) {
			c.Set(k, new(entry), ttlcache.DefaultTTL)
		}
	}
	mask := len(keys) - 1
	b.Run("serial", func(b *testing.B) {
		i := rand.IntN(len(keys))
		for b.Loop() {
			if c.Get(keys[i&mask]) == nil {
				b.Fatal("miss")
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(keys))
			for pb.Next() {
				if c.Get(keys[i&mask]) == nil {
					b.Error("miss")
					return
				}
				i++
			}
		})
	})
}

// TestTTLCacheMemoryPerTeam reports heap per team if ttlcache owned the entries, beside
// the limiter's own (TestMemoryPerTeam).
func TestTTLCacheMemoryPerTeam(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory comparison: not a behaviour test, run without the race detector (make test-norace)")
	}
	const teams = 300_000
	names := make([]string, teams)
	for i := range names {
		names[i] = fmt.Sprintf("team-%d", i)
	}
	before := heapInUse()
	c := newTTLCache(teams)
	for _, k := range names {
		c.Set(k, new(entry), ttlcache.DefaultTTL)
	}
	after := heapInUse()
	if c.Len() != teams {
		t.Fatalf("cached %d, want %d", c.Len(), teams)
	}
	runtime.KeepAlive(c)
	ours := memoryPerTeam(t, teams, 0)
	t.Logf("heap per cached team at 300k teams: ttlcache-owned %.1f bytes, limiter's index %.1f bytes",
		float64(after-before)/teams, ours)
}
