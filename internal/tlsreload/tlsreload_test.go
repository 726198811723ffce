package tlsreload

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
)

// --- Certificates ------------------------------------------------------------------------

// authority is a CA made by the test.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// pair is a certificate and its key, as PEM and as crypto/tls takes them.
type pair struct {
	certPEM, keyPEM []byte
	tls             tls.Certificate
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newCA(t *testing.T, name string) *authority {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for cn: a server's (for localhost and 127.0.0.1) or a client's.
func (a *authority) issue(t *testing.T, cn string, server bool) pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(12 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	return a.sign(t, tmpl, key)
}

// --- A server that requires and reports client certificates ------------------------------

// server is a TLS listener that requires a client certificate signed by its client CA
// and writes the certificate's common name back, then closes the connection.
type server struct {
	addr string
	cert atomic.Pointer[tls.Certificate] // what it presents; swapped for a CA rotation
}

func startServer(t *testing.T, clientCA *authority, cert pair) *server {
	t.Helper()
	s := &server{}
	s.cert.Store(&cert.tls)
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				_, _ = io.WriteString(c, tc.ConnectionState().PeerCertificates[0].Subject.CommonName)
			})
		}
	})
	return s
}

// connect opens a new connection with dial and returns the client certificate's common
// name as the server saw it.
func connect(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), addr string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err == nil && len(b) == 0 {
		err = errors.New("the server closed the connection without a word (handshake refused)")
	}
	return string(b), err
}

// eventually connects until the server sees want, or fails after a generous deadline.
// Each attempt is a new connection: open ones keep their certificate.
func eventually(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), addr, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = connect(t, dial, addr); err == nil && got == want {
			return
		}
	}
	t.Fatalf("a new connection presents %q (err %v), want %q", got, err, want)
}

// --- Files --------------------------------------------------------------------------------

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// secretVolume lays files out as the kubelet does for a Secret volume: the files live in
// a timestamped directory, ..data links to it, and each name links through ..data.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// update writes a new generation and swaps ..data to it atomically, then removes the
// old one, as the kubelet's atomic writer does.
func (v *secretVolume) update(files map[string][]byte) {
	t := v.t
	t.Helper()
	v.gen++
	gen := "..2026_11_24_13_00_00." + strconv.Itoa(v.gen) // as the kubelet names them: ..<timestamp>
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		write(t, filepath.Join(v.dir, gen, name), b)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(gen, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// logBuffer collects log lines for counting.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

const warning = "cannot be used"

type fixture struct {
	serverCA, clientCA *authority
	srv                *server
	c1, c2             pair // client certificates
	clk                *clock.Fake
	log                *logBuffer
	reg                *prometheus.Registry
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{
		serverCA: newCA(t, "server CA"),
		clientCA: newCA(t, "client CA"),
		clk:      clock.NewFake(time.Now()),
		log:      &logBuffer{},
		reg:      prometheus.NewRegistry(),
	}
	f.c1 = f.clientCA.issue(t, "client-1", false)
	f.c2 = f.clientCA.issue(t, "client-2", false)
	f.srv = startServer(t, f.clientCA, f.serverCA.issue(t, "server-1", true))
	return f
}

func (f *fixture) options() Options {
	return Options{Target: "kafka", Interval: time.Second, Clock: f.clk,
		Log: slog.New(slog.NewTextHandler(f.log, nil)), Reg: f.reg}
}

func files(dir string) Files {
	return Files{
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		CAVar: "GATE_KAFKA_TLS_CA_FILE", CertVar: "GATE_KAFKA_TLS_CERT_FILE", KeyVar: "GATE_KAFKA_TLS_KEY_FILE",
	}
}

// start writes the server's CA and client-1's certificate and key to a new directory and
// returns it, a reloader on it and its dialer for "localhost".
func (f *fixture) start(t *testing.T) (string, *Reloader, func(ctx context.Context, network, addr string) (net.Conn, error)) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.crt"), f.c1.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c1.keyPEM)
	r, err := New(files(dir), f.options())
	if err != nil {
		t.Fatal(err)
	}
	return dir, r, r.DialContext(&net.Dialer{Timeout: 10 * time.Second}, "localhost")
}

// --- Tests --------------------------------------------------------------------------------

// A client certificate rewritten in place is presented by the next new connection once
// the interval has passed, not before; the connection made before keeps the old one.
func TestClientCertReplacedInPlace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, dial := f.start(t)
	if got, err := connect(t, dial, f.srv.addr); err != nil || got != "client-1" {
		t.Fatalf("first connection presents %q, %v; want client-1", got, err)
	}
	write(t, filepath.Join(dir, "tls.crt"), f.c2.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	// Within the interval the files are not read again.
	if got, err := connect(t, dial, f.srv.addr); err != nil || got != "client-1" {
		t.Fatalf("within the interval a new connection presents %q, %v; want client-1 still", got, err)
	}
	f.clk.Advance(time.Second)
	eventually(t, dial, f.srv.addr, "client-2")
	if n := testutil.ToFloat64(r.reloads); n != 1 {
		t.Errorf("gate_tls_reloads_total = %v, want 1", n)
	}
	if got, want := gaugeValue(t, f.reg, "gate_tls_client_cert_expiry_timestamp_seconds"), float64(f.c2.tls.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("expiry gauge %v, want client-2's NotAfter %v", got, want)
	}
	if f.log.count(warning) != 0 {
		t.Errorf("warnings logged for a good rotation:\n%s", f.log.buf.String())
	}
}

// Kubernetes updates a Secret volume by swapping the ..data symlink to a new directory;
// the names the gate reads are links through it, and their own inodes never change.
func TestSecretVolumeSymlinkSwap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := newSecretVolume(t, map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c1.certPEM, "tls.key": f.c1.keyPEM})
	r, err := New(files(v.dir), f.options())
	if err != nil {
		t.Fatal(err)
	}
	dial := r.DialContext(&net.Dialer{Timeout: 10 * time.Second}, "localhost")
	if got, err := connect(t, dial, f.srv.addr); err != nil || got != "client-1" {
		t.Fatalf("first connection presents %q, %v; want client-1", got, err)
	}
	v.update(map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c2.certPEM, "tls.key": f.c2.keyPEM})
	f.clk.Advance(time.Second)
	eventually(t, dial, f.srv.addr, "client-2")
	// And back, through a second swap.
	v.update(map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c1.certPEM, "tls.key": f.c1.keyPEM})
	f.clk.Advance(time.Second)
	eventually(t, dial, f.srv.addr, "client-1")
}

// A CA rotation: the server moves to a certificate signed by a new CA. Until the bundle
// holds the new CA, new connections refuse the server; once it does, they trust it.
func TestCARotation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := newSecretVolume(t, map[string][]byte{"ca.crt": f.serverCA.pem, "tls.crt": f.c1.certPEM, "tls.key": f.c1.keyPEM})
	r, err := New(files(v.dir), f.options())
	if err != nil {
		t.Fatal(err)
	}
	dial := r.DialContext(&net.Dialer{Timeout: 10 * time.Second}, "localhost")
	if got, err := connect(t, dial, f.srv.addr); err != nil || got != "client-1" {
		t.Fatalf("first connection presents %q, %v; want client-1", got, err)
	}
	newCA := newCA(t, "server CA 2")
	s2 := newCA.issue(t, "server-2", true)
	f.srv.cert.Store(&s2.tls)
	_, err = connect(t, dial, f.srv.addr)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "GATE_KAFKA_TLS_CA_FILE") {
		t.Fatalf("a server signed by a CA not in the bundle: %v; want an unknown authority error naming the variable", err)
	}
	v.update(map[string][]byte{"ca.crt": append(append([]byte{}, f.serverCA.pem...), newCA.pem...), "tls.crt": f.c1.certPEM, "tls.key": f.c1.keyPEM})
	f.clk.Advance(time.Second)
	eventually(t, dial, f.srv.addr, "client-1")
	// The old CA is still trusted while in the bundle.
	s3 := f.serverCA.issue(t, "server-3", true)
	f.srv.cert.Store(&s3.tls)
	eventually(t, dial, f.srv.addr, "client-1")
}

// A file that turns bad keeps the last good certificate in use, with one warning and one
// count per change of the files, however many connections are made meanwhile.
func TestBadFilesKeepLastGood(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, dial := f.start(t)
	stillC1 := func(stage string) {
		t.Helper()
		for range 3 {
			f.clk.Advance(time.Second)
			if got, err := connect(t, dial, f.srv.addr); err != nil || got != "client-1" {
				t.Fatalf("%s: a new connection presents %q, %v; want client-1, the last good", stage, got, err)
			}
		}
	}
	// A certificate whose key is the other one's: the pair does not match.
	write(t, filepath.Join(dir, "tls.crt"), f.c2.certPEM)
	stillC1("mismatched key")
	if n, w := testutil.ToFloat64(r.failures), f.log.count(warning); n != 1 || w != 1 {
		t.Errorf("after a mismatched pair: %v errors counted, %d warnings; want 1 and 1", n, w)
	}
	// A CA bundle with no certificate in it.
	write(t, filepath.Join(dir, "ca.crt"), []byte("not PEM"))
	stillC1("CA file not PEM")
	// The key file gone.
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	stillC1("key file removed")
	if n, w := testutil.ToFloat64(r.failures), f.log.count(warning); n != 3 || w != 3 {
		t.Errorf("after three bad changes: %v errors counted, %d warnings; want 3 and 3", n, w)
	}
	if !strings.Contains(f.log.buf.String(), "GATE_KAFKA_TLS_KEY_FILE") {
		t.Errorf("the warning does not name the variable:\n%s", f.log.buf.String())
	}
	// Good again: the new pair is used.
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	f.clk.Advance(time.Second)
	eventually(t, dial, f.srv.addr, "client-2")
	if n, w := testutil.ToFloat64(r.reloads), f.log.count(warning); n != 1 || w != 3 {
		t.Errorf("after the files are good: %v reloads, %d warnings; want 1 and 3", n, w)
	}
}

// The server's name is checked: against the name given, against an IP address's SANs,
// and a connection with no name at all is refused rather than let through.
func TestServerNameChecked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.crt"), f.c1.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c1.keyPEM)
	r, err := New(files(dir), f.options())
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	if _, err := connect(t, r.DialContext(d, "kafka.example.com"), f.srv.addr); !errors.As(err, new(x509.HostnameError)) {
		t.Errorf("a server whose certificate is not for the name given: %v; want a host name error", err)
	}
	// No name given: the host dialed, 127.0.0.1, is checked against the IP SANs.
	if got, err := connect(t, r.DialContext(d, ""), f.srv.addr); err != nil || got != "client-1" {
		t.Errorf("dialing 127.0.0.1 without a name: %q, %v; want client-1", got, err)
	}
	// A configuration without a name, dialed at an IP address (no SNI): refused.
	noName := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&tls.Dialer{NetDialer: d, Config: r.Config("")}).DialContext(ctx, network, addr)
	}
	if _, err := connect(t, noName, f.srv.addr); err == nil || !strings.Contains(err.Error(), "no server name") {
		t.Errorf("no name to check: %v; want a refusal", err)
	}
	// An explicit opt-out is kept.
	c := &tls.Config{InsecureSkipVerify: true}
	r.Apply(c)
	if c.VerifyConnection != nil {
		t.Error("Apply replaced InsecureSkipVerify's opt-out with a check")
	}
}

// Without a CA file the system's CAs verify as crypto/tls does; without a certificate
// file no client certificate is set up.
func TestOnlyWhatIsConfigured(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	fs := files(dir)
	fs.CertFile, fs.KeyFile = "", ""
	r, err := New(fs, f.options())
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config("localhost"); c.GetClientCertificate != nil || c.VerifyConnection == nil {
		t.Errorf("CA only: GetClientCertificate set %v, VerifyConnection set %v", c.GetClientCertificate != nil, c.VerifyConnection != nil)
	}
	write(t, filepath.Join(dir, "tls.crt"), f.c1.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c1.keyPEM)
	fs = files(dir)
	fs.CAFile = ""
	r, err = New(fs, Options{Target: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config("localhost"); c.GetClientCertificate == nil || c.VerifyConnection != nil || c.InsecureSkipVerify {
		t.Errorf("certificate only: the server must be verified by crypto/tls against the system's CAs: %+v", c)
	}
}

// The gate's Kafka and Redis reloaders share one registry, told apart by target.
func TestMetricsPerTarget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.crt"), f.c1.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c1.keyPEM)
	for _, target := range []string{"kafka", "redis"} {
		o := f.options()
		o.Target = target
		if _, err := New(files(dir), o); err != nil {
			t.Fatalf("%s: %v", target, err)
		}
	}
	if n, err := testutil.GatherAndCount(f.reg, "gate_tls_reloads_total", "gate_tls_reload_errors_total", "gate_tls_client_cert_expiry_timestamp_seconds"); err != nil || n != 6 {
		t.Errorf("%d series (%v), want 3 per target", n, err)
	}
	// A second reloader of one target is a wiring mistake, reported.
	if _, err := New(files(dir), f.options()); err == nil || !strings.Contains(err.Error(), "registering the kafka TLS reload metrics") {
		t.Errorf("a second kafka reloader on the registry: %v", err)
	}
}

// Start-up errors name the variable at fault.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), []byte("hello"))
	write(t, filepath.Join(dir, "tls.crt"), f.c1.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	for _, tc := range []struct {
		name string
		fs   func(Files) Files
		want string
	}{
		{"CA not PEM", func(fs Files) Files { return fs }, `GATE_KAFKA_TLS_CA_FILE="` + filepath.Join(dir, "ca.crt") + `": want PEM certificates`},
		{"CA missing", func(fs Files) Files { fs.CAFile = filepath.Join(dir, "none"); return fs }, `GATE_KAFKA_TLS_CA_FILE="` + filepath.Join(dir, "none") + `": reading the CA certificates`},
		{"key mismatch", func(fs Files) Files { fs.CAFile = ""; return fs }, "GATE_KAFKA_TLS_CERT_FILE="},
		{"key missing", func(fs Files) Files { fs.CAFile, fs.KeyFile = "", ""; return fs }, "GATE_KAFKA_TLS_KEY_FILE"},
	} {
		if _, err := New(tc.fs(files(dir)), Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A clock stepped back (an NTP correction) does not hold reloads off until it catches up
// with the time the next read was set for: before, a step of an hour stopped them for an
// hour.
func TestClockSteppedBackStillReloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	// Half an hour: the certificates' validity starts an hour before they were made, and
	// one not valid yet at the clock's time is refused.
	f.clk.Advance(-30 * time.Minute)
	write(t, filepath.Join(dir, "tls.crt"), f.c2.certPEM)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	m := r.current()
	if m.cert == nil || !bytes.Equal(m.cert.Certificate[0], f.c2.tls.Certificate[0]) {
		t.Error("after the clock stepped back, the new certificate is not in use")
	}
}

// issueValid signs a client certificate for cn valid from notBefore to notAfter.
func (a *authority) issueValid(t *testing.T, cn string, notBefore, notAfter time.Time) pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return a.sign(t, tmpl, key)
}

// sign signs tmpl, for key, with a: the certificate and key in PEM, and as a pair.
func (a *authority) sign(t *testing.T, tmpl *x509.Certificate, key *ecdsa.PrivateKey) pair {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := pair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	if p.tls, err = tls.X509KeyPair(p.certPEM, p.keyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// A file read while it is being written in place (its last PEM block cut short: a CA
// bundle's second CA, a certificate's chain) is refused as a bad file is, not put in use
// with what its complete blocks hold; the complete file is taken at the next read.
func TestHalfWrittenFilesKeepLastGood(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	ca2 := newCA(t, "server CA 2")
	bundle := append(append([]byte{}, f.serverCA.pem...), ca2.pem...)
	write(t, filepath.Join(dir, "ca.crt"), bundle[:len(f.serverCA.pem)+len(ca2.pem)/2])
	f.clk.Advance(time.Second)
	r.current()
	if n, e := testutil.ToFloat64(r.reloads), testutil.ToFloat64(r.failures); n != 0 || e != 1 {
		t.Errorf("a CA bundle cut short in its second certificate: %v reloads, %v errors; want 0 and 1", n, e)
	}
	write(t, filepath.Join(dir, "ca.crt"), bundle)
	f.clk.Advance(time.Second)
	// Both CAs in use: a server certificate of each verifies.
	m := r.current()
	for _, ca := range []*authority{f.serverCA, ca2} {
		leaf, err := x509.ParseCertificate(ca.issue(t, "localhost", true).tls.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.pool, CurrentTime: time.Now()}); err != nil {
			t.Errorf("the complete bundle: a certificate of %s: %v", ca.cert.Subject.CommonName, err)
		}
	}
	// A certificate file with a chain, cut short in its second block, and its key.
	chain := append(append([]byte{}, f.c2.certPEM...), f.clientCA.pem...)
	write(t, filepath.Join(dir, "tls.key"), f.c2.keyPEM)
	write(t, filepath.Join(dir, "tls.crt"), chain[:len(f.c2.certPEM)+len(f.clientCA.pem)/2])
	f.clk.Advance(time.Second)
	if m := r.current(); !bytes.Equal(m.cert.Certificate[0], f.c1.tls.Certificate[0]) {
		t.Error("a certificate file cut short in its chain is in use; want the last good, client-1")
	}
	write(t, filepath.Join(dir, "tls.crt"), chain)
	f.clk.Advance(time.Second)
	if m := r.current(); !bytes.Equal(m.cert.Certificate[0], f.c2.tls.Certificate[0]) || len(m.cert.Certificate) != 2 {
		t.Error("the complete chain is not in use")
	}
	if n, e := testutil.ToFloat64(r.reloads), testutil.ToFloat64(r.failures); n != 2 || e != 2 {
		t.Errorf("after two cut files, each completed: %v reloads, %v errors; want 2 and 2", n, e)
	}
}

// A client certificate that has expired, or is not valid yet, at the reloader's clock is
// refused while the one in use stays, with one warning; a not-yet-valid one is taken
// once its time comes, with no change to the files.
func TestCertOutsideValidityKeepsLastGood(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	now := f.clk.Now()
	inUse := func(want pair, stage string) {
		t.Helper()
		if m := r.current(); !bytes.Equal(m.cert.Certificate[0], want.tls.Certificate[0]) {
			t.Errorf("%s: in use %s, want %s", stage, m.cert.Leaf.Subject, want.tls.Leaf.Subject)
		}
	}
	expired := f.clientCA.issueValid(t, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	write(t, filepath.Join(dir, "tls.crt"), expired.certPEM)
	write(t, filepath.Join(dir, "tls.key"), expired.keyPEM)
	for range 3 {
		f.clk.Advance(time.Second)
		inUse(f.c1, "an expired certificate written")
	}
	if n, w := testutil.ToFloat64(r.failures), f.log.count(warning); n != 1 || w != 1 {
		t.Errorf("an expired certificate: %v errors, %d warnings; want 1 and 1", n, w)
	}
	early := f.clientCA.issueValid(t, "early", now.Add(time.Hour), now.Add(48*time.Hour))
	write(t, filepath.Join(dir, "tls.crt"), early.certPEM)
	write(t, filepath.Join(dir, "tls.key"), early.keyPEM)
	for range 3 {
		f.clk.Advance(time.Second)
		inUse(f.c1, "a certificate not valid yet written")
	}
	f.clk.Advance(2 * time.Hour)
	inUse(early, "the certificate's time come")
	if n, w := testutil.ToFloat64(r.failures), f.log.count(warning); n != 2 || w != 2 {
		t.Errorf("after two certificates outside their time: %v errors, %d warnings; want 2 and 2", n, w)
	}
}

// At start a client certificate that has expired, or is not valid yet, is an error
// naming its variable, as any invalid file is, not a gate whose every connection the
// server refuses.
func TestNewRefusesCertOutsideValidity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := f.clk.Now()
	for name, p := range map[string]pair{
		"expired":       f.clientCA.issueValid(t, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour)),
		"not valid yet": f.clientCA.issueValid(t, "early", now.Add(time.Hour), now.Add(48*time.Hour)),
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
		write(t, filepath.Join(dir, "tls.crt"), p.certPEM)
		write(t, filepath.Join(dir, "tls.key"), p.keyPEM)
		_, err := New(files(dir), Options{Clock: f.clk})
		if want := `GATE_KAFKA_TLS_CERT_FILE="` + filepath.Join(dir, "tls.crt") + `": the client certificate is valid from`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error containing %q", name, err, want)
		}
	}
}

// A client certificate whose validity begins a few seconds after the gate's clock at start
// (issued just before a restart, by an issuer whose clock is a little ahead) is taken: the
// servers, on the issuer's time, accept it, and refusing it stopped the gate from starting
// at all. One that begins further off is still refused (TestNewRefusesCertOutsideValidity).
func TestNewTakesCertJustIssuedAheadOfClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := f.clk.Now()
	p := f.clientCA.issueValid(t, "fresh", now.Add(3*time.Second), now.Add(48*time.Hour))
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.crt"), p.certPEM)
	write(t, filepath.Join(dir, "tls.key"), p.keyPEM)
	r, err := New(files(dir), Options{Clock: f.clk})
	if err != nil {
		t.Fatalf("a certificate valid from 3 s after the gate's clock: %v; want it taken", err)
	}
	if got := r.current().cert.Leaf.Subject.CommonName; got != "fresh" {
		t.Errorf("certificate in use %q, want fresh", got)
	}
}

// A certificate renewed on disk shows in the expiry gauge once the interval has passed,
// though no connection is opened meanwhile (a Redis pool keeps its connections): the
// gauge is what a new connection would present, not the one read last, so the expiry
// alert does not fire on a renewal that worked.
func TestExpiryGaugeSeesRenewalWithoutConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	renewed := f.clientCA.sign(t, &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "client-1"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(20 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, newKey(t))
	write(t, filepath.Join(dir, "tls.crt"), renewed.certPEM)
	write(t, filepath.Join(dir, "tls.key"), renewed.keyPEM)
	f.clk.Advance(time.Second)
	if got, want := gaugeValue(t, f.reg, "gate_tls_client_cert_expiry_timestamp_seconds"), float64(renewed.tls.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("expiry gauge %v after a renewal on disk, want the renewed certificate's NotAfter %v (the old one's is %v)",
			got, want, f.c1.tls.Leaf.NotAfter.Unix())
	}
	if n := testutil.ToFloat64(r.reloads); n != 1 {
		t.Errorf("gate_tls_reloads_total = %v, want 1", n)
	}
}

// A client certificate whose extended key usage leaves out client authentication (a
// server's certificate reused, a cert-manager Certificate with usages: [server auth]) is
// refused by every server that checks client certificates: Go's, OpenSSL's (Redis) and
// Java's (Kafka) alike. At start it is an error naming its variable, not a gate whose
// every connection fails with "tls: unsupported certificate"; renewed into one, it
// leaves the last good certificate in use.
func TestClientCertWithoutClientAuthUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	serverOnly := func(cn string) pair {
		return f.clientCA.sign(t, &x509.Certificate{
			SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}, newKey(t))
	}
	bad := serverOnly("server-only")
	// The server this package's tests use refuses it: the certificate is unusable.
	refused := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "localhost", Certificates: []tls.Certificate{bad.tls}, RootCAs: x509.NewCertPool()}
	refused.RootCAs.AddCert(f.serverCA.cert)
	if got, err := connect(t, (&tls.Dialer{Config: refused}).DialContext, f.srv.addr); err == nil {
		t.Fatalf("the server took a certificate without client authentication usage (saw %q); the test's premise is wrong", got)
	}

	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	write(t, filepath.Join(dir, "tls.crt"), bad.certPEM)
	write(t, filepath.Join(dir, "tls.key"), bad.keyPEM)
	_, err := New(files(dir), f.options())
	if want := `GATE_KAFKA_TLS_CERT_FILE="` + filepath.Join(dir, "tls.crt") + `": the client certificate is not for client authentication`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("New with a server-only certificate: %v; want an error containing %q", err, want)
	}

	// A certificate with no extended key usage at all is for any use: taken.
	anyUse := f.clientCA.sign(t, &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "any-use"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}, newKey(t))
	write(t, filepath.Join(dir, "tls.crt"), anyUse.certPEM)
	write(t, filepath.Join(dir, "tls.key"), anyUse.keyPEM)
	r, err := New(files(dir), Options{Target: "kafka", Clock: f.clk, Log: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatalf("New with a certificate without extended key usage: %v", err)
	}
	dial := r.DialContext(&net.Dialer{Timeout: 10 * time.Second}, "localhost")
	eventually(t, dial, f.srv.addr, "any-use")

	// Renewed into a server-only certificate: the last good one stays in use, with a warning.
	write(t, filepath.Join(dir, "tls.crt"), bad.certPEM)
	write(t, filepath.Join(dir, "tls.key"), bad.keyPEM)
	for range 3 {
		f.clk.Advance(time.Second)
		if got, err := connect(t, dial, f.srv.addr); err != nil || got != "any-use" {
			t.Fatalf("after a renewal into a server-only certificate: a new connection presents %q, %v; want any-use, the last good", got, err)
		}
	}
	if w := f.log.count(warning); w != 1 {
		t.Errorf("after a renewal into a server-only certificate: %d warnings, want 1", w)
	}
}

// A CA bundle alone (TLS without a client certificate, so no expiry gauge) changed on
// disk shows when the metrics are scraped, though no connection is opened meanwhile (a
// Redis pool keeps its connections for days): the CA rotation's runbook waits for
// gate_tls_reloads_total to go up before moving the servers to the new CA, and the
// alert on gate_tls_reload_errors_total must see a bundle that turned bad. Before, with
// only CA files, the files were read at a new connection alone: the counter stayed at 0.
func TestScrapeReadsCAOnlyFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), f.serverCA.pem)
	fs := files(dir)
	fs.CertFile, fs.KeyFile = "", ""
	o := f.options()
	o.Target = "redis"
	r, err := New(fs, o)
	if err != nil {
		t.Fatal(err)
	}
	second := newCA(t, "server CA 2")
	write(t, filepath.Join(dir, "ca.crt"), append(append([]byte{}, f.serverCA.pem...), second.pem...))
	f.clk.Advance(time.Second)
	if _, err := f.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(r.reloads); n != 1 || f.log.count("TLS files reloaded") != 1 {
		t.Errorf("after a CA added to the bundle and a scrape: gate_tls_reloads_total = %v, %d lines \"TLS files reloaded\"; want 1 and 1:\n%s",
			n, f.log.count("TLS files reloaded"), f.log.buf.String())
	}
	// A bundle turned bad is counted and warned of at the next scrape too.
	write(t, filepath.Join(dir, "ca.crt"), []byte("not a certificate\n"))
	f.clk.Advance(time.Second)
	if _, err := f.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(r.failures); n != 1 || f.log.count(warning) != 1 {
		t.Errorf("after the bundle turned bad and a scrape: gate_tls_reload_errors_total = %v, %d warnings; want 1 and 1", n, f.log.count(warning))
	}
}

// The client certificate in use expires and the files hold nothing newer (a renewal
// that failed): every new connection is refused by the servers, whose alert names no
// cause the gate could fix from (Java's Kafka answers "unknown certificate", as for a CA
// it does not trust). The gate says it once, naming the variable and the expiry; before,
// it said nothing of its own certificate. A renewal then put in use is said as before.
func TestExpiredCertInUseWarned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir, r, _ := f.start(t)
	handshake := func() {
		t.Helper()
		if _, err := r.Config("localhost").GetClientCertificate(nil); err != nil {
			t.Fatal(err)
		}
	}
	const expiredLine = "the client certificate in use has expired"
	handshake()
	if n := f.log.count(expiredLine); n != 0 {
		t.Fatalf("%d lines of an expired certificate while it is valid:\n%s", n, f.log.buf.String())
	}
	f.clk.Advance(13 * time.Hour) // client-1 is valid 12 hours
	for range 3 {
		f.clk.Advance(time.Second)
		handshake()
	}
	if _, err := f.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	out := f.log.buf.String()
	if n := f.log.count(expiredLine); n != 1 || !strings.Contains(out, "GATE_KAFKA_TLS_CERT_FILE") ||
		!strings.Contains(out, f.c1.tls.Leaf.NotAfter.UTC().Format(time.RFC3339)) {
		t.Errorf("after the certificate in use expired: %d lines %q, want 1 naming GATE_KAFKA_TLS_CERT_FILE and its NotAfter:\n%s", n, expiredLine, out)
	}
	// Renewed: taken, and no further line of an expired certificate.
	now := f.clk.Now()
	renewed := f.clientCA.issueValid(t, "client-1", now.Add(-time.Minute), now.Add(24*time.Hour))
	write(t, filepath.Join(dir, "tls.crt"), renewed.certPEM)
	write(t, filepath.Join(dir, "tls.key"), renewed.keyPEM)
	f.clk.Advance(time.Second)
	handshake()
	if m := r.current(); !bytes.Equal(m.cert.Certificate[0], renewed.tls.Certificate[0]) {
		t.Errorf("the renewal is not in use")
	}
	if n := f.log.count(expiredLine); n != 1 {
		t.Errorf("after the renewal: %d lines %q, want still 1", n, expiredLine)
	}
}
