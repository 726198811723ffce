package limit

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/capturegate/gate/internal/spike"
)

// TestLearnedThresholdNotLostInAnOverrideSwap: a check refreshing a team's threshold word
// after a live-override swap (a new generation) read the learned threshold, and the tick's
// change of it (setLearned) landed before the check stored the word: the tick's store found
// the word of the old generation and left it to the check, which stored the old value
// under the new one. Checks then used the static threshold for a team learned at the floor,
// until its learned value or the overrides changed again (a review: within 1,500 rounds;
// the view said "100 from learned" meanwhile). A race, tried many times over.
func TestLearnedThresholdNotLostInAnOverrideSwap(t *testing.T) {
	l := adaptiveLimiter(t, Config{})
	now := adaptT0
	l.CheckAt(now, "t", 1)
	learn(t, l, now, "t", 10) // the floor, 100
	h := hashOf(l, "t")
	sh := &l.shards[h&l.mask]
	e, _ := sh.idx.tab.Load().lookup(h, "t")
	ls := l.adapt.of(e)
	learnedProf := ls.prof
	ep := l.Epoch(now)
	var round, done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a partition worker's check, once a round, as the swap lands
		for r := int64(1); ; r++ {
			for round.Load() < r {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
			}
			l.CheckAt(now, "t", 0)
			done.Store(r)
		}
	}()
	for i := int64(1); i <= 20_000; i++ {
		sh.mu.Lock()
		ls.prof = spike.Profile{} // not learned: the static threshold
		l.setLearned(e, "t", ls, ep)
		sh.mu.Unlock()
		if err := l.SetOverrides(map[string]int64{"other": i%1000 + 1}); err != nil {
			t.Fatal(err)
		}
		round.Store(i) // the check refreshes the word of the new generation
		sh.mu.Lock()
		ls.prof = learnedProf // learned: 100
		l.setLearned(e, "t", ls, ep)
		sh.mu.Unlock()
		for done.Load() < i {
			runtime.Gosched()
		}
		if d := l.CheckAt(now, "t", 0); d.Threshold != 100 {
			t.Fatalf("round %d: checks use threshold %d, the team's learned threshold is %d", i, d.Threshold, ls.thr.Load())
		}
	}
}
