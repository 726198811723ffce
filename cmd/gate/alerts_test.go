package main

import (
	"bufio"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/redistest"
)

var updateMetricNames = flag.Bool("update-metric-names", false, "rewrite deploy/helm/testdata/metrics.txt from a gate's /metrics")

// metricNamesFile is the list of metric names a gate exports, which the chart's tests
// (deploy/helm, a module of its own that cannot start a gate) check the alert rules and
// the Grafana dashboard against.
var metricNamesFile = filepath.Join("..", "..", "deploy", "helm", "testdata", "metrics.txt")

// sampleName is the name of a sample line of the text exposition format.
var sampleName = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// ownMetric is a name whose presence does not depend on what the client libraries have
// seen: the gate's own metrics, which are all created at start. franz-go's (gate_kafka_*)
// and the Go and process collectors' may appear later or only on some platforms, so for
// those the file is only checked to hold no name the gate does not export.
func ownMetric(name string) bool {
	return strings.HasPrefix(name, "gate_") && !strings.HasPrefix(name, "gate_kafka_")
}

// TestMetricNamesFile starts a gate (Redis in sentinel mode, so that the sentinel-only
// metrics are there too; its descriptions those of one with TLS to Kafka and a client
// certificate, for the TLS metrics), routes a few records through it and checks
// deploy/helm/testdata/metrics.txt against the names on its /metrics: every name in the
// file is exported, and every gate_ metric exported (franz-go's aside) is in the file.
// -update-metric-names rewrites the file.
func TestMetricNamesFile(t *testing.T) {
	set := redistest.StartSentinel(t, 0, 1)
	kc, kenv := kafkaEnv(t)
	if err := kc.CreateTopic("merges", 1, nil); err != nil {
		t.Fatal(err) // the rule's own topic, which the gate checks at start
	}
	env := withEnv(kenv, map[string]string{
		"GATE_REDIS_MODE":            "sentinel",
		"GATE_REDIS_SENTINEL_MASTER": set.Master,
		"GATE_REDIS_SENTINEL_ADDRS":  strings.Join(set.SentinelAddrs(), ","),
		"GATE_REDIS_URLS":            set.Primary.URL(),
		"GATE_HTTP_ADDR":             "127.0.0.1:0",
		"GATE_TICK_INTERVAL":         "50ms",
		// Every team written every tick: a cold team's window is otherwise written after
		// the window ends, and the wait below needs a write for the pipeline's metrics.
		"GATE_COLD_WRITE_INTERVAL": "50ms",
	})
	// The gate runs rules, whose metrics a gate without them lacks: a team rule, a rule
	// with a topic of its own (its counters appear at start) that nothing matches, and a
	// rule per user (its sketch's and rotations' metrics).
	// Every other name is the same with rules or without; the descriptions below are a
	// gate's without rules.
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte("rules:\n  - {name: merges, key: json:team_id, match: [{field: json:event, in: [$identify]}], limits: [1m:1000], action: topic:merges}\n"+
		"  - {name: team, key: json:team_id, limits: [1m:1000000]}\n"+
		"  - {name: user, key: json:team_id+distinct_id, missing: skip, limits: [1m:100000]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, withEnv(env, map[string]string{"GATE_RULES_FILE": rulesFile}))
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var in []*kgo.Record
	for i := range 10 {
		in = append(in, &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t%d"}`, i)})
	}
	if err := prod.ProduceSync(t.Context(), in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Wait for the records to be routed (franz-go's produce metrics appear with the first
	// produce) and for a tick.
	var names map[string]bool
	waitFor(t, 20*time.Second, "records routed and a tick in /metrics", func() bool {
		_, body := get(t, g.addr, "/metrics")
		names = map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if m := sampleName.FindStringSubmatch(sc.Text()); m != nil {
				names[m[1]] = true
			}
		}
		return names["gate_kafka_produce_bytes_total"] && tickCount.MatchString(body) &&
			strings.Contains(body, `gate_records_total{reason="allowed",route="accepted"} 10`) &&
			names["gate_limiter_pipeline_duration_seconds_bucket"] && names["gate_limiter_pipeline_size_bucket"] && names["gate_limiter_redis_commands_total"] &&
			names["gate_rule_records_total"] && names["gate_rule_topic_records_total"] && names["gate_rules_file_valid"]
	})
	// Vectors whose children appear only with their first event (a produce error, a
	// record rerouted, a team read, a commit) are not on /metrics yet: take them from the
	// registry's descriptions, as they are named. A histogram among them would be listed
	// without its _bucket, _sum and _count (a description does not say its type), so a
	// query of one fails the chart's tests rather than passing unchecked; the scrape
	// above waits for the gate's histograms. franz-go's are left out: kprom describes
	// histograms it only fills when asked to.
	// Described with TLS to Kafka and a client certificate, whose reloader's metrics a
	// gate without TLS lacks (the chart's TLS alerts read them); nothing is dialed.
	ca := faulttest.NewCA(t)
	client := ca.Issue(t, "gate")
	described := withEnv(env, map[string]string{"GATE_KAFKA_TLS": "true", "GATE_KAFKA_TLS_CA_FILE": ca.CAFile,
		"GATE_KAFKA_TLS_CERT_FILE": client.CertFile, "GATE_KAFKA_TLS_KEY_FILE": client.KeyFile})
	cfg, err := config.Load(getenvFrom(described), slices.Collect(maps.Keys(described)))
	if err != nil {
		t.Fatal(err)
	}
	gt, err := gate.New(cfg, slog.New(slog.DiscardHandler), gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gt.CloseRedis(slog.New(slog.DiscardHandler))
	defer gt.Consumer.Close()
	descs := make(chan *prometheus.Desc)
	go func() { gt.Reg.Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("description %s has no fqName", d)
		}
		n := m[1]
		if names[n] || names[n+"_bucket"] || names[n+"_count"] || strings.HasPrefix(n, "gate_kafka_") {
			continue
		}
		names[n] = true
	}

	if *updateMetricNames {
		var b strings.Builder
		b.WriteString("# Metric names a gate exports, as sample names (a histogram's _bucket, _sum and\n" +
			"# _count). Written by `go test ./cmd/gate -run TestMetricNamesFile -update-metric-names`\n" +
			"# in the root module, which checks it against a running gate; read by the chart's tests.\n")
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for n := range names {
				if !yield(n) {
					return
				}
			}
		}) {
			b.WriteString(n + "\n")
		}
		if err := os.WriteFile(metricNamesFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}

	f, err := os.ReadFile(metricNamesFile)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(f), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			listed[l] = true
		}
	}
	for n := range listed {
		if !names[n] {
			t.Errorf("%s lists %s, which the gate does not export", metricNamesFile, n)
		}
	}
	for n := range names {
		if ownMetric(n) && !listed[n] {
			t.Errorf("%s lacks %s", metricNamesFile, n)
		}
	}
	if t.Failed() {
		t.Log("rewrite it with: go test ./cmd/gate -run TestMetricNamesFile -update-metric-names")
	}
}
