package tick

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// keysHook records how many flags each hold script a client sends carries.
type keysHook struct{ keys []int }

func (h *keysHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *keysHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *keysHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); c.Name() == "eval" && a[1] == holdScript {
				h.keys = append(h.keys, int(a[2].(int)))
			}
		}
		return next(ctx, cmds)
	}
}

// TestHoldFlagsWithinKeysPerCommand: the hold flags of a lane go in scripts of up to
// GATE_KEYS_PER_COMMAND flags, as counts and reads do. A divert rule keyed by user holds
// every user over its limit, and all of a lane's flags went in one script a tick, which
// holds Redis for every other client while it runs: 50,000 held users kept another
// client's PING waiting up to 0.36 s on each tick of each gate.
func TestHoldFlagsWithinKeysPerCommand(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart)
	const keysPerCommand, held = 4, 10
	// TickTimeout a minute: a loaded machine's Redis can outlast the default 750 ms, which
	// would fail the tick, not what this test checks.
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100, Mode: limit.Divert, DivertHold: 5 * time.Second, DivertRelease: 0.8},
		Config{KeysPerCommand: keysPerCommand, TickTimeout: time.Minute}, srv)
	h := &keysHook{}
	g.tk.instances[0].AddHook(h)
	for i := range held {
		g.l.Check(fmt.Sprintf("user-%d", i), 150) // first contact: allowed
		if d := g.l.Check(fmt.Sprintf("user-%d", i), 1); !d.Held {
			t.Fatalf("user-%d at 151: %+v, want held", i, d)
		}
	}
	if r := g.tk.Tick(context.Background()); r.Errors != 0 {
		t.Fatalf("tick: %+v", r)
	}
	total := 0
	for _, n := range h.keys {
		total += n
		if n > keysPerCommand {
			t.Errorf("a hold script carried %d flags, over GATE_KEYS_PER_COMMAND %d (scripts: %v)", n, keysPerCommand, h.keys)
		}
	}
	if total != held {
		t.Errorf("hold scripts carried %d flags in all (%v), want %d", total, h.keys, held)
	}
	for i := range held {
		if n, err := rc.Exists(context.Background(), HoldKeyFor(ModeStandalone, DefaultKeyPrefix, fmt.Sprintf("user-%d", i))).Result(); err != nil || n != 1 {
			t.Errorf("user-%d's hold flag: exists %d, %v", i, n, err)
		}
	}
}
