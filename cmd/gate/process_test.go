package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/testflags"
)

// The tests in this file run the built binary as a separate process: what an operator's
// shell sees, stderr written by anything in the process (go-redis's own logger too) and
// the exit status included.

// builtGate is the gate binary, built once per test binary into a directory TestMain
// removes.
var builtGate struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	// The process tests mostly wait on the gates they start (its listeners, its
	// shutdown): six at a time took the package from 65 s to 48 s of wall time under
	// -race on two cores, its CPU time the same (23 s).
	testflags.Parallel(6)
	code := m.Run()
	if builtGate.dir != "" {
		_ = os.RemoveAll(builtGate.dir)
	}
	os.Exit(code)
}

// gateBinary builds cmd/gate once per test binary and returns its path. It skips the
// test under -short.
func gateBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	builtGate.once.Do(func() {
		if builtGate.dir, builtGate.err = os.MkdirTemp("", "gate-cmd-test-"); builtGate.err != nil {
			return
		}
		builtGate.path = filepath.Join(builtGate.dir, "gate")
		if out, err := exec.Command("go", "build", "-o", builtGate.path, ".").CombinedOutput(); err != nil {
			builtGate.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if builtGate.err != nil {
		t.Fatal(builtGate.err)
	}
	return builtGate.path
}

// procResult is how a run of the binary ended.
type procResult struct {
	code           int // exit status; -1 when it was killed
	stdout, stderr string
}

// runBinary runs the built gate with args and env as its whole environment (PATH and
// HOME aside: a stray GATE_ variable in the test's shell must not change the test), and
// kills it after timeout.
func runBinary(t *testing.T, timeout time.Duration, env map[string]string, args ...string) procResult {
	t.Helper()
	bin := gateBinary(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("gate %s did not exit within %s; killed\nstderr:\n%s", strings.Join(args, " "), timeout, stderr.String())
		return procResult{code: -1, stdout: stdout.String(), stderr: stderr.String()}
	}
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("gate %s: %v", strings.Join(args, " "), err)
	}
	return procResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// listener is a TCP port that records whether anything connected to it.
type listener struct{ ln *net.TCPListener }

func listen(t *testing.T) listener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return listener{ln}
}

func (l listener) addr() string { return l.ln.Addr().String() }

// connected reports whether a connection is waiting to be accepted: one made by a
// process that has exited is still in the queue.
func (l listener) connected(t *testing.T) bool {
	t.Helper()
	if err := l.ln.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	c, err := l.ln.Accept()
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// A rule's two limits at 1500ms and 1900ms: both would be counted into one Redis key (a
// further window's keys are named by its whole seconds, /w1), so the file is refused,
// by the binary as an operator runs it. gate rules check prints each limit's problem on a
// line of its own at its FILE:LINE:COL and exits 2; gate serve with GATE_RULES_FILE
// pointing at it exits 2 at start with one line naming the variable and both problems,
// having connected to neither Kafka nor Redis.
func TestBinaryRefusesRuleWindowsSharingAKey(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  - name: team\n    key: json:team_id\n    limits: [1500ms:10, 1900ms:20]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems := []string{
		file + `:4:14: rules[0] "team".limits[0]: "1500ms:10": window "1500ms" is not a whole number of seconds such as 1h`,
		file + `:4:25: rules[0] "team".limits[1]: "1900ms:20": window "1900ms" is not a whole number of seconds such as 1h`,
	}

	t.Run("rules check", func(t *testing.T) {
		t.Parallel()
		r := runBinary(t, 20*time.Second, nil, "rules", "check", file)
		want := append(slices.Clone(problems), "gate: configuration: "+file+": 2 problems, each on a line above")
		if got := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); r.code != 2 || r.stdout != "" || !slices.Equal(got, want) {
			t.Errorf("exit status %d (want 2), stdout %q\nstderr:\n%s\nwant stderr:\n%s", r.code, r.stdout, r.stderr, strings.Join(want, "\n"))
		}
	})

	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		kafka, rds := listen(t), listen(t)
		r := runBinary(t, 20*time.Second, map[string]string{
			"GATE_RULES_FILE":    file,
			"GATE_KAFKA_BROKERS": kafka.addr(),
			"GATE_REDIS_URLS":    "redis://" + rds.addr() + "/0",
			"GATE_HTTP_ADDR":     "127.0.0.1:0",
		}, "serve")
		want := `gate: configuration: GATE_RULES_FILE="` + file + `": rules: ` + strings.Join(problems, "; ") + "\n"
		if r.code != 2 || r.stdout != "" || r.stderr != want {
			t.Errorf("exit status %d (want 2), stdout %q\nstderr:\n%s\nwant:\n%s", r.code, r.stdout, r.stderr, want)
		}
		if kafka.connected(t) {
			t.Error("the gate connected to Kafka before refusing its rules")
		}
		if rds.connected(t) {
			t.Error("the gate connected to Redis before refusing its rules")
		}
	})
}

// With Redis unreachable, gate overrides writes one line on stderr, the error, and exits
// 1: not go-redis's own log lines (redis: ... pool.go:NNN: ... failed to dial), which its
// process-wide logger writes to stderr unless told otherwise, nor a note that it could
// not tell whether a gate runs under the prefix ahead of the error that says why.
func TestBinaryOverridesRedisDownOneLine(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "gate: reading gate:overrides: "},
		{[]string{"set", "t1", "5"}, "gate: setting t1 in gate:overrides: "},
		{[]string{"delete", "t1"}, "gate: deleting t1 from gate:overrides: "},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, 20*time.Second, map[string]string{"GATE_REDIS_URLS": "redis://" + addr + "/0"}, append([]string{"overrides"}, tt.args...)...)
			if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, tt.want) ||
				!strings.Contains(r.stderr, addr) {
				t.Errorf("exit status %d (want 1), stdout %q, stderr (want one line, %q...):\n%s", r.code, r.stdout, tt.want, r.stderr)
			}
		})
	}
}

// hostNameListener listens on this host's name's first address, as a gate does with
// GATE_HTTP_ADDR=$(hostname):8080, and returns the name: an address that is no loopback
// one, which HTTP_PROXY would take a request for. Without a name that resolves to an
// address it can listen on, the test skips, and under CI=true fails.
func hostNameListener(t *testing.T) (string, net.Listener) {
	t.Helper()
	fail := t.Skipf
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		fail = t.Fatalf
	}
	name, err := os.Hostname()
	if err != nil {
		fail("no host name: %v", err)
	}
	addrs, err := net.LookupHost(name)
	if err != nil || len(addrs) == 0 {
		fail("host name %q does not resolve: %v", name, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
	if err != nil {
		fail("cannot listen on %s, %q's address: %v", addrs[0], name, err)
	}
	return name, ln
}

// gate healthcheck asks the gate at GATE_HTTP_ADDR itself, never through the proxy of
// HTTP_PROXY, which many containers have for their way out: with a host name there (this
// host's, as GATE_HTTP_ADDR=$(hostname):8080 binds the pod's address alone), the check
// went to the proxy, and a healthy gate was reported unhealthy (exit status 1,
// "proxyconnect tcp: ..."), or the proxy answered for it.
func TestBinaryHealthcheckIgnoresHTTPProxy(t *testing.T) {
	t.Parallel()
	name, ln := hostNameListener(t)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: endpoints.NewMux(prometheus.NewRegistry(), nil, nil)}}
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	proxy := listen(t)
	res := runBinary(t, 30*time.Second, map[string]string{
		"GATE_HTTP_ADDR": net.JoinHostPort(name, port),
		"HTTP_PROXY":     "http://" + proxy.addr(),
		"HTTPS_PROXY":    "http://" + proxy.addr(),
	}, "healthcheck", "-path", "/healthz")
	if res.code != 0 {
		t.Errorf("gate healthcheck of a healthy gate at %s:%s with HTTP_PROXY set: exit %d\n%s", name, port, res.code, res.stderr)
	}
	if proxy.connected(t) {
		t.Error("gate healthcheck connected to HTTP_PROXY's proxy")
	}
}

// gate team asks the gate at GATE_HTTP_ADDR (or -addr) itself, as gate healthcheck does,
// never through HTTP_PROXY's proxy: with a host name there, the question went to the
// proxy, which failed it (exit status 1) or answered for another gate.
func TestBinaryTeamIgnoresHTTPProxy(t *testing.T) {
	t.Parallel()
	name, ln := hostNameListener(t)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.Check("whale", 1)
	}
	api := endpoints.NewTeamAPI(endpoints.GateJSON{RedisPrefix: "gate", ConsumerGroup: "gate"}, endpoints.FixedRules(lim))
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: endpoints.NewMux(prometheus.NewRegistry(), nil, api)}}
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	proxy := listen(t)
	for _, args := range [][]string{{"team", "whale"}, {"team", "-top", "5"}} {
		res := runBinary(t, 30*time.Second, map[string]string{
			"GATE_HTTP_ADDR": net.JoinHostPort(name, port),
			"HTTP_PROXY":     "http://" + proxy.addr(),
			"HTTPS_PROXY":    "http://" + proxy.addr(),
		}, args...)
		if res.code != 0 || !strings.Contains(res.stdout, "whale") {
			t.Errorf("gate %s of a gate at %s:%s with HTTP_PROXY set: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), name, port, res.code, res.stdout, res.stderr)
		}
		if proxy.connected(t) {
			t.Errorf("gate %s connected to HTTP_PROXY's proxy", strings.Join(args, " "))
		}
	}
}
