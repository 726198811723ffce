package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/redistest"
)

// A forced key (GATE_FORCE_OVERFLOW, a rule's force) takes the action on every record,
// whatever its level: the team view says it is limited, and why. It said "under its
// limits" while every one of the team's records went to overflow, and -top ranked it
// with the idle teams.
func TestTeamCommandSaysAForcedTeamIsLimited(t *testing.T) {
	t.Parallel()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte("rules:\n  - {name: team, key: json:team_id, limits: [1m:1000], force: [whale]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		why  string
	}{
		{"divert", map[string]string{"GATE_FORCE_OVERFLOW": "whale"}, "forced by GATE_FORCE_OVERFLOW"},
		{"cap", map[string]string{"GATE_FORCE_OVERFLOW": "whale", "GATE_LIMIT_MODE": "cap"}, "forced by GATE_FORCE_OVERFLOW"},
		{"rule", map[string]string{"GATE_RULES_FILE": rulesPath}, "forced by rule team's force list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			kc, kenv := kafkaEnv(t)
			produceRows(t, kc, whaleRecords()...)
			g := startGate(t, withEnv(kenv, withEnv(tc.env, map[string]string{
				"GATE_REDIS_URLS":    rs.URL(),
				"GATE_HTTP_ADDR":     "127.0.0.1:0",
				"GATE_TEAM_API":      "true",
				"GATE_TICK_INTERVAL": "50ms",
			})))
			if got := tenOutputs(t, kc, 30*time.Second); got["events_overflow"] != 10 {
				t.Fatalf("outputs %v, want the 10 records forced to overflow", got)
			}
			do := func(args ...string) string {
				var stdout, stderr bytes.Buffer
				if err := run(t.Context(), append([]string{"team", "-addr", g.addr}, args...), testHost(nil), &stdout, &stderr); err != nil {
					t.Fatalf("team %q: %v", args, err)
				}
				return stdout.String()
			}
			if out := do("whale"); !strings.HasPrefix(out, "team whale: LIMITED\n") || !strings.Contains(out, tc.why) {
				t.Errorf("gate team whale, forced:\n%s", out)
			}
			if _, body := get(t, g.addr, "/v1/teams/whale"); !strings.Contains(body, `"limited": true`) || !strings.Contains(body, `"forced": true`) {
				t.Errorf("/v1/teams/whale, forced:\n%s", body)
			}
			if out := do("-top", "5"); !strings.Contains(out, "forced") {
				t.Errorf("gate team -top 5, whale forced:\n%s", out)
			}
		})
	}
}
