// Tests of what an interrupted group session does: a revoke that cancels a produce, a
// join that fails before the member holds anything.

package consume

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestExactlyOnceRevokeCancelledProduceIsNoFailure: a revoke lands while the open
// transaction's routing is blocked in Produce on a full buffer (the broker holds the
// produces). The revoke cancels the routing context, so the blocked Produce fails its
// record with context.Canceled: the transaction aborts and is replayed, but that is no
// produce failure. Before, the exactly-once promise counted it in
// gate_produce_errors_total, and the loop logged "produce failed" and backed off before
// the replay, as the at-least-once promise does not.
func TestExactlyOnceRevokeCancelledProduceIsNoFailure(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	env := newEOSEnv(t, parts)
	env.ccfg.MaxBufferedRecords = 10
	logs := &logSink{}
	env.logs = logs
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)

	// Hold every produce until released: the gate's buffer fills and routing blocks.
	held, free := holdProduces(t, env)

	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "routing blocked on a full buffer", func() bool {
		cl := g.c.liveProducer()
		return held.Load() > 0 && cl != nil && cl.BufferedProduceRecords() >= 10
	})
	g.c.interruptTxn() // what onRevoked does
	free()
	waitCommitted(t, env.cluster, parts, 30*time.Second)

	if got := counterSum(t, g.reg, "gate_produce_errors_total"); got != 0 {
		t.Errorf("gate_produce_errors_total = %v after a revoke cancelled a produce, want 0", got)
	}
	if s := logs.String(); strings.Contains(s, "produce failed") {
		t.Errorf("a produce cancelled by a revoke was logged as a failure:\n%s", s)
	}
}

// TestFailedJoinLosesNothing: a join the coordinator refuses before the gate holds any
// partition makes franz-go call OnPartitionsLost with the empty assignment. Nothing
// was lost: the gate must not count a loss nor warn that partitions were lost. Before,
// every failed join or heartbeat while the gate held nothing did both.
func TestFailedJoinLosesNothing(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	logs := &logSink{}
	env.logs = logs
	var refused atomic.Bool
	env.cluster.ControlKey(kmsg.JoinGroup.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.UnknownServerError.Code
		refused.Store(true)
		return resp, nil, true // once: the control is dropped after it handled a request
	})
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the gate assigned after the refused join", func() bool {
		return refused.Load() && g.c.Ready()
	})
	if got := testutil.ToFloat64(g.c.m.rebalances.WithLabelValues("lost")); got != 0 {
		t.Errorf(`gate_rebalances_total{event="lost"} = %v after a refused join, want 0`, got)
	}
	if s := logs.String(); strings.Contains(s, "partitions lost") {
		t.Errorf("a refused join was logged as lost partitions:\n%s", s)
	}
}

// TestExactlyOnceSecondRevokeWhileEnding: exactly once, a second member joins and takes
// partitions from the gate (the open transaction interrupted), and a third joins while
// that transaction is still ending (its produces held by the broker) and takes one more.
// franz-go's transact session passes only the first revoke after each End on to
// onRevoked: before, the gate kept the second revoke's partition for good, counted in
// gate_owned_partitions (7 among three gates for 6 partitions) and with its lag of 1
// left by the abort, which made an idle gate count as having work (hasWork), so the
// watchdog took it for stalled: not ready after GATE_STALL_NOT_READY, restarted after
// GATE_STALL_RESTART.
func TestExactlyOnceSecondRevokeWhileEnding(t *testing.T) {
	t.Parallel()
	const parts, n = 6, 600
	env := newEOSEnv(t, parts)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	held, free := holdProduces(t, env)
	owned := func(g *testGate) int { return int(gaugeValue(t, g, "gate_owned_partitions")) }
	a := env.start(t, "a")
	waitFor(t, 20*time.Second, "a's transaction's produces held", func() bool { return held.Load() > 0 })
	b := env.start(t, "b")
	waitFor(t, 20*time.Second, "b given partitions of a", func() bool { return owned(b) > 0 && owned(a) < parts })
	c := env.start(t, "c")
	waitFor(t, 20*time.Second, "c given partitions", func() bool { return owned(c) > 0 })
	free()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	// 30 s: 10 s ran out once in a whole -race CI run (2026-12-02) without saying which
	// part was missing. The fault this is about (a partition kept, a lag left) never
	// clears, so the longer wait still fails on it, and it now says what it last saw.
	var saw string
	defer func() {
		if t.Failed() {
			t.Logf("last seen: %s", saw)
		}
	}()
	waitFor(t, 30*time.Second, "the three gates owning the 6 partitions between them, none with work left", func() bool {
		saw = fmt.Sprintf("owned a %d, b %d, c %d; work a %v, b %v, c %v",
			owned(a), owned(b), owned(c), a.c.hasWork(), b.c.hasWork(), c.c.hasWork())
		return owned(a)+owned(b)+owned(c) == parts && !a.c.hasWork() && !b.c.hasWork() && !c.c.hasWork()
	})
}

// holdProduces holds every produce request env's broker gets (of topics, when given:
// one carrying records of any of them) until free is called (at the test's end at the
// latest), and counts them in held.
func holdProduces(t *testing.T, env *gateEnv, topics ...string) (held *atomic.Int64, free func()) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	free = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	held = new(atomic.Int64)
	ids := map[[16]byte]bool{} // produce v13 names topics by id
	for _, topic := range topics {
		ids[env.cluster.TopicInfo(topic).TopicID] = true
	}
	env.cluster.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if len(topics) > 0 && !slices.ContainsFunc(kreq.(*kmsg.ProduceRequest).Topics, func(rt kmsg.ProduceRequestTopic) bool {
			return slices.Contains(topics, rt.Topic) || ids[rt.TopicID]
		}) {
			return nil, nil, false
		}
		held.Add(1)
		env.cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return held, free
}
