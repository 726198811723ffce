package consume

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicTimestampBounds reads, with cl (DESCRIBE_CONFIGS), how far from the broker's clock
// a record's timestamp may be for topic to take it: before it
// (message.timestamp.before.max.ms, Kafka 3.6+) and after it
// (message.timestamp.after.max.ms), each, when left at its default, the older
// message.timestamp.difference.max.ms, as Kafka reads them. 0 is no bound, and both are
// 0 for a topic of message.timestamp.type LogAppendTime, whose broker stamps each record
// itself. A broker refuses a whole produce batch for one record out of them
// (INVALID_TIMESTAMP), and franz-go every record buffered behind it in the partition:
// gate redrive, whose dead letters keep their old timestamps, leaves those out instead.
// err says why the bounds were not read (both 0 with it).
func TopicTimestampBounds(ctx context.Context, cl *kgo.Client, topic string) (before, after time.Duration, err error) {
	const (
		typ       = "message.timestamp.type"
		beforeMax = "message.timestamp.before.max.ms"
		afterMax  = "message.timestamp.after.max.ms"
		diffMax   = "message.timestamp.difference.max.ms"
	)
	settings, errs, err := topicSettings(ctx, cl, []string{topic}, typ, beforeMax, afterMax, diffMax)
	if err == nil {
		err = errs[topic]
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the timestamp bounds of %s: %w", topic, err)
	}
	s := settings[topic]
	if s[typ] == "LogAppendTime" {
		return 0, 0, nil
	}
	ms := func(name string) int64 {
		n, err := strconv.ParseInt(s[name], 10, 64)
		if err != nil {
			return math.MaxInt64 // unset: Kafka's default, no bound
		}
		return n
	}
	bound := func(name string) time.Duration {
		n := ms(name)
		if n == math.MaxInt64 {
			n = ms(diffMax)
		}
		if n < 0 || n >= int64(math.MaxInt64/time.Millisecond) {
			return 0
		}
		return time.Duration(n) * time.Millisecond
	}
	return bound(beforeMax), bound(afterMax), nil
}

// TopicAppendTimed reports, read with cl (DESCRIBE_CONFIGS), whether topic's broker stamps
// each record with its append time (message.timestamp.type=LogAppendTime) in place of
// the producer's: a dead-letter topic of that type keeps when each record was
// dead-lettered, not its input record's time, which gate redrive copies back. err says
// why it could not be read.
func TopicAppendTimed(ctx context.Context, cl *kgo.Client, topic string) (bool, error) {
	const typ = "message.timestamp.type"
	settings, errs, err := topicSettings(ctx, cl, []string{topic}, typ)
	if err == nil {
		err = errs[topic]
	}
	if err != nil {
		return false, fmt.Errorf("reading the timestamp type of %s: %w", topic, err)
	}
	return settings[topic][typ] == "LogAppendTime", nil
}
