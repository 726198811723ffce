package sync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestTickNeedsOnlyTheDocumentedRedisCommands: a Redis ACL user limited to the commands
// docs/operations.md lists for the tick ("What the gate needs from Redis") and to the
// gate's keys writes, resends and reads: what a platform team that locks Redis down gives
// the gate must be enough, and the list must stay true as the tick changes.
func TestTickNeedsOnlyTheDocumentedRedisCommands(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// The ACL of docs/operations.md, for the tick (the overrides' commands aside).
	if err := admin.Do(ctx, "ACL", "SETUSER", "gate", "on", ">gate-pw", "resetkeys", "~gate:*", "resetchannels",
		"-@all", "+eval", "+get", "+set", "+incrby", "+pexpire", "+mget", "+ping", "+hello").Err(); err != nil {
		t.Fatal(err)
	}
	clients, err := Dial([]string{srv.URLAs("gate", "gate-pw")}, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	clk := clock.NewFake(epochStart)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, ColdWriteInterval: writeEveryTick}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{clients[0]}, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Epoch(clk.Now())
	l.Check("team", 150)
	for i := range 3 {
		clk.Advance(time.Second)
		if r := tk.Tick(ctx); r.Errors != 0 {
			t.Fatalf("tick %d with the documented ACL = %+v", i, r)
		}
	}
	if got := stored(t, admin, ModeStandalone, DefaultKeyPrefix, "team", ep); got != 150 {
		t.Errorf("Redis holds %d, want 150", got)
	}
	if d := l.Check("team", 0); !d.Limited {
		t.Errorf("team at 1.5 × its limit not limited after reads: %+v", d)
	}
	if err := clients[0].Ping(ctx).Err(); err != nil {
		t.Errorf("PING (readiness) with the documented ACL: %v", err)
	}
}
