package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/faulttest"
)

// A file read while a write in place has begun its next block's BEGIN line but not
// finished it ("-" to "-----BEGIN", which PEM decoding skips as text between blocks) is
// refused as one cut inside a block is: its complete blocks alone (a bundle's first CA, a
// certificate without its chain) were put in use and counted a good reload (a review).
func TestFileCutInsideABeginLineKeepsLastGood(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	ca2 := newCA(t, "server CA 2")
	bundle := append(append([]byte{}, f.serverCA.pem...), ca2.pem...)
	for _, k := range []int{1, 5, 9, 10} {
		write(t, filepath.Join(dir, "ca.crt"), bundle[:len(f.serverCA.pem)+k])
		f.clk.Advance(time.Second)
		if m := r.current(); len(m.raw[0]) != len(f.serverCA.pem) {
			t.Errorf("a CA bundle cut %d bytes into its second block (%q) is in use; want the last good", k, bundle[len(f.serverCA.pem):len(f.serverCA.pem)+k])
		}
	}
	if n := testutil.ToFloat64(r.reloads); n != 0 {
		t.Errorf("%v reloads of cut bundles, want 0", n)
	}
	chain := append(append([]byte{}, f.c2.certPEM...), f.clientCA.pem...)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	write(t, filepath.Join(dir, "tls.crt"), chain[:len(f.c2.certPEM)+9])
	f.clk.Advance(time.Second)
	if m := r.current(); !bytes.Equal(m.cert.Certificate[0], f.c1.tls.Certificate[0]) {
		t.Error("a certificate file cut inside its chain's BEGIN line is in use; want the last good, client-1")
	}
	// Text after the last block that begins no block (a comment) is no cut.
	write(t, filepath.Join(dir, "ca.crt"), append(append([]byte{}, bundle...), "# end of bundle\n"...))
	write(t, filepath.Join(dir, "tls.crt"), chain)
	f.clk.Advance(time.Second)
	if m := r.current(); len(m.raw[0]) <= len(bundle) || len(m.cert.Certificate) != 2 {
		t.Error("the complete bundle, a comment after it, and the complete chain are not in use")
	}
}

// A server answering with a TLS alert that is about no certificate (a protocol version it
// does not speak) has not refused the gate's certificate: Refused said it had, and the gate
// told the operator to check the certificate files (a review).
func TestRefusedOnlyForCertificateAlerts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.serverCA.issue(t, "localhost", true)
	addr := faulttest.TLSServer(t, &tls.Config{Certificates: []tls.Certificate{srv.tls}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	_, _, dial := f.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Fatal("a handshake with a TLS 1.1 server succeeded")
	}
	if Refused(err) {
		t.Errorf("Refused(%v) = true: a protocol version alert refuses no certificate", err)
	}
	// It is a handshake failure no retry cures all the same: the callers' problem, said
	// without the certificate files.
	if !Failed(err) {
		t.Errorf("Failed(%v) = false: a handshake the server refuses is a failure", err)
	}
	// A certificate the server refuses is one (the fixture's server trusts the client CA
	// only: a client certificate of the server CA is refused).
	f2 := newFixture(t)
	dir, r, dial2 := f2.start(t)
	other := f2.serverCA.issue(t, "client-x", false)
	write(t, filepath.Join(dir, "tls.crt"), other.certPEM)
	write(t, filepath.Join(dir, "tls.key"), other.keyPEM)
	f2.clk.Advance(time.Second)
	r.current()
	_, err = connect(t, dial2, f2.srv.addr)
	if err == nil || !Refused(err) {
		t.Errorf("a client certificate of a CA the server does not trust: Refused(%v) = false", err)
	}
}
