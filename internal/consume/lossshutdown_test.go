package consume

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShutdownNotHeldByLossLookup: at least once, a gate looking up where its input
// partition's log starts after an out-of-range fetch (loss.go) stops within
// ShutdownTimeout + 2 × RevokeTimeout when the broker holds the lookup, as the package
// doc promises whatever hangs. Before, the lookups ran under a context of their own, 10 s
// whatever the shutdown (lossLookupTimeout), and held the poll loop, so Run, that long.
func TestShutdownNotHeldByLossLookup(t *testing.T) {
	t.Parallel()
	const first, more = 20, 30
	env := newEnv(t, 1)
	env.ccfg.ShutdownTimeout = time.Second
	env.ccfg.RevokeTimeout = 500 * time.Millisecond
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, first)
	a := env.start(t, "a")
	waitCommitted(t, env.cluster, 1, 20*time.Second)
	a.stop(t)

	// The group away, its records deleted: its committed offset is below the log start.
	produceTo(t, prod, 0, 100, more)
	if err := env.cluster.DeleteRecords(inTopic, 0, env.cluster.PartitionInfo(inTopic, 0).HighWatermark); err != nil {
		t.Fatal(err)
	}
	// The gate's lookup of the log start is held at the broker until the test ends.
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var held atomic.Int64
	env.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if len(req.Topics) == 1 && req.Topics[0].Topic == inTopic && len(req.Topics[0].Partitions) == 1 &&
			req.Topics[0].Partitions[0].Timestamp == -2 && held.Add(1) == 1 {
			env.cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	b := env.start(t, "a")
	waitFor(t, 20*time.Second, "the gate's lookup of the log start held", func() bool { return held.Load() > 0 })
	began := time.Now()
	b.cancel()
	b.cancel = nil
	bound := env.ccfg.ShutdownTimeout + 2*env.ccfg.RevokeTimeout + 2*time.Second // the producer's close, slack
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if took := time.Since(began); took > bound {
			t.Errorf("Run returned %v after its context ended, want within %v: the lookup held the shutdown", took.Round(time.Millisecond), bound)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s")
	}
}
