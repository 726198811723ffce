// Connecting to Redis, and placing a team in standalone mode. Dial, DialCluster and
// DialSentinel make clients that connect lazily (a gate starts while Redis is down) and
// retry no command of their own, with one dial attempt: the next tick is the retry, and a
// write is safe to repeat (writeScript). The cluster client alone resends, within one
// call, on a redirect and on the replies resentOn lists (errors.go). A URL's error never
// repeats its password. InstanceFor places a team alike in every gate, and moves about
// 1/(n+1) of the teams when a fleet goes from n instances to n+1.

package tick

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions are the connection settings shared by every instance.
type RedisOptions struct {
	// ReadTimeout and WriteTimeout bound each socket read and write. Default 250 ms.
	ReadTimeout, WriteTimeout time.Duration
	// DialTimeout bounds opening a connection. Default 1 s.
	DialTimeout time.Duration
	// PoolSize is the connections kept per instance. Default 4: the tick uses one.
	PoolSize int
	// RootCAs, when set, replaces the system's CA certificates for rediss:// URLs.
	RootCAs *x509.CertPool
	// SentinelUsername and SentinelPassword log in to the sentinels (DialSentinel), whose
	// password is their own requirepass, not the primary's; empty for none.
	SentinelUsername, SentinelPassword string
}

// Defaults for RedisOptions.
const (
	DefaultReadTimeout  = 250 * time.Millisecond
	DefaultWriteTimeout = 250 * time.Millisecond
	DefaultDialTimeout  = time.Second
	DefaultPoolSize     = 4
)

// ErrBadURL wraps every Redis URL error.
var ErrBadURL = errors.New("tick: bad redis URL")

// Dial returns one client per URL (redis:// or rediss://, password and database in the
// URL). The clients connect lazily: Dial succeeds while Redis is down, and the tick keeps
// trying. Retries inside the client are off: the next tick is the retry, and it resends a
// write whose outcome is unknown with the number that makes a repeat harmless.
func Dial(urls []string, o RedisOptions) ([]*redis.Client, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no URL given", ErrBadURL)
	}
	o = o.withDefaults()
	clients := make([]*redis.Client, 0, len(urls))
	for _, u := range urls {
		opt, err := ParseURL(u)
		if err != nil {
			for _, c := range clients {
				_ = c.Close()
			}
			return nil, err
		}
		opt.ReadTimeout, opt.WriteTimeout, opt.DialTimeout = o.ReadTimeout, o.WriteTimeout, o.DialTimeout
		opt.PoolSize = o.PoolSize
		if opt.TLSConfig != nil && o.RootCAs != nil {
			opt.TLSConfig.RootCAs = o.RootCAs
		}
		opt.MaxRetries = -1
		// One dial attempt: the client's default of five, 100 ms apart, would make every
		// tick of an outage half a second late. The next tick is the retry.
		opt.DialerRetries = 1
		opt.ContextTimeoutEnabled = true
		clients = append(clients, redis.NewClient(opt))
	}
	return clients, nil
}

// ParseURL checks and parses one Redis URL. The error never repeats a password.
func ParseURL(u string) (*redis.Options, error) {
	if !strings.Contains(u, "://") {
		return nil, fmt.Errorf("%w: %q: want redis:// or rediss://, as redis://[[user]:password@]host:port[/db]", ErrBadURL, redact(u))
	}
	if UnescapedPassword(u) {
		return nil, fmt.Errorf("%w: a URL has an '@' after its host: escape its password's '/', '?' and '#' (%%2F, %%3F, %%23), which end the host otherwise", ErrBadURL)
	}
	pu, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse %q (want redis://[:password@]host:port[/db] or rediss://...)", ErrBadURL, redact(u))
	}
	if pu.Scheme != "redis" && pu.Scheme != "rediss" {
		return nil, fmt.Errorf("%w: %q: scheme must be redis or rediss", ErrBadURL, Redacted(pu))
	}
	if pu.Host == "" {
		return nil, fmt.Errorf("%w: %q: no host", ErrBadURL, Redacted(pu))
	}
	// The client takes any port and database as they are, and a dial or SELECT fails at
	// every tick while the gate stays unready: refused here, they stop it at start.
	if p := pu.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: %q: port %q is not from 1 to 65535", ErrBadURL, Redacted(pu), p)
		}
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadURL, Redacted(pu), err)
	}
	if opt.DB < 0 {
		return nil, fmt.Errorf("%w: %q: database %d is not 0 or more", ErrBadURL, Redacted(pu), opt.DB)
	}
	return opt, nil
}

func redact(u string) string {
	if UnescapedPassword(u) {
		return "(redacted: an '@' outside the user info)"
	}
	if pu, err := url.Parse(u); err == nil {
		return Redacted(pu)
	}
	return "(unparsable)"
}

// Redacted is pu as errors and logs show it: its password replaced by "xxxxx", as
// url.URL.Redacted does, and so is a user name without a password, which may be a
// password written without its ':' (redis://secret@host).
func Redacted(pu *url.URL) string {
	if pu.User == nil || pu.User.Username() == "" {
		return pu.Redacted()
	}
	if p, _ := pu.User.Password(); p == "" {
		c := *pu
		c.User = url.User("xxxxx")
		return c.String()
	}
	return pu.Redacted()
}

// UnescapedPassword reports a URL with an '@' after its host, as in
// redis://user:12/ab@host:6379: a password holding '/', '?' or '#' unescaped ends the
// host early, and the rest of it is read as the port, the database, the query or the
// fragment, where url.URL.Redacted does not hide it. No Redis URL has an '@' there
// otherwise (an '@' in an option's value is %40). Without "://" (user:password@host,
// the scheme forgotten), any '@' counts: url.Parse reads no user info there at all.
func UnescapedPassword(u string) bool {
	rest := u
	if _, r, ok := strings.Cut(u, "://"); ok {
		i := strings.IndexAny(r, "/?#")
		if i < 0 {
			return false
		}
		rest = r[i:]
	}
	return strings.Contains(rest, "@")
}

func (o RedisOptions) withDefaults() RedisOptions {
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	return o
}

// Key returns the Redis key of team's counter in epoch: {prefix}:{team}:{epoch}.
func Key(prefix, team string, epoch int64) string {
	b := appendTeamKey(make([]byte, 0, len(prefix)+len(team)+22), ModeStandalone, prefix, team)
	return string(strconv.AppendInt(append(b, ':'), epoch, 10))
}

// InstanceFor returns which of n instances holds team's keys: jump consistent hash of the
// team's FNV-1a hash. Every gate computes the same answer, and going from n to n+1
// instances moves only 1/(n+1) of the teams.
func InstanceFor(team string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(jumpHash(fnv64a(team), n))
}

// fnv64a is the FNV-1a hash of s, without the allocation of hash/fnv's interface.
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// jumpHash is Lamping and Veach's jump consistent hash.
func jumpHash(key uint64, buckets int) int32 {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int32(b)
}

// DialCluster returns one Redis Cluster client whose seed nodes are the URLs' hosts; the
// client learns the rest of the cluster from them. Credentials and TLS come from the first
// URL (a cluster has one set), and every URL must name database 0 (a cluster has no
// other). Redirects are followed up to three times per tick; writes may be re-sent by the
// client, as every write is safe to repeat (writeScript).
func DialCluster(urls []string, o RedisOptions) (*redis.ClusterClient, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no URL given", ErrBadURL)
	}
	o = o.withDefaults()
	var first *redis.Options
	addrs := make([]string, 0, len(urls))
	for _, u := range urls {
		opt, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		if opt.DB != 0 {
			return nil, fmt.Errorf("%w: %q: Redis Cluster has only database 0", ErrBadURL, redact(u))
		}
		if first == nil {
			first = opt
		}
		addrs = append(addrs, opt.Addr)
	}
	copt := &redis.ClusterOptions{
		Addrs:        addrs,
		Username:     first.Username,
		Password:     first.Password,
		TLSConfig:    first.TLSConfig,
		ReadTimeout:  o.ReadTimeout,
		WriteTimeout: o.WriteTimeout,
		DialTimeout:  o.DialTimeout,
		PoolSize:     o.PoolSize,
		MaxRedirects: 3,
		// Per-node retries off for the same reason as Dial's: the next tick is the retry.
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	}
	if copt.TLSConfig != nil && o.RootCAs != nil {
		copt.TLSConfig.RootCAs = o.RootCAs
	}
	return redis.NewClusterClient(copt), nil
}

// DialSentinel returns a client of the primary that the sentinels at sentinelAddrs
// (host:port) know as master. It asks the sentinels for the primary on every new
// connection and drops its connections when they announce a failover, so the tick follows
// a promotion without a restart. Credentials, database and TLS of the data nodes come from
// url, whose host is only the name every TLS certificate, the primary's and the sentinels'
// alike, is checked against (rediss://); the sentinels are reached with o's
// SentinelUsername and SentinelPassword (none when empty), over TLS with a rediss:// url.
func DialSentinel(master string, sentinelAddrs []string, url string, o RedisOptions) (*redis.Client, error) {
	if master == "" {
		return nil, fmt.Errorf("%w: sentinel mode needs a master name", ErrBadURL)
	}
	if len(sentinelAddrs) == 0 {
		return nil, fmt.Errorf("%w: sentinel mode needs sentinel addresses", ErrBadURL)
	}
	opt, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	o = o.withDefaults()
	fopt := &redis.FailoverOptions{
		MasterName:            master,
		SentinelAddrs:         sentinelAddrs,
		Username:              opt.Username,
		Password:              opt.Password,
		SentinelUsername:      o.SentinelUsername,
		SentinelPassword:      o.SentinelPassword,
		DB:                    opt.DB,
		TLSConfig:             opt.TLSConfig,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		DialTimeout:           o.DialTimeout,
		PoolSize:              o.PoolSize,
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	}
	if fopt.TLSConfig != nil && o.RootCAs != nil {
		fopt.TLSConfig.RootCAs = o.RootCAs
	}
	// go-redis's own dialer, but for its errors dialing the primary the sentinels named,
	// which PrimaryWatch's fallback must tell from theirs.
	fopt.Dialer = sentinelDialer(sentinelAddrs, redis.NewDialer(&redis.Options{DialTimeout: fopt.DialTimeout, TLSConfig: fopt.TLSConfig}))
	return redis.NewFailoverClient(fopt), nil
}

// primaryDialError is a failed dial to the primary a sentinel named: the sentinels
// answered, so PrimaryWatch's fallback, for when none does, must not dial the last
// primary instead (a failover to a primary this gate cannot reach sent its counts to the
// demoted one, or, in a split, to one whose writes are dropped when it rejoins).
type primaryDialError struct {
	addr string
	err  error
}

func (e *primaryDialError) Error() string { return e.err.Error() }
func (e *primaryDialError) Unwrap() error { return e.err }

// sentinelDialer is a failover client's dialer (FailoverOptions.Dialer, which go-redis
// uses for its sentinels and for the primary alike): dial's, with an error dialing any
// address other than the sentinels' a primaryDialError.
func sentinelDialer(sentinels []string, dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	sentinel := make(map[string]bool, len(sentinels))
	for _, a := range sentinels {
		sentinel[a] = true
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil && !sentinel[addr] {
			return nil, &primaryDialError{addr: addr, err: err}
		}
		return cn, err
	}
}
