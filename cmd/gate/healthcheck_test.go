package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: gate healthcheck exits 0 on a 200 from the path asked, and fails with the
// answer on anything else or no answer; a listen-anywhere GATE_HTTP_ADDR asks the local gate.
func TestHealthcheck(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			_, _ = w.Write([]byte("ok"))
		case r.URL.Path == "/readyz" && ready:
			_, _ = w.Write([]byte("ready"))
		case r.URL.Path == "/readyz":
			http.Error(w, "not ready: topic events_accepted missing", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	check := func(args []string, vars map[string]string) (string, error) {
		var out bytes.Buffer
		err := healthcheckCmd(context.Background(), args, env(vars), &out, &bytes.Buffer{})
		return out.String(), err
	}
	if out, err := check(nil, map[string]string{"GATE_HTTP_ADDR": ":" + port}); err != nil || !strings.Contains(out, "ready") {
		t.Errorf("ready gate through GATE_HTTP_ADDR :%s: %q, %v; want success", port, out, err)
	}
	if _, err := check([]string{"-addr", srv.Listener.Addr().String(), "-path", "/healthz"}, nil); err != nil {
		t.Errorf("/healthz: %v", err)
	}
	ready = false
	_, err := check([]string{"-addr", srv.Listener.Addr().String()}, nil)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "events_accepted") {
		t.Errorf("not ready: %v; want an error with the status and the reason", err)
	}
	srv.Close()
	if _, err := check([]string{"-addr", srv.Listener.Addr().String()}, nil); err == nil {
		t.Error("no gate listening: want an error")
	}
	if _, err := check([]string{"-path", "readyz"}, nil); err == nil {
		t.Error("a path without its slash: want a usage error")
	}
}
