package gate

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/capturegate/gate/internal/tick"
)

// TestLimitsHashFollowsWhatCounts: two gates built alike (each its own process's seed,
// writer and host) hash their limits alike, so a fleet of them agrees; a gate whose rule
// counts in another mode, with another window or threshold, match or action, or without
// a rules file another GATE_THRESHOLD, mode or key, hashes them otherwise (the fleet's
// gates compare the hashes: tick's agree.go). A setting of this gate's pace alone
// (GATE_SYNC_INTERVAL) changes nothing.
func TestLimitsHashFollowsWhatCounts(t *testing.T) {
	hashOf := func(env map[string]string, rules string) string {
		t.Helper()
		e := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1", "GATE_REDIS_URLS": "redis://127.0.0.1:1/0"}
		maps.Copy(e, env)
		if rules != "" {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
				t.Fatal(err)
			}
			e["GATE_RULES_FILE"] = path
		}
		g, err := New(load(t, e), slog.New(slog.DiscardHandler), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.CloseRedis(slog.New(slog.DiscardHandler))
		defer g.Consumer.Close()
		return tick.LimitsHash(g.Ticker.Config().LiveLimits)
	}
	const capRules = "rules:\n  - {name: team, key: json:team_id, limits: [10s:1500], mode: cap}\n"
	base := hashOf(nil, capRules)
	if again := hashOf(map[string]string{"GATE_SYNC_INTERVAL": "5s"}, capRules); again != base {
		t.Errorf("a gate built alike hashes its limits %s, the first %s", again, base)
	}
	for name, rules := range map[string]string{
		"divert":     "rules:\n  - {name: team, key: json:team_id, limits: [10s:1500]}\n",
		"window":     "rules:\n  - {name: team, key: json:team_id, limits: [20s:1500], mode: cap}\n",
		"threshold":  "rules:\n  - {name: team, key: json:team_id, limits: [10s:4000], mode: cap}\n",
		"match":      "rules:\n  - {name: team, key: json:team_id, limits: [10s:1500], mode: cap, match: [{field: \"header:event\", in: [$pageview]}]}\n",
		"action":     "rules:\n  - {name: team, key: json:team_id, limits: [10s:1500], mode: cap, action: tag}\n",
		"extra rule": capRules + "  - {name: user, key: \"json:team_id+distinct_id\", limits: [10s:100]}\n",
	} {
		if h := hashOf(nil, rules); h == base {
			t.Errorf("%s: the same hash as the rules it differs from (%s)", name, h)
		}
	}
	plain := hashOf(map[string]string{"GATE_THRESHOLD": "5000"}, "")
	if again := hashOf(map[string]string{"GATE_THRESHOLD": "5000"}, ""); again != plain {
		t.Errorf("without rules: %s then %s", plain, again)
	}
	for name, env := range map[string]map[string]string{
		"threshold": {"GATE_THRESHOLD": "6000"},
		"mode":      {"GATE_THRESHOLD": "5000", "GATE_LIMIT_MODE": "cap"},
		"key":       {"GATE_THRESHOLD": "5000", "GATE_KEY_FROM": "header:team"},
	} {
		if h := hashOf(env, ""); h == plain {
			t.Errorf("without rules, another %s: the same hash (%s)", name, h)
		}
	}
}
