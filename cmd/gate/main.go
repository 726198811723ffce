// Command gate routes each team's events between an accepted and an overflow topic by a
// fleet-wide rate limit: docs/design.md ("What happens to a record", "How the limit
// works", "Guarantees") gives the design. This package is wiring only: configuration
// from GATE_* environment variables (internal/config), the gate's parts (internal/gate),
// signals, the HTTP endpoints (internal/endpoints, which gate-dev serves too) and the
// subcommands. The demo stack (in-process broker, Redis, two gates, live view) is a
// binary of its own, cmd/gate-dev, so that none of its code is linked into this one
// (TestProductionBinaryLinksNoDemoCode).
//
// Guarantees:
//
//   - A configuration error stops start-up before anything starts, with one line on
//     stderr that names each bad variable and the value it wants; an unknown GATE_
//     variable (a typo) is an error too. Exit status 2, as for a command-line usage
//     error; 1 for any other failure.
//   - Nothing starts half-configured: every step that can fail (configuration, limiter,
//     Redis clients, tick, router, Kafka client, HTTP listener) runs before the gate's
//     own goroutines start (the Kafka client's start with it, and a failed step closes
//     it).
//   - Redis being down does not stop start-up or the process: /healthz answers 200 while
//     the process runs; /readyz answers 503 until the gate has joined its consumer group,
//     has read its live overrides once (the consumer routes nothing before, for at most
//     overrides.StartWait: internal/gate) and every Redis instance has answered a PING
//     once (the Redis part latches: readiness does not flap on a Redis blip, through
//     which the tick fails open), and while a condition an operator must fix holds (a
//     topic missing, a permission lacking, a partition stopped at an undeliverable
//     record), each named in the body.
//   - SIGTERM or SIGINT stops the consumer first (no new poll; in-flight records
//     awaited; acknowledged offsets committed; the group left), then the tick, whose
//     final flush writes the counts of the last records routed to Redis, then the HTTP
//     server and the Redis clients; /readyz answers 503 "shutting down" from the signal
//     on. The process exits 0, or 1 when the consumer's stop failed (an exactly-once
//     transaction that could not be ended), which the log says. A second signal, half a second
//     or more after the first, ends it at once, with a line on stderr and exit status
//     128 + its number (143 for SIGTERM); one sooner is the first sent twice (timeout(1)
//     signals the process and its group).
//   - SIGHUP never stops `gate serve`: it reads GATE_RULES_FILE at once, as the read
//     every 5s does (a changed, valid file is put in use), and logs "SIGHUP: rules file
//     checked" with what the read found; without a rules file it logs that there is
//     nothing to reload (the live overrides are read from Redis every
//     GATE_OVERRIDES_REFRESH; every other setting at start only). Left to Go's default,
//     an operator's kill -HUP, which reloads most daemons, killed the gate at once,
//     without its shutdown. The other commands keep the default (a closed terminal ends
//     them).
//
// Subcommands (commands.go; gate help lists them with their flags): serve or run (the
// default), env (the variable table as Markdown), load (the demo load, to a real broker),
// overrides, team, rules, healthcheck, version (internal/buildinfo), help.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/buildinfo"
	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/tick"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second signal ends a shutdown that hangs, or that the operator will not wait for.
	// Handled here rather than by restoring the default action after the first: the
	// kernel does not deliver a signal left to its default action to the first process of
	// a PID namespace, which the gate is in its container (the image's entrypoint), and
	// the second SIGTERM was ignored, or ended the process with the Go runtime's fallback
	// status 2, a configuration error's.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go exitOnSecondSignal(sigs, serving(os.Args[1:]), time.Now, os.Stderr, os.Exit)
	var hangups chan os.Signal
	if serving(os.Args[1:]) {
		hangups = make(chan os.Signal, 1)
		signal.Notify(hangups, syscall.SIGHUP)
	}
	err := run(ctx, os.Args[1:], host{
		hangups:  hangups,
		environ:  os.Environ(),
		getenv:   os.Getenv,
		hostname: hostname,
		clock:    clock.Real{},
		memory:   memoryHost{container: memlimit.FromCgroup, set: debug.SetMemoryLimit},
	}, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate: "+cli.OneLine(err))
		os.Exit(cli.ExitCode(err))
	}
}

// sameSignal is how soon after the first a signal is taken for the same one sent twice,
// not an operator's second: coreutils' timeout sends its SIGTERM to the process and then
// to its process group, which holds the process, and a shell's kill 0 and a supervisor
// signalling every process of a group likewise; each cut a gate's shutdown short at once
// (exit 143, uncommitted records routed again, counts unwritten). An operator's second
// Ctrl-C comes later than this.
const sameSignal = 500 * time.Millisecond

// exitOnSecondSignal waits for two signals on sigs, the second sameSignal or more after
// the first (now reads the clock), then says on stderr that the shutdown was cut short
// (and, when the process serves, what that costs) and exits (exit) with 128 + the second
// signal's number, the status of a process that signal killed: 143 for SIGTERM, 130 for
// SIGINT.
func exitOnSecondSignal(sigs <-chan os.Signal, serves bool, now func() time.Time, stderr io.Writer, exit func(int)) {
	<-sigs
	first := now()
	var sig os.Signal
	for sig = range sigs {
		if now().Sub(first) >= sameSignal {
			break
		}
	}
	code := 1
	if s, ok := sig.(syscall.Signal); ok {
		code = 128 + int(s)
	}
	msg := fmt.Sprintf("gate: second signal (%s): exiting at once, the shutdown cut short", sig)
	if serves {
		msg += ": the records routed since the last commit (or in the open transaction) are routed again by the partitions' next owner, and the counts not yet written to Redis are lost"
	}
	fmt.Fprintln(stderr, msg)
	exit(code)
}

// serving reports whether args (the process's, after its name) run the gate: serve,
// run or no command.
func serving(args []string) bool {
	return len(args) == 0 || args[0] == "serve" || args[0] == "run"
}

// hostname is os.Hostname, or "pid" and the process id when there is none.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "pid" + strconv.Itoa(os.Getpid())
	}
	return h
}

// host is what run takes from the process besides its arguments and output: main passes
// the real ones, tests fakes, so nothing below main reads the process's environment, host
// name or clock itself.
type host struct {
	environ  []string            // os.Environ: lists the GATE_ names set, for the typo check
	getenv   func(string) string // os.Getenv: reads a variable
	hostname func() string       // this host's name: part of the default transactional id
	clock    clock.Clock         // the wall clock: when `gate overrides` changed the hash
	memory   memoryHost          // the container's memory limit and the runtime's (serve)
	hangups  <-chan os.Signal    // SIGHUP (serve): read the rules file now; nil: none come
}

// names returns the GATE_ variables set (config.Names).
func (h host) names() []string { return config.Names(h.environ, h.getenv) }

// run is the whole program behind main, with the process's environment, host name and
// clock passed in (h), so tests call it directly: stdout takes command output, stderr
// the logs. It returns when ctx is cancelled (serve) or the command is done.
func run(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "help", "-h", "-help", "--help":
		switch {
		case name == "help" && len(args) > 1:
			return &cli.UsageError{Msg: "help takes one command at most, whose usage it prints"}
		case name == "help" && len(args) == 1 && args[0] != "run" && args[0] != "dev":
			// help COMMAND: the command's usage, as COMMAND -h prints it.
			c, ok := lookupCommand(args[0])
			if !ok {
				_, _ = io.WriteString(stderr, helpText())
				return &cli.UsageError{Msg: fmt.Sprintf("unknown command %q (want %s)", args[0], commandNames())}
			}
			return c.run(ctx, []string{"-h"}, h, stdout, stderr)
		}
		_, err := io.WriteString(stdout, helpText())
		return err
	case "run":
		name = "serve"
	case "dev":
		return &cli.UsageError{Msg: "the demo is a binary of its own: make run, or go run ./cmd/gate-dev (bin/gate-dev -h for its flags)"}
	}
	c, ok := lookupCommand(name)
	if !ok {
		_, _ = io.WriteString(stderr, helpText())
		return &cli.UsageError{Msg: fmt.Sprintf("unknown command %q (want %s)", name, commandNames())}
	}
	return c.run(ctx, args, h, stdout, stderr)
}

// serve runs the gate until ctx is done.
func serve(ctx context.Context, h host, stderr io.Writer) error {
	// 1. Everything that can fail, before anything starts.
	names := h.names()
	cfg, err := config.Load(h.getenv, names)
	if err != nil {
		return err
	}
	// Exactly-once without GATE_TRANSACTIONAL_ID: GATE_GROUP_ID-hostname, unique per pod,
	// as a pod's host name is its name. Set here, so config never asks the process.
	if cfg.Delivery == "exactly-once" && cfg.TransactionalID == "" {
		cfg.TransactionalID = cfg.GroupID + "-" + h.hostname()
	}
	log := gate.NewLogger(cfg, stderr)
	config.LogServiceLinks(log, h.getenv, names)
	// Settings the modes chosen do not read: taken, not refused (config.Unread), and said.
	for _, u := range cfg.Unread() {
		log.Warn(u.Key+" is set but not read: "+u.Why, "variable", u.Key, "value", u.Value)
	}
	redisLogsTo(log)
	// Before anything allocates much. Tests running serve leave their process's alone.
	var mem memLimit
	if h.memory.set != nil {
		if mem, err = setMemoryLimit(h.getenv, cfg.MemoryLimitRatio, h.memory); err != nil {
			log.Warn("Go memory limit not set", "err", err)
		}
	}

	writer := writerName(h.hostname(), os.Getpid(), h.clock.Now(), rand.Reader)
	g, err := gate.New(cfg, log, gate.Options{Writer: writer, Host: h.hostname(), Clock: h.clock})
	if err != nil {
		return err
	}
	// Closed last, after the tick's final flush has used them.
	defer g.CloseRedis(log)
	lim, ticker, consumer := g.Lim, g.Ticker, g.Consumer
	// Listen before serving, so a taken port fails start-up, and so the log can give the
	// actual address when GATE_HTTP_ADDR asks for port 0.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		// The client joins the group only once the consumer's preflight passes (at Run),
		// but it is open: close it, as every start that fails does.
		consumer.Close()
		return fmt.Errorf("GATE_HTTP_ADDR=%q: listening: %w", cfg.HTTPAddr, err)
	}
	mux, ready := endpoints.ForGate(cfg, g, log)
	srv := endpoints.NewServer(mux, log)
	logStartup(log, cfg, lim, ticker, ln.Addr().String(), mem)
	g.LogRules()

	// 2. Start. The tick's context is not ctx: the tick must keep running until everything
	// that counts has stopped, then flush, so it is cancelled explicitly below.
	tickCtx, stopTick := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTick()
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		g.RunTick(tickCtx) // with a rules file, also the rules' reloads
	}()
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		ready.Run(probeCtx)
	}()
	overridesDone := make(chan struct{})
	go func() {
		defer close(overridesDone)
		g.RunOverrides(probeCtx)
	}()
	memoryDone := make(chan struct{})
	go func() {
		defer close(memoryDone)
		if mem.container == 0 {
			return // not set from the container's limit: nothing to follow
		}
		t := time.NewTicker(cmp.Or(h.memory.every, memoryFollowEvery))
		defer t.Stop()
		followMemoryLimit(probeCtx, log, t.C, cfg.MemoryLimitRatio, h.memory, mem.container)
	}()
	hangupsDone := make(chan struct{})
	go func() {
		defer close(hangupsDone)
		takeHangups(probeCtx, h.hangups, g, cfg.OverridesRefresh, log)
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The consumer checks records against lim; it stops first on shutdown, before the
	// tick, so that the final flush carries the counts of the last records it routed.
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	consumed := make(chan error, 1)
	go func() { consumed <- consumer.Run(consumeCtx) }()

	// 3. Wait, then stop in order.
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
		ready.ShuttingDown()
		stopConsume()
		if err := <-consumed; err != nil {
			runErr = err
		}
	case err := <-consumed:
		// The consumer stops on its own only when its client is closed under it, or its
		// input topic is deleted (consume.InputGoneError: started again, it takes the topic
		// up as it is now).
		runErr = fmt.Errorf("the Kafka consumer stopped: %w", err)
		log.Error("Kafka consumer stopped; shutting down", "err", err)
		ready.ShuttingDown()
	case err := <-served:
		runErr = fmt.Errorf("HTTP server on %s: %w", ln.Addr(), err)
		log.Error("HTTP server failed; shutting down", "err", err)
		ready.ShuttingDown()
		stopConsume()
		<-consumed
	}
	stopTick()
	<-tickDone // Run returns after its final flush
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), config.HTTPShutdownTimeout)
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("HTTP server shutdown incomplete", "err", err)
	}
	cancel()
	stopProbe()
	<-probeDone
	<-overridesDone
	<-memoryDone
	<-hangupsDone
	log.Info("stopped")
	return runErr
}

// rulesChecker reads the rules file at once (gate.Gate.CheckRulesNow).
type rulesChecker interface {
	CheckRulesNow(ctx context.Context) (file, result string, ok bool)
}

// takeHangups answers each SIGHUP on hups until ctx ends: the rules file read at once,
// through the tick loop that reads it every interval (so a changed, valid file is put in
// use the same way), and a line saying what the read found; or, without a rules file, a
// line saying there is nothing to reload. It never stops the gate.
func takeHangups(ctx context.Context, hups <-chan os.Signal, rc rulesChecker, overridesRefresh time.Duration, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hups:
		}
		file, result, ok := rc.CheckRulesNow(ctx)
		switch {
		case ok:
			log.Info("SIGHUP: rules file checked", "file", file, "result", result)
		case file != "":
			return // the gate is stopping
		default:
			log.Info("SIGHUP: nothing to reload: no rules file (GATE_RULES_FILE); the live overrides are read from Redis every GATE_OVERRIDES_REFRESH, every other setting at start only; the gate goes on",
				"overrides_refresh", overridesRefresh.String())
		}
	}
}

// redisLogsTo sends go-redis's own log lines through log, at debug level
// (gate.RedisLogger). go-redis logs a few events (chiefly failed dials, each of which also
// comes back as an error to the caller, which says it once) through one logger per
// process, which writes plain lines to os.Stderr unless redis.SetLogger replaces it: every
// command that dials Redis (serve, overrides) calls this with its logger before it dials,
// so that none of those lines escapes the gate's format. One command runs per process;
// in tests, where several run at once, a line may land in another run's log, which is
// harmless.
func redisLogsTo(log *slog.Logger) {
	redis.SetLogger(gate.RedisLogger{Log: log.With("component", "redis")})
}

// logStartup writes the one line that says how this process is set up: every GATE_
// setting but the secrets (TestStartLineStatesEverySetting). It reports the settings the
// limiter and the tick actually use (with their defaults filled in), not what was asked
// for, and Redis URLs without passwords. Durations are strings: slog's
// JSON would print nanoseconds.
func logStartup(log *slog.Logger, cfg config.Config, lim *limit.Limiter, t *tick.Ticker, addr string, mem memLimit) {
	lc, tc := lim.Config(), t.Config()
	log.Info("gate started", append(buildinfo.Get().LogAttrs(),
		"http_addr", addr,
		"go_mem_limit", mem.bytes, // 0: none
		"go_mem_limit_from", mem.from,
		// What the fleet's gates compare (tick.LimitsHash): a gate whose hash differs
		// from the others' enforces other limits (GateFleetLimitsDisagree).
		"limits_hash", tick.LimitsHash(tc.LiveLimits),
		"kafka_brokers", strings.Join(cfg.KafkaBrokers, ","),
		"input_topic", cfg.InputTopic,
		"accepted_topic", cfg.AcceptedTopic,
		"overflow_topic", cfg.OverflowTopic,
		"dead_letter_topic", cfg.DeadLetterTopic,
		"group_id", cfg.GroupID,
		"delivery", string(cfg.Delivery),
		"transactional_id", cfg.TransactionalID,
		"kafka_start_offset", string(cfg.KafkaStartOffset),
		"kafka_group_protocol", string(cfg.KafkaGroupProtocol),
		"kafka_session_timeout", cfg.KafkaSessionTimeout.String(),
		"kafka_rebalance_timeout", cfg.KafkaRebalanceTimeout.String(),
		"kafka_fetch_max_wait", cfg.KafkaFetchMaxWait.String(),
		"kafka_fetch_max_bytes", cfg.KafkaFetchMaxBytes,
		"on_undeliverable", string(cfg.OnUndeliverable),
		"on_data_loss", string(cfg.OnDataLoss),
		"stall_not_ready", cfg.StallNotReady.String(),
		"stall_restart", cfg.StallRestart.String(),
		"transaction_timeout", cfg.TransactionTimeout.String(),
		"transaction_interval", cfg.TransactionInterval.String(),
		"transaction_max_records", cfg.TransactionMaxRecords,
		"outcomes_topic", cfg.OutcomesTopic,
		"outcomes_interval", cfg.OutcomesInterval.String(),
		"outcomes_max_rows", cfg.OutcomesMaxRows,
		"outcomes_flush_interval", cfg.OutcomesFlushInterval.String(),
		"rules_file", cfg.RulesFile, // with one, the next line names the rules; key_from ... overrides are not used
		"key_from", cfg.KeyFrom.String(),
		"max_key_bytes", cfg.MaxKeyBytes,
		"validate_json", cfg.ValidateJSON,
		"cost", cfg.Cost.String(),
		"force_overflow", len(cfg.ForceOverflow),
		"dry_run", cfg.DryRun,
		"overflow_keep_key", cfg.OverflowKeepKey,
		"max_poll_records", cfg.MaxPollRecords,
		"commit_interval", cfg.CommitInterval.String(),
		"produce_retries", cfg.ProduceRetries,
		"max_buffered_records", cfg.MaxBufferedRecords,
		"max_buffered_bytes", cfg.MaxBufferedBytes,
		"kafka_max_message_bytes", cfg.KafkaMaxMessageBytes,
		"revoke_timeout", cfg.RevokeTimeout.String(),
		"shutdown_timeout", cfg.ShutdownTimeout.String(),
		"kafka_client_id", cfg.KafkaClientID,
		"kafka_tls", cfg.KafkaTLSOn(),
		"kafka_tls_ca_file", cfg.KafkaTLSCAFile,
		"kafka_tls_cert_file", cfg.KafkaTLSCertFile,
		"kafka_tls_key_file", cfg.KafkaTLSKeyFile,
		"kafka_tls_server_name", cfg.KafkaTLSServerName,
		"kafka_sasl_mechanism", string(cfg.KafkaSASLMechanism),
		"kafka_sasl_username", cfg.KafkaSASLUsername,
		"clock", lc.Clock.String(),
		"event_time_from", cfg.EventTimeFrom.String(),
		"max_event_age", lc.MaxEventAge.String(),
		"limit_mode", lc.Mode.String(),
		"window", lc.Window.String(),
		"threshold", lc.Threshold,
		"threshold_mode", string(cfg.ThresholdMode),
		"adaptive_factor", cfg.AdaptiveFactor,
		"adaptive_floor", cfg.AdaptiveFloor,
		"adaptive_ceiling", cfg.AdaptiveCeiling,
		"adaptive_half_life", cfg.AdaptiveHalfLife.String(),
		"adaptive_min_history", cfg.AdaptiveMinHistory.String(),
		"adaptive_max_spike", cfg.AdaptiveMaxSpike.String(),
		"divert_hold", divertHoldLine(lc),
		"divert_release", lc.DivertRelease,
		"further_limits", cfg.Limits.String(),
		"overrides", len(lc.Overrides),
		"overrides_refresh", cfg.OverridesRefresh.String(),
		"overrides_max_entries", cfg.OverridesMaxEntries,
		"sync_interval", lc.SyncInterval.String(),
		"hot_every_tick", *lc.HotEveryTick,
		"pending_read_share", lc.PendingReadShare,
		"sync_floor", lc.SyncFloor,
		"cold_write_interval", lc.ColdWriteInterval.String(),
		"cache_capacity", lc.Capacity,
		"cache_ttl", lc.TTL.String(),
		"cache_idle_timeout", lc.IdleTimeout.String(),
		"cache_shards", lc.Shards,
		"tick_interval", tc.TickInterval.String(),
		"redis_urls", cfg.RedisURLs.String(),
		"redis_mode", string(tc.Mode),
		"redis_sentinel_addrs", strings.Join(cfg.RedisSentinelAddrs, ","),
		"redis_sentinel_master", string(cfg.RedisSentinelMaster),
		"redis_sentinel_username", cfg.RedisSentinelUsername,
		"redis_tls_ca_file", cfg.RedisTLSCAFile,
		"redis_tls_cert_file", cfg.RedisTLSCertFile,
		"redis_tls_key_file", cfg.RedisTLSKeyFile,
		"redis_username", cfg.RedisUsername,
		"redis_password_set", cfg.RedisPassword != "",
		"redis_prefix", tc.KeyPrefix,
		"redis_key_ttl", keyTTLLine(tc.KeyTTL),
		"redis_read_timeout", cfg.RedisReadTimeout.String(),
		"redis_write_timeout", cfg.RedisWriteTimeout.String(),
		"redis_dial_timeout", cfg.RedisDialTimeout.String(),
		"keys_per_command", tc.KeysPerCommand,
		"keys_per_tick", tc.KeysPerTick,
		"max_pending_writes", tc.MaxPendingWrites,
		"max_reads_per_tick", tc.MaxReadsPerTick,
		"flush_timeout", tc.FlushTimeout.String(),
		"shutdown_bound", cfg.ShutdownBound().String(),
		"team_api", cfg.TeamAPI,
		"log_level", cfg.LogLevel.String(),
		"log_format", string(cfg.LogFormat),
		"memory_limit_ratio", cfg.MemoryLimitRatio,
	)...)
	if ttl, clamped := cfg.KeyTTL(); clamped {
		log.Warn("GATE_REDIS_KEY_TTL raised to the counters' lifetime (2 x GATE_WINDOW; 3 x with adaptive thresholds; 2 x plus GATE_MAX_EVENT_AGE on the event clock): a shorter expiry would drop an epoch while it still counts",
			"asked", cfg.RedisKeyTTL.String(), "using", ttl.String())
	}
	// Each can be meant (a lab, a network of its own), neither should be an accident: said
	// where an operator reads the set-up (a security review found both silent).
	if cfg.KafkaSASLMechanism == "plain" && !cfg.KafkaTLSOn() {
		log.Warn("GATE_KAFKA_SASL_MECHANISM=plain without TLS: the password crosses the network as it is, to anyone on the path; set GATE_KAFKA_TLS=true")
	}
	for i, u := range cfg.RedisURLs {
		if opt, err := tick.ParseURL(u); err == nil && opt.TLSConfig != nil && opt.TLSConfig.InsecureSkipVerify {
			log.Warn("GATE_REDIS_URLS: skip_verify=true turns off the check of the Redis server's certificate: anyone on the path can stand in for it and read the password; drop it, and give GATE_REDIS_TLS_CA_FILE for a private CA",
				"redis_instance", i)
		}
	}
}

// divertHoldLine is GATE_DIVERT_HOLD as the limiter keeps it, after its default (one
// window): 0s for none, as in cap mode and under the event clock.
func divertHoldLine(lc limit.Config) string {
	if lc.Mode != limit.Divert || lc.Clock != limit.WallClock || lc.DivertHold < 0 {
		return "0s"
	}
	return lc.DivertHold.String()
}

// keyTTLLine is GATE_REDIS_KEY_TTL as the start line says it: each limit's keys expire
// after it raised to that limit's counters' lifetime (tick.NewMulti, KeyLifetime), 0
// meaning that alone.
func keyTTLLine(ttl time.Duration) string {
	if ttl == 0 {
		return "each limit's counters' lifetime (2 x its window, 3 x adaptive, + GATE_MAX_EVENT_AGE on the event clock)"
	}
	return ttl.String() + " (at least each limit's counters' lifetime: 2 x its window, 3 x adaptive, + GATE_MAX_EVENT_AGE on the event clock)"
}

// writerName is this process's writer name in Redis (tick.Config.Writer): its host name,
// process id, start time and 32 random bits, readable to an operator looking at the
// sequence keys. Two processes that write under one name lose counts: the lane's sequence
// says each one's batches were the other's, already applied. Host name and start time
// alone collided for gates started in one millisecond on one host (a fleet benchmark's
// four gate processes admitted 1.49 × their limit in about one run in eight).
func writerName(hostname string, pid int, start time.Time, rnd io.Reader) string {
	var b [4]byte
	_, _ = io.ReadFull(rnd, b[:]) // crypto/rand never fails
	return fmt.Sprintf("%s-%d-%s-%s", hostname, pid, strconv.FormatInt(start.UnixMilli(), 36), hex.EncodeToString(b[:]))
}
