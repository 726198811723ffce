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
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// plainProbeTimeout bounds the plain-text question: a broker answers in milliseconds.
const plainProbeTimeout = time.Second

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

// answersPlainKafka reports whether addr answers an ApiVersions request (v0) sent in
// plain text with a response of the same correlation id, within plainProbeTimeout.
func answersPlainKafka(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, plainProbeTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	const corr = 0x6761_7465 // "gate"
	req := kmsg.NewApiVersionsRequest()
	// The request header v1: api key, version, correlation id, client id (null).
	msg := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint32(msg, corr)
	msg = binary.BigEndian.AppendUint16(msg, 0xffff)
	msg = req.AppendTo(msg)
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
		return false
	}
	var resp [8]byte // size, correlation id
	if _, err := io.ReadFull(conn, resp[:]); err != nil {
		return false
	}
	return binary.BigEndian.Uint32(resp[4:]) == corr
}
