package consume

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxPollRecords     = 10_000
	DefaultCommitInterval     = time.Second
	DefaultProduceRetries     = 10
	DefaultMaxBufferedRecords = 50_000
	DefaultMaxBufferedBytes   = 256 << 20
	DefaultMaxMessageBytes    = 1_048_588 // Kafka's own default message.max.bytes
	DefaultRevokeTimeout      = 10 * time.Second
	DefaultShutdownTimeout    = 20 * time.Second

	// Records whose produce failed are produced again after a backoff growing from
	// retryMinBackoff to retryMaxBackoff: long enough not to hammer a failing broker,
	// short enough to resume within seconds once it is back.
	retryMinBackoff = 100 * time.Millisecond
	retryMaxBackoff = 5 * time.Second
)

// Config is the consumer's settings. Zero values take the defaults above.
type Config struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// InputTopic is the topic read; GroupID the consumer group shared by a fleet.
	InputTopic string
	GroupID    string

	// MaxPollRecords bounds the records routed per poll, and so how long a rebalance
	// can be held waiting for a poll's records to be handed to the producer.
	MaxPollRecords int
	// CommitInterval is how often acknowledged offsets are committed: a crash replays at
	// most this much traffic (plus what was in flight). Commits also happen on revoke
	// and at shutdown.
	CommitInterval time.Duration
	// ProduceRetries bounds how often the client retries a record before reporting it
	// failed; the gate then logs and counts it and produces it again after a backoff.
	// (A time bound is not usable: franz-go measures a record's delivery timeout from
	// the record's timestamp, which the gate keeps from the input, so an old record
	// would time out at once.)
	ProduceRetries int
	// MaxBufferedRecords and MaxBufferedBytes bound the records waiting for the
	// broker's acknowledgement; routing blocks when either is reached.
	MaxBufferedRecords int
	MaxBufferedBytes   int
	// MaxMessageBytes is the largest record batch the producer sends, as the brokers'
	// message.max.bytes; a record larger than it goes to the dead-letter topic.
	MaxMessageBytes int32
	// RevokeTimeout bounds how long a revoked partition's in-flight records are awaited
	// before what is acknowledged is committed and the rest abandoned to the new owner
	// (which replays them). It must stay well under the group's rebalance timeout.
	RevokeTimeout time.Duration
	// ShutdownTimeout bounds waiting for in-flight records at shutdown.
	ShutdownTimeout time.Duration

	// ClientOpts are added to the client's options after the gate's own: TLS, SASL, and
	// in tests shorter fetch waits and session timeouts.
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
			errs = append(errs, fmt.Errorf("%s %s is negative", name, *v))
		}
	}
	def(&c.MaxPollRecords, DefaultMaxPollRecords, "MaxPollRecords")
	def(&c.ProduceRetries, DefaultProduceRetries, "ProduceRetries")
	def(&c.MaxBufferedRecords, DefaultMaxBufferedRecords, "MaxBufferedRecords")
	def(&c.MaxBufferedBytes, DefaultMaxBufferedBytes, "MaxBufferedBytes")
	defDur(&c.CommitInterval, DefaultCommitInterval, "CommitInterval")
	defDur(&c.RevokeTimeout, DefaultRevokeTimeout, "RevokeTimeout")
	defDur(&c.ShutdownTimeout, DefaultShutdownTimeout, "ShutdownTimeout")
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

// clientOpts are the franz-go options the gate runs with. The pass-through benchmark
// uses the same ones, so the two are compared like for like.
func (c Config) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumerGroup(c.GroupID),
		kgo.ConsumeTopics(c.InputTopic),
		// Commits are ours: only behind acknowledged output (see track.go).
		kgo.DisableAutoCommit(),
		// Rebalance callbacks never run while a poll's records are being routed, so a
		// commit never covers a partition this member no longer owns.
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordRetries(c.ProduceRetries),
		kgo.MaxBufferedRecords(c.MaxBufferedRecords),
		kgo.MaxBufferedBytes(c.MaxBufferedBytes),
		kgo.ProducerBatchMaxBytes(c.MaxMessageBytes),
		// acks=all and the idempotent producer are franz-go's defaults: an acknowledged
		// record is on every in-sync replica, and client retries write no duplicates.
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	return append(opts, c.ClientOpts...)
}
