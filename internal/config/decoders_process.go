package config

import (
	"fmt"
	"log/slog"
	"strings"
)

// logLevel is GATE_LOG_LEVEL. slog.Level's own parser also takes forms such as "info+2";
// the gate documents four words and accepts only those.
type logLevel slog.Level

func (logLevel) want() string { return "debug, info, warn or error" }

func (l *logLevel) Decode(text string) error {
	switch strings.ToLower(text) {
	case "debug":
		*l = logLevel(slog.LevelDebug)
	case "info":
		*l = logLevel(slog.LevelInfo)
	case "warn":
		*l = logLevel(slog.LevelWarn)
	case "error":
		*l = logLevel(slog.LevelError)
	default:
		return fmt.Errorf("unknown level %q", text)
	}
	return nil
}

func (l logLevel) String() string { return strings.ToLower(slog.Level(l).String()) }

// logFormat is GATE_LOG_FORMAT.
type logFormat string

func (logFormat) want() string { return "json or text" }

func (f *logFormat) Decode(text string) error {
	switch s := strings.ToLower(text); s {
	case "json", "text":
		*f = logFormat(s)
		return nil
	}
	return fmt.Errorf("unknown format %q", text)
}
