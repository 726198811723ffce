package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// gate overrides set of a key in the force list (GATE_FORCE_OVERFLOW, a rule's force)
// says the override changes nothing while the key is forced: a forced key takes the
// action whatever its limit (docs/design.md, Precedence). It said only "gates apply it
// within GATE_OVERRIDES_REFRESH", and the team an on-call engineer raised stayed in
// overflow.
func TestOverridesSetOfAForcedKeySaysSo(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: team-user, key: \"json:team_id+distinct_id\", limits: [1m:100], force: [\"t1:u%3A1\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env       map[string]string
		args      []string
		want, not string
	}{
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "f1", "GATE_FORCE_OVERFLOW": "other,forced-team"},
			[]string{"set", "forced-team", "900000"}, "forced-team is in GATE_FORCE_OVERFLOW", ""},
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "f2", "GATE_RULES_FILE": path},
			[]string{"-rule", "team-user", "set", "t1:u%3A1", "900000"}, "t1:u%3A1 is in rule team-user's force list", ""},
		// Not forced: no note.
		{map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "f3", "GATE_FORCE_OVERFLOW": "forced-team"},
			[]string{"set", "free-team", "900000"}, "set free-team = 900000", "force"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"overrides"}, tc.args...), testHost(tc.env), &stdout, &stderr); err != nil {
			t.Fatalf("overrides %q: %v", tc.args, err)
		}
		out := stdout.String() + stderr.String()
		if !strings.Contains(out, tc.want) || tc.not != "" && strings.Contains(out, tc.not) {
			t.Errorf("overrides %q: %q, want %q in it (and not %q)", tc.args, out, tc.want, tc.not)
		}
	}
}

// gate overrides delete names what the key falls back to as the gates it addresses have
// it: its GATE_OVERRIDES limit, its learned threshold under GATE_THRESHOLD_MODE=adaptive
// (a rule's threshold_mode: adaptive), GATE_LIMITS' first threshold, each with its
// figure. It said "GATE_OVERRIDES or GATE_THRESHOLD" whatever the settings: after a
// spike's override, an operator read the team's limit as GATE_THRESHOLD's million when
// it went back to a learned threshold of a few thousand.
func TestOverridesDeleteNamesTheFallbackInForce(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: static, key: json:team_id, limits: [1m:100]}\n  - {name: learned, key: json:team_id, limits: [1m:300], threshold_mode: adaptive}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		env       map[string]string
		rule      string
		want, not string
	}{
		{map[string]string{"GATE_OVERRIDES": "t1=5000"}, "", "falls back to its GATE_OVERRIDES limit, 5000,", "GATE_THRESHOLD"},
		{map[string]string{"GATE_THRESHOLD": "2000"}, "", "falls back to GATE_THRESHOLD, 2000,", "GATE_OVERRIDES limit"},
		{map[string]string{"GATE_LIMITS": "1m:700,1h:9000"}, "", "falls back to GATE_LIMITS' first threshold, 700,", "GATE_THRESHOLD"},
		{map[string]string{"GATE_LIMITS": "1m:700"}, "", "falls back to GATE_LIMITS' first threshold, 700,", "GATE_THRESHOLD"},
		{map[string]string{"GATE_THRESHOLD_MODE": "adaptive", "GATE_THRESHOLD": "2000"}, "", "falls back to its learned threshold (GATE_THRESHOLD_MODE=adaptive; GATE_THRESHOLD, 2000, until it has one)", ""},
		{map[string]string{"GATE_RULES_FILE": path}, "static", "falls back to rule static's threshold, 100,", "GATE_THRESHOLD"},
		{map[string]string{"GATE_RULES_FILE": path}, "learned", "falls back to its learned threshold (rule learned's threshold_mode: adaptive; its threshold, 300, until it has one)", "GATE_THRESHOLD"},
		// None of the limit's variables set (the docs' example: only the Redis URL and
		// prefix): the figure is a default, said so, where it was given as the gates'
		// (a review: "falls back to GATE_THRESHOLD, 1000000" of gates with GATE_LIMITS).
		{map[string]string{}, "", "so these are the defaults, not the gates'", "the gates' own may differ"},
	} {
		env := map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": "d" + string(rune('a'+i))}
		for k, v := range tc.env {
			env[k] = v
		}
		do := func(args ...string) string {
			if tc.rule != "" {
				args = append([]string{"-rule", tc.rule}, args...)
			}
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), append([]string{"overrides"}, args...), testHost(env), &stdout, &stderr); err != nil {
				t.Fatalf("overrides %q (%v): %v", args, tc.env, err)
			}
			return stdout.String()
		}
		if out := do("set", "t1", "5"); strings.Contains(out, "is not known here") != (len(tc.env) == 0) {
			t.Errorf("set with %v: %q; want it to say whether t1 is forced is not known here only when no limit is set", tc.env, out)
		}
		if out := do("delete", "t1"); !strings.Contains(out, tc.want) || tc.not != "" && strings.Contains(out, tc.not) {
			t.Errorf("delete with %v, rule %q: %q, want %q in it (and not %q)", tc.env, tc.rule, out, tc.want, tc.not)
		}
	}
}
