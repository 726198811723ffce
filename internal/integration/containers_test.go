//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/faulttest"
)

// The images: a current Apache Kafka 4.x (KRaft only) and Redis. GATE_IT_KAFKA_IMAGE and
// GATE_IT_REDIS_IMAGE name others (a 3.x broker, a mirror).
const (
	defaultKafkaImage = "apache/kafka:4.1.0"
	defaultRedisImage = "redis:7.4-alpine"
	// clusterID is the KRaft cluster id the storage is formatted with (any 16 bytes,
	// base64url).
	clusterID = "4L6g3nShT-eMCtK--X86sw"
	// startScript is written into the Kafka container once its port is mapped: the
	// broker must advertise the address the host reaches it on, known only then.
	startScript = "/tmp/gate-it-start.sh"
)

func image(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// needRuntime skips t, with one line, when no container runtime answers.
func needRuntime(t *testing.T) {
	t.Helper()
	testcontainers.SkipIfProviderIsNotHealthy(t)
}

var gateBin struct {
	once sync.Once
	path string
	err  error
}

// gateBinary builds the gate once per test binary (after needRuntime, so a run that
// skips builds nothing) and returns its path.
func gateBinary(t *testing.T) string {
	t.Helper()
	gateBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "gate-integration-")
		if err != nil {
			gateBin.err = err
			return
		}
		gateBin.path, gateBin.err = faulttest.BuildGate(dir)
	})
	if gateBin.err != nil {
		t.Fatalf("building the gate: %v", gateBin.err)
	}
	return gateBin.path
}

// kafka is one single-node KRaft broker in a container.
type kafka struct {
	Brokers string // host:port, reachable from the test and the gates
	Admin   *kadm.Client
	opts    []kgo.Opt // the admin's client options (SASL as the super user when set)
}

// saslUsers, when set, turns the host listener into SASL_PLAINTEXT (PLAIN) with these
// users and passwords, and ACLs on (StandardAuthorizer, nothing allowed unless granted);
// "admin" must be one of them: it is the super user the test administers the broker as.
type kafkaOpts struct {
	saslUsers map[string]string
}

// startKafka starts the broker, configured as a test needs it: topics are never created
// automatically, groups rebalance at once, the minimum session timeout is low enough for
// faulttest.SessionTimeout, and the timestamp bounds are left to each topic.
func startKafka(t *testing.T, o kafkaOpts) *kafka {
	t.Helper()
	ctx := t.Context()
	protocol := "PLAINTEXT"
	env := map[string]string{
		"CLUSTER_ID":                                     clusterID,
		"KAFKA_NODE_ID":                                  "1",
		"KAFKA_PROCESS_ROLES":                            "broker,controller",
		"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9094",
		"KAFKA_LISTENERS":                                "HOST://0.0.0.0:9092,BROKER://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
		"KAFKA_INTER_BROKER_LISTENER_NAME":               "BROKER",
		"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
		"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":             "1",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
		"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":     "1",
		"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":             "1000",
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
		"KAFKA_NUM_PARTITIONS":                           "1",
	}
	if o.saslUsers != nil {
		protocol = "SASL_PLAINTEXT"
		var jaas strings.Builder
		jaas.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		users := make([]string, 0, len(o.saslUsers))
		for u := range o.saslUsers {
			users = append(users, u)
		}
		sort.Strings(users)
		for _, u := range users {
			fmt.Fprintf(&jaas, " user_%s=%q", u, o.saslUsers[u])
		}
		jaas.WriteString(";")
		env["KAFKA_SASL_ENABLED_MECHANISMS"] = "PLAIN"
		env["KAFKA_LISTENER_NAME_HOST_PLAIN_SASL_JAAS_CONFIG"] = jaas.String()
		env["KAFKA_AUTHORIZER_CLASS_NAME"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
		// The broker's own listeners (inter-broker, controller) are PLAINTEXT: ANONYMOUS.
		env["KAFKA_SUPER_USERS"] = "User:admin;User:ANONYMOUS"
		env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] = "false"
	}
	env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"] = "HOST:" + protocol + ",BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"

	ctr, err := testcontainers.Run(ctx, image("GATE_IT_KAFKA_IMAGE", defaultKafkaImage),
		testcontainers.WithExposedPorts("9092/tcp"),
		testcontainers.WithEnv(env),
		// Wait for the start script, then run the image's own launcher with it.
		testcontainers.WithEntrypoint("sh"),
		testcontainers.WithCmd("-c", "while [ ! -f "+startScript+" ]; do sleep 0.1; done; . "+startScript),
		testcontainers.WithLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostStarts: []testcontainers.ContainerHook{func(ctx context.Context, c testcontainers.Container) error {
				if err := wait.ForMappedPort("9092/tcp").WaitUntilReady(ctx, c); err != nil {
					return fmt.Errorf("waiting for the mapped port: %w", err)
				}
				host, err := c.Host(ctx)
				if err != nil {
					return fmt.Errorf("container host: %w", err)
				}
				port, err := c.MappedPort(ctx, "9092/tcp")
				if err != nil {
					return fmt.Errorf("mapped port: %w", err)
				}
				script := fmt.Sprintf("export KAFKA_ADVERTISED_LISTENERS=HOST://%s:%s,BROKER://localhost:9093\nexec /etc/kafka/docker/run\n", host, port.Port())
				if err := c.CopyToContainer(ctx, []byte(script), startScript, 0o755); err != nil {
					return fmt.Errorf("copying the start script: %w", err)
				}
				return wait.ForLog("Kafka Server started").WithStartupTimeout(2*time.Minute).WaitUntilReady(ctx, c)
			}},
		}),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("starting Kafka: %v", err)
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := ctr.MappedPort(ctx, "9092/tcp")
	if err != nil {
		t.Fatal(err)
	}
	k := &kafka{Brokers: host + ":" + port.Port()}
	k.opts = []kgo.Opt{kgo.SeedBrokers(k.Brokers)}
	if o.saslUsers != nil {
		k.opts = append(k.opts, kgo.SASL(plain.Auth{User: "admin", Pass: o.saslUsers["admin"]}.AsMechanism()))
	}
	cl, err := kgo.NewClient(k.opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	k.Admin = kadm.NewClient(cl)
	return k
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
// pairs.
func (k *kafka) CreateTopic(t *testing.T, topic string, partitions int32, configs ...string) {
	t.Helper()
	cfg := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		cfg[configs[i]] = &configs[i+1]
	}
	resp, err := k.Admin.CreateTopic(t.Context(), partitions, 1, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
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
	l, err := k.Admin.ListEndOffsets(t.Context(), topics...)
	if err != nil {
		t.Fatalf("listing end offsets of %v: %v", topics, err)
	}
	out := map[string]map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

// Sum adds the offsets of one topic.
func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// ReadAll reads topics from the start to the ends they have now and returns their records
// (control records dropped); opts are added to the reader's options (read_committed).
func (k *kafka) ReadAll(t *testing.T, opts []kgo.Opt, topics ...string) []*kgo.Record {
	t.Helper()
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
		// (every transaction is over when a test reads: committed, or aborted with its
		// marker when its gate was fenced by its restart or stopped).
		kgo.KeepControlRecords(),
	}, opts...)...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out []*kgo.Record
	done := map[string]map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %v: %d partitions not read to their end within a minute", topics, left)
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

// startRedis starts a Redis with the server arguments args ("--maxmemory", "2mb") and
// returns its URL.
func startRedis(t *testing.T, args ...string) string {
	t.Helper()
	opts := []testcontainers.ContainerCustomizer{}
	if len(args) > 0 {
		opts = append(opts, testcontainers.WithCmd(append([]string{"redis-server"}, args...)...))
	}
	ctr, err := tcredis.Run(t.Context(), image("GATE_IT_REDIS_IMAGE", defaultRedisImage), opts...)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("starting Redis: %v", err)
	}
	url, err := ctr.ConnectionString(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return url
}
