// Fetch errors, which the client retries by itself: each is counted, and logged at
// most every so often; one the operator must fix (the input's ACL, SASL credentials, a
// TLS certificate refused) makes the gate not ready, naming what to change, until
// records are polled again or a quiet spell passes without the refusal
// (fetchRefusalOver). Without this a refusal was a silent retry loop.

package consume

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/tlsreload"
)

// problemFetch keys the problem of a topic (or, "", the group) that the brokers refuse
// to the gate's consumer for a reason only an operator can fix (fetchProblem).
const problemFetch = "fetch/"

// problemSASL keys the brokers' refusal of the gate's SASL login while it runs; a
// fetch problem (a space is in no topic name), cleared with the others.
const problemSASL = problemFetch + " sasl"

// problemTLS keys a TLS handshake with the brokers that fails on a certificate while
// the gate runs, as problemSASL.
const problemTLS = problemFetch + " tls"

// fetchRefusedQuiet is how long after the last refused fetch, with none since, such a
// problem is taken as over though no record has been polled since (an idle topic): franz-go
// fetches again at once after a refused fetch, and joins again a few seconds after a
// refused group session, so a refusal that goes on is seen well within it.
const fetchRefusedQuiet = 10 * time.Second

// fetchErrors counts and reports the errors of a poll. franz-go hands back a fetch
// error it does not retry by itself (TOPIC_AUTHORIZATION_FAILED: the READ ACL revoked
// after the preflight) and fetches again at once, with no backoff: thousands of errors
// a second; a group session that ends in an error (GROUP_AUTHORIZATION_FAILED) comes as
// one too. Such a refusal is a problem (not ready, one error line), over (with a line)
// once a poll returns records, or fetchRefusedQuiet after the last one; the others, which
// a retry may cure, are logged at most once per commitLogEvery.
func (c *Consumer) fetchErrors(fetches kgo.Fetches) {
	refused := false
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if c.dataLoss(fetches, topic, p, err) {
			return // records gone before they were read: counted and reported (loss.go)
		}
		if topic == c.cfg.InputTopic && (errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)) {
			c.inputDoubt.Store(true) // deleted, or created again? no commit until the watch has looked (inputwatch.go)
		}
		c.m.fetchErrors.Inc()
		if msg := c.fetchProblem(topic, err); msg != "" {
			refused = true
			c.fetchRefusedAt.Store(c.mono.now())
			attrs := []any{"err", err}
			key := problemFetch + topic
			if topic != "" {
				attrs = append(attrs, "topic", topic, "partition", p)
			}
			if saslProblem(err) != "" {
				key = problemSASL // one problem, whichever fetch or group session met it
			} else if tlsProblem(err) != "" {
				key = problemTLS
			}
			c.logProblem(context.Background(), key, msg, attrs...)
			return
		}
		// franz-go retries fetches itself; this is for the operator. An error of no topic
		// is the group session's (a broker gone, the coordinator moving): said as such,
		// naming no partition 0 it is not about.
		if ok, unlogged := c.fetchLog.Allow(); ok {
			if topic == "" {
				c.log.Warn("consumer group session failed; the client retries", "err", err, "errors_unlogged", unlogged)
			} else {
				c.log.Warn("fetch failed; the client retries", "topic", topic, "partition", p, "err", err, "errors_unlogged", unlogged)
			}
		}
	})
	if !refused {
		c.fetchRefusalOver(fetches.NumRecords() > 0)
	}
}

// fetchRefusalOver clears the refused-fetch problems, with a line, when records were
// polled since the last refusal (polled) or fetchRefusedQuiet has passed without one.
// NotReady asks too: a poll waits for records, and a refusal lifted from an idle topic
// would otherwise keep the gate not ready until its next record.
func (c *Consumer) fetchRefusalOver(polled bool) {
	at := c.fetchRefusedAt.Load()
	if at == 0 || !polled && c.mono.since(at) < fetchRefusedQuiet {
		return
	}
	if !c.fetchRefusedAt.CompareAndSwap(at, 0) {
		return // refused again meanwhile
	}
	if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, problemFetch) }) {
		c.log.Info("kafka: fetching works again", "topic", c.cfg.InputTopic, "group", c.cfg.GroupID)
	}
}

// fetchProblem is what an operator must do about err, a fetch error on topic ("": of the
// group session), when it is a refusal no retry cures: "" for any other (franz-go retries
// those itself, and a group session ended by a rebalance or a member timed out rejoins).
func (c *Consumer) fetchProblem(topic string, err error) string {
	if msg := saslProblem(err); msg != "" {
		return msg
	}
	if msg := tlsProblem(err); msg != "" {
		return msg
	}
	switch {
	case topic == "" && errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Sprintf("kafka: consumer group %q: %v: grant the gate's principal the READ ACL on the group; nothing is consumed meanwhile", c.cfg.GroupID, err)
	case topic == "" && errors.Is(err, kerr.InvalidSessionTimeout):
		// The classic protocol's join: GATE_KAFKA_SESSION_TIMEOUT is the gate's to fix.
		return fmt.Sprintf("kafka: consumer group %q: the brokers refuse the gate's session timeout (INVALID_SESSION_TIMEOUT): "+
			"set GATE_KAFKA_SESSION_TIMEOUT within their group.min.session.timeout.ms and group.max.session.timeout.ms (6 s and 30 min by default); nothing is consumed meanwhile", c.cfg.GroupID)
	case topic == "" && errors.Is(err, kerr.GroupIDNotFound):
		// Kafka's answer to a join in a group of the other protocol with members that it
		// may not switch ("Cannot upgrade classic group ..."), as a rolling update from
		// one GATE_KAFKA_GROUP_PROTOCOL to the other meets; or of a share or streams
		// group of that name. The group is there: "does not exist" misled. Kafka's reason
		// is in the line's err.
		return fmt.Sprintf("kafka: consumer group %q does not take this gate as a member of the %s group protocol (GATE_KAFKA_GROUP_PROTOCOL): "+
			"its members run the other one and the brokers' group.consumer.migration.policy does not let it switch (bidirectional, Kafka 4's default, does), "+
			"or it is a share or streams group; set GATE_KAFKA_GROUP_PROTOCOL as the gates in it have it, or stop them first; nothing is consumed meanwhile",
			c.cfg.GroupID, c.cfg.GroupProtocol)
	case topic != "" && errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Sprintf("kafka: fetching topic %q fails with %v: grant the gate's principal the READ and DESCRIBE ACLs on it; nothing of it is routed meanwhile", topic, err)
	}
	return ""
}

// saslProblem says that the brokers refuse the gate's SASL login, with their answer and
// the variables to check; "" when err is no such refusal. A wrong password or an unknown
// user at start, or a password changed at the brokers while the gate runs (refused at
// its next connection, or re-authentication under the brokers'
// connections.max.reauth.ms, KIP-368): no retry cures it, and franz-go retries it as it
// does a broker restarting, so that the gate said only that it had not joined its group,
// or that checking topics and permissions failed. The text is the brokers' answer from
// its code on, the same whichever request met it, so that it is logged once.
func saslProblem(err error) string {
	for _, e := range []*kerr.Error{kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState} {
		if errors.Is(err, e) {
			answer := err.Error()
			if i := strings.Index(answer, e.Message); i >= 0 {
				answer = answer[i:]
			}
			return fmt.Sprintf("kafka: the brokers refuse the gate's SASL login: %s: check GATE_KAFKA_SASL_MECHANISM, GATE_KAFKA_SASL_USERNAME and GATE_KAFKA_SASL_PASSWORD "+
				"(read at start: restart the gate after changing them); nothing is consumed meanwhile", answer)
		}
	}
	return ""
}

// tlsProblem says that the TLS handshake with a broker fails (tlsreload.Failed), with
// crypto/tls's error, naming the variables to check when a certificate is its cause; ""
// when err is no such failure. The
// brokers' certificate not signed by a CA of GATE_KAFKA_TLS_CA_FILE (else the system's:
// a CA rotated out of order), not for their name or expired; or the gate's refused by
// them (a remote error: none where they require one, or one they do not trust). The
// files are read again at the next connection, but franz-go retries the handshake as it
// does a broker down, so that the gate said only that it had not joined its group.
func tlsProblem(err error) string {
	if !tlsreload.Failed(err) { // as the tick and /readyz tell a Redis's apart
		return ""
	}
	// The handshake's own error, without what franz-go wrapped it in (the request that
	// met it), so that the line is the same whichever request did.
	var why error = err
	if v, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		why = v
	} else if op, ok := errors.AsType[*net.OpError](err); ok {
		why = op
	}
	if !tlsreload.Refused(err) {
		// No certificate's fault: the files are not what to check (a review).
		return fmt.Sprintf("kafka: the TLS handshake with the brokers fails: %v: they refuse it (a TLS version or cipher the two do not share); nothing is consumed meanwhile", why)
	}
	return fmt.Sprintf("kafka: the TLS handshake with the brokers fails: %v: check GATE_KAFKA_TLS_CA_FILE (their CA), GATE_KAFKA_TLS_SERVER_NAME "+
		"and GATE_KAFKA_TLS_CERT_FILE (the gate's certificate, which they may refuse), read again at the next connection; nothing is consumed meanwhile", why)
}
