package consume

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type metrics struct {
	produceErrors *prometheus.CounterVec
	retries       prometheus.Counter
	rerouted      *prometheus.CounterVec
	commitErrors  prometheus.Counter
	commitHeld    prometheus.Gauge
	committed     *prometheus.GaugeVec
	rebalances    *prometheus.CounterVec
	lag           *prometheus.GaugeVec
	fetchErrors   prometheus.Counter
	undeliverable *prometheus.CounterVec
	lost          *prometheus.CounterVec
	recoveries    *prometheus.CounterVec
	// Exactly-once only; exported in both modes, at zero in at-least-once, so the
	// set of metric names does not depend on the mode.
	transactions *prometheus.CounterVec
	txnDuration  prometheus.Histogram
	throttled    *prometheus.CounterVec
	// Outcomes (GATE_OUTCOMES_TOPIC); at zero when off.
	outcomeRows   prometheus.Counter
	outcomeFolded prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, c *Consumer) (*metrics, error) {
	m := &metrics{
		produceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_produce_errors_total",
			Help: "Output records whose produce failed after the client's retries, by output topic and error (Kafka's error name, or the client's own: record_timeout, record_retries, client_closed, canceled, purged for a topic the gate had the client forget, a rule topic found missing or a topic created again, other); each is produced again (never skipped), a missing rule topic's record to the overflow topic.",
		}, []string{"topic", "error"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_produce_retries_total",
			Help: "Produces the gate retried itself after a failed one (at-least-once mode; exactly-once aborts the transaction and replays it instead).",
		}),
		rerouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_records_rerouted_total",
			Help: "Records the broker rejected for good on their output topic, sent to the dead-letter topic (dead_letter) or, when that rejected them too, sent there without their value (dead_letter_stripped).",
		}, []string{"to"}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_commit_errors_total",
			Help: "Offset commits that failed; the next commit covers the same offsets (at-least-once mode; exactly-once commits in its transactions).",
		}),
		commitHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_fetch_held_by_commits",
			Help: "1 while fetching the input is held because offset commits have failed for 2 × GATE_COMMIT_INTERVAL, at least 1 s (at-least-once; a dead group coordinator, say), so that a rebalance replays no more than was fetched before; 0 otherwise.",
		}),
		committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gate_committed_offset",
			Help: "Last input offset committed by this gate, by partition it owns.",
		}, []string{"partition"}),
		outcomeRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_outcome_rows_total",
			Help: "Outcome rows written to GATE_OUTCOMES_TOPIC (one per key, rule, outcome and reason of a seal: a transaction with exactly-once delivery, GATE_OUTCOMES_FLUSH_INTERVAL with at-least-once), counted once acknowledged (at-least-once) or once their transaction committed (exactly-once); seal records and aborted transactions' rows not counted.",
		}),
		outcomeFolded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_outcome_folded_records_total",
			Help: "Records counted in a folded outcome row (no key) because GATE_OUTCOMES_MAX_ROWS rows were held when their key first came in a seal, counted once the row is written (acknowledged at-least-once, its transaction committed exactly-once).",
		}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_rebalances_total",
			Help: "Group rebalance events seen by this gate: assigned, revoked, lost.",
		}, []string{"event"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gate_partition_lag_records",
			Help: "Records in the input partition past the last one routed (high watermark - next offset), by partition this gate owns.",
		}, []string{"partition"}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_fetch_errors_total",
			Help: "Fetch errors the client hands back, not cured by its own retries (a fetch or group refused, a session ended, a connection or login refused), each counted; the gate polls again, and a refusal also makes it not ready.",
		}),
		undeliverable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_records_undeliverable_total",
			Help: "Records refused by every topic (their output topic, then the dead-letter topic with and without their value), by what GATE_ON_UNDELIVERABLE did: stopped (their partition stopped there, the gate not ready) or skipped (committed past, logged with their offset).",
		}, []string{"action"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_records_lost_total",
			Help: "Input records gone before the gate read them, by partition and cause: retention (deleted below the gate's position or the group's committed offset) or broker (the broker lost records it had acknowledged: truncation). Each gap is also logged as an error with its offsets; GATE_ON_DATA_LOSS says whether the partition went on or stopped.",
		}, []string{"topic", "partition", "cause"}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_transaction_recoveries_total",
			Help: "Exactly-once delivery: Kafka clients rebuilt to recover a transaction, by cause: group_churn (the broker aborted a transaction that outlived GATE_TRANSACTION_TIMEOUT while the group rebalanced, or the group's committed offsets could not be re-read after an abort; never counted toward the limit), slow_transaction (it outlived the timeout otherwise and fenced the producer), end_error (ending a transaction failed otherwise, its outcome unknown), or id_unmapped (the brokers no longer map the transactional id to the producer: it expired, unused for transactional.id.expiration.ms, or another instance took it). Five slow_transaction, end_error and id_unmapped within 10 minutes are recovered from; the sixth stops the gate and is not counted. Zero in at-least-once mode.",
		}, []string{"cause"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_transactions_total",
			Help: "Exactly-once delivery: transactions ended, by result (committed; aborted: a rebalance, a failed produce or a commit the brokers refused, and the records are polled and routed again). Zero in at-least-once mode.",
		}, []string{"result"}),
		txnDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gate_transaction_duration_seconds",
			Help: "Exactly-once delivery: time from beginning a transaction to its end (commit or abort), routing and producing its records (the polls of up to GATE_TRANSACTION_INTERVAL). Empty in at-least-once mode.",
			// 1 ms to 17.5 min: past the longest GATE_TRANSACTION_TIMEOUT (15 m), which a
			// slow transaction nears (the runbook compares the two).
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 21),
		}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_broker_throttled_seconds_total",
			Help: "Time brokers throttled the gate's requests, by broker: a client quota (produce or fetch bytes, request time) on the gate's client id or principal. Nothing is lost; routing slows down.",
		}, []string{"broker"}),
	}
	// Every bounded label's series at zero from the start: one born at its first value is
	// no increase to increase() or rate().
	for _, e := range []string{"assigned", "revoked", "lost"} {
		m.rebalances.WithLabelValues(e)
	}
	for _, r := range []string{"committed", "aborted"} {
		m.transactions.WithLabelValues(r)
	}
	for _, a := range []string{"stopped", "skipped"} {
		m.undeliverable.WithLabelValues(a)
	}
	for _, to := range []string{"dead_letter", "dead_letter_stripped"} {
		m.rerouted.WithLabelValues(to)
	}
	for _, r := range []string{"group_churn", "slow_transaction", "end_error", "id_unmapped"} {
		m.recoveries.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.produceErrors, m.retries, m.rerouted, m.commitErrors, m.commitHeld, m.committed, m.rebalances, m.lag, m.fetchErrors,
		m.undeliverable, m.lost, m.recoveries, m.transactions, m.txnDuration, m.throttled, m.outcomeRows, m.outcomeFolded,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gate_retrying_records",
			Help: "Records whose produce failed and is being retried; no new records are polled while it is above zero.",
		}, func() float64 { return float64(c.retry.pending.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gate_retrying_outcome_rows",
			Help: "Outcome rows (at-least-once) whose produce failed and is being retried; no new records are polled while it is above zero.",
		}, func() float64 { return float64(c.rowsRetrying()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gate_inflight_records",
			Help: "Output records handed to the producer and not yet acknowledged by the broker.",
		}, func() float64 { return float64(c.producerBuffered()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gate_stalled_seconds",
			Help: "How long the gate has had work (lag, records in flight or awaiting a retry, offsets it holds fetching to commit) and made no progress (no poll or commit; exactly once, no transaction committed); 0 when it progresses or is idle. /readyz fails past GATE_STALL_NOT_READY, /healthz past GATE_STALL_RESTART.",
		}, func() float64 { return c.Stalled().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			// A gauge, not only the counter gate_records_undeliverable_total: a stop lasts
			// until the partition leaves the gate, and an alert must last as long.
			Name: "gate_partitions_stopped",
			Help: "Input partitions this gate owns and has stopped routing: at a record refused by every topic (GATE_ON_UNDELIVERABLE=stop), at input records lost (GATE_ON_DATA_LOSS=stop), or deleted before its first fetch. Each stays stopped, the gate not ready, until it is revoked or lost (a restart, a rebalance); /readyz says why.",
		}, func() float64 {
			c.partsMu.Lock()
			defer c.partsMu.Unlock()
			n := 0
			for _, p := range c.parts {
				if p.stopped.Load() {
					n++
				}
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gate_owned_partitions",
			Help: "Input partitions this gate owns.",
		}, func() float64 {
			c.partsMu.Lock()
			defer c.partsMu.Unlock()
			return float64(len(c.parts))
		}),
	}
	if c.exactlyOnce() {
		// kprom's two gauges of the producer's buffer, from bufferedHook: kprom's read it
		// under the producer's lock (withoutKpromBuffered keeps them out).
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "gate_kafka_buffered_produce_records_total",
				Help:        "Total number of records buffered within the client ready to be produced",
				ConstLabels: prometheus.Labels{"client": clientGroup}, // as kprom's would have it (kpromHooks)
			}, func() float64 { n, _ := bufferedCounts(c.buffered.Load()); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "gate_kafka_buffered_produce_bytes",
				Help:        "Total number of bytes buffered within the client ready to be produced",
				ConstLabels: prometheus.Labels{"client": clientGroup},
			}, func() float64 { _, n := bufferedCounts(c.buffered.Load()); return float64(n) }),
		)
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("registering consumer metrics: %w", err)
		}
	}
	return m, nil
}

// setLag sets a partition's lag; next < 0 leaves it unchanged (an empty fetch says
// nothing of what was routed).
func (m *metrics) setLag(p int32, hwm, next int64) {
	if next < 0 || hwm < 0 {
		return
	}
	m.lag.WithLabelValues(itoa(p)).Set(float64(max(hwm-next, 0)))
}

// initLost creates the gate_records_lost_total series of the partitions at zero when
// they are assigned, so that a first loss shows as an increase (a series born at its
// first value does not, to increase() or rate()). They stay after a revoke: counters.
func (m *metrics) initLost(topic string, ids []int32) {
	for _, id := range ids {
		for _, cause := range []string{lossRetention, lossBroker} {
			m.lost.WithLabelValues(topic, itoa(id), cause)
		}
	}
}

func (m *metrics) deleteLag(p int32) {
	m.lag.DeleteLabelValues(itoa(p))
	m.committed.DeleteLabelValues(itoa(p))
}

// countRerouted counts a record rerouted to the given stage (see deadLetterRecord).
func (m *metrics) countRerouted(stage int) {
	if stage == 1 {
		m.rerouted.WithLabelValues("dead_letter").Inc()
	} else {
		m.rerouted.WithLabelValues("dead_letter_stripped").Inc()
	}
}

func (m *metrics) produceError(topic string, err error) {
	m.produceErrors.WithLabelValues(topic, errorName(err)).Inc()
}

// errorName is a bounded label for a produce error: Kafka's error name or one of a few
// of the client's own.
func errorName(err error) string {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return ke.Message
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "record_timeout"
	case errors.Is(err, kgo.ErrRecordRetries):
		return "record_retries"
	case errors.Is(err, kgo.ErrClientClosed):
		return "client_closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case err.Error() == errPurgedText:
		return "purged"
	}
	return "other"
}

// errPurgedText is the message of franz-go's error for a record failed by
// PurgeTopicsFromProducing (purgeProducing), which it does not export: a rule topic found
// missing, or an output topic created again. Read by its text, which
// TestRuleTopicFoundMissingFailsItsBufferedRecords pins to the franz-go in go.mod.
const errPurgedText = "topic purged while buffered"

func itoa(p int32) string { return strconv.Itoa(int(p)) }
