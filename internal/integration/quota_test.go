package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestProduceQuota: a produce quota on the gate's client id (a client-quota entity set
// with AlterClientQuotas) makes the broker throttle the gate. kfake enforces no quota.
// The throttling shows in gate_broker_throttled_seconds_total and a warning line, and
// every record is routed once all the same, without the group taking the gate's
// partitions. (The group dropping a gate whose produce is throttled past its session
// timeout is internal/consume's TestProduceThrottleKeepsTheGroup: this backlog draws
// throttles of seconds on Apache Kafka, which no session timeout the brokers allow is
// shorter than for sure.)
func TestProduceQuota(t *testing.T) {
	t.Parallel()
	// A broker of its own: throttled requests wait on the broker, and the shared one
	// serves the other tests' groups meanwhile.
	s := newScenario(t, kafkaOpts{own: true}, 3, 3)
	clientID := s.n.Group + "-gate"
	res, err := s.k.Admin.AlterClientQuotas(t.Context(), []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &clientID}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 32 << 10}},
	}})
	if err := allOK(res, err, func(r kadm.AlteredClientQuota) error { return r.Err }); err != nil {
		t.Fatalf("setting the produce quota: %v", err)
	}
	// The brokers apply a quota once its record reaches them through the metadata log.
	faulttest.WaitFor(t, time.Minute, "the quota described", func() bool {
		d, err := s.k.Admin.DescribeClientQuotas(t.Context(), true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &clientID, MatchType: 0}})
		return err == nil && len(d) == 1
	})
	// About 700 KiB as the gate produces it (its batches compressed, so each record's
	// padding is its own): several seconds
	// past what a broker lets through in its 10-second quota window at 32 KiB/s.
	var recs []*kgo.Record
	for i := range 1500 {
		recs = append(recs, &kgo.Record{Topic: s.n.In, Key: []byte(strconv.Itoa(i % 16)),
			Value:   fmt.Appendf(nil, `{"team_id":"team-%d","seq":%d,"pad":%q}`, i%10, i, incompressible(512)),
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(i))}}})
	}
	produce(t, s.k, recs...)
	// The default session timeout, not the suite's 8 s (faulttest.SessionTimeout, for tests
	// that kill gates): nothing is killed here. With one client for the group and the
	// output, a loaded machine once had the member go 8.7 s without a heartbeat reaching
	// the coordinator (queued behind a throttled produce), removed, and every record
	// routed twice.
	g := faulttest.StartGate(t, s.bin, "quota", gateVarsFor(s, "GATE_KAFKA_CLIENT_ID", clientID, "GATE_KAFKA_SESSION_TIMEOUT", "45s"))
	s.waitDrained()
	_, m := g.Get(t, "/metrics")
	for _, ev := range []string{"revoked", "lost"} {
		if n := metricValue(m, "gate_rebalances_total", `event="`+ev+`"`); n != 0 {
			t.Errorf("the group took the gate's partitions under the throttle: %v %s", n, ev)
		}
	}
	var throttled float64
	faulttest.WaitFor(t, time.Minute, "gate_broker_throttled_seconds_total > 0 under a 32 KiB/s quota", func() bool {
		_, m := g.Get(t, "/metrics")
		throttled = metricSum(m, "gate_broker_throttled_seconds_total")
		return throttled > 0
	})
	if !strings.Contains(g.Logs(), "a broker is throttling the gate's requests") {
		t.Errorf("no warning line about the throttling")
	}
	rep := s.check(nil)
	t.Logf("FIGURES real_kafka_quota in=%d out=%d lost=%d duplicated=%d throttled_s=%.1f", rep.Inputs, rep.Outputs, len(rep.Lost), rep.Extra, throttled)
	if !rep.OK() || rep.Inputs != len(recs) {
		t.Errorf("under the quota: %s; want every input once", rep)
	}
	g.Term(t, time.Minute)
}
