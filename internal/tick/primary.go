// Watching the primary in sentinel mode. PrimaryWatch logs and counts each switch of the
// primary the gate writes to, when the client opens its first connection to the new one.
// It only reports: the counts a switch loses are found by the tick, and sent again if
// still in the batches it keeps (settle.go). It runs no goroutine and sends no command;
// while no sentinel answers, it has the client connect to the primary they last named.

package tick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/throttle"
)

// PrimaryWatch reports every switch of the primary that a sentinel-mode client (from
// DialSentinel) writes to, with a warn log line and gate_redis_primary_switches_total.
//
// A switch can lose counts without any error: the old primary acknowledges writes until
// the client learns of the promotion, and those it had not replicated to the promoted
// replica are gone when it is demoted (docs/design.md, "Redis failover and lost counts").
// The tick finds such a loss with the next write to the new primary and sends the lost
// counts again (writeScript's reply); this says when and where the switch happened.
//
// It works by a dial hook on the client, which sees the address of every connection the
// client opens. go-redis's failover client asks the sentinels for the primary on each new
// connection, and closes its connections to the old primary as soon as a sentinel
// announces +switch-master (or the old primary answers READONLY, or a connection breaks);
// so its first connection after a switch goes to the new primary, and that is when the
// watch reports it: when this gate's counts start going there.
//
// Guarantees:
//
//   - Each change of the address the client's new connections go to is logged once (old
//     and new address, the master name) and counted once, when the first connection to the
//     new address is opened, whether or not any command failed. The client's first
//     connection is not a switch: it is logged at info.
//   - It runs no goroutine and sends no command: there is nothing to start or stop, and
//     it lasts as long as the client. It opens a connection only when no sentinel answers
//     the client's dialer, to the primary they last named (fallback).
//   - It reports; it neither prevents nor measures the loss.
//   - A switch and back between two dials (A → B → A with no connection ever opened to B)
//     is not seen; Sentinel's failover-timeout (3 min by default) between two failovers of
//     one master makes it unlikely, and no count went to B.
type PrimaryWatch struct {
	master   string
	log      *slog.Logger
	clk      clock.Clock
	switches prometheus.Counter

	// dial opens a connection as the client's dialer does, to an address given
	// (fallback); fallbackLog paces fallback's line.
	dial        func(context.Context, string, string) (net.Conn, error)
	dialTimeout time.Duration
	fallbackLog *throttle.Every

	mu      sync.Mutex
	primary string    // address of the last connection opened; "" before the first
	since   time.Time // when the client first connected to primary
}

// WatchPrimary adds a PrimaryWatch to c, a client from DialSentinel for master (the name is
// only logged), and registers its counter on reg (which may be nil). Add it before the
// client is used, or a switch before its first connection is not seen. log nil discards;
// clk nil is the wall clock.
func WatchPrimary(c *redis.Client, master string, reg prometheus.Registerer, log *slog.Logger, clk clock.Clock) (*PrimaryWatch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	w := &PrimaryWatch{
		master: master,
		log:    log,
		clk:    clk,
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "gate_redis_primary_switches_total",
			Help: "Sentinel mode: switches of the Redis primary the gate writes to, seen when its first connection to the new primary opens. " +
				"Counts the old primary acknowledged after its last replication to the new one are lost (docs/design.md, \"Redis failover and lost counts\")."}),
	}
	if reg != nil {
		if err := reg.Register(w.switches); err != nil {
			return nil, fmt.Errorf("registering the primary watch's metric: %w", err)
		}
	}
	o := c.Options()
	w.dial = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
	w.dialTimeout = cmp.Or(o.DialTimeout, 5*time.Second)
	w.fallbackLog = throttle.NewEvery(time.Minute, clk)
	c.AddHook(primaryHook{w})
	return w, nil
}

// sentinelsUnreachable reports whether err is go-redis's failover dialer finding no
// sentinel to ask for the primary: none answered, none refused (a refusal, a password or
// an ACL, is the operator's to fix, and readiness names it).
func sentinelsUnreachable(err error) bool {
	var re redis.Error
	return err != nil && strings.Contains(err.Error(), "all sentinels specified in configuration are unreachable") && !errors.As(err, &re)
}

// fallback dials the primary the sentinels last named, for a connection the failover
// dialer could not open because no sentinel answered (sentinelsUnreachable): the
// sentinels are asked on each new connection, and without this one lost while they were
// down was never opened again, the primary however healthy. A failover meanwhile goes
// unseen until a sentinel answers again: the old primary, demoted, answers READONLY,
// which the tick counts as writes refused. It logs at most once a minute.
func (w *PrimaryWatch) fallback(ctx context.Context, network string, cause error) (net.Conn, error) {
	last := w.Primary()
	if last == "" || w.dial == nil {
		return nil, cause
	}
	// A budget of its own: the failover dialer spent the attempt's asking sentinels that
	// hang (an address that takes connections and never answers).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.dialTimeout)
	defer cancel()
	cn, err := w.dial(dctx, network, last)
	if err != nil {
		return nil, cause
	}
	if ok, quiet := w.fallbackLog.Allow(); ok {
		w.log.Warn("redis: no sentinel answers; connecting to the last primary they named until one does (a failover meanwhile is not seen)",
			"master", w.master, "primary", last, "connections_unlogged", quiet, "err", cause)
	}
	return cn, nil
}

// Primary returns the address the client's last new connection went to: the primary as
// the client knows it. Empty before the first connection.
func (w *PrimaryWatch) Primary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.primary
}

// connected records a new connection to addr.
func (w *PrimaryWatch) connected(addr string) {
	now := w.clk.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if addr == w.primary {
		return
	}
	old, since := w.primary, w.since
	w.primary, w.since = addr, now
	if old == "" {
		w.log.Info("redis primary", "master", w.master, "primary", addr)
		return
	}
	w.switches.Inc()
	w.log.Warn("redis primary switched: writes the old primary took after its last replication to the new one are lost there; the tick finds and resends them (batches kept 10 s)",
		"master", w.master, "old_primary", old, "new_primary", addr,
		"old_primary_for", now.Sub(since).Round(time.Millisecond).String())
}

// primaryHook hands the PrimaryWatch the address of every connection the client opens.
type primaryHook struct{ w *PrimaryWatch }

func (h primaryHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr) // addr is go-redis's placeholder; the dialer asks the sentinels
		// A dial that timed out may have spent its time on a sentinel that hangs (go-redis
		// then returns the deadline alone): the primary is tried too. Not when the dial
		// that failed was to the primary a sentinel named: they answered.
		var named *primaryDialError
		if sentinelsUnreachable(err) || errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &named) {
			cn, err = h.w.fallback(ctx, network, err)
		}
		if err == nil && cn != nil {
			if ra := cn.RemoteAddr(); ra != nil {
				h.w.connected(ra.String())
			}
		}
		return cn, err
	}
}

func (primaryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (primaryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
