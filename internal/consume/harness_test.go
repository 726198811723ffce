package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tick"
)

const (
	inTopic   = "events"
	accTopic  = "accepted"
	ovfTopic  = "overflow"
	dlqTopic  = "dead-letter"
	testGroup = "gate-test"
	idHeader  = "test-id"
)

// newCluster starts an in-process Kafka-protocol broker with the input topic at parts
// partitions and the three output topics.
func newCluster(t testing.TB, parts int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(parts, inTopic),
		kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// testClientOpts make franz-go react in milliseconds instead of seconds: rebalances and
// metadata refreshes otherwise take 5 s each against kfake.
func testClientOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
		kgo.SessionTimeout(3 * time.Second),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	}
}

// shortJitter is a Config.Jitter that keeps the gate's backoff shape (full jitter under a
// cap doubling from retryMinBackoff) at a tenth of its length: 10 ms to 500 ms instead
// of 100 ms to 5 s. For tests whose time is the gate's own retry delays and whose
// behaviour does not depend on how long they are (backoff_test.go checks the delays).
func shortJitter(n int64) int64 { return rand.Int64N(n/10 + 1) }

// gateEnv is one shared limiter setup: the pieces a fleet of test gates need.
type gateEnv struct {
	cluster *kfake.Cluster
	redis   *redistest.Server
	lcfg    limit.Config
	rcfg    route.Config
	ccfg    Config
	// wrap, when set, wraps the router of the gates started next.
	wrap func(Router) Router
	// before, when set, is given each consumer started next before it runs.
	before func(*Consumer)
	// logs, when set, receives the log lines (JSON) of the gates started next, at
	// logLevel (info when zero; debug takes franz-go's lines too).
	logs     io.Writer
	logLevel slog.Level
	// ctx, when set, makes the context the gates started next run under from theirs
	// (kgo.PreCommitFnContext, say).
	ctx func(context.Context) context.Context
	// tickEvery, when set, is the tick interval of the gates started next (50 ms when
	// zero).
	tickEvery time.Duration
	// prime, with redis, has the gates started next read the keys of a partition's first
	// poll before routing it, as the gate does (Config.Prime).
	prime bool
}

func newEnv(t testing.TB, parts int32) *gateEnv {
	t.Helper()
	c := newCluster(t, parts)
	kf, err := route.ParseKeyFrom("json:team_id")
	if err != nil {
		t.Fatal(err)
	}
	return &gateEnv{
		cluster: c,
		lcfg:    limit.Config{Window: time.Minute, Threshold: 1_000_000},
		rcfg:    route.Config{KeyFrom: kf, AcceptedTopic: accTopic, OverflowTopic: ovfTopic, DeadLetterTopic: dlqTopic},
		ccfg: Config{
			Brokers: c.ListenAddrs(), InputTopic: inTopic, GroupID: testGroup,
			CommitInterval: 100 * time.Millisecond, ProduceRetries: 3,
			RevokeTimeout: 5 * time.Second, ShutdownTimeout: 10 * time.Second,
			ClientOpts: testClientOpts(),
		},
	}
}

// testGate is one running gate process: limiter, optional tick, consumer.
type testGate struct {
	name   string
	c      *Consumer
	lim    *limit.Limiter
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// limiterRouter builds a gate's limiter and router from the environment's
// configuration, their metrics in reg.
func (e *gateEnv) limiterRouter(t testing.TB, reg prometheus.Registerer) (*limit.Limiter, *route.Router) {
	t.Helper()
	lim, err := limit.New(e.lcfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := route.New(e.rcfg, lim, reg)
	if err != nil {
		t.Fatal(err)
	}
	return lim, r
}

func (e *gateEnv) start(t testing.TB, name string) *testGate {
	t.Helper()
	reg := prometheus.NewRegistry()
	lim, r := e.limiterRouter(t, reg)
	log := testLogger(t, name)
	if e.logs != nil {
		log = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: e.logLevel})).With("gate", name)
	}
	cfg := e.ccfg
	if cfg.Delivery == ExactlyOnce && cfg.TransactionalID == "" {
		cfg.TransactionalID = "gate-" + name // one per instance; a restart keeps its name
	}
	var rt Router = r
	if e.wrap != nil {
		rt = e.wrap(rt)
	}
	var tk *tick.Ticker
	if e.redis != nil {
		cl := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
		t.Cleanup(func() { _ = cl.Close() })
		every := e.tickEvery
		if every == 0 {
			every = 50 * time.Millisecond
		}
		var err error
		if tk, err = tick.New(lim, []redis.UniversalClient{cl}, tick.Config{TickInterval: every}, reg, log); err != nil {
			t.Fatal(err)
		}
		if e.prime {
			// As the gate primes (internal/gate's prime): the waiting records' keys read
			// in a tick made at once, for up to two intervals.
			cfg.Prime = func(ctx context.Context, recs []*kgo.Record) {
				if r.Expect(time.Now(), recs, new(route.Scratch)) > 0 {
					ctx, cancel := context.WithTimeout(ctx, 2*every)
					defer cancel()
					_ = tk.TickNow(ctx)
				}
			}
		}
	}
	c, err := New(cfg, rt, nil, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	if e.before != nil {
		e.before(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if e.ctx != nil {
		ctx = e.ctx(ctx)
	}
	g := &testGate{name: name, c: c, lim: lim, reg: reg, cancel: cancel, done: make(chan error, 1)}

	var tickDone chan struct{}
	if tk != nil {
		tickCtx, stopTick := context.WithCancel(context.Background())
		tickDone = make(chan struct{})
		go func() { defer close(tickDone); tk.Run(tickCtx) }()
		// The tick stops after the consumer, so its final flush has every count.
		go func() {
			err := c.Run(ctx)
			stopTick()
			<-tickDone
			g.done <- err
		}()
	} else {
		go func() { g.done <- c.Run(ctx) }()
	}
	t.Cleanup(func() { g.stop(t) })
	return g
}

// stop shuts the gate down gracefully and waits for it.
func (g *testGate) stop(t testing.TB) {
	t.Helper()
	if g.cancel == nil {
		return
	}
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("gate %s: Run: %v", g.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("gate %s did not stop within 30s", g.name)
	}
}

func testLogger(t testing.TB, name string) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("gate", name)
	}
	return slog.New(slog.DiscardHandler)
}

// event is a test input record's value.
type event struct {
	TeamID string `json:"team_id"`
	Seq    int    `json:"seq"`
}

// inputRecord builds input record id for team; a team of "" makes an unreadable value.
func inputRecord(id int, team string) *kgo.Record {
	v, _ := json.Marshal(event{TeamID: team, Seq: id})
	if team == "" {
		v = []byte("not json " + strconv.Itoa(id))
	}
	return &kgo.Record{
		Topic:     inTopic,
		Key:       []byte("key-" + strconv.Itoa(id)),
		Value:     v,
		Headers:   []kgo.RecordHeader{{Key: idHeader, Value: []byte(strconv.Itoa(id))}, {Key: "trace", Value: []byte("t" + strconv.Itoa(id))}},
		Timestamp: time.UnixMilli(1_700_000_000_000 + int64(id)),
	}
}

// upstream is a transactional producer of input records (transactional id
// "input-writer"), as a pipeline's upstream writes in transactions; closed when the test
// ends.
func upstream(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("input-writer"),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(inTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// writeInTxn begins a transaction of up (upstream) and writes the input records of ids
// from to to-1 (team-1) in it, leaving it open.
func writeInTxn(t testing.TB, up *kgo.Client, from, to int) {
	t.Helper()
	if err := up.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range teamInputs("team-1", from, to) {
		if err := up.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// teamInputs are the input records of ids from to to-1, all of team.
func teamInputs(team string, from, to int) []*kgo.Record {
	var recs []*kgo.Record
	for id := from; id < to; id++ {
		recs = append(recs, inputRecord(id, team))
	}
	return recs
}

// producer writes input records.
func producer(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produceAll(t testing.TB, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing input: %v", err)
	}
}

// outputs reads the three output topics from the start.
type outputs struct {
	recs map[string][]*kgo.Record // by topic
	ids  map[int][]string         // test id -> topics it was seen on
	n    int
}

// collect reads every output topic until want records arrived (or the timeout), then
// keeps reading for settle to catch duplicates. It reads uncommitted records too unless
// opts say otherwise (readCommitted).
func collect(t testing.TB, c *kfake.Cluster, want int, timeout, settle time.Duration, opts ...kgo.Opt) *outputs {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(accTopic, ovfTopic, dlqTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	o := &outputs{recs: map[string][]*kgo.Record{}, ids: map[int][]string{}}
	deadline := time.Now().Add(timeout)
	var settleAt time.Time
	for {
		now := time.Now()
		if o.n >= want && settleAt.IsZero() {
			settleAt = now.Add(settle)
		}
		if (!settleAt.IsZero() && now.After(settleAt)) || now.After(deadline) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { o.add(t, r) })
	}
	return o
}

// add counts output record r, by its test id.
func (o *outputs) add(t testing.TB, r *kgo.Record) {
	t.Helper()
	o.recs[r.Topic] = append(o.recs[r.Topic], r)
	id, err := strconv.Atoi(header(r, idHeader))
	if err != nil {
		t.Errorf("output record on %s without a test id header: %v", r.Topic, r.Headers)
		return
	}
	o.ids[id] = append(o.ids[id], r.Topic)
	o.n++
}

// collectAll reads every output topic to the end it has now (faulttest.ReadTopics: once
// no transaction is open on it), for a test whose gates have stopped and which cannot
// tell how many records to expect: rather than reading for a fixed time.
func collectAll(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *outputs {
	t.Helper()
	o := &outputs{recs: map[string][]*kgo.Record{}, ids: map[int][]string{}}
	for _, r := range faulttest.ReadTopics(t, c, 30*time.Second, opts, accTopic, ovfTopic, dlqTopic) {
		o.add(t, r)
	}
	return o
}

// readCommitted is how downstream consumers of an exactly-once gate read.
func readCommitted() kgo.Opt { return kgo.FetchIsolationLevel(kgo.ReadCommitted()) }

// conservation reports input ids missing from the outputs and ids seen more than once.
func (o *outputs) conservation(n int) (lost, dup []int) {
	for id := range n {
		switch len(o.ids[id]) {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			dup = append(dup, id)
		}
	}
	return lost, dup
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// waitCommitted waits until the group's commits cover every input record.
func waitCommitted(t testing.TB, c *kfake.Cluster, parts int32, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		behind := committedBehind(c, parts)
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("commits behind the input's end after %s: %v", timeout, behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committedBehind returns, for partitions whose commit is short of the end, "p:commit/end".
func committedBehind(c *kfake.Cluster, parts int32) []string {
	gi := c.GroupInfo(testGroup)
	var behind []string
	for p := range parts {
		end := c.PartitionInfo(inTopic, p).HighWatermark
		var got int64 = -1
		if gi != nil {
			if gc, ok := gi.Commits[inTopic][p]; ok {
				got = gc.Offset
			}
		}
		if got != end && end > 0 {
			behind = append(behind, fmt.Sprintf("%d:%d/%d", p, got, end))
		}
	}
	return behind
}

// failAcceptedProduces fails produces to the accepted topic with a retriable error
// (NOT_ENOUGH_REPLICAS), until the fault is removed: all but every every-th of its
// checks pass. kfake checks a fault once for a request's topic and once for each of its
// partitions, so this is no rate of requests: with every > 1, a request whose topic
// check fails fails whole, and one that passes it fails each partition but those whose
// check falls on a multiple of every. Produces to one or two partitions may then never
// pass: the tests that use it remove it after so many failures, or fail everything.
func failAcceptedProduces(env *gateEnv, every int64) *kfake.FaultHandle {
	var checks atomic.Int64
	return env.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(kmsg.Request) bool { return checks.Add(1)%every != 0 },
	})
}

// forcedRuleRouter is a rules router (its limiters its own, at a limit no team reaches) of
// two rules on json:team_id: first, for the keys it forces, ru (its name, action, topic
// and forced keys), then the team rule, overflow; its metrics on reg (nil: none).
func forcedRuleRouter(t testing.TB, rcfg route.Config, ru route.Rule, reg prometheus.Registerer) Router {
	t.Helper()
	team, err := route.ParseKeyFrom("json:team_id")
	if err != nil {
		t.Fatal(err)
	}
	var lims []*limit.Limiter
	for range 2 {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1_000_000}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	ru.Key, ru.Limiters = team, lims[:1]
	r, err := route.NewRules(rcfg, []route.Rule{ru, {Name: "team", Key: team, Limiters: lims[1:], Action: route.ActionOverflow}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// movingEnv is the setup of the tests of a record that fails while its partition moves
// to another gate: two gates over two partitions whose eager range assignment (members
// sorted by client id) gives a, alone, both partitions, and once b ("a-gate" sorts first)
// joins, gives b partition 0 and leaves a partition 1; a revoke waits 500 ms for the
// records in flight, and retries wait little (shortJitter).
type movingEnv struct {
	*gateEnv
	base []kgo.Opt
}

func newMovingEnv(t *testing.T) *movingEnv {
	env := &movingEnv{newEnv(t, 2), append(testClientOpts(), kgo.Balancers(kgo.RangeBalancer()))}
	env.ccfg.RevokeTimeout = 500 * time.Millisecond
	env.ccfg.Jitter = shortJitter
	return env
}

// startA starts gate a, alone, and waits until it is ready.
func (e *movingEnv) startA(t *testing.T) *testGate {
	e.ccfg.ClientOpts = append(slices.Clip(e.base), kgo.ClientID("b-gate"))
	a := e.start(t, "a")
	waitFor(t, 20*time.Second, "a ready", a.c.Ready)
	return a
}

// startB starts gate b, which takes partition 0 from a.
func (e *movingEnv) startB(t *testing.T) *testGate {
	e.ccfg.ClientOpts = append(slices.Clip(e.base), kgo.ClientID("a-gate"))
	return e.start(t, "b")
}

// produceToPartition0 produces r to the input's partition 0 with a client of its own,
// made with opts besides.
func produceToPartition0(t *testing.T, c *kfake.Cluster, r *kgo.Record, opts ...kgo.Opt) {
	t.Helper()
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	r.Partition = 0
	produceAll(t, prod, []*kgo.Record{r})
}

// setTopicConfig sets config name to value on each of topics of cl, as an operator's
// kafka-configs.sh --alter does, and fails the test unless every topic took it.
func setTopicConfig(t testing.TB, cl *kfake.Cluster, name, value string, topics ...string) {
	t.Helper()
	resp, err := kadm.NewClient(producer(t, cl)).AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Name: name, Value: kadm.StringPtr(value)}}, topics...)
	for _, topic := range topics {
		if err == nil {
			_, err = resp.On(topic, nil)
		}
	}
	if err != nil {
		t.Fatalf("setting %s to %s on %v: %v", name, value, topics, err)
	}
}
