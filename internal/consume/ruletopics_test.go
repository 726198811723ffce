package consume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/route"
)

// A rule's own topic missing while the gate runs (created at start, deleted since: here
// never created, the start-up check not told of it) holds up nothing, in either delivery
// mode: the produce to it fails, the topic is marked missing, the failed records and
// every later one of the rule go to overflow naming the topic, every other record is
// routed, and the gate is not ready naming it. Once the topic exists, the output watch
// finds it (within outputCheckEvery), readiness recovers and the rule's records go to it.
// Before rule topics were watched, the failed record was retried without end and no
// partition routed past it.
func TestRuleTopicMissingHoldsUpNothing(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 2)
			env.ccfg.Delivery = d
			const merges = "merges"
			w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
			g := env.start(t, "g")
			defer g.stop(t)
			in := badAndGood(20)
			prod := producer(t, env.cluster)
			produceAll(t, prod, in)
			var opts []kgo.Opt
			if d == ExactlyOnce {
				opts = append(opts, readCommitted())
			}
			o := collect(t, env.cluster, len(in), time.Minute, 200*time.Millisecond, opts...)
			if lost, dup := o.conservation(len(in)); len(lost)+len(dup) > 0 {
				t.Fatalf("lost %v, duplicated %v", lost, dup)
			}
			if len(o.recs[ovfTopic]) != 5 || len(o.recs[accTopic]) != 15 {
				t.Fatalf("%d on overflow, %d accepted: want the 5 of the rule's team on overflow", len(o.recs[ovfTopic]), len(o.recs[accTopic]))
			}
			for _, r := range o.recs[ovfTopic] {
				if header(r, route.HeaderRuleTopicMissing) != merges || header(r, route.HeaderOverflowRule) != "bad-teams" || !strings.Contains(string(r.Value), `"bad"`) {
					t.Errorf("on overflow: %s %v", r.Value, r.Headers)
				}
			}
			if nr := strings.Join(g.c.NotReady(), "; "); !strings.Contains(nr, `rule topic "merges"`) {
				t.Errorf("not ready reasons %q, want the rule topic named", nr)
			}

			// The topic is created: found by the output watch, the rule's records go to it.
			adm := kadm.NewClient(prod)
			if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, merges); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for w.Missing(merges) || strings.Contains(strings.Join(g.c.NotReady(), "; "), "rule topic") {
				if time.Now().After(deadline) {
					t.Fatalf("the rule topic exists and is still marked missing: %v", g.c.NotReady())
				}
				time.Sleep(20 * time.Millisecond) // polling the watch
			}
			produceAll(t, prod, []*kgo.Record{inputRecord(100, "bad")})
			cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(merges),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			fs := cl.PollFetches(ctx)
			for _, r := range fs.Records() {
				t.Logf("on merges: %s", header(r, idHeader))
			}
			if fs.NumRecords() == 0 || header(fs.Records()[0], idHeader) != "100" {
				t.Errorf("on %s once it exists: %d records %v", merges, fs.NumRecords(), fs.Errors())
			}
		})
	}
}

// A rule removed by a reload while records for its topic are in flight, and its topic
// deleted meanwhile: the records' produce fails (the topic unknown), and the topic is no
// rule's any more, so nothing marks it missing. They go to overflow naming the topic, as
// for a rule topic missing, and every other record is routed. Before, they were retried
// to the deleted topic without end, and routing waited for them on every partition.
func TestRetiredRuleTopicHoldsUpNothing(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	const merges = "merges" // never created: deleted
	// The old rules' router, still routing as the reload retires it; the watch is the new
	// rules', which send nothing to merges.
	ruleTopicRouter(t, env, merges, nil, nil)
	g := env.start(t, "g")
	defer g.stop(t)
	in := badAndGood(20)
	produceAll(t, producer(t, env.cluster), in)
	o := collect(t, env.cluster, len(in), time.Minute, 200*time.Millisecond)
	if lost, dup := o.conservation(len(in)); len(lost)+len(dup) > 0 {
		t.Fatalf("lost %v, duplicated %v", lost, dup)
	}
	if len(o.recs[ovfTopic]) != 5 {
		t.Fatalf("%d on overflow, want the rule's 5", len(o.recs[ovfTopic]))
	}
	for _, r := range o.recs[ovfTopic] {
		if header(r, route.HeaderRuleTopicMissing) != merges {
			t.Errorf("on overflow without naming the topic: %v", r.Headers)
		}
	}
	if nr := strings.Join(g.c.NotReady(), "; "); strings.Contains(nr, merges) {
		t.Errorf("not ready for a topic no rule in use sends to: %q", nr)
	}
}

// ruleTopicRouter makes env's gate route team "bad" to the rule topic topic (rule
// bad-teams; the others by a team rule), its watch putting inUse in use, and returns the
// watch.
// startOnSmallRuleTopic creates topic with a max.message.bytes of 4096 and starts gate g
// with it among its output topics and in use as a rule's topic (as internal/gate does),
// once g has read its batch limit. prod is a client on env's cluster.
func startOnSmallRuleTopic(t *testing.T, env *gateEnv, topic string) (g *testGate, w *route.TopicWatch, prod *kgo.Client) {
	t.Helper()
	prod = producer(t, env.cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small := "4096"
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &small}, topic); err != nil {
		t.Fatal(err)
	}
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, topic} // as the gate's (internal/gate)
	w = ruleTopicRouter(t, env, topic, []string{topic}, nil)
	g = env.start(t, "g")
	waitFor(t, 20*time.Second, "the batch limit of the rule topic read at start", func() bool { return g.c.batchMaxBytes(topic) == 4096 })
	return g, w, prod
}

func ruleTopicRouter(t *testing.T, env *gateEnv, topic string, inUse []string, reg prometheus.Registerer) *route.TopicWatch {
	t.Helper()
	w := route.NewTopicWatch(ovfTopic)
	env.ccfg.RuleTopics = w
	env.wrap = func(Router) Router {
		rcfg := env.rcfg
		rcfg.RuleTopics = w
		r := forcedRuleRouter(t, rcfg, route.Rule{Name: "bad-teams", Action: route.ActionTopic, Topic: topic, Forced: []string{"bad"}}, reg)
		w.Use(inUse)
		return r
	}
	return w
}

// badAndGood is n input records, every fourth of team "bad", the others of "good".
func badAndGood(n int) []*kgo.Record {
	var in []*kgo.Record
	for i := range n {
		team := "good"
		if i%4 == 0 {
			team = "bad"
		}
		in = append(in, inputRecord(i, team))
	}
	return in
}

// A rule topic that exists at start, is deleted while the gate runs, and is created
// again: its records go to overflow meanwhile, and once it exists again the gate is ready
// and the rule's records go to it. franz-go keeps the deleted topic's ID and fails every
// produce to the new topic with UNKNOWN_TOPIC_ID until the topic is purged from it.
func TestRuleTopicDeletedAndCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 2)
			env.ccfg.Delivery = d
			const merges = "merges"
			prod := producer(t, env.cluster)
			adm := kadm.NewClient(prod)
			if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, merges); err != nil {
				t.Fatal(err)
			}
			w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
			g := env.start(t, "g")
			defer g.stop(t)
			read := func(topic string, id string, within time.Duration) bool {
				cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond), readCommitted())
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				deadline := time.Now().Add(within)
				for time.Now().Before(deadline) {
					ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
					fs := cl.PollFetches(ctx)
					cancel()
					for _, r := range fs.Records() {
						if header(r, idHeader) == id {
							return true
						}
					}
				}
				return false
			}
			produceAll(t, prod, []*kgo.Record{inputRecord(0, "bad")})
			if !read(merges, "0", 20*time.Second) {
				t.Fatal("record 0 not on the rule topic")
			}
			if _, err := adm.DeleteTopics(context.Background(), merges); err != nil {
				t.Fatal(err)
			}
			produceAll(t, prod, []*kgo.Record{inputRecord(1, "bad")})
			if !read(ovfTopic, "1", 20*time.Second) || !w.Missing(merges) {
				t.Fatal("record 1 not on overflow with the rule topic deleted")
			}
			if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, merges); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for w.Missing(merges) || !g.c.Ready() {
				if time.Now().After(deadline) {
					t.Fatalf("the rule topic exists again and is still marked missing: %v", g.c.NotReady())
				}
				time.Sleep(20 * time.Millisecond)
			}
			produceAll(t, prod, []*kgo.Record{inputRecord(2, "bad")})
			if !read(merges, "2", 15*time.Second) {
				t.Errorf("record 2 not on the rule topic created again (on overflow: %v); missing %v, not ready %v",
					read(ovfTopic, "2", time.Second), w.Missing(merges), g.c.NotReady())
			}
		})
	}
}

// Every record of a rule whose topic is missing that ends on the overflow topic naming it
// is counted in gate_rule_topic_records_total{reason="topic_missing"}, and none of them as
// sent to the topic ({reason="forced"}), whether the router sent it to overflow or the
// retry of its failed produce to the topic did.
func TestRuleTopicMissingCounted(t *testing.T) {
	env := newEnv(t, 2)
	const merges = "merges" // never created: deleted
	reg := prometheus.NewRegistry()
	ruleTopicRouter(t, env, merges, []string{merges}, reg)
	g := env.start(t, "g")
	defer g.stop(t)
	in := badAndGood(20)
	produceAll(t, producer(t, env.cluster), in)
	o := collect(t, env.cluster, len(in), time.Minute, 200*time.Millisecond)
	named := 0
	for _, r := range o.recs[ovfTopic] {
		if header(r, route.HeaderRuleTopicMissing) == merges {
			named++
		}
	}
	count := func(reason string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "gate_rule_topic_records_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["rule"] == "bad-teams" && labels["reason"] == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	if named != 5 {
		t.Fatalf("%d records on overflow naming %s, want 5", named, merges)
	}
	if got := count("topic_missing"); got != float64(named) {
		t.Errorf("gate_rule_topic_records_total{bad-teams,topic_missing} = %v, want %d: the records that went to overflow naming the topic (forced, \"sent there\": %v)",
			got, named, count(route.ReasonForced))
	}
}

// A rule topic missing at start is the preflight's to report: the gate is not ready and
// nothing is routed until it exists. The rule topic watch, which runs from the start,
// marked it missing meanwhile too, saying "every other record is routed as ever" (false:
// nothing was), and kept the mark once the preflight had found the topic created: the
// rule's first records, up to a watch interval's worth, went to overflow instead of the
// topic the preflight had just checked.
func TestRuleTopicMissingAtStartTakesRecordsOnceCreated(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	env.ccfg.WatchInterval = time.Second // the rule topics checked every second, not every 5 s
	const merges = "merges"
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, merges}
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
	var rounds atomic.Int64 // of the output watch, which checks the rule topics
	env.before = func(c *Consumer) { c.watched = func() { rounds.Add(1) } }
	g := env.start(t, "g")
	defer g.stop(t)
	preflightProblem := `topic "` + merges + `" does not exist`
	waitFor(t, 20*time.Second, "the preflight naming the topic", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), preflightProblem)
	})
	seen := rounds.Load()
	waitFor(t, 30*time.Second, "two rounds of the rule topic watch", func() bool { return rounds.Load() >= seen+2 })
	if nr := strings.Join(g.c.NotReady(), "; "); strings.Contains(nr, "routed as ever") || w.Missing(merges) {
		t.Errorf("before the preflight passed: marked missing %v, not ready %q: nothing is routed yet", w.Missing(merges), nr)
	}
	if err := env.cluster.CreateTopic(merges, 1, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the preflight passing", func() bool {
		return !strings.Contains(strings.Join(g.c.NotReady(), ";"), preflightProblem)
	})
	in := badAndGood(8)
	produceAll(t, producer(t, env.cluster), in)
	o := collect(t, env.cluster, 6, 20*time.Second, 300*time.Millisecond)
	if len(o.recs[accTopic]) != 6 || len(o.recs[ovfTopic]) != 0 {
		t.Errorf("%d accepted, %d on overflow: want the 6 of team good accepted and none on overflow (the rule's topic exists)",
			len(o.recs[accTopic]), len(o.recs[ovfTopic]))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.ConsumeTopics(merges),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < 2 && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got += cl.PollFetches(ctx).NumRecords()
		cancel()
	}
	if got != 2 {
		t.Errorf("%d records on %s, want the rule's 2", got, merges)
	}
}

// The preflight checks the rule topics of the rules in use at each attempt, not those
// in use at start. A rule topic missing at start holds the gate up (not ready, nothing
// routed) until it exists or a reload removes its rule: then the gate starts routing.
// Before, the preflight went on checking the start's rule topics until a restart, so an
// operator who fixed it by removing the rule waited for ever. A rule topic a reload puts
// in use while the preflight waits is checked by it too.
func TestPreflightChecksRuleTopicsInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reload []string // the rule topics in use after the reload
	}{
		{"rule removed", nil},
		{"rule replaced by one whose topic is missing", []string{"audit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 2)
			const merges = "merges"
			env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, merges}
			env.ccfg.PreflightInterval = 100 * time.Millisecond
			w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
			g := env.start(t, "g")
			defer g.stop(t)
			missing := func(topic string) bool {
				return strings.Contains(strings.Join(g.c.NotReady(), ";"), `topic "`+topic+`" does not exist`)
			}
			waitFor(t, 20*time.Second, "the preflight naming the rule topic", func() bool { return missing(merges) })

			w.Use(tc.reload) // the reload, accepted while the preflight waits
			waitFor(t, 20*time.Second, "the preflight no longer naming the removed rule's topic", func() bool { return !missing(merges) })
			if len(tc.reload) > 0 {
				waitFor(t, 20*time.Second, "the preflight naming the new rule's topic", func() bool { return missing("audit") })
				if err := env.cluster.CreateTopic("audit", 1, nil); err != nil {
					t.Fatal(err)
				}
			}
			var in []*kgo.Record
			for i := range 4 {
				in = append(in, inputRecord(i, "good"))
			}
			produceAll(t, producer(t, env.cluster), in)
			o := collect(t, env.cluster, len(in), 20*time.Second, 300*time.Millisecond)
			if len(o.recs[accTopic]) != len(in) {
				t.Errorf("%d accepted, want %d: not ready %v", len(o.recs[accTopic]), len(in), g.c.NotReady())
			}
			waitFor(t, 20*time.Second, "the gate ready", g.c.Ready)
		})
	}
}

// CheckTopics tells a topic Kafka could not say anything of (its metadata answer a
// retriable error other than the topic being unknown, here LEADER_NOT_AVAILABLE, as
// while a broker restarts) from one missing: the first wraps ErrUnasked, so that a rules
// reload is asked about again rather than refused as a bad file; a missing topic beside it
// refuses the set as ever, and the same topic answered normally passes.
func TestCheckTopicsTellsUnansweredFromMissing(t *testing.T) {
	env := newEnv(t, 1)
	var leaderless atomic.Bool
	leaderless.Store(true)
	env.cluster.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		m := req.(*kmsg.MetadataRequest)
		if !leaderless.Load() || !m.IncludeTopicAuthorizedOperations {
			return nil, nil, false
		}
		resp := m.ResponseKind().(*kmsg.MetadataResponse)
		for _, rt := range m.Topics {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if *rt.Topic == accTopic {
				st.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c, err := New(env.ccfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	err = c.CheckTopics(t.Context(), []string{accTopic})
	if !errors.Is(err, ErrUnasked) || !strings.Contains(err.Error(), "LEADER_NOT_AVAILABLE") {
		t.Errorf("a topic whose leader is being elected: %v, want an error wrapping ErrUnasked naming why", err)
	}
	err = c.CheckTopics(t.Context(), []string{accTopic, "no-such-topic"})
	if err == nil || errors.Is(err, ErrUnasked) || !strings.Contains(err.Error(), `"no-such-topic" does not exist`) {
		t.Errorf("a missing topic beside it: %v, want a refusal naming it", err)
	}
	leaderless.Store(false)
	if err := c.CheckTopics(t.Context(), []string{accTopic}); err != nil {
		t.Errorf("the topic answered normally: %v", err)
	}
}

// A rule topic deleted while the gate runs and created again with another
// max.message.bytes (here the broker's default, larger than the 4096 it had): once it
// takes writes again, a record of its rule under its new limit goes to it. Before, the
// limit read at start stayed the producer's batch bound for the topic, the client
// refused every record over the old limit at once (MESSAGE_TOO_LARGE) and the gate
// dead-lettered records the topic takes; with a smaller new limit, every full batch was
// refused and its records produced again one by one.
func TestRuleTopicCreatedAgainBatchLimitReadAgain(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	const merges = "merges"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, w, prod := startOnSmallRuleTopic(t, env, merges)
	defer g.stop(t)
	adm := kadm.NewClient(prod)
	if _, err := adm.DeleteTopics(ctx, merges); err != nil {
		t.Fatal(err)
	}
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "bad")})
	waitFor(t, 20*time.Second, "the deleted rule topic marked missing", func() bool { return w.Missing(merges) })
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, merges); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the rule topic created again taking writes", func() bool { return !w.Missing(merges) && g.c.Ready() })
	big := inputRecord(2, "bad")
	big.Value = []byte(`{"team_id":"bad","seq":2,"pad":"` + strings.Repeat("x", 8000) + `"}`)
	produceAll(t, prod, []*kgo.Record{big})
	waitCommitted(t, env.cluster, 1, time.Minute)
	ends, err := adm.ListEndOffsets(ctx, merges, dlqTopic, ovfTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { on[o.Topic] += o.Offset })
	// Record 1 on overflow, sent there while the topic was missing; record 2 on merges.
	if on[merges] != 1 || on[dlqTopic] != 0 || on[ovfTopic] != 1 {
		t.Errorf("an 8 KB record of the rule: %d on %s, %d dead-lettered, %d on overflow with record 1; want it on %s, whose max.message.bytes is now the default (batch limit %d)",
			on[merges], merges, on[dlqTopic], on[ovfTopic], merges, g.c.batchMaxBytes(merges))
	}
}

// TestRuleTopicLeaderElectionIsNotMissing: the periodic rule-topic check taking an answer
// Kafka calls retriable (LEADER_NOT_AVAILABLE on the topic, while its leader is elected)
// for no answer, as the reload's check does (CheckTopics): the topic stays in use and the
// gate ready. Before, the first such answer marked the topic missing, sent its rule's
// records to overflow and made the gate not ready until the next check.
func TestRuleTopicLeaderElectionIsNotMissing(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = time.Second // the rule topics checked every second, not every 5 s
	const merges = "merges"
	prod := producer(t, env.cluster)
	if _, err := kadm.NewClient(prod).CreateTopic(context.Background(), 1, 1, nil, merges); err != nil {
		t.Fatal(err)
	}
	w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
	g := env.start(t, "g")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "ready", g.c.Ready)
	// The check's own metadata request names the rule topics alone.
	var answered atomic.Int64
	env.cluster.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		mr := req.(*kmsg.MetadataRequest)
		if len(mr.Topics) != 1 || mr.Topics[0].Topic == nil || *mr.Topics[0].Topic != merges {
			return nil, nil, false
		}
		answered.Add(1)
		resp := mr.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = mr.GetVersion()
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(merges)
		rt.ErrorCode = kerr.LeaderNotAvailable.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	waitFor(t, 30*time.Second, "two checks answered LEADER_NOT_AVAILABLE", func() bool { return answered.Load() >= 2 })
	if w.Missing(merges) || !g.c.Ready() {
		t.Errorf("the rule topic answered LEADER_NOT_AVAILABLE: marked missing %v, not ready %v; want neither", w.Missing(merges), g.c.NotReady())
	}
}

// TestRuleTopicACLRevokedExactlyOncePreKIP890: with exactly-once delivery on brokers whose
// transactions predate KIP-890 part 2, the WRITE ACL on a rule's own topic revoked while
// the gate runs. The refusal leaves the Kafka client unable to go on, so the gate builds
// a new one; the topic is marked missing by then, and no record goes to it any more, so
// the new client is built at once: every other team's records are routed, and the rule's
// go to overflow naming the topic. Before, the gate waited closedTopicRetry (10 s; here
// far longer) before it built the new client, as for one of its own topics, and held up
// every team's records meanwhile.
func TestRuleTopicACLRevokedExactlyOncePreKIP890(t *testing.T) {
	t.Parallel()
	const merges = "merges"
	acls := faulttest.GateNeeds{Input: inTopic, Group: testGroup, Outputs: []string{accTopic, ovfTopic, dlqTopic, merges}, TransactionalID: "gate-g"}.ACLs()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.SeedTopics(1, merges), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.MaxVersions(kversion.V3_9_0()),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "gate", "gate-secret", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := newEnv(t, 2)
	env.cluster = c
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, merges}
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.SASL(plain.Auth{User: "gate", Pass: "gate-secret"}.AsMechanism()))
	env.before = func(c *Consumer) { c.txn.closedRetry = time.Hour } // for one of the gate's own topics
	w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
	admin := kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	adm := kadm.NewClient(admCl)
	g := env.start(t, "g")
	defer g.stop(t)
	waitFor(t, 20*time.Second, "ready", g.c.Ready)

	write := kadm.NewACLs().Allow("User:gate").AllowHosts("*").Topics(merges).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	if _, err := adm.DeleteACLs(context.Background(), write); err != nil {
		t.Fatal(err)
	}
	in := badAndGood(20)
	produceAll(t, admCl, in)
	o := collect(t, c, len(in), time.Minute, 300*time.Millisecond, readCommitted(), admin)
	if lost, dup := o.conservation(len(in)); len(lost)+len(dup) > 0 {
		t.Fatalf("lost %v, duplicated %v; missing %v, not ready %v", lost, dup, w.Missing(merges), g.c.NotReady())
	}
	if len(o.recs[accTopic]) != 15 || len(o.recs[ovfTopic]) != 5 {
		t.Errorf("%d accepted, %d on overflow: want the 15 of team good accepted, the rule's 5 on overflow", len(o.recs[accTopic]), len(o.recs[ovfTopic]))
	}
	for _, r := range o.recs[ovfTopic] {
		if header(r, route.HeaderRuleTopicMissing) != merges {
			t.Errorf("on overflow without naming the rule topic: %v", r.Headers)
		}
	}
	if nr := strings.Join(g.c.NotReady(), "; "); !strings.Contains(nr, `rule topic "merges"`) {
		t.Errorf("not ready reasons %q, want the rule topic named", nr)
	}
}

// A rule topic that a reload retires, that is deleted and created again while no rule
// uses it, and that a later reload brings back (checked first, CheckTopics): the rule's
// records go to it from the first, and the gate stays ready. Before, the client still
// held the deleted topic's ID, every produce to it failed with UNKNOWN_TOPIC_ID, and
// right after a reload the gate had checked, it went not ready saying the topic must be
// created, its rule's records to overflow, until the periodic check learned it anew.
func TestRuleTopicCreatedAgainWhileRetiredTakesRecordsOnceBack(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	const merges = "merges"
	prod := producer(t, env.cluster)
	adm := kadm.NewClient(prod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, merges); err != nil {
		t.Fatal(err)
	}
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, merges} // as the gate's (internal/gate)
	w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
	g := env.start(t, "g")
	defer g.stop(t)
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "bad")}) // the client learns the topic
	waitCommitted(t, env.cluster, 1, 30*time.Second)

	w.Use(nil) // a reload retires the rule
	if _, err := adm.DeleteTopics(ctx, merges); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, merges); err != nil {
		t.Fatal(err)
	}
	if err := g.c.CheckTopics(ctx, []string{merges}); err != nil { // a reload brings it back
		t.Fatal(err)
	}
	w.Use([]string{merges})
	produceAll(t, prod, []*kgo.Record{inputRecord(1, "bad")})
	waitCommitted(t, env.cluster, 1, 30*time.Second)
	ends, err := adm.ListEndOffsets(ctx, merges, ovfTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { on[o.Topic] += o.Offset })
	if on[merges] != 1 || on[ovfTopic] != 0 || w.Missing(merges) || !g.c.Ready() {
		t.Errorf("the rule's record after the reload: %d on %s, %d on overflow; marked missing %v, not ready %q; want it on %s, the gate ready",
			on[merges], merges, on[ovfTopic], w.Missing(merges), g.c.NotReady(), merges)
	}
}

// A record the consumer reroutes from its missing rule topic carries the
// gate-rule-topic-missing header where the router puts it on the records it sends to
// overflow itself: after the overflow headers, before the rules' gate-tag headers. The
// consumer had appended it after the tags.
func TestReroutedRuleTopicHeaderWhereTheRouterPutsIt(t *testing.T) {
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{"merges"})
	w.SetMissing("merges", true)
	c := &Consumer{cfg: Config{RuleTopics: w}}
	f := &failed{out: kgo.Record{Topic: "merges", Headers: []kgo.RecordHeader{
		{Key: "gate-source"}, {Key: route.HeaderOverflowReason}, {Key: route.HeaderOverflowRule, Value: []byte("bad-teams")},
		{Key: route.HeaderTag, Value: []byte("t1")}, {Key: route.HeaderTag, Value: []byte("t2")},
	}}}
	r := c.retryRecord(f)
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	want := []string{"gate-source", route.HeaderOverflowReason, route.HeaderOverflowRule, route.HeaderRuleTopicMissing, route.HeaderTag, route.HeaderTag}
	if r.Topic != ovfTopic || strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("rerouted to %s with headers %v, want %s with %v", r.Topic, keys, ovfTopic, want)
	}
	if len(f.out.Headers) != 5 {
		t.Errorf("the failed record's own headers changed: %v", f.out.Headers)
	}
}

// TestRuleTopicNoLongerUsedIsNamed: the line that says a rule topic that was missing is
// no longer used by the rules in use (a reload dropped its rule) names the topic, where it
// said only that one was (a review, black-box).
func TestRuleTopicNoLongerUsedIsNamed(t *testing.T) {
	var logs bytes.Buffer
	w := route.NewTopicWatch(ovfTopic)
	w.Use(nil) // the rules in use send to no topic of their own
	c := &Consumer{cfg: Config{RuleTopics: w}, log: slog.New(slog.NewJSONHandler(&logs, nil))}
	c.problems.set(problemRuleTopics+"merges", `kafka: rule topic "merges": does not exist`)
	c.checkRuleTopics(t.Context(), nil) // no topic to ask Kafka about: no client needed
	if !strings.Contains(logs.String(), "no longer used by the rules in use") || !strings.Contains(logs.String(), `"topics":["merges"]`) {
		t.Errorf("the line does not name the topic no rule uses:\n%s", logs.String())
	}
}

// TestMissingRuleTopicRetryLineSaysOverflow: at least once, the records of a produce to a
// rule topic that failed for want of it go to the overflow topic (retryRecord), and the
// retry loop's line says so ("produce to a missing rule topic failed; its records go to
// the overflow topic instead"), where it said "retrying" of records that went elsewhere
// (a review, black-box, read it as the gate retrying the topic).
func TestMissingRuleTopicRetryLineSaysOverflow(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	logs := &syncBuffer{}
	env.logs = logs
	const merges = "merges"
	ruleTopicRouter(t, env, merges, []string{merges}, nil) // the topic never created
	g := env.start(t, "g")
	defer g.stop(t)
	in := badAndGood(20)
	produceAll(t, producer(t, env.cluster), in)
	o := collect(t, env.cluster, len(in), time.Minute, 200*time.Millisecond)
	if len(o.recs[ovfTopic]) != 5 {
		t.Fatalf("%d on overflow, want the rule's 5", len(o.recs[ovfTopic]))
	}
	// The output watch may find the topic missing before the first record of the rule is
	// routed, which then goes to overflow with no produce failing and no line: what is
	// checked is that no line says the rule topic's records are retried.
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, `"topic":"merges"`) && strings.Contains(l, "produce failed; retrying") {
			t.Errorf("the retry line says the rule topic's records are retried:\n%s", l)
		}
	}
}

// TestRetryLineSaysOverflowBeforeTheTopicIsMarked: the retry loop may take up a failed
// produce to a missing rule topic before its promise has marked the topic missing
// (produceProblem runs after the push that wakes the loop), and then said "retrying" of
// records that go to overflow (a CI run of TestMissingRuleTopicRetryLineSaysOverflow).
// The line is chosen by the failure itself: the same test produceProblem marks by.
func TestRetryLineSaysOverflowBeforeTheTopicIsMarked(t *testing.T) {
	logs := &syncBuffer{}
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{"merges"}) // in use, not yet marked missing
	c := &Consumer{
		cfg: Config{RuleTopics: w, Jitter: func(n int64) int64 { return n - 1 }},
		log: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	c.retry.init()
	// Of a partition given up: the loop, past its backoff before the test cancels it (a
	// loaded machine), skips the record rather than redeliver a batch it has none of.
	p := &partition{}
	p.stopped.Store(true)
	c.retry.push(&failed{out: kgo.Record{Topic: "merges"}, b: &batch{p: p}, err: kerr.UnknownTopicOrPartition})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.retryLoop(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), `"topic":"merges"`) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(logs.String(), "its records go to the overflow topic instead") {
		t.Errorf("the retry line does not say the records go to overflow:\n%s", logs.String())
	}
}

// TestRuleTopicFoundMissingFailsItsBufferedRecords: records of a rule topic that the
// client holds, retrying, when the rule topic check finds the topic missing fail at once
// and go to overflow (retryRecord), rather than waiting out the client's retries: with
// exactly-once delivery the transaction holding them waits with them, every team's
// records in it (some 10 s on Apache Kafka 4.3, a topic deleted under load). Here the
// broker refuses the topic's produces for as long as the test runs (NOT_ENOUGH_REPLICAS,
// which franz-go retries without end) while the check's metadata answer says it is gone.
//
// Marked missing before the check (marked: a failed produce of another of its records
// had, produceProblem), the record was purged by no check, only the one that marked it
// did (a review).
func TestRuleTopicFoundMissingFailsItsBufferedRecords(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			t.Parallel()
			ruleTopicFoundMissing(t, marked)
		})
	}
}

func ruleTopicFoundMissing(t *testing.T, marked bool) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "merges"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	goneUnderCheck(t, c, prod, "merges")
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{"merges"})
	logs := &syncBuffer{}
	cons := &Consumer{cfg: Config{RuleTopics: w}, prod: prod, log: slog.New(slog.NewJSONHandler(logs, nil))}
	failed := make(chan error, 1)
	prod.Produce(t.Context(), &kgo.Record{Topic: "merges", Value: []byte("v")}, func(_ *kgo.Record, err error) { failed <- err })
	select {
	case err := <-failed:
		t.Fatalf("the record failed before the topic was found missing: %v", err)
	case <-time.After(300 * time.Millisecond): // retried meanwhile
	}
	if marked {
		w.SetMissing("merges", true)
	}
	cons.checkRuleTopics(t.Context(), prod)
	select {
	case err := <-failed:
		if err == nil || !w.Missing("merges") {
			t.Fatalf("the record's produce ended with %v, the topic marked missing %v; want it failed, the topic missing", err, w.Missing("merges"))
		}
		if got := errorName(err); got != "purged" {
			t.Errorf("gate_produce_errors_total's error label for the purged record (%v) = %q, want purged", err, got)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the record was still being retried a minute after its rule topic was found missing (marked %v)", w.Missing("merges"))
	}
}

// goneUnderCheck has cluster c answer the rule topic check's metadata requests (they ask
// for the topic's authorized operations; the client's own do not) saying topic is gone,
// and refuse every produce naming it (NOT_ENOUGH_REPLICAS, retried by franz-go without
// end), for as long as the test runs: Apache Kafka for some seconds after a deletion
// under load. cl reads the topic's metadata first.
func goneUnderCheck(t *testing.T, c *kfake.Cluster, cl *kgo.Client, topic string) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	gone, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	id := gone.Topics[0].TopicID // a produce names it by ID from version 13 on
	gone.Topics[0].ErrorCode, gone.Topics[0].Partitions = kerr.UnknownTopicOrPartition.Code, nil
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		m := kreq.(*kmsg.MetadataRequest)
		if !m.IncludeTopicAuthorizedOperations || len(m.Topics) != 1 || m.Topics[0].Topic == nil || *m.Topics[0].Topic != topic {
			return nil, nil, false
		}
		resp := *gone
		resp.Topics = slices.Clone(gone.Topics)
		resp.SetVersion(m.GetVersion())
		return &resp, nil, true
	})
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		p := kreq.(*kmsg.ProduceRequest)
		if !slices.ContainsFunc(p.Topics, func(tp kmsg.ProduceRequestTopic) bool { return tp.Topic == topic || tp.TopicID == id }) {
			return nil, nil, false
		}
		return faulttest.ProduceRefused(p, faulttest.NotEnoughReplicas), nil, true
	})
}

// TestExactlyOnceSlowFlushChecksTheRuleTopics: exactly once, a transaction whose records
// wait on a rule topic gone under it (the brokers refuse its produces, retriably, while
// their metadata says it is missing: Apache Kafka for some 10 s after a deletion) holds
// every team's records with it. A flush that takes a second has the rule topics checked
// at once, out of the watch's schedule (here an hour away), and the topic found missing
// fails its records (ruleTopicMissing), so the transaction aborts and its replay sends
// the rule's records to overflow: the other team's record is committed. Before, it
// waited until the watch's next round (5 s by default), or here for as long as the
// refusals lasted.
func TestExactlyOnceSlowFlushChecksTheRuleTopics(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.WatchInterval = time.Hour
	env.ccfg.ProduceRetries = 0 // the default: the client retries a record until written
	const merges = "merges"
	prod := producer(t, env.cluster)
	if _, err := kadm.NewClient(prod).CreateTopic(t.Context(), 1, 1, nil, merges); err != nil {
		t.Fatal(err)
	}
	w := ruleTopicRouter(t, env, merges, []string{merges}, nil)
	logs := &syncBuffer{}
	env.logs = logs
	g := env.start(t, "g")
	defer g.stop(t)
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "bad"), inputRecord(1, "good")})
	collect(t, env.cluster, 1, time.Minute, 0, readCommitted()) // the gate routes: the topic is there

	goneUnderCheck(t, env.cluster, prod, merges)
	produceAll(t, prod, []*kgo.Record{inputRecord(2, "bad"), inputRecord(3, "good")})
	o := collect(t, env.cluster, 3, 2*time.Minute, 0, readCommitted()) // record 0 is on the rule topic
	if got := o.ids[3]; len(got) != 1 || got[0] != accTopic {
		t.Errorf("the good team's record behind the rule topic's: on %v, want committed on %s once", got, accTopic)
	}
	if got := o.ids[2]; len(got) != 1 || got[0] != ovfTopic || !w.Missing(merges) {
		t.Errorf("the rule's record: on %v (the topic marked missing %v), want on %s", got, w.Missing(merges), ovfTopic)
	}
	// What an operator reads of it: the purge counted as such, not as "other", and the
	// abort's line saying where the rule's records went, not a broker failure's backoff.
	if got := testutil.ToFloat64(g.c.m.produceErrors.WithLabelValues(merges, "purged")); got < 1 {
		t.Errorf("gate_produce_errors_total{topic=%q,error=purged} = %v, want at least 1", merges, got)
	}
	if got := testutil.ToFloat64(g.c.m.produceErrors.WithLabelValues(merges, "other")); got != 0 {
		t.Errorf("gate_produce_errors_total{topic=%q,error=other} = %v, want 0", merges, got)
	}
	if want := "produce to a missing rule topic failed; transaction aborted, its rule's records go to the overflow topic instead"; !strings.Contains(logs.String(), want) {
		t.Errorf("no line %q in the gate's logs:\n%s", want, logs.String())
	}
}

// TestReloadRemovingARuleTopicDuringItsCheck: a rules reload that drops the rule of topic
// "merges" (deleted by the operator) lands while the watch's check asks the cluster about
// it: the check names no topic no rule uses as a reason the gate is not ready. It did,
// with an error line, until the next check cleared it (a review).
func TestReloadRemovingARuleTopicDuringItsCheck(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, ovfTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{"merges"})
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if m := kreq.(*kmsg.MetadataRequest); m.IncludeTopicAuthorizedOperations {
			w.Use(nil) // the reload removing the rule lands now
		}
		return nil, nil, false
	})
	logs := &syncBuffer{}
	cons := &Consumer{cfg: Config{RuleTopics: w}, log: slog.New(slog.NewJSONHandler(logs, nil))}
	cons.preflighted.Store(true)
	cons.ready.Store(true)
	cons.checkRuleTopics(t.Context(), cl)
	if w.Watched("merges") {
		t.Fatal("setup: merges still in use")
	}
	if why := cons.NotReady(); len(why) > 0 {
		t.Errorf("not ready naming a rule topic no rule in use sends to: %q\nlog: %s", strings.Join(why, "; "), logs.String())
	}
}

// TestRuleTopicCreatedAgainBetweenChecksLearnedAnew: rule topic "merges" deleted and
// created again between two checks. The check after sees its new topic ID and has the
// client learn it anew: it did nothing with it, the client kept the old ID, and the
// rule's next record failed with UNKNOWN_TOPIC_ID (the gate then not ready, the record
// to overflow; a review).
func TestRuleTopicCreatedAgainBetweenChecksLearnedAnew(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, ovfTopic, "merges"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	w := route.NewTopicWatch(ovfTopic)
	w.Use([]string{"merges"})
	logs := &syncBuffer{}
	cons := &Consumer{cfg: Config{RuleTopics: w}, prod: prod, log: slog.New(slog.NewJSONHandler(logs, nil))}
	cons.checkRuleTopics(t.Context(), prod) // a round: notes the topic's ID
	if err := prod.ProduceSync(t.Context(), &kgo.Record{Topic: "merges", Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(prod)
	if _, err := adm.DeleteTopics(t.Context(), "merges"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(t.Context(), 1, 1, nil, "merges"); err != nil {
		t.Fatal(err)
	}
	cons.checkRuleTopics(t.Context(), prod) // the next round: the topic exists, with a new ID
	if w.Missing("merges") {
		t.Fatal("marked missing")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "merges", Value: []byte("b")}).FirstErr(); err != nil {
		t.Errorf("the rule's next record after a check that saw the topic's new ID: %v\nlog: %s", err, logs.String())
	}
}
