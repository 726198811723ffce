package consume

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/testflags"
)

// kfakeChildEnv, set in a child's environment, makes the test binary serve a kfake
// broker instead of running tests (see TestMain).
const kfakeChildEnv = "GATETEST_KFAKE_CHILD"

// kfakeCPUEnv, set in a child's environment, binds the child to that CPU, with
// GOMAXPROCS 1, before it starts the broker (startKfakeProc's cpu).
const kfakeCPUEnv = "GATETEST_KFAKE_CPU"

func TestMain(m *testing.M) {
	if os.Getenv(kfakeChildEnv) == "1" {
		if c := os.Getenv(kfakeCPUEnv); c != "" {
			cpu, err := strconv.Atoi(c)
			if err == nil {
				_, err = pinProcess(cpu)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "binding the kfake process to CPU %q: %v\n", c, err)
				os.Exit(1)
			}
			runtime.GOMAXPROCS(1)
		}
		os.Exit(serveKfake(os.Stdin, os.Stdout))
	}
	// The parallel tests mostly wait (on kfake, retries, ticks, sessions: the package
	// used some 20 % of two cores): four at a time, unless -test.parallel says otherwise,
	// and not GOMAXPROCS's two, took it from ~190 s to ~120 s on two cores beside another
	// package's tests, as make test runs it.
	testflags.Parallel(4)
	os.Exit(m.Run())
}

// serveKfake runs a one-broker kfake cluster, writes its address as one line to out and
// serves until in reaches its end (the parent closed it or died).
func serveKfake(in io.Reader, out io.Writer) int {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting kfake: %v\n", err)
		return 1
	}
	defer c.Close()
	fmt.Fprintln(out, strings.Join(c.ListenAddrs(), ","))
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// kfakeProc is franz-go's in-process broker run in a process of its own (this test
// binary, re-executed): what BenchmarkEndToEnd runs against, so that the bench
// process's CPU time is the client's alone, as it is against a real broker, and broker
// and client do not share one Go scheduler.
type kfakeProc struct {
	addrs []string
	admin *kgo.Client
}

// startKfakeProc starts the child and waits for its address; the child ends at t's
// cleanup (its stdin closes, and it is killed if it does not exit within 10 s). A cpu of
// 0 or more binds the child to that CPU with GOMAXPROCS 1; -1 leaves it where it starts.
func startKfakeProc(t testing.TB, cpu int) *kfakeProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), kfakeChildEnv+"=1")
	if cpu >= 0 {
		cmd.Env = append(cmd.Env, kfakeCPUEnv+"="+strconv.Itoa(cpu))
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the kfake process: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the kfake process's address: %v", err)
	}
	k := &kfakeProc{addrs: strings.Split(strings.TrimSpace(line), ",")}
	k.admin = k.Client(t)
	return k
}

// Addrs returns the broker's address.
func (k *kfakeProc) Addrs() []string { return k.addrs }

// Client returns a client of the broker with opts added, closed at t's cleanup.
func (k *kfakeProc) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.addrs...), kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of the broker, closed at t's cleanup.
func (k *kfakeProc) Admin(t testing.TB) *kadm.Client { return kadm.NewClient(k.Client(t)) }

// CreateTopic creates topic with partitions; it fails t on error.
func (k *kfakeProc) CreateTopic(t testing.TB, topic string, partitions int32, _ ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(k.admin).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
}
