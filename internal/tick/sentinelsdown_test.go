package tick

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/throttle"
)

// TestSentinelsDownKeepTheLastPrimary: with every sentinel unreachable (their pods
// rescheduled, say) and the primary healthy, the connections open went on, but one lost
// then (a timeout, Redis's own timeout closing it) was never opened again: go-redis asks
// the sentinels for the primary on each new connection, and every tick failed with
// "all sentinels specified in configuration are unreachable", the gate's counts shared
// with no other gate, until a sentinel came back. The gate connects to the last primary
// they named meanwhile, and says so.
func TestSentinelsDownKeepTheLastPrimary(t *testing.T) {
	t.Parallel()
	t.Run("stopped", func(t *testing.T) { testSentinelsDown(t, false) })
	// A sentinel's address that takes connections and never answers: the failover
	// dialer spends the attempt's time on it, and the fallback dials with its own.
	t.Run("hanging", func(t *testing.T) { testSentinelsDown(t, true) })
}

func testSentinelsDown(t *testing.T, hang bool) {
	t.Parallel()
	set := redistest.StartSentinel(t, 1, 1)
	o := testRedisOptions()
	if hang {
		o = RedisOptions{ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, DialTimeout: time.Second} // the defaults
	}
	fc, err := DialSentinel(set.Master, set.SentinelAddrs(), "redis://127.0.0.1:6379/0", o)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	if _, err := WatchPrimary(fc, set.Master, nil, slog.New(slog.NewTextHandler(logs, nil)), nil); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}, Config{Mode: ModeSentinel}, fc)
	ctx := context.Background()
	g.l.Check("team", 5)
	if r := g.tk.Tick(ctx); r.Errors != 0 {
		t.Fatalf("tick with the sentinel up: %+v", r)
	}
	set.Sentinels[0].Stop(t)
	if hang {
		ln, err := net.Listen("tcp", set.Sentinels[0].Addr())
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
				t.Cleanup(func() { _ = c.Close() }) // accepted, never answered
			}
		}()
	}
	// The primary drops the gate's connections, as its `timeout` or a network blip does.
	if err := set.Primary.Client(t).ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		g.l.Check("team", 1)
		clk.Advance(time.Second)
		// Hanging, the first tick's time goes to the sentinel (its failed counts are
		// carried to the next): the ticks after it write.
		if r := g.tk.Tick(ctx); (r.Errors != 0 || r.Writes == 0) && !(hang && i == 0) {
			t.Fatalf("tick %d with no sentinel answering, the primary up: %+v", i, r)
		}
	}
	if got, err := set.Primary.Client(t).Get(ctx, Key(DefaultKeyPrefix, "team", g.l.Epoch(clk.Now()))).Int64(); err != nil || got != 8 {
		t.Errorf("the primary holds %d (%v) of the team's 8 counts", got, err)
	}
	if len(logs.lines("level=WARN", "no sentinel answers")) != 1 {
		t.Errorf("want one warning that no sentinel answers; log:\n%s", logs.buf.String())
	}
}

// TestNamedPrimaryUnreachableIsNoFallback: the fallback is for sentinels that do not
// answer. When they answered and the dial to the primary they named timed out (a failover
// to a primary this gate cannot reach), it dialed the last primary instead and wrote
// there: a review saw counts land on a server no sentinel named, logged as "no sentinel
// answers". A sentinel's own dial timing out still falls back.
func TestNamedPrimaryUnreachableIsNoFallback(t *testing.T) {
	last, err := net.Listen("tcp", "127.0.0.1:0") // the last primary, still taking connections
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = last.Close() })
	go func() {
		for {
			c, err := last.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	const sentinelAddr, namedAddr = "127.0.0.1:26379", "10.0.0.9:6379"
	// A dial that timed out, as net's dialer says so: its deadline already past here.
	timedOut := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithDeadline(ctx, time.Now())
		defer cancel()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	dial := sentinelDialer([]string{sentinelAddr}, timedOut)
	logs := &logBuffer{}
	w := &PrimaryWatch{master: "m", log: slog.New(slog.NewTextHandler(logs, nil)), clk: clock.Real{},
		switches:    prometheus.NewCounter(prometheus.CounterOpts{Name: "switches"}),
		dial:        redis.NewDialer(&redis.Options{DialTimeout: time.Second}),
		dialTimeout: time.Second, fallbackLog: throttle.NewEvery(time.Minute, clock.Real{})}
	w.connected(last.Addr().String())
	for _, c := range []struct {
		name     string
		addr     string // the address the failover dialer dialed
		fallback bool
	}{{"the named primary's dial timed out", namedAddr, false}, {"a sentinel's dial timed out", sentinelAddr, true}} {
		hooked := primaryHook{w}.DialHook(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dial(ctx, network, c.addr)
		})
		cn, err := hooked(context.Background(), "tcp", "FailoverClient")
		if cn != nil {
			_ = cn.Close()
		}
		if got := err == nil; got != c.fallback {
			t.Errorf("%s: connected to the last primary %v (err %v), want %v", c.name, got, err, c.fallback)
		}
		if !c.fallback && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err %v, want the dial's timeout", c.name, err)
		}
	}
}
