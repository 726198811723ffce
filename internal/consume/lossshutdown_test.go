package consume

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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

// TestShutdownAwaitsStoppedPartitionsInFlight: at least once, a partition stopped at a
// gap (GATE_ON_DATA_LOSS=stop) may still have records of its polls before the gap in
// flight; the shutdown awaits them as any partition's (up to ShutdownTimeout), and the
// final commit covers them: the partition's next owner starts at the gap, and they are
// written once. Before, the shutdown skipped a stopped partition's records (as the
// record an undeliverable stop leaves for good is never acknowledged): they were
// abandoned unsaid ("abandoned_records":0), left uncommitted, and written again by the
// next owner.
func TestShutdownAwaitsStoppedPartitionsInFlight(t *testing.T) {
	t.Parallel()
	const first, inflight, more, deleted = 20, 10, 60, 40
	env := newEnv(t, 1)
	env.ccfg.OnDataLoss = DataLossStop
	logs := &syncBuffer{}
	env.logs = logs
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, first)
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	// Produces to the accepted topic are held at the broker from here until released.
	held, free := holdProduces(t, env, accTopic)
	produceTo(t, prod, 0, 100, inflight) // ids 100..109 at offsets 20..29, their produce held
	waitFor(t, 20*time.Second, "the produce of offsets 20..29 held", func() bool { return held.Load() > 0 })

	// Then a gap at the gate's position, 30.
	pos := stopAtAGap(t, env, g, prod, more, deleted)

	// Shut down with the produce still held. It is released when the gate leaves the
	// group (the shutdown over: too late), or after a while (a shutdown that waits).
	shutDownHeld(t, env, g, free)
	if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; !ok || gc.Offset != pos {
		t.Errorf("partition 0 committed at %v, want %d: the records before the gap, in flight at the shutdown, awaited and committed", gc.Offset, pos)
	}
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"consumer stopped"`) || strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) {
			t.Logf("%s", l)
		}
	}
}

// TestShutdownAwaitsStoppedPartitionsOutcomeRows: at least once with outcomes on, a
// partition stopped at a gap (GATE_ON_DATA_LOSS=stop) whose records before the gap are
// acknowledged while their outcome rows are still with the broker: the shutdown awaits
// those rows as any partition's (up to ShutdownTimeout), and the final commit covers the
// records, the partition's next owner starting at the gap. Before, the shutdown left a
// stopped partition's rows unwaited: the final commit stopped at their seal (20, not
// 30), and the next owner would write those records again.
func TestShutdownAwaitsStoppedPartitionsOutcomeRows(t *testing.T) {
	t.Parallel()
	const first, counted, more, deleted = 20, 10, 60, 40
	env := newEnv(t, 1)
	withOutcomes(t, env)
	env.ccfg.OnDataLoss = DataLossStop
	prod := partProducer(t, env.cluster)
	produceTo(t, prod, 0, 0, first)
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, 1, 20*time.Second)

	// Produces to the outcomes topic are held at the broker from here until released.
	held, free := holdProduces(t, env, outTopic)
	produceTo(t, prod, 0, 100, counted) // offsets 20..29: written, their rows held
	waitFor(t, 20*time.Second, "the rows of offsets 20..29 held", func() bool { return held.Load() > 0 })

	// Then a gap at the gate's position, 30, as in TestShutdownAwaitsStoppedPartitionsInFlight.
	pos := stopAtAGap(t, env, g, prod, more, deleted)
	if gc := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; gc.Offset != first {
		t.Fatalf("partition 0 committed at %d before the shutdown, want %d: the commit held at the seal of the rows held", gc.Offset, first)
	}

	// Shut down with the rows still held. They are released when the gate leaves the
	// group (the shutdown over: too late), or after a while (a shutdown that waits).
	shutDownHeld(t, env, g, free)
	if gc, ok := env.cluster.GroupInfo(testGroup).Commits[inTopic][0]; !ok || gc.Offset != pos {
		t.Errorf("partition 0 committed at %v, want %d: the outcome rows of the records before the gap, in flight at the shutdown, awaited and the records committed", gc.Offset, pos)
	}
}

// stopAtAGap makes a gap at g's position in partition 0 (its fetches fail while more
// records are written past it and the first deleted of them) and waits for g to stop
// the partition there (GATE_ON_DATA_LOSS=stop, not ready, naming it); it returns the
// gap's offset.
func stopAtAGap(t *testing.T, env *gateEnv, g *testGate, prod *kgo.Client, more, deleted int) int64 {
	t.Helper()
	pos := env.cluster.PartitionInfo(inTopic, 0).HighWatermark
	hold := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{0},
		Err: kerr.NotLeaderForPartition, Count: -1})
	waitFor(t, 20*time.Second, "partition 0's fetches held", func() bool { return hold.Hits() >= 2 })
	produceTo(t, prod, 0, 200, more)
	if err := env.cluster.DeleteRecords(inTopic, 0, pos+int64(deleted)); err != nil {
		t.Fatal(err)
	}
	hold.Remove()
	want := fmt.Sprintf("partition %s/0 stopped at offset %d", inTopic, pos)
	waitFor(t, 20*time.Second, "not ready, naming the partition stopped", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), "; "), want)
	})
	return pos
}

// shutDownHeld stops g while the broker holds something of its until free is called,
// which it is when g leaves the group (the shutdown over: too late to wait for what was
// held), or 2 s after the stop began (a shutdown that waits gets it then).
func shutDownHeld(t *testing.T, env *gateEnv, g *testGate, free func()) {
	t.Helper()
	env.cluster.ControlKey(kmsg.LeaveGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		free()
		return nil, nil, false
	})
	g.cancel()
	g.cancel = nil
	timer := time.AfterFunc(2*time.Second, free)
	defer timer.Stop()
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s")
	}
}
