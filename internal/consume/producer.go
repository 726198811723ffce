package consume

import "github.com/twmb/franz-go/pkg/kgo"

// At least once, the gate produces through a Kafka client of its own, apart from the
// client of its consumer group (Consumer.prod). franz-go sends a client's requests to a
// broker one after another, and waits out a throttle (KIP-219) before the next: a broker
// throttling the gate's produce for a client quota held the group's heartbeats and
// commits to that broker behind the retried produce, for as long as the throttle, and a
// throttle past the session timeout made the group drop the gate and give its partitions
// to a rebalance, their routed and uncommitted records routed again
// (TestProduceThrottleKeepsTheGroup). Apart, a throttle slows the routing (the producer's
// buffer fills and the gate stops fetching) and nothing else.
//
// Exactly once there is one client: the transaction that writes the output commits the
// input's offsets, through the same producer id (kgo.GroupTransactSession). A throttle
// past the session timeout can still drop the gate there, as can one of the group's own
// requests in either mode (a fetch or request quota); quotaHook warns of those.

// producer is the client the output and outcome rows are produced through: prod at least
// once, cl (the transactional session's) exactly once.
func (c *Consumer) producer() *kgo.Client {
	if c.prod != nil {
		return c.prod
	}
	return c.cl
}

// liveProducer is producer for a goroutine other than the routing loop's: prod at least
// once, else the session's client as published in live (the exactly-once loop replaces
// cl as it rebuilds its session); nil while one is being rebuilt.
func (c *Consumer) liveProducer() *kgo.Client {
	if c.prod != nil {
		return c.prod
	}
	return c.live.Load()
}

// producerOpts are the options of the at-least-once producer's client: the
// configuration's but for the consumer's and the group's (fetching, offsets, the
// session), the output's batch limit, and the hooks that watch produce: franz-go's
// metrics (labelled client="producer"), throttles and acknowledgements.
func (c *Consumer) producerOpts() []kgo.Opt {
	var opts []kgo.Opt
	for _, o := range c.cfg.clientOpts() {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt:
			continue // a client without a group refuses group options
		}
		opts = append(opts, o)
	}
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(func(topic string) int32 { return ClientBatchLimit(c.batchMaxBytes(topic)) }))
	if c.reg != nil {
		opts = append(opts, kpromHooks(c.reg, clientProducer))
	}
	if c.log != nil {
		opts = append(opts, kgoLoggerOpt(c.log.With("kafka_client", clientProducer), c.batchRetried)...) // franz-go's lines say which client
	}
	return append(opts, kgo.WithHooks(c.quota.forProducer(), ackHook{&c.ackAt, c.mono}))
}

// closeProducer closes the at-least-once producer's client, once (closeOf), whoever asks.
func (c *Consumer) closeProducer() {
	if p := c.prod; p != nil {
		c.closeOf(p).do(p.Close)
	}
}
