package consume

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// trickle produces input records, a few every 5 ms, so that the gates always have a
// transaction open, until the function it returns is called (or the test ends): that
// stops it, waits for the produce in flight, and returns how many records were written.
// Production stops before a test counts the outputs: records written while it collects
// would count toward the records it waits for, and end the wait while some of those
// written before were still to come (a partition a dead peer held until its session
// timed out).
func trickle(t *testing.T, env *gateEnv) (stop func() int) {
	t.Helper()
	cl := producer(t, env.cluster)
	stopc, done := make(chan struct{}), make(chan struct{})
	n := 0 // the goroutine's; read after done
	go func() {
		defer close(done)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopc:
				return
			case <-tk.C:
			}
			recs := make([]*kgo.Record, 5)
			for i := range recs {
				recs[i] = inputRecord(n+i, "team-"+strconv.Itoa((n+i)%7))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				t.Errorf("trickle: producing input: %v", err)
				return
			}
			n += len(recs)
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(stopc); <-done })
		return n
	}
	t.Cleanup(func() { stop() })
	return stop
}

// crashPeer joins the group as a new member (a static one, so that closing does not
// leave the group: a pod that dies without leaving) and dies as soon as it has joined.
// The next peer's join then waits for the dead one's session to time out.
func crashPeer(t *testing.T, env *gateEnv, name string) {
	t.Helper()
	joined := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(append(testClientOpts(),
		kgo.SeedBrokers(env.cluster.ListenAddrs()...),
		kgo.ConsumerGroup(testGroup), kgo.ConsumeTopics(inTopic),
		kgo.InstanceID(name), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(joined) }) }),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if cl.PollFetches(context.Background()).IsClientClosed() {
				return
			}
		}
	}()
	select {
	case <-joined:
	case <-time.After(30 * time.Second):
		t.Fatalf("peer %s never joined", name)
	}
	cl.Close()
}

// TestExactlyOnceSurvivesCrashLoopingPeer: a peer crash-loops (joins, dies without
// leaving, restarts under a new member id), so every join waits out the dead member's
// session, longer than the healthy gate's transaction timeout. The broker aborts the
// healthy gate's transactions and fences it each time; it recovers, and since a
// rebalance caused each fence, none counts toward the limit that stops a gate: it keeps
// running and routes everything. Before, its Run stopped after the sixth fence.
func TestExactlyOnceSurvivesCrashLoopingPeer(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 4)
	env.ccfg.TransactionTimeout = 300 * time.Millisecond // below the peer's 1s session, on purpose
	// Small transactions, so that a rebalance is what outlives the timeout: after each
	// fence the gate routes again what it had not committed, and a poll of the default
	// 10,000 such records took more than 300 ms to produce under -race on a loaded
	// machine, a slow transaction of the gate's own, six of which stop it by design.
	env.ccfg.MaxPollRecords = 100
	env.ccfg.TransactionMaxRecords = 200
	g := env.start(t, "healthy")
	stopProducing := trickle(t, env)
	waitFor(t, 20*time.Second, "the healthy gate's first commits", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) > 0
	})
	fences := func() float64 {
		return testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("group_churn")) +
			testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("slow_transaction"))
	}
	// Until the gate has been fenced more often than the limit, bounded.
	cycles := 0
	for ; fences() <= maxRecoveries && cycles < 60; cycles++ {
		crashPeer(t, env, "peer-"+strconv.Itoa(cycles))
		select {
		case err := <-g.done:
			t.Fatalf("the healthy gate stopped after %d peer crashes and %v fences: %v", cycles+1, fences(), err)
		default:
		}
	}
	if fences() <= maxRecoveries {
		t.Fatalf("only %v fences in %d peer crashes: the test did not test", fences(), cycles)
	}
	// Everything produced is routed, once, by the healthy gate alone.
	n := stopProducing()
	out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	t.Logf("%d peer crashes, %v fences recovered (group churn), %v counted; %d records once each",
		cycles, testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("group_churn")),
		testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("slow_transaction")), n)
}

// TestExactlyOnceCommitAppliedButErrored: the broker applies an EndTxn commit but
// answers it with UNKNOWN_SERVER_ERROR (franz-go's comments note brokers that do). The
// client cannot tell the commit happened, retries it as an abort and rewinds to its own
// pre-commit offsets; the gate must take the group's committed offsets instead, or it
// routes the committed poll again. read_committed sees each record once. Before, all of
// them twice.
func TestExactlyOnceCommitAppliedButErrored(t *testing.T) {
	t.Parallel()
	const parts, n = 1, 100
	env := newEOSEnv(t, parts)
	var liar endTxnLiar
	env.ccfg.ClientOpts = append(testClientOpts(), liar.opt())
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	out := collect(t, env.cluster, n, 30*time.Second, time.Second, readCommitted())
	g.stop(t)
	if liar.lied.Load() != 1 {
		t.Fatalf("%d EndTxn answers rewritten, want 1: the test tests nothing", liar.lied.Load())
	}
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestExactlyOnceAbortAfterCommitAppliedButErrored: after a commit the broker applied and
// answered with an error, franz-go's own record of the commits stays at the one before,
// and every abort rewinds to it: the gate's next abort of its own (a produce refused)
// put an idle partition back below the group's commit, and its committed records were
// routed and committed again (a review: records 10 to 19 twice). The gate moves to the
// group's commits after such an abort too.
func TestExactlyOnceAbortAfterCommitAppliedButErrored(t *testing.T) {
	t.Parallel()
	const parts = 2
	env := newEOSEnv(t, parts)
	env.ccfg.Jitter = shortJitter
	env.ccfg.ProduceRetries = 1
	var liar endTxnLiar
	opt := liar.opt()
	liar.armed.Store(false)
	env.ccfg.ClientOpts = append(testClientOpts(), opt)
	prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	produceTo := func(part int32, from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for id := from; id < to; id++ {
			r := inputRecord(id, "team-"+strconv.Itoa(id%3))
			r.Partition = part
			recs = append(recs, r)
		}
		produceAll(t, prod, recs)
	}
	committed := func(part int32) int64 {
		if gi := env.cluster.GroupInfo(testGroup); gi != nil {
			if c, ok := gi.Commits[inTopic][part]; ok {
				return c.Offset
			}
		}
		return -1
	}
	g := env.start(t, "a")
	produceTo(0, 0, 10)
	waitFor(t, 20*time.Second, "partition 0 committed at 10", func() bool { return committed(0) == 10 })
	liar.armed.Store(true) // the next commit is applied and answered UNKNOWN_SERVER_ERROR
	produceTo(0, 10, 20)
	aborted := func() float64 { return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) }
	waitFor(t, 20*time.Second, "the commit answered with an error, and its abort", func() bool { return liar.lied.Load() == 1 && aborted() >= 1 })
	if c := committed(0); c != 20 {
		t.Fatalf("partition 0 committed at %d after the commit the broker applied, want 20: the test no longer shows the case", c)
	}
	before := aborted()
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	produceTo(1, 20, 21) // partition 1 alone: the gate aborts, partition 0 idle
	waitFor(t, 20*time.Second, "the gate's own abort", func() bool { return aborted() > before })
	fault.Remove()
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	out := collect(t, env.cluster, 21, 20*time.Second, 2*time.Second, readCommitted())
	g.stop(t)
	if lost, dup := out.conservation(21); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// endTxnLiar wraps the gate's connections to the broker and answers the first EndTxn
// commit the broker applied with UNKNOWN_SERVER_ERROR instead of its real answer, as a
// broker that applied the commit and then failed to say so would. It parses just
// enough of the Kafka protocol: request and response headers, and EndTxn's body.
type endTxnLiar struct {
	mu    sync.Mutex
	pend  map[int32]int16 // correlation id of an EndTxn commit -> its version
	lied  atomic.Int64
	armed atomic.Bool
}

func (l *endTxnLiar) opt() kgo.Opt {
	l.pend = make(map[int32]int16)
	l.armed.Store(true)
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &liarConn{Conn: c, l: l}, nil
	})
}

type liarConn struct {
	net.Conn
	l   *endTxnLiar
	out []byte // a response frame being handed to the client
}

func (c *liarConn) Write(b []byte) (int, error) {
	// franz-go writes each request whole: size, key, version, correlation id, ...
	if len(b) >= 12 && binary.BigEndian.Uint16(b[4:]) == uint16(kmsg.EndTxn) && c.l.armed.Load() {
		ver := int16(binary.BigEndian.Uint16(b[6:]))
		corr := int32(binary.BigEndian.Uint32(b[8:]))
		req := kmsg.NewPtrEndTxnRequest()
		req.Version = ver
		body := b[12:]
		n := int(binary.BigEndian.Uint16(body)) // client id, a nullable string in every header version
		body = body[2+max(n, 0):]
		if ver >= 3 {
			body = body[1:] // the header's empty tagged fields
		}
		if req.ReadFrom(body) == nil && req.Commit {
			c.l.mu.Lock()
			c.l.pend[corr] = ver
			c.l.mu.Unlock()
		}
	}
	return c.Conn.Write(b)
}

func (c *liarConn) Read(b []byte) (int, error) {
	if len(c.out) == 0 {
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
		copy(frame, size[:])
		if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
			return 0, err
		}
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		c.l.mu.Lock()
		ver, ok := c.l.pend[corr]
		delete(c.l.pend, corr)
		c.l.mu.Unlock()
		if ok {
			at := 8 + 4 // correlation id, throttle
			if ver >= 3 {
				at++ // the header's empty tagged fields
			}
			if binary.BigEndian.Uint16(frame[at:]) == 0 && c.l.armed.CompareAndSwap(true, false) {
				binary.BigEndian.PutUint16(frame[at:], uint16(kerr.UnknownServerError.Code))
				c.l.lied.Add(1)
			}
		}
		c.out = frame
	}
	n := copy(b, c.out)
	c.out = c.out[n:]
	return n, nil
}

// TestExactlyOnceRevokeRightAfterEnd: a revoke that lands just after End has reset the
// session (franz-go passes it on to the gate then) must not be forgotten: the gate
// ends an empty transaction (rearm) so that the session passes on the next one. The
// revoke is simulated at that very point. Before, the flag it set was cleared after
// End returned, and the revoke was lost.
func TestExactlyOnceRevokeRightAfterEnd(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 50
	env := newEOSEnv(t, parts)
	var once sync.Once
	var fired atomic.Bool
	env.before = func(c *Consumer) {
		c.txn.afterEnd = func() {
			once.Do(func() { c.interruptTxn(); fired.Store(true) })
		}
	}
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	g := env.start(t, "a")
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	waitFor(t, 20*time.Second, "the revoke seen after End handled", func() bool {
		return fired.Load() && g.c.txn.rearms.Load() > 0
	})
}

// logSink collects log lines, safe for concurrent writes.
type logSink struct {
	mu sync.Mutex
	b  []byte
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// TestIntervalCommitFailuresLogged: the broker refuses interval commits; each is
// counted, and they are logged (rate-limited) with the partition and the error. Before,
// the asynchronous commit path only counted them.
func TestIntervalCommitFailuresLogged(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 100
	env := newEnv(t, parts)
	var logs logSink
	env.logs = &logs
	env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.OffsetMetadataTooLarge, Count: 5})
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "a failed interval commit logged", func() bool {
		return strings.Contains(logs.String(), "interval commit failed")
	})
	line := logs.String()[strings.Index(logs.String(), "interval commit failed"):]
	line = line[:strings.IndexByte(line, '\n')]
	if !strings.Contains(line, "partition ") || !strings.Contains(line, "OFFSET_METADATA_TOO_LARGE") {
		t.Errorf("log line %q does not name the partition and the error", line)
	}
	waitCommitted(t, env.cluster, parts, 20*time.Second) // and the commits recover
	if got := testutil.ToFloat64(g.c.m.commitErrors); got == 0 {
		t.Error("gate_commit_errors_total not counted")
	}
	if got := strings.Count(logs.String(), "interval commit failed"); got > 2 {
		t.Errorf("%d log lines for 5 failures within seconds, want them rate-limited", got)
	}
}

// hangProduce makes the broker stop answering produce requests (the input is produced
// before) until the test ends; it returns how many requests it holds.
func hangProduce(t *testing.T, c *kfake.Cluster) *atomic.Int64 {
	t.Helper()
	release := make(chan struct{})
	var held atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		held.Add(1)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) })
	return &held
}

// TestHungBrokerBoundsShutdownAndRebalance: the broker stops answering produces while
// the gate's producer buffer is full, so routing blocks handing records over. A member
// joining the group is not held behind it, and shutdown returns within its bounds
// (the shutdown timeout, then twice the revoke timeout for the final commit and the
// leave), committing nothing unacknowledged. Before, Run had not returned 25 s after
// cancel with a 1 s shutdown timeout, and the joining member waited the whole
// rebalance timeout.
//
// The bound is the package doc's, per delivery: at-least-once ShutdownTimeout + 2 ×
// RevokeTimeout (the drain, the final commit, the leave), 3 s here; exactly-once
// ShutdownTimeout + RevokeTimeout (the open transaction's end, the leave), 2 s. The
// margin, 0.5 s, is for timers and goroutines woken late on a loaded machine: in 56 runs
// on a 2-core VM (40 under -race, three processes at once or beside the package's
// exactly-once and rebalance tests) Run returned 1.00–1.05 s after cancel, the drain's
// 1 s and at most 0.05 s more, the commit and the leave reaching a broker that answers
// them. With the drain's grace planted at 4 × ShutdownTimeout (graceContext) Run
// returns after 4 s and fails here in both modes; the old slack, the bound + 15 s,
// passed it.
func TestHungBrokerBoundsShutdownAndRebalance(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts, n = 4, 400
			env := newEnv(t, parts)
			env.ccfg.Delivery = tc.d
			env.ccfg.MaxBufferedRecords = 10
			env.ccfg.ShutdownTimeout = time.Second
			env.ccfg.RevokeTimeout = time.Second
			env.ccfg.ClientOpts = append(testClientOpts(), kgo.RebalanceTimeout(60*time.Second))
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			}
			produceAll(t, producer(t, env.cluster), recs)
			held := hangProduce(t, env.cluster)
			a := env.start(t, "a")
			waitFor(t, 20*time.Second, "the producer blocked on a full buffer", func() bool {
				return held.Load() > 0 && a.c.liveProducer().BufferedProduceRecords() >= 10
			})
			if tc.d == AtLeastOnce {
				// A joining member gets its partitions long before the rebalance timeout.
				b := env.start(t, "b")
				waitFor(t, 30*time.Second, "the joining member assigned", b.c.ready.Load)
			}
			stopWithinShutdownBound(t, env, a, tc.d, "")
			if gi := env.cluster.GroupInfo(testGroup); gi != nil {
				for p, gc := range gi.Commits[inTopic] {
					if gc.Offset > 0 {
						t.Errorf("partition %d committed to %d with nothing acknowledged", p, gc.Offset)
					}
				}
			}
		})
	}
}

// TestWatchdog: a gate whose broker stops answering while records wait is reported
// not ready past StallNotReady and not live past StallRestart, with the stall in
// gate_stalled_seconds; an idle gate (no lag) stays ready and live however long it
// idles. Before, /readyz and /healthz never saw a stuck gate.
func TestWatchdog(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	for _, stuck := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "stuck"}[stuck], func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, parts)
			env.ccfg.StallNotReady = 300 * time.Millisecond
			env.ccfg.StallRestart = 600 * time.Millisecond
			if !stuck {
				// The bounds an idle gate must stay within: on a loaded machine under
				// -race, the commit loop starved past the commit hold's trigger (2 ×
				// the test's 100 ms interval) and 300 ms later the hold read as a stall
				// (CI beside the real-Kafka suite).
				env.ccfg.StallNotReady, env.ccfg.StallRestart = time.Second, 2*time.Second
			}
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			}
			produceAll(t, producer(t, env.cluster), recs)
			if stuck {
				hangProduce(t, env.cluster)
				// The stuck gate's stop at the end waits this out (the produce never
				// answers); not what is tested.
				env.ccfg.ShutdownTimeout = time.Second
			}
			g := env.start(t, "a")
			if !stuck {
				waitCommitted(t, env.cluster, parts, 20*time.Second)
				// Idle for several times StallRestart: still ready and live.
				for deadline := time.Now().Add(4 * env.ccfg.StallRestart); time.Now().Before(deadline); {
					if u := unwell(g.c); u != "" {
						t.Fatalf("an idle gate: %s", u)
					}
					time.Sleep(20 * time.Millisecond)
				}
				return
			}
			waitFor(t, 20*time.Second, "not ready for want of progress", func() bool {
				return strings.Contains(strings.Join(g.c.NotReady(), ";"), "no progress for")
			})
			waitFor(t, 20*time.Second, "not live", func() bool { return g.c.Live() != nil })
			if g.c.Ready() {
				t.Error("Ready while stuck")
			}
			if got := gaugeValue(t, g, "gate_stalled_seconds"); got < env.ccfg.StallRestart.Seconds() {
				t.Errorf("gate_stalled_seconds = %v, want at least %v", got, env.ccfg.StallRestart.Seconds())
			}
		})
	}
}

func gaugeValue(t *testing.T, g *testGate, name string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestRebalanceDuringSlowRoutingYields: polls take long to route, and gates join and
// leave while they are routed. Each waiting rebalance stops the routing (the client is
// moved back to the first record not routed), and still no record is lost or
// duplicated: what was not routed is polled again, by this gate or the partition's
// next owner.
func TestRebalanceDuringSlowRoutingYields(t *testing.T) {
	t.Parallel()
	const parts, n = 4, 4000
	env := newEnv(t, parts)
	env.wrap = func(r Router) Router { return slowRouter{r, 200 * time.Microsecond} }
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	a := env.start(t, "a")
	waitFor(t, 20*time.Second, "routing under way", func() bool { return a.c.outstanding.Load() > 0 || counterSum(t, a.reg, "gate_records_total") > 0 })
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "b assigned", b.c.ready.Load)
	b.stop(t)
	out := collect(t, env.cluster, n, 60*time.Second, 500*time.Millisecond)
	waitCommitted(t, env.cluster, parts, 30*time.Second)
	a.stop(t)
	lost, dup := out.conservation(n)
	if len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	if a.c.unrouted.Load() == 0 {
		t.Fatal("no rebalance stopped a's routing: the test tests nothing")
	}
	t.Logf("%d records, routing stopped short %d times (a) and %d (b), 0 lost, 0 duplicated", n, a.c.unrouted.Load(), b.c.unrouted.Load())
}

// TestHealthAnswersWhileTransactionCannotBegin: exactly-once, the transaction coordinator
// moves and the cluster cannot name the new one (COORDINATOR_NOT_AVAILABLE, as while
// __transaction_state loads after a broker restart): a transaction's End retries for the
// client's retry timeout, fails, and the rebuilt client retries InitProducerId before
// its first poll, franz-go's producer locks held meanwhile. NotReady and Live (/readyz,
// /healthz) and the metrics must still answer at once, at either stage. Before, each
// waited for the producer's lock, BufferedProduceRecords's, while Begin initialised the
// producer id: every probe hung for the whole retry timeout (30 s by default, and again
// at each retry of the transaction), so the chart's 2 s probes failed and Kubernetes
// restarted the gate long before GATE_STALL_RESTART.
func TestHealthAnswersWhileTransactionCannotBegin(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	const retry = 8 * time.Second
	// franz-go's retries of a request are bounded by their count (20) as by the timeout:
	// a backoff of a quarter second makes the timeout the bound, as the defaults do.
	env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.RetryTimeout(retry), kgo.RetryBackoffFn(func(int) time.Duration { return 250 * time.Millisecond }))
	var asked atomic.Int64
	var down atomic.Bool // from once a transaction committed: the preflight waits for the coordinator
	txnCoordinatorUnavailable(env.cluster, &down, &asked)
	txnCoordinatorMoved(env.cluster, &down)
	t.Cleanup(func() { down.Store(false) })
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "team-0")})
	waitFor(t, 20*time.Second, "a transaction committed", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) >= 1
	})
	down.Store(true)
	before := asked.Load()
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "team-0")})
	waitFor(t, 20*time.Second, "End asking for the transaction coordinator", func() bool { return asked.Load() > before+1 })
	probeAtOnce(t, g, "End")
	waitFor(t, 3*retry, "End failing and the client rebuilt", func() bool {
		return testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("end_error")) >= 1
	})
	before = asked.Load()
	waitFor(t, 20*time.Second, "the rebuilt client asking for the transaction coordinator", func() bool { return asked.Load() > before+1 })
	probeAtOnce(t, g, "the rebuilt client's InitProducerId")
	down.Store(false)
	// The gauges kprom no longer serves exactly once are served, once each, and count
	// what the client holds: none once the record is written.
	waitFor(t, 60*time.Second, "a transaction committed and nothing buffered", func() bool {
		mfs, err := g.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, mf := range mfs {
			if slices.Contains(kpromBufferedProduce, mf.GetName()) {
				found++
				if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 0 {
					return false
				}
			}
		}
		if found != len(kpromBufferedProduce) {
			t.Fatalf("%d of %v gathered", found, kpromBufferedProduce)
		}
		return g.c.producerBuffered() == 0 && testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) >= 2
	})
}

// probeAtOnce fails t unless /readyz's, /healthz's and /metrics's reads of g answer
// within probeWithin, all at once, as the probes and a scrape may come; waiting says
// what waits for the transaction coordinator meanwhile, for the failure. The probes come
// some half second into that wait, which lasts the client's retry timeout (8 s): a probe
// held by it answers only after some 7 s, and one not held by it answers at once even on
// a loaded machine, within probeWithin (1 s was a CI flake's risk under -race on 2 cores).
func probeAtOnce(t *testing.T, g *testGate, waiting string) {
	t.Helper()
	const probeWithin = 4 * time.Second
	probes := map[string]func(){
		"NotReady (/readyz)": func() { g.c.NotReady() },
		"Live (/healthz)":    func() { _ = g.c.Live() },
		// kprom's gauges of the producer's buffer, and gate_inflight_records, read it
		// under the producer's lock: a scrape hung, and Prometheus saw the gate down.
		"Gather (/metrics)": func() { _, _ = g.reg.Gather() },
	}
	start := time.Now()
	answered := make(map[string]chan time.Duration)
	for name, fn := range probes {
		ch := make(chan time.Duration, 1)
		answered[name] = ch
		go func() { fn(); ch <- time.Since(start) }()
	}
	// Each answers in the end (a held one when the wait ends): its own time decides.
	for name, ch := range answered {
		if d := <-ch; d > probeWithin {
			t.Errorf("%s did not answer within %s while %s waits for the transaction coordinator (answered after %s)", name, probeWithin, waiting, d.Round(time.Millisecond))
		}
	}
}

// TestBufferedGaugesKeptThroughClientRebuild: exactly once, the gauges of the producer's
// buffer the consumer serves in kprom's place stay on /metrics when the transactional
// client is rebuilt (a refused transaction timeout, a fence). kprom unregisters its
// collectors from the registry when its client closes, its two buffered gauges with
// them though withoutKpromBuffered kept them out: the registry unregistered the
// consumer's own, of the same name, and they were gone until a restart.
func TestBufferedGaugesKeptThroughClientRebuild(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	cfg := env.ccfg
	cfg.TransactionalID = "gate-a"
	reg := prometheus.NewRegistry()
	c, err := New(cfg, nil, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := func() []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, mf := range mfs {
			if slices.Contains(kpromBufferedProduce, mf.GetName()) {
				names = append(names, mf.GetName())
			}
		}
		return names
	}
	if got := gathered(); len(got) != len(kpromBufferedProduce) {
		t.Fatalf("before any rebuild: %v gathered, want %v", got, kpromBufferedProduce)
	}
	for i := range 2 {
		c.closeClient(c.tx.Close)
		if err := c.newSession(); err != nil {
			t.Fatal(err)
		}
		if got := gathered(); len(got) != len(kpromBufferedProduce) {
			t.Fatalf("after rebuild %d: %v gathered, want %v", i+1, got, kpromBufferedProduce)
		}
	}
	c.tx.Close()
}

// txnCoordinatorUnavailable makes c answer every lookup of a transaction coordinator
// COORDINATOR_NOT_AVAILABLE, in the answer's body as Kafka does (franz-go then returns no
// error), while down holds, counting the lookups so answered in asked.
func txnCoordinatorUnavailable(c *kfake.Cluster, down *atomic.Bool, asked *atomic.Int64) {
	c.ControlKey(kmsg.FindCoordinator.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FindCoordinatorRequest)
		if r.CoordinatorType != 1 || !down.Load() {
			return nil, nil, false
		}
		asked.Add(1)
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		for _, k := range r.CoordinatorKeys {
			co := kmsg.NewFindCoordinatorResponseCoordinator()
			co.Key, co.ErrorCode = k, kerr.CoordinatorNotAvailable.Code
			resp.Coordinators = append(resp.Coordinators, co)
		}
		return resp, nil, true
	})
}

// stopWithinShutdownBound cancels g and fails t unless its Run returns within the bound
// the gate logs at start for d (GATE_SHUTDOWN_TIMEOUT and two GATE_REVOKE_TIMEOUTs at least
// once, one exactly once: the revoke of leaving waits no longer there) and half a second;
// held says what was held back, for the failure.
func stopWithinShutdownBound(t *testing.T, env *gateEnv, g *testGate, d Delivery, held string) {
	t.Helper()
	bound := env.ccfg.ShutdownTimeout + 2*env.ccfg.RevokeTimeout
	if d == ExactlyOnce {
		bound = env.ccfg.ShutdownTimeout + env.ccfg.RevokeTimeout
	}
	if held != "" {
		held = ", " + held
	}
	const margin = 500 * time.Millisecond
	start := time.Now()
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Until(start.Add(bound + margin))):
		t.Fatalf("Run had not returned %s after cancel%s: want within the bound, %s, plus %s",
			time.Since(start).Round(10*time.Millisecond), held, bound, margin)
	}
	t.Logf("Run returned %s after cancel", time.Since(start).Round(10*time.Millisecond))
}

// TestExactlyOnceStopWhileTransactionCoordinatorUnavailable: exactly once, the
// transaction coordinator answers COORDINATOR_NOT_AVAILABLE while a record waits, and
// the gate is stopped (SIGTERM) while a transaction waits for it: to begin (a failed
// produce made franz-go reload the producer id, which the abort could not, so Begin
// initialises it) or to end (the coordinator moved, NOT_COORDINATOR, after the
// transaction's offsets were added). Run returns within the bound the gate logs,
// exactly once GATE_SHUTDOWN_TIMEOUT + GATE_REVOKE_TIMEOUT, commits nothing it did
// not produce, and the record is routed once by the next start. Before, Begin was not
// cut short by the shutdown: it retried under a context of franz-go's own for the
// client's retry timeout (30 s by default), and Run with it.
func TestExactlyOnceStopWhileTransactionCoordinatorUnavailable(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"begin", "end"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			env := newEOSEnv(t, 1)
			env.ccfg.ShutdownTimeout = time.Second
			env.ccfg.RevokeTimeout = time.Second
			// Ten minutes: the next start routes the record within collect's 30 s only
			// if it does not wait for the broker to time the stopped gate's transaction
			// out.
			env.ccfg.TransactionTimeout = 10 * time.Minute
			// As in TestHealthAnswersWhileTransactionCannotBegin: the retry timeout,
			// well above the bound, is what bounds franz-go's retries.
			env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.RetryTimeout(5*time.Second),
				kgo.RetryBackoffFn(func(int) time.Duration { return 250 * time.Millisecond }))
			var asked atomic.Int64
			var down atomic.Bool
			txnCoordinatorUnavailable(env.cluster, &down, &asked)
			txnCoordinatorMoved(env.cluster, &down)
			t.Cleanup(func() { down.Store(false) })
			prod := producer(t, env.cluster)
			g := env.start(t, "a")
			// A transaction committed first: the producer id is initialised.
			produceAll(t, prod, []*kgo.Record{inputRecord(0, "team-0")})
			waitFor(t, 20*time.Second, "a transaction committed", func() bool {
				return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) >= 1
			})
			var fault *kfake.FaultHandle
			if stage == "begin" {
				fault = failAcceptedProduces(env, 1<<62)
			}
			down.Store(true)
			produceAll(t, prod, []*kgo.Record{inputRecord(1, "team-0")})
			if stage == "begin" {
				waitFor(t, 30*time.Second, "the transaction aborted", func() bool {
					return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted")) >= 1
				})
			}
			from := asked.Load()
			waitFor(t, 20*time.Second, "the transaction asking for its coordinator", func() bool { return asked.Load() > from+1 })
			stopWithinShutdownBound(t, env, g, ExactlyOnce, "a transaction waiting for its coordinator")
			if gi := env.cluster.GroupInfo(testGroup); gi != nil {
				if gc, ok := gi.Commits[inTopic][0]; ok && gc.Offset > 1 {
					t.Errorf("committed to %d, past the record no transaction produced (want at most 1)", gc.Offset)
				}
			}
			if fault != nil {
				fault.Remove()
			}
			down.Store(false)
			env.start(t, "a")
			out := collect(t, env.cluster, 2, 30*time.Second, 300*time.Millisecond, readCommitted())
			if lost, dup := out.conservation(2); len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("read_committed after the next start: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
			}
		})
	}
}

// txnCoordinatorMoved makes c answer EndTxn NOT_COORDINATOR while down holds: the
// coordinator the client knows has moved, and the client looks it up again (see
// txnCoordinatorUnavailable).
func txnCoordinatorMoved(c *kfake.Cluster, down *atomic.Bool) {
	c.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !down.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp, nil, true
	})
}

// TestExactlyOnceNewSessionFencesOpenTransaction: exactly once, a transaction's End
// fails after its offsets were added to it (the group's commit pending) and before the
// EndTxn reached a coordinator: the transaction coordinator moved and the cluster cannot
// name the new one for longer than the client's retry timeout. The gate rebuilds its
// client under the same transactional id, which must fence the open transaction at
// once, as the package doc promises of a restart: until it ends, the group coordinator
// answers the new member's offset fetch UNSTABLE_OFFSET_COMMIT, and the member polls
// nothing. Before, the new client fenced it only in its first Begin, after a poll that
// never came: the gate routed nothing until the broker timed the transaction out
// (GATE_TRANSACTION_TIMEOUT, 90 s by default).
func TestExactlyOnceNewSessionFencesOpenTransaction(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.TransactionTimeout = 10 * time.Minute // read_committed sees the record within 30 s only if the rebuild fences
	g, down := coordinatorLostAfterACommit(t, env)
	waitFor(t, 30*time.Second, "End failing and the client rebuilt", func() bool {
		return testutil.ToFloat64(g.c.m.recoveries.WithLabelValues("end_error")) >= 1
	})
	down.Store(false)
	out := collect(t, env.cluster, 2, 30*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(2); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed after the rebuild: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestExactlyOnceNotReadyWhileTransactionsCannotBegin: exactly once, a transaction's End
// fails for want of a transaction coordinator, and the rebuilt client cannot initialise
// its producer id while the coordinator stays unavailable: no transaction can begin, and
// the gate says so on /readyz (naming its transactional id), as the preflight does at
// start, until the coordinator answers; then it routes the record and is ready again.
// Before, the rebuilt client joined the group and read ready while no record could be
// routed, and having polled nothing it had no lag: the watchdog took it for idle too.
func TestExactlyOnceNotReadyWhileTransactionsCannotBegin(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	g, down := coordinatorLostAfterACommit(t, env)
	const want = `kafka: transactional id "gate-a": no transaction can begin`
	waitFor(t, 30*time.Second, "not ready, naming the transactional id", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), want)
	})
	if g.c.Ready() {
		t.Error("ready while no transaction can begin")
	}
	down.Store(false)
	out := collect(t, env.cluster, 2, 30*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(2); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
}

// coordinatorLostAfterACommit starts gate a on env with a client retry timeout of 2 s, has
// it commit a transaction of record 0, then makes the transaction coordinator unavailable
// (until down is cleared, at the latest when the test ends) and gives it record 1: that
// transaction's End fails, and the rebuilt client cannot set its producer id up.
func coordinatorLostAfterACommit(t *testing.T, env *gateEnv) (*testGate, *atomic.Bool) {
	t.Helper()
	env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.RetryTimeout(2*time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 250 * time.Millisecond }))
	var asked atomic.Int64
	down := new(atomic.Bool)
	txnCoordinatorUnavailable(env.cluster, down, &asked)
	txnCoordinatorMoved(env.cluster, down)
	t.Cleanup(func() { down.Store(false) })
	prod := producer(t, env.cluster)
	g := env.start(t, "a")
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "team-0")})
	waitFor(t, 20*time.Second, "a transaction committed", func() bool {
		return testutil.ToFloat64(g.c.m.transactions.WithLabelValues("committed")) >= 1
	})
	down.Store(true)
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "team-0")})
	return g, down
}
