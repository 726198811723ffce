package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// pipelineCounter counts the pipelines a client sends, other than connection handshakes.
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := cmds[0].Name(); n != "hello" && n != "client" { // not a connection's handshake
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

type multiGate struct {
	min, hour *limit.Limiter
	tk        *Ticker
	pipes     *pipelineCounter
}

// newMultiGate returns a per-minute and a per-hour limiter synced by one ticker.
func newMultiGate(t *testing.T, clk clock.Clock, minThr, hourThr int64, srv *redistest.Server) *multiGate {
	t.Helper()
	reg := prometheus.NewRegistry()
	lm, err := limit.New(limit.Config{Window: time.Minute, Threshold: minThr}, clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1m0s"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	lh, err := limit.New(limit.Config{Window: time.Hour, Threshold: hourThr}, clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1h0m0s"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	pc := &pipelineCounter{}
	clients[0].AddHook(pc)
	tk, err := NewMulti([]Limit{{Lim: lm}, {Lim: lh, KeyPrefix: "t:w3600"}}, []redis.UniversalClient{clients[0]}, Config{KeyPrefix: "t"}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &multiGate{min: lm, hour: lh, tk: tk, pipes: pc}
}

func TestMultiCountsLandInEachLimitsKeysWithTTL(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(59 * time.Second))
	g := newMultiGate(t, clk, 1000, 100000, srv)
	em, eh := g.min.Epoch(clk.Now()), g.hour.Epoch(clk.Now())

	for range 7 {
		g.min.Check("team-a", 1)
		g.hour.Check("team-a", 1)
	}
	g.hour.Check("team-b", 3)
	r := g.tk.Tick(context.Background())
	if r.Errors != 0 || r.Writes != 3 {
		t.Fatalf("tick = %+v, want 3 writes and no error", r)
	}
	if n := g.pipes.n.Load(); n != 1 {
		t.Errorf("pipelines = %d, want 1 for both limits", n)
	}
	for key, want := range map[string]int64{
		Key("t", "team-a", em): 7, Key("t:w3600", "team-a", eh): 7,
		Key("t", "team-b", em): 0, Key("t:w3600", "team-b", eh): 3,
	} {
		if got := getInt(t, rc, key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
	if ttl := rc.TTL(context.Background(), Key("t", "team-a", em)).Val(); ttl <= 2*time.Minute || ttl > 2*time.Minute+KeyTTLMargin {
		t.Errorf("minute key TTL = %s, want within (2m, 2m + margin]", ttl)
	}
	if ttl := rc.TTL(context.Background(), Key("t:w3600", "team-a", eh)).Val(); ttl <= 2*time.Hour || ttl > 2*time.Hour+KeyTTLMargin {
		t.Errorf("hour key TTL = %s, want within (2h, 2h + margin]", ttl)
	}
}

func TestMultiReadsSeedEachLimit(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(15 * time.Second))
	g := newMultiGate(t, clk, 100, 1000, srv)
	em, eh := g.min.Epoch(clk.Now()), g.hour.Epoch(clk.Now())
	ctx := context.Background()
	// The minute limit: 80 × 0.75 + 40 = 100, at its threshold. The hour limit: the
	// fleet counted 2000 in this hour, twice its threshold.
	rc.Set(ctx, Key("t", "team", em-1), 80, 0)
	rc.Set(ctx, Key("t", "team", em), 40, 0)
	rc.Set(ctx, Key("t:w3600", "team", eh), 2000, 0)

	if d := g.min.Check("team", 1); d.Limited {
		t.Fatalf("first contact limited: %+v", d)
	}
	if d := g.hour.Check("team", 20); d.Limited { // above the sync floor: read on the next tick
		t.Fatalf("first contact limited: %+v", d)
	}
	before := g.pipes.n.Load()
	if r := g.tk.Tick(ctx); r.Reads != 2 || r.Errors != 0 {
		t.Fatalf("tick = %+v, want both limits read", r)
	}
	if n := g.pipes.n.Load() - before; n != 1 {
		t.Errorf("pipelines = %d, want 1 for the writes and reads of both limits", n)
	}
	if d := g.min.Check("team", 0); !d.Limited || d.Level < 100 || d.Level > 102 {
		t.Errorf("minute limit after read: %+v, want limited at level ≈ 101", d)
	}
	if d := g.hour.Check("team", 0); !d.Limited || d.Level < 2000 {
		t.Errorf("hour limit after read: %+v, want limited at level ≥ 2000", d)
	}
}

func TestNewMultiRejectsSharedPrefix(t *testing.T) {
	reg := prometheus.NewRegistry()
	l1, _ := limit.New(limit.Config{}, nil, nil)
	l2, _ := limit.New(limit.Config{Window: time.Hour}, nil, nil)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := NewMulti([]Limit{{Lim: l1}, {Lim: l2}}, []redis.UniversalClient{c}, Config{}, reg, nil); err == nil {
		t.Error("two limits with one key prefix accepted")
	}
}
