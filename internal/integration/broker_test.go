package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/kafkatest"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/testflags"
)

// shared is the single-node JVM broker the tests share when they run on the JVM: each
// test has topics and a group of its own (names), so one broker serves them all.
var shared = kafkatest.NewShared(kafkatest.Options{})

// saslUsers are the users of the SASL broker (kafkaOpts.sasl): the super user the tests
// administer it as, and the principals the gates log in as, each granted only what a
// test grants it on its own topics, group and transactional id.
var saslUsers = map[string]string{
	kafkatest.AdminUser: "admin-secret",
	"gate":              "gate-secret", // never DESCRIBE_CONFIGS on the cluster
	"describer":         "describer-secret",
}

// saslConfig is the SASL broker's own setting: transactions of at most 30 s
// (TestTransactionTimeoutAboveBrokerMax; no other gate on it runs exactly-once).
var saslConfig = map[string]string{"transaction.max.timeout.ms": "30000"}

// sharedSASL is the SASL broker the tests that need one share on the JVM: a user's
// permissions are the ACLs on resources named after each test, so the tests cannot
// grant each other anything.
var sharedSASL = kafkatest.NewShared(kafkatest.Options{SASL: saslUsers, Config: saslConfig})

func TestMain(m *testing.M) {
	// The tests mostly wait (for groups, brokers, sessions), each with a light load:
	// four at a time, unless -test.parallel says otherwise, keeps the package within a
	// few minutes on two cores.
	testflags.Parallel(4)
	code := m.Run()
	shared.Close()
	sharedSASL.Close()
	gateBin.cleanup()
	os.Exit(code)
}

// How a test gets its broker: GATETEST_IT_BROKER=jvm (Kafka's jars, internal/kafkatest),
// container (testcontainers: the apache/kafka image) or auto, the default: containers
// where a container runtime answers (as on GitHub's runners), the JVM elsewhere.
const (
	brokerJVM       = "jvm"
	brokerContainer = "container"
)

var kind struct {
	once sync.Once
	name string
	why  string
}

// brokerKind decides, once per test binary, where the brokers come from.
func brokerKind() (string, string) {
	kind.once.Do(func() {
		switch v := os.Getenv("GATETEST_IT_BROKER"); v {
		case brokerJVM, brokerContainer:
			kind.name, kind.why = v, "GATETEST_IT_BROKER="+v
		case "", "auto":
			if err := runtimeHealthy(); err != nil {
				kind.name, kind.why = brokerJVM, "no container runtime ("+firstLine(err.Error())+")"
			} else {
				kind.name, kind.why = brokerContainer, "a container runtime answers"
			}
		default:
			kind.name, kind.why = "", fmt.Sprintf("GATETEST_IT_BROKER=%q: want jvm, container or auto", v)
		}
	})
	return kind.name, kind.why
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// runtimeHealthy is testcontainers.SkipIfProviderIsNotHealthy's check, as an error.
func runtimeHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("container provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx)
}

// kafka is a broker (or cluster) a test runs its gates against.
type kafka struct {
	Brokers string // host:port[,host:port...], reachable from the test and the gates
	Admin   *kadm.Client
	opts    []kgo.Opt // a client's options (SASL as the super user when set)
	// JVM is the cluster when it runs from Kafka's jars: the tests that stop, kill or
	// restart brokers need it.
	JVM *kafkatest.Cluster
	// Replicas is the replication factor of the topics CreateTopic makes.
	Replicas int16
}

// kafkaOpts say what broker a test needs.
type kafkaOpts struct {
	// sasl asks for the SASL broker: its client listener SASL_PLAINTEXT (PLAIN) with
	// saslUsers, ACLs on (StandardAuthorizer, nothing allowed unless granted) and
	// saslConfig. On the JVM the tests share one (sharedSASL), in containers each has
	// its own.
	sasl bool
	// saslUsers, when set, turns the client listener into SASL_PLAINTEXT (PLAIN) with
	// these users and passwords, and ACLs on (StandardAuthorizer, nothing allowed unless
	// granted); "admin" must be one of them: it is the super user the test
	// administers the broker as.
	saslUsers map[string]string
	// nodes is 3 for a three-node cluster (the JVM only); 0 or 1 for one broker.
	nodes int
	// controller runs the KRaft controller as a node of its own (the JVM only), so
	// that brokers can be down while the cluster's metadata still changes.
	controller bool
	// own asks for a broker of the test's own (it changes broker-wide settings, or
	// stops it) instead of the shared one; config are its settings.
	own    bool
	config map[string]string
}

// startKafka gives t a broker as o asks: on the JVM the shared one (with o.sasl the
// shared SASL one) unless o needs its own, in a container a fresh one.
func startKafka(t *testing.T, o kafkaOpts) *kafka {
	t.Helper()
	name, why := brokerKind()
	if o.sasl {
		if o.saslUsers != nil || o.config != nil || o.own || o.nodes > 1 || o.controller {
			t.Fatal("kafkaOpts: sasl is the SASL broker as it is; it takes no other option")
		}
		o.saslUsers, o.config = saslUsers, saslConfig
	}
	switch {
	case name == "":
		t.Fatal(why)
	case name == brokerContainer && o.nodes <= 1 && !o.controller:
		return startContainerKafka(t, o)
	}
	var c *kafkatest.Cluster
	switch {
	case o.sasl:
		c = sharedSASL.Get(t)
	case o.saslUsers == nil && o.nodes <= 1 && !o.own && o.config == nil && !o.controller:
		c = shared.Get(t)
	default:
		c = kafkatest.Start(t, kafkatest.Options{Nodes: o.nodes, SASL: o.saslUsers, Config: o.config, Controller: o.controller})
	}
	k := &kafka{Brokers: c.Bootstrap(), JVM: c, opts: c.ClientOpts(), Replicas: int16(c.Nodes())}
	k.Admin = k.newAdmin(t)
	return k
}

// adminMetadataAge is how long the admin client answers a metadata question (kadm's
// Metadata, and the leaders ListEndOffsets and the like are sent to) from its cache:
// kgo's default, MetadataMinAge 5 s, made every wait on the brokers' metadata (a topic
// just created having leaders, a deleted one gone, a killed broker's partitions led
// elsewhere) last until the cache expired, whatever the brokers said meanwhile (each
// CreateTopic waited 5 s). The waits poll every 20 ms; this bounds them to about what
// the brokers take, at one metadata request per poll at most.
const adminMetadataAge = 100 * time.Millisecond

// newAdmin is the test's admin client of k.
func (k *kafka) newAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	return kadm.NewClient(k.Client(t, kgo.MetadataMinAge(adminMetadataAge)))
}

// Client returns a client of the broker (as the admin under SASL) with opts added.
func (k *kafka) Client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with partitions and the topic configs given as name, value
// pairs, replicated Replicas times.
func (k *kafka) CreateTopic(t *testing.T, topic string, partitions int32, configs ...string) {
	t.Helper()
	cfg := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		cfg[configs[i]] = &configs[i+1]
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkatest.NewTopic(ctx, k.Admin, topic, partitions, max(k.Replicas, 1), cfg); err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
	// CreateTopics answers once the controller has the topic; a broker serves it once
	// its own metadata has caught up, which on a loaded machine can be a while later.
	faulttest.WaitFor(t, time.Minute, "topic "+topic+" in the brokers' metadata with leaders", func() bool {
		m, err := k.Admin.Metadata(t.Context(), topic)
		if err != nil {
			return false
		}
		td, ok := m.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) != int(partitions) {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
}

// Committed returns the group's committed offsets on topic, summed.
func (k *kafka) Committed(t *testing.T, group, topic string) int64 {
	t.Helper()
	os, err := k.Admin.FetchOffsets(t.Context(), group)
	if err != nil {
		return -1
	}
	var sum int64
	for _, o := range os[topic] {
		if o.Err == nil && o.At > 0 {
			sum += o.At
		}
	}
	return sum
}

// Ends returns the end offsets of topics, per topic and partition.
func (k *kafka) Ends(t *testing.T, topics ...string) map[string]map[int32]int64 {
	t.Helper()
	var l kadm.ListedOffsets
	faulttest.WaitFor(t, time.Minute, fmt.Sprintf("the end offsets of %v", topics), func() bool {
		var err error
		l, err = k.Admin.ListEndOffsets(t.Context(), topics...)
		if err == nil {
			err = l.Error()
		}
		// A partition whose leader is moving answers NOT_LEADER for a moment.
		return err == nil
	})
	out := map[string]map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

// sum adds the offsets of one topic.
func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// WaitStable waits until no partition of topics has a transaction open (its last stable
// offset, what ListOffsets answers read_committed, is its end). A producer killed
// mid-transaction leaves its records below the end until the broker aborts them at the
// transaction timeout, and the abort marker lands past an end taken before it: a
// read_committed reader, which skips the aborted records, would never reach that end.
func (k *kafka) WaitStable(t *testing.T, topics ...string) {
	t.Helper()
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("the transactions open on %v to end", topics), func() bool {
		ends, err := k.Admin.ListEndOffsets(t.Context(), topics...)
		if err != nil || ends.Error() != nil {
			return false
		}
		stable, err := k.Admin.ListCommittedOffsets(t.Context(), topics...)
		if err != nil || stable.Error() != nil {
			return false
		}
		open := false
		ends.Each(func(o kadm.ListedOffset) {
			if s, ok := stable.Lookup(o.Topic, o.Partition); !ok || s.Offset != o.Offset {
				open = true
			}
		})
		return !open
	})
}

// ReadAll reads topics from the start to the ends they have now and returns their records
// (control records dropped); opts are added to the reader's options (read_committed).
func (k *kafka) ReadAll(t *testing.T, opts []kgo.Opt, topics ...string) []*kgo.Record {
	t.Helper()
	k.WaitStable(t, topics...)
	ends := k.Ends(t, topics...)
	want := map[string]map[int32]kgo.Offset{}
	left := 0
	for topic, ps := range ends {
		for p, end := range ps {
			if end > 0 {
				if want[topic] == nil {
					want[topic] = map[int32]kgo.Offset{}
				}
				want[topic][p] = kgo.NewOffset().AtStart()
				left++
			}
		}
	}
	if left == 0 {
		return nil
	}
	cl := k.Client(t, append([]kgo.Opt{
		kgo.ConsumePartitions(want),
		kgo.FetchMaxWait(100 * time.Millisecond),
		// Transaction markers take offsets, the last one's often: keep them to see the end
		// (every transaction is over when the ends are taken: WaitStable).
		kgo.KeepControlRecords(),
	}, opts...)...)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out []*kgo.Record
	done := map[string]map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %v: %d partitions not read to their end within two minutes", topics, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Topic][r.Partition]
			if r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				if done[r.Topic] == nil {
					done[r.Topic] = map[int32]bool{}
				}
				if !done[r.Topic][r.Partition] {
					done[r.Topic][r.Partition] = true
					left--
				}
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// startRedis starts a Redis and returns its URL: in a container when the brokers run in
// containers, else a redis-server process (internal/redistest). config are CONFIG SET
// pairs applied before the URL is returned ("maxmemory", "4mb").
func startRedis(t *testing.T, config ...string) string {
	t.Helper()
	if name, _ := brokerKind(); name == brokerContainer {
		return startContainerRedis(t, config...)
	}
	srv := redistest.Start(t)
	rc := srv.Client(t)
	for i := 0; i+1 < len(config); i += 2 {
		if err := rc.ConfigSet(t.Context(), config[i], config[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", config[i], config[i+1], err)
		}
	}
	return srv.URL()
}

// builtGate is the gate binary, built once per test binary.
type builtGate struct {
	once sync.Once
	dir  string
	path string
	err  error
}

var gateBin builtGate

// gateBinary builds the gate once per test binary and returns its path.
func gateBinary(t *testing.T) string {
	t.Helper()
	gateBin.once.Do(func() {
		gateBin.dir, gateBin.err = os.MkdirTemp("", "gate-integration-")
		if gateBin.err != nil {
			return
		}
		gateBin.path, gateBin.err = faulttest.BuildGate(gateBin.dir)
	})
	if gateBin.err != nil {
		t.Fatalf("building the gate: %v", gateBin.err)
	}
	return gateBin.path
}

func (b *builtGate) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// names are a test's own topics and group, from its name, so tests can share a broker.
type names struct {
	In, Acc, Ovf, Dlq, Group, Prefix string
}

func namesFor(t *testing.T) names { return namesWith(t, "") }

// namesWith is namesFor with suffix added to the test's name: several sets in one test.
func namesWith(t *testing.T, suffix string) names {
	p := strings.ToLower(strings.Trim(nonName.ReplaceAllString(t.Name()+"-"+suffix, "-"), "-"))
	if len(p) > 120 {
		p = p[:120]
	}
	return names{In: p + ".in", Acc: p + ".acc", Ovf: p + ".ovf", Dlq: p + ".dlq", Group: p, Prefix: p}
}

// Outs are the output topics.
func (n names) Outs() []string { return []string{n.Acc, n.Ovf, n.Dlq} }

// allOK is err, else the first error among res, which errOf reads from each result: kadm's
// admin calls answer each resource apart.
func allOK[T any](res []T, err error, errOf func(T) error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if err := errOf(r); err != nil {
			return err
		}
	}
	return nil
}

// allow creates the ACLs b builds, allowing principal (literal patterns), and fails t
// on any error.
func (k *kafka) allow(t *testing.T, b *kadm.ACLBuilder, principal string) {
	t.Helper()
	res, err := k.Admin.CreateACLs(t.Context(), b.Allow(principal).ResourcePatternType(kadm.ACLPatternLiteral))
	if err := allOK(res, err, func(r kadm.CreateACLsResult) error {
		if r.Err != nil {
			return fmt.Errorf("on %s: %w", r.Name, r.Err)
		}
		return nil
	}); err != nil {
		t.Fatalf("creating ACLs for %s: %v", principal, err)
	}
}
