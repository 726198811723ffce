package faulttest_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestOutcomesExactlyOnceUnderKillAndRebalance is issue Outcomes' conservation on the
// in-process broker with the gate's own processes: gates writing outcome rows, exactly
// once, through a gate joining and leaving on SIGTERM and one killed with SIGKILL
// mid-stream and restarted under its transactional id (its open transaction, records and
// any rows in it, aborted when the new one fences it; its aggregates, never sealed, gone
// with it). A read_committed reader's rows (as gate outcomes reads them) count, per team
// and outcome, exactly the records on the output topics, which hold every input record
// once. An in-process Close (the consume package's conservation test) leaves the group
// with a last revoke; a SIGKILL gives the gate none.
func TestOutcomesExactlyOnceUnderKillAndRebalance(t *testing.T) {
	t.Parallel()
	const outcomesTopic = "events_outcomes"
	f := newFleet(t, kfake.SeedTopics(3, outcomesTopic))
	f.vars["GATE_DELIVERY"] = "exactly-once"
	// As in TestExactlyOnceUnderKillAndRebalance: above the group's rebalance timeout.
	f.vars["GATE_TRANSACTION_TIMEOUT"] = (faulttest.RebalanceTimeout + 5*time.Second).String()
	f.vars["GATE_OUTCOMES_TOPIC"] = outcomesTopic
	start := func(name string) *faulttest.Gate {
		f.vars["GATE_TRANSACTIONAL_ID"] = "outcomes-" + name
		return f.start(name)
	}
	start("a")
	start("b")
	f.waitMembers(2)
	l := f.produce()
	f.waitOutputsGrow(1000, "two gates")
	start("c")
	f.waitMembers(3)
	f.waitOutputsGrow(500, "three gates")
	f.gates["c"].Term(t, 30*time.Second)
	delete(f.gates, "c")
	f.waitMembers(2)
	f.waitOutputsGrow(500, "back to two")
	f.gates["b"].Kill(t)
	start("b") // the same transactional id: fences the dead one's transaction
	f.waitMembers(2)
	f.waitOutputsGrow(1000, "after b's SIGKILL and restart")
	l.Stop()
	f.waitDrained() // the commits at the ends: under exactly-once, in the rows' transactions

	r := faulttest.Conservation(t, f.c, faulttest.ReadCommitted(), inTopic, outTopics...)
	if !r.OK() {
		t.Errorf("read_committed saw records lost, duplicated or stray: %s", r)
	}
	outputs := faulttest.ReadTopics(t, f.c, time.Minute, faulttest.ReadCommitted(), outTopics...)
	want := faulttest.OutputTally(outputs, map[string]string{accTopic: "accepted", ovfTopic: "overflow", dlqTopic: "dead_letter"})
	if want["hot"]["overflow"] == 0 || want[""]["dead_letter"] == 0 {
		t.Fatalf("outputs by team %v: want the hot team overflowing and dead letters", want)
	}
	rows := faulttest.ReadRows(t, outcomesTopic, kgo.SeedBrokers(f.c.ListenAddrs()...))
	for _, d := range faulttest.Differences(faulttest.RowTally(rows), want) {
		t.Error(d)
	}
	t.Logf("exactly-once with outcomes: %s; %d committed rows", r, len(rows))
}
