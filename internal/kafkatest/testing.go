package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// inCI reports whether CI is true: a missing tool is then a failure, not a skip.
func inCI(getenv func(string) string) bool {
	v, _ := strconv.ParseBool(getenv("CI"))
	return v
}

// need returns the tools, or ends t: a skip naming what to install, a failure under CI
// or when an installed tool fails.
func need(t testing.TB, getenv func(string) string) Tools {
	t.Helper()
	tools, err := FindTools(getenv)
	if err == nil {
		return tools
	}
	if IsMissing(err) && !inCI(getenv) {
		t.Skipf("%v; skipping (set CI=true to make this a failure)", err)
	}
	if IsMissing(err) {
		t.Fatalf("%v; CI=%s, so this is a failure, not a skip", err, getenv("CI"))
	}
	t.Fatal(err)
	return Tools{}
}

// Start starts a cluster for t: it skips t when Java 17+ or Maven is missing (fails it
// under CI=true), kills every node at cleanup and prints the nodes' log tails if t
// failed.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	tools := need(t, o.Getenv)
	dir := t.TempDir()
	c, err := New(tools, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails())
		}
		c.Close()
		if keep := o.Getenv("GATETEST_LOG_DIR"); keep != "" {
			if err := keepLogs(keep, t.Name(), dir); err != nil {
				t.Errorf("GATETEST_LOG_DIR: %v", err)
			}
		}
	})
	t.Logf("kafkatest: Apache Kafka %s, %d node(s) at %s, started in %v", Version, c.Nodes(), c.Bootstrap(), c.StartTime.Round(time.Millisecond))
	return c
}

// Shared is a cluster that the tests of one package share: started by the first test
// that asks for it, stopped by Close in TestMain. Tests give themselves topics (and
// groups) of their own names, so they need not start a broker each.
type Shared struct {
	opts Options
	once sync.Once
	dir  string
	c    *Cluster
	err  error
	skip string
}

// NewShared returns a Shared that starts a cluster with o when first asked.
func NewShared(o Options) *Shared {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	return &Shared{opts: o}
}

// Get returns the shared cluster, starting it on the first call; it skips or fails t
// as Start does. If t fails, its cleanup prints the nodes' log tails.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	s.once.Do(func() {
		tools, err := FindTools(s.opts.Getenv)
		if err != nil {
			if IsMissing(err) && !inCI(s.opts.Getenv) {
				s.skip = fmt.Sprintf("%v; skipping (set CI=true to make this a failure)", err)
				return
			}
			s.err = err
			return
		}
		s.dir, s.err = os.MkdirTemp("", "kafkatest-")
		if s.err != nil {
			return
		}
		s.c, s.err = New(tools, s.dir, s.opts)
	})
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("the shared Kafka cluster: %v", s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.c.LogTails())
		}
	})
	return s.c
}

// Close stops the cluster if it was started and removes its directory.
func (s *Shared) Close() {
	if s.c != nil {
		s.c.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Client returns a client of the cluster with opts added, closed at t's cleanup.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(c.ClientOpts(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of the cluster, closed at t's cleanup.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopic creates topic with partitions, replicated on every node (up to three),
// with the topic configs given as name, value pairs; it fails t on error.
func (c *Cluster) CreateTopic(t testing.TB, topic string, partitions int32, configs ...string) {
	t.Helper()
	if len(configs)%2 != 0 {
		t.Fatalf("CreateTopic %s: configs %v are not name, value pairs", topic, configs)
	}
	cfg := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		cfg[configs[i]] = &configs[i+1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := NewTopic(ctx, kadm.NewClient(c.admin), topic, partitions, int16(min(c.Nodes(), 3)), cfg); err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
}

// NewTopic creates topic with adm. TOPIC_ALREADY_EXISTS is success when the topic has the
// partitions and replicas asked for: the client retries a create the controller
// answered NOT_CONTROLLER while its quorum moved (three nodes starting under load), and
// the first attempt may have created the topic already (seen in a suite run under load:
// a test's own topic refused as existing). A topic of another shape is someone else's:
// an error.
func NewTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replicas int16, cfg map[string]*string) error {
	resp, err := adm.CreateTopic(ctx, partitions, replicas, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	td, derr := adm.ListTopics(ctx, topic)
	if derr == nil {
		derr = td.Error()
	}
	if derr != nil {
		return fmt.Errorf("%w; describing it: %w", err, derr)
	}
	d := td[topic]
	if got := int32(len(d.Partitions)); got != partitions || int16(d.Partitions.NumReplicas()) != replicas {
		return fmt.Errorf("%w, with %d partitions of %d replicas, not the %d of %d asked for", err, got, d.Partitions.NumReplicas(), partitions, replicas)
	}
	return nil
}

// keepLogs copies a cluster's directory (its nodes' logs and data, for
// kafka-dump-log.sh: a fault the tail does not explain is found in them) into keep, as
// test's, replacing an earlier run's, as the gates' logs are (internal/faulttest):
// os.CopyFS writes over no file, and every run after the first into one directory
// failed its tests.
func keepLogs(keep, test, dir string) error {
	to := filepath.Join(keep, strings.NewReplacer("/", "_", " ", "_").Replace(test)+"-kafka")
	if err := os.RemoveAll(to); err != nil {
		return err
	}
	return os.CopyFS(to, os.DirFS(dir))
}
