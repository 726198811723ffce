package consume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/capturegate/gate/internal/faulttest"
)

// Rule topics that exist but that the gate's principal may not WRITE to (it may DESCRIBE
// them, so the brokers' metadata answer names the topic, its authorized operations
// lacking WRITE): the start-up check and a reload's check (CheckTopics) must refuse them
// as they refuse a missing one, naming the topic and the ACL to grant.

// ruleACLTopic is the rule topic of these tests; noACLTopic is one the gate's principal
// has no ACL on at all.
const (
	ruleACLTopic = "merges"
	noACLTopic   = "audit"
)

// ruleTopicACLCluster is a broker requiring SASL PLAIN with ACLs on: admin/admin a
// superuser, gate/gate-secret allowed what a gate named "g" needs (READ on the input and
// the group, WRITE on the three output topics, the transactional ID and idempotent
// writes) but only DESCRIBE on the rule topic ruleACLTopic, and nothing on noACLTopic.
// It returns the cluster and an admin client of it.
func ruleTopicACLCluster(t *testing.T) (*kfake.Cluster, *kadm.Client, kgo.Opt) {
	t.Helper()
	acls := faulttest.GateNeeds{Input: inTopic, Group: testGroup, Outputs: []string{accTopic, ovfTopic, dlqTopic}, TransactionalID: "gate-g"}.ACLs()
	acls = append(acls, faulttest.AllowACL(kmsg.ACLResourceTypeTopic, ruleACLTopic, kmsg.ACLOperationDescribe)...) // no WRITE
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, inTopic), kfake.SeedTopics(3, accTopic, ovfTopic, dlqTopic),
		kfake.SeedTopics(1, ruleACLTopic, noACLTopic), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "gate", "gate-secret", acls...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	admin := kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, kadm.NewClient(cl), admin
}

// ruleTopicACLEnv is a gate environment on c as the gate's principal, with ruleACLTopic
// among its output topics (as internal/gate passes a rule's topic).
func ruleTopicACLEnv(t *testing.T, c *kfake.Cluster) *gateEnv {
	t.Helper()
	env := newEnv(t, 2)
	env.cluster = c
	env.ccfg.Brokers = c.ListenAddrs()
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic, ruleACLTopic}
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	env.ccfg.ClientOpts = append(testClientOpts(), kgo.SASL(plain.Auth{User: "gate", Pass: "gate-secret"}.AsMechanism()))
	return env
}

// grantRuleTopicWrite grants the gate's principal WRITE on ruleACLTopic.
func grantRuleTopicWrite(t *testing.T, adm *kadm.Client) {
	t.Helper()
	b := kadm.NewACLs().Allow("User:gate").AllowHosts("*").Topics(ruleACLTopic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	rs, err := adm.CreateACLs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// noWriteProblem is what the checks say of ruleACLTopic without its WRITE ACL.
const noWriteProblem = `topic "` + ruleACLTopic + `": no permission to write it: grant the WRITE ACL on it to the gate's principal`

// TestPreflightRuleTopicWithoutWriteACL: a rule's topic that exists, which the gate's
// principal may DESCRIBE but not WRITE to, keeps the gate from starting, as one of its
// own topics would: not ready, the reason and one error line naming the topic and the
// WRITE ACL, nothing routed, and no other topic blamed. Once WRITE is granted the
// preflight passes and every record is routed, the rule's to its topic.
func TestPreflightRuleTopicWithoutWriteACL(t *testing.T) {
	t.Parallel()
	for _, tc := range deliveries() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, adm, admin := ruleTopicACLCluster(t)
			env := ruleTopicACLEnv(t, c)
			env.ccfg.Delivery = tc.d
			logs := &syncBuffer{}
			env.logs = logs
			w := ruleTopicRouter(t, env, ruleACLTopic, []string{ruleACLTopic}, nil)
			checks := faulttest.RequestsCounted(c, kmsg.DescribeGroups, nil) // one a preflight check
			g := env.start(t, "g")
			defer g.stop(t)
			waitNotReady(t, g, 20*time.Second, "the rule topic's missing WRITE ACL named", func(why string) bool {
				return strings.Contains(why, noWriteProblem)
			})
			in := badAndGood(8) // 2 of the rule's team "bad", 6 of "good"
			prodCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), admin)
			if err != nil {
				t.Fatal(err)
			}
			defer prodCl.Close()
			produceAll(t, prodCl, in)
			waitMore(t, "three more preflight checks", 3, countOf(checks)) // a routing gate would have routed them by now

			why := strings.Join(g.c.NotReady(), "; ")
			if g.c.Ready() || !strings.Contains(why, noWriteProblem) {
				t.Errorf("ready %v, not ready because %q; want not ready naming %q", g.c.Ready(), why, noWriteProblem)
			}
			for _, ok := range []string{inTopic, accTopic, ovfTopic, dlqTopic, "consumer group"} {
				if strings.Contains(why, `"`+ok+`"`) {
					t.Errorf("reported a problem with %s, which is permitted: %s", ok, why)
				}
			}
			if strings.Contains(why, "routed as ever") || w.Missing(ruleACLTopic) {
				t.Errorf("before the preflight passed: marked missing %v, not ready %q: nothing is routed yet", w.Missing(ruleACLTopic), why)
			}
			if n := preflightErrorLines(t, logs.String(), noWriteProblem); n != 1 {
				t.Errorf("%d preflight error lines naming %q, want 1:\n%s", n, noWriteProblem, logs.String())
			}
			if o := collect(t, c, 1, 500*time.Millisecond, 0, append(tc.opts, admin)...); o.n != 0 {
				t.Fatalf("%d records routed before the preflight passed: %v", o.n, o.ids)
			}

			grantRuleTopicWrite(t, adm)
			waitFor(t, 20*time.Second, "ready once WRITE is granted", g.c.Ready)
			o := collect(t, c, 6, 30*time.Second, 300*time.Millisecond, append(tc.opts, admin)...)
			if len(o.recs[accTopic]) != 6 || len(o.recs[ovfTopic]) != 0 || len(o.recs[dlqTopic]) != 0 {
				t.Errorf("%d accepted, %d on overflow, %d dead-lettered: want the 6 of team good accepted, the rule's 2 on %s",
					len(o.recs[accTopic]), len(o.recs[ovfTopic]), len(o.recs[dlqTopic]), ruleACLTopic)
			}
			// The rule's 2 records, read as the outputs are (read_committed under exactly
			// once, whose commit markers take offsets too).
			waitFor(t, 30*time.Second, "the rule's 2 records, and no more, on "+ruleACLTopic, func() bool {
				return len(faulttest.ReadTopics(t, c, 30*time.Second, append(tc.opts, admin), ruleACLTopic)) == 2
			})
		})
	}
}

// preflightErrorLines counts the JSON log lines in logs of the failed preflight whose
// problems include problem.
func preflightErrorLines(t *testing.T, logs, problem string) int {
	t.Helper()
	n := 0
	for _, line := range logLines(t, logs) {
		lvl, _ := line["level"].(string)
		msg, _ := line["msg"].(string)
		problems, _ := line["problems"].(string)
		if lvl == "ERROR" && strings.Contains(msg, "cannot start consuming") && strings.Contains(problems, problem) {
			n++
		}
	}
	return n
}

// TestCheckTopicsRuleTopicWithoutWriteACL: a reload's check of its rule topics
// (CheckTopics) refuses one that exists but that the gate's principal may not WRITE to,
// naming it and the ACL, as a refusal (not ErrUnasked: Kafka answered); one it may not
// even DESCRIBE likewise. One it may write passes, and the refused one passes once
// WRITE is granted.
func TestCheckTopicsRuleTopicWithoutWriteACL(t *testing.T) {
	t.Parallel()
	c, adm, _ := ruleTopicACLCluster(t)
	env := ruleTopicACLEnv(t, c)
	cons, err := New(env.ccfg, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	ctx := t.Context()

	err = cons.CheckTopics(ctx, []string{accTopic, ruleACLTopic})
	if err == nil || errors.Is(err, ErrUnasked) || !strings.Contains(err.Error(), noWriteProblem) {
		t.Errorf("a rule topic without WRITE: %v, want a refusal naming %q", err, noWriteProblem)
	} else if strings.Contains(err.Error(), `"`+accTopic+`"`) {
		t.Errorf("the refusal blames %s, which the gate may write: %v", accTopic, err)
	}
	noDescribe := `topic "` + noACLTopic + `": not authorized to describe it: grant DESCRIBE and WRITE ACLs`
	if err := cons.CheckTopics(ctx, []string{noACLTopic}); err == nil || errors.Is(err, ErrUnasked) || !strings.Contains(err.Error(), noDescribe) {
		t.Errorf("a rule topic without any ACL: %v, want a refusal naming %q", err, noDescribe)
	}
	if err := cons.CheckTopics(ctx, []string{accTopic}); err != nil {
		t.Errorf("a topic the gate may write: %v", err)
	}
	grantRuleTopicWrite(t, adm)
	if err := cons.CheckTopics(ctx, []string{ruleACLTopic}); err != nil {
		t.Errorf("the rule topic once WRITE is granted: %v", err)
	}
}
