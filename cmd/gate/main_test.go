package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/buildinfo"
	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/redistest"
)

// kafkaEnv starts an in-process broker with the gate's default topics and returns the
// variables that point a gate at it.
func kafkaEnv(t *testing.T) (*kfake.Cluster, map[string]string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events", "events_accepted", "events_overflow", "events_dead_letter"))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, map[string]string{"GATE_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ",")}
}

// kafkaClient is a client of c with opts, closed when the test ends.
func kafkaClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// getenvFrom is the injected environment of a test: a map, so tests run in parallel
// without touching the process environment.
func getenvFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// testHost is the process a test's run sees: m as its whole environment, a fixed host
// name (testHostname) and a fake clock at testNow.
func testHost(m map[string]string) host {
	environ := make([]string, 0, len(m))
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	return host{
		environ:  environ,
		getenv:   getenvFrom(m),
		hostname: func() string { return testHostname },
		clock:    clock.NewFake(testNow),
	}
}

const testHostname = "gate-test-host"

var testNow = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func withEnv(base map[string]string, more map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, more)
	return out
}

// syncBuffer is a bytes.Buffer that the gate's logger writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// servedGate is one run of `gate serve` in the background.
type servedGate struct {
	addr   string // the HTTP listener, from the start-up log line
	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	err    error         // what run returned, once done is closed
}

// startGate runs `gate serve` with env and waits for its start-up line. It stops the gate
// at cleanup if the test has not.
func startGate(t *testing.T, env map[string]string) *servedGate {
	t.Helper()
	return startGateFunc(t, func(ctx context.Context, stderr io.Writer) error {
		return run(ctx, []string{"serve"}, testHost(env), io.Discard, stderr)
	})
}

// startGateFunc is startGate with the run given: serveFn runs the gate until ctx is done,
// logging to stderr.
func startGateFunc(t *testing.T, serveFn func(ctx context.Context, stderr io.Writer) error) *servedGate {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	g := &servedGate{stderr: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = serveFn(ctx, g.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(15 * time.Second):
			t.Errorf("gate did not stop at cleanup\n%s", g.stderr)
		}
	})
	waitFor(t, 10*time.Second, "the start-up log line", func() bool {
		select {
		case <-g.done:
			t.Fatalf("run returned before starting: %v\n%s", g.err, g.stderr)
		default:
		}
		g.addr = startupAddr(g.stderr.String())
		return g.addr != ""
	})
	return g
}

// stop cancels the gate's context, as SIGTERM does, and returns what run returned.
func (g *servedGate) stop(t *testing.T) error {
	t.Helper()
	g.cancel()
	select {
	case <-g.done:
		return g.err
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not return within 15s of cancellation\n%s", g.stderr)
		return nil
	}
}

// startupAddr finds http_addr in the JSON start-up line, or "".
func startupAddr(logs string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gate started" {
			return line.HTTPAddr
		}
	}
	return ""
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// get returns the status and body of GET http://addr/path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

var tickCount = regexp.MustCompile(`(?m)^gate_limiter_tick_duration_seconds_count (\d+)$`)

func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)
	g := startGate(t, withEnv(kenv, map[string]string{
		"GATE_OVERRIDES":     "whale=5",
		"GATE_REDIS_URLS":    rs.URL(),
		"GATE_HTTP_ADDR":     "127.0.0.1:0",
		"GATE_TICK_INTERVAL": "50ms",
		"GATE_REDIS_KEY_TTL": "1s", // below 2 x window: raised, with a warning
	}))

	waitFor(t, 10*time.Second, "/readyz 200", func() bool {
		code, _ := get(t, g.addr, "/readyz")
		return code == http.StatusOK
	})
	if code, body := get(t, g.addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	// The tick runs: its duration histogram counts ticks.
	var metrics string
	waitFor(t, 10*time.Second, "a tick in /metrics", func() bool {
		_, metrics = get(t, g.addr, "/metrics")
		m := tickCount.FindStringSubmatch(metrics)
		if m == nil {
			return false
		}
		n, _ := strconv.Atoi(m[1])
		return n > 0
	})
	for _, name := range []string{"gate_limiter_tick_duration_seconds", "go_goroutines", "process_cpu_seconds_total", "gate_limiter_decisions_total",
		`gate_build_info{commit="` + buildinfo.Get().Commit + `",franz_go_version="` + buildinfo.Get().FranzGo + `",go_version="` + buildinfo.Get().GoVersion + `",version="dev"} 1`} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if code, _ := get(t, g.addr, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}

	// Records flow: 10 of a team limited to 5 split between accepted and overflow, a
	// record without a team goes to dead letter.
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var in []*kgo.Record
	for i := range 10 {
		in = append(in, &kgo.Record{Topic: "events", Value: []byte(fmt.Sprintf(`{"team_id":"whale","i":%d}`, i))})
	}
	in = append(in, &kgo.Record{Topic: "events", Value: []byte(`{"i":99}`)})
	if err := prod.ProduceSync(t.Context(), in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumeTopics("events_accepted", "events_overflow", "events_dead_letter"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitFor(t, 20*time.Second, "11 output records", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[r.Topic]++ })
		return got["events_accepted"]+got["events_overflow"]+got["events_dead_letter"] >= 11
	})
	if got["events_accepted"] != 5 || got["events_overflow"] != 5 || got["events_dead_letter"] != 1 {
		t.Errorf("outputs %v, want 5 accepted, 5 overflow, 1 dead letter", got)
	}
	_, metrics = get(t, g.addr, "/metrics")
	for _, want := range []string{`gate_records_total{reason="allowed",route="accepted"} 5`, `gate_records_total{reason="rate_limited",route="overflow"} 5`,
		`gate_records_total{reason="field_missing",route="dead_letter"} 1`, "gate_kafka_", "gate_rebalances_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Readiness latches: a Redis outage after start does not take the gate out of service.
	rs.Stop(t)
	if code, body := get(t, g.addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after Redis stopped: %d %q", code, body)
	}

	// A kept-alive connection, idle when the gate stops: the HTTP server's Shutdown
	// closes it (after the listener), so its end says run shut the server down. A dial
	// after run returned could not say so: another test's listener may take the port.
	idle := idleHTTPConn(t, g.addr)
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v after cancellation, want nil\n%s", err, g.stderr)
	}
	if err := idle.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("an idle HTTP connection still open after run returned: read %d bytes, %v, want EOF", n, err)
	}
	logs := g.stderr.String()
	for _, want := range []string{`"msg":"gate started","version":"dev","commit":"` + buildinfo.Get().Commit + `"`, `"franz_go_version":"` + buildinfo.Get().FranzGo + `"`, `"msg":"partitions assigned"`, `"msg":"consumer stopped"`, `"redis_key_ttl":"1s (at least each limit's counters' lifetime: 2 x its window, 3 x adaptive, + GATE_MAX_EVENT_AGE on the event clock)"`, `"msg":"GATE_REDIS_KEY_TTL raised`, `"msg":"redis ready: every instance has answered (/readyz waits for Kafka too)"`, `"msg":"stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// idleHTTPConn opens a connection to addr, asks it for /healthz with keep-alive and
// reads the whole answer, leaving the connection open and idle.
func idleHTTPConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET /healthz on a kept-alive connection: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz on a kept-alive connection: %d, close %v", resp.StatusCode, resp.Close)
	}
	return c
}

func TestReadyzWithoutRedis(t *testing.T) {
	t.Parallel()
	redisAddr := closedPort(t)
	_, kenv := kafkaEnv(t)
	g := startGate(t, withEnv(kenv, map[string]string{
		"GATE_REDIS_URLS":    "redis://:hunter2@" + redisAddr + "/0",
		"GATE_HTTP_ADDR":     "127.0.0.1:0",
		"GATE_TICK_INTERVAL": "50ms",
	}))
	// Wait until a PING has failed, so the 503 below is an answer and not a head start.
	waitFor(t, 10*time.Second, "a failed PING in the log", func() bool {
		return strings.Contains(g.stderr.String(), "redis not reachable yet")
	})
	code, body := get(t, g.addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, redisAddr) {
		t.Errorf("/readyz: %d %q, want 503 naming %s", code, body, redisAddr)
	}
	if code, body := get(t, g.addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := get(t, g.addr, "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	select {
	case <-g.done:
		t.Fatalf("run returned while Redis was down: %v", g.err)
	default:
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	if logs := g.stderr.String(); strings.Contains(logs, "hunter2") || strings.Contains(body, "hunter2") {
		t.Errorf("a password reached the logs or /readyz:\n%s\n%s", logs, body)
	}
}

// A configuration error returns before anything starts: no log line, no listener.
func TestServeConfigErrorStartsNothing(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	var stdout, stderr syncBuffer
	err := run(t.Context(), nil, testHost(map[string]string{
		"GATE_HTTP_ADDR": addr, "GATE_WINDOW": "abc", "GATE_REDIS_URLS": "redis://" + closedPort(t),
	}), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `GATE_WINDOW="abc": want a duration such as 60s`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v", err)
	}
	if cli.ExitCode(err) != 2 {
		t.Errorf("exit code %d for a configuration error, want 2", cli.ExitCode(err))
	}
	if stdout.String() != "" || stderr.String() != "" {
		t.Errorf("output before failing: stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something listens on %s", addr)
	}
}

// A taken HTTP port fails start-up, naming the variable, and leaves nothing running.
func TestServeListenError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var stderr syncBuffer
	err = run(t.Context(), []string{"serve"}, testHost(map[string]string{
		"GATE_HTTP_ADDR": ln.Addr().String(), "GATE_REDIS_URLS": "redis://" + closedPort(t),
	}), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "GATE_HTTP_ADDR=") {
		t.Fatalf("run: %v, want a GATE_HTTP_ADDR error", err)
	}
	if strings.Contains(stderr.String(), "gate started") {
		t.Errorf("logged a start before failing:\n%s", stderr.String())
	}
}

func TestRunCommands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		usageErr   bool
		stdoutHas  string
		stderrHas  string
		errHas     string
		errNot     string // the error must not hold it either
		wantNilErr bool
	}{
		{args: []string{"help"}, stdoutHas: "Usage: gate", wantNilErr: true},
		{args: []string{"-h"}, stdoutHas: "Usage: gate", wantNilErr: true},
		{args: []string{"--help"}, stdoutHas: "Usage: gate", wantNilErr: true},
		// help COMMAND is the command's usage, as COMMAND -h; a command unknown is refused.
		{args: []string{"help", "env"}, stderrHas: "Usage: gate env", wantNilErr: true},
		{args: []string{"help", "load"}, stderrHas: "Usage: gate load", wantNilErr: true},
		{args: []string{"help", "bogus"}, usageErr: true, stderrHas: "Usage: gate", errHas: `unknown command "bogus"`},
		{args: []string{"help", "env", "more"}, usageErr: true, errHas: "help takes one command"},
		{args: []string{"env"}, stdoutHas: "| `GATE_WINDOW` |", wantNilErr: true},
		{args: []string{"bogus"}, usageErr: true, stderrHas: "Usage: gate", errHas: `unknown command "bogus"`},
		{args: []string{"-x"}, usageErr: true, errHas: `unknown command "-x"`},
		{args: []string{"serve", "extra"}, usageErr: true, errHas: "serve takes no arguments"},
		{args: []string{"env", "markdown"}, usageErr: true, errHas: "env takes no arguments"},
		{args: []string{"env", "-check"}, errHas: "1 problem, on the line above", stderrHas: "GATE_WINDOW"},
		// version needs no configuration (GATE_WINDOW is bad here) and prints four lines.
		{args: []string{"version"}, stdoutHas: "version: dev\ncommit: ", wantNilErr: true},
		{args: []string{"version", "-v"}, usageErr: true, errHas: "version takes no arguments"},
		// -h is the usage, exit status 0, for the commands that take no arguments too.
		{args: []string{"serve", "-h"}, stderrHas: "Usage: gate", wantNilErr: true},
		{args: []string{"run", "--help"}, stderrHas: "Usage: gate", wantNilErr: true},
		{args: []string{"version", "-h"}, stderrHas: "Usage: gate", wantNilErr: true},
		{args: []string{"load", "-h"}, stderrHas: "Usage: gate load", wantNilErr: true},
		// Its flags as every command's: one a line, the text beside the flag (it printed Go's
		// default, the text on a line of its own).
		{args: []string{"load", "-h"}, stderrHas: "\n  -rate int             records per second", wantNilErr: true},
		{args: []string{"load", "-rate", "0"}, usageErr: true, errHas: "load: -rate 0", errNot: "gate load"},
		{args: []string{"load", "extra"}, usageErr: true, errHas: "load takes flags only", errNot: "gate load"},
		{args: []string{"load", "-nope"}, usageErr: true, errHas: "load: flag provided but not defined: -nope", errNot: "gate load"},
		{args: []string{"-help"}, stdoutHas: "load [flags]\n          produce the demo load", wantNilErr: true},
		// The demo is cmd/gate-dev; the old subcommand says where it went.
		{args: []string{"dev"}, usageErr: true, errHas: "go run ./cmd/gate-dev"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, testHost(map[string]string{"GATE_WINDOW": "bad"}), &stdout, &stderr)
			if tt.wantNilErr != (err == nil) {
				t.Fatalf("run: %v", err)
			}
			var ue *cli.UsageError
			if errors.As(err, &ue) != tt.usageErr {
				t.Errorf("usage error = %v, want %v (%v)", !tt.usageErr, tt.usageErr, err)
			}
			if err != nil && (!strings.Contains(err.Error(), tt.errHas) || strings.Contains(err.Error(), "\n")) {
				t.Errorf("error %q, want one line containing %q", err, tt.errHas)
			}
			if err != nil && tt.errNot != "" && strings.Contains(err.Error(), tt.errNot) {
				t.Errorf("error %q holds %q (main prints it after \"gate: \")", err, tt.errNot)
			}
			if !strings.Contains(stdout.String(), tt.stdoutHas) || !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stdout %q\nstderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

// Without a broker the gate starts, stays unready (not in the group), and stops cleanly.
func TestReadyzWithoutKafka(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	g := startGate(t, map[string]string{
		"GATE_KAFKA_BROKERS": closedPort(t),
		"GATE_REDIS_URLS":    rs.URL(),
		"GATE_HTTP_ADDR":     "127.0.0.1:0",
	})
	waitFor(t, 10*time.Second, "the redis PING", func() bool {
		return strings.Contains(g.stderr.String(), "redis ready: every instance has answered")
	})
	if code, body := get(t, g.addr, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "consumer group") {
		t.Errorf("/readyz without a broker: %d %q, want 503 about the consumer group", code, body)
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
}

// serviceLinks are the variables the kubelet sets for a Service gate (port http, 8080)
// and a Service gate-metrics (port metrics, 9090), as internal/config's
// kubernetesServiceLinks, which its tests check form by form.
var serviceLinks = map[string]string{
	"GATE_SERVICE_HOST":        "10.0.0.1",
	"GATE_SERVICE_PORT":        "8080",
	"GATE_SERVICE_PORT_HTTP":   "8080",
	"GATE_PORT":                "tcp://10.0.0.1:8080",
	"GATE_PORT_8080_TCP":       "tcp://10.0.0.1:8080",
	"GATE_PORT_8080_TCP_PROTO": "tcp",
	"GATE_PORT_8080_TCP_PORT":  "8080",
	"GATE_PORT_8080_TCP_ADDR":  "10.0.0.1",

	"GATE_METRICS_SERVICE_HOST":         "10.0.0.2",
	"GATE_METRICS_SERVICE_PORT":         "9090",
	"GATE_METRICS_SERVICE_PORT_METRICS": "9090",
	"GATE_METRICS_PORT":                 "tcp://10.0.0.2:9090",
	"GATE_METRICS_PORT_9090_TCP":        "tcp://10.0.0.2:9090",
	"GATE_METRICS_PORT_9090_TCP_PROTO":  "tcp",
	"GATE_METRICS_PORT_9090_TCP_PORT":   "9090",
	"GATE_METRICS_PORT_9090_TCP_ADDR":   "10.0.0.2",
}

// TestServeWithServiceLinks: a pod of a release named gate, in a namespace whose Services
// gate and gate-metrics Kubernetes announces to it, starts, and says at debug level which
// variables it took for service links. (serve is called with the environment's names,
// as run passes them from os.Environ: run itself would take them from this test
// process's environment.)
func TestServeWithServiceLinks(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	_, kenv := kafkaEnv(t)
	env := withEnv(withEnv(kenv, serviceLinks), map[string]string{
		"GATE_REDIS_URLS": rs.URL(),
		"GATE_HTTP_ADDR":  "127.0.0.1:0",
		"GATE_LOG_LEVEL":  "debug",
	})
	g := startGateFunc(t, func(ctx context.Context, stderr io.Writer) error {
		return serve(ctx, testHost(env), stderr)
	})
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil\n%s", err, g.stderr)
	}
	var found bool
	sc := bufio.NewScanner(strings.NewReader(g.stderr.String()))
	for sc.Scan() {
		var line struct {
			Level string   `json:"level"`
			Msg   string   `json:"msg"`
			Names []string `json:"names"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || !strings.Contains(line.Msg, "service link") {
			continue
		}
		found = true
		if line.Level != "DEBUG" {
			t.Errorf("service links logged at %s, want DEBUG: %s", line.Level, sc.Text())
		}
		want := slices.Sorted(maps.Keys(serviceLinks))
		if !slices.Equal(line.Names, want) {
			t.Errorf("service links logged %v, want %v", line.Names, want)
		}
	}
	if !found {
		t.Errorf("no debug line names the service links:\n%s", g.stderr)
	}
}

// TestShutdownBound: the gate's worst-case shutdown with the default settings is the
// sum the chart derives the grace period from (deploy/helm TestGracePeriod: 55s, this
// plus 5s).
func TestShutdownBound(t *testing.T) {
	t.Parallel()
	c, err := config.Load(getenvFrom(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.ShutdownBound(), 50*time.Second; got != want {
		t.Errorf("shutdown bound %s, want %s (20s drain + 2 × 10s revoke + 5s flush + 5s HTTP)", got, want)
	}
}

// TestServeTransactionalIDFromHostname: with exactly-once delivery and no
// GATE_TRANSACTIONAL_ID, the id is GATE_GROUP_ID-hostname, the host name being the one
// run was given, not the machine's.
func TestServeTransactionalIDFromHostname(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	_, kenv := kafkaEnv(t)
	g := startGate(t, withEnv(kenv, map[string]string{
		"GATE_REDIS_URLS": rs.URL(),
		"GATE_HTTP_ADDR":  "127.0.0.1:0",
		"GATE_DELIVERY":   "exactly-once",
		"GATE_GROUP_ID":   "fleet",
	}))
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil\n%s", err, g.stderr)
	}
	if want := `"transactional_id":"fleet-` + testHostname + `"`; !strings.Contains(g.stderr.String(), want) {
		t.Errorf("start-up line lacks %s:\n%s", want, g.stderr)
	}
}

// gate env -check loads this environment's GATE_* variables as the gate does at start:
// "ok" and how many are set, or every problem at once, one a line, each naming its
// variable (a configuration error: exit status 2).
func TestEnvCheck(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	good := map[string]string{"GATE_KAFKA_BROKERS": "k:9092", "GATE_REDIS_URLS": "redis://r:6379", "GATE_LIMITS": "1m:100,1h:2000"}
	if err := run(t.Context(), []string{"env", "-check"}, testHost(good), &stdout, &stderr); err != nil || !strings.HasPrefix(stdout.String(), "ok: 3 GATE_* variables set") {
		t.Errorf("env -check of a good environment: %v, stdout %q", err, stdout.String())
	}
	stdout.Reset()
	bad := map[string]string{"GATE_KAFKA_BROKERS": "k:9092", "GATE_WINDOW": "soon", "GATE_LIMIT_MODE": "maybe"}
	err := run(t.Context(), []string{"env", "-check"}, testHost(bad), &stdout, &stderr)
	var p config.Problems
	if !errors.As(err, &p) || !strings.Contains(stderr.String(), "GATE_WINDOW") || !strings.Contains(stderr.String(), "GATE_LIMIT_MODE") || stdout.Len() != 0 {
		t.Errorf("env -check of a bad environment: %v (%T), stdout %q, stderr %q; want both problems, as configuration problems", err, err, stdout.String(), stderr.String())
	}
}

// gate env -check counts the variables the gate uses: not those it ignores, as a
// Kubernetes service link or a value of spaces only (unset, as the gate reads it).
func TestEnvCheckCountsWhatTheGateUses(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"GATE_THRESHOLD":     "5000",
		"GATE_WINDOW":        "  ",
		"GATE_SERVICE_HOST":  "10.0.0.1",
		"GATE_SERVICE_PORT":  "8080",
		"GATE_PORT":          "tcp://10.0.0.1:8080",
		"GATE_PORT_8080_TCP": "tcp://10.0.0.1:8080",
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"env", "-check"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("env -check: %v\n%s", err, stderr.String())
	}
	want := "ok: 1 GATE_* variable set, the rest at their defaults (4 ignored as Kubernetes service links: GATE_PORT, GATE_PORT_8080_TCP, GATE_SERVICE_HOST, GATE_SERVICE_PORT)\n"
	if got := stdout.String(); got != want {
		t.Errorf("env -check printed\n%q, want\n%q", got, want)
	}
}

// gate env -check reads none of the files the variables name, a rules file's included:
// its "ok" said nothing of one, and a missing or bad rules file passed the check (a
// reviewer's), the gate then refusing to start. It says the file was not read, and what
// checks it.
func TestEnvCheckSaysTheRulesFileIsNotRead(t *testing.T) {
	env := map[string]string{"GATE_RULES_FILE": "/nonexistent/rules.yaml"}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"env", "-check"}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("env -check: %v\n%s", err, stderr.String())
	}
	want := "ok: 1 GATE_* variable set, the rest at their defaults; the rules file /nonexistent/rules.yaml (GATE_RULES_FILE) is not read here: gate rules check /nonexistent/rules.yaml checks it\n"
	if got := stdout.String(); got != want {
		t.Errorf("env -check printed\n%q, want\n%q", got, want)
	}
}

// TestServeNamesUnreadSettings: a gate started with a setting its modes do not read
// (adaptive thresholds' with static ones) starts, and says at warning level which setting
// and why, once; before, it was taken without a word.
func TestServeNamesUnreadSettings(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	_, kenv := kafkaEnv(t)
	env := withEnv(kenv, map[string]string{
		"GATE_REDIS_URLS":     rs.URL(),
		"GATE_HTTP_ADDR":      "127.0.0.1:0",
		"GATE_ADAPTIVE_FLOOR": "50",
	})
	g := startGate(t, env)
	if err := g.stop(t); err != nil {
		t.Fatalf("run returned %v, want nil\n%s", err, g.stderr)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(g.stderr.String()))
	for sc.Scan() {
		var line struct {
			Level    string `json:"level"`
			Msg      string `json:"msg"`
			Variable string `json:"variable"`
			Value    string `json:"value"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Variable == "" {
			continue
		}
		lines = append(lines, sc.Text())
		if line.Level != "WARN" || line.Variable != "GATE_ADAPTIVE_FLOOR" || line.Value != "50" || !strings.Contains(line.Msg, "GATE_THRESHOLD_MODE=static") {
			t.Errorf("unread setting logged as %s", sc.Text())
		}
	}
	if len(lines) != 1 {
		t.Errorf("%d lines name an unread setting, want 1:\n%s", len(lines), g.stderr)
	}
}
