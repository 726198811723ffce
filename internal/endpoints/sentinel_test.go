package endpoints

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/redistest"
)

// TestReadyzNamesTheSentinelPassword: sentinels that require a password of their own
// (Bitnami's chart sets one by default) and get none, or a wrong one, keep the gate not
// ready with one warning, and /readyz saying so, that names GATE_REDIS_SENTINEL_PASSWORD
// (not GATE_REDIS_PASSWORD, the primary's) and holds no password; with the right one
// the gate is ready.
func TestReadyzNamesTheSentinelPassword(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinelWith(t, 0, 1, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	for _, tc := range []struct {
		name, password string
		ready          bool
	}{
		{"none", "", false},
		{"wrong", "not-it", false},
		{"right", "sentinel-pw", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"GATE_REDIS_MODE":            "sentinel",
				"GATE_REDIS_SENTINEL_MASTER": set.Master,
				"GATE_REDIS_SENTINEL_ADDRS":  strings.Join(set.SentinelAddrs(), ","),
				"GATE_REDIS_URLS":            "redis://127.0.0.1:6379/0",
				"GATE_REDIS_PASSWORD":        "data-pw",
			}
			if tc.password != "" {
				env["GATE_REDIS_SENTINEL_PASSWORD"] = tc.password
			}
			r, logs := readinessFromEnv(t, env)
			srv := httptest.NewServer(NewMux(prometheus.NewRegistry(), r, nil))
			t.Cleanup(srv.Close)

			// Poll /readyz until it is ready, or until it says why not (the first PING
			// refused).
			var body string
			for deadline := time.Now().Add(20 * time.Second); ; {
				resp, err := http.Get(srv.URL + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				body = string(b)
				if body == "ready\n" || strings.Contains(body, "refuses PING") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz never settled: %q", body)
				}
				time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
			}
			t.Logf("/readyz: %s", body)
			if tc.ready {
				if body != "ready\n" {
					t.Errorf("/readyz with the right sentinel password: %q", body)
				}
				return
			}
			if !strings.Contains(body, "GATE_REDIS_SENTINEL_PASSWORD") {
				t.Errorf("/readyz does not name GATE_REDIS_SENTINEL_PASSWORD: %q", body)
			}
			// The reason is shown as the check finds it, and its warning logged after:
			// polled, as a loaded machine can run the test's read between the two.
			var warns []string
			for deadline := time.Now().Add(10 * time.Second); ; {
				warns = warns[:0]
				for line := range strings.Lines(logs.String()) {
					if strings.Contains(line, "level=WARN") {
						warns = append(warns, line)
					}
				}
				if len(warns) > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
			}
			if len(warns) != 1 || !strings.Contains(warns[0], "GATE_REDIS_SENTINEL_PASSWORD") {
				t.Errorf("warnings %q, want one naming GATE_REDIS_SENTINEL_PASSWORD", warns)
			}
			for _, pw := range []string{"not-it", "sentinel-pw", "data-pw"} {
				if strings.Contains(body, pw) || strings.Contains(logs.String(), pw) {
					t.Errorf("a password is shown: /readyz %q, logs:\n%s", body, logs.String())
				}
			}
		})
	}
}
