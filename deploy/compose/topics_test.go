package compose

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/config"
)

// kafkaInitSpecs matches kafka-init's list of topics: "for spec in events:6 ...; do".
var kafkaInitSpecs = regexp.MustCompile(`for spec in ([^;]*);`)

// docsInitTopics matches the docs' word for how many topics the init step creates.
var docsInitTopics = regexp.MustCompile(`init step that creates the ([a-z]+) topics`)

// kafka-init creates every topic a gate or load service reads or writes, as its own
// configuration names them (the broker creates none: KAFKA_AUTO_CREATE_TOPICS_ENABLE is
// false), GATE_OUTCOMES_TOPIC included, and the docs' compose paragraphs count them right.
func TestComposeTopics(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	kafka, err := p.GetService("kafka")
	if err != nil {
		t.Fatal(err)
	}
	if env(kafka, "KAFKA_AUTO_CREATE_TOPICS_ENABLE") != "false" {
		t.Errorf("kafka: KAFKA_AUTO_CREATE_TOPICS_ENABLE %q, want false (kafka-init creates the topics)", env(kafka, "KAFKA_AUTO_CREATE_TOPICS_ENABLE"))
	}
	init, err := p.GetService("kafka-init")
	if err != nil {
		t.Fatal(err)
	}
	m := kafkaInitSpecs.FindStringSubmatch(strings.Join(init.Command, " "))
	if m == nil {
		t.Fatalf("kafka-init: no topic list in %q", init.Command)
	}
	created := map[string]bool{}
	for spec := range strings.FieldsSeq(m[1]) {
		name, _, ok := strings.Cut(spec, ":")
		if !ok || name == "" {
			t.Fatalf("kafka-init: topic spec %q, want name:partitions", spec)
		}
		created[name] = true
	}

	for _, s := range p.Services {
		if s.Image != "capture-gate:dev" || len(s.Command) == 0 {
			continue
		}
		vars := map[string]string{}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "GATE_") && v != nil {
				vars[k] = *v
			}
		}
		cfg, err := config.Load(func(k string) string { return vars[k] }, slices.Collect(maps.Keys(vars)))
		if err != nil {
			t.Fatalf("service %s: %v", s.Name, err)
		}
		uses := []string{cfg.InputTopic}
		if s.Command[0] == "serve" {
			uses = append(uses, cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic)
			if cfg.OutcomesTopic != "" {
				uses = append(uses, cfg.OutcomesTopic)
			}
		}
		for _, topic := range uses {
			if !created[topic] {
				t.Errorf("service %s uses topic %s, which kafka-init does not create (it creates %v)", s.Name, topic, slices.Sorted(maps.Keys(created)))
			}
		}
	}

	words := map[string]int{"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
	for _, doc := range []string{"README.md", "docs/operations.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		ms := docsInitTopics.FindAllStringSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("%s: no \"init step that creates the N topics\" in its compose paragraph", doc)
		}
		for _, m := range ms {
			if words[m[1]] != len(created) {
				t.Errorf("%s says the init step creates the %s topics; kafka-init creates %d: %v", doc, m[1], len(created), slices.Sorted(maps.Keys(created)))
			}
		}
	}
}

// The compose alerts (deploy/helm TestComposeAlertRules renders them with
// namespace="compose", job="gate") select a job prometheus.yml scrapes and the namespace
// its relabelling sets, and the labels they group and name gates by (pod, namespace) are
// ones its relabelling sets: a renamed job or namespace would leave every alert silent.
func TestComposeAlertsSelectTheScrapedGates(t *testing.T) {
	t.Parallel()
	prom, err := os.ReadFile(filepath.Join(root, "deploy/compose/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile(filepath.Join(root, "deploy/compose/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- job_name:\s*"?([^"\s]+)"?\s*$`).FindAllStringSubmatch(string(prom), -1) {
		jobs[m[1]] = true
	}
	selected := regexp.MustCompile(`job=\\?"([^"\\]+)\\?"`).FindAllStringSubmatch(string(alerts), -1)
	if len(selected) == 0 {
		t.Fatal("alerts.yml selects no job")
	}
	for _, m := range selected {
		if !jobs[m[1]] {
			t.Fatalf("alerts.yml selects job=%q; prometheus.yml scrapes %v", m[1], slices.Sorted(maps.Keys(jobs)))
		}
	}
	for _, m := range regexp.MustCompile(`namespace=\\?"([^"\\]+)\\?"`).FindAllStringSubmatch(string(alerts), -1) {
		if !regexp.MustCompile(`(?m)^\s*- target_label:\s*namespace\s*\n\s*replacement:\s*"?` + regexp.QuoteMeta(m[1]) + `"?\s*$`).Match(prom) {
			t.Fatalf("alerts.yml selects namespace=%q, which prometheus.yml's relabelling does not set", m[1])
		}
	}
	for _, label := range []string{"pod", "namespace"} {
		if !regexp.MustCompile(`(?m)^\s*(- )?target_label:\s*` + label + `\s*$`).Match(prom) {
			t.Errorf("prometheus.yml sets no %s label, which the alerts group and name gates by", label)
		}
	}
}
