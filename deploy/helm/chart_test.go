package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// requiredVars are the GATE_ variables every render must set: where to read and write
// (brokers, the four topics), the consumer group the fleet shares, and the Redis
// instances that hold the fleet-wide counters. The gate has defaults for all of them, but
// its defaults (127.0.0.1, a group named capture-gate, ...) are those of a laptop; a
// fleet must state them, and two fleets must not share them by accident.
var requiredVars = []string{
	"GATE_KAFKA_BROKERS",
	"GATE_INPUT_TOPIC", "GATE_ACCEPTED_TOPIC", "GATE_OVERFLOW_TOPIC", "GATE_DEAD_LETTER_TOPIC",
	"GATE_GROUP_ID",
	"GATE_REDIS_URLS",
}

// secretVars may only be set from a Secret: never as a plain value (GATE_REDIS_URLS may
// be a plain value when none of its URLs holds a password).
var secretVars = []string{"GATE_KAFKA_SASL_PASSWORD", "GATE_REDIS_PASSWORD", "GATE_REDIS_SENTINEL_PASSWORD"}

// valueSet is one file of testdata/ and what its render must hold.
type valueSet struct {
	file     string
	caps     []string // APIs the cluster serves beyond the built-in ones
	kinds    []string // every object rendered, sorted
	replicas *int32   // Deployment.spec.replicas; nil when an autoscaler owns it
	grace    int64    // terminationGracePeriodSeconds
}

func ptr[T any](v T) *T { return &v }

var valueSets = []valueSet{
	{file: "defaults.yaml",
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](12), grace: 55},
	{file: "keda.yaml", caps: kedaAPI,
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "ScaledObject", "Service", "ServiceAccount"}, grace: 55},
	{file: "hpa.yaml",
		kinds: []string{"Deployment", "HorizontalPodAutoscaler", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, grace: 55},
	{file: "monitoring.yaml", caps: prometheusOperator,
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "PodMonitor", "Service", "ServiceAccount"}, replicas: ptr[int32](3), grace: 55},
	{file: "servicemonitor.yaml", // forced: no API
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount", "ServiceMonitor"}, replicas: ptr[int32](2), grace: 55},
	{file: "redis-cluster.yaml",
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](6), grace: 55},
	{file: "redis-sentinel.yaml",
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](6), grace: 55},
	{file: "stream-semantics.yaml",
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](4), grace: 55},
	{file: "operations.yaml", caps: prometheusOperator,
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "PodMonitor", "PrometheusRule", "Service", "ServiceAccount"}, replicas: ptr[int32](4), grace: 55},
	{file: "policy.yaml",
		kinds: []string{"Deployment", "NetworkPolicy", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](6), grace: 55},
	{file: "rules.yaml",
		kinds: []string{"ConfigMap", "Deployment", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"}, replicas: ptr[int32](8), grace: 55},
	{file: "tls-sasl.yaml", caps: kedaAPI,
		kinds: []string{"Deployment", "Pod", "PodDisruptionBudget", "ScaledObject", "Service", "ServiceAccount"}, grace: 90},
}

// TestValueSetsListed keeps the table above and testdata/ in step.
func TestValueSetsListed(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) < len(valueSets) {
		t.Fatalf("testdata/*.yaml: %d files for %d value sets (%v)", len(files), len(valueSets), err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(valueSets, func(v valueSet) bool { return v.file == filepath.Base(f) }) {
			t.Errorf("%s has no entry in valueSets", f)
		}
	}
}

// TestRender renders each value set, decodes every manifest strictly and checks the
// objects the chart promises.
func TestRender(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(strings.TrimSuffix(vs.file, ".yaml"), func(t *testing.T) {
			vals := readValues(t, filepath.Join("testdata", vs.file))
			r := mustRender(t, vals, capabilities(vs.caps...))
			objs, err := decode(r)
			if err != nil {
				t.Fatalf("strict decode:\n%v", err)
			}
			if got := objs.kinds(); !slices.Equal(got, vs.kinds) {
				t.Fatalf("rendered %v, want %v", got, vs.kinds)
			}
			if strings.TrimSpace(r.notes) == "" {
				t.Error("NOTES.txt rendered empty")
			}
			d := objs.typed["Deployment"][0].(*appsv1.Deployment)
			checkNotesCommands(t, r.notes, d)
			checkDeployment(t, d, vs)
			checkSelectors(t, d, objs)
			for _, o := range objs.typed["ServiceAccount"] {
				sa := o.(*corev1.ServiceAccount)
				if sa.Name != d.Spec.Template.Spec.ServiceAccountName {
					t.Errorf("ServiceAccount %s is not the pod's (%s)", sa.Name, d.Spec.Template.Spec.ServiceAccountName)
				}
				if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					t.Error("ServiceAccount automounts its token")
				}
			}
			for _, o := range objs.typed["PodDisruptionBudget"] {
				if mu := o.(*policyv1.PodDisruptionBudget).Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
					t.Errorf("PodDisruptionBudget maxUnavailable = %v, want 1", mu)
				}
			}
			partitions := int64(vals["scaling"].(map[string]any)["inputPartitions"].(float64))
			for _, o := range objs.typed["HorizontalPodAutoscaler"] {
				checkHPA(t, o.(*autoscalingv2.HorizontalPodAutoscaler), d.Name, partitions)
			}
			for _, u := range objs.custom["ScaledObject"] {
				checkScaledObject(t, u, d, partitions)
			}
			for _, u := range objs.custom["PodMonitor"] {
				checkMonitor(t, u, "podMetricsEndpoints", d.Spec.Selector.MatchLabels)
			}
			for _, u := range objs.custom["ServiceMonitor"] {
				svc := objs.typed["Service"][0].(*corev1.Service)
				checkMonitor(t, u, "endpoints", svc.Labels)
			}
		})
	}
}

// TestStrictDecoderCatchesFieldErrors shows the decoder is strict: a misspelt or
// misplaced field, which `helm lint` and a lenient decode let through, fails.
func TestStrictDecoderCatchesFieldErrors(t *testing.T) {
	r := mustRender(t, readValues(t, "testdata/defaults.yaml"), capabilities())
	for _, typo := range []struct{ from, to string }{
		{"  replicas: 12\n", "  replica: 12\n"},
		{"readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"},
		{"      automountServiceAccountToken: false\n", "      automountServiceAccountToken: false\n      automountServiceAccountToken: true\n"},
		{"containerPort: 8080", "containerPort: \"8080\""},
	} {
		bad := rendered{files: map[string]string{}}
		for n, s := range r.files {
			bad.files[n] = strings.Replace(s, typo.from, typo.to, 1)
		}
		if _, err := decode(bad); err == nil {
			t.Errorf("%q decoded without error", typo.to)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, vs valueSet) {
	t.Helper()
	spec := d.Spec.Template.Spec
	switch {
	case vs.replicas == nil && d.Spec.Replicas != nil:
		t.Errorf("replicas = %d with an autoscaler; want it left to the autoscaler", *d.Spec.Replicas)
	case vs.replicas != nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != *vs.replicas):
		t.Errorf("replicas = %v, want %d", d.Spec.Replicas, *vs.replicas)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != vs.grace {
		t.Errorf("terminationGracePeriodSeconds = %v, want %d", spec.TerminationGracePeriodSeconds, vs.grace)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("pod automounts the ServiceAccount token")
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Error("no topologySpreadConstraints")
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		if tsc.LabelSelector == nil || !subset(tsc.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("topology spread on %s does not select the pods", tsc.TopologyKey)
		}
	}
	if len(spec.Containers) == 0 || spec.Containers[0].Name != "gate" {
		t.Fatalf("containers %v: want the gate's first", spec.Containers)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v: want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL, seccomp RuntimeDefault", sc)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name {
			t.Errorf("probe %s missing: %+v", name, probe)
			continue
		}
		if _, ok := ports[probe.HTTPGet.Port.StrVal]; !ok {
			t.Errorf("probe %s on port %q, which the container does not name", name, probe.HTTPGet.Port.String())
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("volumeMount %s has no volume", m.Name)
		}
	}
	// The HTTP address the gate listens on is the port the probes use.
	env := envOf(c)
	if addr := env["GATE_HTTP_ADDR"].Value; addr != fmt.Sprintf(":%d", ports["http"]) {
		t.Errorf("GATE_HTTP_ADDR = %q, container port http = %d", addr, ports["http"])
	}
	// terminationGracePeriodSeconds outlasts the gate's worst-case shutdown
	// (config.ShutdownBound, which this module, apart from the gate's, restates): the drain (GATE_SHUTDOWN_TIMEOUT), the final commit and the leave
	// (GATE_REVOKE_TIMEOUT each), the tick's final Redis flush (5s) and the HTTP
	// server's close (5s); derived, it leaves 5s more.
	shutdown, err := time.ParseDuration(env["GATE_SHUTDOWN_TIMEOUT"].Value)
	if err != nil {
		t.Fatalf("GATE_SHUTDOWN_TIMEOUT: %v", err)
	}
	revoke, err := time.ParseDuration(env["GATE_REVOKE_TIMEOUT"].Value)
	if err != nil {
		t.Fatalf("GATE_REVOKE_TIMEOUT: %v", err)
	}
	worst := shutdown + 2*revoke + 10*time.Second
	if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace < worst {
		t.Errorf("grace period %s < the gate's worst-case shutdown %s", grace, worst)
	} else if vs.file != "tls-sasl.yaml" && grace != (worst+5*time.Second).Truncate(time.Second) {
		t.Errorf("derived grace period %s, want the worst case %s + 5s", grace, worst)
	}
	// TLS files live on the mounted Secret.
	for _, k := range []string{"GATE_KAFKA_TLS_CA_FILE", "GATE_KAFKA_TLS_CERT_FILE", "GATE_KAFKA_TLS_KEY_FILE",
		"GATE_REDIS_TLS_CA_FILE", "GATE_REDIS_TLS_CERT_FILE", "GATE_REDIS_TLS_KEY_FILE"} {
		if f, ok := env[k]; ok && !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return strings.HasPrefix(f.Value, m.MountPath+"/") && m.ReadOnly
		}) {
			t.Errorf("%s = %s is on no read-only mount", k, f.Value)
		}
	}
}

// checkSelectors: the Deployment's selector picks its pods, and every other selector of
// the chart picks the same pods.
func checkSelectors(t *testing.T, d *appsv1.Deployment, objs objects) {
	t.Helper()
	pods := d.Spec.Template.Labels
	if !subset(d.Spec.Selector.MatchLabels, pods) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", d.Spec.Selector.MatchLabels, pods)
	}
	for _, o := range objs.typed["PodDisruptionBudget"] {
		if sel := o.(*policyv1.PodDisruptionBudget).Spec.Selector; sel == nil || !subset(sel.MatchLabels, pods) {
			t.Errorf("PodDisruptionBudget selector %v does not match the pods", sel)
		}
	}
	for _, o := range objs.typed["Service"] {
		svc := o.(*corev1.Service)
		if !subset(svc.Spec.Selector, pods) {
			t.Errorf("Service selector %v does not match the pods", svc.Spec.Selector)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal != "http" {
				t.Errorf("Service port %s targets %s, want the named port http", p.Name, p.TargetPort.String())
			}
		}
	}
}

func checkHPA(t *testing.T, h *autoscalingv2.HorizontalPodAutoscaler, deployment string, partitions int64) {
	t.Helper()
	if ref := h.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != deployment || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA scales %+v, want Deployment %s", ref, deployment)
	}
	if int64(h.Spec.MaxReplicas) > partitions || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		t.Errorf("HPA replicas %v..%d for %d partitions", h.Spec.MinReplicas, h.Spec.MaxReplicas, partitions)
	}
	if len(h.Spec.Metrics) == 0 {
		t.Error("HPA without metrics")
	}
	if b := h.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds < 300 {
		t.Errorf("HPA behavior %+v: want a scale-down stabilization window of minutes", b)
	}
}

// checkScaledObject checks what KEDA's admission webhook and kafka scaler require.
func checkScaledObject(t *testing.T, u *unstructured.Unstructured, d *appsv1.Deployment, partitions int64) {
	t.Helper()
	mustString(t, u, d.Name, "spec", "scaleTargetRef", "name")
	mustString(t, u, "Deployment", "spec", "scaleTargetRef", "kind")
	max := mustInt(t, u, "spec", "maxReplicaCount")
	min := mustInt(t, u, "spec", "minReplicaCount")
	if max < 1 || max > partitions || min < 0 || min > max {
		t.Errorf("ScaledObject replicas %d..%d for %d partitions", min, max, partitions)
	}
	mustInt(t, u, "spec", "pollingInterval")
	mustInt(t, u, "spec", "cooldownPeriod")
	// KEDA's webhook wants both fallback fields; a fallback outside min..max would be
	// clamped by the HPA anyway.
	if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "fallback"); ok {
		if n := mustInt(t, u, "spec", "fallback", "replicas"); n < min || n > max {
			t.Errorf("fallback replicas %d outside %d..%d", n, min, max)
		}
		if n := mustInt(t, u, "spec", "fallback", "failureThreshold"); n < 1 {
			t.Errorf("fallback failureThreshold %d, want at least 1", n)
		}
	}
	if b := kedaBehavior(t, u); b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds < 300 {
		t.Errorf("KEDA's HPA scaleDown %+v: want a stabilization window of minutes", b.ScaleDown)
	}
	triggers, _, _ := unstructured.NestedSlice(u.Object, "spec", "triggers")
	if len(triggers) != 1 {
		t.Fatalf("ScaledObject has %d triggers, want 1", len(triggers))
	}
	tr := triggers[0].(map[string]any)
	if tr["type"] != "kafka" {
		t.Errorf("trigger type %v, want kafka", tr["type"])
	}
	md, ok := tr["metadata"].(map[string]any)
	if !ok {
		t.Fatal("kafka trigger without metadata")
	}
	for k, v := range md {
		if _, ok := v.(string); !ok {
			t.Errorf("trigger metadata %s = %v (%T): KEDA wants strings", k, v, v)
		}
	}
	env := envOf(d.Spec.Template.Spec.Containers[0])
	// offsetResetPolicy is where KEDA takes a partition without a committed offset to
	// start, to count its lag: where the gate starts it.
	for key, envVar := range map[string]string{"bootstrapServers": "GATE_KAFKA_BROKERS", "consumerGroup": "GATE_GROUP_ID", "topic": "GATE_INPUT_TOPIC",
		"offsetResetPolicy": "GATE_KAFKA_START_OFFSET"} {
		if md[key] != env[envVar].Value {
			t.Errorf("trigger %s = %v, but the gate's %s = %q", key, md[key], envVar, env[envVar].Value)
		}
	}
	if n, err := strconv.Atoi(fmt.Sprint(md["lagThreshold"])); err != nil || n < 1 {
		t.Errorf("lagThreshold %v: want a positive whole number", md["lagThreshold"])
	}
	if env["GATE_KAFKA_TLS"].Value == "true" || env["GATE_KAFKA_SASL_MECHANISM"].Value != "none" {
		if name, _, _ := unstructured.NestedString(tr, "authenticationRef", "name"); name == "" {
			t.Error("brokers need TLS or SASL, but the kafka trigger has no authenticationRef")
		}
	}
}

func checkMonitor(t *testing.T, u *unstructured.Unstructured, endpointsField string, targetLabels map[string]string) {
	t.Helper()
	sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 || !subset(sel, targetLabels) {
		t.Errorf("%s selector %v does not match %v", u.GetKind(), sel, targetLabels)
	}
	eps, _, _ := unstructured.NestedSlice(u.Object, "spec", endpointsField)
	if len(eps) == 0 {
		t.Fatalf("%s has no spec.%s", u.GetKind(), endpointsField)
	}
	for _, e := range eps {
		ep := e.(map[string]any)
		if ep["port"] != "http" || ep["path"] != "/metrics" {
			t.Errorf("%s endpoint %v: want port http, path /metrics", u.GetKind(), ep)
		}
	}
}

func mustString(t *testing.T, u *unstructured.Unstructured, want string, path ...string) {
	t.Helper()
	if got, _, _ := unstructured.NestedString(u.Object, path...); got != want {
		t.Errorf("%s %s = %q, want %q", u.GetKind(), strings.Join(path, "."), got, want)
	}
}

func mustInt(t *testing.T, u *unstructured.Unstructured, path ...string) int64 {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !ok || err != nil {
		t.Errorf("%s %s missing", u.GetKind(), strings.Join(path, "."))
		return 0
	}
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		if n == float64(int64(n)) {
			return int64(n)
		}
	}
	t.Errorf("%s %s = %v (%T), want a whole number", u.GetKind(), strings.Join(path, "."), v, v)
	return 0
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// renderDeployment renders vals and returns the Deployment, strictly decoded.
func renderDeployment(t *testing.T, vals map[string]any, caps *chartutil.Capabilities) *appsv1.Deployment {
	t.Helper()
	objs, err := decode(mustRender(t, vals, caps))
	if err != nil {
		t.Fatal(err)
	}
	return objs.typed["Deployment"][0].(*appsv1.Deployment)
}

// chartSetsOtherwise are the gate's variables the chart covers by other means, and how.
var chartSetsOtherwise = map[string]string{
	// The gate of the chart's appVersion (0.8.0) predates it (TestVersionsMoveTogether):
	// the chart moves to it with the release that ships it.
	"GATE_MEMORY_LIMIT_RATIO": "goMemLimit sets GOMEMLIMIT, the whole limit, which wins over it in the gate",
}

// TestGateVariables checks the chart's GATE_ variables against the gate's own list
// (`go run ./cmd/gate env`): every one set is known to the gate (which refuses unknown
// GATE_ names at start-up), the required ones are always set, secrets come from Secrets,
// every gate setting is reachable from some value, and the chart's defaults are the gate's.
func TestGateVariables(t *testing.T) {
	known := map[string]string{}
	for _, v := range mustGateEnv(t) {
		known[v.name] = v.def
	}
	covered := map[string]bool{}
	for _, vs := range valueSets {
		t.Run(strings.TrimSuffix(vs.file, ".yaml"), func(t *testing.T) {
			d := renderDeployment(t, readValues(t, filepath.Join("testdata", vs.file)), capabilities(vs.caps...))
			c := d.Spec.Template.Spec.Containers[0]
			seen := map[string]bool{}
			for _, e := range c.Env {
				if seen[e.Name] {
					t.Errorf("%s set twice", e.Name)
				}
				seen[e.Name] = true
				if !strings.HasPrefix(e.Name, "GATE_") {
					continue
				}
				if _, ok := known[e.Name]; !ok {
					t.Errorf("%s is not a variable the gate knows (it would refuse to start)", e.Name)
				}
				covered[e.Name] = true
				if slices.Contains(secretVars, e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s is not taken from a Secret: %+v", e.Name, e)
				}
				if e.Name == "GATE_REDIS_URLS" && e.ValueFrom == nil {
					checkRedisURLs(t, e.Value, seen)
				}
			}
			for _, name := range requiredVars {
				if !seen[name] {
					t.Errorf("required %s is not set", name)
				}
			}
		})
	}
	t.Run("every gate variable has a value", func(t *testing.T) {
		for name := range known {
			if !covered[name] && chartSetsOtherwise[name] == "" {
				t.Errorf("%s is set by none of the value sets: map it to a value (and cover it in testdata/)", name)
			}
		}
	})
	t.Run("defaults are the gate's", func(t *testing.T) {
		// Each variable the chart renders by default has the gate's default, unless it is a
		// deliberate choice of the chart's (chartChoices) that values.yaml documents.
		comments := valueComments(t)
		rendered := map[string]bool{}
		d := renderDeployment(t, readValues(t, "testdata/defaults.yaml"), capabilities())
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			def, ok := known[e.Name]
			if !ok {
				continue
			}
			rendered[e.Name] = true
			same := sameSetting(e.Value, def)
			says, chosen := chartChoices[e.Name]
			switch {
			case chosen && same:
				t.Errorf("%s: the chart's default %q is the gate's now: drop it from chartChoices", e.Name, e.Value)
			case chosen:
				if !slices.ContainsFunc(comments, func(c string) bool { return strings.Contains(c, e.Name) && strings.Contains(c, says) }) {
					t.Errorf("%s: the chart's default %q is not the gate's %q, and no comment of values.yaml naming %s says so (%q)", e.Name, e.Value, def, e.Name, says)
				}
			case !same:
				t.Errorf("%s: chart default %q, gate default %q (a deliberate choice goes in chartChoices, documented in values.yaml)", e.Name, e.Value, def)
			}
		}
		for name := range chartChoices {
			if !rendered[name] {
				t.Errorf("chartChoices lists %s, which the chart does not set by default", name)
			}
		}
	})
}

// chartChoices are the GATE_ variables whose chart default is deliberately not the gate's,
// each with the words the comment of its value in values.yaml must hold, which say why.
var chartChoices = map[string]string{
	// No default: a fleet must say where its brokers and Redis are (the gate's defaults
	// point at 127.0.0.1); testdata/defaults.yaml gives them.
	"GATE_KAFKA_BROKERS": "Required", "GATE_REDIS_URLS": "Required",
	// The release's name, so that two releases never share a consumer group or Redis
	// counters by accident (perRelease, TestReleasesDoNotCollide).
	"GATE_GROUP_ID": `"" = the release's full name`, "GATE_KAFKA_CLIENT_ID": `"" = the release's full name`,
	"GATE_REDIS_PREFIX": `"" = the release's full name`,
}

// checkRedisURLs: a plain GATE_REDIS_URLS holds no password, only $(VAR) references to
// variables set earlier from a Secret.
func checkRedisURLs(t *testing.T, value string, setBefore map[string]bool) {
	t.Helper()
	ref := regexp.MustCompile(`^\$\(([A-Z0-9_]+)\)$`)
	for _, raw := range strings.Split(value, ",") {
		u, err := url.Parse(strings.NewReplacer("$(", "%24%28", ")", "%29").Replace(raw))
		if err != nil {
			t.Errorf("GATE_REDIS_URLS entry %q: %v", raw, err)
			continue
		}
		pw, ok := u.User.Password()
		if !ok {
			continue
		}
		m := ref.FindStringSubmatch(pw)
		if m == nil {
			t.Errorf("GATE_REDIS_URLS entry %q holds a plain password", raw)
		} else if !setBefore[m[1]] {
			t.Errorf("GATE_REDIS_URLS refers to $(%s), which is not set before it", m[1])
		}
	}
}

// sameSetting compares a chart value with a gate default as the gate reads them.
func sameSetting(a, b string) bool {
	if a == b {
		return true
	}
	if da, err := time.ParseDuration(a); err == nil {
		db, err := time.ParseDuration(b)
		return err == nil && da == db
	}
	if fa, err := strconv.ParseFloat(a, 64); err == nil {
		fb, err := strconv.ParseFloat(b, 64)
		return err == nil && fa == fb
	}
	return false
}

// TestRedisSecrets: the Redis user is GATE_REDIS_USERNAME and the password
// GATE_REDIS_PASSWORD from its Secret, with the URLs left as given (no password spliced
// into them, so it need not be URL-safe); a URLs Secret replaces the URLs and may go with
// the password Secret.
func TestRedisSecrets(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	d := renderDeployment(t, mergeValues(base, mustParse(t, `
redis:
  urls: [redis://redis-0:6379/0, redis://user@redis-1:6379/2]
  username: gate
  passwordSecret: {name: redis-auth, key: pw}`)), capabilities())
	env := envOf(d.Spec.Template.Spec.Containers[0])
	if got, want := env["GATE_REDIS_URLS"].Value, "redis://redis-0:6379/0,redis://user@redis-1:6379/2"; got != want {
		t.Errorf("GATE_REDIS_URLS = %q, want the URLs as given, %q", got, want)
	}
	if e := env["GATE_REDIS_USERNAME"]; e.Value != "gate" || e.ValueFrom != nil {
		t.Errorf("GATE_REDIS_USERNAME = %+v, want the plain value gate", e)
	}
	if e := env["GATE_REDIS_PASSWORD"]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "redis-auth" || e.ValueFrom.SecretKeyRef.Key != "pw" {
		t.Errorf("GATE_REDIS_PASSWORD = %+v, want it from Secret redis-auth/pw", e)
	}
	for name := range env {
		if strings.Contains(name, "REDIS_PASSWORD") && name != "GATE_REDIS_PASSWORD" {
			t.Errorf("%s set beside GATE_REDIS_PASSWORD", name)
		}
	}

	d = renderDeployment(t, base, capabilities())
	env = envOf(d.Spec.Template.Spec.Containers[0])
	for _, name := range []string{"GATE_REDIS_USERNAME", "GATE_REDIS_PASSWORD"} {
		if e, ok := env[name]; ok {
			t.Errorf("%s = %+v without a value for it", name, e)
		}
	}

	d = renderDeployment(t, mergeValues(base, mustParse(t, `
redis:
  urls: []
  urlsSecret: {name: redis-urls}
  passwordSecret: {name: redis-auth}`)), capabilities())
	env = envOf(d.Spec.Template.Spec.Containers[0])
	ref := env["GATE_REDIS_URLS"].ValueFrom
	if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "redis-urls" || ref.SecretKeyRef.Key != "urls" {
		t.Errorf("GATE_REDIS_URLS not from Secret redis-urls/urls: %+v", ref)
	}
	if ref := env["GATE_REDIS_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "redis-auth" || ref.SecretKeyRef.Key != "password" {
		t.Errorf("GATE_REDIS_PASSWORD not from Secret redis-auth/password beside urlsSecret: %+v", ref)
	}
}

// TestRedisSentinelSecrets: in sentinel mode the sentinels' user is
// GATE_REDIS_SENTINEL_USERNAME and their password GATE_REDIS_SENTINEL_PASSWORD from its
// own Secret, apart from the primary's; neither is set unless asked for.
func TestRedisSentinelSecrets(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	d := renderDeployment(t, mergeValues(base, mustParse(t, `
redis:
  mode: sentinel
  sentinel:
    master: m
    addrs: [s-0:26379]
    username: gate-sentinel
    passwordSecret: {name: redis, key: redis-password}
  urls: [redis://redis:6379/0]
  passwordSecret: {name: redis, key: redis-password}`)), capabilities())
	env := envOf(d.Spec.Template.Spec.Containers[0])
	if e := env["GATE_REDIS_SENTINEL_USERNAME"]; e.Value != "gate-sentinel" || e.ValueFrom != nil {
		t.Errorf("GATE_REDIS_SENTINEL_USERNAME = %+v, want the plain value gate-sentinel", e)
	}
	if e := env["GATE_REDIS_SENTINEL_PASSWORD"]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "redis" || e.ValueFrom.SecretKeyRef.Key != "redis-password" {
		t.Errorf("GATE_REDIS_SENTINEL_PASSWORD = %+v, want it from Secret redis/redis-password", e)
	}

	d = renderDeployment(t, mergeValues(base, mustParse(t, `
redis:
  mode: sentinel
  sentinel: {master: m, addrs: [s-0:26379]}
  urls: [redis://redis:6379/0]
  passwordSecret: {name: redis}`)), capabilities())
	env = envOf(d.Spec.Template.Spec.Containers[0])
	for _, name := range []string{"GATE_REDIS_SENTINEL_USERNAME", "GATE_REDIS_SENTINEL_PASSWORD"} {
		if e, ok := env[name]; ok {
			t.Errorf("%s = %+v without a value for it (the primary's password is not the sentinels')", name, e)
		}
	}
}

// TestReplicas: replicas = ceil(partitions / perPod) unless replicaCount says otherwise.
func TestReplicas(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		name       string
		values     string
		want       int32
		wantErrSub string
	}{
		{name: "one per pod", values: "scaling: {inputPartitions: 12}", want: 12},
		{name: "divides", values: "scaling: {inputPartitions: 12, partitionsPerPod: 4}", want: 3},
		{name: "rounds up", values: "scaling: {inputPartitions: 10, partitionsPerPod: 4}", want: 3},
		{name: "more per pod than partitions", values: "scaling: {inputPartitions: 3, partitionsPerPod: 8}", want: 1},
		{name: "single partition", values: "scaling: {inputPartitions: 1}", want: 1},
		{name: "explicit wins", values: "scaling: {inputPartitions: 12, partitionsPerPod: 4}\nreplicaCount: 5", want: 5},
		{name: "explicit equal to partitions", values: "scaling: {inputPartitions: 6}\nreplicaCount: 6", want: 6},
		{name: "explicit zero", values: "replicaCount: 0", want: 0},
		{name: "explicit over partitions", values: "scaling: {inputPartitions: 4}\nreplicaCount: 6",
			wantErrSub: "6 replicas for the 4 partitions of topic \"events\" would leave 2 pod(s) idle"},
		{name: "idle pods allowed", values: "scaling: {inputPartitions: 4, allowIdlePods: true}\nreplicaCount: 6", want: 6},
		{name: "perPod zero", values: "scaling: {inputPartitions: 4, partitionsPerPod: 0}", wantErrSub: "/scaling/partitionsPerPod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := mergeValues(base, mustParse(t, tc.values))
			r, err := render(t, vals, capabilities())
			if tc.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErrSub)
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
			d := objs.typed["Deployment"][0].(*appsv1.Deployment)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.want {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.want)
			}
		})
	}
}

// TestGracePeriod: terminationGracePeriodSeconds = the gate's worst-case shutdown
// (shutdown timeout + 2 × revoke timeout + 10s) + 5s unless set, and a value set below
// the worst case is refused.
func TestGracePeriod(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		values string
		want   int64
	}{
		{"kafka: {shutdownTimeout: 20s}", 55},
		{"kafka: {shutdownTimeout: 1m30s}", 125},
		{"kafka: {shutdownTimeout: 500ms}", 36},
		{"kafka: {shutdownTimeout: 2.5s}", 38},
		{"kafka: {shutdownTimeout: .5s}", 36}, // as Go reads it: half a second, not 5s
		{"kafka: {shutdownTimeout: 1h}", 3635},
		{"kafka: {shutdownTimeout: 20s, revokeTimeout: 30s, rebalanceTimeout: 90s, stallNotReady: 3m}", 95},
		{"kafka: {shutdownTimeout: 20s}\nterminationGracePeriodSeconds: 50", 50},
		{"kafka: {shutdownTimeout: 20s}\nterminationGracePeriodSeconds: 300", 300},
	} {
		d := renderDeployment(t, mergeValues(base, mustParse(t, tc.values)), capabilities())
		if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != tc.want {
			t.Errorf("%q: terminationGracePeriodSeconds = %d, want %d", tc.values, got, tc.want)
		}
	}
}

// TestMonitorsNeedTheirAPI: a custom resource (PodMonitor, ServiceMonitor,
// PrometheusRule, ScaledObject) is rendered whenever it is enabled and the cluster serves
// its API, as its group/version/Kind (a live cluster) or its bare group/version (helm
// template --api-versions); enabled without the API, the render fails with one line naming
// the value, the API and the way out, unless force (the monitors) or capabilityChecks=false
// says to render it unchecked.
func TestMonitorsNeedTheirAPI(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, cr := range []struct {
		kind, gv, values, force string
		otherKind               string // another Kind of the same group/version
	}{
		{"PodMonitor", "monitoring.coreos.com/v1", "metrics: {podMonitor: {enabled: true}}", "metrics: {podMonitor: {force: true}}", "ServiceMonitor"},
		{"ServiceMonitor", "monitoring.coreos.com/v1", "metrics: {serviceMonitor: {enabled: true}}", "metrics: {serviceMonitor: {force: true}}", "PodMonitor"},
		{"PrometheusRule", "monitoring.coreos.com/v1", "prometheusRule: {enabled: true}", "prometheusRule: {force: true}", "PodMonitor"},
		{"ScaledObject", "keda.sh/v1alpha1", "autoscaling: {keda: {enabled: true}}", "", "TriggerAuthentication"},
	} {
		for _, tc := range []struct {
			name    string
			enabled bool
			extra   string
			caps    []string
			want    bool // rendered; false with enabled: the render fails
		}{
			{name: "disabled", caps: allAPIs},
			{name: "enabled, API present", enabled: true, caps: allAPIs, want: true},
			{name: "enabled, group/version only (--api-versions)", enabled: true, caps: []string{cr.gv}, want: true},
			{name: "enabled, no API", enabled: true},
			{name: "enabled, only another kind of the group", enabled: true, caps: []string{cr.gv, cr.gv + "/" + cr.otherKind}},
			{name: "enabled, forced", enabled: true, extra: cr.force, want: true},
			{name: "enabled, capabilityChecks off", enabled: true, extra: "capabilityChecks: false", want: true},
		} {
			if tc.extra == "" && strings.HasSuffix(tc.name, "forced") {
				continue // the ScaledObject has no force of its own
			}
			t.Run(cr.kind+"/"+tc.name, func(t *testing.T) {
				vals := base
				if tc.enabled {
					vals = mergeValues(vals, mustParse(t, cr.values))
				}
				if tc.extra != "" {
					vals = mergeValues(vals, mustParse(t, tc.extra))
				}
				r, err := render(t, vals, capabilities(tc.caps...))
				if tc.enabled && !tc.want {
					if err == nil {
						t.Fatalf("rendered without the %s API; want an error", cr.kind)
					}
					msg := err.Error()
					for _, want := range []string{"the cluster serves no " + cr.gv + " " + cr.kind, "--api-versions " + cr.gv + "/" + cr.kind, "capabilityChecks=false"} {
						if !strings.Contains(msg, want) {
							t.Errorf("error %q lacks %q", msg, want)
						}
					}
					if strings.Contains(msg, "\n") {
						t.Errorf("error %q: want one line", msg)
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
				if got := len(objs.custom[cr.kind]) == 1; got != tc.want {
					t.Errorf("%s rendered: %v, want %v", cr.kind, got, tc.want)
				}
			})
		}
	}
}

// TestInvalidValues: each file of testdata/invalid/, laid over testdata/defaults.yaml,
// must fail to render with the message its first line names (`# want: ...`), from the
// schema or from the templates' checks.
func TestInvalidValues(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/invalid/*.yaml: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line %q is not '# want: <part of the error>'", first)
			}
			_, err = render(t, readValues(t, "testdata/defaults.yaml", f), capabilities(allAPIs...))
			if err == nil {
				t.Fatalf("rendered; want an error containing %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q\nwant it to contain %q", err, want)
			}
		})
	}
}

// TestSchemaCoversValues: values.yaml and values.schema.json describe the same keys, and
// the chart's README names every one of them.
func TestSchemaCoversValues(t *testing.T) {
	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	if schema["additionalProperties"] != false {
		t.Error("the schema allows unknown top-level keys")
	}
	defaults := readValues(t, filepath.Join(chartDir, "values.yaml"))
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(readme)))
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			documented[m[1]] = true
		}
	}
	var walk func(prefix string, s map[string]any, vals map[string]any)
	walk = func(prefix string, s map[string]any, vals map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for k, sub := range props {
			path := prefix + k
			if path == "global" {
				continue
			}
			v, inValues := vals[k]
			if !inValues {
				t.Errorf("%s is in the schema but not in values.yaml", path)
			}
			subSchema := sub.(map[string]any)
			if _, nested := subSchema["properties"]; nested {
				vm, _ := v.(map[string]any)
				walk(path+".", subSchema, vm)
				continue
			}
			if !documented[path] {
				t.Errorf("README.md has no row for `%s`", path)
			}
		}
	}
	walk("", schema, defaults)
}

func mustParse(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := parseValues([]byte(s))
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// TestTemplateChecksWithoutSchema: with --skip-schema-validation the templates still
// refuse KEDA and the HPA together.
func TestTemplateChecksWithoutSchema(t *testing.T) {
	c := mustChart(t)
	vals := readValues(t, "testdata/defaults.yaml", "testdata/invalid/keda-and-hpa.yaml")
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(c, vals, opts, capabilities(), true)
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.Render(c, top)
	if want := "autoscaling.keda.enabled and autoscaling.hpa.enabled are both true"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

// TestServiceLinksDisabled: every pod the chart makes has enableServiceLinks: false. The
// release here is named gate, as in the README's install line, so its own Service
// (gate-capture-gate) and any other of the release's (gate-metrics, ...) would be
// announced to its pods as GATE_CAPTURE_GATE_SERVICE_HOST, GATE_METRICS_PORT_9090_TCP,
// ...: names in the gate's own GATE_ namespace.
func TestServiceLinksDisabled(t *testing.T) {
	if releaseName != "gate" {
		t.Fatalf("release %q: this test needs the release named gate", releaseName)
	}
	for _, vs := range valueSets {
		t.Run(strings.TrimSuffix(vs.file, ".yaml"), func(t *testing.T) {
			objs, err := decode(mustRender(t, readValues(t, filepath.Join("testdata", vs.file)), capabilities(vs.caps...)))
			if err != nil {
				t.Fatal(err)
			}
			specs := podSpecs(objs)
			if len(specs) == 0 {
				t.Fatal("no workload rendered")
			}
			for name, spec := range specs {
				if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
					t.Errorf("%s: enableServiceLinks = %v, want false", name, fmtBoolPtr(spec.EnableServiceLinks))
				}
			}
		})
	}
}

// podSpecs returns the pod template of every workload rendered, by kind/name.
func podSpecs(objs objects) map[string]corev1.PodSpec {
	out := map[string]corev1.PodSpec{}
	for kind, list := range objs.typed {
		for _, o := range list {
			switch w := o.(type) {
			case *appsv1.Deployment:
				out[kind+"/"+w.Name] = w.Spec.Template.Spec
			case *appsv1.StatefulSet:
				out[kind+"/"+w.Name] = w.Spec.Template.Spec
			case *appsv1.DaemonSet:
				out[kind+"/"+w.Name] = w.Spec.Template.Spec
			case *batchv1.Job:
				out[kind+"/"+w.Name] = w.Spec.Template.Spec
			case *batchv1.CronJob:
				out[kind+"/"+w.Name] = w.Spec.JobTemplate.Spec.Template.Spec
			case *corev1.Pod:
				out[kind+"/"+w.Name] = w.Spec
			}
		}
	}
	return out
}

func fmtBoolPtr(b *bool) string {
	if b == nil {
		return "unset (Kubernetes' default: true)"
	}
	return strconv.FormatBool(*b)
}

// TestKEDAOffsetResetPolicy: the KEDA trigger's offsetResetPolicy follows
// kafka.startOffset, as GATE_KAFKA_START_OFFSET does: KEDA counts a partition without a
// committed offset as lagging from where the gate will start it.
func TestKEDAOffsetResetPolicy(t *testing.T) {
	base := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "autoscaling: {keda: {enabled: true}}"))
	for _, tc := range []struct{ values, want string }{
		{"kafka: {startOffset: earliest}", "earliest"},
		{"kafka: {startOffset: latest}", "latest"},
		{"", "earliest"}, // the chart's default, the gate's
	} {
		vals := base
		if tc.values != "" {
			vals = mergeValues(base, mustParse(t, tc.values))
		}
		objs, err := decode(mustRender(t, vals, capabilities(kedaAPI...)))
		if err != nil {
			t.Fatal(err)
		}
		if len(objs.custom["ScaledObject"]) != 1 {
			t.Fatalf("%q: no ScaledObject rendered", tc.values)
		}
		triggers, _, _ := unstructured.NestedSlice(objs.custom["ScaledObject"][0].Object, "spec", "triggers")
		got, _, _ := unstructured.NestedString(triggers[0].(map[string]any), "metadata", "offsetResetPolicy")
		env := envOf(objs.typed["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0])
		if got != tc.want || env["GATE_KAFKA_START_OFFSET"].Value != tc.want {
			t.Errorf("%q: offsetResetPolicy %q, GATE_KAFKA_START_OFFSET %q, want both %q", tc.values, got, env["GATE_KAFKA_START_OFFSET"].Value, tc.want)
		}
	}
}

// perRelease are the variables whose chart default is the release's full name.
var perRelease = []string{"GATE_GROUP_ID", "GATE_KAFKA_CLIENT_ID", "GATE_REDIS_PREFIX"}

// TestReleasesDoNotCollide: two releases installed with the chart's defaults on the same
// Kafka and Redis share nothing by default: not the consumer group (they would split one
// fleet's partitions between them), not the client id, not the Redis key prefix (they would
// merge their teams' counts), not the transactional ids, not the group KEDA scales on. An
// explicit value still wins.
func TestReleasesDoNotCollide(t *testing.T) {
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t,
		"kafka: {delivery: exactly-once}\nautoscaling: {keda: {enabled: true}}"))
	gateEnv := func(release string, vals map[string]any) map[string]string {
		t.Helper()
		opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
		r, err := renderRelease(mustChart(t), vals, opts, capabilities(kedaAPI...))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(r)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, e := range objs.typed["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		for _, so := range objs.custom["ScaledObject"] {
			trig, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
			for _, tr := range trig {
				md, _, _ := unstructured.NestedStringMap(tr.(map[string]any), "metadata")
				env["keda consumerGroup"] = md["consumerGroup"]
			}
		}
		return env
	}
	a, b := gateEnv("ingest-eu", vals), gateEnv("ingest-us", vals)
	for _, v := range append(slices.Clone(perRelease), "GATE_TRANSACTIONAL_ID", "keda consumerGroup") {
		if a[v] == "" || a[v] == b[v] {
			t.Errorf("%s: %q and %q in two releases, want each its own", v, a[v], b[v])
		}
	}
	if a["keda consumerGroup"] != a["GATE_GROUP_ID"] {
		t.Errorf("KEDA watches group %q, the gates consume as %q", a["keda consumerGroup"], a["GATE_GROUP_ID"])
	}
	// An explicit value wins, as before.
	set := mergeValues(vals, mustParse(t, "kafka: {groupId: capture-gate, clientId: capture-gate}\nredis: {prefix: gate}"))
	c := gateEnv("ingest-eu", set)
	for v, want := range map[string]string{"GATE_GROUP_ID": "capture-gate", "GATE_KAFKA_CLIENT_ID": "capture-gate", "GATE_REDIS_PREFIX": "gate"} {
		if c[v] != want {
			t.Errorf("%s = %q with an explicit value, want %q", v, c[v], want)
		}
	}
}

// TestAdaptiveThresholdEnv: limit.thresholdMode and limit.adaptive map to the gate's
// GATE_THRESHOLD_MODE and GATE_ADAPTIVE_* (static and the gate's defaults unless set).
func TestAdaptiveThresholdEnv(t *testing.T) {
	for file, want := range map[string]map[string]string{
		"defaults.yaml": {"GATE_THRESHOLD_MODE": "static", "GATE_ADAPTIVE_FACTOR": "4", "GATE_ADAPTIVE_FLOOR": "100",
			"GATE_ADAPTIVE_CEILING": "0", "GATE_ADAPTIVE_HALF_LIFE": "72h", "GATE_ADAPTIVE_MIN_HISTORY": "24h", "GATE_ADAPTIVE_MAX_SPIKE": "3h"},
		"redis-cluster.yaml": {"GATE_THRESHOLD_MODE": "adaptive", "GATE_ADAPTIVE_FACTOR": "5", "GATE_ADAPTIVE_FLOOR": "50",
			"GATE_ADAPTIVE_CEILING": "2000000", "GATE_ADAPTIVE_HALF_LIFE": "6h", "GATE_ADAPTIVE_MIN_HISTORY": "48h", "GATE_ADAPTIVE_MAX_SPIKE": "5h"},
	} {
		d := renderDeployment(t, readValues(t, filepath.Join("testdata", file)), capabilities())
		env := envOf(d.Spec.Template.Spec.Containers[0])
		for k, v := range want {
			if got := env[k].Value; got != v {
				t.Errorf("%s: %s=%q, want %q", file, k, got, v)
			}
		}
	}
}

// checkNotesCommands: NOTES.txt names the Redis prefix the pods run with and prints the
// command that runs gate overrides inside one of them, with the release's settings: the
// runbook's command run elsewhere, under the default prefix, changed nothing and said it
// worked.
func checkNotesCommands(t *testing.T, notes string, d *appsv1.Deployment) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	prefix := envOf(c)["GATE_REDIS_PREFIX"].Value
	if prefix == "" || !strings.Contains(notes, "redis prefix    "+prefix+" ") {
		t.Errorf("NOTES.txt does not name the pods' GATE_REDIS_PREFIX %q:\n%s", prefix, notes)
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	const bin = "/usr/local/bin/gate"
	if !strings.Contains(string(dockerfile), `ENTRYPOINT ["`+bin+`"]`) {
		t.Fatalf("the image's entrypoint is not %s, which NOTES.txt runs", bin)
	}
	overrides := "overrides"
	if _, rules := envOf(c)["GATE_RULES_FILE"]; rules {
		overrides += " -rule <rule>" // the gate refuses overrides without -rule under rules
	}
	cmd := fmt.Sprintf("kubectl -n %s exec deploy/%s -c %s -- %s %s list", namespace, d.Name, c.Name, bin, overrides)
	if !strings.Contains(notes, cmd) {
		t.Errorf("NOTES.txt lacks %q:\n%s", cmd, notes)
	}
}

// TestNotesWithRules: with rules, NOTES.txt's live-override commands must work as
// printed, and it must not state the one limit (limit.threshold per limit.window) the
// gates do not use. The gate's `overrides` refuses to run without -rule when
// GATE_RULES_FILE is set; each command is run here with the pod's environment and the
// rendered rules file, up to the point where it would dial Redis.
func TestNotesWithRules(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	vals := readValues(t, "testdata/rules.yaml")
	r := mustRender(t, vals, capabilities())
	objs, err := decode(r)
	if err != nil {
		t.Fatal(err)
	}
	d := objs.typed["Deployment"][0].(*appsv1.Deployment)
	cm := objs.typed["ConfigMap"][0].(*corev1.ConfigMap)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(cm.Data["rules.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.notes, "1000000 events per 60s per team") {
		t.Errorf("NOTES.txt states limit.threshold per limit.window, which rules leave unused:\n%s", r.notes)
	}
	cmds := regexp.MustCompile(`(?m)/usr/local/bin/gate (overrides .*)$`).FindAllStringSubmatch(r.notes, -1)
	if len(cmds) == 0 {
		t.Fatalf("NOTES.txt has no overrides command:\n%s", r.notes)
	}
	for _, m := range cmds {
		args := strings.Fields(strings.NewReplacer("<team>", "team-1", "<limit>", "500", "<rule>", "team").Replace(m[1]))
		cmd := exec.Command(bin, args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GATE_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			switch {
			case e.Name == "GATE_RULES_FILE":
				cmd.Env = append(cmd.Env, e.Name+"="+rulesFile)
			case strings.HasPrefix(e.Name, "GATE_REDIS_URLS"):
				cmd.Env = append(cmd.Env, e.Name+"=redis://127.0.0.1:1/0") // nothing listens: fails fast at the dial
			case strings.HasPrefix(e.Name, "GATE_") && e.ValueFrom == nil:
				cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
			}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // Redis is not there: only a refusal before the dial is a defect
		if strings.Contains(out.String(), "name one with -rule") || strings.Contains(out.String(), "Usage:") {
			t.Errorf("NOTES.txt's %q is refused by the gate under rules:\n%s", "gate "+m[1], out.String())
		}
	}
}

// TestNotesStateTheLimitsUnit: with routing.cost bytes, limit.threshold is bytes per
// window (GATE_COST), and NOTES.txt must not tell the operator it is events.
func TestNotesStateTheLimitsUnit(t *testing.T) {
	for cost, want := range map[string]string{
		"events": "limit           1000000 events per 60s per team",
		"bytes":  "limit           1000000 bytes per 60s per team",
	} {
		vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "routing: {cost: "+cost+"}"))
		r := mustRender(t, vals, capabilities())
		if !strings.Contains(r.notes, want) {
			t.Errorf("routing.cost %s: NOTES.txt lacks %q:\n%s", cost, want, r.notes)
		}
	}
}

// TestNotesStateEveryLimit: NOTES.txt's limit line says what the gates enforce: with
// limit.extra each further limit, and with thresholdMode adaptive that limit.threshold
// holds only until a team has its history, not "1000000 events per 60s per team" alone.
func TestNotesStateEveryLimit(t *testing.T) {
	for over, want := range map[string]string{
		"limit: {extra: [{window: 1h, threshold: 20000000}, {window: 24h, threshold: 200000000}]}": "limit           1000000 events per 60s per team; 20000000 per 1h; 200000000 per 24h (divert)",
		"limit: {thresholdMode: adaptive}": "limit           1000000 events per 60s per team, until a team has 24h of history: then learned, 4 x its usual volume (divert)",
	} {
		vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, over))
		r := mustRender(t, vals, capabilities())
		if !strings.Contains(r.notes, want) {
			t.Errorf("%s: NOTES.txt lacks %q:\n%s", over, want, r.notes)
		}
	}
}

// A redis.urls entry holding a password is refused, its message showing none of the
// password: before, one holding ':' was shown in part (u:a:b shown u:a:xxxxx) and one
// holding an unescaped '/' was not seen at all, and went into the Deployment as a plain
// value. A user name alone (its password from redis.passwordSecret) is taken. In cluster
// mode too: its checks of the URLs' databases and schemes parsed each URL first, and a
// password holding '/' or '?' failed that parse with the whole URL, password and all, in
// the error. With networkPolicy.enabled too: the NetworkPolicy's template parsed each URL
// for its port, before the Deployment's checks, and showed such a URL whole.
func TestRedisURLPasswordNeverShown(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, mode := range []string{"standalone", "cluster", "standalone, networkPolicy"} {
		for u, shown := range map[string]string{
			"redis://:secret@redis:6379/0":          "redis://:xxxxx@redis:6379/0",
			"redis://u:a:b-secret@redis:6379/0":     "redis://u:xxxxx@redis:6379/0",
			"rediss://u:pa/ss-secret@redis:6379/0":  "rediss://u:xxxxx@redis:6379/0",
			"redis://:p@ss-secret@redis:6379/0":     "redis://:xxxxx@redis:6379/0",
			"redis://u:pa?ss#secret@redis:6379/0?x": "redis://u:xxxxx@redis:6379/0?x",
		} {
			m, np, _ := strings.Cut(mode, ", ")
			vals := mergeValues(base, mustParse(t, fmt.Sprintf("redis: {mode: %s, urls: [%q]}\nnetworkPolicy: {enabled: %t}", m, u, np != "")))
			_, err := render(t, vals, capabilities())
			if err == nil || !strings.Contains(err.Error(), "holds a password") || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: redis.urls %q rendered or shown (err %v); want it refused as holding a password, the password not shown", mode, u, err)
				continue
			}
			if want := fmt.Sprintf("entry %q holds", shown); !strings.Contains(err.Error(), want) {
				t.Errorf("%s: redis.urls %q: refused with %v; want it shown as %q", mode, u, err, shown)
			}
		}
	}
	vals := mergeValues(base, mustParse(t, `redis: {urls: ["redis://app@redis:6379/0"], passwordSecret: {name: redis-pw}}`))
	if _, err := render(t, vals, capabilities()); err != nil {
		t.Errorf("redis.urls with a user name alone, its password from redis.passwordSecret: %v; want it rendered", err)
	}
	// Without the Secret the gate refuses the URL at start (go-redis would log in as
	// the default user): so does the chart, showing no name (it may be a password).
	vals = mergeValues(base, mustParse(t, `redis: {urls: ["redis://hunter2@redis:6379/0"]}`))
	if _, err := render(t, vals, capabilities()); err == nil || !strings.Contains(err.Error(), `"redis://xxxxx@redis:6379/0" has a user name and no password`) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("redis.urls with a user name and no redis.passwordSecret: %v; want it refused, the name not shown", err)
	}
}
