package tick

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tlsreload"
)

// TestTLSRefusedHasItsOwnCause: a rediss:// Redis whose TLS handshake fails on a
// certificate (its own, not signed by a CA of GATE_REDIS_TLS_CA_FILE, as after a CA
// rotation done out of order; or the gate's, which Redis refuses with a TLS alert) was
// counted as cause="connection" and logged as any failed pipeline, as a Redis that is
// down, sending an on-call engineer to the network. It is cause="tls" now, and the log
// names the certificate problem and the variables to fix; retries and fail-open are
// unchanged (every tick fails, once, and the counts are kept). A server that speaks only
// TLS versions the gate does not (its tls-protocols) answers with an alert about no
// certificate: a TLS failure all the same, said without sending the operator to the
// certificate files (a review: any alert was taken for a certificate refused).
func TestTLSRefusedHasItsOwnCause(t *testing.T) {
	t.Parallel()
	ca, other := faulttest.NewCA(t), faulttest.NewCA(t)
	kp := ca.Issue(t, "redis")
	certFiles := []string{"certificate", "GATE_REDIS_TLS_CA_FILE", "GATE_REDIS_TLS_CERT_FILE"}
	for _, tc := range []struct {
		name    string
		url     func(t *testing.T) string
		trusted string   // the CA file the gate trusts
		says    []string // in the warning, besides its cause
		not     []string // not in it
	}{
		{"server certificate of another CA", func(t *testing.T) string {
			srv := redistest.StartWith(t, redistest.Options{TLS: &redistest.TLS{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
			return srv.URL()
		}, other.CAFile, certFiles, nil},
		{"client certificate required", func(t *testing.T) string {
			return "rediss://" + ca.ClientCertRequired(t, kp) + "/0"
		}, ca.CAFile, append(certFiles, "remote error: tls: "), nil},
		{"TLS version refused", func(t *testing.T) string {
			return "rediss://" + faulttest.TLSServer(t, &tls.Config{Certificates: []tls.Certificate{kp.TLS}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}) + "/0"
		}, ca.CAFile, []string{"alert about no certificate", "protocol version"}, []string{"GATE_REDIS_TLS_CA_FILE", "GATE_REDIS_TLS_CERT_FILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clients, err := Dial([]string{tc.url(t)}, testRedisOptions())
			if err != nil {
				t.Fatal(err)
			}
			c := clients[0]
			t.Cleanup(func() { _ = c.Close() })
			rl, err := tlsreload.New(tlsreload.Files{CAFile: tc.trusted, CAVar: "GATE_REDIS_TLS_CA_FILE"}, tlsreload.Options{Target: "redis"})
			if err != nil {
				t.Fatal(err)
			}
			rl.Apply(c.Options().TLSConfig)

			clk := clock.NewFake(epochStart)
			g := newGateClients(t, clk, limit.Config{Window: time.Minute, Threshold: 100}, Config{KeyPrefix: "t"}, c)
			logs := g.withLog()
			const ticks = 3
			for range ticks {
				g.l.Check("team", 1)
				clk.Advance(time.Second)
				if r := g.tk.Tick(context.Background()); r.Errors != 1 || r.Writes != 0 || r.CarriedWrites == 0 {
					t.Fatalf("tick = %+v, want 1 error, no write, the counts carried", r)
				}
			}
			if got := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("tls", "0")); got != ticks {
				t.Errorf(`errors{cause="tls"} = %v, want %d (one per failed tick); connection: %v`, got, ticks,
					testutil.ToFloat64(g.tk.m.errors.WithLabelValues("connection", "0")))
			}
			if got := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("connection", "0")); got != 0 {
				t.Errorf(`errors{cause="connection"} = %v, want 0: a certificate refused is not a Redis that is down`, got)
			}
			warns := logs.lines("level=WARN")
			if len(warns) != 1 {
				t.Fatalf("%d warnings over %d failed ticks, want 1:\n%s", len(warns), ticks, strings.Join(warns, "\n"))
			}
			for _, w := range append([]string{"cause=tls", "TLS handshake"}, tc.says...) {
				if !strings.Contains(warns[0], w) {
					t.Errorf("warning does not say %q: %s", w, warns[0])
				}
			}
			for _, w := range tc.not {
				if strings.Contains(warns[0], w) {
					t.Errorf("warning says %q: %s", w, warns[0])
				}
			}
		})
	}
}

// newGateClients is newGate on clients of the test's own making.
func newGateClients(t *testing.T, clk clock.Clock, lc limit.Config, sc Config, clients ...redis.UniversalClient) *gate {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := limit.New(lc, clk, reg)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, clients, sc, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	clockChecked(tk)
	return &gate{l: l, tk: tk, reg: reg}
}
