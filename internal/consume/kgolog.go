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
type kgoLogger struct{ log *slog.Logger }

// kgoLoggerOpt returns the option that installs kgoLogger, or nil when log does not
// write debug lines.
func kgoLoggerOpt(log *slog.Logger) []kgo.Opt {
	if log == nil || !log.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	return []kgo.Opt{kgo.WithLogger(kgoLogger{log.With("from", "franz-go")})}
}

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l.log.Debug(msg, append(keyvals, "kgo_level", level.String())...)
}
