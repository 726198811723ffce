package helm

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
)

// agreeCase is a value (YAML, merged over testdata/defaults.yaml) and whether the gate
// takes what the chart renders from it.
type agreeCase struct {
	name, values string
	ok           bool
}

// agreeCases are values where the schema, the templates and the gate's own checks of the
// variable they render must say the same.
var agreeCases = []agreeCase{
	// GATE_DIVERT_HOLD: unset (one window), or any Go duration of 0 or more (0 = no
	// hold); under the event clock only 0.
	{"divertHold unset", `limit: {divertHold: ""}`, true},
	{"divertHold 0", `limit: {divertHold: "0"}`, true},
	{"divertHold 0s", `limit: {divertHold: "0s"}`, true},
	{"divertHold 0ms", `limit: {divertHold: "0ms"}`, true},
	{"divertHold 0m0s", `limit: {divertHold: "0m0s"}`, true},
	{"divertHold 0.0s", `limit: {divertHold: "0.0s"}`, true},
	{"divertHold 90s", `limit: {divertHold: "90s"}`, true},
	{"divertHold 1m30s", `limit: {divertHold: "1m30s"}`, true},
	{"divertHold .5s", `limit: {divertHold: ".5s"}`, true},
	{"divertHold 0s event clock", `limit: {divertHold: "0s", clock: event}`, true},
	{"divertHold 0ms event clock", `limit: {divertHold: "0ms", clock: event}`, true},
	{"divertHold 1m event clock", `limit: {divertHold: "1m", clock: event}`, false},
	{"divertHold -1s", `limit: {divertHold: "-1s"}`, false},
	{"divertHold 5 (no unit)", `limit: {divertHold: "5"}`, false},
	{"divertHold abc", `limit: {divertHold: "abc"}`, false},
	// GATE_STALL_NOT_READY, GATE_STALL_RESTART: a duration, any zero one turning it off.
	{"stallNotReady 0s", `kafka: {stallNotReady: "0s", stallRestart: "0s"}`, true},
	{"stallNotReady 0", `kafka: {stallNotReady: "0", stallRestart: "0"}`, true},
	{"stallNotReady -1s", `kafka: {stallNotReady: "-1s"}`, false},
	// GATE_COLD_WRITE_INTERVAL: unset (once a window), 0 or a duration (at most the window).
	{"coldWriteInterval 30s", `sync: {coldWriteInterval: "30s"}`, true},
	{"coldWriteInterval 0", `sync: {coldWriteInterval: "0"}`, true},
	{"coldWriteInterval 0s", `sync: {coldWriteInterval: "0s"}`, true},
	{"coldWriteInterval 30 (no unit)", `sync: {coldWriteInterval: "30"}`, false},
	{"coldWriteInterval abc", `sync: {coldWriteInterval: "abc"}`, false},
	// GATE_THRESHOLD, GATE_ADAPTIVE_FLOOR, GATE_ADAPTIVE_CEILING: at most limit.MaxThreshold
	// (2^43-1).
	{"threshold at max", `limit: {threshold: 8796093022207}`, true},
	{"threshold over max", `limit: {threshold: 8796093022208}`, false},
	{"adaptive floor over max", `limit: {adaptive: {floor: 8796093022208}}`, false},
	{"adaptive ceiling over max", `limit: {adaptive: {ceiling: 8796093022208}}`, false},
	{"extra threshold over max", `limit: {extra: [{window: 1h, threshold: 8796093022208}]}`, false},
}

// TestChartAgreesWithGate: for each of agreeCases the chart (values.schema.json, then
// the templates' own checks) accepts the value exactly when the gate accepts the
// environment it renders. A value the chart takes and the gate refuses installs and
// crash-loops; one the chart refuses and the gate takes cannot be set. The gate's verdict
// is checked too (`gate env -check` on the environment rendered without the schema), so
// that a case's ok states what the gate does.
func TestChartAgreesWithGate(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range agreeCases {
		t.Run(tc.name, func(t *testing.T) {
			vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, tc.values))
			_, chartErr := render(t, vals, capabilities())
			switch {
			case tc.ok && chartErr != nil:
				t.Errorf("the gate takes %s; the chart refuses it: %v", tc.values, chartErr)
			case !tc.ok && chartErr == nil:
				t.Errorf("the gate refuses %s; the chart renders it (the pods would crash-loop)", tc.values)
			}
			// The gate's verdict, on what the templates render without the schema.
			d, tmplErr := renderWithoutSchema(t, vals)
			if tmplErr != nil {
				if tc.ok {
					t.Errorf("the templates refuse %s: %v", tc.values, tmplErr)
				}
				return // refused by the templates' own check: the gate never sees it
			}
			out, gateErr := gateCheck(bin, d)
			if tc.ok != (gateErr == nil) {
				t.Errorf("case says the gate %s %s, but gate env -check: %v\n%s", map[bool]string{true: "takes", false: "refuses"}[tc.ok], tc.values, gateErr, out)
			}
		})
	}
}

// renderWithoutSchema renders vals as `helm install --skip-schema-validation` would and
// returns the Deployment.
func renderWithoutSchema(t *testing.T, vals map[string]any) (*appsv1.Deployment, error) {
	t.Helper()
	c := mustChart(t)
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(c, vals, opts, capabilities(), true)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	r := rendered{files: map[string]string{}}
	for name, out := range files {
		if !strings.HasSuffix(name, "NOTES.txt") {
			r.files[name] = out
		}
	}
	objs, err := decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return objs.typed["Deployment"][0].(*appsv1.Deployment), nil
}
