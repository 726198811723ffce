package tick

import (
	"context"
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
// unchanged (every tick fails, once, and the counts are kept).
func TestTLSRefusedHasItsOwnCause(t *testing.T) {
	t.Parallel()
	ca, other := faulttest.NewCA(t), faulttest.NewCA(t)
	kp := ca.Issue(t, "redis")
	for _, tc := range []struct {
		name    string
		url     func(t *testing.T) string
		trusted string // the CA file the gate trusts
		want    string // in the log's error
	}{
		{"server certificate of another CA", func(t *testing.T) string {
			srv := redistest.StartWith(t, redistest.Options{TLS: &redistest.TLS{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
			return srv.URL()
		}, other.CAFile, "GATE_REDIS_TLS_CA_FILE"},
		{"client certificate required", func(t *testing.T) string {
			return "rediss://" + ca.ClientCertRequired(t, kp) + "/0"
		}, ca.CAFile, "remote error: tls: "},
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
			for _, w := range []string{"cause=tls", "TLS handshake", "certificate", "GATE_REDIS_TLS_CA_FILE", "GATE_REDIS_TLS_CERT_FILE", tc.want} {
				if !strings.Contains(warns[0], w) {
					t.Errorf("warning does not say %q: %s", w, warns[0])
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
	return &gate{l: l, tk: tk, reg: reg}
}
