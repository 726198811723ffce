package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
)

// TestRunbookOverflowKcatNamesTheTeams: the runbook's "Overflow spikes" entry says to find
// the teams by reading the overflow topic with kcat. The gate's headers on an overflow
// record say why (gate-overflow-reason, -limit, -rule), not whose: the team is in the
// record itself (GATE_KEY_FROM), so a format printing the headers alone (-f '%h\n')
// showed an on-call engineer every record's reason and no team. Run as printed against
// a gate that sent a team to overflow, the command must name the team.
func TestRunbookOverflowKcatNamesTheTeams(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if redistest.InCI() {
			t.Fatalf("kcat not on PATH (%v); CI=%s, so this is a failure, not a skip", err, os.Getenv("CI"))
		}
		t.Skip("kcat not on PATH (the Debian package kcat; set CI=true to make this a failure)")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A command may wrap over lines in the Markdown: join them.
	doc := strings.Join(strings.Fields(string(b)), " ")
	cmds := regexp.MustCompile("`(kcat [^`]*-t <overflow topic>[^`]*)`").FindAllStringSubmatch(doc, -1)
	if len(cmds) == 0 {
		t.Fatal("no `kcat … -t <overflow topic>` command in docs/operations.md: nothing checked")
	}

	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)
	startGate(t, withEnv(kenv, map[string]string{
		"GATE_REDIS_URLS":     rs.URL(),
		"GATE_HTTP_ADDR":      "127.0.0.1:0",
		"GATE_FORCE_OVERFLOW": "hot-team",
	}))
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("events_overflow"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"hot-team","event":"x"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if fs := cl.PollRecords(ctx, 1); fs.NumRecords() == 0 {
		t.Fatalf("no record on events_overflow: %v", fs.Err())
	}

	for _, m := range cmds {
		cmd := strings.NewReplacer("<broker>", kc.ListenAddrs()[0], "<overflow topic>", "events_overflow").Replace(m[1])
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, "bash", "-c", cmd).Output()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", cmd, err, out)
			continue
		}
		if !strings.Contains(string(out), "hot-team") {
			t.Errorf("runbook command %q, run on an overflow topic holding a record of team hot-team, does not name the team; it printed:\n%s", m[1], out)
		}
	}
}

// TestRunbookKcatCommandsNameTheBroker: kcat has no default broker (without -b, or a
// config file naming one, it exits with "-b <broker,..> missing"), so a runbook command
// copied as printed must give it, as the others do with -b <broker>.
func TestRunbookKcatCommandsNameTheBroker(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	cmds := regexp.MustCompile("`(kcat [^`]*)`").FindAllStringSubmatch(doc, -1)
	if len(cmds) == 0 {
		t.Fatal("no kcat command in docs/operations.md: nothing checked")
	}
	for _, m := range cmds {
		if !regexp.MustCompile(`(^| )-b \S`).MatchString(m[1]) {
			t.Errorf("runbook command %q names no broker (-b <broker>): kcat exits with -b <broker,..> missing", m[1])
		}
	}
}

// TestRunbookKafkaCommandsNameTheBroker: Kafka's own tools have no default cluster
// either (kafka-configs without one exits with "Either --bootstrap-server or
// --bootstrap-controller must be specified."), and an admin command needs its
// arguments, so each one the runbook prints must name the broker, as the others do with
// --bootstrap-server <broker>, or elide its arguments with "…" where the command around
// it gives them.
func TestRunbookKafkaCommandsNameTheBroker(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	cmds := regexp.MustCompile("`(kafka-(?:configs|consumer-groups|topics|acls|transactions|features)(?:\\.sh)?(?: [^`]*)?)`").FindAllStringSubmatch(doc, -1)
	if len(cmds) == 0 {
		t.Fatal("no kafka-* command in docs/operations.md: nothing checked")
	}
	for _, m := range cmds {
		if !strings.Contains(m[1], "--bootstrap-server ") && !strings.Contains(m[1], "…") {
			t.Errorf("runbook command %q names no broker (--bootstrap-server <broker>): Kafka's tools exit without one", m[1])
		}
	}
}
