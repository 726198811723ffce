package compose

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/gate"
)

// root is the gate's repository, where docker-compose.yml is.
const root = "../.."

func loadProject(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(abs, "docker-compose.yml")}},
		Environment: types.Mapping{}, // nothing from the developer's shell
	})
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// gateBinary builds cmd/gate into a temporary directory.
func gateBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gate")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/gate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/gate: %v\n%s", err, out)
	}
	return bin
}

// The file holds the services the README promises, wired as they must be.
func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	want := []string{"grafana", "kafka", "kafka-init", "load", "gate", "prometheus", "redis"}
	if got := p.ServiceNames(); !sameSet(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Kafka in KRaft mode, one node as broker and controller.
	kafka := svc("kafka")
	if !strings.HasPrefix(kafka.Image, "apache/kafka:") || env(kafka, "KAFKA_PROCESS_ROLES") != "broker,controller" {
		t.Errorf("kafka: image %q, roles %q: want apache/kafka in KRaft mode", kafka.Image, env(kafka, "KAFKA_PROCESS_ROLES"))
	}
	// The topics are created before the gate or the load start.
	for _, name := range []string{"gate", "load"} {
		s := svc(name)
		if d, ok := s.DependsOn["kafka-init"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: want depends_on kafka-init: service_completed_successfully, got %+v", name, s.DependsOn)
		}
		if s.Build == nil || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: want built from the top-level Dockerfile, got %+v", name, s.Build)
		}
	}
	init := strings.Join(svc("kafka-init").Command, " ")
	for _, topic := range []string{"events:", "events_accepted:", "events_overflow:", "events_dead_letter:"} {
		if !strings.Contains(init, topic) {
			t.Errorf("kafka-init does not create %s: %s", strings.TrimSuffix(topic, ":"), init)
		}
	}
	if g := svc("gate"); g.Deploy == nil || g.Deploy.Replicas == nil || *g.Deploy.Replicas < 2 {
		t.Errorf("gate: want at least 2 replicas in one group, got %+v", g.Deploy)
	}
	// The gate's health comes from the gate itself: the image has no shell or curl.
	if hc := svc("gate").HealthCheck; hc == nil || strings.Join(hc.Test, " ") != "CMD /usr/local/bin/gate healthcheck" {
		t.Errorf("gate: want healthcheck [CMD, /usr/local/bin/gate, healthcheck], got %+v", hc)
	}
	// Every published port (Grafana, Prometheus, Kafka's) answers this machine only: the
	// Kafka listener has no authentication, so on every interface anyone on the network
	// could produce, read or delete the topics. Grafana's anonymous users only look.
	for _, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: port %s published on %q, want 127.0.0.1 only", s.Name, port.Published, port.HostIP)
			}
		}
	}
	if g := svc("grafana"); env(g, "GF_AUTH_ANONYMOUS_ORG_ROLE") != "Viewer" || env(g, "GF_AUTH_DISABLE_LOGIN_FORM") == "true" {
		t.Errorf("grafana: anonymous role %q, login form disabled %q: want Viewer and a login for admins",
			env(g, "GF_AUTH_ANONYMOUS_ORG_ROLE"), env(g, "GF_AUTH_DISABLE_LOGIN_FORM"))
	}
	// Prometheus loads the chart's alerts (deploy/helm TestComposeAlertRules keeps them in step).
	prom, err := os.ReadFile(filepath.Join(root, "deploy/compose/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	mounted := false
	for _, v := range svc("prometheus").Volumes {
		mounted = mounted || (strings.HasSuffix(v.Source, "deploy/compose/alerts.yml") && v.Target == "/etc/prometheus/alerts.yml")
	}
	if !mounted || !bytes.Contains(prom, []byte("/etc/prometheus/alerts.yml")) {
		t.Errorf("prometheus: want deploy/compose/alerts.yml mounted at /etc/prometheus/alerts.yml and listed in rule_files")
	}
	// Every file mounted from the repository exists.
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", s.Name, v.Source, err)
			}
		}
	}
	// The Dockerfile: multi-stage, static, non-root, minimal base; cross-compiled for the
	// target's architecture (no emulation), version and commit stamped, OCI labels.
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" AS build", "CGO_ENABLED=0", "FROM gcr.io/distroless/static:nonroot", "USER 65532:65532",
		"FROM --platform=$BUILDPLATFORM ", "GOARCH=$TARGETARCH", "buildinfo.Version=${VERSION}", "buildinfo.Commit=${COMMIT}",
		"org.opencontainers.image.source=", "org.opencontainers.image.version=", "org.opencontainers.image.revision=", "org.opencontainers.image.licenses="} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// gateEnvTable matches a variable's row in `gate env`.
var gateEnvTable = regexp.MustCompile("(?m)^\\| `(GATE_[A-Z0-9_]+)` \\|")

// Every GATE_ variable the compose file sets is one the gate reads, and the gate
// subcommands it runs parse.
func TestComposeGateVariablesAndCommands(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	bin := gateBinary(t)
	out, err := exec.Command(bin, "env").Output()
	if err != nil {
		t.Fatalf("gate env: %v", err)
	}
	known := map[string]bool{}
	for _, m := range gateEnvTable.FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	if len(known) < 40 {
		t.Fatalf("gate env lists %d variables:\n%s", len(known), out)
	}
	set := 0
	for _, s := range p.Services {
		for k := range s.Environment {
			if !strings.HasPrefix(k, "GATE_") {
				continue
			}
			set++
			if !known[k] {
				t.Errorf("service %s sets %s, which the gate does not know", s.Name, k)
			}
		}
	}
	if set == 0 {
		t.Error("no GATE_ variable set in docker-compose.yml")
	}

	for _, s := range p.Services {
		if s.Image != "capture-gate:dev" {
			continue
		}
		if len(s.Command) == 0 || !slices.Contains([]string{"serve", "load"}, s.Command[0]) {
			t.Errorf("service %s runs %q: want serve or load", s.Name, s.Command)
			continue
		}
		if s.Command[0] != "load" {
			continue
		}
		// Flags parse up to -h, which then prints the usage and exits 0.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		args := append(slices.Clone(s.Command), "-h")
		if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			t.Errorf("service %s: gate %s: %v\n%s", s.Name, strings.Join(args, " "), err, out)
		}
		cancel()
	}
}

// Every metric the dashboard's queries name is one the gate exports.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy/grafana/gate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("gate-dashboard.json: %v", err)
	}
	if dash.UID == "" {
		t.Error("the dashboard has no uid")
	}
	var panels []panel
	for _, p := range dash.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...) // a collapsed row holds its panels
	}
	used := map[string]bool{}
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no gate metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !exported.has(n) {
					t.Errorf("panel %q: %s is not a metric the gate exports", p.Title, n)
				}
			}
		}
	}
	// The panels the issue asks for.
	for _, want := range []string{"gate_records_total", "gate_limiter_decisions_total", "gate_limiter_tick_duration_seconds_bucket",
		"gate_limiter_pipeline_duration_seconds_bucket", "gate_limiter_tick_redis_commands_sum", "gate_limiter_pending_writes",
		"gate_limiter_errors_total", "gate_produce_errors_total", "gate_partition_lag_records", "gate_rebalances_total"} {
		if !used[want] {
			t.Errorf("no panel queries %s", want)
		}
	}
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// metricName matches the gate's metric names in PromQL: its own (gate_), franz-go's
// (gate_kafka_) and the runtime's (go_, process_). Label names and functions never start
// so; quoted label values are removed first.
var (
	metricName  = regexp.MustCompile(`\b(?:gate|go|process)_[a-zA-Z0-9_]*[a-zA-Z0-9]\b`)
	quotedValue = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

func metricNames(expr string) []string {
	return metricName.FindAllString(quotedValue.ReplaceAllString(expr, `""`), -1)
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	got := metricNames(`sum by (le, exported_instance) (rate(gate_limiter_pipeline_duration_seconds_bucket{reason="gate_x"}[$__rate_interval])) / go_goroutines`)
	if want := []string{"gate_limiter_pipeline_duration_seconds_bucket", "go_goroutines"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
}

// metricSet is the names of the metrics a registry's collectors describe.
type metricSet map[string]bool

// has reports an exported name, or a histogram's or summary's series of one.
func (s metricSet) has(name string) bool {
	if s[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && s[base] {
			return true
		}
	}
	return false
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedMetrics builds a gate with internal/gate.New, as `gate serve` does, in
// sentinel mode so that its sentinel-only metric is there too, and returns every metric
// name its registry describes, including vectors with no series yet (a lag gauge before
// any partition is assigned, a produce error counter before any error). Nothing
// connects: New starts nothing.
func exportedMetrics(t *testing.T) metricSet {
	t.Helper()
	vars := map[string]string{
		"GATE_KAFKA_BROKERS":         "127.0.0.1:1",
		"GATE_REDIS_MODE":            "sentinel",
		"GATE_REDIS_SENTINEL_MASTER": "gate-master",
		"GATE_REDIS_SENTINEL_ADDRS":  "127.0.0.1:1",
		"GATE_REDIS_URLS":            "redis://127.0.0.1:1/0",
	}
	cfg, err := config.Load(func(k string) string { return vars[k] }, slices.Collect(maps.Keys(vars)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	g, err := gate.New(cfg, log, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseRedis(log)
	defer g.Consumer.Close()

	names := metricSet{}
	ch := make(chan *prometheus.Desc)
	go func() {
		g.Reg.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	for _, want := range []string{"gate_records_total", "gate_limiter_decisions_total", "gate_limiter_tick_duration_seconds",
		"gate_partition_lag_records", "go_goroutines", "process_resident_memory_bytes", "gate_overrides_hash_missing",
		"gate_redis_primary_switches_total"} {
		if !names[want] {
			t.Fatalf("the gate's registry does not describe %s; found %d names", want, len(names))
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(names)), func(n string) bool { return strings.HasPrefix(n, "gate_kafka_") }) {
		t.Fatal("no gate_kafka_ (kprom) metric described")
	}
	// A gate with rules exports the rules' metrics too: those of the rules in use are not
	// described (they change with the file) but gathered, each child made at start (a
	// rule with a topic of its own, for gate_rule_topic_records_total).
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n  - {name: merges, key: json:team_id, limits: [1m:100], action: 'topic:merges'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vars["GATE_RULES_FILE"] = rulesFile
	cfg, err = config.Load(func(k string) string { return vars[k] }, slices.Collect(maps.Keys(vars)))
	if err != nil {
		t.Fatal(err)
	}
	rg, err := gate.New(cfg, log, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rg.CloseRedis(log)
	defer rg.Consumer.Close()
	mfs, err := rg.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	if !names["gate_rule_records_total"] || !names["gate_rules_file_valid"] {
		t.Fatal("a gate with rules exports no gate_rule_records_total or gate_rules_file_valid")
	}
	// A gate on Redis over TLS with a client certificate exports its TLS files' metrics.
	ca := faulttest.NewCA(t)
	kp := ca.Issue(t, "gate")
	tlsVars := map[string]string{
		"GATE_KAFKA_BROKERS":       "127.0.0.1:1",
		"GATE_REDIS_URLS":          "rediss://127.0.0.1:1/0",
		"GATE_REDIS_TLS_CA_FILE":   ca.CAFile,
		"GATE_REDIS_TLS_CERT_FILE": kp.CertFile,
		"GATE_REDIS_TLS_KEY_FILE":  kp.KeyFile,
	}
	cfg, err = config.Load(func(k string) string { return tlsVars[k] }, slices.Collect(maps.Keys(tlsVars)))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := gate.New(cfg, log, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.CloseRedis(log)
	defer tg.Consumer.Close()
	if mfs, err = tg.Reg.Gather(); err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	if !names["gate_tls_reload_errors_total"] || !names["gate_tls_client_cert_expiry_timestamp_seconds"] {
		t.Fatal("a gate with TLS files exports no gate_tls_reload_errors_total or gate_tls_client_cert_expiry_timestamp_seconds")
	}
	return names
}

func env(s types.ServiceConfig, k string) string {
	if v := s.Environment[k]; v != nil {
		return *v
	}
	return ""
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// Each gate service's stop_grace_period covers the gate's worst-case shutdown
// (config.ShutdownBound, logged as shutdown_bound), as the chart's
// terminationGracePeriodSeconds does. Docker kills the container at the end of it, so a
// shorter one cuts the final commit or the final flush of the counts.
func TestComposeStopGracePeriod(t *testing.T) {
	t.Parallel()
	gates := 0
	for _, s := range loadProject(t).Services {
		vars := map[string]string{}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "GATE_") && v != nil {
				vars[k] = *v
			}
		}
		if len(vars) == 0 || s.Name == "load" {
			continue
		}
		gates++
		cfg, err := config.Load(func(k string) string { return vars[k] }, slices.Collect(maps.Keys(vars)))
		if err != nil {
			t.Fatalf("service %s: %v", s.Name, err)
		}
		bound := cfg.ShutdownBound()
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < bound {
			t.Errorf("service %s: stop_grace_period %v, want at least the gate's shutdown bound %v", s.Name, s.StopGracePeriod, bound)
		}
	}
	if gates == 0 {
		t.Fatal("no gate service in docker-compose.yml")
	}
}

// Every gate service restarts when its gate exits: a stopped container leaves Docker's
// DNS, and with it Prometheus's targets (prometheus.yml's dns_sd_configs), so GateDown,
// which reads up == 0 of a target Prometheus still has, never fired for it (a review).
func TestGatesRestart(t *testing.T) {
	t.Parallel()
	gates := 0
	for _, s := range loadProject(t).Services {
		if !slices.Contains(s.Command, "serve") {
			continue
		}
		gates++
		if s.Restart != "unless-stopped" && s.Restart != "always" {
			t.Errorf("service %s runs gate serve with restart %q, want unless-stopped", s.Name, s.Restart)
		}
	}
	if gates == 0 {
		t.Fatal("no service runs gate serve")
	}
}
