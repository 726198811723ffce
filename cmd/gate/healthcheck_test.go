package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/limit"
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

// GATE_HTTP_ADDR with blanks around it (an env file's trailing space) is the address the
// gate listens on once trimmed, as config.Load reads every variable: gate healthcheck and
// gate team must ask that address too, not fail on the blanks.
// A JSON answer (the team API's errors are indented JSON) is shown on one line as JSON:
// the error line's newlines became "; " and showed {;   "error": ...; }.
func TestHealthcheckShowsJSONOnOneLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		code := http.StatusNotFound
		if r.URL.Path == "/v1/teams/42" {
			code = http.StatusOK
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("{\n  \"error\": \"no such team\",\n  \"team\": \"x\"\n}\n"))
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := healthcheckCmd(context.Background(), []string{"-addr", srv.Listener.Addr().String(), "-path", "/v1/teams/x"}, func(string) string { return "" }, &out, &bytes.Buffer{})
	if want := `{"error":"no such team","team":"x"}`; err == nil || !strings.Contains(cli.OneLine(err), want) {
		t.Errorf("error %q, want it to show %s", cli.OneLine(err), want)
	}
	out.Reset()
	if err := healthcheckCmd(context.Background(), []string{"-addr", srv.Listener.Addr().String(), "-path", "/v1/teams/42"}, func(string) string { return "" }, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if want := `{"error":"no such team","team":"x"}` + "\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("output %q, want it to end in %q", out.String(), want)
	}
}

func TestToolsTrimHTTPAddr(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim.CheckAt(t0, "t1", 1)
	mux := endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	env := map[string]string{"GATE_HTTP_ADDR": " :" + port + " "}
	cfg, err := config.Load(getenvFrom(env), []string{"GATE_HTTP_ADDR"})
	if err != nil || cfg.HTTPAddr != ":"+port {
		t.Fatalf("config.Load: HTTPAddr %q, %v; want the gate to listen on :%s", cfg.HTTPAddr, err, port)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"healthcheck", "-path", "/healthz"}, testHost(env), &stdout, &stderr); err != nil {
		t.Errorf("gate healthcheck with GATE_HTTP_ADDR %q: %v; want the gate at :%s asked", env["GATE_HTTP_ADDR"], err, port)
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"team", "t1"}, testHost(env), &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "team t1:") {
		t.Errorf("gate team with GATE_HTTP_ADDR %q: %v, stdout %q", env["GATE_HTTP_ADDR"], err, stdout.String())
	}
}

// gate healthcheck -timeout 0 (or a negative one) can never succeed: a usage error
// (exit status 2) naming the flag, not a failed check of a healthy gate.
func TestHealthcheckTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, d := range []string{"0", "0s", "-1s"} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"healthcheck", "-addr", addr, "-path", "/healthz", "-timeout", d}, testHost(nil), &stdout, &stderr)
		if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "-timeout") {
			t.Errorf("-timeout %s: %v (exit %d); want a usage error naming -timeout", d, err, cli.ExitCode(err))
		}
	}
}

// TestHealthcheckSlowGateSaysWhatItWaitedFor: a gate that does not answer within -timeout
// (overloaded, or -addr a port that accepts and says nothing) fails gate healthcheck with
// an error that names the URL asked and the -timeout waited, as gate team's does. Before,
// it ended in "context deadline exceeded", with no word of how long it had waited or
// which flag set that.
func TestHealthcheckSlowGateSaysWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: the client gives up
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"healthcheck", "-addr", addr, "-timeout", "200ms"}, testHost(nil), &stdout, &stderr)
	if cli.ExitCode(err) != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v (exit %d), want the -timeout's deadline, exit status 1", err, cli.ExitCode(err))
	}
	if want := "no answer from http://" + addr + "/readyz within 200ms (-timeout)"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout %q, want nothing on a failed check", stdout.String())
	}
}
