package helm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// networkPolicy renders vals and returns the NetworkPolicy and the rest.
func networkPolicy(t *testing.T, vals map[string]any) (*networkingv1.NetworkPolicy, objects) {
	t.Helper()
	objs := renderObjects(t, vals)
	nps := objs.typed["NetworkPolicy"]
	if len(nps) != 1 {
		t.Fatalf("rendered %v, want one NetworkPolicy", objs.kinds())
	}
	return nps[0].(*networkingv1.NetworkPolicy), objs
}

// egressPorts: the TCP (and UDP) ports of each egress rule, as "53/UDP" or "9092".
func egressPorts(r networkingv1.NetworkPolicyEgressRule) []string {
	var out []string
	for _, p := range r.Ports {
		s := p.Port.String()
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			s += "/" + string(*p.Protocol)
		}
		out = append(out, s)
	}
	return out
}

// TestNetworkPolicy: off by default; on, it selects the gates, admits to the HTTP port
// only the monitoring namespace and the helm test pod, and lets out only Kafka (the
// brokers' ports), Redis (the URLs' and sentinels' ports) and DNS (53, UDP and TCP), each
// to the peers given.
func TestNetworkPolicy(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	if objs := renderObjects(t, base); len(objs.typed["NetworkPolicy"]) != 0 {
		t.Fatalf("a NetworkPolicy by default: %v", objs.kinds())
	}

	np, objs := networkPolicy(t, mergeValues(base, mustParse(t, `
networkPolicy: {enabled: true}
kafka: {brokers: [k-0:9092, k-1:9093, k-2:9092]}
redis:
  mode: sentinel
  urls: [redis://redis]
  sentinel: {master: m, addrs: [s-0:26379, s-1:26379]}`)))
	d := objs.typed["Deployment"][0].(*appsv1.Deployment)
	if !subset(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("podSelector %v does not select the gates %v", np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("ingress %+v, want one rule", np.Spec.Ingress)
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || *in.Ports[0].Port != intstr.FromInt32(8080) {
		t.Errorf("ingress ports %+v, want the HTTP port 8080 alone", in.Ports)
	}
	if len(in.From) != 2 || in.From[0].NamespaceSelector == nil || in.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || in.From[0].PodSelector != nil {
		t.Errorf("ingress from %+v, want namespace monitoring (any pod), then the test pod", in.From)
	}
	test := objs.typed["Pod"][0].(*corev1.Pod)
	if len(in.From) == 2 && (in.From[1].PodSelector == nil || in.From[1].NamespaceSelector != nil || !subset(in.From[1].PodSelector.MatchLabels, test.Labels)) {
		t.Errorf("ingress peer %+v does not admit the helm test pod %v", in.From[1], test.Labels)
	}
	want := [][]string{{"9092", "9093"}, {"6379", "26379"}, {"53/UDP", "53"}}
	if len(np.Spec.Egress) != len(want) {
		t.Fatalf("egress %+v, want Kafka, Redis and DNS", np.Spec.Egress)
	}
	for i, r := range np.Spec.Egress {
		if got := egressPorts(r); !slices.Equal(got, want[i]) {
			t.Errorf("egress rule %d ports %v, want %v", i, got, want[i])
		}
	}
	if len(np.Spec.Egress[0].To) != 0 || len(np.Spec.Egress[1].To) != 0 {
		t.Errorf("Kafka and Redis egress restricted to %+v by default, want any address on their ports", np.Spec.Egress[:2])
	}
	if dns := np.Spec.Egress[2].To; len(dns) != 1 || dns[0].PodSelector == nil || dns[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("DNS egress to %+v, want kube-dns in kube-system", dns)
	}

	// The value set: peers given, extra egress, ports from the brokers and the URL, and
	// OpenShift's DNS: its pods listen on 5353 (a policy sees the pod's port, not the
	// Service's 53), in namespace openshift-dns.
	np, _ = networkPolicy(t, readValues(t, "testdata/policy.yaml"))
	want = [][]string{{"9093", "9094"}, {"6380"}, {"5353/UDP", "5353"}, {"4317"}}
	if len(np.Spec.Egress) != len(want) {
		t.Fatalf("egress %+v, want %d rules", np.Spec.Egress, len(want))
	}
	for i, r := range np.Spec.Egress {
		if i >= len(want) || !slices.Equal(egressPorts(r), want[i]) {
			t.Errorf("egress rule %d ports %v, want %v", i, egressPorts(r), want)
		}
	}
	if dns := np.Spec.Egress[2].To; len(dns) != 1 || dns[0].NamespaceSelector == nil ||
		dns[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "openshift-dns" || dns[0].PodSelector != nil {
		t.Errorf("DNS egress to %+v, want namespace openshift-dns", dns)
	}
	if to := np.Spec.Egress[0].To; len(to) != 1 || to[0].PodSelector == nil || to[0].PodSelector.MatchLabels["app"] != "kafka" {
		t.Errorf("Kafka egress to %+v, want the kafka pods of namespace data", to)
	}
	if to := np.Spec.Egress[1].To; len(to) != 1 || to[0].IPBlock == nil || to[0].IPBlock.CIDR != "10.20.0.0/16" {
		t.Errorf("Redis egress to %+v, want 10.20.0.0/16", to)
	}
	if from := np.Spec.Ingress[0].From[0]; from.PodSelector == nil || from.PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" || from.NamespaceSelector == nil {
		t.Errorf("ingress from %+v, want the prometheus pods of namespace monitoring", from)
	}

	// Explicit ports; DNS anywhere; no test pod and no monitoring peer: no ingress at all
	// (an ingress rule without peers would admit everyone).
	np, _ = networkPolicy(t, mergeValues(base, mustParse(t, `
tests: {enabled: false}
networkPolicy:
  enabled: true
  metrics: {namespaceSelector: null}
  kafka: {ports: [9092, 9094]}
  redis: {ports: [7000]}
  dns: {to: []}`)))
	if len(np.Spec.Ingress) != 0 {
		t.Errorf("ingress %+v with no peer, want none", np.Spec.Ingress)
	}
	want = [][]string{{"9092", "9094"}, {"7000"}, {"53/UDP", "53"}}
	for i, r := range np.Spec.Egress {
		if !slices.Equal(egressPorts(r), want[i]) {
			t.Errorf("egress rule %d ports %v, want %v", i, egressPorts(r), want[i])
		}
	}
	if len(np.Spec.Egress[2].To) != 0 {
		t.Errorf("DNS egress to %+v with dns.to [], want anywhere", np.Spec.Egress[2].To)
	}

	// DNS off.
	np, _ = networkPolicy(t, mergeValues(base, mustParse(t, "networkPolicy: {enabled: true, dns: {enabled: false}}")))
	if len(np.Spec.Egress) != 2 {
		t.Errorf("egress %+v with dns off, want Kafka and Redis only", np.Spec.Egress)
	}

	// metrics.from joins the peers of the HTTP port; extraIngress adds rules of its own.
	np, _ = networkPolicy(t, mergeValues(base, mustParse(t, `
networkPolicy:
  enabled: true
  metrics: {from: [{ipBlock: {cidr: 10.0.0.0/8}}]}
  extraIngress: [{from: [{podSelector: {matchLabels: {app: debug}}}], ports: [{port: 6060}]}]`)))
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress %+v, want the HTTP port's rule and extraIngress'", np.Spec.Ingress)
	}
	if from := np.Spec.Ingress[0].From; len(from) != 3 || from[2].IPBlock == nil || from[2].IPBlock.CIDR != "10.0.0.0/8" {
		t.Errorf("HTTP port peers %+v, want monitoring, the test pod, then 10.0.0.0/8", from)
	}
	if r := np.Spec.Ingress[1]; len(r.Ports) != 1 || *r.Ports[0].Port != intstr.FromInt32(6060) || len(r.From) != 1 || r.From[0].PodSelector == nil {
		t.Errorf("extraIngress rule %+v, want port 6060 from app=debug", r)
	}
}

// TestNetworkPolicyPortsAsTheGateReadsThem: a port written with leading zeros, which the
// schema and the gate take in kafka.brokers, redis.urls and redis.sentinel.addrs (the gate
// dials 09092 as 9092), is the same port in the NetworkPolicy: not read as octal, which
// gave 0 for 09092 (the API server refuses the policy) and 64 for 0100 (the gate cut off
// from a broker on port 100).
func TestNetworkPolicyPortsAsTheGateReadsThem(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	np, _ := networkPolicy(t, mergeValues(base, mustParse(t, `
networkPolicy: {enabled: true}
kafka: {brokers: [k-0:09092, k-1:0100]}
redis:
  mode: sentinel
  urls: [redis://redis:06379]
  sentinel: {master: m, addrs: [s-0:02637, s-1:0100]}`)))
	want := [][]string{{"9092", "100"}, {"6379", "2637", "100"}}
	for i, w := range want {
		if got := egressPorts(np.Spec.Egress[i]); !slices.Equal(got, w) {
			t.Errorf("egress rule %d ports %v, want %v", i, got, w)
		}
	}
}

// TestTeamViewOffByDefault: the team view (team names and rates, on the port Prometheus
// scrapes) is off unless turned on, in the gate and in the chart, which sets it always
// (http.teamApi), so that a gate's default changing back could not turn it on unseen.
func TestTeamViewOffByDefault(t *testing.T) {
	gateDefault := ""
	for _, v := range mustGateEnv(t) {
		if v.name == "GATE_TEAM_API" {
			gateDefault = v.def
		}
	}
	if gateDefault != "false" {
		t.Errorf("the gate's GATE_TEAM_API default is %q, want false", gateDefault)
	}
	base := readValues(t, "testdata/defaults.yaml")
	for values, want := range map[string]string{"": "false", "http: {teamApi: true}": "true"} {
		vals := base
		if values != "" {
			vals = mergeValues(base, mustParse(t, values))
		}
		env := envOf(renderDeployment(t, vals, capabilities()).Spec.Template.Spec.Containers[0])
		if got := env["GATE_TEAM_API"].Value; got != want {
			t.Errorf("%q: GATE_TEAM_API = %q, want %q", values, got, want)
		}
	}
}

// TestGoMaxProcs: GOMAXPROCS is the CPU request in whole cores, read by Kubernetes (which
// rounds up), only when there is a request, and extraEnv may replace it.
func TestGoMaxProcs(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for _, tc := range []struct {
		name, values string
		want         bool
	}{
		{"default", "", true},
		{"off", "goMaxProcs: {enabled: false}", false},
		{"no cpu request", "resources: {requests: {cpu: null}, limits: {cpu: '2'}}", false},
		{"whole cores", "resources: {requests: {cpu: 2}}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := base
			if tc.values != "" {
				vals = mergeValues(base, mustParse(t, tc.values))
			}
			c := renderDeployment(t, vals, capabilities()).Spec.Template.Spec.Containers[0]
			e, ok := envOf(c)["GOMAXPROCS"]
			if ok != tc.want {
				t.Fatalf("GOMAXPROCS set: %v, want %v (resources %+v)", ok, tc.want, c.Resources)
			}
			if !ok {
				return
			}
			ref := e.ValueFrom
			if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "requests.cpu" ||
				ref.ResourceFieldRef.ContainerName != "gate" || !ref.ResourceFieldRef.Divisor.Equal(resource.MustParse("1")) {
				t.Errorf("GOMAXPROCS %+v: want resourceFieldRef requests.cpu of container gate, divisor 1 (cores)", e)
			}
		})
	}
	c := renderDeployment(t, mergeValues(base, mustParse(t, "extraEnv: [{name: GOMAXPROCS, value: '3'}]")), capabilities()).Spec.Template.Spec.Containers[0]
	n := 0
	for _, e := range c.Env {
		if e.Name == "GOMAXPROCS" {
			n++
			if e.Value != "3" {
				t.Errorf("GOMAXPROCS %+v with extraEnv, want extraEnv's 3", e)
			}
		}
	}
	if n != 1 {
		t.Errorf("GOMAXPROCS set %d times with extraEnv, want once", n)
	}
}

// TestDeploymentSettings: deploymentAnnotations on the Deployment and not on its pods (a
// change there rolls nothing); minReadySeconds and progressDeadlineSeconds, checked
// against each other as the API server does.
func TestDeploymentSettings(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	d := renderDeployment(t, base, capabilities())
	if len(d.Annotations) != 0 || d.Spec.MinReadySeconds != 0 || d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds != 600 {
		t.Errorf("defaults: annotations %v, minReadySeconds %d, progressDeadlineSeconds %v; want none, 0, 600",
			d.Annotations, d.Spec.MinReadySeconds, d.Spec.ProgressDeadlineSeconds)
	}
	d = renderDeployment(t, readValues(t, "testdata/policy.yaml"), capabilities())
	if d.Annotations["secret.reloader.stakater.com/reload"] != "redis-auth" {
		t.Errorf("Deployment annotations %v, want deploymentAnnotations'", d.Annotations)
	}
	if _, ok := d.Spec.Template.Annotations["secret.reloader.stakater.com/reload"]; ok {
		t.Error("deploymentAnnotations reached the pod template")
	}
	if d.Spec.MinReadySeconds != 15 || *d.Spec.ProgressDeadlineSeconds != 900 {
		t.Errorf("minReadySeconds %d, progressDeadlineSeconds %d; want 15, 900", d.Spec.MinReadySeconds, *d.Spec.ProgressDeadlineSeconds)
	}
}

// TestFixedUIDs: the pods run as 65532 by default; fixedUIDs=false drops runAsUser,
// runAsGroup and fsGroup everywhere (the gate's pod and container, the helm test pod) and
// keeps runAsNonRoot, for OpenShift's restricted SCC.
func TestFixedUIDs(t *testing.T) {
	for _, tc := range []struct {
		file  string
		fixed bool
	}{{"testdata/defaults.yaml", true}, {"testdata/policy.yaml", false}} {
		objs := renderObjects(t, readValues(t, tc.file))
		for name, spec := range podSpecs(objs) {
			psc := spec.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Errorf("%s %s: pod securityContext %+v without runAsNonRoot", tc.file, name, psc)
				continue
			}
			if fixed := psc.RunAsUser != nil && *psc.RunAsUser == 65532 && psc.RunAsGroup != nil && *psc.RunAsGroup == 65532; fixed != tc.fixed {
				t.Errorf("%s %s: pod runs as %v:%v, want fixed 65532: %v", tc.file, name, psc.RunAsUser, psc.RunAsGroup, tc.fixed)
			}
			if !tc.fixed && psc.FSGroup != nil {
				t.Errorf("%s %s: fsGroup %d with fixedUIDs false", tc.file, name, *psc.FSGroup)
			}
			for _, c := range spec.Containers {
				if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || (!tc.fixed && (sc.RunAsUser != nil || sc.RunAsGroup != nil)) {
					t.Errorf("%s %s container %s: securityContext %+v", tc.file, name, c.Name, sc)
				}
			}
		}
	}
	// fixedUIDs drops a user given in securityContext too.
	d := renderDeployment(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "fixedUIDs: false\nsecurityContext: {runAsUser: 1000}")), capabilities())
	if sc := d.Spec.Template.Spec.Containers[0].SecurityContext; sc.RunAsUser != nil {
		t.Errorf("container runAsUser %d with fixedUIDs false", *sc.RunAsUser)
	}
}

// TestImageUserIsNumeric: the image's USER is numeric (65532:65532), so the kubelet can
// check runAsNonRoot without a runAsUser (fixedUIDs false).
func TestImageUserIsNumeric(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "USER" {
			users = append(users, f[1])
		}
	}
	if !slices.Equal(users, []string{"65532:65532"}) {
		t.Errorf("Dockerfile USER %v, want 65532:65532 alone", users)
	}
}

// TestMonitorEndpoints: honorLabels, relabelings and metricRelabelings reach the
// endpoint of the PodMonitor and of the ServiceMonitor.
func TestMonitorEndpoints(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	for kind, field := range map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"} {
		key := strings.ToLower(kind[:1]) + kind[1:]
		vals := mergeValues(base, mustParse(t, "metrics:\n  "+key+`:
    enabled: true
    honorLabels: true
    relabelings: [{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}]
    metricRelabelings: [{sourceLabels: [__name__], regex: go_gc_.*, action: drop}]`))
		objs := renderObjects(t, vals, prometheusOperator...)
		eps, _, _ := unstructured.NestedSlice(objs.custom[kind][0].Object, "spec", field)
		ep := eps[0].(map[string]any)
		if ep["honorLabels"] != true {
			t.Errorf("%s endpoint honorLabels %v, want true", kind, ep["honorLabels"])
		}
		rl, _ := ep["relabelings"].([]any)
		mrl, _ := ep["metricRelabelings"].([]any)
		if len(rl) != 1 || rl[0].(map[string]any)["targetLabel"] != "node" || len(mrl) != 1 || mrl[0].(map[string]any)["action"] != "drop" {
			t.Errorf("%s endpoint relabelings %v, metricRelabelings %v", kind, rl, mrl)
		}
		// Off by default.
		objs = renderObjects(t, mergeValues(base, mustParse(t, "metrics:\n  "+key+": {enabled: true}")), prometheusOperator...)
		eps, _, _ = unstructured.NestedSlice(objs.custom[kind][0].Object, "spec", field)
		for _, k := range []string{"honorLabels", "relabelings", "metricRelabelings"} {
			if v, ok := eps[0].(map[string]any)[k]; ok {
				t.Errorf("%s endpoint %s = %v by default, want unset", kind, k, v)
			}
		}
	}
}

// TestNames: fullnameOverride names every object; nameOverride joins the release name,
// and a join over 63 characters fails rather than being cut (testdata/invalid holds the
// schema's refusals).
func TestNames(t *testing.T) {
	base := readValues(t, "testdata/defaults.yaml")
	objs := renderObjects(t, mergeValues(base, mustParse(t, "fullnameOverride: ingest-gate-eu")))
	if d := objs.typed["Deployment"][0].(*appsv1.Deployment); d.Name != "ingest-gate-eu" {
		t.Errorf("Deployment %s, want ingest-gate-eu", d.Name)
	}
	objs = renderObjects(t, mergeValues(base, mustParse(t, "nameOverride: ratelimit")))
	if d := objs.typed["Deployment"][0].(*appsv1.Deployment); d.Name != "gate-ratelimit" || d.Labels["app.kubernetes.io/name"] != "ratelimit" {
		t.Errorf("Deployment %s labels %v, want gate-ratelimit, name ratelimit", d.Name, d.Labels)
	}
	long := "a" + strings.Repeat("b", 57) // 58: "gate-" + 58 = 63
	if _, err := render(t, mergeValues(base, mustParse(t, "nameOverride: "+long)), capabilities()); err != nil {
		t.Errorf("a 63-character full name: %v", err)
	}
	_, err := render(t, mergeValues(base, mustParse(t, "nameOverride: "+long+"c")), capabilities())
	if want := `the full name "gate-` + long + `c" (release-nameOverride) is 64 characters, over Kubernetes' 63`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

// TestKubeVersion: Chart.yaml's kubeVersion admits no cluster older than the templates
// need: matchLabelKeys in the topology spread constraints is 1.27's.
func TestKubeVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		KubeVersion string `json:"kubeVersion"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]bool{"v1.26.15": false, "v1.27.0": true, "v1.27.3-eks-a5565ad": true, kubeVersion: true} {
		if got := chartutil.IsCompatibleRange(meta.KubeVersion, v); got != want {
			t.Errorf("kubeVersion %q admits %s: %v, want %v", meta.KubeVersion, v, got, want)
		}
	}
	d := renderDeployment(t, readValues(t, "testdata/defaults.yaml"), capabilities())
	if !slices.ContainsFunc(d.Spec.Template.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool { return len(c.MatchLabelKeys) > 0 }) {
		t.Error("no matchLabelKeys rendered: is 1.27 still the floor?")
	}
}
