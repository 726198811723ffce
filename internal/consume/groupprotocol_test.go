package consume

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestGroupProtocolFallbackNamed: GATE_KAFKA_GROUP_PROTOCOL=consumer against brokers
// that do not run KIP-848 gets the classic protocol, every record routed once, and one
// warning that says so, naming the variable. Two kinds of brokers: Kafka 3.9, which
// lacks ConsumerGroupHeartbeat v1; and Kafka 4 that lists it among its APIs but has
// KIP-848 off (the group.version feature below 1, as a cluster upgraded from 3.x keeps
// it, or group.coordinator.rebalance.protocols without consumer), answering it and
// ConsumerGroupDescribe with UNSUPPORTED_VERSION. Against the latter the gate logged,
// going by the API list alone, that the consumer protocol ran. Against Kafka 4 with
// KIP-848 on, it says that the consumer protocol runs, and warns of nothing.
func TestGroupProtocolFallbackNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		brokers func(t *testing.T) *kfake.Cluster
		runs    GroupProtocol
	}{
		{"kafka-3.9", func(t *testing.T) *kfake.Cluster {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(kversion.V3_9_0()),
				kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
				kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c
		}, GroupClassic},
		{"kafka-4-kip848-off", func(t *testing.T) *kfake.Cluster {
			c := newCluster(t, 2)
			refuseKIP848(c)
			return c
		}, GroupClassic},
		{"kafka-4", func(t *testing.T) *kfake.Cluster { return newCluster(t, 2) }, GroupConsumer},
	} {
		for _, dl := range deliveries() {
			t.Run(tc.name+"/"+dl.name, func(t *testing.T) {
				t.Parallel()
				testGroupProtocolFallbackNamed(t, tc.brokers(t), tc.runs, dl.d, dl.opts)
			})
		}
	}
}

func testGroupProtocolFallbackNamed(t *testing.T, brokers *kfake.Cluster, runs GroupProtocol, d Delivery, opts []kgo.Opt) {
	const n = 50
	env := newEnv(t, 2)
	env.ccfg.Delivery = d
	env.cluster = brokers
	env.ccfg.Brokers = env.cluster.ListenAddrs()
	logs := &syncBuffer{}
	env.logs = logs
	env.ccfg.GroupProtocol = GroupConsumer
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "ready", g.c.Ready)

	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%3))
	}
	produceAll(t, producer(t, env.cluster), recs)
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, opts...)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}

	var said []string
	warned, ran := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l struct {
			Level, Msg    string
			GroupProtocol string `json:"group_protocol"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || !strings.Contains(l.Msg, "protocol") {
			continue
		}
		said = append(said, l.Level+" "+l.Msg+" group_protocol="+l.GroupProtocol)
		switch {
		case l.Level == "INFO" && l.Msg == "kafka: consumer group protocol" && l.GroupProtocol == runs.String():
			ran++
		case l.Level == "WARN" && l.GroupProtocol == GroupClassic.String() && strings.Contains(l.Msg, "GATE_KAFKA_GROUP_PROTOCOL"):
			warned++
		}
	}
	want := []int{1, 0} // warned, ran
	if runs == GroupConsumer {
		want = []int{0, 1}
	}
	if warned != want[0] || ran != want[1] || len(said) != 1 {
		t.Errorf("the group protocol lines are %q; want one, that %s runs (a warning naming GATE_KAFKA_GROUP_PROTOCOL when it is not the one asked for)", said, runs)
	}
}

// refuseKIP848 makes c answer as Kafka 4 with KIP-848 off does: ConsumerGroupHeartbeat
// and ConsumerGroupDescribe, still listed among its APIs, with UNSUPPORTED_VERSION.
func refuseKIP848(c *kfake.Cluster) {
	c.ControlKey(kmsg.ConsumerGroupHeartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ConsumerGroupHeartbeatRequest)
		resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.Version = r.Version
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp, nil, true
	})
	c.ControlKey(kmsg.ConsumerGroupDescribe.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ConsumerGroupDescribeRequest)
		resp := r.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		resp.Version = r.Version
		for _, g := range r.Groups {
			sg := kmsg.NewConsumerGroupDescribeResponseGroup()
			sg.Group, sg.ErrorCode = g, kerr.UnsupportedVersion.Code
			resp.Groups = append(resp.Groups, sg)
		}
		return resp, nil, true
	})
}

// TestPreflightNewGroupBrokersWithKIP848Off: GATE_KAFKA_GROUP_PROTOCOL=consumer, a new
// group, and Kafka 4 brokers with KIP-848 off. DescribeGroups finds no group, so the
// preflight asks ConsumerGroupDescribe, which such brokers answer UNSUPPORTED_VERSION:
// no KIP-848 group can exist, nothing more to check. The preflight took that answer for
// a problem, logging an error that an operator had something to fix and keeping the gate
// from consuming until franz-go's classic join had created the group (its next try, 5 s
// on); here the join is held, as by a coordinator still loading, and the preflight must
// pass all the same.
func TestPreflightNewGroupBrokersWithKIP848Off(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 2)
	c := env.cluster
	refuseKIP848(c)
	var held atomic.Bool
	held.Store(true)
	c.ControlKey(kmsg.JoinGroup.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !held.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.JoinGroupRequest)
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = r.Version
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	logs := &syncBuffer{}
	env.logs = logs
	env.ccfg.GroupProtocol = GroupConsumer
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	g := env.start(t, "a")
	deadline := time.Now().Add(10 * time.Second)
	for !g.c.preflighted.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("preflight not passed after 10s: not ready because %q", strings.Join(g.c.NotReady(), "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := logs.String(); strings.Contains(l, "cannot start consuming") {
		t.Errorf("logged a problem for an operator to fix: %s", l)
	}
	held.Store(false)
	waitFor(t, 20*time.Second, "ready once the group is joined", g.c.Ready)
}

// TestGroupProtocolRefusedByALiveGroupNamed: a fleet switched from classic to consumer
// by a rolling update, against brokers whose group.consumer.migration.policy does not
// let a live classic group take a KIP-848 member (kfake never does; Kafka answers
// GROUP_ID_NOT_FOUND, "Cannot upgrade classic group ..."). The new gate must say, once
// and in its not-ready reasons, that the group refuses its protocol and which variable
// chose it; it logged a paced warning that the client retries, "The group id does not
// exist", and was not ready only as "not joined to consumer group yet". The old gates
// route everything meanwhile; once the last one leaves, the new gate joins (an empty
// group takes either protocol) and the problem is over.
func TestGroupProtocolRefusedByALiveGroupNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testGroupProtocolRefusedByALiveGroupNamed(t, tc.d, tc.opts)
		})
	}
}

func testGroupProtocolRefusedByALiveGroupNamed(t *testing.T, d Delivery, opts []kgo.Opt) {
	const n = 40
	env := newEnv(t, 2)
	env.ccfg.Delivery = d
	a := env.start(t, "a") // classic
	waitFor(t, 20*time.Second, "a ready", a.c.Ready)
	var logs logSink
	env.logs = &logs
	env.ccfg.GroupProtocol = GroupConsumer
	b := env.start(t, "b")
	want := "GATE_KAFKA_GROUP_PROTOCOL"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(strings.Join(b.c.NotReady(), ";"), want) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s not ready because %q; want it to say the group refuses the protocol GATE_KAFKA_GROUP_PROTOCOL chose", strings.Join(b.c.NotReady(), "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The reason is set before its line is logged: the line may come an instant later.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), `"level":"ERROR"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no error line:\n%.2000s", logs.String())
		}
	}

	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%3))
	}
	prod := producer(t, env.cluster)
	produceAll(t, prod, recs[:n/2])
	waitCommitted(t, env.cluster, 2, 30*time.Second)
	a.stop(t)
	produceAll(t, prod, recs[n/2:])
	waitFor(t, 30*time.Second, "b ready once a left", b.c.Ready)
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, opts...)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}

// TestKIP848ThrottleWarningTakesTheGroupsSessionTimeout: under KIP-848 the brokers set
// the group's session timeout (its consumer.session.timeout.ms, else their
// group.consumer.session.timeout.ms), and the client's GATE_KAFKA_SESSION_TIMEOUT is not
// sent. The throttle warning took the client's all the same: with the test's 3 s, a 10 s
// throttle was said to risk the group against a 45 s (or here 50 s) session, and the
// line named a variable that applies to nothing. The gate now reads the group's, keeps
// it over a rebuilt client's (exactly once, a recovery), and names the setting.
func TestKIP848ThrottleWarningTakesTheGroupsSessionTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		group string // the group's consumer.session.timeout.ms, "" for none
		want  time.Duration
		from  string
	}{
		{"group-sets-one", "50000", 50 * time.Second, "the group's consumer.session.timeout.ms"},
		{"group-sets-none", "", kip848SessionDefault, "Kafka's default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 2)
			env.ccfg.GroupProtocol = GroupConsumer
			logs := &syncBuffer{}
			env.logs = logs
			if tc.group != "" {
				req := kmsg.NewPtrIncrementalAlterConfigsRequest()
				res := kmsg.NewIncrementalAlterConfigsRequestResource()
				res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, testGroup
				c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				c.Name, c.Value = "consumer.session.timeout.ms", kmsg.StringPtr(tc.group)
				res.Configs = append(res.Configs, c)
				req.Resources = append(req.Resources, res)
				resp, err := req.RequestWith(t.Context(), producer(t, env.cluster))
				if err == nil {
					err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
				}
				if err != nil {
					t.Fatalf("setting the group's consumer.session.timeout.ms: %v", err)
				}
			}
			g := env.start(t, "a")
			waitFor(t, 20*time.Second, "ready", g.c.Ready)
			waitFor(t, 20*time.Second, "the group protocol line", func() bool {
				return strings.Contains(logs.String(), `"msg":"kafka: consumer group protocol"`)
			})
			if !strings.Contains(logs.String(), `"session_timeout":"`+tc.want.String()+`","session_timeout_from":"`+tc.from) {
				t.Errorf("the group protocol line does not give session_timeout %s from %q: %s", tc.want, tc.from, logs.String())
			}
			g.c.noteSession(g.c.cl) // as a rebuilt client does: its option (3 s here) is not the group's
			if got := time.Duration(g.c.quota.session.Load()); got != tc.want {
				t.Fatalf("the throttle warning's session timeout is %v, want the group's %v", got, tc.want)
			}

			var said faulttest.Buffer
			h := g.c.quota
			h.log = slog.New(slog.NewTextHandler(&said, nil))
			h.OnBrokerThrottle(kgo.BrokerMetadata{NodeID: 0}, 10*time.Second, true)
			if s := said.String(); !strings.Contains(s, "routing slows down") || strings.Contains(s, "may drop") {
				t.Errorf("a 10 s throttle against a %v session: %s", tc.want, s)
			}
			h.OnBrokerThrottle(kgo.BrokerMetadata{NodeID: 0}, tc.want/2+time.Second, true)
			s := said.String()
			if !strings.Contains(s, "may drop this gate") || !strings.Contains(s, "group.consumer.session.timeout.ms") || strings.Contains(s, "half GATE_KAFKA_SESSION_TIMEOUT") {
				t.Errorf("a throttle of over half the group's %v session must say the group may drop the gate, naming the brokers' setting, not GATE_KAFKA_SESSION_TIMEOUT: %s", tc.want, s)
			}
		})
	}
}
