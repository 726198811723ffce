package consume

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tick"
)

// BenchmarkRotationGate is the rotation load of internal/tick's BenchmarkRotation (100k
// teams by Zipf(1.1), 50 users each, and one team with a fresh distinct_id on every fifth
// record) through the whole gate, as the issue "Rules at fleet scale" measured it
// black-box: consumed from kfake (a process of its own), read, routed and produced, the
// tick on a real redis-server. "rotation-team-rule" has a rules file with the team rule
// alone (1m:300,000), "rotation-user-rule" a team_id+distinct_id rule (1m:30,000, keys
// under the floor in its sketch, a rotating team collapsed) before the same team rule.
// Their limits set what config.RuleLimitConfigs sets for such rules (a sketch and a bound
// on a team's keys for the composite key), the rest limit.Config's defaults, which are the
// gate's environment defaults; config cannot be imported here (it imports this package).
// The ratio of their
// CPU per record is the gate's CPU a per-user rule costs under identity rotation
// (rotation_whole_gate_cpu_vs_team_rule in make bench); BenchmarkRotation measures the
// limiters and the tick alone.
func BenchmarkRotationGate(b *testing.B) {
	k, r, _ := startE2EBroker(b, false)
	runEndToEnd(b, []string{"rotation-team-rule", "rotation-user-rule"}, e2ePin{}, func(b *testing.B, mode string) *benchEnv {
		e := newBrokerBenchEnvOf(b, k, mode, b.N, rotationRecords).with(r)
		e.rules = func(b *testing.B, e *benchEnv, reg prometheus.Registerer) (*route.Router, []tick.Limit) {
			return rotationRules(b, e, reg, mode == "rotation-user-rule")
		}
		return e
	})
}

// rotationRecords are n JSON events of the rotation load, about 200 bytes each, on topic,
// in chunks of 10,000: one in five the rotating team's with an id never seen before, the
// others a team by Zipf(1.1) over 100,000 and one of its 50 users.
func rotationRecords(topic string, n int, each func([]*kgo.Record)) {
	rng := rand.New(rand.NewPCG(7, 11))
	z := rand.NewZipf(rng, 1.1, 1, 99_999)
	const chunk = 10_000
	for lo := 0; lo < n; lo += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := lo; i < min(lo+chunk, n); i++ {
			team, user := fmt.Sprintf("team-%d", z.Uint64()), fmt.Sprintf("user-%d", rng.IntN(50))
			if i%5 == 0 {
				team, user = "team-rotating", fmt.Sprintf("id-%d", i)
			}
			v := fmt.Appendf(nil, `{"team_id":%q,"event":"$pageview","distinct_id":%q,"properties":{"$current_url":"https://example.com/a/b","$browser":"Firefox","seq":%d}}`, team, user, i)
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: v})
		}
		each(recs)
	}
}

// rotationRules is BenchmarkRotationGate's router and tick limits: the team rule, after
// the per-user rule when perUser.
func rotationRules(b *testing.B, e *benchEnv, reg prometheus.Registerer, perUser bool) (*route.Router, []tick.Limit) {
	newLimiter := func(rule string, c limit.Config) *limit.Limiter {
		// As the gate registers a rule's limits (internal/gate): labelled by rule and limit.
		l, err := limit.New(c, nil, prometheus.WrapRegistererWith(prometheus.Labels{"rule": rule, "limit": c.Window.String()}, reg))
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	key := func(s string) route.KeyFrom {
		k, err := route.ParseKeyFrom(s)
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	team := newLimiter("team", limit.Config{Window: time.Minute, Threshold: 300_000})
	rules := []route.Rule{{Name: "team", Key: key("json:team_id"), Limiters: []*limit.Limiter{team}, Action: route.ActionOverflow}}
	lims := []tick.Limit{{Lim: team, KeyPrefix: "gate:rule:team"}}
	if perUser {
		user := newLimiter("team-user", limit.Config{Window: time.Minute, Threshold: 30_000, SketchWidth: limit.DefaultSketchWidth,
			KeyCardinality: limit.DefaultKeyCardinality, OnCardinality: limit.CardinalityCollapse})
		rules = append([]route.Rule{{Name: "team-user", Key: key("json:team_id+distinct_id"), Limiters: []*limit.Limiter{user}, Action: route.ActionOverflow}}, rules...)
		lims = append([]tick.Limit{{Lim: user, KeyPrefix: "gate:rule:team-user"}}, lims...)
	}
	r, err := route.NewRules(route.Config{AcceptedTopic: e.acc, OverflowTopic: e.ovf, DeadLetterTopic: e.dlq}, rules, reg)
	if err != nil {
		b.Fatal(err)
	}
	return r, lims
}
