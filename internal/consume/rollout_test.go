package consume

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// TestRollingUpdate replaces a fleet of 3 gates one at a time, as the chart's Deployment
// does (maxSurge 1, maxUnavailable 0: a new pod, under a new name and so a new
// transactional id, is started and becomes ready, then an old one is stopped
// gracefully), under steady input: nothing is lost, nothing duplicated (read_committed
// under exactly-once), the outcome rows agree with the outputs per team, a team over its
// limit before the rollout stays diverted by the old gates and by the new ones but for
// their first contact (allowed until their first read, design.md), no warning is logged
// and every partition's commits reach the input's end.
func TestRollingUpdate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		d     Delivery
		proto GroupProtocol
	}{
		{"at-least-once/classic", AtLeastOnce, GroupClassic},
		{"at-least-once/consumer", AtLeastOnce, GroupConsumer},
		{"exactly-once/classic", ExactlyOnce, GroupClassic},
		{"exactly-once/consumer", ExactlyOnce, GroupConsumer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rollingUpdate(t, tc.d, tc.proto)
		})
	}
}

func rollingUpdate(t *testing.T, d Delivery, proto GroupProtocol) {
	const parts = 8
	env := newEnv(t, parts)
	env.ccfg.Delivery = d
	env.ccfg.GroupProtocol = proto
	env.redis = redistest.Start(t)
	env.prime = true
	withOutcomes(t, env)
	env.lcfg.Threshold = 1_000_000
	env.lcfg.Overrides = map[string]int64{"whale": 300}
	logs := &syncBuffer{}
	env.logs = logs
	// The defaults: 6 gates ticking at 50 ms time Redis out on 2 cores under -race, and
	// commits every 100 ms, held by a join's, hold fetching (2 × the interval) there.
	env.tickEvery, env.ccfg.CommitInterval = time.Second, DefaultCommitInterval
	// And a join's commits, held 2.5 s by a rebalance of 13 s under a load of 50 on 2
	// cores, held fetching at the default 2 s, warning: that hold is commithold_test's.
	// 10 s was passed too, in a CI run whose rebalance starved a member's rejoin for
	// over 20 s (below): the hold is given as long as that rejoin may take.
	env.ccfg.CommitHoldAfter = 30 * time.Second
	// And a member's rejoin, starved for over 20 s (the rebalance timeout and franz-go's
	// request overhead, 10 s each), failed its JoinGroup on a read timeout in CI: the
	// group lost its partitions, and their records went out twice. A rollout waits for a
	// slow member as long as the chart's default rebalance timeout, 60 s.
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.RebalanceTimeout(60*time.Second))
	prod := producer(t, env.cluster)

	teamOf := func(id int) string {
		switch {
		case id%50 == 0:
			return ""
		case id%3 == 0:
			return "whale"
		}
		return "team-" + strconv.Itoa(id%10)
	}
	var sent atomic.Int64
	stop := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for {
			select {
			case <-stop:
				return
			default:
			}
			from := int(sent.Load())
			batch := make([]*kgo.Record, 20)
			for i := range batch {
				batch[i] = inputRecord(from+i, teamOf(from+i))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := prod.ProduceSync(ctx, batch...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("producing input: %v", err)
				return
			}
			sent.Add(int64(len(batch)))
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// What /readyz would say, sampled on every live gate.
	var (
		mu       sync.Mutex
		live     []*testGate
		notReady = map[string]map[string]int{} // gate -> reason -> samples
	)
	sampling := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			gs := slices.Clone(live)
			mu.Unlock()
			for _, g := range gs {
				for _, why := range g.c.NotReady() {
					mu.Lock()
					if notReady[g.name] == nil {
						notReady[g.name] = map[string]int{}
					}
					notReady[g.name][why]++
					mu.Unlock()
				}
			}
		}
	}()
	var accMu sync.Mutex
	whaleAcc := map[string][]int{}
	start := func(name string) *testGate {
		env.wrap = func(r Router) Router {
			return &watchRouter{Router: r, seen: func(id int, o route.Outcome) {
				if o.Team == "whale" && o.Route == route.Accepted {
					accMu.Lock()
					whaleAcc[name] = append(whaleAcc[name], id)
					accMu.Unlock()
				}
			}}
		}
		g := env.start(t, name)
		mu.Lock()
		live = append(live, g)
		mu.Unlock()
		return g
	}
	stopGate := func(g *testGate) {
		mu.Lock()
		live = slices.DeleteFunc(live, func(x *testGate) bool { return x == g })
		mu.Unlock()
		g.stop(t)
	}

	old := []*testGate{start("a"), start("b"), start("c")}
	for _, g := range old {
		// Each one routing: a KIP-848 member learns its share at its heartbeat.
		waitFor(t, 30*time.Second, "gate "+g.name+" ready and owning partitions", func() bool { return g.c.Ready() && len(owned(g)) > 0 })
	}
	// The whale is over its limit before the rollout, on every gate: each has read it.
	for _, g := range old {
		waitFor(t, 30*time.Second, "the whale diverted by gate "+g.name, func() bool { return overflowed(t, g) > 0 })
	}
	// Some more routed with the whale diverted.
	moreSent(t, &sent, 300)
	rollFrom := int(sent.Load())
	t0 := time.Now()
	var handovers []string
	for i, g := range old {
		n := start(string(rune('d' + i)))
		s := time.Now()
		waitFor(t, 30*time.Second, "gate "+n.name+" ready", n.c.Ready)
		r := time.Since(s)
		s = time.Now()
		stopGate(g)
		handovers = append(handovers, fmt.Sprintf("%s ready in %s, %s stopped in %s", n.name, r.Round(time.Millisecond), g.name, time.Since(s).Round(time.Millisecond)))
	}
	rolled := time.Since(t0)
	rollTo := int(sent.Load())
	moreSent(t, &sent, 300)
	close(stop)
	<-producing
	n := int(sent.Load())

	var opts []kgo.Opt
	if d == ExactlyOnce {
		opts = append(opts, readCommitted())
	}
	out := collect(t, env.cluster, n, 60*time.Second, 500*time.Millisecond, opts...)
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	close(stopSampling)
	<-sampling
	lost, dup := out.conservation(n)
	if len(lost) > 0 {
		t.Errorf("%d of %d records lost through the rollout: %v", len(lost), n, head(lost))
	}
	if len(dup) > 0 {
		t.Errorf("%d of %d records routed more than once through the rollout: %v", len(dup), n, head(dup))
	}
	got, _ := readOutcomes(t, env, int64(n), d == ExactlyOnce, 30*time.Second, 500*time.Millisecond)
	sameCounts(t, "outcome rows across the rollout", got, out.byTeam())

	// The whale's records accepted from the rollout on.
	var whaleAccepted, whaleDuring, whaleDuringAcc int
	for _, r := range out.recs[accTopic] {
		if teamOfRecord(r) != "whale" {
			continue
		}
		whaleAccepted++
		id, _ := strconv.Atoi(header(r, idHeader))
		if id >= rollFrom {
			whaleDuringAcc++
		}
	}
	for id := rollFrom; id < n; id++ {
		if teamOf(id) == "whale" {
			whaleDuring++
		}
	}
	// A new gate reads the whale before routing a partition's first poll when two or
	// more of its records wait there (Config.Prime, as the gate primes), and holds it
	// from there; otherwise it meets the whale as first contact: allowed until its first
	// read of it (its first tick), at most the whale's threshold as this gate's own count
	// says (share 1 before a second read). Seen without -race: 0 in three of the modes,
	// 7 and 14 on the two new gates of the fourth (KIP-848 hands partitions over one by
	// one, a poll at a time), where 20 to 160 a gate were before priming. An old gate
	// holds it throughout. Records, not
	// routings: an aborted transaction's records routed again are judged, not counted
	// again (route.Scratch.Replay), and on a slow host a gate aborts and replays often
	// as the fleet rebalances (in CI one gate routed whale records from the rollout on
	// as accepted 331 times, where the outputs held 298 of them accepted in all).
	accMu.Lock()
	for g, ids := range whaleAcc {
		k := len(distinctFrom(ids, rollFrom))
		if fresh := g >= "d"; k > 0 && !fresh || fresh && k > 300 {
			t.Errorf("whale over its limit before the rollout: gate %s accepted %d of its records during and after it", g, k)
		}
	}
	accMu.Unlock()

	// The lines logged: nothing at warn or above for a routine handover. The tick's own
	// (a Redis round trip past its deadline, a clock offset measured through one) say
	// how starved of CPU this machine is under -race, not what a handover does.
	msgs := map[string]int{}
	for _, line := range logLines(t, logs.String()) {
		lvl, _ := line["level"].(string)
		msg, _ := line["msg"].(string)
		msgs[lvl+" "+msg]++
		starved := strings.HasPrefix(msg, "redis pipeline failed") || strings.HasPrefix(msg, "this host's clock is off")
		if (lvl == "WARN" || lvl == "ERROR") && !starved {
			t.Errorf("logged during a rolling update: %v", line)
		}
	}
	t.Logf("%d records (%d during the rollout, %s: %s); whale accepted %d in all, %d of %d during and after",
		n, rollTo-rollFrom, rolled.Round(time.Millisecond), strings.Join(handovers, "; "), whaleAccepted, whaleDuringAcc, whaleDuring)
	for _, k := range slices.Sorted(maps.Keys(msgs)) {
		t.Logf("log: %4d × %s", msgs[k], k)
	}
	accMu.Lock()
	for g, ids := range whaleAcc {
		from := distinctFrom(ids, rollFrom)
		t.Logf("whale accepted by %s: %d routings, %d records from the rollout on: %v", g, len(ids), len(from), from[:min(len(from), 20)])
	}
	accMu.Unlock()
	mu.Lock()
	for g, m := range notReady {
		for why, k := range m {
			t.Logf("not ready: %s: %d × %s", g, k, why)
		}
	}
	mu.Unlock()
}

// distinctFrom returns the ids of ids from on, each once, in the order first seen.
func distinctFrom(ids []int, from int) []int {
	seen := map[int]bool{}
	var out []int
	for _, id := range ids {
		if id >= from && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// moreSent waits until n more records than now are sent.
func moreSent(t *testing.T, sent *atomic.Int64, n int64) {
	t.Helper()
	w := sent.Load() + n
	waitFor(t, 30*time.Second, strconv.FormatInt(n, 10)+" more records sent", func() bool { return sent.Load() >= w })
}

// watchRouter routes as its Router and tells seen each record's test id and outcome.
type watchRouter struct {
	Router
	seen func(id int, o route.Outcome)
}

func (w *watchRouter) RouteInto(now time.Time, in *kgo.Record, s *route.Scratch, out *kgo.Record) route.Outcome {
	o := w.Router.RouteInto(now, in, s, out)
	id, _ := strconv.Atoi(header(in, idHeader))
	w.seen(id, o)
	return o
}

// overflowed is what g sent to overflow.
func overflowed(t *testing.T, g *testGate) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() != "gate_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == "overflow" {
					s += m.GetCounter().GetValue()
				}
			}
		}
	}
	return s
}

// TestExactlyOnceKIP848RevokeIsNoRefusal: under the consumer group protocol (KIP-848) a
// member learns that partitions are taken from it from a heartbeat, and with
// exactly-once delivery the heartbeat the transaction's end forces is the one that
// usually learns it: the session aborts the transaction, and passes the revoke on only
// once End has returned. A rolling update's join and leave must not be reported as the
// brokers refusing the gate's commit (a warning the runbook sends an operator after the
// brokers for, and a backoff before the replay): the revoke is logged as such.
func TestExactlyOnceKIP848RevokeIsNoRefusal(t *testing.T) {
	t.Parallel()
	kip848RevokeIsNoRefusal(t, 0)
}

// TestExactlyOnceKIP848LateRevokeIsNoRefusal is TestExactlyOnceKIP848RevokeIsNoRefusal
// with each revoke passed on 300 ms after the session has it, as under -race on two busy
// cores the group's goroutine ran that late: the gate waited 100 ms for it, then took the
// abort for the brokers' refusal and warned (seen in TestRollingUpdate, the whole
// package running).
func TestExactlyOnceKIP848LateRevokeIsNoRefusal(t *testing.T) {
	t.Parallel()
	kip848RevokeIsNoRefusal(t, 300*time.Millisecond)
}

// kip848RevokeIsNoRefusal is a member joining and leaving an exactly-once gate's KIP-848
// group, each revoke passed on to the gate late by late.
func kip848RevokeIsNoRefusal(t *testing.T, late time.Duration) {
	const parts = 8
	env := newEOSEnv(t, parts)
	env.ccfg.GroupProtocol = GroupConsumer
	if late > 0 {
		env.before = func(c *Consumer) { c.txn.beforeRevoke = func() { time.Sleep(late) } }
	}
	logs := &syncBuffer{}
	env.logs = logs
	stop := trickle(t, env)
	a := env.start(t, "a")
	waitFor(t, 30*time.Second, "a owning every partition", func() bool { return len(owned(a)) == parts })
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "b taking partitions from a", func() bool { return len(owned(b)) > 0 && len(owned(a)) < parts })
	b.stop(t)
	waitFor(t, 30*time.Second, "a owning every partition again", func() bool { return len(owned(a)) == parts })
	n := stop()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	a.stop(t)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Errorf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	for _, line := range logLines(t, logs.String()) {
		if line["level"] == "WARN" || line["level"] == "ERROR" {
			t.Errorf("logged through a member joining and leaving: %v", line)
		}
	}
}

// TestStopWhileAskingGroupProtocolIsNoWarning: a gate asked for the KIP-848 protocol asks
// a broker whether it offers it once its preflight has passed, and a pod stopped then (a
// rollout that replaces a pod still starting, a scale-down) cut the question short. That
// is the stop, not a broker that could not be asked: before, it logged the warning
// `kafka: could not ask the broker whether it offers the KIP-848 group protocol … context
// canceled`.
func TestStopWhileAskingGroupProtocolIsNoWarning(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.GroupProtocol = GroupConsumer
	logs := &syncBuffer{}
	env.logs = logs
	var cons atomic.Pointer[Consumer]
	env.before = func(c *Consumer) { cons.Store(c) }
	var stopGate atomic.Pointer[context.CancelFunc]
	env.ctx = func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		stopGate.Store(&cancel)
		return ctx
	}
	// The first ApiVersions once the preflight has passed (the gate's question, or a new
	// connection's own, the gate then at its question) stops the gate, and is answered
	// once the gate leaves its group, so that nothing of the stop queues behind it.
	var asked atomic.Bool
	tctx, endTest := context.WithCancel(context.Background())
	t.Cleanup(endTest)
	env.cluster.ControlKey(kmsg.ApiVersions.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if c := cons.Load(); c != nil && c.preflighted.Load() && !asked.Swap(true) {
			(*stopGate.Load())()
			env.cluster.SleepControl(func() { _ = waitUntil(tctx, c.closing.Load) })
		}
		return nil, nil, false
	})
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the gate asking for the group protocols", asked.Load)
	g.stop(t)
	if strings.Contains(logs.String(), `"level":"WARN"`) {
		t.Errorf("a stop while the gate asked for the group protocols logged a warning:\n%s", logs.String())
	}
}

// TestExactlyOnceRefusedAsItStopsIsNoWarning: a gate stopped while its last transaction
// ends (a rollout stopping an old pod as the new one joins) can have that transaction's
// offset commit refused: under the consumer group protocol the heartbeat End forces
// learns the new member's share, and the session aborts. The stop cut short the gate's
// wait for the revoke that explains it, and the abort was taken for the brokers'
// refusal: a warning sending the operator to the brokers (seen in TestRollingUpdate,
// exactly-once/consumer, under -race with the whole suite). The stop comes as the commit
// is refused, or while the gate waits for the revoke after it. The partitions' next
// owner replays the transaction: nothing is lost or duplicated. Nor does the stopping
// gate re-read the group's committed offsets after the abort, which only a gate that
// polls again needs: while another member's transaction held a partition's offsets
// unstable (the new pod's, as the rollout moved it), that re-read was retried for 5 s
// of the shutdown and then logged as an ERROR (TestRollingUpdate, exactly-once/classic,
// four test packages at once on two cores); "offsets unstable" answers it so.
func TestExactlyOnceRefusedAsItStopsIsNoWarning(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		waiting, unstable bool
	}{
		{"stopped as refused", false, false},
		{"stopped while awaiting the revoke", true, false},
		{"stopped as refused, offsets unstable", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			refusedAsItStops(t, c.waiting, c.unstable)
		})
	}
}

func refusedAsItStops(t *testing.T, waiting, unstable bool) {
	const parts = 2
	env := newEOSEnv(t, parts)
	logs := &syncBuffer{}
	env.logs = logs
	var stopA atomic.Pointer[context.CancelFunc]
	env.ctx = func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		stopA.CompareAndSwap(nil, &cancel)
		return ctx
	}
	var armed, refused, stopped, bStarts atomic.Bool
	stop := func() {
		if refused.Load() && !stopped.Swap(true) {
			(*stopA.Load())()
		}
	}
	if waiting {
		env.before = func(c *Consumer) { c.txn.awaitingRevoke = stop }
	}
	// Once armed, the next offset commit is refused as a revoke's abort leaves it
	// (franz-go aborts for UNKNOWN_SERVER_ERROR as for a fenced epoch).
	env.cluster.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if !armed.Load() || refused.Swap(true) {
			return nil, nil, false
		}
		if !waiting {
			stop()
		}
		return refuseTxnOffsetCommit(req, kerr.UnknownServerError), nil, true
	})
	var unstableAnswers atomic.Int64
	if unstable {
		// From the refusal until gate b starts, a stable read of the committed offsets
		// finds them unstable, as another member's open transaction leaves them.
		env.cluster.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
			env.cluster.KeepControl()
			r := req.(*kmsg.OffsetFetchRequest)
			if !r.RequireStable || !refused.Load() || bStarts.Load() {
				return nil, nil, false
			}
			unstableAnswers.Add(1)
			return refuseOffsetFetch(req, kerr.UnstableOffsetCommit), nil, true
		})
	}
	produce := trickle(t, env)
	a := env.start(t, "a")
	waitFor(t, 30*time.Second, "a owning every partition", func() bool { return len(owned(a)) == parts })
	armed.Store(true)
	waitFor(t, 30*time.Second, "gate a stopped after its offset commit was refused", stopped.Load)
	a.stop(t)
	if n := unstableAnswers.Load(); n > 0 {
		t.Errorf("the stopping gate read the committed offsets %d times after the abort; want none (it polls no more)", n)
	}
	env.ctx, env.before = nil, nil
	bStarts.Store(true)
	b := env.start(t, "b")
	n := produce()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	b.stop(t)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Errorf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	for _, line := range logLines(t, logs.String()) {
		if line["level"] == "WARN" || line["level"] == "ERROR" {
			t.Errorf("logged through a stop whose last commit was refused: %v", line)
		}
	}
	if !strings.Contains(logs.String(), "the last transaction aborted as the gate stopped") {
		t.Errorf("no line says the last transaction aborted as the gate stopped:\n%s", logs.String())
	}
}
