package faulttest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
)

// Exactly-once delivery (GATE_DELIVERY=exactly-once) under kill and rebalance: three gates
// with their own transactional ids; a fourth joins and leaves on SIGTERM; one is killed
// with SIGKILL and restarted under its id (its open transaction aborted at once); another
// is killed for good, its partitions taken over once its session times out and its open
// transaction aborted by the transaction timeout. A consumer reading the outputs with
// read_committed sees every input record exactly once: 0 lost, 0 duplicated.
func TestExactlyOnceUnderKillAndRebalance(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.vars["GATE_DELIVERY"] = "exactly-once"
	// Above the group's rebalance timeout (faulttest.RebalanceTimeout, 20s), as the gate
	// requires: when b is restarted, the join waits for the dead b's session to time out
	// (8s), and franz-go holds every gate's transaction offset commit meanwhile; a
	// shorter timeout would have the broker abort a's and c's open transactions and
	// fence them whenever a peer dies.
	f.vars["GATE_TRANSACTION_TIMEOUT"] = (faulttest.RebalanceTimeout + 5*time.Second).String()
	start := func(name string) *faulttest.Gate {
		// One id per gate: on one host the default (group-hostname) would be shared.
		f.vars["GATE_TRANSACTIONAL_ID"] = "fleet-" + name
		return f.start(name)
	}
	for _, n := range []string{"a", "b", "c"} {
		start(n)
	}
	f.waitMembers(3)
	l := f.produce()
	f.waitOutputsGrow(1000, "three gates")

	start("d")
	f.waitMembers(4)
	f.waitOutputsGrow(1000, "four gates")
	f.gates["d"].Term(t, 30*time.Second)
	f.waitMembers(3)
	f.waitOutputsGrow(500, "back to three")

	kills := 1
	if soak() {
		kills = 3
	}
	for range kills {
		f.gates["b"].Kill(t)
		start("b") // the same transactional id: fences the dead one's transaction
		f.waitMembers(3)
		f.waitOutputsGrow(1000, "after restarting b")
	}

	f.gates["c"].Kill(t) // for good: its partitions move once its session times out
	f.waitMembers(2)
	f.waitOutputsGrow(1000, "two gates")
	l.Stop()
	f.waitDrained()

	r := faulttest.Conservation(t, f.c, faulttest.ReadCommitted(), inTopic, outTopics...)
	t.Logf("exactly-once, read_committed: %s", r)
	recordFigures(t.Name(), r)
	if !r.OK() {
		t.Errorf("read_committed saw records lost, duplicated or stray: %s", r)
	}
	for _, topic := range outTopics {
		if r.ByTopic[topic] == 0 {
			t.Errorf("nothing on %s: the run should exercise every route", topic)
		}
	}
	// Read uncommitted, the logs also hold the records of aborted transactions (those the
	// kills left open): the extra copies a consumer without read_committed would see.
	raw := faulttest.Conservation(t, f.c, nil, inTopic, outTopics...)
	t.Logf("exactly-once, read_uncommitted: %s", raw)
	var txns float64
	for _, n := range []string{"a", "b"} {
		txns += metric(t, f.gates[n], "gate_transactions_total")
	}
	if txns == 0 {
		t.Error("gate_transactions_total is 0 on the surviving gates: were they transactional?")
	}
	recovered := 0
	for _, g := range f.gates {
		recovered += strings.Count(g.Logs(), "rebuilding the Kafka client under the same transactional id")
	}
	t.Logf("fenced transactional clients rebuilt in-process: %d", recovered)
}
