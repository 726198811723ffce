package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// With rules, the chart renders them into a ConfigMap mounted where GATE_RULES_FILE
// points, sets none of the variables a rules file replaces (the gate would refuse to
// start), and the file it renders is one the gate of this commit accepts (`gate rules
// check`, with the rendered environment's topics and tick interval).
func TestRulesConfigMap(t *testing.T) {
	objs := renderObjects(t, readValues(t, "testdata/rules.yaml"))
	d := objs.typed["Deployment"][0].(*appsv1.Deployment)
	c := d.Spec.Template.Spec.Containers[0]
	env := envOf(c)
	file := env["GATE_RULES_FILE"].Value
	if file != "/etc/capture-gate/rules/rules.yaml" {
		t.Fatalf("GATE_RULES_FILE = %q", file)
	}
	for _, v := range []string{"GATE_KEY_FROM", "GATE_WINDOW", "GATE_THRESHOLD", "GATE_LIMITS", "GATE_LIMIT_MODE", "GATE_COST", "GATE_THRESHOLD_MODE", "GATE_OVERRIDES", "GATE_FORCE_OVERFLOW"} {
		if _, set := env[v]; set {
			t.Errorf("%s is set beside GATE_RULES_FILE: the gate refuses it", v)
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "rules" && m.MountPath == filepath.Dir(file) && m.ReadOnly {
			mounted = true
		}
	}
	var cmName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "rules" && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if !mounted || cmName == "" {
		t.Fatalf("rules volume mounted %v, from ConfigMap %q", mounted, cmName)
	}
	if len(objs.typed["ConfigMap"]) != 1 {
		t.Fatalf("%d ConfigMaps", len(objs.typed["ConfigMap"]))
	}
	cm := objs.typed["ConfigMap"][0].(*corev1.ConfigMap)
	if cm.Name != cmName {
		t.Errorf("ConfigMap %q, volume's %q", cm.Name, cmName)
	}
	body := cm.Data[filepath.Base(file)]
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/gate", "rules", "check", path)
	cmd.Dir = filepath.Join("..", "..")
	for _, e := range c.Env {
		if e.Value != "" && e.Name != "GATE_RULES_FILE" {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gate rules check of the rendered file: %v\n%s\nfile:\n%s", err, out, body)
	}
	for _, want := range []string{"4 rules", "merge-events", "topic:events_merges", "team-user", "try-ip", "tag (shadow)",
		"outcome rows' team (GATE_OUTCOMES_TOPIC): json:team_id (team:); rows of try-ip are filed under the record's team"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("gate rules check output lacks %q:\n%s", want, out)
		}
	}
	// Without rules, nothing of them.
	objs = renderObjects(t, readValues(t, "testdata/defaults.yaml"))
	if len(objs.typed["ConfigMap"]) != 0 {
		t.Error("a ConfigMap without rules")
	}
	if _, set := envOf(objs.typed["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0])["GATE_RULES_FILE"]; set {
		t.Error("GATE_RULES_FILE set without rules")
	}
}

// A drop rule needs outcomes: without outcomes.topic the chart refuses to render (the
// gate would refuse to start), with it GATE_OUTCOMES_* are set.
func TestDropRuleNeedsOutcomes(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	drop := "rules:\n  - {name: bots, key: json:team_id, limits: ['1m:10'], action: drop}\n"
	_, err := render(t, mergeValues(base, mustParse(t, drop)), capabilities())
	if err == nil || !strings.Contains(err.Error(), `rule "bots" has action drop, which needs outcomes.topic`) {
		t.Fatalf("render of a drop rule without outcomes: %v", err)
	}
	// In shadow it drops nothing, and needs no outcomes (the gate takes it so too).
	shadow := "rules:\n  - {name: bots, key: json:team_id, limits: ['1m:10'], action: drop, shadow: true}\n"
	if _, err := render(t, mergeValues(base, mustParse(t, shadow)), capabilities()); err != nil {
		t.Errorf("render of a drop rule in shadow without outcomes: %v", err)
	}
	objs := renderObjects(t, mergeValues(base, mustParse(t, drop+"outcomes: {topic: events_outcomes}\n")))
	env := envOf(objs.typed["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0])
	if env["GATE_OUTCOMES_TOPIC"].Value != "events_outcomes" || env["GATE_OUTCOMES_INTERVAL"].Value != "1m" || env["GATE_OUTCOMES_MAX_ROWS"].Value != "100000" ||
		env["GATE_OUTCOMES_FLUSH_INTERVAL"].Value != "10s" {
		t.Errorf("outcomes env: %v", env)
	}
}

// A rule's track, max_keys and on_cardinality (docs/rules.md), which the runbook's "Team
// rotating identities" (GateTeamRotatingIdentities) says to change, are values the chart
// takes and renders into the rules file as given, and the gate accepts the file.
func TestRuleCardinalityFields(t *testing.T) {
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, `
rules:
  - {name: team-user, key: json:team_id+distinct_id, limits: ['1m:5000'], max_keys: 20000, on_cardinality: tag}
  - {name: team-user-all, key: json:team_id+distinct_id, limits: ['1m:5000'], max_keys: 0}
  - {name: team, key: json:team_id, limits: ['1m:100000'], track: above_floor}
`))
	objs := renderObjects(t, vals)
	if len(objs.typed["ConfigMap"]) != 1 {
		t.Fatalf("%d ConfigMaps", len(objs.typed["ConfigMap"]))
	}
	body := objs.typed["ConfigMap"][0].(*corev1.ConfigMap).Data["rules.yaml"]
	for _, want := range []string{"max_keys: 20000", "on_cardinality: tag", "max_keys: 0", "track: above_floor"} {
		if !strings.Contains(body, want) {
			t.Errorf("rules file lacks %q:\n%s", want, body)
		}
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/gate", "rules", "check", path)
	cmd.Dir = filepath.Join("..", "..")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gate rules check of the rendered file: %v\n%s\nfile:\n%s", err, out, body)
	}
	if !strings.Contains(string(out), "a team with more than 20000 keys a window: on_cardinality tag") {
		t.Errorf("gate rules check output lacks team-user's max_keys and on_cardinality:\n%s", out)
	}
}

// TestRulesTickAgainstTheRulesWindows: under rules GATE_WINDOW is unset and the gate checks
// GATE_TICK_INTERVAL against each rule's windows, and caps GATE_COLD_WRITE_INTERVAL at each
// rule's window, not at the default window (60s). The chart refused a tick or a cold-write
// interval over 60s beside rules of hourly windows, which the gate runs, and rendered a
// tick as long as a rule's 10s window, which the gate refuses at start.
func TestRulesTickAgainstTheRulesWindows(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	base := readValues(t, "testdata/defaults.yaml")
	hourly := mergeValues(base, mustParse(t, `
rules:
  - {name: team, key: json:team_id, limits: ['1h:100000']}
  - {name: team-day, key: json:team_id, limits: ['1h:100000', '24h:1000000']}
sync: {tickInterval: 90s, interval: 90s, coldWriteInterval: 5m}
`))
	r, err := render(t, hourly, capabilities())
	if err != nil {
		t.Fatalf("render of rules of hourly windows, a 90s tick and a 5m cold-write interval: %v", err)
	}
	objs, err := decode(r)
	if err != nil {
		t.Fatal(err)
	}
	d := objs.typed["Deployment"][0].(*appsv1.Deployment)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(objs.typed["ConfigMap"][0].(*corev1.ConfigMap).Data["rules.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "rules", "check", path)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.Name == "GATE_RULES_FILE":
			cmd.Env = append(cmd.Env, e.Name+"="+path)
		case strings.HasPrefix(e.Name, "GATE_") && e.ValueFrom == nil:
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the gate refuses what the chart rendered: %v\n%s", err, out)
	}

	short := mergeValues(base, mustParse(t, `
rules:
  - {name: team, key: json:team_id, limits: ['1m:100000']}
  - {name: try-ip, key: header:ip, limits: ['10s:200']}
sync: {tickInterval: 10s, interval: 15s}
`))
	_, err = render(t, short, capabilities())
	want := `rule "try-ip"'s window 10s must be longer than sync.tickInterval (10s)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("render of a rule whose window is the tick's: %v; want an error containing %q", err, want)
	}
}

// A match list's values reach the rules file as text only when written as strings: Helm
// reads values files as YAML 1.1 into JSON's types, and the chart's toYaml writes them
// back, so 010 became 8, 0x2A 42, 1.0 1 and an id past 2^53 another id, each a value no
// record holds (a not_in then held for every record) where the gate, reading the file
// itself, takes each as written (docs/rules.md). Values other than strings are refused
// when the chart renders, naming the value, as the force list's are.
func TestRuleMatchValuesAreStrings(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, v := range []string{"010", "0x2A", "1.0", "1234567890123456789", "42"} {
		src := "rules:\n  - name: team\n    key: json:team_id\n    limits: ['1m:100000']\n    match:\n      - field: json:project_id\n        not_in: [" + v + "]\n"
		vals, err := chartutil.ReadValues([]byte(src)) // as helm reads a values file
		if err != nil {
			t.Fatal(err)
		}
		r, err := render(t, mergeValues(base, vals.AsMap()), capabilities())
		if err == nil {
			t.Errorf("not_in: [%s] rendered, want it refused (quote it):\n%s", v, r.files["capture-gate/templates/rules-configmap.yaml"])
		} else if !strings.Contains(err.Error(), "/rules/0/match/0/not_in/0") || !strings.Contains(err.Error(), "want string") {
			t.Errorf("not_in: [%s] refused with %v, want the value named and a string asked for", v, err)
		}
		quoted := strings.Replace(src, "["+v+"]", "['"+v+"']", 1)
		objs := renderObjects(t, mergeValues(base, mustParse(t, quoted)))
		if body := objs.typed["ConfigMap"][0].(*corev1.ConfigMap).Data["rules.yaml"]; !strings.Contains(body, "'"+v+"'") && !strings.Contains(body, `"`+v+`"`) {
			t.Errorf("not_in: ['%s'] rendered as:\n%s", v, body)
		}
	}
}

// TestRulesRenderOnlyAsTheGateTakesThem: rules values the gate refuses at start must not
// render. The rules ConfigMap does not roll the pods (the gate reloads it), so a file the
// gate refuses installed and upgraded with --wait, the running pods kept their rules and
// only GateRulesFileInvalid fired, until the next pod to start (a crash, a drain, a
// scale-up) crash-looped on it. Each case is also given to `gate rules check` as the
// chart would render it, so that the chart's checks and the gate's cannot drift apart.
func TestRulesRenderOnlyAsTheGateTakesThem(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct{ name, rules, want string }{
		{"what the gate takes", "[{name: a, key: 'json:team_id+distinct_id', limits: ['1m:5', '1h:100'], max_keys: 10, on_cardinality: tag}, " +
			"{name: b, key: 'json:team_id', limits: ['1m:5'], threshold_mode: adaptive}, {name: c, key: 'header:event', limits: ['90s:010'], action: 'topic:merges.x'}, " +
			"{name: d, key: 'json:token', limits: ['2m:5'], action: 'topic:merges.x'}, {name: e, key: 'json:ip', limits: ['1m:8796093022207'], match: [{field: 'header:event', in: [a]}]}]", ""},
		{"names twice", "[{name: a, key: 'json:team_id', limits: ['1m:5']}, {name: a, key: 'json:token', limits: ['1m:5']}]", `rule name "a" is used twice`},
		{"threshold 0", "[{name: a, key: 'json:team_id', limits: ['1m:0']}]", "threshold"},
		{"window not whole seconds", "[{name: a, key: 'json:team_id', limits: ['1500ms:5', '1h:50']}]", "whole number of seconds"},
		{"window twice", "[{name: a, key: 'json:team_id', limits: ['1m:5', '60s:6']}]", "twice"},
		{"window past a year", "[{name: a, key: 'json:team_id', limits: ['10000h:5']}]", "8784h"},
		{"the gate's own topic", "[{name: a, key: 'json:team_id', limits: ['1m:5'], action: 'topic:events_accepted'}]", "topics.accepted"},
		{"a topic Kafka takes for the gate's", "[{name: a, key: 'json:team_id', limits: ['1m:5'], action: 'topic:events.overflow'}]", "differ only in '.' and '_'"},
		{"two rules' topics Kafka takes for one", "[{name: a, key: 'json:team_id', limits: ['1m:5'], action: 'topic:merges.x'}, {name: b, key: 'json:token', limits: ['1m:5'], action: 'topic:merges_x'}]", "differ only in '.' and '_'"},
		{"max_keys on one field", "[{name: a, key: 'json:team_id', limits: ['1m:5'], max_keys: 10}]", "max_keys"},
		{"on_cardinality with track all", "[{name: a, key: 'json:team_id+distinct_id', limits: ['1m:5'], track: all, on_cardinality: tag}]", "on_cardinality"},
		{"a force key twice", "[{name: a, key: 'json:team_id', limits: ['1m:5'], force: [t1, t2, t1]}]", `"t1" appears twice`},
		{"adaptive over a window not dividing an hour", "[{name: a, key: 'json:team_id', limits: ['7m:5'], threshold_mode: adaptive}]", "divides an hour"},
		// A match value or force entry that starts or ends with a non-ASCII space or an
		// invisible character (for a composite key, any part), a field or header name that
		// does, and a character YAML reads as a line break and editors do not (U+0085,
		// U+2028, U+2029) anywhere: the chart wrote each into the file, which the gate
		// refuses (the last broke the ConfigMap's own YAML, or became a space).
		{"a no-break space ending a match value", "[{name: a, key: 'json:team_id', limits: ['1m:5'], match: [{field: 'header:e', in: [\"42\\u00a0\"]}]}]",
			`rules[0] "a".match[0].in[0]: "42\u00a0" starts or ends with a non-ASCII space (U+00A0)`},
		{"an ideographic space starting a not_in value", "[{name: a, key: 'json:team_id', limits: ['1m:5'], match: [{field: 'json:city', not_in: [x, \"\u3000Tokyo\"]}]}]",
			`rules[0] "a".match[0].not_in[1]: "\u3000Tokyo" starts or ends with a non-ASCII space (U+3000)`},
		{"a zero-width space starting a force entry", "[{name: a, key: 'json:team_id', limits: ['1m:5']}, {name: b, key: 'json:token', limits: ['1m:5'], force: [t1, \"\u200bt2\"]}]",
			`rules[1] "b".force[1]: "\u200bt2" starts or ends with an invisible character (U+200B)`},
		{"a byte order mark ending a force entry", "[{name: a, key: 'json:team_id', limits: ['1m:5'], force: [\"42\ufeff\"]}]",
			`rules[0] "a".force[0]: "42\ufeff" starts or ends with an invisible character (U+FEFF)`},
		{"a word joiner at a part's edge of a composite key's force entry", "[{name: a, key: 'json:team_id+distinct_id', limits: ['1m:5'], force: [\"42\u2060:u1\"]}]",
			`rules[0] "a".force[0]: "42\u2060:u1": a part starts or ends with an invisible character (U+2060)`},
		{"a LINE SEPARATOR inside a force entry", "[{name: a, key: 'json:team_id', limits: ['1m:5'], force: [\"4\u20282\"]}]",
			`rules[0] "a".force[0]: "4\u20282" holds a LINE SEPARATOR (U+2028)`},
		{"a NEXT LINE inside a match value", "[{name: a, key: 'json:team_id', limits: ['1m:5'], match: [{field: 'header:e', in: [\"a\\u0085b\"]}]}]",
			`rules[0] "a".match[0].in[0]: "a\u0085b" holds a NEXT LINE (U+0085)`},
		{"a PARAGRAPH SEPARATOR inside a key's header name", "[{name: a, key: \"header:x\u2029y\", limits: ['1m:5']}]",
			`rules[0] "a".key: "header:x\u2029y" holds a PARAGRAPH SEPARATOR (U+2029)`},
		{"a no-break space ending a key's field", "[{name: a, key: \"json:team_id\u00a0\", limits: ['1m:5']}]",
			`rules[0] "a".key: "json:team_id\u00a0": field "team_id\u00a0" starts or ends with a space (U+00A0)`},
		{"a space starting a key's path part", "[{name: a, key: 'json:properties. team', limits: ['1m:5']}]",
			`rules[0] "a".key: "json:properties. team": field "properties. team": path part " team" starts or ends with a space`},
		{"a zero-width space starting a match field's header name", "[{name: a, key: 'json:team_id', limits: ['1m:5'], match: [{field: \"header:\u200be\", in: [x]}]}]",
			`rules[0] "a".match[0].field: "header:\u200be": header name "\u200be" starts or ends with an invisible character (U+200B)`},
		{"a no-break space ending a composite match field's second field", "[{name: a, key: 'json:team_id', limits: ['1m:5'], match: [{field: \"json:team_id+distinct_id\u00a0\", in: ['1:x']}]}]",
			`field "distinct_id\u00a0" starts or ends with a space (U+00A0)`},
		{"inside a value, or inside a composite key's part, as the gate takes them", "[{name: a, key: 'json:team_id+distinct_id', limits: ['1m:5'], force: [\"42:New\u00a0York\", \"4\u200b2:x\"], " +
			"match: [{field: 'json:city', in: [\"S\u00e3o\u3000Paulo\"]}]}]", ""},
	} {
		// Helm reads a \u escape in values (in double quotes) as the character, which the
		// chart's toYaml writes into the file as it is (a BOM excepted): the file the gate
		// is given holds the character where a case writes an escape (\\u00a0 in its Go text).
		vals := mergeValues(base, mustParse(t, "rules: "+tc.rules+"\n"))
		r, rerr := render(t, vals, capabilities())
		if tc.want == "" {
			if rerr != nil {
				t.Errorf("%s: render: %v; want it rendered, as the gate takes it", tc.name, rerr)
			} else if body := renderedRulesFile(t, r); body == "" {
				t.Errorf("%s: no rules file rendered", tc.name)
			} else {
				// What the chart renders, not only the values' text, is what the gates read.
				path := filepath.Join(t.TempDir(), "rendered.yaml")
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(bin, "rules", "check", path)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: gate rules check of the rendered file: %v\n%s\n%s", tc.name, err, body, out)
				}
			}
		} else if rerr == nil || !strings.Contains(rerr.Error(), tc.want) {
			t.Errorf("%s: render: %v; want it refused, saying %q", tc.name, rerr, tc.want)
		}
		// The gate refuses the same file, and takes the one the chart renders.
		raw, err := strconv.Unquote(`"` + strings.ReplaceAll(tc.rules, `"`, `\"`) + `"`)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body := "rules: " + raw + "\n" // the escapes written as the characters, as the chart writes them
		path := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "rules", "check", path)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); (err == nil) != (tc.want == "") {
			t.Errorf("%s: gate rules check: %v; the chart and the gate disagree on the file:\n%s\n%s", tc.name, err, body, out)
		}
	}
}

// renderedRulesFile is the rules file r renders into the rules ConfigMap; "" for none.
func renderedRulesFile(t *testing.T, r rendered) string {
	t.Helper()
	objs, err := decode(r)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	for _, o := range objs.typed["ConfigMap"] {
		if body, ok := o.(*corev1.ConfigMap).Data["rules.yaml"]; ok {
			return body
		}
	}
	return ""
}

// rulesTeam is the rules file's team:, a key of one field: without rules it was left out
// unsaid, and a composite key or a typo rendered, for the gates to refuse the file (at
// start; at a live edit, keeping the old rules). The chart refuses both; a key of one
// field is written as the file's team:.
func TestRulesTeamChecked(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	rule := "rules:\n  - {name: team, key: json:team_id, limits: ['1m:10']}\n"
	if _, err := render(t, mergeValues(base, mustParse(t, "rulesTeam: json:team_id\n")), capabilities()); err == nil || !strings.Contains(err.Error(), "rulesTeam (json:team_id) is set without rules") {
		t.Errorf("render of rulesTeam without rules: %v; want it refused, saying so", err)
	}
	// The gate of the chart's appVersion (0.8.0) refuses a rules file with team: (unknown
	// field): its pods would crash-loop (a rolling-update review). Refused with the
	// default image; an image of the user's choosing is taken to have it.
	if _, err := render(t, mergeValues(base, mustParse(t, rule+"rulesTeam: json:team_id\n")), capabilities()); err == nil || !strings.Contains(err.Error(), "which the gate of the chart's appVersion (0.8.0) does not know") {
		t.Errorf("render of rulesTeam with the appVersion's image: %v; want it refused, saying why", err)
	}
	base = mergeValues(base, mustParse(t, "image: {tag: next}\n"))
	// As the gate has them (internal/rules TestRulesTeamCasesAsTheChartHasThem reads the
	// same file): the chart's first pattern refused header:x-team+id, which the gate reads,
	// and rendered json:a..b and "json:team_id " for gates that refuse them (a review).
	cases := readTeamCases(t)
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		values := rule + "rulesTeam: " + strconv.Quote(tc.value) + "\n"
		r, err := render(t, mergeValues(base, mustParse(t, values)), capabilities())
		// The gate takes U+0085, U+2028 or U+2029 as an escape in double quotes (the cases'
		// file has them so), which Helm reads as the character, and the chart writes as it
		// is: the ConfigMap's YAML broke. The chart refuses it.
		taken := tc.taken && !strings.ContainsAny(tc.value, "\u0085\u2028\u2029")
		switch {
		case taken && err != nil:
			t.Errorf("rulesTeam %q, which the gate takes: %v; want it rendered", tc.value, err)
		case taken:
			// What the chart renders, not only the value, is what the gates read.
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(renderedRulesFile(t, r)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "rules", "check", path)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("rulesTeam %q: gate rules check of the rendered file: %v\n%s", tc.value, err, out)
			}
		case err == nil || !strings.Contains(err.Error(), "rulesTeam"):
			t.Errorf("rulesTeam %q, which the gate refuses in the file the chart renders: %v; want it refused, naming rulesTeam", tc.value, err)
		}
	}
	r, err := render(t, mergeValues(base, mustParse(t, rule+"rulesTeam: json:team_id\n")), capabilities())
	if err != nil {
		t.Fatalf("render of a rule with rulesTeam json:team_id: %v", err)
	}
	found := false
	for _, f := range r.files {
		found = found || strings.Contains(f, "rules.yaml:") && strings.Contains(f, "team: json:team_id")
	}
	if !found {
		t.Error("no rules ConfigMap with team: json:team_id")
	}
}

// teamCase is a line of testdata/rulesteam-cases.txt: a rules file's team: and whether
// the gate takes it.
type teamCase struct {
	value string
	taken bool
}

// readTeamCases reads testdata/rulesteam-cases.txt.
func readTeamCases(t *testing.T) []teamCase {
	t.Helper()
	b, err := os.ReadFile("testdata/rulesteam-cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []teamCase
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verdict, quoted, ok := strings.Cut(line, "\t")
		v, err := strconv.Unquote(quoted)
		if !ok || err != nil || verdict != "taken" && verdict != "refused" {
			t.Fatalf("rulesteam-cases.txt: %q: want taken or refused, a tab, a quoted value", line)
		}
		out = append(out, teamCase{v, verdict == "taken"})
	}
	if len(out) < 10 {
		t.Fatalf("rulesteam-cases.txt: %d cases", len(out))
	}
	return out
}

// TestRulesAdaptiveDurationsAsTheGateChecksThem: with rules, GATE_WINDOW is unset and the
// gate checks limit.adaptive's halfLife, minHistory and maxSpike against each adaptive
// rule's first window as it reads the file, and only maxSpike's 1h to 168h otherwise. The
// chart checked them against the gate's default window (60s): it rendered durations too
// short for an adaptive rule of 10m, a file every pod then refused at start, and refused
// ones a rule of 10s or a file with no adaptive rule takes. Each case is given to `gate
// rules check` too, with those variables set, so that the two cannot drift apart.
func TestRulesAdaptiveDurationsAsTheGateChecksThem(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	base := readValues(t, "testdata/defaults.yaml")
	const (
		static  = "[{name: a, key: 'json:team_id', limits: ['1m:10']}]"
		a10s    = "[{name: a, key: 'json:team_id', limits: ['10s:10'], threshold_mode: adaptive}]"
		a10m    = "[{name: a, key: 'json:team_id', limits: ['10m:10', '1h:100'], threshold_mode: adaptive}]"
		a10s15m = "[{name: a, key: 'json:team_id', limits: ['10s:10'], threshold_mode: adaptive}, {name: b, key: 'json:token', limits: ['15m:10'], threshold_mode: adaptive}]"
	)
	for _, tc := range []struct {
		name, rules string
		adaptive    map[string]string // limit.adaptive value: its GATE_ADAPTIVE_ variable
		want        string            // "" = taken; else a part of the chart's refusal
	}{
		{"defaults, rule of 10m", a10m, nil, ""},
		{"maxSpike 1h1m, rule of 10s", a10s, map[string]string{"maxSpike": "1h1m"}, ""},
		{"maxSpike 1h2m, rule of 10m", a10m, map[string]string{"maxSpike": "1h2m"}, "limit.adaptive.maxSpike (1h2m)"},
		{"maxSpike 1h20m, rule of 10m", a10m, map[string]string{"maxSpike": "1h20m"}, ""},
		{"maxSpike 1h20m, rules of 10s and 15m", a10s15m, map[string]string{"maxSpike": "1h20m"}, `rule "b"`},
		{"halfLife 5m, rule of 10m", a10m, map[string]string{"halfLife": "5m"}, "limit.adaptive.halfLife (5m)"},
		{"halfLife 10m, rule of 10m", a10m, map[string]string{"halfLife": "10m"}, ""},
		{"minHistory 5m, rule of 10m", a10m, map[string]string{"minHistory": "5m"}, "limit.adaptive.minHistory (5m)"},
		{"minHistory 30s, no adaptive rule", static, map[string]string{"minHistory": "30s"}, ""},
		{"halfLife 30s, no adaptive rule", static, map[string]string{"halfLife": "30s"}, ""},
		{"maxSpike 59m, no adaptive rule", static, map[string]string{"maxSpike": "59m"}, "limit.adaptive.maxSpike (59m)"},
		{"maxSpike 169h, no adaptive rule", static, map[string]string{"maxSpike": "169h"}, "limit.adaptive.maxSpike (169h)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := "rules: " + tc.rules + "\n"
			env := []string{"PATH=" + os.Getenv("PATH")}
			if len(tc.adaptive) > 0 {
				values += "limit: {adaptive: {"
				for k, v := range tc.adaptive {
					values += k + ": " + v + ", "
					name := map[string]string{"halfLife": "HALF_LIFE", "minHistory": "MIN_HISTORY", "maxSpike": "MAX_SPIKE"}[k]
					env = append(env, "GATE_ADAPTIVE_"+name+"="+v)
				}
				values += "}}\n"
			}
			_, rerr := render(t, mergeValues(base, mustParse(t, values)), capabilities())
			if tc.want == "" {
				if rerr != nil {
					t.Errorf("render: %v; want it rendered, as the gate takes it", rerr)
				}
			} else if rerr == nil || !strings.Contains(rerr.Error(), tc.want) {
				t.Errorf("render: %v; want it refused, saying %q (the gate refuses it at start)", rerr, tc.want)
			}
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte("rules: "+tc.rules+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "rules", "check", path)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); (err == nil) != (tc.want == "") {
				t.Errorf("gate rules check with %v: %v; the case says the gate %s it:\n%s", env[1:], err, map[bool]string{true: "takes", false: "refuses"}[tc.want == ""], out)
			}
		})
	}
}

// TestRulesTeamRefusedForAnOldImageTag: the rules file's team: is newer than the gate of
// 0.8.0, which refuses the file with it. The chart refused rulesTeam with the appVersion's
// image (0.8.0) but rendered it for an image.tag naming that same gate, or an older one
// (image.tag: 0.8.0, pinned as many pin the tag they run): every pod refused the file at
// start. A tag of another form, or a digest, is taken to name a gate that has it.
func TestRulesTeamRefusedForAnOldImageTag(t *testing.T) {
	base := mergeValues(readValues(t, "testdata/defaults.yaml"),
		mustParse(t, "rules:\n  - {name: team, key: json:team_id, limits: ['1m:10']}\nrulesTeam: json:team_id\n"))
	for _, tc := range []struct {
		image string
		ok    bool
	}{
		{"{tag: '0.8.0'}", false},
		{"{tag: v0.8.0}", false},
		{"{tag: '0.7.1'}", false},
		{"{tag: '0.8.1'}", true},
		{"{tag: v0.9.0}", true},
		{"{tag: next}", true},
		{"{tag: '0.8.0', digest: 'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'}", true},
	} {
		_, err := render(t, mergeValues(base, mustParse(t, "image: "+tc.image+"\n")), capabilities())
		switch {
		case tc.ok && err != nil:
			t.Errorf("image %s: %v; want rulesTeam rendered", tc.image, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "rulesTeam")):
			t.Errorf("image %s: %v; want rulesTeam refused, as that gate refuses the file with team:", tc.image, err)
		}
	}
}

// TestRulesMaxEventAgeAgainstTheRulesWindows: under limit.clock event the gate holds
// GATE_MAX_EVENT_AGE to 1048576 of each window it keeps, a rule's as much as its default
// window's (60s, GATE_WINDOW being unset under rules): the chart measured it against the
// 60s alone, and rendered an age a rule of 10s is refused (3000h), every pod then refusing
// the file at start. Each case is given to `gate rules check` too.
func TestRulesMaxEventAgeAgainstTheRulesWindows(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		name, rules, age string
		want             string // "" = taken; else a part of the chart's refusal
	}{
		{"3000h, a rule of 10s", "[{name: a, key: 'json:team_id', limits: ['10s:10']}]", "3000h", `rule "a"'s window 10s`},
		{"3000h, a rule's second limit of 10s", "[{name: a, key: 'json:team_id', limits: ['1m:10']}, {name: b, key: 'json:token', limits: ['1h:100', '10s:10']}]", "3000h", `rule "b"'s window 10s`},
		{"2912h, a rule of 10s", "[{name: a, key: 'json:team_id', limits: ['10s:10']}]", "2912h", ""},
		{"3000h, a rule of 1m", "[{name: a, key: 'json:team_id', limits: ['1m:10']}]", "3000h", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := "rules: " + tc.rules + "\nlimit: {clock: event, maxEventAge: " + tc.age + "}\n"
			_, rerr := render(t, mergeValues(base, mustParse(t, values)), capabilities())
			if tc.want == "" {
				if rerr != nil {
					t.Errorf("render: %v; want it rendered, as the gate takes it", rerr)
				}
			} else if rerr == nil || !strings.Contains(rerr.Error(), tc.want) {
				t.Errorf("render: %v; want it refused, saying %q (the gate refuses the rules file at start)", rerr, tc.want)
			}
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte("rules: "+tc.rules+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "rules", "check", path)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GATE_CLOCK=event", "GATE_MAX_EVENT_AGE=" + tc.age}
			if out, err := cmd.CombinedOutput(); (err == nil) != (tc.want == "") {
				t.Errorf("gate rules check: %v; the case says the gate %s it:\n%s", err, map[bool]string{true: "takes", false: "refuses"}[tc.want == ""], out)
			}
		})
	}
}
