package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/kafkatest"
)

// The images: Apache Kafka at the version the JVM runs (KRaft only) and Redis.
// GATETEST_IT_KAFKA_IMAGE and GATETEST_IT_REDIS_IMAGE name others (a 3.x broker, a mirror).
const (
	defaultKafkaImage = "apache/kafka:" + kafkatest.Version
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

// startContainerKafka starts one KRaft broker in a container, configured as the JVM
// brokers are (internal/kafkatest): topics are never created automatically, groups
// rebalance at once, session timeouts of a few seconds are allowed (the classic and the
// KIP-848 protocol), and the timestamp bounds are left to each topic.
func startContainerKafka(t *testing.T, o kafkaOpts) *kafka {
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
		"KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS":    "1000",
		"KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS":        "8000",
		"KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "500",
		"KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS":     "1000",
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
		"KAFKA_NUM_PARTITIONS":                           "1",
		"KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS":          "1000",
	}
	for k, v := range o.config {
		env["KAFKA_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = v
	}
	if o.saslUsers != nil {
		protocol = "SASL_PLAINTEXT"
		var jaas strings.Builder
		jaas.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		for _, u := range slices.Sorted(maps.Keys(o.saslUsers)) {
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

	ctr, err := testcontainers.Run(ctx, image("GATETEST_IT_KAFKA_IMAGE", defaultKafkaImage),
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
	k := &kafka{Brokers: host + ":" + port.Port(), Replicas: 1}
	k.opts = []kgo.Opt{kgo.SeedBrokers(k.Brokers)}
	if o.saslUsers != nil {
		k.opts = append(k.opts, kgo.SASL(plain.Auth{User: "admin", Pass: o.saslUsers["admin"]}.AsMechanism()))
	}
	k.Admin = k.newAdmin(t)
	return k
}

// startContainerRedis starts a Redis container, applies the CONFIG SET pairs config
// and returns its URL.
func startContainerRedis(t *testing.T, config ...string) string {
	t.Helper()
	var opts []testcontainers.ContainerCustomizer
	if len(config) > 0 {
		args := []string{"redis-server"}
		for i := 0; i+1 < len(config); i += 2 {
			args = append(args, "--"+config[i], config[i+1])
		}
		opts = append(opts, testcontainers.WithCmd(args...))
	}
	ctr, err := tcredis.Run(t.Context(), image("GATETEST_IT_REDIS_IMAGE", defaultRedisImage), opts...)
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
