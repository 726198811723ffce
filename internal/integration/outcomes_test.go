package integration

import (
	"encoding/json"
	"time"

	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/outcome"
)

// TestOutcomesOnApacheKafka: gates routing exactly once with outcomes on, through a gate
// joining and leaving and one SIGKILLed mid-stream and restarted, on Apache Kafka. A
// read_committed reader's outcome rows (as gate outcomes reads them) count, per team and
// outcome, exactly the records it finds on the output topics: the rows of a transaction
// commit or abort with its records.
func TestOutcomesOnApacheKafka(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{}, 6, 3)
	outTopic := s.n.Prefix + ".outcomes"
	s.k.CreateTopic(t, outTopic, 3)
	start := func(name string) *faulttest.Gate {
		return s.startGate(name, "exactly-once", "GATE_OUTCOMES_TOPIC", outTopic, "GATE_TRANSACTION_INTERVAL", "300ms")
	}
	gates := map[string]*faulttest.Gate{"a": start("a"), "b": start("b")}
	s.waitMembers(2)
	stop := s.produceLoad()
	s.waitOutputsGrow(2000, "two gates")
	gates["c"] = start("c")
	s.waitMembers(3)
	s.waitOutputsGrow(1000, "three gates")
	gates["c"].Term(t, time.Minute)
	delete(gates, "c")
	s.waitMembers(2)
	gates["b"].Kill(t)
	gates["b"] = start("b")
	s.waitMembers(2)
	s.waitOutputsGrow(1000, "after b's SIGKILL and restart")
	acked := stop()
	s.waitDrained()
	for _, g := range gates {
		g.Term(t, time.Minute)
	}
	rep := s.checkConserved("exactly-once", acked, "with outcomes on")

	committed := []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	want := map[string]map[string]int64{}
	for _, r := range s.k.ReadAll(t, committed, s.n.Outs()...) {
		var v struct {
			Team string `json:"team_id"`
		}
		team := ""
		if json.Unmarshal(r.Value, &v) == nil {
			team = v.Team
		}
		kind := map[string]string{s.n.Acc: "accepted", s.n.Ovf: "overflow", s.n.Dlq: "dead_letter"}[r.Topic]
		if want[team] == nil {
			want[team] = map[string]int64{}
		}
		want[team][kind]++
	}
	rows, skipped, err := outcome.Read(t.Context(), outTopic, time.Now().Add(-time.Hour), kgo.SeedBrokers(s.k.Brokers))
	if err != nil || skipped > 0 {
		t.Fatalf("reading the outcomes: %v (%d records skipped)", err, skipped)
	}
	got := map[string]map[string]int64{}
	for _, r := range rows {
		if r.Outcome == "shadow_over" {
			continue
		}
		if got[r.Team] == nil {
			got[r.Team] = map[string]int64{}
		}
		got[r.Team][r.Outcome] += r.Records
	}
	if want["hot"]["overflow"] == 0 || want[""]["dead_letter"] == 0 {
		t.Fatalf("outputs by team %v: want the hot team overflowing and dead letters", want)
	}
	for _, pair := range []struct {
		a, b map[string]map[string]int64
		what string
	}{{want, got, "the output topics hold"}, {got, want, "the outcomes count"}} {
		for team, kinds := range pair.a {
			for kind, n := range kinds {
				if want[team][kind] != got[team][kind] {
					t.Errorf("team %q %s: outcomes count %d, the output topics hold %d (%s %d)", team, kind, got[team][kind], want[team][kind], pair.what, n)
				}
			}
		}
	}
	t.Logf("FIGURES real_kafka_outcomes in=%d out=%d rows=%d teams=%d", rep.Inputs, rep.Outputs, len(rows), len(want))
}
