package endpoints

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHealthzAndReadyzFollowTheConsumer: /readyz lists every reason the consumer gives
// (a problem an operator must fix, a stall), and /healthz fails once the consumer says
// it is stuck for good, so that Kubernetes restarts the pod; until then both answer ok.
func TestHealthzAndReadyzFollowTheConsumer(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		reasons []string
		stuck   error
	)
	r := &Readiness{
		kafka: func() []string { mu.Lock(); defer mu.Unlock(); return reasons },
		live:  func() error { mu.Lock(); defer mu.Unlock(); return stuck },
	}
	r.ok.Store(true) // every Redis instance answered
	srv := httptest.NewServer(NewMux(prometheus.NewRegistry(), r, nil))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/readyz", "/healthz"} {
		if code, body := get(p); code != http.StatusOK {
			t.Errorf("%s healthy: %d %q", p, code, body)
		}
	}
	mu.Lock()
	reasons = []string{"partition events/3 stopped at offset 7", "kafka: no progress for 2m0s"}
	mu.Unlock()
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "offset 7") || !strings.Contains(body, "no progress") {
		t.Errorf("/readyz with problems: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while merely not ready: %d", code)
	}
	mu.Lock()
	stuck = errors.New("kafka: no progress for 10m0s while records wait")
	mu.Unlock()
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no progress") {
		t.Errorf("/healthz when stuck: %d %q", code, body)
	}
}

// TestServerBoundsASlowRequestBody: a client that sends a request's headers in time
// but never the body it announces (slowloris after the headers) must not hold a
// connection, and the goroutine serving it, forever: the server answers or closes it
// within a bound. ReadHeaderTimeout alone covers the headers only.
func TestServerBoundsASlowRequestBody(t *testing.T) {
	t.Parallel()
	r := &Readiness{kafka: func() []string { return nil }}
	r.ok.Store(true)
	srv := NewServer(NewMux(prometheus.NewRegistry(), r, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The headers at once, then none of the body they announce.
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: gate\r\nContent-Length: 10\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	const bound = 20 * time.Second
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(bound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("after %s the server still holds the connection of a request whose body never comes (no ReadTimeout)", time.Since(start).Round(time.Second))
	}
}

// TestServerBoundsASlowReader: a client that asks for an answer larger than the sockets'
// buffers (a large /metrics) and never reads it must not hold a connection, and the
// goroutine writing to it, forever: the server gives up on the write within a bound and
// closes the connection.
func TestServerBoundsASlowReader(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	big := prometheus.NewGauge(prometheus.GaugeOpts{Name: "big", Help: "h", ConstLabels: prometheus.Labels{"l": strings.Repeat("x", 32<<20)}})
	reg.MustRegister(big)
	r := &Readiness{kafka: func() []string { return nil }}
	r.ok.Store(true)
	srv := NewServer(NewMux(reg, r, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	closed := make(chan struct{})
	var once sync.Once
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	// The request, then nothing read of the answer.
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: gate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	const bound = 20 * time.Second
	start := time.Now()
	select {
	case <-closed:
	case <-time.After(bound):
		t.Fatalf("after %s the server still holds the connection of a client that reads nothing of its answer (no WriteTimeout)", time.Since(start).Round(time.Second))
	}
}
