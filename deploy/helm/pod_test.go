package helm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestPodTemplateIgnoresChartVersion: a new chart version that changes nothing in the
// pods renders the same pod template, so `helm upgrade` restarts no pod; the chart
// version stays on the Deployment itself.
func TestPodTemplateIgnoresChartVersion(t *testing.T) {
	vals := readValues(t, "testdata/defaults.yaml")
	template := func(version string) (string, *appsv1.Deployment) {
		c, err := loader.Load(chartDir)
		if err != nil {
			t.Fatal(err)
		}
		c.Metadata.Version = version
		opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 2, IsUpgrade: true}
		r, err := renderRelease(c, vals, opts, capabilities())
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(r)
		if err != nil {
			t.Fatal(err)
		}
		d := objs.typed["Deployment"][0].(*appsv1.Deployment)
		b, err := json.Marshal(d.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), d
	}
	a, d := template("0.1.0")
	b, _ := template("0.2.0-rc.1+build.5")
	if a != b {
		t.Errorf("pod template changes with the chart version:\n%s\n%s", a, b)
	}
	if _, ok := d.Spec.Template.Labels["helm.sh/chart"]; ok {
		t.Error("pod template labels carry helm.sh/chart")
	}
	if d.Labels["helm.sh/chart"] != "capture-gate-0.1.0" { // the version template rendered it at
		t.Errorf("Deployment labels %v: want helm.sh/chart", d.Labels)
	}
}

// TestProbes: the startup probe (on by default, off by value), values merged into each
// probe, and a handler given in values replacing the chart's.
func TestProbes(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	c := renderDeployment(t, base, capabilities()).Spec.Template.Spec.Containers[0]
	if p := c.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "http" ||
		p.PeriodSeconds != 2 || p.FailureThreshold != 30 {
		t.Errorf("default startupProbe %+v: want GET /healthz on http every 2s, 30 failures", p)
	}

	c = renderDeployment(t, readValues(t, "testdata/operations.yaml"), capabilities(prometheusOperator...)).Spec.Template.Spec.Containers[0]
	if p := c.StartupProbe; p == nil || p.PeriodSeconds != 5 || p.FailureThreshold != 24 {
		t.Errorf("startupProbe %+v: want periodSeconds 5, failureThreshold 24", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.SuccessThreshold != 2 || p.PeriodSeconds != 10 {
		t.Errorf("readinessProbe %+v: want GET /readyz, successThreshold 2, periodSeconds 10", p)
	}
	if p := c.LivenessProbe; p == nil || p.TimeoutSeconds != 3 || p.FailureThreshold != 6 {
		t.Errorf("livenessProbe %+v: want timeoutSeconds 3 and the default failureThreshold 6", p)
	}

	c = renderDeployment(t, mergeValues(base, mustParse(t, `
startupProbe: {enabled: false}
livenessProbe:
  exec: {command: [/gate, healthcheck]}
readinessProbe:
  httpGet: {path: /readyz, port: 9090, scheme: HTTP}`)), capabilities()).Spec.Template.Spec.Containers[0]
	if c.StartupProbe != nil {
		t.Errorf("startupProbe %+v with startupProbe.enabled=false", c.StartupProbe)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet != nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"/gate", "healthcheck"}) || p.PeriodSeconds != 10 {
		t.Errorf("livenessProbe %+v: want the exec handler alone, with the default timings", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntVal != 9090 {
		t.Errorf("readinessProbe %+v: want the values' httpGet on 9090", p)
	}
	if _, err := render(t, mergeValues(base, mustParse(t, "livenessProbe: {periodSecond: 5}")), capabilities()); err == nil {
		t.Error("a misspelt probe field rendered; want a schema error")
	}
}

// TestGoMemLimit: GOMEMLIMIT is the container's memory limit in bytes, read by
// Kubernetes, only when a limit is set, and extraEnv may replace it.
func TestGoMemLimit(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		name, values string
		want         bool
	}{
		{"default", "", true},
		{"off", "goMemLimit: {enabled: false}", false},
		{"no memory limit", "resources: {requests: {cpu: 500m, memory: 512Mi}, limits: null}", false},
		{"cpu limit only", "resources: {limits: {memory: null, cpu: '2'}}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := base
			if tc.values != "" {
				vals = mergeValues(base, mustParse(t, tc.values))
			}
			c := renderDeployment(t, vals, capabilities()).Spec.Template.Spec.Containers[0]
			e, ok := envOf(c)["GOMEMLIMIT"]
			if ok != tc.want {
				t.Fatalf("GOMEMLIMIT set: %v, want %v (resources %+v)", ok, tc.want, c.Resources)
			}
			if !ok {
				return
			}
			ref := e.ValueFrom
			if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" ||
				ref.ResourceFieldRef.ContainerName != "gate" || !ref.ResourceFieldRef.Divisor.Equal(resource.MustParse("1")) {
				t.Errorf("GOMEMLIMIT %+v: want resourceFieldRef limits.memory of container gate, divisor 1 (bytes)", e)
			}
		})
	}
	c := renderDeployment(t, mergeValues(base, mustParse(t, "extraEnv: [{name: GOMEMLIMIT, value: 900MiB}]")), capabilities()).Spec.Template.Spec.Containers[0]
	var got []corev1.EnvVar
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			got = append(got, e)
		}
	}
	if len(got) != 1 || got[0].Value != "900MiB" {
		t.Errorf("GOMEMLIMIT with extraEnv: %+v, want extraEnv's alone", got)
	}
}

// TestPodDisruptionBudgetEvictsUnhealthy: unhealthy (running, not ready) pods may be
// evicted by default, so a stalled gate never holds a node drain.
func TestPodDisruptionBudgetEvictsUnhealthy(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		values string
		want   *policyv1.UnhealthyPodEvictionPolicyType
	}{
		{"", ptr(policyv1.AlwaysAllow)},
		{"podDisruptionBudget: {unhealthyPodEvictionPolicy: IfHealthyBudget}", ptr(policyv1.IfHealthyBudget)},
		{`podDisruptionBudget: {unhealthyPodEvictionPolicy: ""}`, nil},
	} {
		vals := base
		if tc.values != "" {
			vals = mergeValues(base, mustParse(t, tc.values))
		}
		objs, err := decode(mustRender(t, vals, capabilities()))
		if err != nil {
			t.Fatal(err)
		}
		got := objs.typed["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget).Spec.UnhealthyPodEvictionPolicy
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%q: unhealthyPodEvictionPolicy %v, want %v", tc.values, got, tc.want)
		}
	}
	if _, err := render(t, mergeValues(base, mustParse(t, "podDisruptionBudget: {unhealthyPodEvictionPolicy: Always}")), capabilities()); err == nil {
		t.Error("unhealthyPodEvictionPolicy Always rendered; want a schema error")
	}
}

// TestPodDisruptionBudgetAllowsADrain: maxUnavailable is a count of at least 1 or a
// percentage above 0% (Kubernetes rounds it up to at least one pod): 0 or 0% would hold
// every node drain and cluster upgrade behind the gates forever, and a negative count or a
// word is refused by the API server at install, after the render.
func TestPodDisruptionBudgetAllowsADrain(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, ok := range []string{"1", "2", `"1%"`, `"50%"`, `"100%"`} {
		objs, err := decode(mustRender(t, mergeValues(base, mustParse(t, "podDisruptionBudget: {maxUnavailable: "+ok+"}")), capabilities()))
		if err != nil {
			t.Fatal(err)
		}
		if got := objs.typed["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget).Spec.MaxUnavailable.String(); got != strings.Trim(ok, `"`) {
			t.Errorf("maxUnavailable %s rendered as %s", ok, got)
		}
	}
	for _, bad := range []string{"0", `"0"`, `"0%"`, `"00%"`, "-1", `"abc"`, `"150%"`, `"5 %"`} {
		if _, err := render(t, mergeValues(base, mustParse(t, "podDisruptionBudget: {maxUnavailable: "+bad+"}")), capabilities()); err == nil {
			t.Errorf("podDisruptionBudget.maxUnavailable %s rendered; want an error", bad)
		}
	}
}

// TestExtras: extraContainers, extraVolumes, extraVolumeMounts and extraEnvFrom reach
// the pod, after the chart's own.
func TestExtras(t *testing.T) {
	d := renderDeployment(t, readValues(t, "testdata/operations.yaml"), capabilities(prometheusOperator...))
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "gate" || spec.Containers[1].Name != "log-shipper" {
		t.Fatalf("containers %v: want gate, then log-shipper", spec.Containers)
	}
	gate := spec.Containers[0]
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "shared" && v.EmptyDir != nil }) {
		t.Errorf("volumes %v lack extraVolumes' shared", spec.Volumes)
	}
	if !slices.ContainsFunc(gate.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "shared" && m.MountPath == "/var/run/shared" }) {
		t.Errorf("gate's mounts %v lack extraVolumeMounts' shared", gate.VolumeMounts)
	}
	if len(gate.EnvFrom) != 2 || gate.EnvFrom[0].ConfigMapRef == nil || gate.EnvFrom[0].ConfigMapRef.Name != "gate-tuning" ||
		gate.EnvFrom[1].SecretRef == nil || gate.EnvFrom[1].SecretRef.Name != "gate-extra" {
		t.Errorf("envFrom %+v: want envFrom's ConfigMap, then extraEnvFrom's Secret", gate.EnvFrom)
	}
	base := readValues(t, "testdata/defaults.yaml")
	if _, err := render(t, mergeValues(base, mustParse(t, "extraContainers: [{name: gate, image: x}]")), capabilities()); err == nil {
		t.Error("an extra container named gate rendered; want a schema error")
	}
	d = renderDeployment(t, mergeValues(base, mustParse(t, "extraEnvFrom: [{secretRef: {name: only}}]")), capabilities())
	if ef := d.Spec.Template.Spec.Containers[0].EnvFrom; len(ef) != 1 || ef[0].SecretRef.Name != "only" {
		t.Errorf("envFrom %+v: want extraEnvFrom's alone", ef)
	}
}

// TestHelmTestPod: the `helm test` pod GETs /readyz through the Service (rendered with
// it), carries the test hook, is not selected as a gate, and is off with tests.enabled.
func TestHelmTestPod(t *testing.T) {
	for _, tc := range []struct {
		file    string
		image   string
		command string
	}{
		{"testdata/defaults.yaml", "busybox:1.37", "wget -q -T 10 -O - http://gate-capture-gate.ingest.svc:8080/readyz"},
		{"testdata/operations.yaml", "curlimages/curl:8.11.1", "curl -sS --fail-with-body --max-time 10 --retry 5 --retry-all-errors --retry-delay 3 http://gate-capture-gate.ingest.svc:8080/readyz"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			objs, err := decode(mustRender(t, readValues(t, tc.file), capabilities(prometheusOperator...)))
			if err != nil {
				t.Fatal(err)
			}
			if len(objs.typed["Pod"]) != 1 || len(objs.typed["Service"]) != 1 {
				t.Fatalf("rendered %v: want one test Pod and the Service", objs.kinds())
			}
			pod := objs.typed["Pod"][0].(*corev1.Pod)
			svc := objs.typed["Service"][0].(*corev1.Service)
			if pod.Annotations["helm.sh/hook"] != "test" {
				t.Errorf("test pod annotations %v: want helm.sh/hook: test", pod.Annotations)
			}
			if subset(svc.Spec.Selector, pod.Labels) {
				t.Errorf("the Service selects the test pod (labels %v)", pod.Labels)
			}
			if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("restartPolicy %q, want Never", pod.Spec.RestartPolicy)
			}
			c := pod.Spec.Containers[0]
			if c.Image != tc.image || strings.Join(c.Command, " ") != tc.command {
				t.Errorf("test container %s %q, want %s %q", c.Image, strings.Join(c.Command, " "), tc.image, tc.command)
			}
			if !strings.Contains(tc.command, svc.Name+"."+svc.Namespace+".svc:") {
				t.Errorf("the test does not go through Service %s", svc.Name)
			}
			if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("test container securityContext %+v: want non-root, read-only root", sc)
			}
		})
	}
	objs, err := decode(mustRender(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "tests: {enabled: false}")), capabilities()))
	if err != nil {
		t.Fatal(err)
	}
	if got := objs.kinds(); !slices.Equal(got, []string{"Deployment", "PodDisruptionBudget", "ServiceAccount"}) {
		t.Errorf("tests.enabled=false rendered %v, want no Pod and no Service", got)
	}
}

// TestRecreateStrategy: strategy.type Recreate renders without the chart's default
// rollingUpdate, which Helm merges into a values file's strategy and which the API server
// refuses beside Recreate ("may not be specified when strategy `type` is 'Recreate'"):
// `--set strategy.type=Recreate` rendered a Deployment no install could apply. The default
// and a rollingUpdate of one's own are kept.
func TestRecreateStrategy(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		values      string
		want        appsv1.DeploymentStrategyType
		wantRolling bool
	}{
		{"", appsv1.RollingUpdateDeploymentStrategyType, true},
		{"strategy: {type: Recreate}", appsv1.RecreateDeploymentStrategyType, false},
		{"strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 2}}", appsv1.RollingUpdateDeploymentStrategyType, true},
	} {
		vals := base
		if tc.values != "" {
			vals = mergeValues(base, mustParse(t, tc.values))
		}
		s := renderDeployment(t, vals, capabilities()).Spec.Strategy
		if s.Type != tc.want || (s.RollingUpdate != nil) != tc.wantRolling {
			t.Errorf("%q: strategy %s with rollingUpdate %+v; want %s, rollingUpdate %v", tc.values, s.Type, s.RollingUpdate, tc.want, tc.wantRolling)
		}
	}
}

// TestProbeFieldsKubernetesTakes: each probe takes successThreshold and
// terminationGracePeriodSeconds only as Kubernetes does (successThreshold 1 for the
// liveness and startup probes, no terminationGracePeriodSeconds on the readiness probe;
// the API server refused the Deployment they rendered), and a liveness or startup probe's
// own terminationGracePeriodSeconds, which replaces the pod's when that probe restarts the
// gate, is held to the gate's worst-case shutdown as the pod's is: 10 cut a restarted
// gate's drain, commit and final Redis flush short.
func TestProbeFieldsKubernetesTakes(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		values string
		want   string // part of the error; "" renders
	}{
		{"readinessProbe: {successThreshold: 2}", ""},
		{"livenessProbe: {successThreshold: 1, terminationGracePeriodSeconds: 50}", ""},
		{"startupProbe: {terminationGracePeriodSeconds: 60}", ""},
		{"livenessProbe: {successThreshold: 2}", "/livenessProbe/successThreshold"},
		{"startupProbe: {successThreshold: 3}", "/startupProbe/successThreshold"},
		{"readinessProbe: {terminationGracePeriodSeconds: 60}", "'terminationGracePeriodSeconds' not allowed"},
		{"livenessProbe: {terminationGracePeriodSeconds: 10}", "livenessProbe.terminationGracePeriodSeconds (10) must be at least"},
		{"startupProbe: {terminationGracePeriodSeconds: 49}", "startupProbe.terminationGracePeriodSeconds (49) must be at least"},
	} {
		r, err := render(t, mergeValues(base, mustParse(t, tc.values)), capabilities())
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.values, err)
			} else if _, err := decode(r); err != nil {
				t.Errorf("%q: %v", tc.values, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want one containing %q", tc.values, err, tc.want)
		}
	}
}
