package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// gateDefaultTexts are the texts that may state a gate variable's default to a chart
// user: the chart's README and values.yaml, and the gate's docs.
var gateDefaultTexts = []string{
	filepath.Join(chartDir, "README.md"), filepath.Join(chartDir, "values.yaml"),
	filepath.Join("..", "..", "docs", "*.md"),
}

var (
	// "GATE_TEAM_API defaults to false", anywhere.
	defaultsTo = regexp.MustCompile("`?(GATE_[A-Z0-9_]+)`? defaults to `?([^\\s,;:)`]+)`?")
	// "the gate's own default is on", in the comment of a value whose variable the
	// comment names first ("GATE_TEAM_API: serve ...").
	gatesDefaultIs = regexp.MustCompile("(?i)the gate's (?:own )?default(?: is|:)? `?(on|off|[^\\s,;:)`]+)`?")
	firstVar       = regexp.MustCompile(`^(GATE_[A-Z0-9_]+)\b`)
)

// TestChartStatesTheGatesDefaults: where the chart's README, values.yaml or the docs state
// the gate's default of a variable ("GATE_X defaults to V", or "the gate's default is V"
// in the comment of the value that sets GATE_X), it is the default `gate env` gives, so
// that a comment cannot say the gate serves the team view by default once it does not.
func TestChartStatesTheGatesDefaults(t *testing.T) {
	known := map[string]string{}
	for _, v := range mustGateEnv(t) {
		known[v.name] = v.def
	}
	check := func(where, name, stated string) {
		t.Helper()
		def, ok := known[name]
		if !ok {
			t.Errorf("%s: %s is no variable the gate knows", where, name)
			return
		}
		v := strings.TrimSuffix(stated, ".")
		switch strings.ToLower(v) {
		case "on":
			v = "true"
		case "off":
			v = "false"
		}
		if !sameSetting(v, def) {
			t.Errorf("%s: says %s's default is %q; the gate's is %q", where, name, stated, def)
		}
	}
	n := 0
	for _, glob := range gateDefaultTexts {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s matches no file (%v)", glob, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// Lines joined, YAML comment markers dropped: a statement may be wrapped.
			text := strings.Join(strings.Fields(regexp.MustCompile(`(?m)^\s*#( --)?`).ReplaceAllString(string(b), "")), " ")
			for _, m := range defaultsTo.FindAllStringSubmatch(text, -1) {
				n++
				check(f+": "+m[0], m[1], m[2])
			}
		}
	}
	for _, c := range valueComments(t) {
		v := firstVar.FindStringSubmatch(c)
		if v == nil {
			continue
		}
		for _, m := range gatesDefaultIs.FindAllStringSubmatch(c, -1) {
			n++
			check("values.yaml, the comment of "+v[1]+": "+m[0], v[1], m[1])
		}
	}
	if n == 0 {
		t.Error("found no statement of a gate default; has their wording changed?")
	}
}

// TestLargeCountsRenderAsIntegers: Helm reads a values file's numbers as float64, which
// Go prints in exponent form from 1e+06 on ("1e+06"); every count the gate reads as an
// integer must go through int64 before it is quoted, or a plausible value (a million
// outcome rows, two million records per transaction) renders as a string the gate
// refuses at start.
func TestLargeCountsRenderAsIntegers(t *testing.T) {
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, `
outcomes: {topic: events_outcomes, maxRows: 1000000}
kafka: {delivery: exactly-once, transactionMaxRecords: 2000000}
`))
	d := renderDeployment(t, vals, capabilities())
	env := envOf(d.Spec.Template.Spec.Containers[0])
	for name, want := range map[string]string{
		"GATE_OUTCOMES_MAX_ROWS":       "1000000",
		"GATE_TRANSACTION_MAX_RECORDS": "2000000",
	} {
		if got := env[name].Value; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "GATE_") && strings.Contains(e.Value, "e+") {
			t.Errorf("%s = %q: a number in exponent form", e.Name, e.Value)
		}
	}
}
