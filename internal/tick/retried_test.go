package tick

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// replyTimeout is what a socket read returns when its deadline passes.
type replyTimeout struct{}

func (replyTimeout) Error() string   { return "read: i/o timeout (reply dropped by the test)" }
func (replyTimeout) Timeout() bool   { return true }
func (replyTimeout) Temporary() bool { return true }

// dropReplyConn loses one reply: once armed, the first read after a write carrying marker
// waits for the server's answer (so the commands ran), drops it and fails as a read
// timeout does; onDrop runs first. A reply lost to a stall or a broken link, on the wire.
type dropReplyConn struct {
	net.Conn
	marker []byte
	armed  *atomic.Bool
	onDrop func()
	mu     sync.Mutex
	drop   bool
}

func (c *dropReplyConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.marker) && c.armed.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.drop = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *dropReplyConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	drop := c.drop && n > 0
	c.drop = false
	c.mu.Unlock()
	if drop {
		c.onDrop()
		return 0, replyTimeout{}
	}
	return n, err
}

type dialWrapHook struct{ wrap func(net.Conn) net.Conn }

func (h dialWrapHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return h.wrap(cn), nil
	}
}
func (dialWrapHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dialWrapHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Cluster mode: go-redis resends a node's whole pipeline within one Exec after a read
// timeout or a retriable error reply (TRYAGAIN, CLUSTERDOWN, LOADING, READONLY,
// MASTERDOWN), up to MaxRedirects, whatever MaxRetries says. A batch that ran, whose reply
// was lost, and that a later attempt found refused (here TRYAGAIN: a rebalance started
// moving its slot meanwhile) may have been applied: it is resent as it is, its number
// kept, and the script finds it applied. Before, it was settled as refused, its counts
// put in a new batch, and Redis held them twice (20 for 10).
func TestClusterRetriedBatchCountsOnce(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const team = "mover"
	clk := clock.NewFake(epochStart.Add(30 * time.Second))
	lc := limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}
	ep := int64(0)
	key := ""
	seqKey := laneKey(ModeCluster, DefaultKeyPrefix, "w1", ClusterShard(team))

	var armed atomic.Bool
	var onDrop func()
	cc.OnNewNode(func(nc *redis.Client) {
		nc.AddHook(dialWrapHook{func(cn net.Conn) net.Conn {
			return &dropReplyConn{Conn: cn, marker: []byte(seqKey), armed: &armed, onDrop: func() { onDrop() }}
		}})
	})
	// TickInterval 10 s: the tick's deadline (7.5 s) outlasts the client's attempts.
	g := newTopologyGate(t, clk, lc, Config{Mode: ModeCluster, Writer: "w1", TickInterval: 10 * time.Second}, cc)
	ep = g.l.Epoch(clk.Now())
	key = ClusterKey(DefaultKeyPrefix, team, ep)

	mv := newSlotMove(t, cl, key)
	var seqAtDrop, keyAtDrop string
	onDrop = func() {
		// The batch ran: its number and count are in Redis. A rebalance now starts moving
		// the slot, the counter first.
		seqAtDrop, _ = mv.fc.Get(ctx, seqKey).Result()
		keyAtDrop, _ = mv.fc.Get(ctx, key).Result()
		mv.start(key)
	}

	g.l.Check(team, 10)
	armed.Store(true)
	r := g.tk.Tick(ctx)
	t.Logf("tick whose reply was lost: %+v; in Redis when the reply was dropped: seq=%q counter=%q", r, seqAtDrop, keyAtDrop)
	if armed.Load() {
		t.Fatal("the fault never fired")
	}

	mv.finish() // the rebalance ends: the slot is the new owner's
	for i := 0; ; i++ {
		clk.Advance(time.Second)
		r = g.tk.Tick(ctx)
		if r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		if i == 10 {
			t.Fatalf("writes never settled: %+v", r)
		}
	}
	if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, team, ep); got != 10 {
		t.Errorf("Redis holds %d for %s, want the 10 counted, once", got, team)
	}
}
