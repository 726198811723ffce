package helm

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// renderObjects renders vals on a cluster serving caps and decodes the result strictly.
func renderObjects(t *testing.T, vals map[string]any, caps ...string) objects {
	t.Helper()
	objs, err := decode(mustRender(t, vals, capabilities(caps...)))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// scaledObject renders vals with KEDA on and returns the ScaledObject.
func scaledObject(t *testing.T, vals map[string]any) *unstructured.Unstructured {
	t.Helper()
	objs := renderObjects(t, mergeValues(vals, mustParse(t, "autoscaling: {keda: {enabled: true}}")), kedaAPI...)
	if len(objs.custom["ScaledObject"]) != 1 {
		t.Fatalf("rendered %v, want one ScaledObject", objs.kinds())
	}
	return objs.custom["ScaledObject"][0]
}

// hpa renders vals with the HPA on and returns it.
func hpa(t *testing.T, vals map[string]any) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	objs := renderObjects(t, mergeValues(vals, mustParse(t, "autoscaling: {hpa: {enabled: true}}")))
	if len(objs.typed["HorizontalPodAutoscaler"]) != 1 {
		t.Fatalf("rendered %v, want one HorizontalPodAutoscaler", objs.kinds())
	}
	return objs.typed["HorizontalPodAutoscaler"][0].(*autoscalingv2.HorizontalPodAutoscaler)
}

// kedaBehavior is the ScaledObject's advanced.horizontalPodAutoscalerConfig.behavior,
// decoded strictly as the HPA's type (KEDA copies it into the HPA it makes).
func kedaBehavior(t *testing.T, so *unstructured.Unstructured) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	t.Helper()
	raw, ok, _ := unstructured.NestedMap(so.Object, "spec", "advanced", "horizontalPodAutoscalerConfig", "behavior")
	if !ok {
		t.Fatal("ScaledObject without advanced.horizontalPodAutoscalerConfig.behavior")
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var out autoscalingv2.HorizontalPodAutoscalerBehavior
	if err := yaml.UnmarshalStrict(b, &out); err != nil {
		t.Fatalf("behavior %s: %v", b, err)
	}
	return &out
}

// TestScaleDownIsCalm: by default both autoscalers scale down one pod per 5 minutes after
// a 10-minute stabilization window (every step is a rebalance), the HPA and the one KEDA
// makes alike; autoscaling.behavior changes both, autoscaling.hpa.behavior is laid over it
// for the HPA alone.
func TestScaleDownIsCalm(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	h := hpa(t, base).Spec.Behavior
	k := kedaBehavior(t, scaledObject(t, base))
	for name, b := range map[string]*autoscalingv2.HorizontalPodAutoscalerBehavior{"HPA": h, "ScaledObject": k} {
		if b == nil || b.ScaleDown == nil {
			t.Fatalf("%s: no scaleDown behavior", name)
		}
		sd := b.ScaleDown
		if sd.StabilizationWindowSeconds == nil || *sd.StabilizationWindowSeconds != 600 {
			t.Errorf("%s: scaleDown stabilizationWindowSeconds %v, want 600", name, sd.StabilizationWindowSeconds)
		}
		if len(sd.Policies) != 1 || sd.Policies[0].Type != autoscalingv2.PodsScalingPolicy || sd.Policies[0].Value != 1 || sd.Policies[0].PeriodSeconds != 300 {
			t.Errorf("%s: scaleDown policies %+v, want one pod per 300s", name, sd.Policies)
		}
		if b.ScaleUp == nil || b.ScaleUp.StabilizationWindowSeconds == nil || *b.ScaleUp.StabilizationWindowSeconds != 60 {
			t.Errorf("%s: scaleUp %+v, want a 60s stabilization window", name, b.ScaleUp)
		}
	}

	// autoscaling.behavior for both; hpa.behavior over it, key by key, for the HPA only.
	vals := mergeValues(base, mustParse(t, `
autoscaling:
  behavior: {scaleDown: {stabilizationWindowSeconds: 900}}
  hpa: {behavior: {scaleDown: {policies: [{type: Percent, value: 10, periodSeconds: 600}]}}}`))
	h = hpa(t, vals).Spec.Behavior
	if sd := h.ScaleDown; *sd.StabilizationWindowSeconds != 900 || len(sd.Policies) != 1 || sd.Policies[0].Type != autoscalingv2.PercentScalingPolicy {
		t.Errorf("HPA scaleDown %+v: want the window of autoscaling.behavior and the policy of hpa.behavior", sd)
	}
	k = kedaBehavior(t, scaledObject(t, vals))
	if sd := k.ScaleDown; *sd.StabilizationWindowSeconds != 900 || len(sd.Policies) != 1 || sd.Policies[0].Type != autoscalingv2.PodsScalingPolicy {
		t.Errorf("KEDA scaleDown %+v: want autoscaling.behavior's alone", sd)
	}

	// null: Kubernetes' defaults, for both.
	vals = mergeValues(base, mustParse(t, "autoscaling: {behavior: null}"))
	if b := hpa(t, vals).Spec.Behavior; b != nil {
		t.Errorf("HPA behavior %+v with autoscaling.behavior null, want none", b)
	}
	if _, ok, _ := unstructured.NestedMap(scaledObject(t, vals).Object, "spec", "advanced"); ok {
		t.Error("ScaledObject advanced with autoscaling.behavior null, want none")
	}

	if _, err := render(t, mergeValues(base, mustParse(t, "autoscaling: {behavior: {scaleDown: {policies: [{type: Replicas, value: 1, periodSeconds: 60}]}}}")), capabilities()); err == nil ||
		!strings.Contains(err.Error(), "/autoscaling/behavior") {
		t.Errorf("a policy of type Replicas: error %v, want a schema error on /autoscaling/behavior", err)
	}
}

// TestKEDAFallbackAndAnnotations: the fallback is on by default with the fixed replica
// count (within min..max), can be set or turned off; annotations (pause) pass through;
// cooldownPeriod is KEDA's.
func TestKEDAFallbackAndAnnotations(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml") // 12 partitions
	for _, tc := range []struct {
		values    string
		threshold int64
		replicas  int64 // 0: no fallback
	}{
		{"", 3, 12},
		{"scaling: {partitionsPerPod: 5}", 3, 3}, // ceil(12/5)
		{"autoscaling: {maxReplicas: 4}", 3, 4},  // within max
		{"scaling: {partitionsPerPod: 12}\nautoscaling: {minReplicas: 2}", 3, 2}, // within min
		{"autoscaling: {keda: {fallback: {failureThreshold: 5, replicas: 6}}}", 5, 6},
		{"autoscaling: {keda: {fallback: {enabled: false}}}", 0, 0},
	} {
		vals := base
		if tc.values != "" {
			vals = mergeValues(base, mustParse(t, tc.values))
		}
		so := scaledObject(t, vals)
		fb, ok, _ := unstructured.NestedMap(so.Object, "spec", "fallback")
		if tc.replicas == 0 {
			if ok {
				t.Errorf("%q: fallback %v, want none", tc.values, fb)
			}
			continue
		}
		if got := mustInt(t, so, "spec", "fallback", "replicas"); got != tc.replicas {
			t.Errorf("%q: fallback replicas %d, want %d", tc.values, got, tc.replicas)
		}
		if got := mustInt(t, so, "spec", "fallback", "failureThreshold"); got != tc.threshold {
			t.Errorf("%q: fallback failureThreshold %d, want %d", tc.values, got, tc.threshold)
		}
	}

	so := scaledObject(t, mergeValues(base, mustParse(t, `
autoscaling:
  keda:
    cooldownPeriod: 900
    annotations: {autoscaling.keda.sh/paused: "true", autoscaling.keda.sh/paused-replicas: "6"}`)))
	if a := so.GetAnnotations(); a["autoscaling.keda.sh/paused"] != "true" || a["autoscaling.keda.sh/paused-replicas"] != "6" {
		t.Errorf("ScaledObject annotations %v, want the pause annotations", a)
	}
	if got := mustInt(t, so, "spec", "cooldownPeriod"); got != 900 {
		t.Errorf("cooldownPeriod %d, want 900", got)
	}
}

// TestHPANeedsATarget: an HPA with neither a CPU nor a memory target fails the render
// (the API server would give it 80% CPU); either alone is enough.
func TestHPANeedsATarget(t *testing.T) {
	base := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "autoscaling: {hpa: {enabled: true}}"))
	_, err := render(t, mergeValues(base, mustParse(t, "autoscaling: {hpa: {targetCPUUtilizationPercentage: null, targetMemoryUtilizationPercentage: null}}")), capabilities())
	if want := "autoscaling.hpa needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
	h := hpa(t, mergeValues(base, mustParse(t, "autoscaling: {hpa: {targetCPUUtilizationPercentage: null, targetMemoryUtilizationPercentage: 75}}")))
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != "memory" {
		t.Errorf("HPA metrics %+v, want memory alone", h.Spec.Metrics)
	}
}

// cluster is a ClientProvider serving the Get of lookup from a few objects, as a live
// cluster would (the rest of the dynamic client is not called by a render).
type cluster struct {
	dynamic.NamespaceableResourceInterface                                       // nil: only Namespace and Get are implemented
	objs                                   map[string]*unstructured.Unstructured // "kind/namespace/name"
	kind, ns                               string
}

func newCluster(t *testing.T, objs ...runtime.Object) cluster {
	t.Helper()
	c := cluster{objs: map[string]*unstructured.Unstructured{}}
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		c.objs[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = u
	}
	return c
}

func (c cluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	c.kind = kind
	return c, true, nil
}

func (c cluster) Namespace(ns string) dynamic.ResourceInterface {
	c.ns = ns
	return c
}

func (c cluster) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*unstructured.Unstructured, error) {
	if u, ok := c.objs[c.kind+"/"+c.ns+"/"+name]; ok {
		return u.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: strings.ToLower(c.kind) + "s"}, name)
}

// renderUpgrade renders vals as an upgrade of the release on a cluster holding objs.
func renderUpgrade(t *testing.T, vals map[string]any, objs ...runtime.Object) *appsv1.Deployment {
	t.Helper()
	c := mustChart(t)
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 2, IsUpgrade: true}
	top, err := chartutil.ToRenderValues(c, vals, opts, capabilities(kedaAPI...))
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.RenderWithClientProvider(c, top, newCluster(t, objs...))
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{files: map[string]string{}}
	for name, out := range files {
		if !strings.HasSuffix(name, "NOTES.txt") {
			r.files[name] = out
		}
	}
	decoded, err := decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return decoded.typed["Deployment"][0].(*appsv1.Deployment)
}

// TestAutoscalingKeepsLiveReplicas: with an autoscaler, the Deployment carries the live
// replica count while it exists, so that switching a release from a fixed count to KEDA or
// the HPA does not have Helm's three-way merge delete replicas (which the API server would
// default to 1); without a live Deployment (an install, helm template, where lookup sees
// no cluster) it is left out.
func TestAutoscalingKeepsLiveReplicas(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml") // 12 partitions: 12 fixed replicas
	live := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "gate-capture-gate", Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr[int32](9)},
	}
	other := live.DeepCopy()
	other.Namespace = "elsewhere"
	for _, tc := range []struct {
		name   string
		values string
		live   []runtime.Object
		want   *int32
	}{
		{"fixed, live", "", []runtime.Object{live}, ptr[int32](12)},
		{"keda, live", "autoscaling: {keda: {enabled: true}}", []runtime.Object{live}, ptr[int32](9)},
		{"hpa, live", "autoscaling: {hpa: {enabled: true}}", []runtime.Object{live}, ptr[int32](9)},
		{"keda, none live", "autoscaling: {keda: {enabled: true}}", nil, nil},
		{"keda, another namespace's", "autoscaling: {keda: {enabled: true}}", []runtime.Object{other}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := base
			if tc.values != "" {
				vals = mergeValues(base, mustParse(t, tc.values))
			}
			got := renderUpgrade(t, vals, tc.live...).Spec.Replicas
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("replicas %v, want %v", fmtInt32Ptr(got), fmtInt32Ptr(tc.want))
			}
		})
	}
	// Without a cluster (engine.Render: helm template), the autoscaled Deployment has no
	// replicas, as TestRender's keda and hpa value sets check too.
	d := renderDeployment(t, mergeValues(base, mustParse(t, "autoscaling: {keda: {enabled: true}}")), capabilities(kedaAPI...))
	if d.Spec.Replicas != nil {
		t.Errorf("replicas %d without a cluster, want none", *d.Spec.Replicas)
	}
}

func fmtInt32Ptr(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// TestKEDAExtraMetadataKeepsTheTrigger: extraMetadata may not set a trigger key the chart
// sets from the gate's own values. Rendered twice in the trigger's metadata, the last copy
// wins without a word when Helm installs it: KEDA would scale on another topic, group or
// cluster than the one the gate reads, or past the partition count.
func TestKEDAExtraMetadataKeepsTheTrigger(t *testing.T) {
	base := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "autoscaling: {keda: {enabled: true}}"))
	so := scaledObject(t, base)
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	set, _, _ := unstructured.NestedStringMap(triggers[0].(map[string]any), "metadata")
	if len(set) < 7 {
		t.Fatalf("trigger metadata %v: want the chart's keys", set)
	}
	for key := range set {
		vals := mergeValues(base, map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"extraMetadata": map[string]any{key: "other"}}}})
		_, err := render(t, vals, capabilities(kedaAPI...))
		if err == nil || !strings.Contains(err.Error(), "autoscaling.keda.extraMetadata sets "+key) {
			t.Errorf("extraMetadata.%s: error %v, want one naming it", key, err)
		}
	}
	// A key the chart leaves to the user still reaches the trigger.
	so = scaledObject(t, mergeValues(base, mustParse(t, "autoscaling: {keda: {extraMetadata: {tls: enable}}}")))
	triggers, _, _ = unstructured.NestedSlice(so.Object, "spec", "triggers")
	if got, _, _ := unstructured.NestedString(triggers[0].(map[string]any), "metadata", "tls"); got != "enable" {
		t.Errorf("extraMetadata.tls reached the trigger as %q, want enable", got)
	}
}
