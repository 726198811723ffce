package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
	"github.com/capturegate/gate/internal/tlsreload"
)

// Redis is Config's variables for the tick and Redis.
type Redis struct {
	// The tick (internal/tick) and Redis.
	TickInterval          time.Duration  `envconfig:"TICK_INTERVAL" default:"1s" desc:"How often counts are written to Redis and due reads made, at least 1ms, shorter than GATE_WINDOW and no longer than GATE_SYNC_INTERVAL (default 1s); ticks fall on the wall clock's multiples of it, the same instants on every gate, writes at the boundary and reads a quarter of it later, so every gate with this interval and a clock within that quarter of the others reads the whole fleet's writes; shorter lets the fleet react sooner, longer batches more work into each round trip."`
	RedisMode             redisMode      `envconfig:"REDIS_MODE" default:"standalone" desc:"Redis topology: standalone (independent instances listed in GATE_REDIS_URLS, teams spread by a stable hash), cluster (a Redis Cluster whose seed nodes are GATE_REDIS_URLS, database 0 only, keys hash-tagged by one of 256 shards) or sentinel (the primary that GATE_REDIS_SENTINEL_ADDRS know as GATE_REDIS_SENTINEL_MASTER, followed through failovers, with password, database and TLS from the one URL in GATE_REDIS_URLS, whose host is only the name the primary's and the sentinels' TLS certificates are checked against) (default standalone); cluster scales past one instance, sentinel survives losing the primary."`
	RedisSentinelMaster   sentinelMaster `envconfig:"REDIS_SENTINEL_MASTER" default:"" desc:"With GATE_REDIS_MODE=sentinel, the name the sentinels know the primary by, as in their sentinel monitor line (default none)."`
	RedisSentinelAddrs    sentinelAddrs  `envconfig:"REDIS_SENTINEL_ADDRS" default:"" desc:"With GATE_REDIS_MODE=sentinel, comma-separated sentinels as host:port, asked for the current primary (default none); list several, so that losing one still finds the primary."`
	RedisSentinelUsername string         `envconfig:"REDIS_SENTINEL_USERNAME" default:"" desc:"With GATE_REDIS_MODE=sentinel, the ACL user the gate logs in to the sentinels as, with GATE_REDIS_SENTINEL_PASSWORD (default none), the sentinels' default user being used without it."`
	RedisSentinelPassword secret         `envconfig:"REDIS_SENTINEL_PASSWORD" default:"" desc:"With GATE_REDIS_MODE=sentinel, the sentinels' own password (requirepass in sentinel.conf; Bitnami's Redis chart sets one by default, the same as Redis's), taken as is but for white space around it, which is removed as from every variable (default none); unset, the sentinels are reached without a password; GATE_REDIS_PASSWORD, the primary's, is not used in its place, which would hand the primary's password to servers that may not want it, so with Bitnami's chart give both the same Secret; set it from a Secret, it is never logged."`
	RedisURLs             redisURLs      `envconfig:"REDIS_URLS" default:"redis://127.0.0.1:6379/0" desc:"Comma-separated Redis instances as redis:// or rediss:// URLs with optional password and database, over which teams are spread by a stable hash (default redis://127.0.0.1:6379/0); every gate of a fleet needs the same list in the same order, and changing it moves teams and briefly resets their counts."`
	RedisUsername         string         `envconfig:"REDIS_USERNAME" default:"" desc:"Redis ACL user the gate logs in as on every instance of GATE_REDIS_URLS, in place of any user name in the URLs, with GATE_REDIS_PASSWORD (default none), the URLs' user, else Redis's default user, being used without it; in sentinel mode it is the primary's, GATE_REDIS_SENTINEL_USERNAME being the sentinels'."`
	RedisPassword         secret         `envconfig:"REDIS_PASSWORD" default:"" desc:"Redis password for every instance of GATE_REDIS_URLS, in place of any password in the URLs, taken as is, so it need not be URL-escaped, but for white space around it, which is removed as from every variable (a Secret written with echo ends in a newline) (default none), the URLs' password, if any, being used without it; in sentinel mode it is the primary's, GATE_REDIS_SENTINEL_PASSWORD being the sentinels'; set it from a Secret, it is never logged."`
	RedisPrefix           string         `envconfig:"REDIS_PREFIX" default:"gate" desc:"First part of every counter key {prefix}:{team}:{epoch} ({prefix}/bytes:{team}:{epoch} with GATE_COST=bytes) (default gate); gates with the same prefix on the same Redis share their limits, so give each fleet its own."`
	RedisKeyTTL           time.Duration  `envconfig:"REDIS_KEY_TTL" default:"0" desc:"Expiry of each counter key: this value raised to 2 x the limit's window (default 0, meaning exactly that; 3 x the window for a learned limit, GATE_THRESHOLD_MODE=adaptive, whose fold reads the window two back; 2 x the window plus GATE_MAX_EVENT_AGE with GATE_CLOCK=event), plus 30 s for clock skew between gates; at most 8784h (366 days). The previous epoch must outlive a whole window or over-limit teams get free traffic, so longer only keeps dead keys around longer. Profile keys (adaptive mode) live 7 days and hold flags GATE_DIVERT_HOLD, whatever this says."`
	RedisTLSCAFile        string         `envconfig:"REDIS_TLS_CA_FILE" default:"" desc:"PEM file of the CA certificates that sign the Redis servers' certificates, for rediss:// URLs (default none), the system's CA certificates being used without it; read again when it changes, as GATE_KAFKA_TLS_CERT_FILE; refused with a URL's skip_verify=true, which turns the check off."`
	RedisTLSCertFile      string         `envconfig:"REDIS_TLS_CERT_FILE" default:"" desc:"PEM client certificate for mutual TLS with rediss:// URLs, with GATE_REDIS_TLS_KEY_FILE (default none); read again when it changes, as GATE_KAFKA_TLS_CERT_FILE."`
	RedisTLSKeyFile       string         `envconfig:"REDIS_TLS_KEY_FILE" default:"" desc:"PEM private key of GATE_REDIS_TLS_CERT_FILE (default none); read again with it."`
	RedisReadTimeout      time.Duration  `envconfig:"REDIS_READ_TIMEOUT" default:"250ms" desc:"Longest wait for a Redis reply (default 250ms); shorter gives up on a slow Redis sooner (views go stale, records are never held up), longer rides out pauses, up to the tick's own bound (three quarters of GATE_TICK_INTERVAL), but delays the tick."`
	RedisWriteTimeout     time.Duration  `envconfig:"REDIS_WRITE_TIMEOUT" default:"250ms" desc:"Longest wait to send a command to Redis (default 250ms); shorter gives up on a stuck connection sooner, longer rides out pauses, up to the tick's own bound (three quarters of GATE_TICK_INTERVAL), but delays the tick."`
	RedisDialTimeout      time.Duration  `envconfig:"REDIS_DIAL_TIMEOUT" default:"1s" desc:"Longest wait to open a connection to Redis (default 1s); shorter notices a lost instance sooner, too short fails on a slow network."`
	KeysPerCommand        int            `envconfig:"KEYS_PER_COMMAND" default:"200" desc:"Keys in one Redis command, at least 2 (default 200): an MGET of reads, a script of count writes, of hold flags or of profiles; larger sends fewer commands per tick, but each one holds Redis a little longer."`
	KeysPerTick           int            `envconfig:"KEYS_PER_TICK" default:"500000" desc:"Most keys one tick touches over all instances, a write being one key and a read two to five (its counters, and its hold flag and learned profile when fetched with them), the rest waiting for the next tick, writes first (default 500000), but for one read a tick when the writes leave two keys and a read carries more (up to 3 keys over); it bounds a tick's Redis work after an outage at the cost of a slower catch-up; a tick that times out on an instance with at least twice GATE_KEYS_PER_COMMAND keys halves that instance's budget for the next ones, and each tick in time raises it by half again, back to this (not in cluster mode), so that a backlog larger than Redis answers within GATE_REDIS_READ_TIMEOUT goes through in parts instead of timing out whole."`
	MaxPendingWrites      int            `envconfig:"MAX_PENDING_WRITES" default:"1000000" desc:"Most (team, epoch) counts kept waiting for Redis, for example while it is down, new counts past it being dropped and counted in gate_limiter_dropped_counts_total (default 1000000); larger rides out longer outages for more memory."`
	MaxReadsPerTick       int            `envconfig:"MAX_READS_PER_TICK" default:"100000" desc:"Most team reads one tick makes, the teams nearest their limit first (under it or over it) and the rest planned again next tick (default 100000); it bounds Redis load in a read storm, at the cost of staler views for cooler teams."`
}

// KeyTTL returns the expiry to set on the primary limit's counter keys: GATE_REDIS_KEY_TTL
// raised to the keys' lifetime, as the tick raises it (limit.Limiter.KeyLifetime): 2 ×
// window, 3 × with adaptive thresholds, 2 × plus GATE_MAX_EVENT_AGE on the event clock (0
// means exactly that). clamped reports a non-zero setting that was raised, which the
// caller logs: the operator asked for something else (the floor was 2 × window alone, and
// a raise to 3 × or to the event clock's went unsaid: a review). With a rules file
// GATE_WINDOW is unset and no rule's: GATE_REDIS_KEY_TTL as is, which the tick raises to
// each rule's limit's KeyLifetime.
func (c Config) KeyTTL() (ttl time.Duration, clamped bool) {
	if c.RulesFile != "" {
		return c.RedisKeyTTL, false
	}
	floor := 2 * c.Window
	switch {
	case c.ThresholdMode == adaptiveMode:
		floor = 3 * c.Window
	case c.Clock.Clock == limit.EventClock:
		floor = 2*c.Window + c.MaxEventAge
	}
	if c.RedisKeyTTL >= floor {
		return c.RedisKeyTTL, false
	}
	return floor, c.RedisKeyTTL != 0
}

// SyncConfig maps Config to the tick's settings.
//
// The tick gets GATE_REDIS_KEY_TTL as set: it raises it for each limit to 2 × that
// limit's own window (tick.NewMulti), where KeyTTL's floor is the primary's alone and, with
// GATE_LIMITS=1h:...,1m:..., would keep the minute limit's keys 2 hours.
func (c Config) SyncConfig() tick.Config {
	return tick.Config{
		TickInterval:     c.TickInterval,
		Mode:             c.RedisMode.value(),
		KeyPrefix:        c.RedisPrefix,
		KeyTTL:           c.RedisKeyTTL,
		KeysPerCommand:   c.KeysPerCommand,
		KeysPerTick:      c.KeysPerTick,
		MaxPendingWrites: c.MaxPendingWrites,
		MaxReadsPerTick:  c.MaxReadsPerTick,
	}
}

// RedisOptions maps Config to the Redis connection settings. Its errors name the
// variable at fault.
func (c Redis) RedisOptions() (tick.RedisOptions, error) {
	o := tick.RedisOptions{
		ReadTimeout:      c.RedisReadTimeout,
		WriteTimeout:     c.RedisWriteTimeout,
		DialTimeout:      c.RedisDialTimeout,
		SentinelUsername: c.RedisSentinelUsername,
		SentinelPassword: string(c.RedisSentinelPassword),
	}
	if c.RedisTLSCAFile != "" {
		pool, err := loadCAs("REDIS_TLS_CA_FILE", c.RedisTLSCAFile)
		if err != nil {
			return o, Problems{err} // a configuration error: exit status 2
		}
		o.RootCAs = pool
	}
	return o, nil
}

// DialRedis returns the clients GATE_REDIS_MODE calls for: one per URL in standalone
// mode, else one cluster or failover client. None connects yet.
//
// GATE_REDIS_USERNAME and GATE_REDIS_PASSWORD, when set, replace the URLs' user and
// password (see dialURLs); in sentinel mode GATE_REDIS_SENTINEL_USERNAME and
// GATE_REDIS_SENTINEL_PASSWORD (in o, from RedisOptions) log in to the sentinels. With
// rediss:// URLs and a GATE_REDIS_TLS_* file, every connection (to the sentinels too, in
// sentinel mode) presents the current client certificate and checks the server against
// the current CAs and the URL's host name, the files being read again when they change
// (see Reload).
func (c Redis) DialRedis(o tick.RedisOptions, r Reload) ([]redis.UniversalClient, error) {
	var u []redis.UniversalClient
	urls := c.dialURLs()
	switch c.RedisMode.value() {
	case tick.ModeCluster:
		cc, err := tick.DialCluster(urls, o)
		if err != nil {
			return nil, err
		}
		u = []redis.UniversalClient{cc}
	case tick.ModeSentinel:
		fc, err := tick.DialSentinel(string(c.RedisSentinelMaster), c.RedisSentinelAddrs, urls[0], o)
		if err != nil {
			return nil, err
		}
		fc.AddHook(sentinelAuthHook{withPassword: c.RedisSentinelPassword != "", master: string(c.RedisSentinelMaster)})
		u = []redis.UniversalClient{fc}
	default:
		cs, err := tick.Dial(urls, o)
		if err != nil {
			return nil, err
		}
		for _, x := range cs {
			u = append(u, x)
		}
	}
	if err := c.redisTLS(u, r); err != nil {
		for _, x := range u {
			_ = x.Close()
		}
		return nil, Problems{err} // a configuration error: exit status 2
	}
	return u, nil
}

// sentinelAuthHook names GATE_REDIS_SENTINEL_PASSWORD in the error of a dial that the
// sentinels refused for want of a password or a right one. Without it the error is
// Redis's bare NOAUTH or WRONGPASS, which sends the operator to GATE_REDIS_PASSWORD, the
// primary's. Only the sentinels answer inside a failover client's dial (the primary's
// AUTH comes after it), so a refusal there is theirs. It names GATE_REDIS_SENTINEL_MASTER
// too when the sentinels that answered know no master by that name: go-redis says "all
// sentinels specified in configuration are unreachable: redis: nil", and /readyz showed
// "refuses PING: redis: nil", both of which send the operator to the network.
type sentinelAuthHook struct {
	withPassword bool
	master       string
}

func (h sentinelAuthHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		switch {
		case err == nil:
		case sentinelAuthRefused(err):
			return cn, &sentinelAuthError{withPassword: h.withPassword, err: err}
		case errors.Is(err, redis.Nil):
			// SENTINEL GET-MASTER-ADDR-BY-NAME answers nil for a name it does not monitor;
			// nothing else in the dial answers nil.
			return cn, &sentinelMasterError{master: h.master, err: err}
		}
		return cn, err
	}
}

func (sentinelAuthHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (sentinelAuthHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// sentinelAuthRefused reports whether err holds a sentinel's refusal of the gate's login:
// no password given (NOAUTH), a wrong one or an unknown user (WRONGPASS), or, from a
// client that sends AUTH without a user, a password to a sentinel that has none (ERR AUTH
// ... called without any password configured).
func sentinelAuthRefused(err error) bool {
	var found bool
	walkRedisErrors(err, func(re redis.Error) {
		m := re.Error()
		if strings.HasPrefix(m, "NOAUTH") || strings.HasPrefix(m, "WRONGPASS") ||
			(strings.HasPrefix(m, "ERR AUTH") && strings.Contains(m, "without any password configured")) {
			found = true
		}
	})
	return found
}

// walkRedisErrors calls f on every redis.Error in err's tree: the failover client joins
// one error per sentinel.
func walkRedisErrors(err error, f func(redis.Error)) {
	if re, ok := err.(redis.Error); ok {
		f(re)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			walkRedisErrors(e, f)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkRedisErrors(e, f)
		}
	}
}

// sentinelAuthError is a refused sentinel login, named by its variable. It is a
// redis.Error, so that /readyz shows it as Redis's refusal, which it is, in place of
// the bare NOAUTH or WRONGPASS. Redis's replies never repeat the password given.
type sentinelAuthError struct {
	withPassword bool
	err          error
}

func (e *sentinelAuthError) Error() string {
	if e.withPassword {
		return fmt.Sprintf("the sentinels refuse %s_REDIS_SENTINEL_PASSWORD (with %s_REDIS_SENTINEL_USERNAME, if set): check it against their requirepass, which may differ from %s_REDIS_PASSWORD, the primary's: %v",
			envPrefix, envPrefix, envPrefix, e.err)
	}
	return fmt.Sprintf("the sentinels require a password: set %s_REDIS_SENTINEL_PASSWORD to their requirepass (%s_REDIS_PASSWORD is the primary's only): %v",
		envPrefix, envPrefix, e.err)
}

func (e *sentinelAuthError) Unwrap() error { return e.err }

func (e *sentinelAuthError) RedisError() {}

// sentinelMasterError is a master name the sentinels that answered do not monitor,
// named by its variable. A redis.Error, as sentinelAuthError, for /readyz.
type sentinelMasterError struct {
	master string
	err    error
}

func (e *sentinelMasterError) Error() string {
	return fmt.Sprintf("the sentinels that answered monitor no master named %q: set %s_REDIS_SENTINEL_MASTER to the name of their sentinel monitor line (SENTINEL MASTERS lists them): %v",
		e.master, envPrefix, e.err)
}

func (e *sentinelMasterError) Unwrap() error { return e.err }

func (e *sentinelMasterError) RedisError() {}

// dialURLs returns GATE_REDIS_URLS with GATE_REDIS_USERNAME and GATE_REDIS_PASSWORD, each
// when set, in place of the user and password the URLs hold; net/url escapes them, and
// go-redis unescapes them, so a password need not be URL-safe. A URL that does not parse
// is returned as is, for the dialer's error (Load has rejected it already).
func (c Redis) dialURLs() []string {
	if c.RedisUsername == "" && c.RedisPassword == "" {
		return c.RedisURLs
	}
	out := make([]string, len(c.RedisURLs))
	for i, s := range c.RedisURLs {
		pu, err := url.Parse(s)
		if err != nil {
			out[i] = s
			continue
		}
		var user, pass string
		if pu.User != nil {
			user = pu.User.Username()
			pass, _ = pu.User.Password()
		}
		if c.RedisUsername != "" {
			user = c.RedisUsername
		}
		if c.RedisPassword != "" {
			pass = string(c.RedisPassword)
		}
		pu.User = url.UserPassword(user, pass)
		out[i] = pu.String()
	}
	return out
}

// redisTLS puts the GATE_REDIS_TLS_* files' reloader on the TLS configuration of every
// client that has one (rediss:// URLs). go-redis reads a client's TLS configuration at
// each dial, and shares one between a cluster's nodes and between a failover client's
// primary and sentinels, so changing it before the first dial covers every connection.
func (c Redis) redisTLS(clients []redis.UniversalClient, r Reload) error {
	if c.RedisTLSCAFile == "" && c.RedisTLSCertFile == "" {
		return nil
	}
	var cfgs []*tls.Config
	for _, x := range clients {
		var tc *tls.Config
		switch x := x.(type) {
		case *redis.Client:
			tc = x.Options().TLSConfig
		case *redis.ClusterClient:
			tc = x.Options().TLSConfig
		}
		if tc != nil {
			cfgs = append(cfgs, tc)
		}
	}
	if len(cfgs) == 0 {
		return nil // redis:// URLs only: the files are not used
	}
	rl, err := tlsreload.New(tlsreload.Files{
		CAFile: c.RedisTLSCAFile, CertFile: c.RedisTLSCertFile, KeyFile: c.RedisTLSKeyFile,
		CAVar: envPrefix + "_REDIS_TLS_CA_FILE", CertVar: envPrefix + "_REDIS_TLS_CERT_FILE", KeyVar: envPrefix + "_REDIS_TLS_KEY_FILE",
	}, r.options("redis"))
	if err != nil {
		return err
	}
	for _, tc := range cfgs {
		rl.Apply(tc)
	}
	return nil
}

// RedisLabels names DialRedis's clients, passwords redacted, for logs and readiness.
func (c Redis) RedisLabels() []string {
	var urls []string
	for _, u := range c.RedisURLs {
		urls = append(urls, redactURL(u))
	}
	switch c.RedisMode.value() {
	case tick.ModeCluster:
		return []string{"cluster " + strings.Join(urls, ",")}
	case tick.ModeSentinel:
		return []string{"sentinel master " + string(c.RedisSentinelMaster) + " via " + strings.Join(c.RedisSentinelAddrs, ",")}
	}
	return urls
}

// sameScheme reports whether the URLs all use TLS (rediss://) or none does.
func sameScheme(urls []string) bool {
	tls := -1
	for _, u := range urls {
		opt, err := tick.ParseURL(u)
		if err != nil {
			continue // reported by the URLs' own check
		}
		t := 0
		if opt.TLSConfig != nil {
			t = 1
		}
		if tls >= 0 && t != tls {
			return false
		}
		tls = t
	}
	return true
}

// loadCAs reads a PEM file of CA certificates named by GATE_<key>.
func loadCAs(key, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("GATE_%s=%q: reading the CA certificates: %w", key, file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("GATE_%s=%q: want PEM certificates, found none", key, file)
	}
	return pool, nil
}

// validateBetween checks the rules between the tick's and Redis's variables, once every
// value is sane.
func (c Redis) validateBetween(bad report) {
	// The TLS files are used on rediss:// URLs only: with none, the gate would talk to
	// Redis in plain text, its password too, while the operator thinks it uses TLS.
	if c.RedisTLSCAFile != "" || c.RedisTLSCertFile != "" {
		tls := slices.ContainsFunc(c.RedisURLs, func(u string) bool {
			opt, err := tick.ParseURL(u)
			return err == nil && opt.TLSConfig != nil
		})
		if !tls {
			key := "REDIS_TLS_CA_FILE"
			if c.RedisTLSCAFile == "" {
				key = "REDIS_TLS_CERT_FILE"
			}
			bad(key, "unset unless GATE_REDIS_URLS has rediss:// URLs (TLS), the only ones the files are used on")
		}
	}
	// skip_verify=true turns the server's certificate check off, and the CA file with it:
	// the gate would trust any server while the operator thinks it checks against the file.
	if c.RedisTLSCAFile != "" {
		for _, u := range c.RedisURLs {
			if opt, err := tick.ParseURL(u); err == nil && opt.TLSConfig != nil && opt.TLSConfig.InsecureSkipVerify {
				bad("REDIS_TLS_CA_FILE", fmt.Sprintf("unset while GATE_REDIS_URLS has skip_verify=true (%s), which turns the servers' certificate check off and this file with it; "+
					"drop skip_verify to check the servers against this file", redactURL(u)))
				break
			}
		}
	}
}

// validate checks the tick's and Redis's variables' values, each on its own.
func (c Redis) validate(bad report) {
	// A tick makes its round trips to Redis within three quarters of its interval: under
	// a millisecond none could, and every tick would fail (1ns was accepted).
	if c.TickInterval < time.Millisecond {
		bad("TICK_INTERVAL", "a duration of at least 1ms such as 1s")
	}
	// The tick sets a counter's TTL to this plus tick.KeyTTLMargin: near the longest
	// duration the sum overflowed, and Redis refused every write. A year, the longest
	// window, keeps dead keys long enough.
	if c.RedisKeyTTL < 0 || c.RedisKeyTTL > rules.MaxWindow {
		bad("REDIS_KEY_TTL", "0 (meaning 2 x GATE_WINDOW) or a positive duration of at most 8784h (366 days) such as 120s")
	}
	if c.RedisMode.value() == tick.ModeSentinel {
		if c.RedisSentinelMaster == "" {
			bad("REDIS_SENTINEL_MASTER", "the master name the sentinels monitor, such as mymaster, with GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisSentinelAddrs) == 0 {
			bad("REDIS_SENTINEL_ADDRS", "sentinel host:port entries such as sentinel-1:26379,sentinel-2:26379 with GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisURLs) > 1 {
			bad("REDIS_URLS", "one URL with GATE_REDIS_MODE=sentinel (its password, database and TLS apply to the primary; its host is only the name TLS certificates are checked against)")
		}
	} else {
		// Set without sentinel mode, they would be ignored: most likely GATE_REDIS_MODE
		// was forgotten.
		if c.RedisSentinelMaster != "" {
			bad("REDIS_SENTINEL_MASTER", "unset unless GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisSentinelAddrs) > 0 {
			bad("REDIS_SENTINEL_ADDRS", "unset unless GATE_REDIS_MODE=sentinel")
		}
		if c.RedisSentinelUsername != "" {
			bad("REDIS_SENTINEL_USERNAME", "unset unless GATE_REDIS_MODE=sentinel")
		}
		if c.RedisSentinelPassword != "" {
			bad("REDIS_SENTINEL_PASSWORD", "unset unless GATE_REDIS_MODE=sentinel")
		}
	}
	if c.RedisMode.value() == tick.ModeCluster {
		for _, u := range c.RedisURLs {
			if opt, err := tick.ParseURL(u); err == nil && opt.DB != 0 {
				bad("REDIS_URLS", "URLs of database 0 with GATE_REDIS_MODE=cluster: Redis Cluster has no other")
				break
			}
		}
		// The cluster client takes TLS from the first URL for every node: a rediss:// URL
		// after a redis:// one would be dialed in plain text, its password too.
		if !sameScheme(c.RedisURLs) {
			bad("REDIS_URLS", "URLs all redis:// or all rediss:// with GATE_REDIS_MODE=cluster: the first URL's TLS applies to every node")
		}
	}
	if tick.CheckKeyPrefix(c.RedisMode.value(), c.RedisPrefix) != nil {
		bad("REDIS_PREFIX", "a prefix without braces with GATE_REDIS_MODE=cluster: a brace would change the keys' hash tag")
	}
	bad.positive("REDIS_READ_TIMEOUT", c.RedisReadTimeout)
	bad.positive("REDIS_WRITE_TIMEOUT", c.RedisWriteTimeout)
	bad.positive("REDIS_DIAL_TIMEOUT", c.RedisDialTimeout)
	bad.atLeast("KEYS_PER_COMMAND", c.KeysPerCommand, 2)
	bad.atLeast("KEYS_PER_TICK", c.KeysPerTick, 2)
	bad.atLeast("MAX_PENDING_WRITES", c.MaxPendingWrites, 1)
	bad.atLeast("MAX_READS_PER_TICK", c.MaxReadsPerTick, 1)
	if (c.RedisTLSCertFile == "") != (c.RedisTLSKeyFile == "") {
		bad("REDIS_TLS_CERT_FILE", "a client certificate file together with GATE_REDIS_TLS_KEY_FILE, or neither")
	}
	if c.RedisUsername != "" && c.RedisPassword == "" {
		bad("REDIS_USERNAME", "unset, or a user name with GATE_REDIS_PASSWORD set")
	}
	// The client uses a URL's user name only with a password: without one it logs in as
	// the default user, and the name may be a password whose ':' was forgotten, which
	// the logs would show as a user name.
	if c.RedisPassword == "" && slices.ContainsFunc(c.RedisURLs, userWithoutPassword) {
		bad("REDIS_URLS", "URLs whose user name comes with its password (redis://user:password@host:port, or redis://:password@host:port for the default user), "+
			"or GATE_REDIS_PASSWORD set: without a password the user name is not used and the default user is logged in")
	}
	if c.RedisSentinelUsername != "" && c.RedisSentinelPassword == "" {
		bad("REDIS_SENTINEL_USERNAME", "unset, or a user name with GATE_REDIS_SENTINEL_PASSWORD set")
	}
}

// userWithoutPassword reports a URL with a user name and no password, or an empty one.
func userWithoutPassword(u string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil || pu.User.Username() == "" {
		return false
	}
	p, _ := pu.User.Password()
	return p == ""
}
