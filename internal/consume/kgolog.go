package consume

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger passes franz-go's own log lines to the gate's logger, as debug lines with
// from=franz-go, when the gate logs at debug level (GATE_LOG_LEVEL=debug): they say
// what the client did about a group, a transaction or a broker (a transaction session
// resetting to committed offsets, say), which is what an operator chasing a Kafka
// fault needs and nothing else shows. franz-go's info level is taken, not its debug
// level, which logs every request.
type kgoLogger struct {
	log         *slog.Logger // nil unless the gate logs at debug level
	batchFailed func(topic string, partition int32, err error)
}

// kgoLoggerOpt returns the option that installs kgoLogger. Every client has one, whatever
// the level: a batch franz-go retries (a retriable produce error such as
// KAFKA_STORAGE_ERROR, or NOT_ENOUGH_REPLICAS the cluster's metadata gives no reason
// for) is told to the gate only by its log line, which batchFailed takes. The other
// lines are passed on only when log writes debug lines.
func kgoLoggerOpt(log *slog.Logger, batchFailed func(topic string, partition int32, err error)) []kgo.Opt {
	debug := log != nil && log.Enabled(context.Background(), slog.LevelDebug)
	if !debug && batchFailed == nil {
		return nil
	}
	var l *slog.Logger
	if debug {
		l = log.With("from", "franz-go")
	}
	return []kgo.Opt{kgo.WithLogger(kgoLogger{log: l, batchFailed: batchFailed})}
}

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

// batchFailedLine is the message of franz-go's line for a batch a broker refused.
const batchFailedLine = "batch in a produce request failed"

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if msg == batchFailedLine && l.batchFailed != nil {
		var topic string
		var partition int32
		var err error
		for i := 0; i+1 < len(keyvals); i += 2 {
			switch keyvals[i] {
			case "topic":
				topic, _ = keyvals[i+1].(string)
			case "partition":
				partition, _ = keyvals[i+1].(int32)
			case "err":
				err, _ = keyvals[i+1].(error)
			}
		}
		if err != nil {
			l.batchFailed(topic, partition, err)
		}
	}
	if l.log != nil {
		l.log.Debug(msg, append(keyvals, "kgo_level", level.String())...)
	}
}
