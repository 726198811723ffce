package config

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tick"
)

// hostile is a generated password with every character a URL gives a meaning to.
const hostile = "g3n@:/?#%25&+ =[]pw"

// dialRedis is the gate's Dial path for env: Load, RedisOptions, DialRedis.
func dialRedis(t *testing.T, env map[string]string, r Reload) []redis.UniversalClient {
	t.Helper()
	c, err := loadMap(env)
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.RedisOptions()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.DialRedis(o, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, x := range cs {
			_ = x.Close()
		}
	})
	return cs
}

// GATE_REDIS_USERNAME and GATE_REDIS_PASSWORD log the gate in to a real Redis, in place
// of the URL's credentials, with a password no URL could hold unescaped; a wrong one
// fails with Redis's own words.
func TestRedisCredentials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := t.Context()
	if err := admin.Do(ctx, "ACL", "SETUSER", "gate", "on", ">"+hostile, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	// The URL's own user and password are stale: the variables take precedence.
	cs := dialRedis(t, map[string]string{
		"GATE_REDIS_URLS": srv.URLAs("old-user", "old-password"), "GATE_REDIS_USERNAME": "gate", "GATE_REDIS_PASSWORD": hostile,
	}, Reload{})
	if who, err := cs[0].Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "gate" {
		t.Fatalf("ACL WHOAMI as GATE_REDIS_USERNAME=gate: %q, %v", who, err)
	}
	// A wrong password: Redis says so, and the password is not repeated.
	cs = dialRedis(t, map[string]string{
		"GATE_REDIS_URLS": srv.URL(), "GATE_REDIS_USERNAME": "gate", "GATE_REDIS_PASSWORD": "not-" + hostile,
	}, Reload{})
	err := cs[0].Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), hostile) {
		t.Errorf("PING with a wrong password: %v; want Redis's WRONGPASS, without the password", err)
	}
	// The default user with requirepass: GATE_REDIS_PASSWORD alone.
	if err := admin.ConfigSet(ctx, "requirepass", hostile).Err(); err != nil {
		t.Fatal(err)
	}
	cs = dialRedis(t, map[string]string{"GATE_REDIS_URLS": srv.URL(), "GATE_REDIS_PASSWORD": hostile}, Reload{})
	if who, err := cs[0].Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "default" {
		t.Errorf("ACL WHOAMI with GATE_REDIS_PASSWORD alone: %q, %v", who, err)
	}
	cs = dialRedis(t, map[string]string{"GATE_REDIS_URLS": srv.URL()}, Reload{})
	if err := cs[0].Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without a password on a server that wants one: %v; want NOAUTH", err)
	}
}

// The credentials replace the URLs' on every instance, escaped; the password shows
// nowhere a configuration or its errors are printed.
func TestRedisCredentialsInURLs(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{
		"GATE_REDIS_URLS":     "redis://u:old@h1:6379/0, rediss://h2:6380/2,redis://:old@h3:6379",
		"GATE_REDIS_PASSWORD": hostile,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range c.dialURLs() {
		opt, err := tick.ParseURL(u)
		if err != nil {
			t.Fatalf("URL %d: %v", i, err)
		}
		wantUser := []string{"u", "", ""}[i]
		if opt.Username != wantUser || opt.Password != hostile || opt.Addr != []string{"h1:6379", "h2:6380", "h3:6379"}[i] || opt.DB != []int{0, 2, 0}[i] {
			t.Errorf("URL %d as dialed: user %q, password %q, %s/%d", i, opt.Username, opt.Password, opt.Addr, opt.DB)
		}
	}
	c.RedisUsername = "gate"
	if opt, _ := tick.ParseURL(c.dialURLs()[0]); opt.Username != "gate" {
		t.Errorf("GATE_REDIS_USERNAME does not replace the URL's user: %q", opt.Username)
	}
	if s := fmt.Sprintf("%v %+v %s", c, c, strings.Join(c.RedisLabels(), " ")); strings.Contains(s, hostile) || strings.Contains(s, "g3n") {
		t.Errorf("the password shows when the config is printed: %s", s)
	}
	// A user without a password is refused, and the error does not repeat one.
	_, err = loadMap(map[string]string{"GATE_REDIS_USERNAME": "gate"})
	if err == nil || !strings.Contains(err.Error(), "GATE_REDIS_USERNAME") || !strings.Contains(err.Error(), "GATE_REDIS_PASSWORD") {
		t.Errorf("GATE_REDIS_USERNAME alone: %v", err)
	}
	_, err = loadMap(map[string]string{"GATE_REDIS_PASSWORD": hostile, "GATE_REDIS_TLS_CERT_FILE": "/x.pem"})
	if err == nil || !strings.Contains(err.Error(), "GATE_REDIS_TLS_CERT_FILE") || strings.Contains(err.Error(), "g3n") {
		t.Errorf("GATE_REDIS_TLS_CERT_FILE without a key file: %v", err)
	}
}

// volume is a directory laid out as a Kubernetes Secret volume: name -> ..data/name,
// ..data -> a generation directory, swapped atomically by update.
type volume struct {
	dir string
	gen int
}

func newVolume(t *testing.T, files map[string][]byte) *volume {
	t.Helper()
	v := &volume{dir: t.TempDir()}
	v.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *volume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.gen++
	gen := "..gen" + strconv.Itoa(v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, gen, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(gen, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.gen > 1 {
		_ = os.RemoveAll(filepath.Join(v.dir, "..gen"+strconv.Itoa(v.gen-1)))
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// until retries f, a new connection each time, until it succeeds or a generous deadline.
func until(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: still failing at the deadline: %v", what, err)
}

// A real Redis over TLS: the gate's CA bundle starts without the server's CA, so the
// server is refused; once the bundle (a Secret volume) holds it, a new connection
// trusts the server, without a new client.
func TestRedisTLSCAReload(t *testing.T) {
	t.Parallel()
	ca, other := faulttest.NewCA(t), faulttest.NewCA(t)
	cert := ca.Issue(t, "redis")
	srv := redistest.StartWith(t, redistest.Options{TLS: &redistest.TLS{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
	v := newVolume(t, map[string][]byte{"ca.crt": readFile(t, other.CAFile)})
	clk := clock.NewFake(time.Now())
	reg := prometheus.NewRegistry()
	cs := dialRedis(t, map[string]string{"GATE_REDIS_URLS": srv.URL(), "GATE_REDIS_TLS_CA_FILE": filepath.Join(v.dir, "ca.crt")},
		Reload{Clock: clk, Reg: reg})
	ctx := t.Context()
	err := cs[0].Ping(ctx).Err()
	if !errors.As(err, new(x509.UnknownAuthorityError)) || !strings.Contains(err.Error(), "GATE_REDIS_TLS_CA_FILE") {
		t.Fatalf("PING a server whose CA is not in the bundle: %v; want an unknown authority naming GATE_REDIS_TLS_CA_FILE", err)
	}
	v.update(t, map[string][]byte{"ca.crt": append(readFile(t, other.CAFile), readFile(t, ca.CAFile)...)})
	clk.Advance(time.Second)
	until(t, "PING once the bundle holds the server's CA", func() error { return cs[0].Ping(ctx).Err() })
	if n := metricValue(t, reg, "gate_tls_reloads_total", "redis"); n != 1 {
		t.Errorf("gate_tls_reloads_total{target=redis} = %v, want 1", n)
	}
}

// respServer is a TLS listener that requires a client certificate from ca, records its
// common name, and answers just enough RESP for go-redis to connect and PING.
func respServer(t *testing.T, ca *faulttest.CA, cert tls.Certificate) (addr string, seen *atomic.Value) {
	t.Helper()
	seen = &atomic.Value{}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			seen.Store(cs.PeerCertificates[0].Subject.CommonName)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveRESP(c) })
		}
	})
	return ln.Addr().String(), seen
}

// serveRESP answers each command: HELLO unknown (go-redis falls back to RESP2), PING
// PONG and then closes the connection (so that the client's next command dials anew),
// anything else OK.
func serveRESP(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.ToUpper(strings.TrimSpace(arg)))
		}
		reply := "+OK\r\n"
		switch {
		case len(args) > 0 && args[0] == "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case len(args) > 0 && args[0] == "PING":
			reply = "+PONG\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil || reply == "+PONG\r\n" {
			return
		}
	}
}

// GATE_REDIS_TLS_CERT_FILE rewritten in place: a new connection of the same client
// presents the new certificate.
func TestRedisClientCertReload(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	addr, seen := respServer(t, ca, ca.Issue(t, "redis").TLS)
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(kp faulttest.KeyPair) {
		for src, dst := range map[string]string{kp.CertFile: crt, kp.KeyFile: key} {
			if err := os.WriteFile(dst, readFile(t, src), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(ca.Issue(t, "gate-1"))
	clk := clock.NewFake(time.Now())
	cs := dialRedis(t, map[string]string{
		"GATE_REDIS_URLS": "rediss://" + addr + "/0", "GATE_REDIS_TLS_CA_FILE": ca.CAFile,
		"GATE_REDIS_TLS_CERT_FILE": crt, "GATE_REDIS_TLS_KEY_FILE": key,
	}, Reload{Clock: clk})
	c := cs[0].(*redis.Client)
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil || seen.Load() != "gate-1" {
		t.Fatalf("first PING: %v, the server saw %v; want gate-1", err, seen.Load())
	}
	install(ca.Issue(t, "gate-2"))
	clk.Advance(time.Second)
	until(t, "a new connection presenting gate-2", func() error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		if s := seen.Load(); s != "gate-2" {
			return fmt.Errorf("the server saw %v", s)
		}
		return nil
	})
}

// Kafka through franz-go, against an in-process broker that requires client
// certificates: after the certificate files are replaced, a new client built from the
// same ConsumeConfig presents the new certificate.
func TestKafkaClientCertReload(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	var seen atomic.Value
	cluster := faulttest.NewCluster(t, kfake.TLS(&tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Issue(t, "broker").TLS},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			seen.Store(cs.PeerCertificates[0].Subject.CommonName)
			return nil
		},
	}))
	first, second := ca.Issue(t, "gate-1"), ca.Issue(t, "gate-2")
	v := newVolume(t, map[string][]byte{
		"ca.crt": readFile(t, ca.CAFile), "tls.crt": readFile(t, first.CertFile), "tls.key": readFile(t, first.KeyFile),
	})
	c, err := loadMap(map[string]string{
		"GATE_KAFKA_BROKERS":       strings.Join(cluster.ListenAddrs(), ","),
		"GATE_KAFKA_TLS_CA_FILE":   filepath.Join(v.dir, "ca.crt"),
		"GATE_KAFKA_TLS_CERT_FILE": filepath.Join(v.dir, "tls.crt"),
		"GATE_KAFKA_TLS_KEY_FILE":  filepath.Join(v.dir, "tls.key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	cc, err := c.ConsumeConfig(Reload{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ping := func() error {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cc.Brokers...)}, cc.ClientOpts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	if err := ping(); err != nil || seen.Load() != "gate-1" {
		t.Fatalf("first connection: %v, the broker saw %v; want gate-1", err, seen.Load())
	}
	v.update(t, map[string][]byte{
		"ca.crt": readFile(t, ca.CAFile), "tls.crt": readFile(t, second.CertFile), "tls.key": readFile(t, second.KeyFile),
	})
	clk.Advance(time.Second)
	until(t, "a new connection presenting gate-2", func() error {
		if err := ping(); err != nil {
			return err
		}
		if s := seen.Load(); s != "gate-2" {
			return fmt.Errorf("the broker saw %v", s)
		}
		return nil
	})
}

func metricValue(t *testing.T, reg *prometheus.Registry, name, target string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" && l.GetValue() == target {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{target=%q}", name, target)
	return 0
}

// In sentinel mode the URL's host is dialed nowhere, but with rediss:// it is the name
// every certificate is checked against, the primary's and the sentinels' (one TLS
// configuration, which go-redis shares between them), as the documentation says.
func TestSentinelTLSNameIsTheURLHost(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	cs := dialRedis(t, map[string]string{
		"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m", "GATE_REDIS_SENTINEL_ADDRS": "10.0.0.1:26379,10.0.0.2:26379",
		"GATE_REDIS_URLS": "rediss://:pw@redis.example:6379/2", "GATE_REDIS_TLS_CA_FILE": ca.CAFile,
	}, Reload{})
	o := cs[0].(*redis.Client).Options()
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" || o.TLSConfig.VerifyConnection == nil || o.DB != 2 || o.Password != "pw" {
		t.Errorf("failover client: TLS %+v, database %d", o.TLSConfig, o.DB)
	}
}

// A rediss:// URL's skip_verify=true turns the server's certificate check off, and with
// it GATE_REDIS_TLS_CA_FILE: a gate given both reached a real Redis whose certificate
// the CA file does not sign, the operator believing the check on. Load refuses the
// pair, naming the CA file and the URL (its password redacted).
func TestRedisSkipVerifyWithCAFileRefused(t *testing.T) {
	t.Parallel()
	ca, other := faulttest.NewCA(t), faulttest.NewCA(t)
	cert := ca.Issue(t, "redis")
	srv := redistest.StartWith(t, redistest.Options{Password: "pw", TLS: &redistest.TLS{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
	env := map[string]string{"GATE_REDIS_URLS": srv.URL() + "?skip_verify=true", "GATE_REDIS_TLS_CA_FILE": other.CAFile}
	c, err := loadMap(env)
	if err == nil {
		// What the gate did with it: trust a server the CA file does not sign.
		o, err := c.RedisOptions()
		if err != nil {
			t.Fatal(err)
		}
		cs, err := c.DialRedis(o, Reload{})
		if err != nil {
			t.Fatal(err)
		}
		defer cs[0].Close()
		t.Fatalf("Load took skip_verify=true with GATE_REDIS_TLS_CA_FILE; PING a server the CA file does not sign: %v (nil: the CA file ignored)", cs[0].Ping(t.Context()).Err())
	}
	msg := err.Error()
	for _, want := range []string{"GATE_REDIS_TLS_CA_FILE", "skip_verify", "rediss://:xxxxx@127.0.0.1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Load: %v; want it to name %q", err, want)
		}
	}
	if strings.Contains(msg, ":pw@") {
		t.Errorf("Load's error repeats the URL's password: %v", err)
	}
	// skip_verify=false, or none, keeps the check: the CA file is used.
	env["GATE_REDIS_URLS"] = srv.URL() + "?skip_verify=false"
	if _, err := loadMap(env); err != nil {
		t.Errorf("skip_verify=false with GATE_REDIS_TLS_CA_FILE: %v; want it taken", err)
	}
}
