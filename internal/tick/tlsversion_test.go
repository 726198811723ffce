package tick

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/tlsreload"
)

// TestTLSVersionRefusedIsNoCertificate: a rediss:// server that speaks only TLS versions
// the gate does not (its tls-protocols) answers the handshake with an alert about no
// certificate. It is a TLS failure no retry cures (cause tls), said as such, without
// sending the operator to the certificate files as a refused certificate does (a review:
// any alert was taken for a certificate refused).
func TestTLSVersionRefusedIsNoCertificate(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	kp := ca.Issue(t, "redis")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp.TLS}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	clients, err := Dial([]string{"rediss://" + ln.Addr().String() + "/0"}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	c := clients[0]
	t.Cleanup(func() { _ = c.Close() })
	rl, err := tlsreload.New(tlsreload.Files{CAFile: ca.CAFile, CAVar: "GATE_REDIS_TLS_CA_FILE"}, tlsreload.Options{Target: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	rl.Apply(c.Options().TLSConfig)
	clk := clock.NewFake(epochStart)
	g := newGateClients(t, clk, limit.Config{Window: time.Minute, Threshold: 100}, Config{KeyPrefix: "t"}, c)
	logs := g.withLog()
	g.l.Check("team", 1)
	clk.Advance(time.Second)
	if r := g.tk.Tick(context.Background()); r.Errors != 1 {
		t.Fatalf("tick = %+v, want 1 error", r)
	}
	if got := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("tls", "0")); got != 1 {
		t.Errorf(`errors{cause="tls"} = %v, want 1`, got)
	}
	warns := logs.lines("level=WARN")
	if len(warns) != 1 || !strings.Contains(warns[0], "alert about no certificate") || strings.Contains(warns[0], "GATE_REDIS_TLS_CA_FILE") {
		t.Errorf("warnings %q; want one saying Redis refuses the handshake with an alert about no certificate, naming no certificate file", warns)
	}
}
