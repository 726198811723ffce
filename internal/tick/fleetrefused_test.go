package tick

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// A Redis that refuses the gate once it runs (its password rotated on Redis before the
// gates', their connections dropped) is said by the fleet count, which runs every 5 s (every tick of a longer interval)
// whatever the traffic: the tick reports its own pipelines only, and sends nothing while
// every key is quiet (a cold write a window), so a gate with idle teams counted
// gate_limiter_errors_total{cause="redis"} (GateRedisErrors) and logged no line naming
// WRONGPASS for up to a window. One line, however many counts are refused.
func TestFleetCountRefusedIsSaid(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	tk, logs := fleetTicker(t, srv)
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + time.Second) }
	tk.countFleet(ctx, at(0))
	if lines := logs.lines("redis refuses the fleet count"); len(lines) != 0 {
		t.Fatalf("a count Redis took is said refused: %q", lines)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "gate", "resetpass", ">rotated-pw").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "gate").Err(); err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 3; s++ {
		tk.countFleet(ctx, at(s))
	}
	if lines := logs.lines("redis refuses the fleet count", "WRONGPASS"); len(lines) != 1 {
		t.Errorf("want one line saying Redis refuses the gate (WRONGPASS); log:\n%s", logs.buf.String())
	}
	if got := testutil.ToFloat64(tk.m.errors.WithLabelValues(causeRedis.String(), "0")); got != 3 {
		t.Errorf("errors{cause=redis} = %v, want 3, one a refused count", got)
	}
}

// TestFleetCountRefusedSaysItsCause: the fleet count's line gave one hint for every
// refusal, naming the gate's password and ACL first: a Redis at its maxmemory
// (noeviction, OOM), whose reads are still answered, sent the operator to the
// credentials. The line names the cause it got, and the password only for a login's.
func TestFleetCountRefusedSaysItsCause(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	tk, logs := fleetTicker(t, srv)
	srv.RefuseWrites(t, redistest.RefuseOOM)
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	tk.countFleet(ctx, slot0.Add(time.Second))
	lines := logs.lines("redis refuses the fleet count", "maxmemory")
	if len(lines) != 1 || strings.Contains(lines[0], "WRONGPASS") || strings.Contains(lines[0], "password") {
		t.Errorf("want one line naming Redis's maxmemory, not the gate's password; log:\n%s", logs.buf.String())
	}
}

// fleetTicker is a Ticker on srv as the documented ACL's user (dialGate), of a limiter of
// its own, logging to the buffer it returns: what the fleet count's tests count with.
func fleetTicker(t *testing.T, srv *redistest.Server) (*Ticker, *logBuffer) {
	t.Helper()
	client := dialGate(t, srv)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	tk, err := New(l, []redis.UniversalClient{client}, Config{}, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return tk, logs
}
