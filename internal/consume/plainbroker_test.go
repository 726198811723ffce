package consume

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTLSToAPlainListenerSaysSo: a gate dialling TLS (GATE_KAFKA_TLS, or any
// GATE_KAFKA_TLS_* variable) to brokers whose listener has none waited on its handshakes
// and said only `checking topics and permissions: metadata: unable to dial: …`, nothing
// of TLS (a real broker resets the connection, kfake never answers). The start-up check
// asks the first seed broker in plain text, and names the mismatch when it answers.
func TestTLSToAPlainListenerSaysSo(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.TLS = true
	env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.DialTLSConfig(&tls.Config{}), kgo.DialTimeout(200*time.Millisecond),
		kgo.RetryTimeout(time.Second))
	g := env.start(t, "a")
	var said string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(said, "answers in plain text: its listener has no TLS") {
		if time.Now().After(deadline) {
			// What it said instead tells a probe that timed out on a starved host
			// from a start-up error the probe is not asked for.
			t.Fatalf("no reason naming TLS after 1m; not ready for: %q; %s", said, dumpGoroutines(t))
		}
		time.Sleep(20 * time.Millisecond)
		said = strings.Join(g.c.NotReady(), "; ")
	}
}

// answersPlainKafka says yes to a Kafka listener in plain text only: a TLS listener (the
// gate's TLS failing for another reason, a certificate) and a port that is no Kafka's
// are not taken for one.
func TestAnswersPlainKafkaOnlyForAPlainKafka(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	if !answersPlainKafka(t.Context(), env.cluster.ListenAddrs()[0]) {
		t.Error("a plain Kafka listener not taken for one")
	}
	ca := faulttest.NewCA(t)
	tlsAddr := ca.ClientCertRequired(t, ca.Issue(t, "127.0.0.1"))
	if answersPlainKafka(t.Context(), tlsAddr) {
		t.Error("a TLS listener taken for a plain Kafka one")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // a port that answers with something else
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("-ERR unknown command\r\n"))
			_ = c.Close()
		}
	}()
	if answersPlainKafka(t.Context(), ln.Addr().String()) {
		t.Error("a port answering something else taken for a plain Kafka listener")
	}
}
