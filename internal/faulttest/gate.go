package faulttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildGate builds the gate binary (github.com/capturegate/gate/cmd/gate) into dir and
// returns its path. Call it once per test binary, from TestMain.
func BuildGate(dir string) (string, error) {
	bin := filepath.Join(dir, "gate")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/capturegate/gate/cmd/gate")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gate: %v\n%s", err, out)
	}
	return bin, nil
}

// Gate is one gate process.
type Gate struct {
	Name string
	cmd  *exec.Cmd
	logs *Buffer
	done chan struct{}
	err  error // valid once done is closed
}

// Buffer is an io.Writer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Env is the process environment of a gate: only PATH and HOME are taken from the
// test's own, so a stray GATE_ variable in the developer's shell cannot change a test.
func Env(vars map[string]string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// StartGate starts bin as a gate process with vars as its whole environment (plus PATH,
// HOME and the group timings above, unless vars sets them) and args as its arguments. The process is killed at cleanup, and its log is
// printed if the test failed.
func StartGate(t testing.TB, bin, name string, vars map[string]string, args ...string) *Gate {
	t.Helper()
	g := &Gate{Name: name, logs: &Buffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(bin, args...)
	withTimings := map[string]string{
		"GATE_KAFKA_SESSION_TIMEOUT":   SessionTimeout.String(),
		"GATE_KAFKA_REBALANCE_TIMEOUT": RebalanceTimeout.String(),
		"GATE_KAFKA_FETCH_MAX_WAIT":    FetchMaxWait.String(),
	}
	logDir := os.Getenv("GATETEST_LOG_DIR")
	if logDir != "" {
		// Whole logs, franz-go's lines included, for a fault the tail does not explain.
		withTimings["GATE_LOG_LEVEL"] = "debug"
	}
	maps.Copy(withTimings, vars) // a test's own settings win
	g.cmd.Env = Env(withTimings)
	g.cmd.Stdout = g.logs
	g.cmd.Stderr = g.logs
	g.cmd.SysProcAttr = sysProcAttr()
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("starting gate %s: %v", name, err)
	}
	go func() {
		g.err = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.Kill(t)
		if logDir != "" {
			f := filepath.Join(logDir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-"+name+".log")
			if err := os.WriteFile(f, []byte(g.logs.String()), 0o644); err != nil {
				t.Errorf("GATETEST_LOG_DIR: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("--- gate %s log (tail) ---\n%s", name, tail(g.logs.String(), 8<<10))
		}
	})
	return g
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Logs returns what the process wrote to stdout and stderr so far.
func (g *Gate) Logs() string { return g.logs.String() }

// Pid is the process id.
func (g *Gate) Pid() int { return g.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (g *Gate) Exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to exit and returns its exit status, or -1
// when it did not exit in time.
func (g *Gate) Wait(timeout time.Duration) int {
	select {
	case <-g.done:
	case <-time.After(timeout):
		return -1
	}
	var ee *exec.ExitError
	if errors.As(g.err, &ee) {
		return ee.ExitCode()
	}
	if g.err != nil {
		return -1
	}
	return 0
}

// Kill sends SIGKILL and waits for the process to be reaped.
func (g *Gate) Kill(t testing.TB) {
	t.Helper()
	if g.Exited() {
		return
	}
	_ = g.cmd.Process.Kill()
	if g.Wait(10*time.Second) == -1 && !g.Exited() {
		t.Errorf("gate %s (pid %d) not reaped within 10s of SIGKILL", g.Name, g.Pid())
	}
}

// Term sends SIGTERM and waits for a clean exit (status 0).
func (g *Gate) Term(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to gate %s: %v", g.Name, err)
	}
	if code := g.Wait(timeout); code != 0 {
		t.Fatalf("gate %s: exit status %d after SIGTERM (want 0 within %s)", g.Name, code, timeout)
	}
}

// WaitLog waits until the log holds a line whose "msg" is msg.
func (g *Gate) WaitLog(t testing.TB, timeout time.Duration, msg string) {
	t.Helper()
	WaitFor(t, timeout, fmt.Sprintf("gate %s logs %q", g.Name, msg), func() bool {
		if g.Exited() {
			t.Fatalf("gate %s exited (%v) while waiting for %q", g.Name, g.err, msg)
		}
		return strings.Contains(g.Logs(), `"msg":"`+msg+`"`)
	})
}

// HTTPAddr returns the address the gate's HTTP server listens on, from its start-up line.
func (g *Gate) HTTPAddr(t testing.TB) string {
	t.Helper()
	g.WaitLog(t, 20*time.Second, "gate started")
	for _, line := range strings.Split(g.Logs(), "\n") {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"http_addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "gate started" {
			return l.Addr
		}
	}
	t.Fatalf("gate %s: no http_addr in its start-up line", g.Name)
	return ""
}

// Get fetches path from the gate's HTTP server and returns the status and body.
func (g *Gate) Get(t testing.TB, path string) (int, string) {
	t.Helper()
	return HTTPDo(t, http.MethodGet, "http://"+g.HTTPAddr(t)+path)
}

// HTTPDo makes one request and returns its status and body.
func HTTPDo(t testing.TB, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// WaitFor polls cond every 20ms until it holds, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
