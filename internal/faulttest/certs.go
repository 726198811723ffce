package faulttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test, with its certificate in a PEM file.
type CA struct {
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	CAFile string // PEM certificate of the CA
	Pool   *x509.CertPool
	dir    string
	serial int64
}

// KeyPair is a certificate signed by a CA, in PEM files and loaded.
type KeyPair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// NewCA makes a CA valid for the test's duration (an hour), in t.TempDir().
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gate test CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir(), serial: 1, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CAFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for name, valid for server and client authentication on
// 127.0.0.1, ::1 and localhost, and writes it and its key to PEM files.
func (ca *CA) Issue(t testing.TB, name string) KeyPair {
	t.Helper()
	return ca.issue(t, name, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// IssueExpired is Issue of a certificate that expired a day ago: one a renewal never
// replaced.
func (ca *CA) IssueExpired(t testing.TB, name string) KeyPair {
	t.Helper()
	return ca.issue(t, name, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
}

// issue is Issue valid from notBefore to notAfter.
func (ca *CA) issue(t testing.TB, name string, notBefore, notAfter time.Time) KeyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kp := KeyPair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, kp.CertFile, "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, kp.KeyFile, "PRIVATE KEY", kder)
	if kp.TLS, err = tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile); err != nil {
		t.Fatal(err)
	}
	return kp
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientCertRequired listens on a free loopback port as a TLS server presenting kp that
// requires a client certificate of ca, as a Redis with tls-auth-clients yes does: a
// client without one is refused with a TLS alert (crypto/tls's server, as Redis's).
// It returns the address; the listener closes when t ends.
func (ca *CA) ClientCertRequired(t testing.TB, kp KeyPair) string {
	t.Helper()
	return serveTLS(t, &tls.Config{Certificates: []tls.Certificate{kp.TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool},
		func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// TLSServer listens on a free loopback port as a TLS server of cfg that makes each
// connection's handshake (answering a client it refuses with a TLS alert: an expired
// certificate of its own, a TLS version it does not speak) and then closes it. It
// returns the address; the listener closes when t ends.
func TLSServer(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	return serveTLS(t, cfg, func(c net.Conn) { _ = c.(*tls.Conn).Handshake() })
}

// serveTLS listens on a free loopback port for TLS connections of cfg, each handed to
// serve and then closed. It returns the address; the listener closes when t ends.
func serveTLS(t testing.TB, cfg *tls.Config, serve func(net.Conn)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
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
			go func() { serve(c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}
