package gate

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// A reloaded rules file naming a rule topic that exists but that the gate's principal
// may not WRITE to (it may DESCRIBE it) is refused as a bad file is, through the gate's
// own check (Consumer.CheckTopics) on a broker with ACLs: the rules in use stay, the
// refusal is counted once and logged once naming the topic and the WRITE ACL, and
// gate_rules_file_valid is 0. Once WRITE is granted, the same file is put in use at the
// next read, without another edit.
func TestRulesReloadNamingTopicWithoutWriteACLRefused(t *testing.T) {
	t.Parallel()
	kc, cfg, path := mergesWithoutWrite(t, true)
	checks := topicChecks(kc, "merges")
	g, logs := startReloadingLogged(t, cfg, "reload-acl-test")
	first := g.gen.Load()

	writeRules(t, path, teamRule+"  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n")
	waitFor(t, "the edit naming a topic without WRITE to be refused", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "error") == 1
	})
	waitChecks(t, checks, 3) // a few more reads: still refused, counted and logged once
	if g.gen.Load() != first {
		t.Fatalf("a rules file naming a topic the gate may not write was put in use: rules %+v", g.CurrentRules())
	}
	if rs := g.CurrentRules(); len(rs) != 1 || rs[0].Name != "team" {
		t.Errorf("rules in use after the refusal: %+v, want the team rule alone", rs)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "error"); got != 1 {
		t.Errorf("the refusal counted %v times, want once", got)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "unchecked"); got != 0 {
		t.Errorf("the refusal counted unchecked %v times: Kafka answered, the topic is closed to the gate", got)
	}
	if v := gaugeValue(t, g, "gate_rules_file_valid"); v != 0 {
		t.Errorf("gate_rules_file_valid %v while the edit is refused, want 0", v)
	}
	var refused []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "rules file changed but cannot be used") {
			refused = append(refused, l)
		}
	}
	const why = `topic \"merges\": no permission to write it: grant the WRITE ACL on it to the gate's principal`
	if len(refused) != 1 || !strings.Contains(refused[0], why) || !strings.Contains(refused[0], "level=ERROR") {
		t.Errorf("refusal lines %q, want one error line saying %s", refused, why)
	}

	admCl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	write := kadm.NewACLs().Allow("User:gate").AllowHosts("*").Topics("merges").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	rs, err := kadm.NewClient(admCl).CreateACLs(context.Background(), write)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	waitFor(t, "the same edit in use once WRITE is granted", func() bool { return g.gen.Load() != first })
	if rs := g.CurrentRules(); len(rs) != 2 || rs[1].Name != "merges" {
		t.Errorf("rules in use: %+v", rs)
	}
	if v := gaugeValue(t, g, "gate_rules_file_valid"); v != 1 {
		t.Errorf("gate_rules_file_valid %v once the edit is in use, want 1", v)
	}
}

// A refused edit is said again when what refuses it changes kind, the file unchanged: its
// rule topic missing, then (the operator creates it) there but closed to the gate's WRITE.
// Remembered by the file's content alone, the second refusal was never logged, and the
// operator saw only the first reason. Each reason is logged once, over any number of reads,
// and the edit is counted once.
func TestRulesReloadRefusalSaidAgainWhenItsReasonChanges(t *testing.T) {
	t.Parallel()
	kc, cfg, path := mergesWithoutWrite(t, false)
	checks := topicChecks(kc, "merges")
	g, logs := startReloadingLogged(t, cfg, "reload-reason-test")
	first := g.gen.Load()
	refused := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "rules file changed but cannot be used") {
				out = append(out, l)
			}
		}
		return out
	}
	const missing = `topic \"merges\" does not exist`
	const unwritable = `topic \"merges\": no permission to write it: grant the WRITE ACL`

	writeRules(t, path, teamRule+"  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n")
	waitFor(t, "the edit naming a missing topic to be refused", func() bool { return len(refused()) == 1 })
	if l := refused()[0]; !strings.Contains(l, missing) {
		t.Fatalf("first refusal %q, want it to say %s", l, missing)
	}

	admCl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(context.Background(), 1, 1, nil, "merges"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the same edit's refusal said again with its new reason", func() bool { return len(refused()) >= 2 })
	waitChecks(t, checks, 3) // a few more reads with the second reason: nothing more said
	lines := refused()
	if len(lines) != 2 || !strings.Contains(lines[1], unwritable) || strings.Contains(lines[1], missing) {
		t.Errorf("refusal lines %q, want two: the first saying %s, the second %s", lines, missing, unwritable)
	}
	if g.gen.Load() != first {
		t.Fatalf("a rules file naming a topic the gate may not write was put in use: rules %+v", g.CurrentRules())
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "error"); got != 1 {
		t.Errorf("one edit refused for two reasons counted %v times, want once (a read that found the file changed)", got)
	}
	if v := gaugeValue(t, g, "gate_rules_file_valid"); v != 0 {
		t.Errorf("gate_rules_file_valid %v while the edit is refused, want 0", v)
	}
}

// mergesWithoutWrite starts a broker with ACLs on which the gate's principal has what it
// needs and may DESCRIBE the topic merges but not WRITE it (created when exists), and a
// redis-server; it returns the gate's configuration, whose rules file at path holds
// teamRule.
func mergesWithoutWrite(t *testing.T, exists bool) (*kfake.Cluster, config.Config, string) {
	t.Helper()
	srv := redistest.Start(t)
	acls := faulttest.GateNeeds{Input: "events", Group: "capture-gate", Outputs: []string{"events_accepted", "events_overflow", "events_dead_letter"}}.ACLs()
	acls = append(acls, faulttest.AllowACL(kmsg.ACLResourceTypeTopic, "merges", kmsg.ACLOperationDescribe)...) // no WRITE
	topics := []string{"events", "events_accepted", "events_overflow", "events_dead_letter"}
	if exists {
		topics = append(topics, "merges")
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, topics...),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "gate", "gate-secret", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, teamRule)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS":        strings.Join(kc.ListenAddrs(), ","),
		"GATE_KAFKA_SASL_MECHANISM": "plain",
		"GATE_KAFKA_SASL_USERNAME":  "gate",
		"GATE_KAFKA_SASL_PASSWORD":  "gate-secret",
		"GATE_REDIS_URLS":           srv.URL(),
		"GATE_RULES_FILE":           path,
	})
	return kc, cfg, path
}
