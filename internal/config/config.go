package config

import (
	"math"
	"time"

	"github.com/capturegate/gate/internal/tick"
)

// envPrefix starts every variable the gate reads: GATE_WINDOW, GATE_THRESHOLD, ...
const envPrefix = "GATE"

// Config is everything the gate reads from its environment. Each field's tags are its
// documentation: envconfig names the variable (after the GATE_ prefix), default is used
// when the variable is unset or empty, desc is the user-facing description that
// `gate env` prints (and docs/configuration.md's table is generated from).
//
// The tags follow envconfig's conventions: envconfig.Process parses the values (see
// Load) and envconfig renders the table.
//
// Its variables are grouped by concern in the structs it embeds, each in its own file:
// Kafka (kafka.go), Limiter (limits.go), Redis (redis.go) and Process (process.go).
// envconfig reads an embedded struct's fields as if they were the outer struct's, with no
// prefix of their own, so each variable is named GATE_ and its tag.
type Config struct {
	Kafka   // Kafka and routing (internal/consume, internal/route)
	Limiter // the limiter (internal/limit) and the live overrides (internal/overrides)
	Redis   // the tick (internal/tick) and Redis
	Process // the process
}

// HTTPShutdownTimeout bounds waiting for in-flight scrapes and probes at shutdown; they
// are short, and the tick's final flush should not wait behind a stuck client.
const HTTPShutdownTimeout = 5 * time.Second

// ShutdownBound is the longest a shutdown can take, whatever hangs: the consumer's drain
// (GATE_SHUTDOWN_TIMEOUT), its final commit and its leave (GATE_REVOKE_TIMEOUT each), the
// tick's final flush (tick.DefaultFlushTimeout) and the HTTP server's close. The gate logs
// it at start (shutdown_bound); the chart's terminationGracePeriodSeconds (TestGracePeriod)
// and docker-compose's stop_grace_period (TestComposeStopGracePeriod) are held to it.
//
// GATE_SHUTDOWN_TIMEOUT has no upper bound: a value near the longest duration (an
// operator's "wait for ever") gives the longest duration, where the sum overflowed to a
// negative bound in the start line.
func (c Config) ShutdownBound() time.Duration {
	rest := 2*c.RevokeTimeout + tick.DefaultFlushTimeout + HTTPShutdownTimeout
	if c.ShutdownTimeout > math.MaxInt64-rest {
		return math.MaxInt64
	}
	return c.ShutdownTimeout + rest
}
