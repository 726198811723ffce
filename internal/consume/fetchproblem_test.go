package consume

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestInputFetchRefusedIsAProblem: the gate's READ ACL on its input topic is revoked
// after it started. franz-go hands every fetch's TOPIC_AUTHORIZATION_FAILED back to the
// poll at once and fetches again with no backoff, so the gate must say so once (an error
// naming the topic and what to grant), go not ready (nothing else fires: no record is
// read, so the lag it measures does not grow and it never stalls), keep its repeats
// paced, and say when fetching works again. Before, it logged a warning per poll (a
// flood) and stayed ready.
func TestInputFetchRefusedIsAProblem(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	var logs logSink
	env.logs = &logs
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)

	fault := env.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Err: kerr.TopicAuthorizationFailed, Count: -1,
	})
	waitFor(t, 20*time.Second, "the refused fetch logged", func() bool {
		return strings.Contains(logs.String(), "TOPIC_AUTHORIZATION_FAILED")
	})
	waitMoreFetchErrors(t, g, 100)                                              // refused again and again, with no backoff
	if n := strings.Count(logs.String(), "TOPIC_AUTHORIZATION_FAILED"); n > 6 { // msg and err of each line
		t.Errorf("the refused fetch logged %d times over a hundred refusals, want it paced (at most 3 lines):\n%.1000s", n, logs.String())
	}
	if why := strings.Join(g.c.NotReady(), ";"); !strings.Contains(why, strconv.Quote(inTopic)) {
		t.Fatalf("ready (%q) while every fetch of the input topic is refused", why)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), "READ and DESCRIBE ACLs") {
		t.Errorf("no error line saying what to grant:\n%.2000s", logs.String())
	}

	fault.Remove()
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(1, "team-1")})
	waitFor(t, 20*time.Second, "ready again", g.c.Ready)
	waitFor(t, 20*time.Second, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), "fetching works again")
	})

	// Refused again, and lifted from a topic that stays idle: no record is polled to show
	// it, and the gate is ready again fetchRefusedQuiet after the last refusal.
	fault = env.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Err: kerr.TopicAuthorizationFailed, Count: -1,
	})
	waitFor(t, 20*time.Second, "not ready again", func() bool { return !g.c.Ready() })
	fault.Remove()
	waitFor(t, fetchRefusedQuiet+10*time.Second, "ready again on an idle topic", g.c.Ready)
}

// TestGroupRefusedIsAProblem: the gate's READ ACL on its group is revoked while it runs:
// its group session ends and every join is refused. It must say why, once, naming the
// group and the ACL (not only "not joined to consumer group yet"), and say when it is
// over. Before, each refused session was a "fetch failed" warning with no topic.
func TestGroupRefusedIsAProblem(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	var logs logSink
	env.logs = &logs
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)

	fault := env.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup}, Group: testGroup, Err: kerr.GroupAuthorizationFailed, Count: -1,
	})
	waitFor(t, 20*time.Second, "not ready naming the group's ACL", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), "READ ACL on the group")
	})
	// The problem is recorded before its line is written: the line may follow.
	waitFor(t, 20*time.Second, "the refused group logged", func() bool {
		return strings.Contains(logs.String(), "GROUP_AUTHORIZATION_FAILED")
	})
	// Refused twice more (each join or heartbeat the fault answers), not a sleep a
	// loaded machine may pass with no request made.
	waitMore(t, "two more refused joins or heartbeats", 2, func() float64 { return float64(fault.Hits()) })
	n := 0
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "GROUP_AUTHORIZATION_FAILED") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the refused group logged %d times over two more refusals, want once:\n%.3000s", n, logs.String())
	}
	fault.Remove()
	produceAll(t, producer(t, env.cluster), []*kgo.Record{inputRecord(1, "team-1")})
	waitFor(t, 30*time.Second, "ready again", g.c.Ready)
	// The poll that clears the problem logs its end after: the line may follow.
	waitFor(t, 20*time.Second, "the end of the refusal logged", func() bool {
		return strings.Contains(logs.String(), "fetching works again")
	})
}

// TestPreflightProblemLoggedOncePaced: a gate whose output topic does not exist yet says
// so in one error line, and again only when what it finds changes or a minute has passed,
// not at every check (PreflightInterval, 5 s: 720 error lines an hour for a topic created
// the next morning); once the topic exists it says the preflight passed.
func TestPreflightProblemLoggedOncePaced(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic), kfake.SeedTopics(1, accTopic, dlqTopic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := newEnv(t, 1)
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	env.ccfg.PreflightInterval = 20 * time.Millisecond
	var logs logSink
	env.logs = &logs
	checks := faulttest.RequestsCounted(c, kmsg.DescribeGroups, nil) // one a preflight check
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the missing topic reported", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), `topic "overflow" does not exist`)
	})
	// The problems are recorded before their line is written: the line may follow.
	waitFor(t, 20*time.Second, "the missing topic logged", func() bool {
		return strings.Contains(logs.String(), "cannot start consuming")
	})
	waitMore(t, "ten more preflight checks", 10, countOf(checks))
	if n := strings.Count(logs.String(), "cannot start consuming"); n != 1 {
		t.Errorf("the missing topic logged %d times over ten more checks, want once", n)
	}
	if err := c.CreateTopic(ovfTopic, 1, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "ready once the topic exists", g.c.Ready)
	if !strings.Contains(logs.String(), "preflight passed") {
		t.Errorf("the preflight passing not logged:\n%.2000s", logs.String())
	}
}

// TestSessionTimeoutRefusedIsAProblem: brokers refuse a join whose session timeout is
// outside their group.min.session.timeout.ms and group.max.session.timeout.ms
// (INVALID_SESSION_TIMEOUT: GATE_KAFKA_SESSION_TIMEOUT=3s against the default 6 s
// minimum): no retry cures it. The gate must say so, naming the variable and the brokers'
// bounds, not only that it has not joined its group yet, as it did, the reason left to a
// "fetch failed; the client retries" warning.
func TestSessionTimeoutRefusedIsAProblem(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: testGroup, Err: kerr.InvalidSessionTimeout, Count: -1})
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "not ready naming the session timeout", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), "INVALID_SESSION_TIMEOUT")
	})
	why := strings.Join(g.c.NotReady(), ";")
	for _, want := range []string{"GATE_KAFKA_SESSION_TIMEOUT", "group.min.session.timeout.ms", "group.max.session.timeout.ms"} {
		if !strings.Contains(why, want) {
			t.Errorf("not ready for %q; want it to name %s", why, want)
		}
	}
}
