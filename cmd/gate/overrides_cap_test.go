package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/redistest"
)

// A running gate refuses a live overrides hash over GATE_OVERRIDES_MAX_ENTRIES, keeping
// its limits, and says why; and says so when a hash it read is lost.
func TestServeCapsAndWatchesLiveOverrides(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := rs.Client(t)
	ctx := context.Background()
	if err := c.HSet(ctx, "gate:overrides", "a", 5, ".updated", "2026-01-01T00:00:00Z").Err(); err != nil {
		t.Fatal(err)
	}
	_, kenv := kafkaEnv(t)
	g := startGate(t, withEnv(kenv, map[string]string{
		"GATE_REDIS_URLS":            rs.URL(),
		"GATE_HTTP_ADDR":             "127.0.0.1:0",
		"GATE_OVERRIDES_REFRESH":     "50ms",
		"GATE_OVERRIDES_MAX_ENTRIES": "2",
		"GATE_TICK_INTERVAL":         "50ms",
	}))
	waitFor(t, 10*time.Second, "the live set read", func() bool {
		_, m := get(t, g.addr, "/metrics")
		return strings.Contains(m, "\ngate_overrides_live 1\n")
	})
	if err := c.HSet(ctx, "gate:overrides", "t0", 7, "t1", 7).Err(); err != nil { // one over, at once
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a refresh refused as too large", func() bool {
		_, m := get(t, g.addr, "/metrics")
		return !strings.Contains(m, `gate_overrides_refresh_errors_total{cause="too_large"} 0`) &&
			strings.Contains(m, "\ngate_overrides_live 1\n")
	})
	if err := c.Del(ctx, "gate:overrides").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lost hash reported", func() bool {
		_, m := get(t, g.addr, "/metrics")
		return strings.Contains(m, "\ngate_overrides_hash_missing 1\n") && strings.Contains(m, "\ngate_overrides_loaded 1\n")
	})
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`gate:overrides holds 3 teams, more than the 2 allowed (GATE_OVERRIDES_MAX_ENTRIES)`,
		`"level":"WARN","msg":"live overrides hash is gone`,
	} {
		if !strings.Contains(g.stderr.String(), want) {
			t.Errorf("no log line with %q:\n%s", want, g.stderr)
		}
	}
}
