package consume

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
)

// A broker's TLS alert is a problem whatever it says, but only one about a certificate
// sends the operator to the certificate files: one about a TLS version the two do not
// share did (a review). The alerts are as crypto/tls reports a peer's, a remote error.
func TestTLSProblemNamesTheFilesOnlyForACertificate(t *testing.T) {
	for _, c := range []struct {
		alert tls.AlertError
		files bool
	}{{42, true}, {48, true}, {116, true}, {70, false}} { // bad_certificate, unknown_ca, certificate_required, protocol_version
		err := &net.OpError{Op: "remote error", Err: c.alert}
		msg := tlsProblem(errors.Join(errors.New("fetching"), err))
		if msg == "" {
			t.Errorf("alert %d (%v): no problem", uint8(c.alert), c.alert)
			continue
		}
		if got := strings.Contains(msg, "GATE_KAFKA_TLS_CA_FILE"); got != c.files {
			t.Errorf("alert %d (%v): names the certificate files %v, want %v: %s", uint8(c.alert), c.alert, got, c.files, msg)
		}
	}
	if msg := tlsProblem(errors.New("dial tcp: connection refused")); msg != "" {
		t.Errorf("a broker down is a TLS problem: %s", msg)
	}
}
