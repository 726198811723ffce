package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestConservation: three gates share the input through a fourth joining and leaving,
// then one SIGKILLed and restarted, on each consumer group protocol and in each
// delivery mode. Every input record reaches an output topic: at least once (a
// SIGKILLed gate's uncommitted records are routed again by the next owner) or, with
// exactly-once delivery read with read_committed, exactly once. Every gate left is ready
// at the end, and the protocol it runs is the one asked for.
func TestConservation(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"classic", "consumer"} {
		for _, delivery := range []string{"at-least-once", "exactly-once"} {
			t.Run(protocol+"/"+delivery, func(t *testing.T) {
				t.Parallel()
				conservation(t, protocol, delivery)
			})
		}
	}
}

func conservation(t *testing.T, protocol, delivery string) {
	s := newScenario(t, kafkaOpts{}, 6, 3)
	start := func(name string) *faulttest.Gate {
		return s.startGate(name, delivery, "GATE_KAFKA_GROUP_PROTOCOL", protocol)
	}
	gates := map[string]*faulttest.Gate{}
	for _, n := range []string{"a", "b", "c"} {
		gates[n] = start(n)
	}
	s.waitMembers(3)
	for _, g := range gates {
		g.WaitLog(t, time.Minute, "kafka: consumer group protocol")
		if want := `"group_protocol":"` + protocol + `"`; !strings.Contains(g.Logs(), want) {
			t.Errorf("gate %s does not log %s", g.Name, want)
		}
		// Under KIP-848 the session timeout is the brokers': Apache Kafka describes the
		// group's consumer.session.timeout.ms, unset, as their
		// group.consumer.session.timeout.ms (kafkatest's brokers set 8 s).
		if want := `"session_timeout":"8s","session_timeout_from":"the brokers' group.consumer.session.timeout.ms`; protocol == "consumer" && !strings.Contains(g.Logs(), want) {
			t.Errorf("gate %s does not log %s", g.Name, want)
		}
	}
	stop := s.produceLoad()
	s.waitOutputsGrow(2000, "three gates")

	// A gate owns a partition when it measures its lag (a series per partition owned,
	// deleted at its revoke): d's join and b's restart moved partitions, which the
	// rebalance counters could not say (they count a gate's first assignment, and
	// cooperatively every rebalance of the group's start; a join may take from one member
	// alone).
	owning := func(name string) {
		faulttest.WaitFor(t, time.Minute, "gate "+name+" owning a partition", func() bool {
			_, m := gates[name].Get(t, "/metrics")
			return strings.Contains(m, "\ngate_partition_lag_records{")
		})
	}
	gates["d"] = start("d")
	s.waitMembers(4)
	s.waitOutputsGrow(1000, "four gates")
	owning("d")
	gates["d"].Term(t, time.Minute)
	delete(gates, "d")
	s.waitMembers(3)
	s.waitOutputsGrow(1000, "back to three")

	gates["b"].Kill(t)
	gates["b"] = start("b")
	s.waitMembers(3)
	s.waitOutputsGrow(1000, "after b's SIGKILL and restart")
	owning("b")

	acked := stop()
	s.waitDrained()
	for _, g := range gates {
		waitReady(t, g)
	}
	for _, g := range gates {
		g.Term(t, time.Minute) // every transaction ends: committed, nothing left open
	}
	rep := s.checkConserved(delivery, acked, "through the joins, leaves and a SIGKILL")
	t.Logf("FIGURES real_kafka_conservation protocol=%s delivery=%s in=%d out=%d lost=%d duplicated=%d acknowledged=%d",
		protocol, delivery, rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, acked)
}

// gateVarsFor are s's gate settings with the pairs kv added.
func gateVarsFor(s *scenario, kv ...string) map[string]string {
	v := s.vars()
	for i := 0; i+1 < len(kv); i += 2 {
		v[kv[i]] = kv[i+1]
	}
	return v
}
