package gate

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/redistest"
)

// A rules reload while Redis is down must keep each unchanged rule's live overrides
// (fail-static: "a Redis error ... keeps the current overrides"). The new generation's
// limiters started with none, and its refreshers could not read the hash: a team given a
// raised limit fell back to the rule's threshold for as long as Redis was down.
func TestRulesReloadKeepsLiveOverridesWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n")
	if err := overrides.Set(context.Background(), srv.Client(t), "gate:rule:team:overrides", "t1", 5000, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS":     "127.0.0.1:1",
		"GATE_REDIS_URLS":        srv.URL(),
		"GATE_RULES_FILE":        path,
		"GATE_OVERRIDES_REFRESH": "50ms",
	})
	g := startReloading(t, cfg, "reload-overrides")
	waitFor(t, "the live override applied", func() bool { return g.CurrentRules()[0].Lims[0].Overrides()["t1"] == 5000 })

	srv.Stop(t)
	first := g.gen.Load()
	// An unrelated edit: a second rule; the team rule is unchanged.
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n  - {name: ev, key: json:event, limits: [1m:100]}\n")
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	// The new generation's refresher has failed to read the hash a few times (its counter
	// starts at 0 with the generation).
	waitFor(t, "the new generation's refreshes failing", func() bool {
		mfs, err := g.Reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() != "gate_overrides_refresh_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "rule" && l.GetValue() == "team" {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
		return n >= 3
	})
	rs := g.CurrentRules()
	if got, thr := rs[0].Lims[0].Overrides()["t1"], rs[0].Lims[0].Threshold("t1"); got != 5000 || thr != 5000 {
		t.Errorf("after a reload with Redis down, rule %s: t1's override %d, threshold %d; want 5000 kept (fail-static)", rs[0].Name, got, thr)
	}
}
