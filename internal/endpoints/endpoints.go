// Package endpoints serves a gate's HTTP endpoints: GET /metrics, /healthz, /readyz and,
// with GATE_TEAM_API, the team view GET /v1/teams/{team} and GET /v1/teams?top=N. gate
// serve (cmd/gate) serves one gate's on GATE_HTTP_ADDR; the demo, cmd/gate-dev, each of
// its two gates' on a port of its own, so that what an operator tries on the demo is
// what a gate serves.
//
// Guarantees:
//
//   - /healthz answers 200 while the process runs and its consumer is not stuck for good
//     (GATE_STALL_RESTART); Redis state is no part of it.
//   - /readyz answers 503 until the consumer has joined its group, the gate has read its
//     live overrides once (or given up waiting: overrides.StartWait) and every Redis
//     instance has answered a PING once (the Redis part latches: readiness does not flap
//     on a Redis blip, through which the gate fails open), and while a condition an
//     operator must fix holds, each named in the body.
//   - The team view reads the limiters only: nothing it does counts a record or changes
//     a decision.
package endpoints

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/tick"
	"github.com/capturegate/gate/internal/tlsreload"
)

const (
	// Readiness PINGs back off from probeMinDelay to probeMaxDelay between attempts.
	probeMinDelay = 50 * time.Millisecond
	probeMaxDelay = time.Second
)

// ForGate returns g's endpoints, as configured by cfg, and its readiness, which the
// caller runs (Readiness.Run) for /readyz to become ready.
func ForGate(cfg config.Config, g *gate.Gate, log *slog.Logger) (*http.ServeMux, *Readiness) {
	ready := newReadiness(g.Clients, cfg, g.Consumer.NotReady, log)
	ready.live = g.Consumer.Live
	ready.overrides = g.OverridesNotReady
	return NewMux(g.Reg, ready, TeamsFor(cfg, g)), ready
}

// NewServer is the HTTP server of a gate's endpoints, with its timeouts; its errors go
// to log at warn. ReadTimeout bounds a request's body as ReadHeaderTimeout its headers:
// the endpoints read none, and the server discards one (unbounded without a deadline)
// before it answers, so a client announcing a body it never sends would hold its
// connection and goroutine forever. WriteTimeout bounds the answer likewise: a client
// that reads none of an answer larger than the sockets' buffers (a large /metrics, a
// ?top=1000) would hold the handler's goroutine, blocked in its write, forever.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// TeamsFor returns g's team view, or nil when GATE_TEAM_API turns it off.
func TeamsFor(cfg config.Config, g *gate.Gate) *TeamAPI {
	if !cfg.TeamAPI {
		return nil
	}
	rules := FixedRules(g.Lim, g.Extra...)
	rules()[0].Force = cfg.ForceOverflow // FixedRules answers one slice: a forced team is said limited, and why
	rules()[0].Key = cfg.KeyFrom.KeyFrom
	rules()[0].Cost = cfg.Cost.Cost
	if g.CurrentRules() != nil {
		rules = g.CurrentRules
	}
	return NewTeamAPI(GateJSON{RedisPrefix: cfg.RedisPrefix, ConsumerGroup: cfg.GroupID}, rules)
}

// NewMux serves the operational endpoints: /metrics from reg, /healthz and /readyz from
// ready, and the team view when teams is not nil. Without ready (nil), /healthz answers
// live and /readyz not ready, saying it has nothing to judge by: it panicked (a review).
func NewMux(reg *prometheus.Registry, ready *Readiness, teams *TeamAPI) *http.ServeMux {
	mux := http.NewServeMux()
	if teams != nil {
		if ready != nil {
			teams.notReady = ready.reasons
		}
		teams.register(mux)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Liveness: the process answers, and the consumer has not been stuck with work to
	// do for GATE_STALL_RESTART (a restart is the cure for that). Redis state is
	// deliberately not part of it: a restart cures no Redis outage, and the gate fails
	// open through one.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && ready.live != nil {
			if err := ready.live(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "not live: "+err.Error()+"\n")
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := ready.reasons(); len(why) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+strings.Join(why, "; ")+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// Readiness records whether every Redis instance has answered a PING since start. It
// latches: once ready, always ready. Readiness that followed Redis would take every gate
// of a fleet out of service at the same moment on a Redis blip, when the gate is built to
// keep routing (fail-open) through one.
type Readiness struct {
	kafka     func() []string // why the consumer is not ready: not joined yet, or what an operator must fix
	live      func() error    // nil while the consumer is not stuck for good (see /healthz)
	overrides func() []string // the live overrides hashes the gate waits to read before it routes
	clients   []redis.UniversalClient
	// rights asks an instance that answered PING whether the gate may run the tick's
	// commands (tick.ProbeRights): nil when it may, or when it cannot tell.
	rights  func(context.Context, redis.UniversalClient) error
	urls    []string // redacted, for logs and the 503 body
	timeout time.Duration
	log     *slog.Logger

	mu sync.Mutex
	up []bool
	// refused holds, per instance, the error of its last PING when Redis answered it with
	// one (a wrong password, an ACL without +ping) or the TLS handshake failed on a
	// certificate: /readyz says so rather than "no reply", which would send an operator
	// to the network. Nil until a PING fails.
	refused []refusal
	ok      atomic.Bool // every instance has answered; the fast path of /readyz
	// stopping: the gate is shutting down (ShuttingDown), and routes nothing more.
	stopping atomic.Bool
}

// shutdownReasons is /readyz's reason once the gate is shutting down, or nil.
func (r *Readiness) shutdownReasons() []string {
	if !r.stopping.Load() {
		return nil
	}
	return []string{"shutting down: draining in-flight records, then leaving the consumer group"}
}

// ShuttingDown makes /readyz answer 503 "shutting down" from now on: the gate consumes
// nothing more while it drains its in-flight records, commits and leaves its group. It
// answered ready through the drain (up to GATE_SHUTDOWN_TIMEOUT), then "not joined to
// consumer group yet" (a review).
func (r *Readiness) ShuttingDown() {
	if r != nil {
		r.stopping.Store(true)
	}
}

// reasons is why the gate is not ready, as /readyz names them: none when it is.
func (r *Readiness) reasons() []string {
	if r == nil {
		return []string{"no readiness checks (a server built without them)"}
	}
	if why := r.shutdownReasons(); why != nil {
		return why // the one reason: the others (not joined to the group "yet") would mislead
	}
	var why []string
	why = append(why, r.kafka()...)
	if r.overrides != nil {
		why = append(why, r.overrides()...)
	}
	return append(why, r.waiting()...)
}

// newReadiness is the readiness of a gate whose consumer says why it is not ready
// (kafka), over its Redis clients.
func newReadiness(clients []redis.UniversalClient, cfg config.Config, kafka func() []string, log *slog.Logger) *Readiness {
	r := &Readiness{
		kafka:   kafka,
		clients: clients,
		timeout: cfg.RedisDialTimeout + cfg.RedisWriteTimeout + cfg.RedisReadTimeout,
		log:     log.With("component", "readiness"),
		up:      make([]bool, len(clients)),
		rights: func(ctx context.Context, c redis.UniversalClient) error {
			// The counters of GATE_COST=bytes are under {prefix}/bytes: an ACL of
			// ~{prefix}:* alone refuses them.
			return tick.ProbeRights(ctx, c, slices.Compact([]string{cfg.RedisPrefix, cfg.PrimaryKeyPrefix()})...)
		},
	}
	r.urls = cfg.RedisLabels()
	return r
}

// waiting returns /readyz's reasons for the instances that have not answered yet: those
// that gave no reply, then each that refused its PING, with Redis's error.
func (r *Readiness) waiting() []string {
	if r.ok.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var silent, why []string
	for i, up := range r.up {
		switch {
		case up:
		case i < len(r.refused) && r.refused[i].tls:
			why = append(why, "redis "+r.urls[i]+" fails the TLS handshake: "+r.refused[i].msg)
		case i < len(r.refused) && r.refused[i].rights:
			why = append(why, "redis "+r.urls[i]+" refuses the tick's commands: "+r.refused[i].msg)
		case i < len(r.refused) && r.refused[i].msg != "":
			why = append(why, "redis "+r.urls[i]+" refuses PING: "+r.refused[i].msg)
		default:
			silent = append(silent, r.urls[i])
		}
	}
	if len(silent) > 0 {
		why = append([]string{"no PING reply yet from redis " + strings.Join(silent, ", ")}, why...)
	}
	return why
}

// refusal is why an instance's last PING failed, when an operator must fix it: Redis's
// error, or (tls) the TLS handshake's.
type refusal struct {
	msg    string
	tls    bool
	cert   bool // tls: on a certificate (tlsreload.Refused), not a TLS version
	rights bool // PING answered, a command of the tick's refused (tick.ProbeRights)
}

// setRefused records err, the last PING's failure of instance i, when Redis itself gave
// it (a reply, not a timeout or a closed connection), it is errWantsTLS or errNoTLS, or the TLS
// handshake failed (tlsreload.Failed: on a certificate, or a TLS version the two do not
// share), and forgets a refusal
// otherwise. It returns the refusal recorded (a zero msg for none).
func (r *Readiness) setRefused(i int, err error, rights bool) refusal {
	var ref refusal
	if redisErr, ok := errors.AsType[redis.Error](err); ok {
		ref.msg, ref.rights = redisErr.Error(), rights
		if rights {
			ref.msg = err.Error() // which of the tick's commands, then Redis's error
		}
	} else if errors.Is(err, errWantsTLS) || errors.Is(err, errNoTLS) {
		ref.msg = err.Error()
	} else if tlsreload.Failed(err) {
		ref = refusal{msg: err.Error(), tls: true, cert: tlsreload.Refused(err)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		r.refused = make([]refusal, len(r.up))
	}
	r.refused[i] = ref
	return ref
}

// causeOf is what tells one refusal from another for the probe's warning: its text, but a
// TLS refusal's without its digits, as crypto/x509 writes the time of the check into an
// expired certificate's error ("current time … is after …"), and every attempt, a second
// apart, read as a new cause, warned of (a review).
func causeOf(ref refusal) string {
	if !ref.tls {
		return ref.msg
	}
	return "tls: " + strings.Map(func(c rune) rune {
		if c >= '0' && c <= '9' {
			return -1
		}
		return c
	}, ref.msg)
}

// Run PINGs every instance, in parallel, until each has answered once or ctx ends.
func (r *Readiness) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.clients {
		wg.Go(func() { r.probe(ctx, i) })
	}
	wg.Wait()
}

func (r *Readiness) probe(ctx context.Context, i int) {
	delay := probeMinDelay
	timer := time.NewTimer(0)
	defer timer.Stop()
	warned := "" // the refusal last warned of ("\x00" for no reply): a new one is warned of too
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		pctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := r.clients[i].Ping(pctx).Err()
		cancel()
		rights := false
		if err == nil && r.rights != nil {
			pctx, cancel := context.WithTimeout(ctx, r.timeout)
			err, rights = r.rights(pctx, r.clients[i]), true
			cancel()
		}
		if err == nil {
			r.markUp(i, attempt)
			r.checkEviction(ctx, i)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, io.EOF) && plainText(r.clients[i]) {
			err = fmt.Errorf("%w (%w)", errWantsTLS, err)
		} else if errors.Is(err, context.DeadlineExceeded) && !plainText(r.clients[i]) && answersPlain(ctx, r.clients[i]) {
			err = fmt.Errorf("%w (%w)", errNoTLS, err)
		}
		ref := r.setRefused(i, err, rights)
		cause := causeOf(ref)
		if cause == "" {
			cause = "\x00"
		}
		// Warn once a cause, then keep quiet: the tick's error metrics and logs tell the
		// rest. A gate started before its Redis warns that it gets no reply; the refusal
		// that may follow (a wrong password, an ACL without +ping) is what /readyz names
		// and the operator must fix, and is warned of too.
		lvl := slog.LevelDebug
		if cause != warned {
			lvl, warned = slog.LevelWarn, cause
		}
		msg := "redis not reachable yet; /readyz answers 503 until it is"
		if rights {
			// It takes the PING, and refuses what the tick sends: every tick would be
			// refused, the gate's counts shared with no other gate.
			msg = "redis answers but refuses the tick's commands (its user's ACL, or a command renamed or disabled on the server: docs/operations.md, What the gate needs from Redis); /readyz answers 503 until it takes them"
		} else if ref.cert {
			// The handshake fails on a certificate, the server's or the gate's: files to fix.
			msg = "the TLS handshake with redis fails on a certificate (the server's, or the gate's GATE_REDIS_TLS_* files); /readyz answers 503 until it succeeds"
		} else if ref.tls {
			msg = "the TLS handshake with redis fails (the server refuses it: a TLS version or cipher the two do not share); /readyz answers 503 until it succeeds"
		} else if cause != "\x00" {
			// It answers, refusing (a password, an ACL, a scheme): not a Redis to wait for.
			msg = "redis answers but refuses the gate's PING; /readyz answers 503 until it takes it"
		}
		r.log.Log(ctx, lvl, msg, "instance", i, "url", r.urls[i], "attempt", attempt, "err", err)
		timer.Reset(delay)
		delay = min(2*delay, probeMaxDelay)
	}
}

// errWantsTLS is a plain connection closed before Redis's first reply: what a Redis that
// requires TLS does, and the client reports as a bare EOF, which reads as Redis down.
var errWantsTLS = errors.New("the connection was closed without a reply: a Redis that requires TLS closes a plain one (if so, write its URL rediss:// in GATE_REDIS_URLS), as does a proxy with no Redis behind it")

// errNoTLS is a TLS connection that got no reply where a plain one is answered: a Redis
// without TLS takes the handshake's first bytes for a command that has not ended, and
// waits, so the PING times out as for a Redis that is down.
var errNoTLS = errors.New("no reply over TLS, but a plain-text PING is answered there: the Redis does not use TLS (if so, write its URL redis://, not rediss://, in GATE_REDIS_URLS)")

// answersPlain reports whether the address c (a TLS client) connects to answers a
// plain-text PING with a Redis reply, within a second: asked only once a PING over TLS
// has timed out. A sentinel client's is not known here, and is not asked.
func answersPlain(ctx context.Context, c redis.UniversalClient) bool {
	var addr string
	switch c := c.(type) {
	case *redis.Client:
		addr = c.Options().Addr
	case *redis.ClusterClient:
		if a := c.Options().Addrs; len(a) > 0 {
			addr = a[0]
		}
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false // a failover (sentinel) client's Addr is no address
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 16)
	n, _ := io.ReadAtLeast(conn, buf, 1)
	// +PONG, or an error reply (-NOAUTH: a password is wanted first): Redis, in plain text.
	return n > 0 && (buf[0] == '+' || buf[0] == '-')
}

// plainText reports whether c connects without TLS (redis:// URLs).
func plainText(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().TLSConfig == nil
	case *redis.ClusterClient:
		return c.Options().TLSConfig == nil
	}
	return false
}

func (r *Readiness) markUp(i, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.up[i] = true
	r.log.Info("redis reachable", "instance", i, "url", r.urls[i], "attempts", attempt)
	for _, up := range r.up {
		if !up {
			return
		}
	}
	r.ok.Store(true)
	r.log.Info("redis ready: every instance has answered (/readyz waits for Kafka too)")
}

// checkEviction warns once, when instance i first answers, if it may evict the gate's
// keys: a maxmemory with a maxmemory-policy other than noeviction. Every key the gate
// writes expires, so the volatile-* policies evict them as the allkeys-* ones do, and
// Redis evicts silently: an evicted counter forgets what the fleet counted of a window
// (its team admitted past its limit), an evicted lane sequence key lets a resent batch
// count twice. Under noeviction a full Redis refuses writes instead, which the tick counts
// (oom) and the gate fails open through, keeping its counts to write later. Advice only:
// an instance that does not answer INFO (an ACL without +info) is not checked, which is
// said at info level.
func (r *Readiness) checkEviction(ctx context.Context, i int) {
	check := func(ctx context.Context, c redis.UniversalClient, node string) error {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		info, err := c.Info(cctx, "memory").Result()
		if err != nil {
			// Said at info level: a debug line left an operator who looked for the
			// warning to read its absence as a policy that does not evict.
			if _, refused := errors.AsType[redis.Error](err); refused {
				r.log.Info("redis: INFO memory refused; its maxmemory-policy is not checked (grant the gate's Redis user +info to have it checked)",
					"instance", i, "url", r.urls[i], "node", node, "err", err)
			} else {
				r.log.Info("redis: INFO memory not answered; its maxmemory-policy is not checked", "instance", i, "url", r.urls[i], "node", node, "err", err)
			}
			return nil
		}
		if policy, maxmemory := evictionOf(info); maxmemory != "" && maxmemory != "0" && policy != "" && policy != "noeviction" {
			r.log.Warn("redis may evict the gate's keys: maxmemory is set with an evicting maxmemory-policy, and an evicted counter lets its team past its limit, an evicted write sequence lets a resent batch count twice; set maxmemory-policy noeviction (a full Redis then refuses writes, which the gate waits out)",
				"instance", i, "url", r.urls[i], "node", node, "maxmemory_policy", policy, "maxmemory", maxmemory)
		}
		return nil
	}
	if cc, ok := r.clients[i].(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return check(ctx, n, n.Options().Addr) })
		return
	}
	_ = check(ctx, r.clients[i], "")
}

// evictionOf reads maxmemory_policy and maxmemory from an INFO memory reply ("" when
// absent).
func evictionOf(info string) (policy, maxmemory string) {
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			policy = v
		} else if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
			maxmemory = v
		}
	}
	return policy, maxmemory
}
