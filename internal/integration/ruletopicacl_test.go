package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestRuleTopicACLRevoked: on Apache Kafka's authorizer, every ACL of the gate's
// principal on a rule's own topic deleted while the gate runs, then granted again. While
// it is closed the gate is not ready naming the topic, the rule's records go to overflow
// naming it, and every other record is routed; once granted again the gate is ready and
// the rule's records go to its topic.
func TestRuleTopicACLRevoked(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{sasl: true}, 1, 1)
	merges := s.n.In + "-merges"
	s.k.CreateTopic(t, merges, 1)
	grant := func(b *kadm.ACLBuilder) {
		t.Helper()
		s.k.allow(t, b, "User:gate")
	}
	grant(kadm.NewACLs().Topics(s.n.In).Operations(kadm.OpRead, kadm.OpDescribe))
	grant(kadm.NewACLs().Topics(s.n.Acc, s.n.Ovf, s.n.Dlq).Operations(kadm.OpWrite, kadm.OpDescribe))
	grant(kadm.NewACLs().Groups(s.n.Group).Operations(kadm.OpRead, kadm.OpDescribe))
	onMerges := func() *kadm.ACLBuilder {
		return kadm.NewACLs().Topics(merges).Operations(kadm.OpWrite, kadm.OpDescribe)
	}
	grant(onMerges())
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf(`rules:
  - {name: merges, key: json:team_id, limits: [1m:1000000], force: [t1], action: 'topic:%s'}
  - {name: team, key: json:team_id, limits: [1m:1000000]}
`, merges)), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := gateVarsFor(s,
		"GATE_KAFKA_SASL_MECHANISM", "plain",
		"GATE_KAFKA_SASL_USERNAME", "gate",
		"GATE_KAFKA_SASL_PASSWORD", "gate-secret",
		"GATE_RULES_FILE", rules)
	delete(vars, "GATE_WINDOW")
	delete(vars, "GATE_THRESHOLD")
	gt := faulttest.StartGate(t, s.bin, "ruletopicacl", vars)
	waitReady(t, gt)

	var seq int
	send := func(team string, n int) {
		t.Helper()
		var recs []*kgo.Record
		for range n {
			seq++
			recs = append(recs, &kgo.Record{Topic: s.n.In, Value: []byte(fmt.Sprintf(`{"team_id":%q,"seq":%d}`, team, seq))})
		}
		produce(t, s.k, recs...)
	}
	// total waits until topics hold want records in all.
	total := func(want int64, what string, topics ...string) map[string]int64 {
		t.Helper()
		var by map[string]int64
		faulttest.WaitFor(t, 2*time.Minute, what, func() bool {
			ends := s.k.Ends(t, topics...)
			by = map[string]int64{}
			var n int64
			for _, tp := range topics {
				by[tp] = sum(ends[tp])
				n += by[tp]
			}
			return n >= want
		})
		return by
	}
	send("t1", 2)
	send("t2", 2)
	by := total(4, "the first records routed", append(s.n.Outs(), merges)...)
	if by[merges] != 2 || by[s.n.Acc] != 2 {
		t.Fatalf("with the ACL: %v, want 2 on %s and 2 accepted", by, merges)
	}

	res, err := s.k.Admin.DeleteACLs(t.Context(), onMerges().Allow("User:gate").AllowHosts("*").ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	send("t1", 3)
	send("t2", 3)
	faulttest.WaitFor(t, time.Minute, "/readyz naming the closed rule topic", func() bool {
		code, body := gt.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `rule topic "`+merges+`"`)
	})
	by = total(10, "every record routed with the rule topic closed", append(s.n.Outs(), merges)...)
	if by[s.n.Ovf] != 3 || by[s.n.Acc] != 5 || by[merges] != 2 {
		t.Errorf("with the ACL revoked: %v, want t1's 3 on overflow, t2's 3 accepted", by)
	}

	grant(onMerges())
	waitReady(t, gt)
	send("t1", 2)
	send("t2", 1)
	by = total(13, "every record routed with the ACL granted again", append(s.n.Outs(), merges)...)
	if by[merges] != 4 || by[s.n.Ovf] != 3 {
		t.Errorf("with the ACL granted again: %v, want t1's 2 more on %s", by, merges)
	}
	if n := strings.Count(gt.Logs(), `kafka: rule topic \"`+merges+`\"`); n > 2 {
		t.Errorf("the closed rule topic said in %d error lines, want at most two (a failed write, a check)", n)
	}
}
