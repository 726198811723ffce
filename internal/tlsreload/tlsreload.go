// Package tlsreload keeps a TLS client's certificate and trusted CAs in step with the PEM
// files they are read from, so that certificates renewed in place (cert-manager writing a
// Kubernetes Secret volume, which swaps a symlink to a new directory) are used without a
// restart. The gate uses one Reloader for Kafka (GATE_KAFKA_TLS_*) and one for Redis
// (GATE_REDIS_TLS_*).
//
// Guarantees:
//
//   - New reads every file once: a missing, unreadable or invalid file is an error naming
//     its variable (GATE_..._FILE="path"), so start-up fails on it; so is a client
//     certificate whose extended key usage leaves out client authentication (every
//     server refuses it), and one outside its validity, but for one whose validity
//     begins at most startSkew after the Clock's time (a clock skew): that one is used,
//     with a warning.
//   - After that, the files are read again when a connection is being set up (its
//     handshake asks for the client certificate or checks the server's), or when the
//     metrics are collected, at most once per Options.Interval: a new connection uses
//     what the files held at most one interval before. Their contents are compared, not
//     their names or modification times, so an in-place write and a Kubernetes symlink
//     swap are seen alike. No goroutine runs and nothing watches the files in between.
//   - A file that becomes unreadable or invalid (including a certificate whose key does
//     not match, a PEM block cut short by a write in progress, a client certificate not
//     for client authentication and one outside its validity at the Clock's time)
//     leaves the last good certificate and CAs in use, and is read again at each due
//     read until it can be used; a read that fails is made again at once, so that files
//     read across a Secret volume's symlink swap (the certificate from before it, the key
//     from after) are taken as they are after it, not warned about. It is logged as a
//     warning once per distinct state of the files, not once per check, and counted in
//     gate_tls_reload_errors_total{target}; a good reload is logged at info and counted
//     in gate_tls_reloads_total{target}. gate_tls_client_cert_expiry_timestamp_seconds
//     gives the NotAfter of the certificate in use; once it has passed, with no valid
//     certificate in the files, that is warned about once.
//   - The server's certificate is checked against the current CA bundle and the name
//     the connection is for (the configuration's ServerName, else the host dialed), as
//     crypto/tls checks it: chain, validity at the Options.Clock's time, server-auth key
//     usage and host name (IP addresses against IP SANs). A connection with no name to
//     check is refused, never let through. InsecureSkipVerify is set only so that this
//     check, done against the current pool, replaces crypto/tls's against a fixed one.
//   - Connections already open keep the certificate they were made with.
//
// The package keeps no package-level mutable state; a *Reloader is safe for concurrent
// use.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
)

// DefaultInterval is the least time between two reads of the files.
const DefaultInterval = time.Second

// Files names the PEM files a client's TLS material is read from, each with the variable
// that names it (for messages). CAFile is empty to use the system's CA certificates;
// CertFile and KeyFile are both set (mutual TLS) or both empty.
type Files struct {
	CAFile, CertFile, KeyFile string
	CAVar, CertVar, KeyVar    string // GATE_KAFKA_TLS_CA_FILE, ...
}

// Options are what a Reloader takes from its caller.
type Options struct {
	// Target names the connections in logs and in the metrics' target label: kafka, redis.
	Target string
	// Interval is the least time between two reads of the files; DefaultInterval if 0.
	Interval time.Duration
	// Clock paces the reads and is the time certificates are checked at; clock.Real if nil.
	Clock clock.Clock
	// Log receives the reload and warning lines; none if nil.
	Log *slog.Logger
	// Reg receives the metrics; none if nil.
	Reg prometheus.Registerer
}

// material is one consistent reading of the files.
type material struct {
	cert *tls.Certificate // nil without CertFile
	pool *x509.CertPool   // nil without CAFile
	raw  [3][]byte        // the files' contents: CA, certificate, key
}

// Reloader holds a client's current TLS material and reads the files again when due.
type Reloader struct {
	files    Files
	target   string
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger

	cur  atomic.Pointer[material]
	next atomic.Int64 // UnixNano of the next read of the files

	mu      sync.Mutex // serializes reads of the files; guards lastBad and expired
	lastBad string     // the failed state last warned about; "" when the files are good
	expired *material  // the material whose client certificate was last warned of as expired

	reloads, failures prometheus.Counter
}

// New reads the files and returns their Reloader. Its errors name the variable at fault.
func New(f Files, o Options) (*Reloader, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%s=%q, %s=%q: want a client certificate file with its key file, or neither", f.CertVar, f.CertFile, f.KeyVar, f.KeyFile)
	}
	r := &Reloader{files: f, target: o.Target, interval: o.Interval, clock: o.Clock, log: o.Log}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	if r.clock == nil {
		r.clock = clock.Real{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("target", r.target)
	raw, err := f.read()
	if err != nil {
		return nil, err
	}
	m, err := f.parse(raw)
	if now := r.clock.Now(); err == nil {
		// A certificate issued a moment ago may begin a little after this gate's clock (a
		// clock behind the issuer's, a start just after the renewal): the servers, whose
		// clocks are the issuer's, take it; refused, the gate would not start at all.
		if m.cert != nil && now.Before(m.cert.Leaf.NotBefore) && !now.Add(startSkew).Before(m.cert.Leaf.NotBefore) {
			r.log.Warn("the client certificate is not valid yet by this gate's clock; used all the same (a clock behind its issuer's?)",
				"var", f.CertVar, "not_before", m.cert.Leaf.NotBefore.UTC().Format(time.RFC3339))
		} else {
			err = f.checkValidity(m, now)
		}
	}
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.next.Store(r.clock.Now().Add(r.interval).UnixNano())
	labels := prometheus.Labels{"target": r.target}
	r.reloads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gate_tls_reloads_total", ConstLabels: labels,
		Help: "Times changed TLS certificate or CA files were read and put in use for new connections.",
	})
	r.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gate_tls_reload_errors_total", ConstLabels: labels,
		Help: "Times TLS certificate or CA files changed into something unreadable or invalid; the last good ones stay in use.",
	})
	if o.Reg != nil {
		m := metrics{r: r, cs: []prometheus.Collector{r.reloads, r.failures}}
		if f.CertFile != "" {
			m.cs = append(m.cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "gate_tls_client_cert_expiry_timestamp_seconds", ConstLabels: labels,
				Help: "NotAfter of the TLS client certificate in use for new connections, in Unix seconds.",
			}, func() float64 {
				return float64(r.cur.Load().cert.Leaf.NotAfter.Unix()) // read when due by metrics.Collect
			}))
		}
		if err := o.Reg.Register(m); err != nil {
			return nil, fmt.Errorf("registering the %s TLS reload metrics: %w", r.target, err)
		}
	}
	return r, nil
}

// metrics are a Reloader's metrics. Collecting them reads the files first when due, as
// a new connection does, so that a change shows without waiting for one (a Redis pool
// may open none for days, and with only a CA file no other metric reads them): a
// renewal in the expiry gauge (the expiry alert does not fire on one that worked), a CA
// added to the bundle in gate_tls_reloads_total (the CA rotation waits for it), a file
// turned bad in gate_tls_reload_errors_total.
type metrics struct {
	r  *Reloader
	cs []prometheus.Collector
}

func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.cs {
		c.Describe(ch)
	}
}

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	m.r.current()
	for _, c := range m.cs {
		c.Collect(ch)
	}
}

// read returns the files' contents: CA, certificate, key (nil for a file not set).
func (f Files) read() ([3][]byte, error) {
	var raw [3][]byte
	for i, x := range []struct{ file, key, what string }{
		{f.CAFile, f.CAVar, "the CA certificates"},
		{f.CertFile, f.CertVar, "the client certificate"},
		{f.KeyFile, f.KeyVar, "the client certificate's key"},
	} {
		if x.file == "" {
			continue
		}
		b, err := os.ReadFile(x.file)
		if err != nil {
			return raw, fmt.Errorf("%s=%q: reading %s: %w", x.key, x.file, x.what, err)
		}
		raw[i] = b
	}
	return raw, nil
}

// parse turns the files' contents into material.
func (f Files) parse(raw [3][]byte) (*material, error) {
	m := &material{raw: raw}
	for i, x := range []struct{ file, key string }{{f.CAFile, f.CAVar}, {f.CertFile, f.CertVar}, {f.KeyFile, f.KeyVar}} {
		if x.file != "" && !wholePEM(raw[i]) {
			// A file read while it was being written in place: its complete blocks alone
			// (a bundle's first CAs, a certificate without its chain) are not what it holds.
			return nil, fmt.Errorf("%s=%q: a PEM block is cut short or malformed (a file being written?)", x.key, x.file)
		}
	}
	if f.CAFile != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(raw[0]) {
			return nil, fmt.Errorf("%s=%q: want PEM certificates, found none", f.CAVar, f.CAFile)
		}
	}
	if f.CertFile != "" {
		cert, err := tls.X509KeyPair(raw[1], raw[2])
		if err != nil {
			return nil, fmt.Errorf("%s=%q, %s=%q: loading the client certificate: %w", f.CertVar, f.CertFile, f.KeyVar, f.KeyFile, err)
		}
		if cert.Leaf == nil { // X509KeyPair fills it in; keep the expiry gauge safe regardless
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("%s=%q: parsing the client certificate: %w", f.CertVar, f.CertFile, err)
			}
		}
		if !forClientAuth(cert.Leaf) {
			// Every server that checks client certificates refuses it (crypto/tls, OpenSSL's
			// Redis, Java's Kafka) with a bare "unsupported certificate": say which file.
			return nil, fmt.Errorf("%s=%q: the client certificate is not for client authentication (its extended key usage is %s); "+
				"issue it with client auth usage (cert-manager: usages: [client auth])", f.CertVar, f.CertFile, extKeyUsages(cert.Leaf))
		}
		m.cert = &cert
	}
	return m, nil
}

// forClientAuth reports whether a server may take c as a TLS client certificate, by its
// extended key usage, as crypto/x509 decides: none at all means any use.
func forClientAuth(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// extKeyUsages names c's extended key usages, for forClientAuth's error.
func extKeyUsages(c *x509.Certificate) string {
	var names []string
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			names = append(names, "server auth")
		case x509.ExtKeyUsageCodeSigning:
			names = append(names, "code signing")
		case x509.ExtKeyUsageEmailProtection:
			names = append(names, "email protection")
		case x509.ExtKeyUsageTimeStamping:
			names = append(names, "time stamping")
		case x509.ExtKeyUsageOCSPSigning:
			names = append(names, "OCSP signing")
		default:
			names = append(names, fmt.Sprintf("usage %d", u))
		}
	}
	for _, oid := range c.UnknownExtKeyUsage {
		names = append(names, oid.String())
	}
	return strings.Join(names, ", ")
}

// startSkew is how far after the clock at start a client certificate's validity may begin
// (New): a clock skew, not a certificate to refuse.
const startSkew = time.Minute

// checkValidity refuses a client certificate outside its validity at now: a server
// would refuse it.
func (f Files) checkValidity(m *material, now time.Time) error {
	if m.cert == nil {
		return nil
	}
	if l := m.cert.Leaf; now.Before(l.NotBefore) || now.After(l.NotAfter) {
		return fmt.Errorf("%s=%q: the client certificate is valid from %s to %s, not now", f.CertVar, f.CertFile,
			l.NotBefore.UTC().Format(time.RFC3339), l.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// wholePEM reports whether every PEM block begun in b decodes: none is cut short. A
// block is begun by its BEGIN line, or by what a write cut short of one ends b with ("-"
// to "-----BEGIN", which pem.Decode skips as text between blocks): a bundle read there
// would be taken as its first CAs alone (a review).
func wholePEM(b []byte) bool {
	begun := bytes.Count(b, []byte("-----BEGIN "))
	n := 0
	rest := b
	for ; ; n++ {
		p, r := pem.Decode(rest)
		if p == nil {
			break
		}
		rest = r
	}
	tail := bytes.TrimRight(rest, " \t\r\n")
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	if len(tail) > 0 && bytes.HasPrefix([]byte("-----BEGIN "), tail) {
		return false
	}
	return n == begun
}

// current returns the material in use, reading the files first when they are due.
func (r *Reloader) current() *material {
	now := r.clock.Now().UnixNano()
	// Due when next has passed, or when the clock stepped back past the last read (an NTP
	// correction): next, a wall-clock time, would otherwise hold reloads off that long.
	due := func() bool { n := r.next.Load(); return now >= n || now < n-r.interval.Nanoseconds() }
	if !due() {
		return r.cur.Load()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if due() { // not read by another handshake meanwhile
		r.next.Store(now + r.interval.Nanoseconds())
		r.reload()
		r.warnExpired()
	}
	return r.cur.Load()
}

// warnExpired says, once per certificate, that the client certificate in use has
// expired and the files hold no valid one (a renewal that failed): every new connection
// is refused, with an alert that need not say why (Java's Kafka answers "unknown
// certificate", as for a CA it does not trust). r.mu is held.
func (r *Reloader) warnExpired() {
	m := r.cur.Load()
	if m.cert == nil || m == r.expired || !r.clock.Now().After(m.cert.Leaf.NotAfter) {
		return
	}
	r.expired = m
	r.log.Warn("the client certificate in use has expired and the files hold no valid one: servers refuse every new connection; renew it (cert-manager: kubectl describe certificate)",
		"var", r.files.CertVar, "file", r.files.CertFile, "not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// reload reads the files and puts what they hold in use if it changed and is valid.
// r.mu is held.
func (r *Reloader) reload() {
	old := r.cur.Load()
	raw, m, err := r.load(old)
	if err != nil {
		// The files may have been read while they changed: a Kubernetes Secret volume
		// swapped between the reads of the certificate and of its key (a pair that does
		// not match), or its old directory deleted under the read. The swap itself is
		// atomic, so a second read sees the files as they are now: only what it finds
		// counts, and a good rotation is not warned about.
		raw, m, err = r.load(old)
	}
	if err == nil && m == nil {
		r.recovered("unchanged")
		return
	}
	if err != nil {
		// One warning per state of the files: the error, and what they held.
		h := sha256.New()
		for _, b := range raw {
			h.Write(b)
			h.Write([]byte{0})
		}
		state := err.Error() + " " + hex.EncodeToString(h.Sum(nil))
		if state != r.lastBad {
			r.lastBad = state
			r.failures.Inc()
			r.log.Warn("TLS files changed but cannot be used; new connections keep the last good certificate and CAs", "err", err)
		}
		return
	}
	r.lastBad = ""
	r.cur.Store(m)
	r.reloads.Inc()
	attrs := []any{"ca_changed", !bytes.Equal(raw[0], old.raw[0]), "cert_changed", !bytes.Equal(raw[1], old.raw[1]) || !bytes.Equal(raw[2], old.raw[2])}
	if m.cert != nil {
		attrs = append(attrs, "cert_subject", m.cert.Leaf.Subject.String(), "cert_not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	r.log.Info("TLS files reloaded; new connections use them", attrs...)
}

// load reads the files and makes material of them: nil material and no error when they
// hold what old does.
func (r *Reloader) load(old *material) ([3][]byte, *material, error) {
	raw, err := r.files.read()
	if err != nil {
		return raw, nil, err
	}
	if sameRaw(raw, old.raw) {
		return raw, nil, nil
	}
	m, err := r.files.parse(raw)
	if err == nil {
		// A client certificate outside its validity would be refused by the server: the
		// one in use stays, and this one is taken at the first read once its time comes.
		err = r.files.checkValidity(m, r.clock.Now())
	}
	return raw, m, err
}

// recovered notes files that read well again after a failure.
func (r *Reloader) recovered(how string) {
	if r.lastBad != "" {
		r.lastBad = ""
		r.log.Info("TLS files readable again, " + how + "; new connections keep using them")
	}
}

func sameRaw(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Apply makes c present the current client certificate (when CertFile is set) and check
// the server's certificate against the current CAs (when CAFile is set), reading the
// files when due. The name checked is c.ServerName as it is now, else the name the
// handshake sends (SNI); set ServerName before Apply when dialing an IP address. A c
// with InsecureSkipVerify already set (an explicit opt-out, such as a rediss:// URL's
// skip_verify) keeps it. Call Apply before c is used.
func (r *Reloader) Apply(c *tls.Config) {
	if r.files.CertFile != "" {
		c.Certificates = nil
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		}
	}
	if r.files.CAFile != "" && !c.InsecureSkipVerify {
		name := c.ServerName
		c.RootCAs = nil
		c.InsecureSkipVerify = true // the check is VerifyConnection's, against the current pool
		c.VerifyConnection = func(cs tls.ConnectionState) error { return r.verify(cs, name) }
	}
}

// Config returns a client configuration for a connection to serverName, with Apply's
// certificate and checks.
func (r *Reloader) Config(serverName string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	r.Apply(c)
	return c
}

// DialContext returns a dial function (the signature of net.Dialer's and kgo.Dialer's)
// that opens a TLS connection with Config: to serverName, or to the host dialed when
// serverName is empty. d is the TCP dialer; its Timeout bounds the handshake too.
func (r *Reloader) DialContext(d *net.Dialer, serverName string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		name := serverName
		if name == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("dialing %s over TLS: %w", addr, err)
			}
			name = host
		}
		return (&tls.Dialer{NetDialer: d, Config: r.Config(name)}).DialContext(ctx, network, addr)
	}
}

// verify checks the server's certificate chain against the current CAs and name, as
// crypto/tls does when it verifies itself.
func (r *Reloader) verify(cs tls.ConnectionState, name string) error {
	if name == "" {
		name = cs.ServerName
	}
	if name == "" {
		return errors.New("tlsreload: no server name to check the server's certificate against (set the TLS server name)")
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsreload: the server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         r.current().pool,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   r.clock.Now(),
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates,
			Err: fmt.Errorf("checking the %s server's certificate for %q against %s=%q: %w", r.target, name, r.files.CAVar, r.files.CAFile, err)}
	}
	return nil
}

// Refused reports whether err is a TLS handshake that failed on a certificate: the
// server's, refused here (not signed by a CA of the CA file or the system's, not for the
// host name, expired), or the client's, refused by the server with a TLS alert about a
// certificate (a client certificate missing, expired or of a CA it does not trust). The
// server answers those, unlike one that is down, and no retry cures them: the files must
// be fixed. Another alert (a protocol version the server does not speak, say) is not one:
// saying to check the certificate files misled (a review).
func Refused(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	opErr, ok := errors.AsType[*net.OpError](err)
	if !ok || opErr.Op != "remote error" { // crypto/tls's error for the peer's alert
		return false
	}
	// The alert's type is crypto/tls's own, unexported; its text is tls.AlertError's of
	// the same code.
	for _, a := range certificateAlerts {
		if opErr.Err.Error() == a.Error() {
			return true
		}
	}
	return false
}

// Failed reports whether err is a TLS handshake that failed where no retry cures it: a
// certificate refused (Refused), or any other TLS alert from the server (a TLS version or
// cipher the two do not share). The callers' problems and error causes are these; only
// Refused's are said to be the certificate files'.
func Failed(err error) bool {
	if Refused(err) {
		return true
	}
	opErr, ok := errors.AsType[*net.OpError](err)
	return ok && opErr.Op == "remote error"
}

// certificateAlerts are the TLS alerts (RFC 8446 section 6) about a certificate: the
// client's refused or missing. handshake_failure is among them: OpenSSL (Redis's TLS)
// answers a missing client certificate with it under TLS 1.2.
var certificateAlerts = [...]tls.AlertError{
	40,  // handshake_failure
	42,  // bad_certificate
	43,  // unsupported_certificate
	44,  // certificate_revoked
	45,  // certificate_expired
	46,  // certificate_unknown
	48,  // unknown_ca
	49,  // access_denied
	116, // certificate_required
}
