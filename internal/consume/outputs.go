package consume

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The output watch: franz-go retries a produce the brokers refuse with a retriable
// error (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER while no leader is elected) for as
// long as it takes, which is right (nothing is lost or reordered), and tells the gate
// nothing meanwhile. Records then wait unacknowledged, and the gate would only say, two
// minutes later, that it makes no progress. So when output records have waited two
// watch intervals unacknowledged (outputsStuck), the gate asks the cluster why: an
// output partition without a leader, or with fewer in-sync replicas than its
// min.insync.replicas, is named in /readyz and an error line (not ready: an operator
// must bring a broker back). The problem clears, with a line, once no record has waited
// that long. Nothing is dead-lettered for it: it is the cluster's state, not
// the record's.
const (
	// DefaultWatchInterval is Config.WatchInterval's default.
	DefaultWatchInterval = 5 * time.Second
	// watchRequestTimeout bounds each of the watch's requests to the cluster: a
	// deadline, not an interval, and so not shortened with Config.WatchInterval (a
	// loaded broker's answer is no less slow for a shorter watch).
	watchRequestTimeout = 5 * time.Second
	problemOutputs      = "outputs/"
)

// ackHook notes when the brokers last acknowledged a batch of output records.
type ackHook struct {
	at   *atomic.Int64 // a mono reading
	mono mono
}

var _ kgo.HookProduceBatchWritten = ackHook{}

func (h ackHook) OnProduceBatchWritten(kgo.BrokerMetadata, string, int32, kgo.ProduceBatchMetrics) {
	h.at.Store(h.mono.now())
}

// bufferedHook counts the records handed to the client whose promise has not run, and
// their bytes, as BufferedProduceRecords and BufferedProduceBytes do (the records buffered
// and those blocked on a full buffer; a record's bytes its key's, value's and headers'),
// but without the producer's lock: franz-go holds that lock while a transaction's Begin
// (or an aborting End) gets a producer ID, retrying for up to the client's retry timeout
// (30 s) while the transaction coordinator is unavailable, and /readyz, /healthz
// (watchdog.go) and /metrics read the counts. Every client of the consumer counts into
// the one count: a closed client fails, and so unbuffers, what it still held. Records and
// bytes share one word (records << bufferedRecordShift + bytes: one atomic add a record
// each way), the bytes well under 2^40 (GATE_MAX_BUFFERED_BYTES).
type bufferedHook struct{ n *atomic.Int64 }

const bufferedRecordShift = 40

var (
	_ kgo.HookProduceRecordBuffered   = bufferedHook{}
	_ kgo.HookProduceRecordUnbuffered = bufferedHook{}
)

func (h bufferedHook) OnProduceRecordBuffered(r *kgo.Record) {
	h.n.Add(1<<bufferedRecordShift + recordBytes(r))
}

func (h bufferedHook) OnProduceRecordUnbuffered(r *kgo.Record, _ error) {
	h.n.Add(-(1<<bufferedRecordShift + recordBytes(r)))
}

// recordBytes is r's size as the client's buffer counts it.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// bufferedCounts splits bufferedHook's word into records and bytes.
func bufferedCounts(v int64) (records, bytes int64) {
	return v >> bufferedRecordShift, v & (1<<bufferedRecordShift - 1)
}

// kpromBufferedProduce names kprom's two gauges of the producer's buffer, which read it
// under the producer's lock: exactly once, the consumer serves them itself from
// bufferedHook (metrics.go) and keeps kprom's from its registry (withoutKpromBuffered),
// so that a scrape during a long Begin does not hang, and Prometheus see the gate down.
var kpromBufferedProduce = []string{"gate_kafka_buffered_produce_records_total", "gate_kafka_buffered_produce_bytes"}

// withoutKpromBuffered is a Registerer that registers everything but kprom's gauges of
// the producer's buffer (kpromBufferedProduce).
type withoutKpromBuffered struct{ prometheus.Registerer }

func (r withoutKpromBuffered) Register(c prometheus.Collector) error {
	if isKpromBuffered(c) {
		return nil
	}
	return r.Registerer.Register(c)
}

// Unregister leaves kprom's gauges of the producer's buffer alone as Register does: kprom
// unregisters them when its client closes, and the registry, which knows a collector by
// its metrics' names, would take the consumer's own of the same names out.
func (r withoutKpromBuffered) Unregister(c prometheus.Collector) bool {
	if isKpromBuffered(c) {
		return false
	}
	return r.Registerer.Unregister(c)
}

// isKpromBuffered reports whether c describes one of kpromBufferedProduce.
func isKpromBuffered(c prometheus.Collector) bool {
	ch := make(chan *prometheus.Desc, 8)
	go func() { c.Describe(ch); close(ch) }()
	skip := false
	for d := range ch {
		for _, name := range kpromBufferedProduce {
			if strings.Contains(d.String(), `fqName: "`+name+`"`) {
				skip = true
			}
		}
	}
	return skip
}

func (r withoutKpromBuffered) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// watchOutputs runs the output watch until ctx ends.
func (c *Consumer) watchOutputs(ctx context.Context) {
	c.ackAt.Store(c.mono.now())
	t := time.NewTicker(c.cfg.WatchInterval)
	defer t.Stop()
	limits := time.NewTicker(c.cfg.TopicConfigInterval)
	defer limits.Stop()
	reread := func() {
		if cl := c.live.Load(); cl != nil && c.preflighted.Load() {
			// After the preflight, which read them first.
			rctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
			c.rereadBatchLimits(rctx, cl)
			cancel()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-limits.C:
			reread()
			continue
		case <-c.rereadTopics:
			reread()
			continue
		case <-c.checkRules:
			if cl := c.live.Load(); cl != nil && c.preflighted.Load() {
				c.checkRuleTopics(ctx, cl)
			}
			continue
		case <-t.C:
		}
		cl := c.live.Load()
		if cl == nil {
			continue // an exactly-once session being rebuilt: no round
		}
		c.watchRound(ctx, cl)
		if c.watched != nil {
			c.watched()
		}
	}
}

// watchRound is one round of the output watch with client cl.
func (c *Consumer) watchRound(ctx context.Context, cl *kgo.Client) {
	c.purgeStale(ctx, cl)
	if c.preflighted.Load() {
		// Before, the preflight reports a missing rule topic: nothing is routed yet.
		c.checkRuleTopics(ctx, cl)
		actx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
		c.checkAdded(actx, cl)
		cancel()
		actx, cancel = context.WithTimeout(ctx, watchRequestTimeout)
		c.checkInputIdentity(actx, cl)
		cancel()
	}
	if c.exactlyOnce() {
		c.checkUnstable(ctx, cl, time.Now())
	}
	c.refreshLag(ctx, cl)
	// The records failed back to the gate wait too (GATE_PRODUCE_RETRIES set, the client
	// gives up on NOT_ENOUGH_REPLICAS): out of the client's buffer for most of the gate's
	// backoff, counted alone they cleared the problem at every round that fell in one.
	waiting := c.producerBuffered() + c.retry.pending.Load() + c.rowsRetrying()
	if waiting == 0 || !c.outputsStuck() {
		if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, problemOutputs) }) {
			c.log.Info("kafka: output partitions take writes again")
		}
		return
	}
	found, err := c.diagnoseOutputs(ctx, cl)
	if err != nil {
		c.log.Debug("kafka: could not ask the cluster why output records wait", "err", err)
		return
	}
	if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, problemOutputs) && found[k] == "" }) && len(found) == 0 {
		// Records still wait, but the cluster no longer says why: it has recovered
		// and the client's retries are on their way.
		c.log.Info("kafka: output partitions take writes again")
	}
	for _, k := range slices.Sorted(maps.Keys(found)) {
		c.logProblem(ctx, k, found[k], "records_waiting", waiting)
	}
}

// outputsStuck reports whether output records have waited stuckAfter unacknowledged:
// none acknowledged for that long, or, at least once, a poll's records routed that long
// ago still waiting. One output partition refused (no leader, too few in-sync replicas)
// while the others take writes keeps the acknowledgements coming: asked about those
// alone, the watch said nothing until the producer's buffer filled with that partition's
// records, up to GATE_MAX_BUFFERED_RECORDS later. Exactly once, the transaction's end
// waits for every record, so that acknowledgements stop.
func (c *Consumer) outputsStuck() bool {
	after := c.stuckAfter()
	if c.mono.since(c.ackAt.Load()) >= after {
		return true
	}
	oldest := c.oldestWaiting()
	return oldest > 0 && c.mono.since(oldest) >= after
}

// stuckAfter is how long output records wait unacknowledged before the watch asks the
// cluster why: two watch intervals (10 s by default), far above a loaded broker's
// acknowledgement.
func (c *Consumer) stuckAfter() time.Duration { return 2 * c.cfg.WatchInterval }

// oldestWaiting returns when the poll of the oldest records routed and not yet
// acknowledged began (a mono reading), 0 when none waits; a stopped partition's are left
// out, as its stopping record is never acknowledged.
func (c *Consumer) oldestWaiting() int64 {
	var oldest int64
	for _, p := range c.snapshot(nil) {
		if p.stopped.Load() {
			continue
		}
		if at := p.oldestWaiting(); at > 0 && (oldest == 0 || at < oldest) {
			oldest = at
		}
	}
	return oldest
}

// staleTopics is a set of topic names, safe for concurrent use.
type staleTopics struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *staleTopics) add(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]struct{}{}
	}
	s.m[topic] = struct{}{}
}

func (s *staleTopics) remove(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, topic)
}

func (s *staleTopics) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.m))
}

// purgeStale purges from cl the output topics a produce to failed with UNKNOWN_TOPIC_ID
// that exist and take the gate's writes: franz-go keeps a topic's ID for as long as it
// holds the topic, and fails every produce to one deleted and created again (an operator
// resetting it) with UNKNOWN_TOPIC_ID until it is purged, so the records routed to it
// would be retried, and the commits held, for ever. Purged, the client learns the topic
// anew; its records still buffered fail and are retried (at-least-once) or their
// transaction aborts and is replayed (exactly-once), as for any produce error, and its
// max.message.bytes is read again. A topic still missing stays marked until it is
// created again. Rule topics are purged by checkRuleTopics.
func (c *Consumer) purgeStale(ctx context.Context, cl *kgo.Client) {
	topics := c.stale.list()
	if len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
	defer cancel()
	found, unasked, _, err := c.topicProblems(ctx, cl, topics)
	if err != nil {
		c.log.Debug("kafka: could not check the output topics failing with UNKNOWN_TOPIC_ID", "err", err)
		return
	}
	for _, t := range topics {
		if found[t] != "" || unasked[t] {
			continue
		}
		c.stale.remove(t)
		c.relearnTopic(ctx, cl, t)
		c.log.Info("kafka: output topic fails with UNKNOWN_TOPIC_ID and exists: created again; the client learns it anew", "topic", t)
	}
}

// relearnTopic has cl learn topic t, deleted and created again, anew: purged, so that
// its produces stop failing with the old topic's ID, and its max.message.bytes read again
// before its next record, when the client asks for it. Kept, the old limit made the client
// refuse (MESSAGE_TOO_LARGE) and the gate dead-letter records the new topic takes, or,
// smaller, had every full batch refused.
func (c *Consumer) relearnTopic(ctx context.Context, cl *kgo.Client, t string) {
	c.purgeProducing(cl, t)
	c.batchLimits.forget(t)
	c.readBatchLimits(ctx, cl, []string{t})
}

// purgeProducing has the client that produces to topic t forget it, failing the records
// of it it holds ("topic purged while buffered"): at least once the producer
// (producer.go), the group's client producing nothing; with exactly-once delivery cl, the
// session's client (between two sessions the closed one: the purge does nothing).
func (c *Consumer) purgeProducing(cl *kgo.Client, t string) {
	switch {
	case c.prod != nil:
		c.prod.PurgeTopicsFromProducing(t)
	case cl != nil:
		cl.PurgeTopicsFromProducing(t)
	}
}

// diagnoseOutputs returns, by problems key, what keeps the output topics, and the rule
// topics in use (whose records wait as theirs do), from taking writes: partitions
// without a leader, and partitions with fewer in-sync replicas than their topic's
// min.insync.replicas (where the gate may read it; otherwise only the leaderless ones
// are found).
func (c *Consumer) diagnoseOutputs(ctx context.Context, cl *kgo.Client) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topics := c.writtenTopics()
	resp, err := topicsMetadata(ctx, cl, topics)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	minISR := c.minInsync(ctx, cl, topics)
	found := map[string]string{}
	for _, t := range resp.Topics {
		if t.Topic == nil || kerr.ErrorForCode(t.ErrorCode) != nil {
			continue
		}
		topic := *t.Topic
		var leaderless, short, few []string
		isr := -1      // the fewest in-sync replicas among short
		replicas := -1 // the fewest replicas among few
		for _, p := range t.Partitions {
			id := strconv.Itoa(int(p.Partition))
			switch {
			case p.Leader < 0:
				leaderless = append(leaderless, id)
			case minISR[topic] > 0 && len(p.Replicas) < minISR[topic]:
				// Fewer replicas than min.insync.replicas: no broker coming back lets a
				// write through, only a change of the topic does.
				few = append(few, id)
				if replicas < 0 || len(p.Replicas) < replicas {
					replicas = len(p.Replicas)
				}
			case minISR[topic] > 0 && len(p.ISR) < minISR[topic]:
				short = append(short, id)
				if isr < 0 || len(p.ISR) < isr {
					isr = len(p.ISR)
				}
			}
		}
		if len(leaderless) > 0 {
			found[problemOutputs+topic+"/leader"] = fmt.Sprintf("kafka: output topic %q: partitions %s have no leader (the brokers holding their replicas are down); "+
				"their records wait and are retried, nothing is committed past them", topic, strings.Join(leaderless, ","))
		}
		if len(short) > 0 {
			found[problemOutputs+topic+"/isr"] = fmt.Sprintf("kafka: output topic %q: partitions %s have as few as %d in-sync replica(s), fewer than its min.insync.replicas %d, "+
				"so the brokers refuse acks=all writes (NOT_ENOUGH_REPLICAS) until a replica is back; their records wait and are retried, nothing is committed past them",
				topic, strings.Join(short, ","), isr, minISR[topic])
		}
		if len(few) > 0 {
			found[problemOutputs+topic+"/replicas"] = fmt.Sprintf("kafka: output topic %q: partitions %s have only %d replica(s), fewer than its min.insync.replicas %d, "+
				"so the brokers refuse every acks=all write (NOT_ENOUGH_REPLICAS) whatever brokers are up: lower the topic's min.insync.replicas or add replicas; "+
				"their records wait and are retried, nothing is committed past them",
				topic, strings.Join(few, ","), replicas, minISR[topic])
		}
	}
	// Errors the metadata gives no reason for, seen in the brokers' answers.
	maps.Copy(found, c.retriedProblems(found))
	return found, nil
}

// writtenTopics are the output topics and the rule topics in use (not those marked
// missing: checkRuleTopics watches them, and their records go to overflow meanwhile).
func (c *Consumer) writtenTopics() []string {
	// The rule topics the gate started with are in OutputTopics too (for the preflight):
	// taken from the watch instead, so that one a reload dropped, or one marked missing,
	// is left out as any other rule topic is (a review: a retired one's changed
	// max.message.bytes was warned of, with advice to restart the gates).
	topics := slices.DeleteFunc(slices.Clone(c.cfg.OutputTopics), func(t string) bool { return slices.Contains(c.startRuleTopics, t) })
	if w := c.cfg.RuleTopics; w != nil {
		for _, t := range w.Topics() {
			if !w.Missing(t) && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	return topics
}

// minInsync reads the min.insync.replicas of topics; a topic the gate may not describe
// (DESCRIBE_CONFIGS) is left out.
func (c *Consumer) minInsync(ctx context.Context, cl *kgo.Client, topics []string) map[string]int {
	out := map[string]int{}
	ns, _, _ := topicConfig(ctx, cl, topics, "min.insync.replicas")
	for t, n := range ns {
		out[t] = int(n)
	}
	return out
}

// topicConfig reads the integer setting name of topics (DESCRIBE_CONFIGS): each topic's
// value, each topic the broker would not describe with why (refused, unknown), and the
// request's own error. A value that is not a number is left out.
func topicConfig(ctx context.Context, cl *kgo.Client, topics []string, name string) (map[string]int64, map[string]error, error) {
	settings, errs, err := topicSettings(ctx, cl, topics, name)
	if err != nil || settings == nil {
		return nil, errs, err
	}
	return intSetting(settings, name), errs, nil
}

// intSetting returns the integer setting name of each topic of settings (topicSettings);
// a value that is not a number is left out.
func intSetting(settings map[string]map[string]string, name string) map[string]int64 {
	vals := map[string]int64{}
	for t, s := range settings {
		if v, ok := s[name]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				vals[t] = n
			}
		}
	}
	return vals
}

// topicSettings reads the settings names of topics in one request (DESCRIBE_CONFIGS):
// each described topic's values by name, each topic the broker would not describe with
// why (refused, unknown), and the request's own error.
func topicSettings(ctx context.Context, cl *kgo.Client, topics []string, names ...string) (map[string]map[string]string, map[string]error, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = t
		r.ConfigNames = names
		req.Resources = append(req.Resources, r)
	}
	if len(req.Resources) == 0 {
		return nil, nil, nil
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	vals, errs := map[string]map[string]string{}, map[string]error{}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			errs[r.ResourceName] = err
			continue
		}
		vals[r.ResourceName] = map[string]string{}
		for _, cfg := range r.Configs {
			if cfg.Value != nil && slices.Contains(names, cfg.Name) {
				vals[r.ResourceName][cfg.Name] = *cfg.Value
			}
		}
	}
	return vals, errs, nil
}
