// Package config reads the gate's settings from GATE_* environment variables (Config,
// Load) and maps them to each package's own settings (LimitConfig, SyncConfig,
// RouteConfig, ConsumeConfig, RedisOptions). Both binaries read it: cmd/gate and the demo
// stack in cmd/gate-dev.
//
// Every error names the variable at fault and what it wants, on one line; Load reports all
// problems at once, as a Problems, which the commands turn into exit status 2.
//
// One concern a file:
//
//   - config.go: Config, made of one struct per concern, and ShutdownBound.
//   - load.go: Load and Names, which read the environment.
//   - validate.go: Validate, and the rules between the variables of several concerns.
//   - kafka.go: Kafka, the consumer's and the router's variables; ConsumeConfig,
//     RouteConfig.
//   - limits.go: Limiter, the variables of the limiter, its overrides, cache and clock;
//     LimitConfig, OverridesConfig, ExtraLimitConfigs.
//   - redis.go: Redis, the tick's and Redis's variables; SyncConfig, RedisOptions,
//     DialRedis.
//   - process.go: Process, the HTTP server's and the log's variables.
//   - reload.go: Reload, what the TLS files' reloaders take.
//   - decoders_kafka.go, decoders_limits.go, decoders_redis.go, decoders_process.go: the
//     field types with their own syntax, by the concern they serve.
//   - decode.go: reading a field by its tags, and the field types several concerns share.
//   - problems.go: the errors, gathered in a Problems.
//   - envtable.go: the table of variables that `gate env` prints.
//   - servicelinks.go: the Kubernetes service links Load ignores.
package config
