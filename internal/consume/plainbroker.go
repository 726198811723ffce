// TLS dialled to a listener without it. A broker whose listener is PLAINTEXT (or
// SASL_PLAINTEXT) takes a TLS ClientHello for a request of some hundreds of megabytes and
// closes the connection (Kafka; an in-process broker may never answer): the client's
// error says only that it could not dial, and the gate's start-up check said nothing of
// TLS. When a gate dialling TLS cannot reach the brokers, it asks the first seed broker
// for its API versions in plain text, as a plain client would; an answer names the
// mismatch, as /readyz does for a Redis URL of the wrong scheme.

package consume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// plainProbeTimeout bounds the plain-text question. A broker answers in milliseconds, but
// a starved host (a pod at its CPU limit as it starts) may take seconds to dial and read
// (with 1 s, TestTLSToAPlainListenerSaysSo under -race at a load of 37 on 2 cores saw no
// mismatch named in a minute of checks, as in a CI run; with 5 s it was named within 8 s).
// The question is asked only when the brokers cannot be reached, so a longer bound delays
// nothing that works.
const plainProbeTimeout = 5 * time.Second

// plainListener returns the problem of a gate dialling TLS (Config.TLS) to brokers that
// answer in plain text, when err, the start-up check's, is one of reaching them; "" when
// it is not, or the first seed broker does not answer in plain text either.
func (c *Consumer) plainListener(ctx context.Context, err error) string {
	if err == nil || !c.cfg.TLS || len(c.cfg.Brokers) == 0 || !unreached(err) {
		return ""
	}
	addr := c.cfg.Brokers[0]
	if !answersPlainKafka(ctx, addr) {
		return ""
	}
	return fmt.Sprintf("kafka: the gate dials the brokers over TLS (GATE_KAFKA_TLS, or a GATE_KAFKA_TLS_* variable set) and cannot reach them, "+
		"but %s answers in plain text: its listener has no TLS; unset GATE_KAFKA_TLS and GATE_KAFKA_TLS_*, or give the gate the brokers' TLS listener (%v)", addr, err)
}

// unreached reports whether err is the client's failing to reach a broker: a dial that
// failed or timed out, a connection reset or closed during the handshake.
func unreached(err error) bool {
	return strings.Contains(err.Error(), "unable to dial") || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded)
}

// answersPlainKafka reports whether addr answers an ApiVersions request sent in plain
// text, within plainProbeTimeout: a client of its own, without TLS or SASL (a broker
// answers ApiVersions before authentication).
func answersPlainKafka(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, plainProbeTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(plainProbeTimeout))
	if err != nil {
		return false
	}
	defer cl.Close()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err == nil
}
