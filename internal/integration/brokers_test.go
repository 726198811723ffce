package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestLeaderFailover: on three brokers (every topic replicated three times), gates
// route while the broker leading input partition 0 is SIGKILLed (its partitions, input
// and output, get new leaders), restarted, and given its partitions back by a
// preferred-leader election. Both delivery modes run at once, each with two gates and
// topics of its own, through the same broker moves. Every input partition keeps making
// progress through each move, nothing is lost, and with exactly-once a read_committed
// reader sees every input once.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	k := startKafka(t, kafkaOpts{nodes: 3})
	if k.JVM == nil {
		t.Fatal("three brokers need the JVM cluster")
	}
	type run struct {
		delivery string
		s        *scenario
		gates    []*faulttest.Gate
		stop     func() int64
	}
	var runs []*run
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		s := scenarioOn(t, k, 0, 0)
		s.n = namesWith(t, delivery)
		for _, o := range append([]string{s.n.In}, s.n.Outs()...) {
			parts := int32(3)
			if o == s.n.In {
				parts = 6
			}
			s.k.CreateTopic(t, o, parts)
		}
		r := &run{delivery: delivery, s: s}
		for _, name := range []string{"a", "b"} {
			r.gates = append(r.gates, s.startGate(delivery+"-"+name, delivery))
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		r.s.waitMembers(2)
		r.stop = r.s.produceLoad()
	}
	for _, r := range runs {
		r.s.waitOutputsGrow(1000, r.delivery+", two gates")
	}

	s0 := runs[0].s
	victim := s0.leader(s0.n.In, 0)
	t.Logf("killing broker %d, leader of %v", victim, s0.ledBy(victim))
	before := make([]map[int32]int64, len(runs))
	for i, r := range runs {
		before[i] = r.s.committed()
	}
	if err := k.JVM.Kill(int(victim)); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		r.s.waitOutputsGrow(2000, fmt.Sprintf("%s, broker %d killed", r.delivery, victim))
		r.s.waitEveryPartitionPast(before[i], fmt.Sprintf("before broker %d was killed (%s)", victim, r.delivery))
	}
	if now := s0.leader(s0.n.In, 0); now == victim {
		t.Errorf("input partition 0 still led by the killed broker %d", victim)
	}

	if err := k.JVM.Restart(int(victim)); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		r.s.waitOutputsGrow(1000, fmt.Sprintf("%s, broker %d back", r.delivery, victim))
	}

	// The preferred replica of each partition is the first of its replicas; where that
	// is the restarted broker, leadership goes back to it once it is in sync again.
	for i, r := range runs {
		before[i] = r.s.committed()
	}
	moved := 0
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("a preferred-leader election giving broker %d partitions back", victim), func() bool {
		res, err := k.Admin.ElectLeaders(t.Context(), kadm.ElectPreferredReplica, nil)
		if err != nil {
			return false
		}
		for _, ps := range res {
			for _, r := range ps {
				if r.Err == nil {
					moved++
				}
			}
		}
		return len(s0.ledBy(victim)) > 0
	})
	t.Logf("preferred-leader elections moved %d partitions; broker %d leads %v", moved, victim, s0.ledBy(victim))
	for i, r := range runs {
		r.s.waitOutputsGrow(1000, r.delivery+", after the election")
		r.s.waitEveryPartitionPast(before[i], "before the election ("+r.delivery+")")
	}

	for _, r := range runs {
		acked := r.stop()
		r.s.waitDrained()
		for _, g := range r.gates {
			waitReady(t, g)
			g.Term(t, time.Minute) // every transaction ends: committed, nothing left open
		}
		rep := r.s.checkConserved(r.delivery, acked, "through the leader moves")
		t.Logf("FIGURES real_kafka_leader_failover delivery=%s in=%d out=%d lost=%d duplicated=%d acknowledged=%d moved_by_election=%d",
			r.delivery, rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, acked, moved)
	}
}

// leader is the broker leading topic's partition p now.
func (s *scenario) leader(topic string, p int32) int32 {
	s.t.Helper()
	var leader int32 = -1
	faulttest.WaitFor(s.t, time.Minute, fmt.Sprintf("the leader of %s/%d", topic, p), func() bool {
		m, err := s.k.Admin.Metadata(s.t.Context(), topic)
		if err != nil {
			return false
		}
		pd, ok := m.Topics[topic].Partitions[p]
		if !ok || pd.Err != nil {
			return false
		}
		leader = pd.Leader
		return leader >= 0
	})
	return leader
}

// ledBy lists the partitions of the scenario's topics broker id leads, as topic/p.
func (s *scenario) ledBy(id int32) []string {
	s.t.Helper()
	m, err := s.k.Admin.Metadata(s.t.Context(), append([]string{s.n.In}, s.n.Outs()...)...)
	if err != nil {
		return nil
	}
	var out []string
	for _, td := range m.Topics.Sorted() {
		for _, pd := range td.Partitions.Sorted() {
			if pd.Leader == id {
				out = append(out, fmt.Sprintf("%s/%d", td.Topic, pd.Partition))
			}
		}
	}
	return out
}

// TestExactlyOnceBrokerRestart: on three brokers (replication 3), the transaction
// coordinator of a gate is SIGKILLed while the gates commit and restarted; the gates
// recover by themselves (ready again), and a read_committed reader sees every input
// once.
//
// Not on one broker: Apache Kafka 4.3.1 does not keep a transaction whole when the only
// replica of its partitions dies. Restarted, the broker resumes as transaction
// coordinator before it leads the data partitions again, finds no leader for the
// partitions of a transaction it was committing, skips their markers as if the
// partitions were deleted ("Couldn't find leader endpoint ... these partitions are
// likely deleted already and hence can be skipped") and completes it. The transaction
// then hangs where a marker is missing: on __consumer_offsets the group's offsets stay
// unstable (the gate says so: TestHangingTransaction), on an output partition
// read_committed readers stop at it (a CI run of the single-broker form saw 394
// records "lost" that way; with the controller a process of its own, 1 run in 9 on a
// loaded machine). docs/reliability.md says so.
func TestExactlyOnceBrokerRestart(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{nodes: 3}, 3, 3)
	if s.k.JVM == nil {
		t.Fatal("a broker restart needs the JVM brokers")
	}
	start := func(name string) *faulttest.Gate { return s.startGate(name, "exactly-once") }
	gates := []*faulttest.Gate{start("a"), start("b")}
	s.waitMembers(2)
	stop := s.produceLoad()
	s.waitOutputsGrow(1000, "two gates")
	var victim int32 = -1
	faulttest.WaitFor(t, time.Minute, "gate a's transaction coordinator", func() bool {
		c := s.k.Admin.FindTxnCoordinators(t.Context(), s.n.Group+"-a")[s.n.Group+"-a"]
		victim = c.NodeID
		return c.Err == nil && victim > 0
	})
	t.Logf("gate a's transaction coordinator is broker %d; group coordinator %d", victim,
		s.k.Admin.FindGroupCoordinators(t.Context(), s.n.Group)[s.n.Group].NodeID)
	if err := s.k.JVM.Kill(int(victim)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the broker stays away a while: the gates' requests fail meanwhile
	if err := s.k.JVM.Restart(int(victim)); err != nil {
		t.Fatal(err)
	}
	s.waitOutputsGrow(1000, "after the broker's restart")
	acked := stop()
	s.waitDrained()
	for _, g := range gates {
		waitReady(t, g)
		g.Term(t, time.Minute)
	}
	rep := s.checkConserved("exactly-once", acked, "through a broker restart")
	t.Logf("FIGURES real_kafka_eos_broker_restart in=%d out=%d lost=%d duplicated=%d acknowledged=%d", rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, acked)
	// librdkafka, reading with isolation.level=read_committed, sees the same: every
	// input id once over the three outputs.
	ids := kcatIDs(t, s.k.Brokers, s.n.Outs()...)
	var dups, missing int
	for id := range rep.InputAt {
		switch ids[id] {
		case 0:
			missing++
		case 1:
		default:
			dups++
		}
	}
	t.Logf("FIGURES real_kafka_eos_kcat_read_committed ids=%d missing=%d duplicated=%d", len(ids), missing, dups)
	if missing > 0 || dups > 0 || len(ids) != rep.Inputs {
		t.Errorf("kcat read_committed: %d ids, %d inputs missing, %d duplicated; want each of the %d inputs once", len(ids), missing, dups, rep.Inputs)
	}
}

// TestMinInsyncReplicas: output topics with min.insync.replicas=2 on three brokers
// (and a controller of its own, so the cluster's metadata still changes with two
// brokers down). One broker down: nothing changes. Two down: the last broker refuses
// every acks=all write with NOT_ENOUGH_REPLICAS (kfake has no replicas), which the
// client retries without a word: the gate says why in /readyz and an error line, is
// not ready, dead-letters nothing; with the brokers back it resumes by itself and every
// record is routed.
func TestMinInsyncReplicas(t *testing.T) {
	t.Parallel()
	k := startKafka(t, kafkaOpts{nodes: 3, controller: true})
	if k.JVM == nil {
		t.Fatal("brokers down need the JVM cluster")
	}
	s := scenarioOn(t, k, 0, 0)
	s.k.CreateTopic(t, s.n.In, 3)
	for _, o := range s.n.Outs() {
		s.k.CreateTopic(t, o, 3, "min.insync.replicas", "2")
	}
	g := faulttest.StartGate(t, s.bin, "isr", s.vars())
	waitReady(t, g)
	stop := s.produceLoad()
	s.waitOutputsGrow(1000, "three brokers")

	if err := k.JVM.Kill(3); err != nil {
		t.Fatal(err)
	}
	s.waitOutputsGrow(1000, "broker 3 down")
	if code, body := g.Get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("one broker of three down: /readyz %d %s, want ready", code, body)
	}

	if err := k.JVM.Kill(2); err != nil {
		t.Fatal(err)
	}
	faulttest.WaitFor(t, 2*time.Minute, "/readyz naming min.insync.replicas", func() bool {
		code, body := g.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "min.insync.replicas 2") &&
			strings.Contains(body, "NOT_ENOUGH_REPLICAS")
	})
	// The line comes with /readyz's reason, not necessarily before a poll sees it.
	faulttest.WaitFor(t, time.Minute, "an error line naming min.insync.replicas", func() bool {
		return strings.Contains(g.Logs(), "fewer than its min.insync.replicas 2")
	})

	for _, id := range []int{2, 3} {
		if err := k.JVM.Restart(id); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, g)
	g.WaitLog(t, time.Minute, "kafka: output partitions take writes again")
	s.waitOutputsGrow(1000, "brokers back")
	acked := stop()
	s.waitDrained()
	rep := s.check(nil)
	_, m := g.Get(t, "/metrics")
	t.Logf("FIGURES real_kafka_min_insync in=%d out=%d lost=%d duplicated=%d acknowledged=%d dead_letters=%d", rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, acked, rep.ByTopic[s.n.Dlq])
	if len(rep.Lost) > 0 || len(rep.Strays) > 0 || rep.Inputs < int(acked) {
		t.Errorf("through NOT_ENOUGH_REPLICAS: %s (acknowledged %d); want every input routed", rep, acked)
	}
	if n := metricSum(m, "gate_records_rerouted_total"); n > 0 {
		t.Errorf("%v records rerouted to dead letter for the cluster's state", n)
	}
	g.Term(t, time.Minute)
}

// kcatIDs reads topics to their ends with kcat (librdkafka) as a read_committed
// consumer and counts the records of each test id (the faulttest.IDHeader header).
func kcatIDs(t *testing.T, brokers string, topics ...string) map[string]int {
	t.Helper()
	kcat := needKcat(t)
	ids := map[string]int{}
	for _, topic := range topics {
		// Bounded: read_committed, kcat's -e waits for the last stable offset, which a
		// transaction left hanging never moves past (TestExactlyOnceBrokerRestart's doc).
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, kcat, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q",
			"-X", "isolation.level=read_committed", "-f", "%h\\n")
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("kcat -C %s (within 2 minutes): %v", topic, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, h := range strings.Split(line, ",") {
				if v, ok := strings.CutPrefix(h, faulttest.IDHeader+"="); ok {
					ids[v]++
				}
			}
		}
	}
	return ids
}

// TestGroupCoordinatorDies: at least once, on three brokers, the group's coordinator is
// SIGKILLed while two gates route. Their interval commits fail (or hang in the client)
// until the group finds the coordinator's successor; a gate none of whose commits has
// succeeded for 2 × GATE_COMMIT_INTERVAL stops fetching until one does, and says so,
// so what a rebalance replays is bounded by what was fetched before, not by how long
// the commits failed. Nothing is lost; the duplicates stay under that bound (with the
// load's rate and a margin for records in flight and buffered).
func TestGroupCoordinatorDies(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{nodes: 3}, 6, 3)
	if s.k.JVM == nil {
		t.Fatal("killing a broker needs the JVM brokers")
	}
	gates := []*faulttest.Gate{s.startGate("a", "at-least-once"), s.startGate("b", "at-least-once")}
	s.waitMembers(2)
	start := time.Now()
	stop := s.produceLoad()
	s.waitOutputsGrow(1000, "two gates")
	var victim int32 = -1
	faulttest.WaitFor(t, time.Minute, "the group's coordinator", func() bool {
		c := s.k.Admin.FindGroupCoordinators(t.Context(), s.n.Group)[s.n.Group]
		victim = c.NodeID
		return c.Err == nil && victim > 0
	})
	if err := s.k.JVM.Kill(int(victim)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	s.waitOutputsGrow(2000, fmt.Sprintf("group coordinator %d killed", victim))
	if err := s.k.JVM.Restart(int(victim)); err != nil {
		t.Fatal(err)
	}
	s.waitOutputsGrow(500, fmt.Sprintf("broker %d back", victim))
	acked := stop()
	rate := float64(acked) / time.Since(start).Seconds()
	s.waitDrained()
	held := 0
	for _, g := range gates {
		waitReady(t, g)
		// The failover takes longer than 2 × GATE_COMMIT_INTERVAL (the controller fences
		// the dead broker after 6 s): a gate's commits stop succeeding, whether they
		// fail or the client holds them in flight, and it holds its fetches. A gate
		// that lost its partitions before its commits had failed that long has nothing
		// to commit, which counts as a success (commithold.go), so nothing to hold: its
		// partitions' next owners replay what it routed since its last commit, less
		// than the hold would have let through, within the bound below. Seen once in
		// 11 runs; the other gate held.
		logs := g.Logs()
		stopped := strings.Contains(logs, "fetching the input stops until one succeeds")
		switch {
		case stopped && strings.Contains(logs, "kafka: offsets commit again; fetching the input resumes"):
			held++
		case !stopped && strings.Contains(logs, "partitions lost"):
			t.Logf("gate %s lost its partitions before its commits had failed for 2 × GATE_COMMIT_INTERVAL: nothing to hold", g.Name)
		case stopped:
			t.Errorf("gate %s held its fetches while no commit succeeded and never resumed", g.Name)
		default:
			t.Errorf("gate %s neither held its fetches while no commit succeeded nor lost its partitions", g.Name)
		}
		g.Term(t, time.Minute)
	}
	if held == 0 {
		t.Errorf("neither gate held its fetches while no commit succeeded, and resumed")
	}
	rep := s.checkConserved("at-least-once", acked, "through the group coordinator's death")
	// 2 × the commit interval before the hold, one interval's commit behind, 1 s for
	// what was in flight or buffered when it came.
	commit, err := time.ParseDuration(s.vars()["GATE_COMMIT_INTERVAL"])
	if err != nil {
		t.Fatal(err)
	}
	bound := int(rate * (3*commit + time.Second).Seconds())
	t.Logf("FIGURES real_kafka_coordinator_failover in=%d out=%d lost=%d duplicated=%d bound=%d rate=%.0f/s gates_held=%d killed_after=%s",
		rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, bound, rate, held, killed.Sub(start).Round(time.Second))
	if rep.Extra > bound {
		t.Errorf("%d records routed twice through the group coordinator's death, want at most %d (%.0f records/s × (3 × %s + 1 s))",
			rep.Extra, bound, rate, commit)
	}
}
