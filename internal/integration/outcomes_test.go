package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestOutcomesOnApacheKafka: gates with outcomes on, through a gate joining and leaving
// and one SIGKILLed mid-stream and restarted, on Apache Kafka, in each delivery mode.
// Exactly once, a read_committed reader's outcome rows (as gate outcomes reads them)
// count, per team and outcome, exactly the records it finds on the output topics: the
// rows of a transaction commit or abort with its records. At least once, no record's row
// is lost to the SIGKILL: a team's rows count at least every distinct record of it on the
// outputs (the killed gate's uncommitted records, routed again, may count twice, as they
// are written twice, and under another outcome the second time).
func TestOutcomesOnApacheKafka(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{"exactly-once", "at-least-once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			outcomesOnApacheKafka(t, delivery)
		})
	}
}

func outcomesOnApacheKafka(t *testing.T, delivery string) {
	s := newScenario(t, kafkaOpts{}, 6, 3)
	outTopic := s.n.Prefix + ".outcomes"
	s.k.CreateTopic(t, outTopic, 3)
	start := func(name string) *faulttest.Gate {
		return s.startGate(name, delivery, "GATE_OUTCOMES_TOPIC", outTopic, "GATE_TRANSACTION_INTERVAL", "300ms")
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
	rep := s.checkConserved(delivery, acked, "with outcomes on")

	eos := delivery == "exactly-once"
	var opts []kgo.Opt
	if eos {
		opts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	}
	// The distinct records on the outputs, by team and outcome (at least once a record
	// the SIGKILL left uncommitted is on them twice).
	want := faulttest.OutputTally(s.k.ReadAll(t, opts, s.n.Outs()...), map[string]string{s.n.Acc: "accepted", s.n.Ovf: "overflow", s.n.Dlq: "dead_letter"})
	rows := faulttest.ReadRows(t, outTopic, kgo.SeedBrokers(s.k.Brokers))
	got := faulttest.RowTally(rows)
	if want["hot"]["overflow"] == 0 || want[""]["dead_letter"] == 0 {
		t.Fatalf("outputs by team %v: want the hot team overflowing and dead letters", want)
	}
	if eos {
		for _, d := range faulttest.Differences(got, want) {
			t.Error(d)
		}
	} else {
		// A record routed again may meet another outcome the second time (the first
		// gate overflowed it, the next accepted it): the lower bound is the team's.
		for team := range want {
			if g, w := got.Total(team), want.Total(team); g < w {
				t.Errorf("team %q: outcomes count %d records, fewer than the %d distinct ones on the outputs", team, g, w)
			}
		}
	}
	var twice int64 // got's total less want's
	for team := range got {
		twice += got.Total(team)
	}
	for team := range want {
		twice -= want.Total(team)
	}
	t.Logf("FIGURES real_kafka_outcomes delivery=%s in=%d out=%d rows=%d teams=%d counted_twice=%d", delivery, rep.Inputs, rep.Outputs, len(rows), len(want), twice)
}
