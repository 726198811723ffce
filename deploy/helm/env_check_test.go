package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// gateBuild is the root module's cmd/gate, built once per test binary (gateBinary) in a
// directory TestMain removes.
var gateBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// gateBinary builds the root module's cmd/gate once per test binary, for the tests that
// run it on what the chart renders.
func gateBinary() (string, error) {
	gateBuild.once.Do(func() {
		if gateBuild.dir, gateBuild.err = os.MkdirTemp("", "chart-gate-"); gateBuild.err != nil {
			return
		}
		bin := filepath.Join(gateBuild.dir, "gate")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/gate")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			gateBuild.err = fmt.Errorf("go build ./cmd/gate: %v\n%s", err, out)
			return
		}
		gateBuild.bin = bin
	})
	return gateBuild.bin, gateBuild.err
}

// TestMain removes the gate binary the tests built: each run left 39 MB in the
// temporary directory.
func TestMain(m *testing.M) {
	code := m.Run()
	if gateBuild.dir != "" {
		_ = os.RemoveAll(gateBuild.dir)
	}
	os.Exit(code)
}

// TestRenderedEnvLoads runs `gate env -check` on the environment each value set gives the
// gate's container: a value set the gate would refuse at start (GATE_FORCE_OVERFLOW's
// one-part keys beside a two-field GATE_KEY_FROM, say: monitoring.yaml's were) renders
// and installs, and its pods crash-loop. Values taken from a Secret or the pod are given
// placeholders: the gate checks their form only where they have one. A value's $(NAME)
// is expanded as the kubelet does, from the variables defined before it.
func TestRenderedEnvLoads(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range valueSets {
		t.Run(strings.TrimSuffix(vs.file, ".yaml"), func(t *testing.T) {
			d := renderDeployment(t, readValues(t, filepath.Join("testdata", vs.file)), capabilities(vs.caps...))
			if out, err := gateCheck(bin, d); err != nil {
				t.Errorf("gate env -check on %s's rendered environment: %v\n%s", vs.file, err, out)
			}
		})
	}
}

// gateCheck runs `gate env -check` (bin) on the GATE_ environment of d's gate container,
// as TestRenderedEnvLoads describes, and returns its output.
func gateCheck(bin string, d *appsv1.Deployment) (string, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATE_") {
			env = append(env, kv)
		}
	}
	defined := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		v := expandEnv(e.Value, defined)
		if e.ValueFrom != nil {
			v = "from-" + strings.ToLower(strings.ReplaceAll(e.Name, "_", "-")) // a pod's name, say
		}
		defined[e.Name] = v
		if strings.HasPrefix(e.Name, "GATE_") {
			env = append(env, e.Name+"="+v)
		}
	}
	cmd := exec.Command(bin, "env", "-check")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// expandEnv expands v's $(NAME) references to variables defined before it, as the kubelet
// expands a container's env: $$ is a '$', and a reference to a name not defined stays as
// it is.
func expandEnv(v string, defined map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' || i+1 == len(v) {
			b.WriteByte(v[i])
			continue
		}
		switch v[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			if end := strings.IndexByte(v[i+2:], ')'); end >= 0 {
				name := v[i+2 : i+2+end]
				if val, ok := defined[name]; ok {
					b.WriteString(val)
				} else {
					b.WriteString(v[i : i+3+end])
				}
				i += 2 + end
				continue
			}
			b.WriteByte('$')
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// TestOutcomesIntervalAsGate: the chart renders an outcomes.interval exactly when the gate
// takes it as GATE_OUTCOMES_INTERVAL (from 1s to 1h, dividing an hour, in any form
// time.ParseDuration reads): the schema's list of 23 intervals refused 8s, 45s, 90s,
// 1.5s and 60s, all of which the gate takes.
func TestOutcomesIntervalAsGate(t *testing.T) {
	outcomesValueAsGate(t, "interval", "GATE_OUTCOMES_INTERVAL", []string{
		"1s", "1.5s", "8s", "45s", "60s", "1m", "90s", "1m30s", "2.5m", "1500ms", "3600s", "1h", "60m",
		"0.5s", "999ms", "7s", "50s", "61m", "2h", "1h0m0.000000001s",
	})
}

// TestOutcomesFlushIntervalAsGate: the chart renders an outcomes.flushInterval exactly
// when the gate takes it as GATE_OUTCOMES_FLUSH_INTERVAL (from 100ms to 10m).
func TestOutcomesFlushIntervalAsGate(t *testing.T) {
	outcomesValueAsGate(t, "flushInterval", "GATE_OUTCOMES_FLUSH_INTERVAL",
		[]string{"100ms", "0.1s", "10s", "1m", "10m", "600s", "99ms", "10m0.001s", "1h"})
}

// outcomesValueAsGate checks, for each of values, that the chart renders outcomes.KEY
// (with outcomes on) exactly when the gate's start-up check takes it as the variable
// name, and that the chart's refusal names outcomes.KEY and what it must be.
func outcomesValueAsGate(t *testing.T, key, name string, values []string) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	base := readValues(t, "testdata/defaults.yaml")
	base["outcomes"] = map[string]any{"topic": "events_outcomes"}
	d := renderDeployment(t, base, capabilities())
	for _, v := range values {
		t.Run(v, func(t *testing.T) {
			gd := d.DeepCopy()
			for i, e := range gd.Spec.Template.Spec.Containers[0].Env {
				if e.Name == name {
					gd.Spec.Template.Spec.Containers[0].Env[i].Value = v
				}
			}
			out, gateErr := gateCheck(bin, gd)
			vals := readValues(t, "testdata/defaults.yaml")
			vals["outcomes"] = map[string]any{"topic": "events_outcomes", key: v}
			_, chartErr := render(t, vals, capabilities())
			if (gateErr == nil) != (chartErr == nil) {
				t.Fatalf("the gate's check: %v %s\nthe chart's render: %v", gateErr, out, chartErr)
			}
			if chartErr != nil && !strings.Contains(chartErr.Error(), "outcomes."+key+" ("+v+") must be") {
				t.Fatalf("the chart's error %q does not name outcomes.%s (%s) and what it must be", chartErr, key, v)
			}
		})
	}
}
