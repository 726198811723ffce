package consume

import (
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestProduceProblemRacingARecoveryIsCleared: a produce problem on one topic recorded
// while another topic's clears must be cleared in turn by its own topic's next
// acknowledgement. produceRecovered stored produceBlocked from an emptiness it read
// before the store, so a problem set in between (its own store of true overwritten by
// the false) was left recorded with produceBlocked false: no acknowledgement checked for
// it any more, and the gate stayed not ready naming a topic that wrote again.
func TestProduceProblemRacingARecoveryIsCleared(t *testing.T) {
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	c := &Consumer{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	stuck := 0
	for range rounds {
		c.produceProblem("x", kerr.TopicAuthorizationFailed)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; c.producedOK("x") })
		wg.Go(func() { <-start; runtime.Gosched(); c.produceProblem("y", kerr.TopicAuthorizationFailed) })
		close(start)
		wg.Wait()
		c.producedOK("y") // y writes again: its problem goes
		if !c.problems.empty() {
			stuck++
			c.problems.clear(func(string) bool { return true })
			c.produceBlocked.Store(false)
		}
	}
	if stuck > 0 {
		t.Fatalf("%d of %d rounds left a produce problem recorded after its topic wrote again (produceBlocked false while one is set)", stuck, rounds)
	}
}
