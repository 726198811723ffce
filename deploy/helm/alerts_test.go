package helm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// metricsFile lists the metric names a gate exports. The root module's
// TestMetricNamesFile (cmd/gate/alerts_test.go) checks it against a running gate's
// /metrics and rewrites it with -update-metric-names.
const metricsFile = "testdata/metrics.txt"

// externalMetrics are the series the alerts read that the gate does not export.
var externalMetrics = map[string]string{
	"up":                    "Prometheus' own, one per scrape target",
	"kube_pod_status_ready": "kube-state-metrics",
	"kube_pod_status_phase": "kube-state-metrics",
	"kube_deployment_status_replicas_unavailable": "kube-state-metrics",
}

var exportedMetrics = sync.OnceValues(func() (map[string]bool, error) {
	b, err := os.ReadFile(metricsFile)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			names[l] = true
		}
	}
	if len(names) < 50 {
		return nil, fmt.Errorf("%s lists only %d names", metricsFile, len(names))
	}
	return names, nil
})

func mustExportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m, err := exportedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr and returns the metric names its selectors use.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// checkNames reports every metric name of expr that is neither exported by the gate nor
// one of externalMetrics (when external is set).
func checkNames(t *testing.T, where, expr string, external bool) {
	t.Helper()
	names, err := metricNames(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	if len(names) == 0 {
		t.Errorf("%s: %q reads no metric", where, expr)
	}
	exported := mustExportedMetrics(t)
	for _, n := range names {
		if _, ok := externalMetrics[n]; ok && external {
			continue
		}
		if !exported[n] {
			t.Errorf("%s: %q reads %q, which the gate does not export (%s)", where, expr, n, metricsFile)
		}
	}
}

// runbookAnchors returns the anchors GitHub gives the headings of docs/operations.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	anchors := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	inFence := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return anchors
}

// promRule renders vals and returns the PrometheusRule's spec as YAML.
func promRule(t *testing.T, vals map[string]any) (*unstructured.Unstructured, []byte) {
	t.Helper()
	objs, err := decode(mustRender(t, vals, capabilities(prometheusOperator...)))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.custom["PrometheusRule"]) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(objs.custom["PrometheusRule"]))
	}
	u := objs.custom["PrometheusRule"][0]
	spec, err := yaml.Marshal(u.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return u, spec
}

// allAlerts are the alerts the chart defines, each on by default.
var allAlerts = []string{"GateDown", "GateNotReady", "GateReplicasUnavailable", "GateStalled", "GateConsumerLagGrowing", "GateRedisErrors",
	"GateRedisRefusingWrites", "GateRedisEvictingKeys", "GateTickSlow", "GateClockSkew", "GatePartitionStopped", "GateRecordsSkipped", "GateInputRecordsLost",
	"GateFetchHeldByCommits", "GateFetchErrors",
	"GateDeadLetterRateHigh", "GateOverflowShareJump", "GateLimiterCacheNearCapacity", "GateLimiterCacheOverfull", "GateTeamRotatingIdentities", "GateLimiterPendingWritesNearCap",
	"GateLimiterCountsDropped", "GateTransactionsAborting", "GateTransactionRecoveries", "GateOverridesStale", "GateOverridesNeverRead",
	"GateOverridesHashMissing", "GateOverridesVersionRegressed", "GateRuleTopicMissing", "GateRulesFileInvalid", "GateFleetLimitsDisagree", "GateRedisLostAcknowledgedWrites", "GateRedisPrimarySwitched",
	"GateTLSFilesRefused", "GateTLSClientCertExpiring", "GateFleetAbsent"}

// TestPrometheusRuleParses renders the alerts with the chart's defaults and with
// testdata/operations.yaml, and checks them as Prometheus would load them (rulefmt: the
// rule file's format, every expression parsed by the PromQL parser, every annotation
// template parsed), then that each alert has a severity, a summary, a description naming
// where it applies, a runbook_url whose anchor is a heading of docs/operations.md, and
// reads only metrics the gate exports.
func TestPrometheusRuleParses(t *testing.T) {
	anchors := runbookAnchors(t)
	for _, tc := range []struct {
		name     string
		vals     map[string]any
		base     string
		want     []string
		labels   map[string]string // on every alert
		selector string            // in every gate metric's selector
	}{
		{
			name: "defaults",
			vals: mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}")),
			base: "https://github.com/capturegate/gate/blob/main/docs/operations.md",
			want: allAlerts, selector: `namespace="ingest", pod=~"gate-capture-gate-[a-z0-9]+-[a-z0-9]{5}"`,
		},
		{
			name:   "operations",
			vals:   readValues(t, "testdata/operations.yaml"),
			base:   "https://git.example.com/mirror/gate/blob/v0.1.0/docs/operations.md",
			want:   slices.DeleteFunc(slices.Clone(allAlerts), func(s string) bool { return s == "GateRedisPrimarySwitched" }),
			labels: map[string]string{"team": "ingest"}, selector: `namespace="ingest", job="ingest/gate-capture-gate"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, spec := promRule(t, tc.vals)
			groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
			for _, err := range errs {
				t.Errorf("rulefmt: %v", err)
			}
			if t.Failed() {
				t.Fatalf("rules:\n%s", spec)
			}
			if tc.name == "operations" && u.GetLabels()["release"] != "prometheus" {
				t.Errorf("PrometheusRule labels %v lack additionalLabels release=prometheus", u.GetLabels())
			}
			var got []string
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					got = append(got, r.Alert)
					where := r.Alert
					if sev := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, sev) {
						t.Errorf("%s: severity %q", where, sev)
					}
					for k, v := range tc.labels {
						if r.Labels[k] != v {
							t.Errorf("%s: label %s = %q, want %q", where, k, r.Labels[k], v)
						}
					}
					if r.Annotations["summary"] == "" {
						t.Errorf("%s: no summary", where)
					}
					if d := r.Annotations["description"]; !strings.Contains(d, "$labels.pod") && !strings.Contains(d, "$labels.namespace") {
						t.Errorf("%s: description %q names neither the gate nor the namespace", where, d)
					}
					base, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "#")
					if !ok || base != tc.base || !anchors[anchor] {
						t.Errorf("%s: runbook_url %q: want %s#<a heading of docs/operations.md>", where, r.Annotations["runbook_url"], tc.base)
					}
					checkNames(t, where, r.Expr, true)
					// The release, on every alert: two releases in one namespace fired
					// alerts of the same labels where summed by namespace.
					if r.Labels["capture_gate"] != u.GetName() {
						t.Errorf("%s: label capture_gate = %q, want the release's full name %q", where, r.Labels["capture_gate"], u.GetName())
					}
					if r.Alert != "GateNotReady" && r.Alert != "GateReplicasUnavailable" && !strings.Contains(r.Expr, tc.selector) {
						t.Errorf("%s: %q does not select the release's gates with %s", where, r.Expr, tc.selector)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("alerts %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestPrometheusRuleThresholds: the thresholds and durations set in values reach the
// rules, including those scaled by other values.
func TestPrometheusRuleThresholds(t *testing.T) {
	_, spec := promRule(t, readValues(t, "testdata/operations.yaml"))
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `json:"alert"`
				Expr   string            `json:"expr"`
				For    string            `json:"for"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(spec, &rules); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, r := range rules.Groups[0].Rules {
		byName[r.Alert] = i
	}
	for _, tc := range []struct{ alert, exprSuffix, for_, severity string }{
		{"GateConsumerLagGrowing", "> 250000) and (max by (namespace, partition) (deriv(gate_partition_lag_records{namespace=\"ingest\", job=\"ingest/gate-capture-gate\"}[15m])) > 0)", "30m", "critical"},
		{"GateTickSlow", "> 0.5", "5m", "warning"},                       // 0.5 × sync.tickInterval (1s)
		{"GateLimiterCacheNearCapacity", "> 270000", "15m", "warning"},   // 0.9 × limit.cacheCapacity
		{"GateLimiterPendingWritesNearCap", "> 500000", "5m", "warning"}, // 0.5 × sync.maxPendingWrites
		{"GateOverflowShareJump", "> 0.3", "1h", "info"},
		{"GatePartitionStopped", "> 0", "", "critical"}, // for: 0s is left out
	} {
		i, ok := byName[tc.alert]
		if !ok {
			t.Errorf("%s not rendered", tc.alert)
			continue
		}
		r := rules.Groups[0].Rules[i]
		if !strings.HasSuffix(r.Expr, tc.exprSuffix) || r.For != tc.for_ || r.Labels["severity"] != tc.severity {
			t.Errorf("%s: expr %q for %q severity %q; want expr ending %q, for %q, severity %q", tc.alert, r.Expr, r.For, r.Labels["severity"], tc.exprSuffix, tc.for_, tc.severity)
		}
	}
}

// TestClockSkewSaysWhichClock: GateClockSkew's description names the clock the offset is
// measured against in every mode: in cluster mode the primary holding the {prefix}:live
// key, which the clock check asks TIME (internal/tick clockSource), not "the first
// Redis instance", which a cluster has none of.
func TestClockSkewSaysWhichClock(t *testing.T) {
	_, spec := promRule(t, readValues(t, "testdata/operations.yaml"))
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(spec, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "GateClockSkew" {
				continue
			}
			if d := r.Annotations["description"]; !strings.Contains(d, "first instance") || !strings.Contains(d, "in cluster mode, of the primary holding the {prefix}:live key") {
				t.Errorf("GateClockSkew's description %q does not name the first instance's clock and, in cluster mode, that of the {prefix}:live key's primary", d)
			}
			return
		}
	}
	t.Fatal("GateClockSkew not rendered")
}

// TestPrometheusRuleNeedsItsAPI: like the monitors (TestMonitorsNeedTheirAPI), the rule
// is rendered when enabled and the API exists or it is forced, and enabled without the API
// the render fails; an unknown alert name or severity is refused.
func TestPrometheusRuleNeedsItsAPI(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		name   string
		values string
		caps   []string
		want   bool
	}{
		{"disabled", "prometheusRule: {enabled: false}", prometheusOperator, false},
		{"enabled, API present", "prometheusRule: {enabled: true}", prometheusOperator, true},
		{"enabled, no API", "prometheusRule: {enabled: true}", nil, false},
		{"forced, no API", "prometheusRule: {enabled: true, force: true}", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(t, mergeValues(base, mustParse(t, tc.values)), capabilities(tc.caps...))
			if tc.name == "enabled, no API" {
				if want := "prometheusRule.enabled is true but the cluster serves no monitoring.coreos.com/v1 PrometheusRule"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want one containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decode(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(objs.custom["PrometheusRule"]) == 1; got != tc.want {
				t.Errorf("PrometheusRule rendered: %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{
		"prometheusRule: {alerts: {GateNoSuchAlert: {enabled: true, for: 5m, severity: warning}}}",
		"prometheusRule: {alerts: {GateDown: {enabled: true, for: 5m, severity: page}}}",
		"prometheusRule: {alerts: {GateStalled: {enabled: true, for: 5 minutes, severity: warning}}}",
		"prometheusRule: {runbookBaseUrl: 'https://example.com/ops.md#runbook'}",
	} {
		if _, err := render(t, mergeValues(base, mustParse(t, bad)), capabilities(prometheusOperator...)); err == nil {
			t.Errorf("%s: rendered, want a schema error", bad)
		}
	}
}

// grafanaVar is a Grafana variable in a query; in a range it stands for a duration.
var grafanaVar = regexp.MustCompile(`\$(__\w+|\{__\w+\})`)

// TestDashboardQueriesUseExportedMetrics parses every query of the Grafana dashboard
// (panel targets and template variables) and checks it reads only metrics the gate exports.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "grafana", "gate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*(.*?)\s*,\s*\w+\s*\)$`)
	n := 0
	check := func(where, q string) {
		n++
		q = grafanaVar.ReplaceAllString(q, "5m")
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		checkNames(t, where, q, false)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok && e != "" {
				check(path, e)
			}
			for k, sub := range v {
				walk(path+"/"+k, sub)
			}
		case []any:
			for i, sub := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), sub)
			}
		}
	}
	walk("", dash["panels"])
	if tmpl, ok := dash["templating"].(map[string]any); ok {
		list, _ := tmpl["list"].([]any)
		for _, v := range list {
			vm, _ := v.(map[string]any)
			if vm["type"] != "query" {
				continue
			}
			where := fmt.Sprintf("templating/%v", vm["name"])
			switch q := vm["query"].(type) {
			case string:
				check(where, q)
			case map[string]any:
				if s, ok := q["query"].(string); ok {
					check(where, s)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d queries in the dashboard; is its format changed?", n)
	}
}

// k8sPodName is the name Kubernetes gives a pod of Deployment deploy whose pod template
// hashes to hash: the ReplicaSet is deploy-hash, its pods' generateName is that and "-",
// and the API server cuts a generateName to 58 characters before it appends 5 random ones
// (k8s.io/apiserver/pkg/storage/names), so that a pod name never exceeds 63.
func k8sPodName(deploy, hash, random string) string {
	base := deploy + "-" + hash + "-"
	return base[:min(len(base), 58)] + random
}

// TestAlertsSelectLongNamedPods: the alerts' default selector picks the release's pods
// by name. A full name of up to 63 characters is allowed, but past 46 the pod names
// Kubernetes generates are cut (k8sPodName): with a pattern that wants both the
// ReplicaSet's hash and the random suffix after their dashes, every alert matched no pod
// and none could fire. Where no name is cut, another release's pods stay unmatched.
func TestAlertsSelectLongNamedPods(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	full := "ingest-capture-gate-" + strings.Repeat("fleet", 9) // 65 characters
	for _, n := range []int{17, 46, 47, 50, 56, 57, 58, 63} {
		name := full[:n]
		vals := mergeValues(base, mustParse(t, fmt.Sprintf("fullnameOverride: %s\nprometheusRule: {enabled: true}", name)))
		objs := renderObjects(t, vals, prometheusOperator...)
		deploy := objs.typed["Deployment"][0].(*appsv1.Deployment).Name
		var pods []string
		for _, hash := range []string{"7d9c5b8f6d", "5f4b9c7d8"} { // pod-template-hash: 9 or 10 characters
			pods = append(pods, k8sPodName(deploy, hash, "x2k9p"))
		}
		other := k8sPodName(deploy+"-canary", "7d9c5b8f6d", "x2k9p") // another release's pod
		for _, alert := range []string{"GateDown", "GateNotReady", "GateStalled"} {
			e, err := promql.ParseExpr(alertExpr(t, vals, alert))
			if err != nil {
				t.Fatal(err)
			}
			podMatchers := 0
			parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
				vs, ok := node.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				for _, m := range vs.LabelMatchers {
					if m.Name != "pod" {
						continue
					}
					podMatchers++
					for _, pod := range pods {
						if !m.Matches(pod) {
							t.Errorf("full name %s (%d characters): %s's %s does not match its pod %s", deploy, len(deploy), alert, m, pod)
						}
					}
					if len(other) < 63 && m.Matches(other) { // neither name cut

						t.Errorf("full name %s: %s's %s matches %s, another release's pod", deploy, alert, m, other)
					}
				}
				return nil
			})
			if podMatchers == 0 {
				t.Errorf("full name %s: %s selects no pod: nothing checked", deploy, alert)
			}
		}
	}
}

// TestAlertsSkipTheHelmTestPod: the `helm test` pod, <fullname>-test-readyz, is no gate.
// A failed test leaves it (its hook-delete-policy deletes it only on success), Failed and
// never ready, and kube-state-metrics goes on exporting kube_pod_status_ready for it: a
// pod pattern that takes any two dash-separated words after the full name selected it,
// and GateNotReady fired for it until someone deleted the pod. A gate's pod ends in the 5
// random characters the API server appends to its ReplicaSet's name.
func TestAlertsSkipTheHelmTestPod(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	full := "ingest-capture-gate-" + strings.Repeat("fleet", 9) // 65 characters
	for _, n := range []int{17, 46, 47, 50, 56, 57, 58, 63} {
		vals := mergeValues(base, mustParse(t, fmt.Sprintf("fullnameOverride: %s\nprometheusRule: {enabled: true}", full[:n])))
		objs := renderObjects(t, vals, prometheusOperator...)
		if len(objs.typed["Pod"]) != 1 {
			t.Fatalf("rendered %v: want the helm test pod", objs.kinds())
		}
		testPod := objs.typed["Pod"][0].(*corev1.Pod).Name
		deploy := objs.typed["Deployment"][0].(*appsv1.Deployment).Name
		gatePod := k8sPodName(deploy, "7d9c5b8f6d", "x2k9p")
		for _, alert := range []string{"GateDown", "GateNotReady", "GateStalled"} {
			e, err := promql.ParseExpr(alertExpr(t, vals, alert))
			if err != nil {
				t.Fatal(err)
			}
			podMatchers := 0
			parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
				if vs, ok := node.(*parser.VectorSelector); ok {
					for _, m := range vs.LabelMatchers {
						if m.Name != "pod" {
							continue
						}
						podMatchers++
						if m.Matches(testPod) {
							t.Errorf("full name %s (%d characters): %s's %s matches the helm test pod %s", deploy, len(deploy), alert, m, testPod)
						}
						if !m.Matches(gatePod) {
							t.Errorf("full name %s (%d characters): %s's %s does not match its pod %s", deploy, len(deploy), alert, m, gatePod)
						}
					}
				}
				return nil
			})
			if podMatchers == 0 {
				t.Errorf("full name %s: %s selects no pod: the helm test pod is not checked", deploy, alert)
			}
		}
	}
}

// TestRunbookLogCommandsReadWholeLogs: with a label selector, `kubectl logs` prints only
// the last 10 lines of each pod (its --tail defaults to 10 then, -1 without one): a
// runbook step that greps the gates' logs for the one line a condition wrote must ask for
// whole logs, or it finds nothing on a gate that logged ten lines since.
func TestRunbookLogCommandsReadWholeLogs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A command may wrap over lines in the Markdown: join them.
	doc := strings.Join(strings.Fields(string(b)), " ")
	cmds := regexp.MustCompile("`(kubectl logs [^`]*)`").FindAllStringSubmatch(doc, -1)
	selectors := 0
	for _, m := range cmds {
		cmd := m[1]
		if !strings.Contains(cmd, " -l ") && !strings.Contains(cmd, "--selector") {
			continue
		}
		selectors++
		if !strings.Contains(cmd, "--tail=-1") {
			t.Errorf("runbook command %q reads only the last 10 lines of each pod: add --tail=-1", cmd)
		}
	}
	if selectors == 0 {
		t.Fatal("no `kubectl logs -l` command in docs/operations.md: nothing checked")
	}
}

// runbookSections returns the text of each heading's section of docs/operations.md (to
// the next heading), by the anchor GitHub gives the heading.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	secs := map[string]string{}
	cur := ""
	inFence := false
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(l, "#") {
			h := strings.TrimSpace(strings.TrimLeft(l, "#"))
			cur = strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		}
		secs[cur] += l
	}
	return secs
}

// TestRunbookSectionsNameTheirAlerts: the runbook entry an alert's runbook_url opens names
// the alert, so that whoever is paged finds what fired and what it means where they land.
// Nine of the chart's alerts led to entries that never said their name, and
// GateRedisLostAcknowledgedWrites, which any topology fires, to one titled for Sentinel.
func TestRunbookSectionsNameTheirAlerts(t *testing.T) {
	secs := runbookSections(t)
	_, spec := promRule(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}")))
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			_, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
			sec, ok := secs[anchor]
			switch {
			case !ok:
				t.Errorf("%s: runbook anchor %q is no heading of docs/operations.md", r.Alert, anchor)
			case !strings.Contains(sec, "`"+r.Alert+"`"):
				t.Errorf("%s: its runbook entry (#%s) never names it", r.Alert, anchor)
			}
		}
	}
	if n != len(allAlerts) {
		t.Errorf("%d alerts rendered, want %d", n, len(allAlerts))
	}
	if sec := secs["redis-lost-acknowledged-writes-or-its-primary-switched"]; !strings.Contains(sec, "Standalone and Cluster") {
		t.Error("the lost-writes entry says nothing of standalone and Cluster Redis")
	}
}
