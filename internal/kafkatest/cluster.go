package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

const (
	// readyTimeout bounds a cluster's start (format, JVM start, controller election,
	// every broker registered) and a restarted node's return. Generous: two JVMs
	// starting on a loaded 2-core machine take several times what one takes alone.
	readyTimeout = 3 * time.Minute
	// stopTimeout bounds a graceful stop (SIGTERM) before SIGKILL.
	stopTimeout = 30 * time.Second
	// logTailBytes is how much of a node's log a failure report shows.
	logTailBytes = 8 << 10
	// AdminUser is the SASL super user Options.SASL must name.
	AdminUser = "admin"
)

// Options say what cluster to start. The zero value is one combined broker+controller
// node, PLAINTEXT.
type Options struct {
	// Nodes is how many nodes to run: 1, the default, or 3. They are combined
	// broker+controller nodes (KRaft voters), unless Controller is set.
	Nodes int
	// Controller runs the KRaft controller as a node of its own (process.roles=
	// controller, the last node id) and the Nodes as brokers only, as production
	// clusters do: so that two of three brokers can be down while the cluster's
	// metadata still changes (with three combined nodes, two down lose the quorum).
	Controller bool
	// SASL, when set, makes the client listener SASL_PLAINTEXT with the PLAIN
	// mechanism and these users (name: password), and turns authorization on
	// (StandardAuthorizer, nothing allowed without an ACL). It must name AdminUser,
	// the super user ClientOpts log in as. The brokers and controllers talk to each
	// other on PLAINTEXT listeners of their own (User:ANONYMOUS, a super user too).
	SASL map[string]string
	// Config adds to or overrides every node's server.properties.
	Config map[string]string
	// Heap is the JVM's maximum heap (-Xmx); "512m" when empty.
	Heap string
	// Throughput runs each broker's JVM as Kafka's own scripts do (G1, both JIT tiers),
	// for benchmarks. The default is tuned for tests on small machines: the serial
	// collector and the C1 compiler alone, which halve a broker's CPU time to start
	// (8.0 to 4.6 s here) and its memory (212 to 156 MiB) at a cost in steady-state
	// speed that a test does not feel but a benchmark would measure.
	Throughput bool
	// Getenv reads the environment (JAVA_HOME, GATETEST_KAFKA_JARS, HOME); os.Getenv when nil.
	Getenv func(string) string
	// archiveTo has the brokers write the classes they loaded to this file when they
	// exit normally (makeArchive), in place of mapping Tools.Archive.
	archiveTo string
}

// Cluster is a running Apache Kafka cluster of JVM processes on loopback ports.
// Its methods are safe for concurrent use.
type Cluster struct {
	tools Tools
	opts  Options
	dir   string
	id    string // KRaft cluster id
	nodes []*node
	// StartTime is how long New took: formatting, starting and every broker listed.
	StartTime time.Duration
	admin     *kgo.Client
}

type node struct {
	id                   int
	controller           bool // a controller only, not a broker (Options.Controller)
	port, internal, ctrl int
	dir, props, logPath  string
	mu                   sync.Mutex
	proc                 *process // nil while stopped
}

// tmpDir is the node's java.io.tmpdir, inside its directory (jvmArgs).
func (n *node) tmpDir() string { return filepath.Join(n.dir, "tmp") }

type process struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// startAttempts is how many times New starts a cluster afresh, on new ports, when a
// node exits while starting: the ports are free when picked, but tests running in
// parallel start servers too, and one can take a port in the seconds before a JVM
// binds it (Kafka then exits: "a fatal error while waiting for all of the SocketServer
// Acceptors to be started").
const startAttempts = 3

// New formats and starts a cluster under dir (which it fills; the caller removes it)
// and returns once a metadata request lists every broker. On error every process it
// started is killed.
func New(tools Tools, dir string, o Options) (*Cluster, error) {
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		c, err := newAttempt(tools, filepath.Join(dir, "attempt-"+strconv.Itoa(attempt)), o)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		var ex *exitedError
		if !errors.As(err, &ex) {
			break // not a port taken: another try would fail alike
		}
	}
	return nil, errors.Join(errs...)
}

// exitedError is a node that exited while the cluster started.
type exitedError struct {
	node int
	err  error
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("kafkatest: node %d exited while starting (%v)", e.node, e.err)
}

func newAttempt(tools Tools, dir string, o Options) (*Cluster, error) {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes != 1 && o.Nodes != 3 {
		return nil, fmt.Errorf("kafkatest: %d nodes: want 1 or 3", o.Nodes)
	}
	if o.SASL != nil && o.SASL[AdminUser] == "" {
		return nil, fmt.Errorf("kafkatest: SASL users lack %q, the super user", AdminUser)
	}
	if o.Heap == "" {
		o.Heap = "512m"
	}
	start := time.Now()
	c := &Cluster{tools: tools, opts: o, dir: dir}
	id, err := clusterID()
	if err != nil {
		return nil, err
	}
	c.id = id
	all := o.Nodes
	if o.Controller {
		all++
	}
	ports, err := freePorts(3 * all)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: picking free loopback ports: %w", err)
	}
	for i := range all {
		n := &node{id: i + 1, port: ports[3*i], internal: ports[3*i+1], ctrl: ports[3*i+2], controller: o.Controller && i == o.Nodes}
		n.dir = filepath.Join(dir, "node-"+strconv.Itoa(n.id))
		n.props = filepath.Join(n.dir, "server.properties")
		n.logPath = filepath.Join(n.dir, "server.log")
		if err := os.MkdirAll(n.tmpDir(), 0o755); err != nil {
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := os.WriteFile(n.props, []byte(c.properties(n)), 0o644); err != nil {
			return nil, fmt.Errorf("kafkatest: writing %s: %w", n.props, err)
		}
	}
	// Format every node's storage (in parallel: each is a JVM start).
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = c.format(n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.admin, err = kgo.NewClient(c.ClientOpts()...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kafkatest: admin client: %w", err)
	}
	if err := c.waitBrokers(readyTimeout, c.nodeIDs()...); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w\n%s", err, c.LogTails())
	}
	if err := c.controllerRunning(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w\n%s", err, c.LogTails())
	}
	c.StartTime = time.Since(start)
	return c, nil
}

// clusterID is a random KRaft cluster id, as `kafka-storage.sh random-uuid` prints: 16
// random bytes in unpadded base64url, not starting with '-' (Kafka's Uuid avoids it, so
// the id cannot be read as a command-line option).
func clusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("kafkatest: cluster id: %w", err)
		}
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if id[0] != '-' {
			return id, nil
		}
	}
}

// properties is n's server.properties: a combined KRaft node on loopback, tuned for
// tests (topics only made by the tests, groups rebalancing at once, small buffers),
// then Options.Config.
func (c *Cluster) properties(n *node) string {
	nn := c.Nodes()
	var voters []string
	for _, v := range c.nodes {
		if v.controller || !c.opts.Controller {
			voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", v.id, v.ctrl))
		}
	}
	client := "PLAINTEXT"
	if c.opts.SASL != nil {
		client = "SASL_PLAINTEXT"
	}
	rf := strconv.Itoa(min(nn, 3))
	p := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(n.id),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"controller.listener.names":                        "CONTROLLER",
		"listeners":                                        fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.internal, n.ctrl),
		"advertised.listeners":                             fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", n.port, n.internal),
		"listener.security.protocol.map":                   "CLIENT:" + client + ",INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"inter.broker.listener.name":                       "INTERNAL",
		"log.dirs":                                         filepath.Join(n.dir, "data"),
		"auto.create.topics.enable":                        "false", // as in production
		"num.partitions":                                   "1",
		"default.replication.factor":                       rf,
		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "3",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "3",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		// Classic groups: the gates' session timeouts in tests are a few seconds.
		"group.min.session.timeout.ms": "1000",
		// KIP-848 groups: the session timeout and heartbeat interval are the broker's
		// (45 s and 5 s by default, with equal minimums); a test's SIGKILLed member
		// leaves after 8 s, as under the classic protocol with faulttest's timings.
		"group.consumer.min.session.timeout.ms":    "1000",
		"group.consumer.session.timeout.ms":        "8000",
		"group.consumer.min.heartbeat.interval.ms": "500",
		"group.consumer.heartbeat.interval.ms":     "1000",
		// The log cleaner's dedupe buffer defaults to 128 MiB of heap.
		"log.cleaner.dedupe.buffer.size":    strconv.Itoa(2 << 20),
		"log.retention.check.interval.ms":   "1000",
		"log.segment.delete.delay.ms":       "1000",
		"num.network.threads":               "2",
		"num.io.threads":                    "4",
		"num.recovery.threads.per.data.dir": "1",
		// A controlled shutdown (SIGTERM) moves leadership away before the node stops.
		"controlled.shutdown.enable": "true",
		// A SIGKILLed broker is fenced, and its partitions led elsewhere, after 6 s
		// without a heartbeat (9 s by default).
		"broker.session.timeout.ms":    "6000",
		"broker.heartbeat.interval.ms": "1000",
	}
	if c.opts.SASL != nil {
		users := slices.Sorted(maps.Keys(c.opts.SASL))
		var jaas strings.Builder
		jaas.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		for _, u := range users {
			fmt.Fprintf(&jaas, " user_%s=%q", u, c.opts.SASL[u])
		}
		jaas.WriteString(";")
		p["sasl.enabled.mechanisms"] = "PLAIN"
		p["listener.name.client.plain.sasl.jaas.config"] = jaas.String()
		p["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
		p["super.users"] = "User:" + AdminUser + ";User:ANONYMOUS"
		p["allow.everyone.if.no.acl.found"] = "false"
	}
	switch {
	case n.controller:
		p["process.roles"] = "controller"
		p["listeners"] = fmt.Sprintf("CONTROLLER://127.0.0.1:%d", n.ctrl)
		delete(p, "advertised.listeners")
		delete(p, "inter.broker.listener.name")
	case c.opts.Controller:
		p["process.roles"] = "broker"
		p["listeners"] = fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", n.port, n.internal)
	}
	maps.Copy(p, c.opts.Config)
	keys := slices.Sorted(maps.Keys(p))
	var b strings.Builder
	b.WriteString("# written by internal/kafkatest\n")
	for _, k := range keys {
		// A properties value escapes backslashes; ours have none but the JAAS quotes.
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	return b.String()
}

// jvmArgs are the java arguments before the main class: bounded heap; with Throughput,
// Kafka's own G1 settings (bin/kafka-run-class.sh), else the serial collector and the C1
// compiler alone (Options.Throughput says why); our logging; and the node's own temporary
// directory, removed with it: the compression codecs' native libraries (snappy-java,
// lz4-java) are unpacked into java.io.tmpdir at each JVM's first compressed batch, and a
// broker killed (as the fault tests kill them) never deletes them: /tmp gathered hundreds.
//
// The default Options' JVMs map the broker class archive (Tools.Archive, archive.go);
// broker says the JVM is a broker's, not a format's, for the one that writes it.
func (c *Cluster) jvmArgs(n *node, heap string, broker bool) []string {
	gc := []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:-UsePerfData"}
	switch {
	case c.opts.Throughput:
		gc = []string{"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35"}
	case c.opts.archiveTo != "":
		if broker {
			gc = append(gc, "-XX:ArchiveClassesAtExit="+c.opts.archiveTo)
		}
	case c.tools.Archive != "":
		gc = append(gc, "-XX:SharedArchiveFile="+c.tools.Archive)
	}
	args := append([]string{"-Xmx" + heap, "-Xms64m"}, gc...)
	return append(args,
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+c.tools.Log4j,
		"-Dkafka.logs.dir="+n.dir,
		"-Djava.io.tmpdir="+n.tmpDir(),
		"-cp", filepath.Join(c.tools.Jars, "*"),
	)
}

// format runs StorageTool format on n (bin/kafka-storage.sh format), with the voters
// in its properties, so no --standalone.
func (c *Cluster) format(n *node) error {
	args := append(c.jvmArgs(n, "256m", false), "kafka.tools.StorageTool", "format", "-t", c.id, "-c", n.props)
	cmd := exec.Command(c.tools.Java, args...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafkatest: formatting node %d: %w\n%s", n.id, err, tail(out, logTailBytes))
	}
	return nil
}

// launch starts n's broker without waiting for it.
func (c *Cluster) launch(n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		select {
		case <-n.proc.done:
			// Exited by itself (crashed, killed from outside): stopped, as Running says.
			n.proc = nil
		default:
			return fmt.Errorf("kafkatest: node %d is already running", n.id)
		}
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: opening node %d's log: %w", n.id, err)
	}
	defer logf.Close()
	args := append(c.jvmArgs(n, c.opts.Heap, true), "kafka.Kafka", n.props)
	cmd := exec.Command(c.tools.Java, args...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkatest: starting node %d: %w", n.id, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	n.proc = p
	return nil
}

// nodeIDs are the brokers' node ids.
func (c *Cluster) nodeIDs() []int32 {
	var ids []int32
	for _, n := range c.brokers() {
		ids = append(ids, int32(n.id))
	}
	return ids
}

// brokers are the nodes that are brokers (all but a dedicated controller).
func (c *Cluster) brokers() []*node {
	var out []*node
	for _, n := range c.nodes {
		if !n.controller {
			out = append(out, n)
		}
	}
	return out
}

// waitBrokers polls until each node of ids, asked on its own listener, answers a
// metadata request that lists every broker of ids (so a restarted node is the new
// process, caught up with the cluster's metadata), failing early when a node's process
// has exited.
func (c *Cluster) waitBrokers(timeout time.Duration, ids ...int32) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		// Every node's process first: one that exited (its port taken) is found at once,
		// not behind another node that cannot list it yet. A dedicated controller's too:
		// without it no broker is listed, and its exit would be waited out to the timeout
		// rather than retried on fresh ports (New).
		if err := c.controllerRunning(); err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.nodes[id-1].up(); err != nil {
				return err
			}
		}
		ready := 0
		for _, id := range ids {
			n := c.nodes[id-1]
			if err := c.nodeLists(n, ids); err != nil {
				last = fmt.Errorf("node %d: %w", n.id, err)
				break
			}
			ready++
		}
		if ready == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafkatest: brokers %v not all listed within %v: %v", ids, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// controllerRunning checks that a dedicated controller node has not exited (the brokers
// being listed, it has started; one that could not bind its port exits). One stopped on
// purpose (Kill, Stop) is no error here.
func (c *Cluster) controllerRunning() error {
	for _, n := range c.nodes {
		if !n.controller {
			continue
		}
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			return &exitedError{node: n.id, err: p.waitErr}
		default:
		}
	}
	return nil
}

// nodeLists asks n alone for metadata and checks that it lists every broker of ids.
func (c *Cluster) nodeLists(n *node, ids []int32) error {
	opts := append(c.ClientOpts(), kgo.SeedBrokers(net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	have := map[int32]bool{}
	for _, b := range m.Brokers {
		have[b.NodeID] = true
	}
	for _, id := range ids {
		if !have[id] {
			return fmt.Errorf("metadata lists brokers %v, not yet %d", slices.Sorted(maps.Keys(have)), id)
		}
	}
	return nil
}

// Close kills every node (SIGKILL) and waits for the processes to exit. The data stay
// in the directory New was given.
func (c *Cluster) Close() {
	if c.admin != nil {
		c.admin.Close()
	}
	for _, n := range c.nodes {
		_ = c.kill(n)
	}
}

// Addrs are the client listeners' addresses, one per broker, host:port.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.brokers() {
		out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
	}
	return out
}

// Bootstrap is Addrs joined with commas, as GATE_KAFKA_BROKERS takes them.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

// Nodes is how many brokers the cluster has; their node ids are 1 to Nodes (a dedicated
// controller's is Nodes+1).
func (c *Cluster) Nodes() int { return len(c.brokers()) }

// ClientOpts are the options of a client of the cluster: its seed brokers and, under
// SASL, the super user's login.
func (c *Cluster) ClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}
	if c.opts.SASL != nil {
		opts = append(opts, kgo.SASL(plain.Auth{User: AdminUser, Pass: c.opts.SASL[AdminUser]}.AsMechanism()))
	}
	return opts
}

func (c *Cluster) node(id int) (*node, error) {
	if id < 1 || id > len(c.nodes) {
		return nil, fmt.Errorf("kafkatest: no node %d (the cluster has 1 to %d)", id, len(c.nodes))
	}
	return c.nodes[id-1], nil
}

// Kill SIGKILLs node id and waits for its process to exit: no controlled shutdown, its
// partitions' leadership moves when the controller notices (the broker session times
// out). Kill on a stopped node does nothing.
func (c *Cluster) Kill(id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	return c.kill(n)
}

func (c *Cluster) kill(n *node) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	return c.killProc(n, p)
}

// killProc SIGKILLs p, n's process unless another has taken its place since (then p has
// exited already, or is another caller's to end), and waits for it.
func (c *Cluster) killProc(n *node, p *process) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p == nil || n.proc != p {
		return nil
	}
	n.proc = nil
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kafkatest: killing node %d: %w", n.id, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("kafkatest: node %d (pid %d) did not exit within %v of SIGKILL", n.id, p.cmd.Process.Pid, stopTimeout)
	}
}

// Stop stops node id gracefully (SIGTERM: a controlled shutdown) and waits for it,
// SIGKILLing it after 30 s.
func (c *Cluster) Stop(id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		return c.killProc(n, p)
	}
	// Only p: a Kill and a Restart while Stop waited started another, which is not
	// Stop's to forget (Close would never kill it).
	n.mu.Lock()
	if n.proc == p {
		n.proc = nil
	}
	n.mu.Unlock()
	return nil
}

// Restart starts a stopped (or killed) node id again on its ports and data, and waits
// until metadata lists it.
func (c *Cluster) Restart(id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if err := c.launch(n); err != nil {
		return err
	}
	wait := func() error { return c.waitBrokers(readyTimeout, int32(id)) }
	if n.controller {
		// No client listener, never a broker in metadata: its controller port taking
		// connections is what there is to wait for.
		wait = func() error { return c.waitListening(n, readyTimeout) }
	}
	if err := wait(); err != nil {
		return fmt.Errorf("%w\n%s", err, c.LogTail(id))
	}
	return nil
}

// up reports whether n's process runs: an error when it was stopped, an *exitedError when
// it exited by itself.
func (n *node) up() error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kafkatest: node %d is stopped", n.id)
	}
	select {
	case <-p.done:
		return &exitedError{node: n.id, err: p.waitErr}
	default:
		return nil
	}
}

// waitListening polls until n's controller port takes a connection, failing early when
// its process exits.
func (c *Cluster) waitListening(n *node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.ctrl))
	for {
		if err := n.up(); err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafkatest: controller node %d not listening on %s within %v: %w", n.id, addr, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Running reports whether node id's process is up.
func (c *Cluster) Running(id int) bool {
	n, err := c.node(id)
	if err != nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return false
	}
	select {
	case <-n.proc.done:
		return false
	default:
		return true
	}
}

// RSS is the resident memory of each running node's JVM, in bytes, by node id (from
// /proc; empty where /proc is not Linux's).
func (c *Cluster) RSS() map[int]int64 {
	out := map[int]int64{}
	for _, n := range c.nodes {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					out[n.id] = kb << 10
				}
			}
		}
	}
	return out
}

// LogTail is the end of node id's log.
func (c *Cluster) LogTail(id int) string {
	n, err := c.node(id)
	if err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return fmt.Sprintf("(node %d's log: %v)", n.id, err)
	}
	return fmt.Sprintf("--- kafka node %d, last %d bytes of %s ---\n%s", n.id, min(len(b), logTailBytes), n.logPath, tail(b, logTailBytes))
}

// LogTails is LogTail of every node.
func (c *Cluster) LogTails() string {
	parts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		parts[i] = c.LogTail(n.id)
	}
	return strings.Join(parts, "\n")
}

// freePorts returns n distinct free loopback ports, from below the kernel's ephemeral
// range where it has room (lowPorts): the kernel hands out ports of that range to every
// listen on port 0 and every outgoing connection, so a node's port taken while the node is
// down (Restart binds its old ports: tens of seconds in a failover test) could be any
// other test's listener's. Below it, only another cluster choosing the same port at once
// can take one, as the random choice rarely does. The listeners are all open together,
// so none is handed out twice; a port taken before the broker binds it makes the broker
// exit, and New starts again on fresh ports.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	lo, hi := lowPorts()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if hi > lo && tries < 50*n {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+mrand.IntN(hi-lo)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // in use: another
			}
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lowPorts is the range [lo, hi) of ports freePorts chooses from: from 20000 to the
// start of the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 by
// default), or none (lo = hi) where that leaves fewer than 2000 or cannot be read.
func lowPorts() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start-20000 < 2000 {
		return 0, 0
	}
	return 20000, start
}
