package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "capture-gate"
	releaseName = "gate"
	namespace   = "ingest"
	kubeVersion = "v1.31.0"
)

// loadChart loads the chart once per test binary.
var loadChart = sync.OnceValues(func() (*chart.Chart, error) { return loader.Load(chartDir) })

func mustChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loadChart()
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// capabilities is a cluster of kubeVersion knowing client-go's built-in APIs plus the
// extra group/version and group/version/Kind entries given (as .Capabilities.APIVersions.Has
// sees them).
func capabilities(extra ...string) *chartutil.Capabilities {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: kubeVersion, Major: "1", Minor: "31"}
	caps.APIVersions = append(append(chartutil.VersionSet{}, chartutil.DefaultVersionSet...), extra...)
	return caps
}

// prometheusOperator is the API a cluster with the Prometheus Operator's CRDs serves.
var prometheusOperator = []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// kedaAPI is the API a cluster with KEDA serves (the part the chart uses).
var kedaAPI = []string{"keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject", "keda.sh/v1alpha1/TriggerAuthentication"}

// allAPIs is a cluster with both.
var allAPIs = append(append([]string{}, prometheusOperator...), kedaAPI...)

// readValues reads and merges values files the way `helm -f a.yaml -f b.yaml` does: later
// files win, maps merge key by key.
func readValues(t *testing.T, files ...string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := parseValues(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = mergeValues(out, v)
	}
	return out
}

func parseValues(b []byte) (map[string]any, error) {
	v := map[string]any{}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func mergeValues(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// rendered is one render of the chart: template file name -> output, NOTES.txt apart.
type rendered struct {
	files map[string]string
	notes string
}

// render renders the chart as `helm install --dry-run` would on a cluster with caps:
// values coalesced with the chart's defaults, checked against values.schema.json, then
// the templates run.
func render(t *testing.T, vals map[string]any, caps *chartutil.Capabilities) (rendered, error) {
	t.Helper()
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	return renderRelease(mustChart(t), vals, opts, caps)
}

// renderRelease is render of chart c as release opts: another name, an upgrade, a chart
// whose metadata a test changed.
func renderRelease(c *chart.Chart, vals map[string]any, opts chartutil.ReleaseOptions, caps *chartutil.Capabilities) (rendered, error) {
	top, err := chartutil.ToRenderValues(c, vals, opts, caps)
	if err != nil {
		return rendered{}, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return rendered{}, err
	}
	r := rendered{files: map[string]string{}}
	for name, out := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = out
			continue
		}
		r.files[name] = out
	}
	return r, nil
}

func mustRender(t *testing.T, vals map[string]any, caps *chartutil.Capabilities) rendered {
	t.Helper()
	r, err := render(t, vals, caps)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// manifest is one YAML document the chart rendered.
type manifest struct {
	source string // template file
	text   string
}

// manifests splits the render into documents, skipping empty ones, in a stable order.
func (r rendered) manifests() []manifest {
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []manifest
	for _, n := range names {
		if strings.HasPrefix(filepath.Base(n), "_") {
			continue
		}
		for _, doc := range docSep.Split(r.files[n], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			out = append(out, manifest{source: n, text: doc})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// strictDecoder decodes YAML into client-go's typed objects, failing on unknown or
// duplicate fields.
var strictDecoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// customKinds are the custom resources the chart may render, decoded as unstructured
// objects; each has its own check of the fields its controller requires.
var customKinds = map[string]bool{
	"keda.sh/v1alpha1/ScaledObject":           true,
	"monitoring.coreos.com/v1/PodMonitor":     true,
	"monitoring.coreos.com/v1/ServiceMonitor": true,
	"monitoring.coreos.com/v1/PrometheusRule": true,
}

// objects is a render decoded: typed objects by kind, custom resources as unstructured.
type objects struct {
	typed  map[string][]runtime.Object // kind -> objects
	custom map[string][]*unstructured.Unstructured
}

func (o objects) kinds() []string {
	var ks []string
	for k, v := range o.typed {
		for range v {
			ks = append(ks, k)
		}
	}
	for k, v := range o.custom {
		for range v {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// decode decodes every manifest strictly; a custom resource the chart is not known to
// render, or a typed object with an unknown field, is an error.
func decode(r rendered) (objects, error) {
	o := objects{typed: map[string][]runtime.Object{}, custom: map[string][]*unstructured.Unstructured{}}
	var errs []error
	for _, m := range r.manifests() {
		obj, gvk, err := strictDecoder.Decode([]byte(m.text), nil, nil)
		switch {
		case err == nil:
			o.typed[gvk.Kind] = append(o.typed[gvk.Kind], obj)
		case runtime.IsNotRegisteredError(err):
			u := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict([]byte(m.text), &u.Object); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.source, err))
				continue
			}
			key := u.GetAPIVersion() + "/" + u.GetKind()
			if !customKinds[key] {
				errs = append(errs, fmt.Errorf("%s: %s is neither in client-go's scheme nor a known custom resource", m.source, key))
				continue
			}
			o.custom[u.GetKind()] = append(o.custom[u.GetKind()], u)
		default:
			errs = append(errs, fmt.Errorf("%s: %w\n%s", m.source, err, m.text))
		}
	}
	return o, errors.Join(errs...)
}

// gateVar is one row of `gate env`.
type gateVar struct{ name, def string }

var envRow = regexp.MustCompile("^\\| `(GATE_[A-Z0-9_]+)` \\| (`([^`]*)`|\\*\\(empty\\)\\*) \\|")

// gateEnv runs `go run ./cmd/gate env` in the repository's root module and parses the
// variables and their defaults out of its Markdown table. Run once per test binary.
var gateEnv = sync.OnceValues(func() ([]gateVar, error) {
	cmd := exec.Command("go", "run", "./cmd/gate", "env")
	cmd.Dir = filepath.Join("..", "..")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go run ./cmd/gate env: %v\n%s", err, stderr.String())
	}
	var vars []gateVar
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := envRow.FindStringSubmatch(sc.Text()); m != nil {
			vars = append(vars, gateVar{name: m[1], def: m[3]})
		}
	}
	if len(vars) < 10 {
		return nil, fmt.Errorf("gate env printed %d variables; is the table's format changed?\n%s", len(vars), out)
	}
	return vars, nil
})

func mustGateEnv(t *testing.T) []gateVar {
	t.Helper()
	vars, err := gateEnv()
	if err != nil {
		t.Fatal(err)
	}
	return vars
}
