package consume

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/route"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxPollRecords     = 10_000
	DefaultCommitInterval     = time.Second
	DefaultProduceRetries     = 0 // the client retries until the record is written: see ProduceRetries
	DefaultMaxBufferedRecords = 50_000
	DefaultMaxBufferedBytes   = 256 << 20
	DefaultMaxMessageBytes    = 1_048_588 // Kafka's own default message.max.bytes
	DefaultRevokeTimeout      = 10 * time.Second
	DefaultShutdownTimeout    = 20 * time.Second
	DefaultTransactionTimeout = 90 * time.Second // above franz-go's and Kafka's default rebalance timeout, 60 s
	// DefaultTransactionInterval and DefaultTransactionMaxRecords bound how long a
	// transaction stays open and how many records it routes (see TransactionInterval).
	DefaultTransactionInterval   = 100 * time.Millisecond
	DefaultTransactionMaxRecords = 500_000
	// DefaultOutcomesInterval and DefaultOutcomesMaxRows: see Config.OutcomesInterval.
	// 100,000 rows are about 20 MB.
	DefaultOutcomesInterval = time.Minute
	DefaultOutcomesMaxRows  = 100_000
	// DefaultOutcomesFlushInterval is the gate's GATE_OUTCOMES_FLUSH_INTERVAL: see
	// Config.OutcomesFlushInterval.
	DefaultOutcomesFlushInterval = 10 * time.Second

	// Records whose produce failed are produced again after a backoff whose cap grows
	// from retryMinBackoff to retryMaxBackoff: long enough not to hammer a failing
	// broker, short enough to resume within seconds once it is back. The delay itself is
	// drawn uniformly from [0, cap] (full jitter), so that a fleet of gates does not
	// retry in lockstep after a broker blip.
	retryMinBackoff = 100 * time.Millisecond
	retryMaxBackoff = 5 * time.Second
)

// Delivery is the guarantee the gate gives readers of its output topics.
type Delivery int

const (
	// AtLeastOnce commits input offsets behind acknowledged output: a crash or a
	// produce that fails ambiguously can write a record twice, never lose one.
	AtLeastOnce Delivery = iota
	// ExactlyOnce produces the output of its polls and commits their input offsets in
	// Kafka transactions, one spanning polls up to Config.TransactionInterval and
	// Config.TransactionMaxRecords: consumers reading the output topics with
	// read_committed see every input record once. Ending a transaction costs two
	// round trips, spread over its polls. It needs a transactional id per instance
	// (Config.TransactionalID).
	ExactlyOnce
)

// ParseDelivery reads a Delivery from its name: "at-least-once" or "exactly-once".
func ParseDelivery(s string) (Delivery, error) {
	switch s {
	case "at-least-once":
		return AtLeastOnce, nil
	case "exactly-once":
		return ExactlyOnce, nil
	}
	return AtLeastOnce, fmt.Errorf("delivery %q: want at-least-once or exactly-once", s)
}

// String returns the name ParseDelivery reads.
func (d Delivery) String() string {
	switch d {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return "Delivery(" + strconv.Itoa(int(d)) + ")"
}

// StartOffset is where a consumer group starts reading a partition it has no committed
// offset for.
type StartOffset int

const (
	// StartEarliest starts at the oldest record the partition still holds: a new group
	// routes what was written before it existed. franz-go's default.
	StartEarliest StartOffset = iota
	// StartLatest starts at the partition's end when the group is first assigned it: a
	// new group routes only what is written from then on, the gate committing that
	// start at the assignment (latest.go), so that a partition that moves, or whose
	// gate stops, before it was read keeps it. A partition added to the topic
	// while gates run is read from its start (added.go): every record in it was
	// written since.
	StartLatest
)

// String returns the name the gate's configuration uses: earliest or latest.
func (s StartOffset) String() string {
	switch s {
	case StartEarliest:
		return "earliest"
	case StartLatest:
		return "latest"
	}
	return "StartOffset(" + strconv.Itoa(int(s)) + ")"
}

// GroupProtocol is the consumer group protocol the gate asks the brokers for.
type GroupProtocol int

const (
	// GroupClassic is the classic protocol (JoinGroup/SyncGroup, KIP-429 cooperative
	// rebalances): the members assign partitions among themselves (cooperative-sticky).
	// Every Kafka broker speaks it; the session timeout is the gate's
	// (GATE_KAFKA_SESSION_TIMEOUT). The default: franz-go 1.22 runs KIP-848 only when
	// asked, and recommends it only against Kafka 4.3 or later.
	GroupClassic GroupProtocol = iota
	// GroupConsumer is KIP-848's protocol (Kafka's group.protocol=consumer): the broker
	// assigns partitions and members reconcile through heartbeats, with no group-wide
	// stop; a member joining or leaving moves only the partitions that change owner.
	// The session timeout and heartbeat interval are then the broker's
	// (group.consumer.session.timeout.ms, 45 s by default), not the gate's. A broker
	// that does not offer it (before 4.0, or with it turned off) gets the classic
	// protocol, and the gate logs that it fell back.
	GroupConsumer
)

// ParseGroupProtocol reads a GroupProtocol from Kafka's own names for it: "classic" or
// "consumer".
func ParseGroupProtocol(s string) (GroupProtocol, error) {
	switch s {
	case "classic":
		return GroupClassic, nil
	case "consumer":
		return GroupConsumer, nil
	}
	return GroupClassic, fmt.Errorf("group protocol %q: want classic or consumer", s)
}

// String returns the name ParseGroupProtocol reads.
func (p GroupProtocol) String() string {
	switch p {
	case GroupClassic:
		return "classic"
	case GroupConsumer:
		return "consumer"
	}
	return "GroupProtocol(" + strconv.Itoa(int(p)) + ")"
}

// Config is the consumer's settings. Zero values take the defaults above.
type Config struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// TLS says the client dials the brokers over TLS (set in ClientOpts): a start-up
	// check that cannot reach them then asks whether they answer in plain text
	// (plainbroker.go).
	TLS bool
	// InputTopic is the topic read; GroupID the consumer group shared by a fleet.
	InputTopic string
	GroupID    string
	// GroupProtocol is the consumer group protocol asked for: GroupClassic, the
	// default, or GroupConsumer (KIP-848).
	GroupProtocol GroupProtocol
	// StartOffset is where the group starts a partition it has no committed offset for
	// (a new group, or a partition new to it): StartEarliest, the default, or
	// StartLatest. It sets franz-go's ConsumeStartOffset; with StartLatest the gate
	// commits such a partition's end at its assignment (commitLatestStarts), and should
	// that fail, with exactly-once it commits where it starts the partition before
	// producing its first records (commitTxnStarts), so that a transaction aborted
	// before the group's first commit of it is replayed from there by its next owner.
	//
	// Where a partition resumes on OFFSET_OUT_OF_RANGE is not decided here, nor by
	// franz-go: the gate sets ConsumeResetOffset(NoResetOffset()), so that an
	// out-of-range fetch comes back as an error, and decides itself, counting what was
	// lost (see loss.go and OnDataLoss). Kafka's auto.offset.reset sets both offsets
	// at once, and so does ConsumeResetOffset when ConsumeStartOffset is not given:
	// the gate always gives ConsumeStartOffset, so the reset offset never moves where
	// a new group starts.
	StartOffset StartOffset

	// MaxPollRecords bounds the records routed per poll, and so how long a rebalance
	// can be held waiting for a poll's records to be handed to the producer.
	MaxPollRecords int
	// CommitInterval is how often acknowledged offsets are committed: a crash replays at
	// most this much traffic (plus what was in flight). Commits also happen on revoke
	// and at shutdown.
	CommitInterval time.Duration
	// CommitHoldAfter is how long interval commits may fail (at-least-once) before the
	// gate stops fetching new input until one succeeds (commithold.go); zero is
	// 2 × CommitInterval, at least minCommitHoldAfter. It bounds what a rebalance after
	// a group coordinator's death replays: what was fetched before the hold, not
	// everything routed while commits failed.
	CommitHoldAfter time.Duration
	// ProduceRetries bounds how often the client retries a record a broker failed with
	// a retriable error before reporting it failed; the gate then logs and counts it
	// and produces it again after a backoff. 0, the default, sets no bound: the
	// idempotent producer retries in order until the record is written, which is the
	// only way to keep one key's records in order through any run of broker errors
	// (franz-go, failing a partition's batch after its retries, can write a later
	// batch of the partition first: a bound can reorder a key's records). A broker
	// failing that long shows as a stall (see watchdog.go), and shutdown still fails
	// what is buffered once its timeout has passed. Errors no retry cures (a record
	// refused, a topic missing, a permission lacking) are reported at once either way.
	// (A time bound is not usable: franz-go measures a record's delivery timeout from
	// the record's timestamp, which the gate keeps from the input, so an old record
	// would time out at once.)
	ProduceRetries int
	// MaxBufferedRecords and MaxBufferedBytes bound the records waiting for the
	// broker's acknowledgement; routing blocks when either is reached.
	MaxBufferedRecords int
	MaxBufferedBytes   int
	// MaxMessageBytes is the largest record batch the producer sends, as the brokers'
	// message.max.bytes; a record larger than it goes to the dead-letter topic. An output
	// topic whose max.message.bytes the preflight read lower gets batches within that
	// (batchlimit.go).
	MaxMessageBytes int32
	// RevokeTimeout bounds how long a revoked partition's in-flight records are awaited
	// before what is acknowledged is committed and the rest abandoned to the new owner
	// (which replays them). It must stay well under the group's rebalance timeout.
	RevokeTimeout time.Duration
	// ShutdownTimeout bounds waiting for in-flight records at shutdown (with
	// ExactlyOnce: ending the open transaction).
	ShutdownTimeout time.Duration
	// OnUndeliverable is what happens to a record refused by every topic: its output
	// topic, and the dead-letter topic with and then without its value (each refusal
	// tried with the record alone, so another record's fault in its batch does not
	// count). UndeliverableStop, the default, stops its partition there and makes the
	// gate not ready; UndeliverableSkip logs it with its offset and commits past it.
	// Never a silent retry: a record can only be refused so by a topic's
	// configuration, which retrying does not change.
	OnUndeliverable Undeliverable
	// OnDataLoss is what happens when records of an input partition are gone before
	// the gate read them: deleted by retention below its position (or below the
	// group's committed offset), or lost by a broker (truncation). Either way the gate
	// logs an error line naming the partition, the offsets and their count, and adds
	// the count to gate_records_lost_total. DataLossContinue, the default, then
	// resumes after the gap and commits past it; DataLossStop stops the partition
	// there and makes the gate not ready. See loss.go.
	OnDataLoss DataLoss
	// OutputTopics are the topics the gate writes (accepted, overflow, dead letter):
	// before consuming, the gate checks that they and InputTopic exist and that it may
	// read and write them (see preflight.go). Empty checks the input topic only.
	OutputTopics []string
	// DeadLetterTopic is the one of OutputTopics dead letters go to: the preflight warns
	// when it is compacted (compactedWarnings). Empty: not checked.
	DeadLetterTopic string
	// KeylessTopics are those of OutputTopics the gate writes records without a key to:
	// the overflow topic unless GATE_OVERFLOW_KEEP_KEY. The rules' own topics, whose
	// records drop the key as overflow ones do, count as keyless when the overflow topic
	// (RuleTopics' fallback) is listed. A compacted one (cleanup.policy compact) refuses
	// every such record, so the preflight reports it (readOutputSettings).
	KeylessTopics []string
	// RuleTopics, if set, is the watch of the rules' own topics (action topic:NAME),
	// shared with the router: a produce to one that fails for want of the topic or the
	// WRITE ACL marks it missing, and the output watch checks each one every few
	// seconds, marking it missing (not ready, the topic named) or back. Its records go
	// to the overflow topic meanwhile, so a missing rule topic holds up no record
	// (ruletopics.go). The topics in use at start belong in OutputTopics too.
	RuleTopics *route.TopicWatch
	// RuleTopicAt, when set, says where the rules in use name a rule topic (FILE:LINE:COL
	// and the field, "" for a topic no rule names): the start-up check's problem of a
	// rule's topic says so, as a reload's does, and the operator finds the rule.
	RuleTopicAt func(topic string) string
	// BeforeRouting, if set, is called once the preflight has passed, before the first
	// poll; nothing is routed until it returns (the gate waits there for its first read of
	// the live overrides, internal/gate). It must return soon after ctx ends.
	BeforeRouting func(ctx context.Context)
	// Prime, if set, is given the records of every partition a poll returns for the first
	// time since it was assigned here (at start, and after each rebalance that brought
	// it), and a sample of its later polls' records (every eighth, at most 256 a poll)
	// until one reaches the end of what it can poll, before any of them is routed: the
	// gate has their keys read from Redis there (route.Router.Expect, then the tick's
	// TickNow), so that a team the fleet holds or has over its limit is limited from the
	// first of its records waiting, not admitted by this gate's own count of them until
	// its next tick. Nothing is routed meanwhile, and at least once a rebalance waits for
	// it (exactly once it goes on, and the open transaction aborts): it should
	// return within about a tick, and soon after ctx ends (at least once a rebalance
	// waiting for the poll ends ctx; exactly once, a revoke or a loss, which aborts the
	// open transaction, or the end of the shutdown's grace).
	Prime func(ctx context.Context, recs []*kgo.Record)
	// StallNotReady is how long the gate may make no progress (no poll or commit; exactly
	// once, no transaction committed) while it has work before it reports not ready
	// (DefaultStallNotReady); StallRestart how long before Live fails, so that
	// Kubernetes restarts it (DefaultStallRestart). Negative disables either. An idle
	// gate, with no lag and nothing in flight, never stalls.
	StallNotReady, StallRestart time.Duration
	// PreflightInterval is how often a failing preflight check is retried
	// (DefaultPreflightInterval).
	PreflightInterval time.Duration
	// TopicConfigInterval is how often the output topics' and the rule topics'
	// max.message.bytes are read again, so that a limit an operator changes is logged
	// with what to do (DefaultTopicConfigInterval).
	TopicConfigInterval time.Duration
	// WatchInterval is how often the gate asks the cluster what its own polls and
	// produces do not tell it: why output records wait (once they have waited two
	// intervals), whether partitions were added to the input, whether the rule topics are
	// there, whether exactly-once offsets stay unstable, and the lag of the partitions no
	// poll has measured for two intervals (DefaultWatchInterval).
	WatchInterval time.Duration
	// Jitter draws each produce-retry delay (and each wait before an aborted
	// transaction's replay): it returns a value in [0, n). Nil is math/rand/v2's
	// Int64N, seeded at random in each process, so that no two gates draw the same
	// delays. Tests set it to make delays predictable.
	Jitter func(n int64) int64

	// Delivery chooses at-least-once (the default) or exactly-once output. With
	// ExactlyOnce, CommitInterval and the gate's own produce retries do not apply, nor
	// RevokeTimeout to a revoke (it still bounds closing the client and leaving the
	// group): the input offsets are committed in the transaction of their
	// records, one transaction spanning polls (up to TransactionInterval and
	// TransactionMaxRecords); a rebalance aborts the open one, and a failed produce
	// aborts it and replays its records, every poll routed into it, from the last
	// commit.
	Delivery Delivery
	// TransactionalID identifies this instance's transactions; required with
	// ExactlyOnce, unused otherwise. It must be unique per instance, so that replicas
	// do not fence each other: of two live instances with one id, the later fences
	// the earlier, whose Run then stops with an error naming the id. (A fence that
	// comes only after a transaction has been open for TransactionTimeout is taken for
	// the broker's own abort of that transaction, and Run recovers from it instead;
	// see TransactionTimeout.) It should also survive a
	// restart (a StatefulSet pod name, not a random one): a restarted instance that
	// keeps its id fences its predecessor's open transaction at once, whereas under
	// a new id that transaction stays open until TransactionTimeout, holding back
	// read_committed readers of the output partitions it wrote to and, if it died
	// while committing, the input partitions' next owner.
	TransactionalID string
	// TransactionTimeout is how long the broker lets a transaction stay open before
	// aborting it: the bound on how long a crashed instance's open transaction
	// holds readers back (see TransactionalID). It should exceed the time a
	// transaction stays open (TransactionInterval, then the time its records still in
	// flight take to produce, client retries included) and the group's session
	// timeout, better its rebalance timeout: ending a transaction waits for a
	// rebalance in progress (franz-go holds the transaction's offset commit while the
	// group joins and syncs), and a join waits for a dead member until its session
	// times out, for a slow one up to the rebalance timeout. The broker aborts a
	// transaction that outlives the timeout and fences its producer; Run then
	// rebuilds its client under the same TransactionalID, as a restart would (the
	// member leaves and rejoins the group, the aborted transaction's records are
	// replayed), and goes on. It does so at most 5 times in 10 minutes: the next such
	// fence stops Run with an error, as a timeout too short for the gate's
	// transactions would otherwise loop for ever. It must stay within the brokers'
	// transaction.max.timeout.ms (15 minutes by default).
	TransactionTimeout time.Duration
	// TransactionInterval is how long a transaction stays open while polls go on
	// routing into it: it ends (its records produced, the input offsets committed with
	// them) at the first poll boundary after TransactionInterval from its first records,
	// when a poll gets no record for a tenth of the interval (the input went quiet),
	// after TransactionMaxRecords records, at a revoke or loss, at a failed produce, or
	// at shutdown. Ending one costs a round trip to the group coordinator and one to
	// the transaction coordinator, and polls wait meanwhile: per poll, that cost halved
	// the throughput on Apache Kafka. Longer makes the records visible to read_committed
	// readers later (by up to the interval) and makes an aborted transaction replay more
	// (up to one interval of records). Zero is DefaultTransactionInterval; a value
	// shorter than a poll (1ns) ends every transaction after its first poll.
	TransactionInterval time.Duration
	// TransactionMaxRecords bounds the records routed in one transaction: what an abort
	// replays. Its default, DefaultTransactionMaxRecords, is ten times what a gate
	// routes in DefaultTransactionInterval at the fastest measured (some 1.5 million
	// records a second), so that the interval ends transactions: at 50,000 the cap ended
	// them every 30 ms on Apache Kafka, and their ends (20 ms each, nothing polled) took
	// 40% of the time. Memory does not grow with it: records in flight are bounded by
	// MaxBufferedRecords, and an acknowledged record is not kept.
	TransactionMaxRecords int

	// OutcomesTopic, when set, is where every record's fate is written as outcome rows
	// (internal/outcome; outcomes.go): in the transaction of its records with
	// exactly-once delivery; with at-least-once, before its records' offsets are
	// committed. It belongs in OutputTopics too (the preflight checks it). Empty: off.
	OutcomesTopic string
	// OutcomesInterval is the rows' interval (their interval_start is a multiple of it).
	// Zero is DefaultOutcomesInterval.
	OutcomesInterval time.Duration
	// OutcomesMaxRows caps the rows held between seals, for every partition together;
	// keys past it are folded (outcome.Budget). Zero is DefaultOutcomesMaxRows.
	OutcomesMaxRows int
	// OutcomesFlushInterval is, at least once, how often the rows are sealed and
	// written (and on revoke and at shutdown). A partition's offsets are committed only
	// up to its last seal, so it is also how far the commits trail the routing: a crash
	// replays about this + CommitInterval. Each seal writes a row per key seen since
	// the last, so it sets the rows' volume: a seal a second wrote a row per active team
	// a second (docs/outcomes.md).
	// Zero is CommitInterval, a seal a commit; the gate gives DefaultOutcomesFlushInterval.
	// Exactly once, each transaction is a seal, and this is not used.
	OutcomesFlushInterval time.Duration
	// HashSeed is the seed the router's limiters hash keys with (limit.Config.HashSeed),
	// given to the outcome aggregates so that the hash a record's team is touched with
	// serves its check too (outcome.NewAggSeeded). The zero Seed: a random one.
	HashSeed maphash.Seed
	// Gate names this gate in its outcome rows (the host name).
	Gate string

	// ClientOpts are added to the client's options after the gate's own: TLS, SASL, and
	// in tests shorter fetch waits and session timeouts. At least once they go to the
	// producer's client too (producer.go), but for the consumer's and the group's: a hook
	// among them sees both clients.
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.InputTopic == "" {
		errs = append(errs, errors.New("no input topic"))
	}
	if c.GroupID == "" {
		errs = append(errs, errors.New("no group id"))
	}
	if c.StartOffset != StartEarliest && c.StartOffset != StartLatest {
		errs = append(errs, fmt.Errorf("unknown start offset %s", c.StartOffset))
	}
	if c.GroupProtocol != GroupClassic && c.GroupProtocol != GroupConsumer {
		errs = append(errs, fmt.Errorf("unknown group protocol %s", c.GroupProtocol))
	}
	if c.OnDataLoss != DataLossContinue && c.OnDataLoss != DataLossStop {
		errs = append(errs, fmt.Errorf("unknown data loss policy %s", c.OnDataLoss))
	}
	def := func(v *int, d int, name string) {
		if *v == 0 {
			*v = d
		} else if *v < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", name, *v))
		}
	}
	defDur := func(v *time.Duration, d time.Duration, name string) {
		if *v == 0 {
			*v = d
		} else if *v < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", name, durtext.String(*v)))
		}
	}
	def(&c.MaxPollRecords, DefaultMaxPollRecords, "MaxPollRecords")
	def(&c.ProduceRetries, DefaultProduceRetries, "ProduceRetries")
	def(&c.MaxBufferedRecords, DefaultMaxBufferedRecords, "MaxBufferedRecords")
	def(&c.MaxBufferedBytes, DefaultMaxBufferedBytes, "MaxBufferedBytes")
	defDur(&c.CommitInterval, DefaultCommitInterval, "CommitInterval")
	defDur(&c.CommitHoldAfter, max(2*c.CommitInterval, minCommitHoldAfter), "CommitHoldAfter")
	defDur(&c.RevokeTimeout, DefaultRevokeTimeout, "RevokeTimeout")
	defDur(&c.ShutdownTimeout, DefaultShutdownTimeout, "ShutdownTimeout")
	defDur(&c.TransactionTimeout, DefaultTransactionTimeout, "TransactionTimeout")
	def(&c.TransactionMaxRecords, DefaultTransactionMaxRecords, "TransactionMaxRecords")
	if c.OutcomesTopic != "" {
		defDur(&c.OutcomesInterval, DefaultOutcomesInterval, "OutcomesInterval")
		def(&c.OutcomesMaxRows, DefaultOutcomesMaxRows, "OutcomesMaxRows")
		defDur(&c.OutcomesFlushInterval, c.CommitInterval, "OutcomesFlushInterval")
	}
	defDur(&c.TransactionInterval, DefaultTransactionInterval, "TransactionInterval")
	defDur(&c.PreflightInterval, DefaultPreflightInterval, "PreflightInterval")
	defDur(&c.TopicConfigInterval, DefaultTopicConfigInterval, "TopicConfigInterval")
	defDur(&c.WatchInterval, DefaultWatchInterval, "WatchInterval")
	if c.Jitter == nil {
		c.Jitter = rand.Int64N // safe for concurrent use, seeded at random per process
	}
	if c.StallNotReady == 0 {
		c.StallNotReady = DefaultStallNotReady
	}
	if c.StallRestart == 0 {
		c.StallRestart = DefaultStallRestart
	}
	switch c.Delivery {
	case AtLeastOnce:
	case ExactlyOnce:
		if c.TransactionalID == "" {
			errs = append(errs, errors.New("exactly-once delivery needs a transactional id"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown delivery %s", c.Delivery))
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	} else if c.MaxMessageBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxMessageBytes %d is under 1024", c.MaxMessageBytes))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("consumer configuration: %w", errors.Join(errs...))
	}
	return c, nil
}

// offset is the franz-go start offset of s.
func (s StartOffset) offset() kgo.Offset {
	if s == StartLatest {
		return kgo.NewOffset().AtEnd()
	}
	return kgo.NewOffset().AtStart()
}

// clientOpts are the franz-go options the gate runs with. The pass-through benchmark
// uses the same ones (with kgo.ConsumeTopics), so the two are compared like for like.
// The input topic is not among them: franz-go joins the group once it knows a topic to
// consume, and the gate adds it once its preflight passes (Consumer.join). Built with
// it, a gate whose topics or permissions failed the checks (a new setting naming a topic
// not created yet, in a rollout's first pod) joined at once and held its share of the
// partitions, routing none of them, until a check passed.
func (c Config) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumerGroup(c.GroupID),
		kgo.ConsumeStartOffset(c.StartOffset.offset()),
		// Out-of-range fetches come back as errors, for the gate to count and decide
		// (loss.go) rather than the client to resume somewhere in silence.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		// Commits are ours: only behind acknowledged output (see track.go), or in
		// the transaction of their records.
		kgo.DisableAutoCommit(),
		kgo.MaxBufferedRecords(c.MaxBufferedRecords),
		kgo.MaxBufferedBytes(c.MaxBufferedBytes),
		kgo.ProducerBatchMaxBytes(ClientBatchLimit(c.MaxMessageBytes)),
		// acks=all and the idempotent producer are franz-go's defaults: an acknowledged
		// record is on every in-sync replica, and client retries write no duplicates.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Input written in transactions is routed only once committed, and never when
		// aborted, in both delivery modes: an aborted record is no data, and read
		// uncommitted, at least once routed it and counted it against its team.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	if c.ProduceRetries > 0 {
		opts = append(opts, kgo.RecordRetries(c.ProduceRetries))
	}
	if c.GroupProtocol == GroupConsumer {
		// With franz-go's default balancer (cooperative-sticky), this runs KIP-848
		// wherever the broker offers ConsumerGroupHeartbeat v1, classic elsewhere.
		opts = append(opts, kgo.ServerSideBalancer())
	}
	switch c.Delivery {
	case ExactlyOnce:
		opts = append(opts,
			// No BlockRebalanceOnPoll: the transact session lets a rebalance proceed
			// and aborts the open transaction instead, as franz-go recommends, so a
			// slow poll cannot get this member kicked out of the group.
			kgo.TransactionalID(c.TransactionalID),
			kgo.TransactionTimeout(c.TransactionTimeout),
		)
	default:
		// Rebalance callbacks never run while a poll's records are being routed, so
		// a commit never covers a partition this member no longer owns.
		opts = append(opts, kgo.BlockRebalanceOnPoll())
	}
	return append(opts, c.ClientOpts...)
}
