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
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n")
	if _, err := overrides.SetWithin(context.Background(), srv.Client(t), "gate:rule:team:overrides", "t1", 5000, time.Now(), 0); err != nil {
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

// A rule a reload adds routes on its live overrides from its first record, as a gate at
// start does: its hash (kept from when the rule was in use before, or set ahead of it) is
// read before the new rules are put in use. Redis answers late (paused for 2 s, within the
// read timeout), so a rule put in use at once would route on its static limit meanwhile.
func TestRulesReloadNewRuleStartsWithItsLiveOverrides(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n")
	rc := srv.Client(t)
	if _, err := overrides.SetWithin(context.Background(), rc, "gate:rule:ev:overrides", "signup", 7, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS":      "127.0.0.1:1",
		"GATE_REDIS_URLS":         srv.URL(),
		"GATE_RULES_FILE":         path,
		"GATE_REDIS_READ_TIMEOUT": "10s", // Redis paused answers late, not never
	})
	g := startReloading(t, cfg, "reload-new-rule")
	first := g.gen.Load()
	waitFirstOverridesRead(t, first)
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n  - {name: ev, key: json:event, limits: [1m:100]}\n")
	for deadline := time.Now().Add(30 * time.Second); g.gen.Load() == first; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("waited 30s for the edit in use")
		}
	}
	rs := g.CurrentRules()
	if got := rs[1].Lims[0].Threshold("signup"); rs[1].Name != "ev" || got != 7 {
		t.Errorf("rule %s in use with signup's threshold %d, want rule ev's live override 7", rs[1].Name, got)
	}
}

// waitFirstOverridesRead waits for gen's first rule's overrides refresher to have read
// the live hash once.
func waitFirstOverridesRead(t *testing.T, gen *generation) {
	t.Helper()
	waitFor(t, "the first read of the team rule's overrides", func() bool {
		select {
		case <-gen.overrides[0].FirstRead():
			return true
		default:
			return false
		}
	})
}
