package endpoints

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestReadinessWarnsOnceOfAnExpiredCertificate: a rediss:// Redis whose certificate has
// expired fails every handshake alike, and is warned of once, as a certificate the TLS
// handshake fails on. crypto/x509 writes the time of the check into the error, every
// attempt read as a new cause, and the gate warned every second, for ever, that Redis
// refused its PING (a review).
func TestReadinessWarnsOnceOfAnExpiredCertificate(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	addr := faulttest.TLSServer(t, &tls.Config{Certificates: []tls.Certificate{ca.IssueExpired(t, "redis").TLS}})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}})
	t.Cleanup(func() { _ = c.Close() })
	var logs faulttest.Buffer
	r := &Readiness{kafka: func() []string { return nil }, clients: []redis.UniversalClient{c}, urls: []string{"rediss://" + addr},
		timeout: 10 * time.Second, up: make([]bool, 1), log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(30 * time.Second); strings.Count(logs.String(), "attempt=") < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no three attempts in 30s; log:\n%s", logs.String())
		}
	}
	var warns []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "the TLS handshake with redis fails on a certificate") {
		t.Errorf("warnings %q; want one, that the TLS handshake fails on a certificate", warns)
	}
}

// A mux built without readiness checks answers /readyz 503, saying so: it panicked (a
// review), and a gate without them is not one to send traffic to.
func TestReadyzWithoutReadiness(t *testing.T) {
	mux := NewMux(prometheus.NewRegistry(), nil, nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no readiness checks") {
		t.Errorf("/readyz without readiness: %d %q, want 503 saying it has no checks", rec.Code, rec.Body.String())
	}
}
