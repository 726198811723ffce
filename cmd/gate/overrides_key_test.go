package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/cli"
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

// gate overrides set refuses a team that starts or ends with a non-ASCII space or an
// invisible character, naming its code point, as GATE_OVERRIDES and GATE_FORCE_OVERFLOW
// do: copied with a team id from a page or a chat, it named a key no record has, and the
// override never applied, the command saying it did. delete refuses one the hash does not
// hold (it would say "nothing changed" of a key the operator cannot see), but removes one
// it holds: an older gate's set took such keys, and delete is how they are cleaned up.
func TestOverridesRefuseKeyWithInvisibleEdge(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	env := map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "edge"}
	do := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"overrides"}, args...), testHost(env), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	if _, _, err := do("set", "42", "5"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before, err := rs.Client(t).HGetAll(ctx, "edge:overrides").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ team, want string }{
		{"42\u200b", `"42\u200b": starts or ends with an invisible character (U+200B)`},
		{"\u206042", `"\u206042": starts or ends with an invisible character (U+2060)`},
		{"\ufeff42", `"\ufeff42": starts or ends with an invisible character (U+FEFF)`},
		{"42\u00a0", `"42\u00a0": starts or ends with a non-ASCII space (U+00A0)`},
		{"\u300042", `"\u300042": starts or ends with a non-ASCII space (U+3000)`},
	} {
		for _, args := range [][]string{{"set", tc.team, "5000"}, {"delete", tc.team}} {
			out, stderr, err := do(args...)
			if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), args[0]+" "+tc.want) || strings.Contains(stderr, "Usage:") {
				t.Errorf("overrides %q: %v (exit %d), stdout %q; want a usage error with %q, alone", args, err, cli.ExitCode(err), out, args[0]+" "+tc.want)
			}
		}
	}
	if after, err := rs.Client(t).HGetAll(ctx, "edge:overrides").Result(); err != nil || !maps.Equal(after, before) {
		t.Errorf("after the refused commands the hash holds %v (%v), want %v unchanged", after, err, before)
	}
	// An entry written so before (by hand, or by an older gate's set) is deleted.
	if err := rs.Client(t).HSet(ctx, "edge:overrides", "42\u200b", "7").Err(); err != nil {
		t.Fatal(err)
	}
	if out, _, err := do("delete", "42\u200b"); err != nil || !strings.Contains(out, `deleted "42\u200b" from edge:overrides`) {
		t.Errorf("delete of an entry the hash holds: %q %v, want it deleted", out, err)
	}
	if n, err := rs.Client(t).HExists(ctx, "edge:overrides", "42\u200b").Result(); err != nil || n {
		t.Errorf("the entry is still there: %v %v", n, err)
	}
}
