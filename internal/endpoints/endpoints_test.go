package endpoints

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
