package consume

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

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
	waitFor(t, 60*time.Second, "a reason naming TLS", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), "; "), "answers in plain text: its listener has no TLS")
	})
}
