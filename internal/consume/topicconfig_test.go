package consume

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/route"
)

// TestPreflightCompactedKeylessTopic: an overflow topic made compacted
// (cleanup.policy=compact) refuses every record without a key (Kafka answers
// INVALID_RECORD: "Compacted topic cannot accept message without key"), and the gate
// writes overflow records without one unless GATE_OVERFLOW_KEEP_KEY. The preflight
// names the topic and the setting, and nothing is consumed until it is fixed. Before,
// the gate started ready and sent every overflow record to the dead-letter topic, two
// round trips alone each, with no log line (300 records: 7.3 s instead of 0.3 s, the 285
// overflow records all dead-lettered). With the key kept, the topic takes the records.
func TestPreflightCompactedKeylessTopic(t *testing.T) {
	t.Parallel()
	for _, keepKey := range []bool{false, true} {
		t.Run("keep_key="+strconv.FormatBool(keepKey), func(t *testing.T) {
			t.Parallel()
			const parts, n = 2, 50
			env := newEnv(t, parts)
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
			if !keepKey {
				env.ccfg.KeylessTopics = []string{ovfTopic}
			}
			env.ccfg.PreflightInterval = 100 * time.Millisecond
			setTopicConfig(t, env.cluster, "cleanup.policy", "compact", ovfTopic)
			recs := make([]*kgo.Record, n)
			for id := range recs {
				recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
			}
			produceAll(t, producer(t, env.cluster), recs)
			g := env.start(t, "a")
			if keepKey {
				waitFor(t, 20*time.Second, "ready: the records keep their key", g.c.Ready)
				return
			}
			waitNotReady(t, g, 20*time.Second, `the overflow topic and cleanup.policy named`, func(why string) bool {
				return strings.Contains(why, `topic "overflow"`) && strings.Contains(why, "cleanup.policy=compact") &&
					strings.Contains(why, "GATE_OVERFLOW_KEEP_KEY")
			})
			if gi := env.cluster.GroupInfo(testGroup); gi != nil && len(gi.Commits[inTopic]) > 0 {
				t.Errorf("committed %v before the topics were checked", gi.Commits[inTopic])
			}
			setTopicConfig(t, env.cluster, "cleanup.policy", "delete", ovfTopic)
			waitFor(t, 20*time.Second, "ready once the topic is not compacted", g.c.Ready)
			out := collect(t, env.cluster, n, 30*time.Second, 200*time.Millisecond)
			if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
			}
		})
	}
}

// TestCheckTopicsCompactedRuleTopic: a rules reload naming a topic of its own that is
// compacted is refused, the topic and the setting named, when the gate drops the key of
// the rules' records (as of overflow ones); with the key kept it passes, warned of as the
// preflight warns of a compacted topic the gate keeps keys on, once however often the
// topic is checked. Before, the reload was put in use and every record of the rule went
// to the dead-letter topic; and with the key kept nothing was said until a record without
// a key was refused.
func TestCheckTopicsCompactedRuleTopic(t *testing.T) {
	const audit = "audit"
	for _, keepKey := range []bool{false, true} {
		t.Run("keep_key="+strconv.FormatBool(keepKey), func(t *testing.T) {
			env := newEnv(t, 1)
			if err := env.cluster.CreateTopic(audit, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
				t.Fatal(err)
			}
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
			if !keepKey {
				env.ccfg.KeylessTopics = []string{ovfTopic}
			}
			env.ccfg.RuleTopics = route.NewTopicWatch(ovfTopic)
			logs := &syncBuffer{}
			c, err := New(env.ccfg, nil, nil, nil, slog.New(slog.NewJSONHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			asked := describedTopics(env)
			err = c.CheckTopics(t.Context(), []string{audit})
			switch {
			case keepKey && err != nil:
				t.Errorf("the records keep their key: %v, want nil", err)
			case !keepKey && (err == nil || !strings.Contains(err.Error(), `topic "audit": cleanup.policy=compact`)):
				t.Errorf("a compacted rule topic: %v, want a refusal naming it and cleanup.policy", err)
			}
			// One request, both settings: before, max.message.bytes then cleanup.policy.
			if got := asked(); len(got) != 1 || !slices.Equal(got[0], []string{"cleanup.policy", "max.message.bytes"}) {
				t.Errorf("the check asked %v, want [[cleanup.policy max.message.bytes]]", got)
			}
			if !keepKey {
				return
			}
			// The rule's topic checked again (another reload naming it): said once.
			if err := c.CheckTopics(t.Context(), []string{audit}); err != nil {
				t.Fatal(err)
			}
			const warning = "an output topic is compacted: the gate keeps the record key on it"
			if n := strings.Count(logs.String(), warning); n != 1 || !strings.Contains(logs.String(), `"topic":"audit"`) {
				t.Errorf("%d warnings of the compacted rule topic the gate keeps keys on, want 1 naming it; log:\n%s", n, logs.String())
			}
		})
	}
}

// TestDiagnoseOutputsMinInsyncAboveReplicas: an output topic whose min.insync.replicas
// is above its replication factor refuses every acks=all write (NOT_ENOUGH_REPLICAS)
// for good: no replica can come back. The gate says so and what to change. Before, it
// said the brokers refused writes "until a replica is back", sending the on-call engineer
// to look for a broker that is not down.
func TestDiagnoseOutputsMinInsyncAboveReplicas(t *testing.T) {
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	setTopicConfig(t, env.cluster, "min.insync.replicas", "2", accTopic)
	c, err := New(env.ccfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	found, err := c.diagnoseOutputs(t.Context(), c.cl)
	if err != nil {
		t.Fatal(err)
	}
	p := found[problemOutputs+accTopic+"/replicas"]
	if !strings.Contains(p, "only 1 replica") || !strings.Contains(p, "min.insync.replicas 2") || strings.Contains(p, "until a replica is back") {
		t.Errorf("problem %q: want it to say the topic has only 1 replica, below its min.insync.replicas 2, for good", p)
	}
}

// TestDiagnoseOutputsRuleTopic: a rule's own topic (action topic:NAME) that cannot take
// acks=all writes is named as the gate's own output topics are, its min.insync.replicas
// read. Before, only Config.OutputTopics were asked about: its records waited and
// /readyz and the log named nothing.
func TestDiagnoseOutputsRuleTopic(t *testing.T) {
	const audit = "audit"
	env := newEnv(t, 1)
	if err := env.cluster.CreateTopic(audit, 1, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{audit})
	env.ccfg.RuleTopics = w
	c, err := New(env.ccfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	found, err := c.diagnoseOutputs(t.Context(), c.cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := found[problemOutputs+audit+"/replicas"]; !strings.Contains(p, `topic "audit"`) || !strings.Contains(p, "min.insync.replicas 2") {
		t.Errorf("problems %q: want the rule topic named, below its min.insync.replicas 2", found)
	}
}

// TestCompactedWhileRunning: an overflow topic made compacted while the gate runs
// (every overflow record, keyless, refused: INVALID_RECORD) is found when the output
// topics' settings are read again, with their max.message.bytes, and the gate is not
// ready, the topic and setting named as at start; set back, it is ready again. Before,
// only the start and a reload checked: the gate stayed ready and sent every overflow
// record to the dead-letter topic.
func TestCompactedWhileRunning(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.KeylessTopics = []string{ovfTopic}
	env.ccfg.TopicConfigInterval = 100 * time.Millisecond
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	compactOverflow(t, env, g, false)
	setTopicConfig(t, env.cluster, "cleanup.policy", "delete", ovfTopic)
	waitFor(t, 20*time.Second, "ready once the topic is not compacted", g.c.Ready)
}

// TestPreflightWarnsOfACompactedDeadLetterTopic: a compacted dead-letter topic refuses a
// dead letter without a key (its input record had none: the record is then refused by
// every topic and its partition stops), and keeps only the last dead letter of each key,
// a null value deleting the others: nothing said so at start. The preflight warns,
// naming the topic; the gate runs (input records with keys are dead-lettered there).
func TestPreflightWarnsOfACompactedDeadLetterTopic(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.DeadLetterTopic = dlqTopic
	logs := &syncBuffer{}
	env.logs = logs
	setTopicConfig(t, env.cluster, "cleanup.policy", "compact", dlqTopic)
	env.start(t, "a")
	waitFor(t, 20*time.Second, "a warning of the compacted dead-letter topic", func() bool {
		return strings.Contains(logs.String(), "the dead-letter topic is compacted") && strings.Contains(logs.String(), `"topic":"`+dlqTopic+`"`)
	})
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-1")})
	if out := collect(t, env.cluster, 1, 30*time.Second, 0); out.n != 1 {
		t.Errorf("the gate with a compacted dead-letter topic routed %d of 1", out.n)
	}
}

// TestPreflightWarnsOfACompactedKeyedTopic: an output topic the gate keeps the record
// key on (accepted always; overflow with GATE_OVERFLOW_KEEP_KEY) that is compacted
// refuses an input record without a key (INVALID_RECORD: the record goes to the
// dead-letter topic) and keeps only the last record of each key. Nothing said so at
// start: only the once-a-minute line of records rerouted, once such a record came. The
// preflight warns, naming the topic; the gate runs (input records with keys go there).
func TestPreflightWarnsOfACompactedKeyedTopic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, topic string
		keyless     []string
	}{
		{"accepted", accTopic, []string{ovfTopic}},
		{"overflow_keep_key", ovfTopic, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 1)
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
			env.ccfg.KeylessTopics = c.keyless
			env.ccfg.DeadLetterTopic = dlqTopic
			logs := &syncBuffer{}
			env.logs = logs
			setTopicConfig(t, env.cluster, "cleanup.policy", "compact", c.topic)
			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "the warning naming the compacted topic", func() bool {
				return strings.Contains(logs.String(), "refuses an input record without a key") && strings.Contains(logs.String(), `"topic":"`+c.topic+`"`)
			})
			waitFor(t, 20*time.Second, "ready: a warning, not a refusal", g.c.Ready)
			produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(0, "team-1")})
			if out := collect(t, env.cluster, 1, 30*time.Second, 0); out.n != 1 {
				t.Errorf("the gate with a compacted %s topic routed %d of 1", c.topic, out.n)
			}
		})
	}
}

// TestCompactedWhileRunningFoundAtTheFirstRefusal: an overflow topic made compacted
// while the gate runs refuses its first keyless record (INVALID_RECORD), and the gate
// reads the topics' settings at once: not ready, the topic named, without waiting for
// the periodic read (an hour here; a minute by default). Before, the records went one
// by one to the dead-letter topic with the gate ready until that read.
func TestCompactedWhileRunningFoundAtTheFirstRefusal(t *testing.T) {
	t.Parallel()
	const n = 20
	env := newEnv(t, 1)
	env.lcfg.Threshold = 2 // team-1 over after two records: the rest to overflow
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.KeylessTopics = []string{ovfTopic}
	env.ccfg.TopicConfigInterval = time.Hour
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	setTopicConfig(t, env.cluster, "cleanup.policy", "compact", ovfTopic)
	// kfake takes a record without a key on a compacted topic; Kafka refuses it.
	refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: ovfTopic, Err: kerr.InvalidRecord, Count: -1})
	produceAll(t, producer(t, env.cluster), oneTeam(n))
	waitNotReady(t, g, 20*time.Second, `the overflow topic and cleanup.policy named`, func(why string) bool {
		return strings.Contains(why, `topic "overflow"`) && strings.Contains(why, "cleanup.policy=compact")
	})
	if refused.Hits() == 0 {
		t.Fatal("the overflow topic refused no produce: the test tests nothing")
	}
	refused.Remove()
	setTopicConfig(t, env.cluster, "cleanup.policy", "delete", ovfTopic)
	out := collect(t, env.cluster, n, 30*time.Second, 200*time.Millisecond)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
	}
}

// TestPreflightReadsTopicSettingsInOneRequest: the preflight reads the output topics'
// max.message.bytes and cleanup.policy (batch limits, compacted topics written without
// keys, compacted topics warned of) in one DescribeConfigs request. Before, it sent
// three, one after another: max.message.bytes, the overflow topic's cleanup.policy, then
// the other topics' and the dead-letter topic's.
func TestPreflightReadsTopicSettingsInOneRequest(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.KeylessTopics = []string{ovfTopic}
	env.ccfg.DeadLetterTopic = dlqTopic
	described := describedTopics(env)
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	asked := described()
	if len(asked) == 0 {
		t.Fatal("no DescribeConfigs of topics at start: the test tests nothing")
	}
	for _, names := range asked {
		if !slices.Equal(names, []string{"cleanup.policy", "max.message.bytes"}) {
			t.Errorf("requests at start asked %v: want each to ask cleanup.policy and max.message.bytes together", asked)
			break
		}
	}
}

// describedTopics records, from now on, the config names each DescribeConfigs request
// of topics to env's cluster asks for, sorted; the function returns those so far.
func describedTopics(env *gateEnv) func() [][]string {
	var mu sync.Mutex
	var asked [][]string
	env.cluster.ControlKey(kmsg.DescribeConfigs.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		for _, r := range req.(*kmsg.DescribeConfigsRequest).Resources {
			if r.ResourceType == kmsg.ConfigResourceTypeTopic {
				mu.Lock()
				asked = append(asked, slices.Sorted(slices.Values(r.ConfigNames)))
				mu.Unlock()
				break
			}
		}
		return nil, nil, false
	})
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

// TestKnownCompactedKeylessStraightToDeadLetter: once the topics' settings read has
// found the overflow topic compacted (the gate not ready, the topic named), a keyless
// overflow record, which the topic refuses (INVALID_RECORD), goes straight to the
// dead-letter topic with the reason, headers and counts a refusal gives it, in both
// delivery modes: nothing is sent to the topic. Before, each such record was still
// produced there, in its batch and then alone, refused twice before its dead letter
// (exactly-once: a transaction aborted for each step).
func TestKnownCompactedKeylessStraightToDeadLetter(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			const n = 20
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			keylessOverflow(env)
			env.ccfg.TopicConfigInterval = 100 * time.Millisecond
			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "ready", g.c.Ready)
			refused := compactOverflow(t, env, g, true)
			produceAll(t, producer(t, env.cluster), oneTeam(n))
			out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
			if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
			}
			dls := out.recs[dlqTopic]
			if len(dls) < n-2 || len(out.recs[ovfTopic]) != 0 {
				t.Fatalf("%d dead letters and %d overflow records of %d: want every overflow record dead-lettered", len(dls), len(out.recs[ovfTopic]), n)
			}
			if h := refused.Hits(); h != 0 {
				t.Errorf("%d produce requests to the overflow topic known compacted, for %d keyless records: want none", h, len(dls))
			}
			for _, r := range dls {
				detail := header(r, route.HeaderErrorDetail)
				if header(r, route.HeaderError) != route.ReasonRejected || !strings.Contains(detail, "topic "+ovfTopic) ||
					!strings.Contains(detail, "INVALID_RECORD") || !strings.Contains(detail, "compact") || !strings.Contains(detail, "no key") {
					t.Fatalf("dead letter %s=%q %s=%q: want reason rejected, the topic, INVALID_RECORD and why (compacted, no key) named",
						route.HeaderError, header(r, route.HeaderError), route.HeaderErrorDetail, detail)
				}
			}
			waitCommitted(t, env.cluster, 1, 30*time.Second)
			if got := testutil.ToFloat64(g.c.m.rerouted.WithLabelValues("dead_letter")); got != float64(len(dls)) {
				t.Errorf(`gate_records_rerouted_total{to="dead_letter"} = %v, want %d`, got, len(dls))
			}
			if got := recordsCounted(t, g.reg, "dead_letter", "rejected"); got != float64(len(dls)) {
				t.Errorf(`gate_records_total{route="dead_letter",reason="rejected"} = %v, want %d`, got, len(dls))
			}
		})
	}
}

// TestKnownCompactedKeylessCountedOnceThroughAborts: exactly once, keyless overflow
// records to a topic known compacted go to dead letter unsent (deadLetterUnsent) in
// transactions that abort, the accepted records' produces failing, their dead letters
// taken by the broker in each: once a transaction commits, each is counted once, in
// gate_records_rerouted_total and gate_records_total's dead_letter/rejected, as
// read_committed readers find it. Before, each was counted again in every aborted
// attempt the broker took it in.
func TestKnownCompactedKeylessCountedOnceThroughAborts(t *testing.T) {
	t.Parallel()
	const n = 20
	env := newEnv(t, 1)
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.ProduceRetries = 1
	keylessOverflow(env)
	env.ccfg.TopicConfigInterval = 100 * time.Millisecond
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	compactOverflow(t, env, g, false)
	fault := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	dlqProduces := produceRequests(env, dlqTopic)
	produceAll(t, producer(t, env.cluster), oneTeam(n))
	waitFor(t, 30*time.Second, "the dead letters produced in 2 transactions", func() bool { return dlqProduces.Load() >= 2 })
	fault.Remove()
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
	}
	dls := len(out.recs[dlqTopic])
	if dls != n-2 {
		t.Fatalf("%d dead letters of %d records, want %d", dls, n, n-2)
	}
	waitCommitted(t, env.cluster, 1, 30*time.Second)
	aborted := testutil.ToFloat64(g.c.m.transactions.WithLabelValues("aborted"))
	if got := testutil.ToFloat64(g.c.m.rerouted.WithLabelValues("dead_letter")); got != float64(dls) {
		t.Errorf(`gate_records_rerouted_total{to="dead_letter"} = %v after %v aborted transactions, want %d`, got, aborted, dls)
	}
	if got := recordsCounted(t, g.reg, "dead_letter", "rejected"); got != float64(dls) {
		t.Errorf(`gate_records_total{route="dead_letter",reason="rejected"} = %v after %v aborted transactions, want %d`, got, aborted, dls)
	}
}

// TestCompactedFoundNotRetriedOneAtATime: the keyless records an overflow topic made
// compacted at runtime refuses in their batch (its first refusal, the topic not yet
// known compacted) are retried alone, each a round trip, only until the settings read
// the refusal asks for has found the topic compacted: the rest go to dead letter
// unsent, in batches. Before, every one of them was produced alone there, refused, then
// dead-lettered alone: a round trip or two a record.
func TestCompactedFoundNotRetriedOneAtATime(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			const n = 60
			env := newEnv(t, 1)
			env.ccfg.Delivery = d
			keylessOverflow(env)
			env.ccfg.TopicConfigInterval = time.Hour // found only through the refusal
			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "ready", g.c.Ready)
			setTopicConfig(t, env.cluster, "cleanup.policy", "compact", ovfTopic)
			// kfake takes a record without a key on a compacted topic; Kafka refuses it.
			refused := env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: ovfTopic, Err: kerr.InvalidRecord, Count: -1})
			produceAll(t, producer(t, env.cluster), oneTeam(n))
			out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
			if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
				t.Fatalf("%d lost, %d duplicated", len(lost), len(dup))
			}
			dls := len(out.recs[dlqTopic])
			h := refused.Hits()
			t.Logf("%d produce requests to the compacted overflow topic for %d keyless records", h, dls)
			if h == 0 {
				t.Fatal("the overflow topic refused no produce: the test tests nothing")
			}
			// A round trip alone for each record until the read lands; generous, for a
			// loaded machine: the read is one round trip among them.
			if h > dls/2 {
				t.Errorf("%d produce requests to the compacted overflow topic for %d keyless records: want the records tried alone only until the topic is found compacted", h, dls)
			}
		})
	}
}

// keylessOverflow has env's gate write its overflow topic without keys, and send team-1
// there past its second record; dead letters to dlqTopic.
func keylessOverflow(env *gateEnv) {
	env.lcfg.Threshold = 2
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.KeylessTopics = []string{ovfTopic}
	env.ccfg.DeadLetterTopic = dlqTopic
}

// compactOverflow makes env's overflow topic compacted and waits for g to find it so
// (not ready, the topic and cleanup.policy named). refuse: kfake, which takes a record
// without a key on a compacted topic, refuses those from then on as Kafka does
// (INVALID_RECORD), the fault returned.
func compactOverflow(t *testing.T, env *gateEnv, g *testGate, refuse bool) *kfake.FaultHandle {
	t.Helper()
	setTopicConfig(t, env.cluster, "cleanup.policy", "compact", ovfTopic)
	var refused *kfake.FaultHandle
	if refuse {
		refused = env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: ovfTopic, Err: kerr.InvalidRecord, Count: -1})
	}
	waitNotReady(t, g, 20*time.Second, `the overflow topic and cleanup.policy named`, func(why string) bool {
		return strings.Contains(why, `topic "overflow"`) && strings.Contains(why, "cleanup.policy=compact")
	})
	return refused
}

// oneTeam is n input records of team-1.
func oneTeam(n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-1")
	}
	return recs
}

// produceRequests counts, from now on, the produce requests to env's cluster that
// carry records of topic (named, or by id as produce v13 names it).
func produceRequests(env *gateEnv, topic string) *atomic.Int64 {
	var n atomic.Int64
	id := env.cluster.TopicInfo(topic).TopicID
	env.cluster.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		for _, rt := range kreq.(*kmsg.ProduceRequest).Topics {
			if rt.Topic == topic || rt.TopicID == id {
				n.Add(1)
			}
		}
		return nil, nil, false
	})
	return &n
}
