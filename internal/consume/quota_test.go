package consume

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestThrottleNearTheSessionTimeoutSaysSo: franz-go sends a broker's requests one after
// another, and waits out a throttle before the next: a produce throttled for longer than
// the group's session timeout held the heartbeats and commits to that broker as long,
// and the group dropped the gate (a reviewer's run on Apache Kafka: throttled 56 s, a
// 45 s session, its 20,000 records routed twice at least once). The warning said
// "routing slows down, nothing is lost". A throttle of half the session timeout or more
// says now that the group may drop the gate, and what that costs in each mode.
func TestThrottleNearTheSessionTimeoutSaysSo(t *testing.T) {
	var logs faulttest.Buffer
	seconds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"broker"})
	h := newQuotaHook(seconds, slog.New(slog.NewTextHandler(&logs, nil)))
	h.setSessionTimeout(45 * time.Second)
	h.OnBrokerThrottle(kgo.BrokerMetadata{NodeID: 1}, 2*time.Second, true)
	if s := logs.String(); !strings.Contains(s, "routing slows down") || strings.Contains(s, "may drop") {
		t.Errorf("a 2 s throttle against a 45 s session: %s", s)
	}
	h.OnBrokerThrottle(kgo.BrokerMetadata{NodeID: 1}, 30*time.Second, true)
	s := logs.String()
	for _, want := range []string{"GATE_KAFKA_SESSION_TIMEOUT", "may drop this gate", "routes again", "producer_byte_rate"} {
		if !strings.Contains(s, want) {
			t.Errorf("a 30 s throttle against a 45 s session, said within the minute of a short one, must say %q: %s", want, s)
		}
	}
}

// noteSession reads the session timeout off the client built.
func TestNoteSessionReadsTheClients(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.SessionTimeout(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := &Consumer{quota: newQuotaHook(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"broker"}), slog.New(slog.DiscardHandler))}
	c.noteSession(cl)
	if got := time.Duration(c.quota.session.Load()); got != 8*time.Second {
		t.Errorf("session timeout noted %v, want 8s", got)
	}
}

// At least once the output is produced through a client apart from the group's
// (producer.go): its throttles, however long, hold none of the group's requests, and
// its hook says so (routing slows down), counting them with the group client's.
func TestProducerThrottleIsNoRiskToTheGroup(t *testing.T) {
	var logs faulttest.Buffer
	seconds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"broker"})
	h := newQuotaHook(seconds, slog.New(slog.NewTextHandler(&logs, nil)))
	h.setSessionTimeout(45 * time.Second)
	h.forProducer().OnBrokerThrottle(kgo.BrokerMetadata{NodeID: 1}, 50*time.Second, true)
	if s := logs.String(); !strings.Contains(s, "routing slows down") || strings.Contains(s, "may drop") {
		t.Errorf("the producer's client throttled 50 s against a 45 s session: %s", s)
	}
	if got := testutil.ToFloat64(seconds.WithLabelValues("1")); got != 50 {
		t.Errorf("throttled seconds counted %v, want 50", got)
	}
}
