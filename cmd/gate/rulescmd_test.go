package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

// gate rules check prints each rule and its keys, or every problem (exit status 2),
// checked against this environment's topics and tick interval.
func TestRulesCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	notYAML := filepath.Join(dir, "not-yaml.yaml")
	for path, body := range map[string]string{
		notYAML: "rules:\n  - name: a\n    key: key\n    limits: [1m:10\n",
		good: "rules:\n  - {name: team-user, key: \"json:team_id+distinct_id\", missing: skip, limits: [1m:5000, 1h:100000], mode: cap}\n" +
			"  - {name: learned-user, key: \"json:team_id+distinct_id\", limits: [1m:5000, 1h:100000], threshold_mode: adaptive}\n" +
			"  - name: merges\n    key: json:team_id\n    match: [{field: json:event, in: [$identify]}]\n    limits: [1m:1000]\n    action: topic:merges\n    shadow: true\n",
		bad: "rules:\n  - {name: a, key: key, limits: [1m:10], action: topic:raw}\n  - {name: b, key: key, limits: [1s:10]}\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doAll := func(env map[string]string, args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"rules"}, args...), testHost(env), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	do := func(env map[string]string, args ...string) (string, error) {
		out, _, err := doAll(env, args...)
		return out, err
	}
	// GATE_KEY_FROM set in the shell is not the file's business, but a gate in this
	// environment would refuse to start with the file: said on stderr.
	out, note, err := doAll(map[string]string{"GATE_KEY_FROM": "json:x", "GATE_OVERRIDES": "a=5", "GATE_REDIS_PREFIX": "prod"}, "check", good)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "note: GATE_KEY_FROM, GATE_OVERRIDES set here: a gate started with a rules file refuses to start with them") {
		t.Errorf("stderr %q: want a note naming GATE_KEY_FROM and GATE_OVERRIDES, which a gate with the file refuses", note)
	}
	if _, note, err := doAll(map[string]string{"GATE_REDIS_PREFIX": "prod"}, "check", good); err != nil || note != "" {
		t.Errorf("gate rules check in a clean environment: %v, stderr %q; want none", err, note)
	}
	for _, want := range []string{"3 rules", "team-user", "learned-user: its further limits keep keys under their floor", "its first, adaptive, caches and writes every key", "json:team_id+distinct_id (skip if missing)", "1m:5000,1h:100000", "cap",
		"json:event in [$identify]", "topic:merges (shadow)", "prod:rule:merges:{key}:{epoch}",
		"team-user: keys under their floor", "a team with more than 100000 keys a window: on_cardinality collapse",
		// The floor is under 2 records past SyncFloor × threshold / 2 gates: no sketch.
		"kept apart on fleets of up to 25 gates (1m:5000), 500 (1h:100000)",
		"outcome rows' team (GATE_OUTCOMES_TOPIC): json:team_id (not given: the first field of the first enforced rule's composite key"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A per-user limit whose floor is under 2 records even on one gate (30 at the
	// default 1%: 0.3) keeps no key apart on any fleet: said so, where the line said its
	// keys stay in a sketch, "kept apart on fleets of up to 0 gates" (a reviewer's file).
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("rules:\n  - {name: user, key: \"json:team_id+distinct_id\", limits: [1m:30]}\n  - {name: two, key: \"json:team_id+distinct_id\", limits: [1m:30, 1h:5000]}\n  - {name: one, key: \"json:team_id+distinct_id\", limits: [1m:300]}\n  - {name: bytes, key: \"json:team_id+distinct_id\", limits: [1m:30], cost: bytes}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = do(nil, "check", small)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"user: every key is cached and written to Redis on any fleet, even of one gate", "two: keys under their floor", "kept apart on fleets of up to none (1m:30), 25 gates (1h:5000)",
		"kept apart on fleets of up to 1 gate (1m:300)", // not "1 gates"
		// A bytes rule's floor is bytes (a review: "under 2 records").
		"bytes: every key is cached and written to Redis on any fleet, even of one gate: its floor (GATE_SYNC_FLOOR x threshold / the gates in the fleet) is under 2 bytes"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "up to 0") || strings.Contains(out, "user: keys under their floor") {
		t.Errorf("a limit of 30 said to keep keys apart:\n%s", out)
	}
	// A topic:NAME action's topic needs the broker: the check says it did not look, so a
	// file passing it is not taken for one a gate will take (a shadow rule's topic is not
	// the gate's: none is named above).
	if strings.Contains(out, "topic merges") {
		t.Errorf("a shadow rule's topic named as one the gate needs:\n%s", out)
	}
	topicFile := filepath.Join(dir, "topic.yaml")
	if err := os.WriteFile(topicFile, []byte("rules:\n  - {name: merges, key: json:team_id, limits: [1m:5], action: topic:events_merges_overflow}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = do(nil, "check", topicFile)
	if err != nil || !strings.Contains(out, "topic events_merges_overflow: not checked here; the gate needs it to exist with WRITE allowed") {
		t.Errorf("check of a rule with its own topic: %v\n%s\nwant a line saying the topic was not checked", err, out)
	}
	// What a gate does while the topic is missing: at start it waits, not ready, routing
	// nothing (consume's preflight, every 5 s), and a reload refuses only a file that
	// brings the topic in (gate.checkRuleTopics: one the rules in use send to is watched).
	// The line said the gate "refuses the file at start or reload".
	if !strings.Contains(out, "a gate started with the file is not ready and routes nothing until it does, and a reload that brings the topic in is refused while it does not") ||
		strings.Contains(out, "refuses the file at start") {
		t.Errorf("check of a rule with its own topic:\n%s\nwant it to say a gate waits at start, not ready, and refuses only a reload bringing the topic in", out)
	}
	// Every problem on a line of its own on stderr, as FILE:LINE:COL: (a gate's log has
	// them on one); the error counts them.
	out, stderr, err := doAll(map[string]string{"GATE_INPUT_TOPIC": "raw"}, "check", bad)
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if err == nil || cli.ExitCode(err) != 2 || err.Error() != "configuration: "+bad+": 2 problems, each on a line above" || !errors.Is(err, rules.ErrRules) ||
		out != "" || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], bad+`:2:50: rules[0] "a".action: "topic:raw": raw is GATE_INPUT_TOPIC`) ||
		lines[1] != bad+`:3:34: rules[1] "b".limits[0]: "1s:10": want a window longer than GATE_TICK_INTERVAL (1s)` {
		t.Errorf("bad file: %v, stdout %q, stderr:\n%s", err, out, stderr)
	}
	// A file that is not YAML: one problem in the same form, at its line.
	_, stderr, err = doAll(nil, "check", notYAML)
	if cli.ExitCode(err) != 2 || err.Error() != "configuration: "+notYAML+": 1 problem, on the line above" ||
		stderr != notYAML+":4:19: did not find expected ',' or ']'\n" {
		t.Errorf("not YAML: %v, stderr %q", err, stderr)
	}
	for _, args := range [][]string{nil, {"check"}, {"lint", good}} {
		if _, err := do(nil, args...); cli.ExitCode(err) != 2 {
			t.Errorf("rules %q: %v, want a usage error", args, err)
		}
	}
	if _, err := do(nil, "check", filepath.Join(dir, "none.yaml")); cli.ExitCode(err) != 2 {
		t.Errorf("missing file: %v", err)
	}
}

// gate rules check reads the environment as a gate started with GATE_RULES_FILE=FILE
// would, whether or not it names the file: a tick interval or a cold-write interval
// longer than the default GATE_WINDOW, which a gate with rules takes (each rule's windows
// are checked against them), is no problem of the file; a window of the file under that
// tick interval is.
func TestRulesCheckReadsTheEnvironmentAsAGateWithRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hour := filepath.Join(dir, "hour.yaml")
	minute := filepath.Join(dir, "minute.yaml")
	for path, body := range map[string]string{
		hour:   "rules:\n  - {name: team, key: json:team_id, limits: [1h:100000]}\n",
		minute: "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(env map[string]string, path string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"rules", "check", path}, testHost(env), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	for _, env := range []map[string]string{
		{"GATE_TICK_INTERVAL": "2m", "GATE_SYNC_INTERVAL": "5m"},
		{"GATE_COLD_WRITE_INTERVAL": "5m"},
		{"GATE_TICK_INTERVAL": "2m", "GATE_SYNC_INTERVAL": "5m", "GATE_RULES_FILE": hour},
	} {
		if out, stderr, err := check(env, hour); err != nil || !strings.Contains(out, ": 1 rule, checked") {
			t.Errorf("%v: %v, stdout %q, stderr %q; want the file accepted, as a gate with it starts", env, err, out, stderr)
		}
	}
	_, stderr, err := check(map[string]string{"GATE_TICK_INTERVAL": "2m", "GATE_SYNC_INTERVAL": "5m"}, minute)
	if cli.ExitCode(err) != 2 || !strings.Contains(stderr, minute+`:2:46: rules[0] "team".limits[0]: "1m:1000": want a window longer than GATE_TICK_INTERVAL (2m)`) {
		t.Errorf("a window under the tick interval: %v, stderr %q", err, stderr)
	}
}

// gate rules check shows each rule's keys as the gates name them in this environment's
// Redis mode: on Redis Cluster every key carries its shard's hash tag after the rule's
// prefix ({sN}), which the column left out, so a KEYS or SCAN for the keys it showed
// found none; and each limit's, a further window's under /w{seconds}, a bytes rule's
// under /bytes.
func TestRulesCheckShowsTheKeysOfTheRedisMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	body := "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000, 1h:20000]}\n" +
		"  - {name: big, key: json:team_id, cost: bytes, limits: [1m:1000000]}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(env map[string]string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"rules", "check", path}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v, stderr %q", env, err, stderr.String())
		}
		return stdout.String()
	}
	for _, c := range []struct {
		mode string
		want []string // each limit's key layout, as the gates name a key
	}{
		{"standalone", []string{"prod:rule:team:{key}:{epoch}", "prod:rule:team/w3600:{key}:{epoch}", "prod:rule:big/bytes:{key}:{epoch}"}},
		{"sentinel", []string{"prod:rule:team:{key}:{epoch}", "prod:rule:team/w3600:{key}:{epoch}", "prod:rule:big/bytes:{key}:{epoch}"}},
		{"cluster", []string{"prod:rule:team:{sN}:{key}:{epoch}", "prod:rule:team/w3600:{sN}:{key}:{epoch}", "prod:rule:big/bytes:{sN}:{key}:{epoch}"}},
	} {
		env := map[string]string{"GATE_REDIS_PREFIX": "prod", "GATE_REDIS_MODE": c.mode}
		if c.mode == "sentinel" {
			env["GATE_REDIS_SENTINEL_ADDRS"] = "127.0.0.1:26379"
			env["GATE_REDIS_SENTINEL_MASTER"] = "mymaster"
		}
		out := check(env)
		for _, layout := range c.want {
			if !strings.Contains(out, layout) {
				t.Errorf("%s: output lacks %s:\n%s", c.mode, layout, out)
			}
			// The layout is the key a gate writes, for a key t1 in epoch 7.
			prefix, _, _ := strings.Cut(layout, ":{")
			re := regexp.MustCompile("^" + strings.NewReplacer(`\{sN\}`, `\{s\d+\}`, `\{key\}`, "t1", `\{epoch\}`, "7").Replace(regexp.QuoteMeta(layout)) + "$")
			if k := tick.KeyFor(tick.Mode(c.mode), prefix, "t1", 7); !re.MatchString(k) {
				t.Errorf("%s: the gates' key %s is not %s", c.mode, k, layout)
			}
		}
		if hasTag := strings.Contains(out, "{sN}"); hasTag != (c.mode == "cluster") {
			t.Errorf("%s: {sN} shown: %v\n%s", c.mode, hasTag, out)
		}
	}
}

// gate rules check shows each match value apart: a value holding a comma, a bracket or
// a tab is quoted. Joined as they were, in: ['a,b', c] read [a,b,c], three values where
// the rule matches two, and a tab split the table's columns.
func TestRulesCheckShowsMatchValuesApart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	body := "rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:10]\n" +
		"    match: [{field: json:event, in: ['x,y', z, \"t\\tu\", 'p] and json:q in [r']}]\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"rules", "check", path}, testHost(nil), &stdout, &stderr); err != nil {
		t.Fatalf("%v, stderr %q", err, stderr.String())
	}
	want := `json:event in ["x,y",z,"t\tu","p] and json:q in [r"]`
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("output lacks %s:\n%s", want, stdout.String())
	}
}
