package consume

import (
	"log/slog"
	"strconv"
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
// warned about, at most once a minute.
type quotaHook struct {
	seconds *prometheus.CounterVec
	log     *slog.Logger
	every   *throttle.Every
}

var _ kgo.HookBrokerThrottle = (*quotaHook)(nil)

func newQuotaHook(seconds *prometheus.CounterVec, log *slog.Logger) *quotaHook {
	return &quotaHook{seconds: seconds, log: log, every: throttle.NewEvery(throttleLogEvery, nil)}
}

// OnBrokerThrottle is franz-go's hook, called with each response that carries a
// throttle time above zero.
func (h *quotaHook) OnBrokerThrottle(meta kgo.BrokerMetadata, interval time.Duration, _ bool) {
	if interval <= 0 {
		return
	}
	broker := strconv.Itoa(int(meta.NodeID))
	h.seconds.WithLabelValues(broker).Add(interval.Seconds())
	if ok, unlogged := h.every.Allow(); ok {
		h.log.Warn("kafka: a broker is throttling the gate's requests (a client quota on its client id or principal): routing slows down, nothing is lost; raise the quota or add gates if the lag grows",
			"broker", broker, "throttle", interval.String(), "throttles_unlogged", unlogged)
	}
}
