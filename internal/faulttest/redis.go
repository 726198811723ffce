package faulttest

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig says how to protect a redis-server started by StartRedis.
type RedisConfig struct {
	// Password is the default user's password (requirepass); empty for none.
	Password string
	// User and UserPassword add an ACL user with every right; empty for none.
	User, UserPassword string
	// TLS, when set, makes the server listen over TLS only, with this certificate; CA
	// signs it (clients need not present one).
	TLS *KeyPair
	CA  *CA
}

// Redis is a redis-server process with a password or TLS, which internal/redistest does
// not start. Like redistest, it listens on a free loopback port, persists nothing, is
// killed at cleanup, and skips the test when redis-server is missing unless CI is true.
type Redis struct {
	Addr string
	cfg  RedisConfig
}

// StartRedis starts redis-server with cfg and waits until it answers PING.
func StartRedis(t testing.TB, cfg RedisConfig) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("faulttest: redis-server not found on PATH (%v); CI is true, so this fails", err)
		}
		t.Skipf("faulttest: redis-server not found on PATH (%v); skipping (CI=true makes it a failure)", err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	args := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log")}
	if cfg.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", cfg.TLS.CertFile, "--tls-key-file", cfg.TLS.KeyFile,
			"--tls-ca-cert-file", cfg.CA.CAFile, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", strconv.Itoa(port))
	}
	if cfg.Password != "" {
		args = append(args, "--requirepass", cfg.Password)
	}
	if cfg.User != "" {
		args = append(args, "--user", cfg.User, "on", ">"+cfg.UserPassword, "~*", "&*", "+@all")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cfg: cfg}
	c := r.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server %v exited: %s", args, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not answering PING: %v", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client logged in as the default user, closed at cleanup.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: r.Addr, Password: r.cfg.Password, ContextTimeoutEnabled: true}
	if r.cfg.TLS != nil {
		o.TLSConfig = &tls.Config{RootCAs: r.cfg.CA.Pool, MinVersion: tls.VersionTLS12}
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URL returns the server's URL for database 0 with the given credentials (user may be
// empty), rediss:// when the server speaks TLS.
func (r *Redis) URL(user, password string) string {
	u := url.URL{Scheme: "redis", Host: r.Addr, Path: "/0"}
	if r.cfg.TLS != nil {
		u.Scheme = "rediss"
	}
	switch {
	case user != "":
		u.User = url.UserPassword(user, password)
	case password != "":
		u.User = url.UserPassword("", password)
	}
	return u.String()
}

// String is the address, for logs.
