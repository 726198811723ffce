package consume

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCommitHold: at-least-once, the broker refuses every offset commit (as while the
// group coordinator is dead). After 2 × GATE_COMMIT_INTERVAL of failures the gate
// stops fetching the input, says so and shows it in gate_fetch_held_by_commits; once
// commits succeed again it resumes by itself and routes every record. Before, it
// fetched and routed on while nothing was committed, all of which a rebalance would
// have replayed.
func TestCommitHold(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	var logs logSink
	env.logs = &logs
	prod := producer(t, env.cluster)
	batch := func(from, n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = inputRecord(from+i, "team-"+strconv.Itoa((from+i)%7))
		}
		return recs
	}
	g := env.start(t, "a")
	produceAll(t, prod, batch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	fail := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	produceAll(t, prod, batch(100, 100)) // routed, acknowledged, not committed
	waitFor(t, 20*time.Second, "fetching held after failed commits", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) &&
			testutil.ToFloat64(g.c.m.commitHeld) == 1
	})
	if !strings.Contains(logs.String(), "fetching the input stops until one succeeds") {
		t.Error("no line says fetching stopped")
	}
	produceAll(t, prod, batch(200, 100)) // not fetched while held

	fail.Remove()
	waitFor(t, 20*time.Second, "fetching resumed once commits succeed", func() bool {
		return !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic) &&
			testutil.ToFloat64(g.c.m.commitHeld) == 0
	})
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if seen, _ := out.routed(idRange(0, 300)); len(seen) != 300 {
		t.Errorf("%d of 300 records routed after the hold", len(seen))
	}
	if !strings.Contains(logs.String(), "kafka: offsets commit again; fetching the input resumes") {
		t.Error("no line says fetching resumed")
	}
}

// TestCommitHoldHangingCommit: the broker takes the commits and never answers them, as a
// client retrying a coordinator that is gone keeps one in flight: no callback reports a
// failure, and the gate holds its fetches all the same, judged from its last
// successful commit; once the commits are answered it resumes. (The first version of the
// hold counted failed callbacks only, and one gate of two never held on Apache Kafka.)
func TestCommitHoldHangingCommit(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEnv(t, parts)
	env.ccfg.CommitInterval = 100 * time.Millisecond
	prod := producer(t, env.cluster)
	batch := func(from, n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = inputRecord(from+i, "team-"+strconv.Itoa((from+i)%7))
		}
		return recs
	}
	g := env.start(t, "a")
	produceAll(t, prod, batch(0, 100))
	waitCommitted(t, env.cluster, parts, 20*time.Second)

	release := make(chan struct{})
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		env.cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	produceAll(t, prod, batch(100, 100))
	waitFor(t, 20*time.Second, "fetching held while commits hang", func() bool {
		return slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	if got := testutil.ToFloat64(g.c.m.commitErrors); got != 0 {
		t.Errorf("gate_commit_errors_total = %v while commits hang unanswered, want 0 (the hold is not a failure count)", got)
	}
	free()
	waitFor(t, 20*time.Second, "fetching resumed once commits are answered", func() bool {
		return !slices.Contains(g.c.live.Load().PauseFetchTopics(), inTopic)
	})
	produceAll(t, prod, batch(200, 100))
	out := collect(t, env.cluster, 300, 30*time.Second, 300*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	g.stop(t)
	if seen, _ := out.routed(idRange(0, 300)); len(seen) != 300 {
		t.Errorf("%d of 300 records routed after the hold", len(seen))
	}
}
