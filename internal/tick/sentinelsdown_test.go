package tick

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
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
