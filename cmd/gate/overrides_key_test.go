package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// gate overrides set must refuse a key the rule (or GATE_KEY_FROM) never builds, as
// GATE_OVERRIDES and a rule's force list do: written unescaped, a composite key names
// nothing the gate counts, and the override silently never applies.
func TestOverridesSetRefusesKeyNoRuleBuilds(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: team-user, key: \"json:team_id+distinct_id\", limits: [1m:100]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		hash string
	}{
		// docs/rules.md: "Written unescaped, phc_x:user:1 is no key this rule builds".
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "r6", "GATE_RULES_FILE": path},
			[]string{"-rule", "team-user", "set", "phc_x:user:1", "20000"}, "r6:rule:team-user:overrides"},
		// one part for a two-field key
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "r6b", "GATE_RULES_FILE": path},
			[]string{"-rule", "team-user", "set", "phc_x", "20000"}, "r6b:rule:team-user:overrides"},
		// without rules, a composite GATE_KEY_FROM: GATE_OVERRIDES=phc_x:user:1=5 is refused at start
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "r6c", "GATE_KEY_FROM": "json:team_id+distinct_id"},
			[]string{"set", "phc_x:user:1", "20000"}, "r6c:overrides"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"overrides"}, tc.args...), testHost(tc.env), &stdout, &stderr)
		n, _ := rs.Client(t).Exists(context.Background(), tc.hash).Result()
		if err == nil || n != 0 {
			t.Errorf("overrides %q: err %v, %s exists=%d, stdout %q; want the key refused and nothing written",
				tc.args, err, tc.hash, n, stdout.String())
		}
		// The one line saying what is wrong, not under the usage (a reviewer's run: 14
		// lines of it before the key's escaping).
		if strings.Contains(stderr.String(), "Usage:") {
			t.Errorf("overrides %q printed the usage for a key it refuses:\n%s", tc.args, stderr.String())
		}
	}
}
