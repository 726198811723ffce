package consume

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/throttle"
)

// throttleLogEvery paces the warning about broker throttling: a quota holds for as long
// as the gate sends faster than it allows, which can be hours.
const throttleLogEvery = time.Minute

// quotaHook makes a broker's throttling of the gate visible. A broker enforcing a
// client quota (produce or fetch bytes, or request time, on the gate's client id or
// principal) answers late, or tells the client to wait, and says for how long; franz-go
// waits as told. Nothing is lost, but the gate routes slower than its input may grow,
// so the time is counted per broker in gate_broker_throttled_seconds_total and
// warned about, at most once a minute. A throttle of half the session timeout or more
// met by the group's client is warned of apart: franz-go waits it out before any
// further request of that client to that broker, the group's heartbeats included, and
// the group may drop the gate. At least once the output is produced through a client of
// its own (producer.go), whose throttles hold none of the group's requests: its hook
// (forProducer) knows no session timeout.
type quotaHook struct {
	seconds *prometheus.CounterVec
	log     *slog.Logger
	every   *throttle.Every
	// risk paces the warning of a throttle near the session timeout (session, set once
	// the client exists; 0: unknown), said even within the minute of a shorter one's.
	risk    *throttle.Every
	session atomic.Int64
	// kip848: the group runs KIP-848's protocol, whose session timeout is the brokers'
	// (setGroupSession), the client's own applying to nothing.
	kip848 atomic.Bool
}

// setSessionTimeout tells h the group's session timeout (the client's): under the
// classic protocol, the one the group applies; under KIP-848's, ignored.
func (h *quotaHook) setSessionTimeout(d time.Duration) {
	if !h.kip848.Load() {
		h.session.Store(int64(d))
	}
}

// setGroupSession tells h the group runs KIP-848's protocol, under which the brokers set
// the session timeout, d (groupSessionTimeout), and no client's option does: a rebuilt
// client's setSessionTimeout then changes nothing.
func (h *quotaHook) setGroupSession(d time.Duration) {
	h.kip848.Store(true)
	h.session.Store(int64(d))
}

// forProducer is h for the at-least-once producer's client: its throttles counted and
// warned of with the group client's, at one pace, never as a risk to the group.
func (h *quotaHook) forProducer() *quotaHook {
	return &quotaHook{seconds: h.seconds, log: h.log, every: h.every, risk: h.risk}
}

var _ kgo.HookBrokerThrottle = (*quotaHook)(nil)

func newQuotaHook(seconds *prometheus.CounterVec, log *slog.Logger) *quotaHook {
	return &quotaHook{seconds: seconds, log: log, every: throttle.NewEvery(throttleLogEvery, nil), risk: throttle.NewEvery(throttleLogEvery, nil)}
}

// OnBrokerThrottle is franz-go's hook, called with each response that carries a
// throttle time above zero.
func (h *quotaHook) OnBrokerThrottle(meta kgo.BrokerMetadata, interval time.Duration, _ bool) {
	if interval <= 0 {
		return
	}
	broker := strconv.Itoa(int(meta.NodeID))
	h.seconds.WithLabelValues(broker).Add(interval.Seconds())
	if session := time.Duration(h.session.Load()); session > 0 && interval >= session/2 {
		// franz-go sends a client's requests to a broker one after another and waits out
		// a throttle before the next: the heartbeats and commits to that broker wait as
		// long.
		setting := "GATE_KAFKA_SESSION_TIMEOUT"
		if h.kip848.Load() {
			setting = "the group's session timeout (KIP-848: the group's consumer.session.timeout.ms, else the brokers' group.consumer.session.timeout.ms; not GATE_KAFKA_SESSION_TIMEOUT)"
		}
		if ok, unlogged := h.risk.Allow(); ok {
			h.log.Warn("kafka: a broker throttles the gate's group client (a client quota on its client id or principal) for half "+setting+" or more: "+
				"the client holds every request to that broker meanwhile, heartbeats and commits too, so the group may drop this gate and give its partitions to another, "+
				"which routes again what this gate routed and had not committed (at least once: written twice; exactly once, where it produces too: its transaction aborts); "+
				"raise the quota (producer_byte_rate exactly once, consumer_byte_rate or request_percentage) or add gates",
				"broker", broker, "throttle", interval.String(), "session_timeout", session.String(), "throttles_unlogged", unlogged)
		}
		return
	}
	if ok, unlogged := h.every.Allow(); ok {
		h.log.Warn("kafka: a broker is throttling the gate's requests (a client quota on its client id or principal): routing slows down, nothing is lost; raise the quota or add gates if the lag grows",
			"broker", broker, "throttle", interval.String(), "throttles_unlogged", unlogged)
	}
}
