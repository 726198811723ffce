package faulttest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/redistest"
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

// Redis is a redis-server process with a password or TLS, started through
// internal/redistest (StartWith), so it keeps that package's guarantees: a free loopback
// port, nothing persisted, killed at cleanup, the test skipped when redis-server is
// missing unless CI is true.
type Redis struct {
	Addr string
	srv  *redistest.Server
}

// StartRedis starts redis-server with cfg and waits until it answers PING.
func StartRedis(t testing.TB, cfg RedisConfig) *Redis {
	t.Helper()
	opts := redistest.Options{Password: cfg.Password, User: cfg.User, UserPassword: cfg.UserPassword}
	if cfg.TLS != nil {
		opts.TLS = &redistest.TLS{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile, CAFile: cfg.CA.CAFile, RootCAs: cfg.CA.Pool}
	}
	srv := redistest.StartWith(t, opts)
	return &Redis{Addr: srv.Addr(), srv: srv}
}

// Client returns a client logged in as the default user, closed at cleanup.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	return r.srv.Client(t)
}

// URL returns the server's URL for database 0 with the given credentials (user may be
// empty), rediss:// when the server speaks TLS.
func (r *Redis) URL(user, password string) string { return r.srv.URLAs(user, password) }
