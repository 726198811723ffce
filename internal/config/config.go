// Package config reads the gate's settings from GATE_* environment variables (Config,
// Load) and maps them to each package's own settings (LimitConfig, SyncConfig,
// RouteConfig, ConsumeConfig, RedisOptions). Both binaries read it: cmd/gate and the demo
// stack in cmd/gate-dev.
//
// Every error names the variable at fault and what it wants, on one line; Load reports all
// problems at once, as a Problems, which the commands turn into exit status 2.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/spike"
	gatesync "github.com/capturegate/gate/internal/sync"
	"github.com/capturegate/gate/internal/tlsreload"
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
type Config struct {
	// Kafka and routing (internal/consume, internal/route).
	KafkaBrokers          brokerList      `envconfig:"KAFKA_BROKERS" default:"127.0.0.1:9092" desc:"Comma-separated seed brokers as host:port (default 127.0.0.1:9092); the client finds the rest of the cluster from them."`
	InputTopic            string          `envconfig:"INPUT_TOPIC" default:"events" desc:"Topic the raw events are read from (default events)."`
	AcceptedTopic         string          `envconfig:"ACCEPTED_TOPIC" default:"events_accepted" desc:"Topic records of teams under their limit go to, key kept (default events_accepted)."`
	OverflowTopic         string          `envconfig:"OVERFLOW_TOPIC" default:"events_overflow" desc:"Topic records of teams over their limit (or forced) go to, with header gate-overflow-reason and, unless GATE_OVERFLOW_KEEP_KEY, no key (default events_overflow)."`
	DeadLetterTopic       string          `envconfig:"DEAD_LETTER_TOPIC" default:"events_dead_letter" desc:"Topic records whose team cannot be read go to, with headers gate-error (the reason), gate-error-detail and gate-source (topic/partition/offset) (default events_dead_letter)."`
	GroupID               string          `envconfig:"GROUP_ID" default:"capture-gate" desc:"Consumer group shared by every gate of a fleet; the input's partitions are spread over its members (default capture-gate)."`
	KafkaGroupProtocol    groupProtocol   `envconfig:"KAFKA_GROUP_PROTOCOL" default:"classic" desc:"Consumer group protocol, by Kafka's own names: classic (members assign partitions among themselves, cooperative-sticky; every broker) or consumer (KIP-848: the broker assigns, and a member joining or leaving moves only the partitions that change owner; Kafka 4.0 or later, franz-go advising 4.3 or later), a broker that does not offer it getting classic with a warning (default classic); under consumer the session timeout is the brokers' group.consumer.session.timeout.ms, not GATE_KAFKA_SESSION_TIMEOUT."`
	KafkaStartOffset      startOffset     `envconfig:"KAFKA_START_OFFSET" default:"earliest" desc:"Where the group starts reading a partition it has no committed offset for, as when the group is new: earliest (the oldest record the partition still holds, so what was written before the group existed is routed too) or latest (only what is written from then on) (default earliest); it does not decide where a partition resumes when its committed offset is no longer in the log, and the chart gives the same value to KEDA as offsetResetPolicy."`
	KeyFrom               keyFrom         `envconfig:"KEY_FROM" default:"json:team_id" desc:"Where a record's team is read: json:FIELD for a top-level or dotted field of a JSON value, json:A+B for several fields joined with ':', each value's ':' and '%' written %3A and %25 so that distinct values never make one team (a limit per user within a team), header:NAME, or key for the record key (default json:team_id)."`
	ValidateJSON          bool            `envconfig:"VALIDATE_JSON" default:"false" desc:"With a json: GATE_KEY_FROM, check that every value is valid JSON and dead-letter a corrupt one (not_json) even when its team is readable (default false: only records whose team cannot be read are dead-lettered); costs about 1 µs of CPU per KB of event."`
	MaxKeyBytes           int             `envconfig:"MAX_KEY_BYTES" default:"256" desc:"Longest team key, in bytes; a longer one sends the record to dead letter with reason key_too_long (default 256)."`
	Cost                  cost            `envconfig:"COST" default:"events" desc:"What a record counts toward its team's window: events (1 per record) or bytes (its value's size), so that with bytes a team sending few huge events is limited too and every threshold is in bytes per window (default events)."`
	ForceOverflow         teamList        `envconfig:"FORCE_OVERFLOW" default:"" desc:"Comma-separated teams always sent to overflow with reason forced, whatever their rate (default none)."`
	DryRun                bool            `envconfig:"DRY_RUN" default:"false" desc:"Send every record to the accepted topic but count and report decisions as if enforced, in gate_dry_run_diverted_total (default false); for trying a threshold on live traffic."`
	OverflowKeepKey       bool            `envconfig:"OVERFLOW_KEEP_KEY" default:"false" desc:"Keep the record key on overflow (default false: dropped, so a hot team's overflow spreads over every partition instead of loading one)."`
	MaxPollRecords        int             `envconfig:"MAX_POLL_RECORDS" default:"10000" desc:"Most records routed per poll (default 10000); rebalances wait for a poll's records to be handed to the producer, so smaller lets a rebalance through sooner, larger batches more."`
	CommitInterval        time.Duration   `envconfig:"COMMIT_INTERVAL" default:"1s" desc:"How often offsets acknowledged on the output topics are committed (default 1s); a crash replays at most about this much traffic, and shorter means more commit requests."`
	ProduceRetries        int             `envconfig:"PRODUCE_RETRIES" default:"0" desc:"Tries the client makes for an output record a broker failed with a retriable error before reporting it failed, after which the gate logs, counts and produces it again with backoff, never committing past it; 0 for no bound, the client retrying in order until the record is written (default 0); a bound shows broker errors sooner in gate_produce_errors_total but can reorder a key's records, a broker failing for long shows in gate_stalled_seconds either way."`
	MaxBufferedRecords    int             `envconfig:"MAX_BUFFERED_RECORDS" default:"50000" desc:"Most output records waiting for the broker's acknowledgement; routing blocks when reached, so a slow broker slows consumption instead of growing memory (default 50000)."`
	MaxBufferedBytes      int             `envconfig:"MAX_BUFFERED_BYTES" default:"268435456" desc:"Most bytes of output records waiting for acknowledgement, as GATE_MAX_BUFFERED_RECORDS (default 268435456, 256 MiB)."`
	KafkaMaxMessageBytes  int32           `envconfig:"KAFKA_MAX_MESSAGE_BYTES" default:"1048588" desc:"Largest record batch the producer sends, as the brokers' message.max.bytes (default 1048588); a record larger than the output topic takes goes to dead letter, without its value if it is too large for that topic too."`
	RevokeTimeout         time.Duration   `envconfig:"REVOKE_TIMEOUT" default:"10s" desc:"Longest a revoked partition's in-flight records are awaited before what is acknowledged is committed and the rest left to the next owner (default 10s); keep it well under the group's rebalance timeout (60s)."`
	ShutdownTimeout       time.Duration   `envconfig:"SHUTDOWN_TIMEOUT" default:"20s" desc:"Longest a shutdown waits for in-flight records before committing what is acknowledged and leaving the group (default 20s); keep the pod's terminationGracePeriodSeconds above the whole shutdown, logged at start as shutdown_bound: this + 2 x GATE_REVOKE_TIMEOUT + 10s (50s by default)."`
	KafkaSessionTimeout   time.Duration   `envconfig:"KAFKA_SESSION_TIMEOUT" default:"45s" desc:"How long the group waits without a heartbeat before it gives a gate's partitions to the others (default 45s); shorter moves a crashed gate's partitions sooner, too short evicts gates that pause (GC, slow node)."`
	KafkaRebalanceTimeout time.Duration   `envconfig:"KAFKA_REBALANCE_TIMEOUT" default:"60s" desc:"How long a rebalance waits for every member to rejoin, which includes a revoked partition's drain (default 60s); keep it above GATE_REVOKE_TIMEOUT."`
	KafkaFetchMaxWait     time.Duration   `envconfig:"KAFKA_FETCH_MAX_WAIT" default:"500ms" desc:"Longest a fetch waits at the broker for new records when a partition is idle (default 500ms); it only matters for quiet topics, shorter lowering their latency for more fetch requests."`
	KafkaClientID         string          `envconfig:"KAFKA_CLIENT_ID" default:"capture-gate" desc:"Client id sent to the brokers, seen in their logs and quotas (default capture-gate)."`
	KafkaTLS              bool            `envconfig:"KAFKA_TLS" default:"false" desc:"Connect to the brokers over TLS (default false); implied by any GATE_KAFKA_TLS_* file."`
	KafkaTLSCAFile        string          `envconfig:"KAFKA_TLS_CA_FILE" default:"" desc:"PEM file of the CA certificates that sign the brokers' certificates (default none), the system's CA certificates being used without it; read again when it changes, as GATE_KAFKA_TLS_CERT_FILE."`
	KafkaTLSCertFile      string          `envconfig:"KAFKA_TLS_CERT_FILE" default:"" desc:"PEM client certificate for mutual TLS, with GATE_KAFKA_TLS_KEY_FILE (default none); the files are read again when they change (checked at most once a second, when a connection is opened), so a certificate renewed in place (cert-manager, a Secret volume) is used by new connections without a restart, and files that turn unreadable or invalid leave the last good ones in use, with a warning and gate_tls_reload_errors_total."`
	KafkaTLSKeyFile       string          `envconfig:"KAFKA_TLS_KEY_FILE" default:"" desc:"PEM private key of GATE_KAFKA_TLS_CERT_FILE (default none); read again with it."`
	KafkaTLSServerName    string          `envconfig:"KAFKA_TLS_SERVER_NAME" default:"" desc:"Name the brokers' certificates are checked against, when not their host names (default none), each broker's own host name being used without it."`
	KafkaSASLMechanism    saslMechanism   `envconfig:"KAFKA_SASL_MECHANISM" default:"none" desc:"SASL authentication: none, plain, scram-sha-256 or scram-sha-512 (default none); use it with TLS, as plain sends the password as is."`
	KafkaSASLUsername     string          `envconfig:"KAFKA_SASL_USERNAME" default:"" desc:"SASL user name (default none)."`
	KafkaSASLPassword     secret          `envconfig:"KAFKA_SASL_PASSWORD" default:"" desc:"SASL password (default none); set it from a Secret, it is never logged."`
	Delivery              delivery        `envconfig:"DELIVERY" default:"at-least-once" desc:"Delivery guarantee on the output topics: at-least-once (a crash or rebalance may write a record twice) or exactly-once (each poll's records are produced and their input offsets committed in one Kafka transaction, so consumers reading with isolation.level=read_committed see every input record once) (default at-least-once); exactly-once costs a transaction per poll and delays read-committed consumers until it commits."`
	TransactionalID       string          `envconfig:"TRANSACTIONAL_ID" default:"" desc:"With GATE_DELIVERY=exactly-once, this gate's transactional id, which must differ between the gates of a fleet, GATE_GROUP_ID-hostname (unique per pod) being used without it (default none); a gate restarted with the same id aborts its predecessor's open transaction at once, one with a new id leaves it to time out (GATE_TRANSACTION_TIMEOUT)."`
	OnUndeliverable       onUndeliverable `envconfig:"ON_UNDELIVERABLE" default:"stop" desc:"What to do with a record refused by every topic (its output topic, then the dead-letter topic with and without its value, each tried with the record alone), as a broker validating timestamps or a small max.message.bytes can: stop (its partition stops there, nothing past it is committed, /readyz fails and an error line names the record) or skip (logged with its partition and offset, counted in gate_records_undeliverable_total, committed past) (default stop); skip keeps the pipeline moving at the cost of a gap an operator must replay by hand."`
	OnDataLoss            onDataLoss      `envconfig:"ON_DATA_LOSS" default:"continue" desc:"What to do when input records are gone before the gate read them, deleted by the topic's retention below its position (a gate that fell behind, a group away longer than the retention) or lost by a broker (a log truncated by an unclean leader election): either way an error line names the partition and the offsets and gate_records_lost_total{cause} counts them, then continue (resume after them, committing past them) or stop (the partition stops there, nothing past it is routed or committed, /readyz fails naming it) (default continue); stop suits pipelines where a gap must stop the line until an operator replays it or accepts it."`
	StallNotReady         time.Duration   `envconfig:"STALL_NOT_READY" default:"2m" desc:"How long the gate may make no progress (no poll returning records, no commit, no transaction end) while it has work (lag, records in flight or awaiting a retry) before /readyz fails, naming the stall (default 2m); keep it above GATE_KAFKA_REBALANCE_TIMEOUT, the longest a healthy gate waits behind a rebalance, and 0 turns it off. An idle gate never stalls."`
	StallRestart          time.Duration   `envconfig:"STALL_RESTART" default:"10m" desc:"How long the gate may make no progress while it has work before /healthz fails, so that Kubernetes restarts it (default 10m); longer than GATE_STALL_NOT_READY, and 0 turns it off."`
	TransactionTimeout    time.Duration   `envconfig:"TRANSACTION_TIMEOUT" default:"90s" desc:"With GATE_DELIVERY=exactly-once, how long the brokers let a transaction stay open before aborting it, longer than GATE_KAFKA_REBALANCE_TIMEOUT and GATE_KAFKA_SESSION_TIMEOUT (a transaction's end waits out a rebalance, which waits out a dead member's session) and at most the brokers' transaction.max.timeout.ms (default 90s); a crashed gate's open transaction holds back read-committed consumers of its output partitions, and the input partitions' next owner, for up to this long."`

	// The limiter (internal/limit).
	LimitMode          limit.Mode    `envconfig:"LIMIT_MODE" default:"divert" desc:"Which records count toward a team's window (default divert): divert counts every record, so a team over its threshold goes wholly to overflow and keeps its order there, while cap counts only accepted records, so a team gets up to its threshold per window but its records split between the two topics while it is over."`
	DivertHold         divertHold    `envconfig:"DIVERT_HOLD" default:"" desc:"In divert mode, how long a team that reached its threshold stays diverted once its level is back under GATE_DIVERT_RELEASE of it, on every gate (a held team's flag is shared through Redis in the tick's own commands), or 0 for no hold; one GATE_WINDOW when unset (default none). A team swinging around its limit then stays in the overflow topic instead of switching on every crossing, which reorders its events downstream, and a longer hold keeps a team that calmed down in the slower overflow pipeline longer. Not supported with GATE_CLOCK=event (set 0 or leave unset: nothing is held); ignored in cap mode."`
	DivertRelease      float64       `envconfig:"DIVERT_RELEASE" default:"0.8" desc:"In divert mode, the share of its threshold a held team's level must stay under for GATE_DIVERT_HOLD before it is released, above 0 and at most 1 (default 0.8); 1 with GATE_DIVERT_HOLD=0 is the divert of 0.1.0, switching the moment the level crosses the threshold either way, and lower keeps a team just under its limit diverted. Ignored in cap mode and with GATE_CLOCK=event."`
	Window             time.Duration `envconfig:"WINDOW" default:"60s" desc:"Length of one epoch of the fleet-wide counter, the period a threshold applies to (default 60s); a longer window smooths bursts but remembers an overrun for longer."`
	Threshold          int64         `envconfig:"THRESHOLD" default:"1000000" desc:"Events per window a team may send across the whole fleet before it is limited, for teams without an override (default 1000000); lower protects downstream sooner, higher lets bigger bursts through."`
	ThresholdMode      thresholdMode `envconfig:"THRESHOLD_MODE" default:"static" desc:"How a team's threshold is set: static (GATE_THRESHOLD, or its override) or adaptive (learned from the team's own history: clamp(GATE_ADAPTIVE_FACTOR x its usual volume per window at that hour of the day and day of the week, GATE_ADAPTIVE_FLOOR, GATE_ADAPTIVE_CEILING), shared by the fleet through Redis, once it has GATE_ADAPTIVE_MIN_HISTORY of history; GATE_THRESHOLD until then) (default static); an override still wins, adaptive needs a GATE_WINDOW that divides an hour and the wall clock, and with GATE_LIMITS it applies to the primary limit only. Adaptive catches a team sending far more than it usually does, whatever its size, for a profile of 124 bytes per team in Redis and a few more keys in the tick's reads."`
	AdaptiveFactor     float64       `envconfig:"ADAPTIVE_FACTOR" default:"4" desc:"With GATE_THRESHOLD_MODE=adaptive, a team's threshold as a multiple of its usual volume, above 1.5 (default 4); lower catches smaller spikes and diverts more of a team's own noise, higher lets spikes under it through."`
	AdaptiveFloor      int64         `envconfig:"ADAPTIVE_FLOOR" default:"100" desc:"With GATE_THRESHOLD_MODE=adaptive, the lowest learned threshold per window (default 100), so that a small team's noise (a few events a window, often none) is no spike; higher spares more small teams, lower protects against them sooner."`
	AdaptiveCeiling    int64         `envconfig:"ADAPTIVE_CEILING" default:"0" desc:"With GATE_THRESHOLD_MODE=adaptive, the highest learned threshold per window, 0 for none or at least GATE_ADAPTIVE_FLOOR (default 0); it bounds what a very large team may send, as GATE_THRESHOLD does in static mode."`
	AdaptiveHalfLife   time.Duration `envconfig:"ADAPTIVE_HALF_LIFE" default:"72h" desc:"With GATE_THRESHOLD_MODE=adaptive, how fast a team's learned level follows its volume (the daily and weekly cycles taken out): a change is half learned after this long, at least GATE_WINDOW (default 72h: a quiet weekend moves it less than the week's profile learns the weekend, and growth of 50% a week is followed); shorter follows growth sooner but lets a weekend pull a business-day team's threshold down, longer is slower to learn a lasting step under GATE_ADAPTIVE_FACTOR. A step over it is learned by GATE_ADAPTIVE_MAX_SPIKE."`
	AdaptiveMaxSpike   time.Duration `envconfig:"ADAPTIVE_MAX_SPIKE" default:"3h" desc:"With GATE_THRESHOLD_MODE=adaptive, how long a team may be over its learned threshold before the spike ends: it is re-learned at the volume it has sent lately and accepted again (a lasting step up, such as a launch or a large customer, is not a spike for ever), from 1h plus two GATE_WINDOWs to 168h (default 3h: an hour over the longest real spikes, 10 to 120 minutes, which are still caught whole); GATE_THRESHOLD's overrides and GATE_ADAPTIVE_CEILING still cap the team."`
	AdaptiveMinHistory time.Duration `envconfig:"ADAPTIVE_MIN_HISTORY" default:"24h" desc:"With GATE_THRESHOLD_MODE=adaptive, how much history a team needs before its threshold is learned, GATE_THRESHOLD applying until then, at least GATE_WINDOW (default 24h: one whole daily cycle, so that a team's evening peak is known before it can be taken for a spike)."`
	Limits             limitList     `envconfig:"LIMITS" default:"" desc:"Several limits per team, as comma-separated window:threshold pairs such as 1m:1000000,1h:20000000 (default none), GATE_WINDOW and GATE_THRESHOLD being the one limit without it; the first pair is the primary limit, in place of GATE_WINDOW and GATE_THRESHOLD (which must then be unset), keyed {prefix}:{team}:{epoch} as ever, and each further one, a whole number of seconds longer than GATE_TICK_INTERVAL and distinct from the others, has its own keys {prefix}:w{seconds}:{team}:{epoch}; a record overflows when any limit is over (header gate-overflow-limit names which); an override (GATE_OVERRIDES or live) sets a team's primary threshold and scales each further limit by the same factor, rounded, at least 1."`
	Overrides          overrideList  `envconfig:"OVERRIDES" default:"" desc:"Per-team thresholds as comma-separated team=limit pairs such as team1=5000,team2=200000 (default none); teams not listed use GATE_THRESHOLD, and the list is the base the live overrides (GATE_OVERRIDES_REFRESH) are laid over; its length costs nothing per record."`
	OverridesRefresh   time.Duration `envconfig:"OVERRIDES_REFRESH" default:"60s" desc:"How often every gate reads the live per-team limits from the hash {prefix}:overrides in the first Redis instance, managed with gate overrides set/delete (default 60s); the live set is laid over GATE_OVERRIDES (a team in it takes its live limit, one deleted from it falls back to GATE_OVERRIDES or GATE_THRESHOLD), and a Redis error or a missing hash keeps the current limits."`

	// The live overrides' size (internal/overrides).
	OverridesMaxEntries int `envconfig:"OVERRIDES_MAX_ENTRIES" default:"1000000" desc:"Most teams the live overrides hash may hold (default 1000000): a larger one is not read, every gate keeping the limits in force and counting gate_overrides_refresh_errors_total{cause=too_large}, and gate overrides list refusing it too; a million teams take each gate about a second to read, in commands of about a millisecond each, and a few hundred MB of memory."`

	SyncInterval      time.Duration `envconfig:"SYNC_INTERVAL" default:"15s" desc:"How often a team at normal pressure (50-80% of its threshold) is read from Redis, low and idle teams every 4 times that and hot ones every half (default 15s); shorter gives every gate a fresher fleet-wide view for more Redis reads."`
	HotEveryTick      bool          `envconfig:"HOT_EVERY_TICK" default:"true" desc:"Read teams at 80% of their threshold or more on every tick instead of every half GATE_SYNC_INTERVAL (default true); it cuts the time a fleet takes to divert a team that jumps over its limit from about 20s to about 2s, for a few extra reads of busy teams only."`
	PendingReadShare  float64       `envconfig:"PENDING_READ_SHARE" default:"0.05" desc:"Read a team on the next tick once the events this gate counted since its last read reach this share of the team's threshold, or never if negative (default 0.05); smaller catches a sudden jump sooner and costs more reads."`
	SyncFloor         float64       `envconfig:"SYNC_FLOOR" default:"0.01" desc:"Pressure (level / threshold, above 0 and below 0.1) under which a team seen only in passing is never read from Redis (default 0.01); higher keeps a flood of one-off teams from becoming a flood of reads, at the cost of judging more small teams on local counts alone."`
	ColdWriteInterval time.Duration `envconfig:"COLD_WRITE_INTERVAL" default:"" desc:"How often a cold team's counts are written to Redis instead of every tick, a cold team being one under 10% of its threshold, not due for a read, with less than 0.5% of its threshold waiting, at most GATE_WINDOW, once per GATE_WINDOW when unset (default none), each window's counts then going in one write after the window ends; most teams of a long-tailed workload are cold, and writing each once a window is most of what cuts the Redis work per gate to about a sixth (docs/benchmarks.md); other gates see a cold team's counts up to two windows late (one at a shorter interval), at most 0.5% of its threshold per gate, and GATE_TICK_INTERVAL writes every team on every tick."`
	CacheCapacity     int           `envconfig:"CACHE_CAPACITY" default:"300000" desc:"Most teams kept in memory, the least recently seen of a small sample being evicted past it (default 300000); larger keeps more teams' fleet-wide views for more memory, and an evicted team that comes back starts again from first contact."`
	CacheTTL          time.Duration `envconfig:"CACHE_TTL" default:"600s" desc:"Longest a cached team's fleet-wide view may go without a read before it is read again (default 600s); shorter bounds how stale a quiet team's view gets, for more reads."`
	CacheIdleTimeout  time.Duration `envconfig:"CACHE_IDLE_TIMEOUT" default:"300s" desc:"A team not seen for this long is dropped from memory (default 300s); shorter frees memory sooner, but a team that returns is treated as first contact until its next read."`
	Clock             clockSetting  `envconfig:"CLOCK" default:"wall" desc:"Which time a record is counted and judged at: wall (when the gate reads it) or event (its own timestamp, from GATE_EVENT_TIME_FROM), so that a gate catching up on a backlog at ten times the normal rate judges each window's traffic in its own window instead of sending well-behaved teams to overflow (default wall); with event, every gate keeps a window of state per window a team is seen in, and Redis keeps each window's counts GATE_MAX_EVENT_AGE longer."`
	EventTimeFrom     eventTimeFrom `envconfig:"EVENT_TIME_FROM" default:"timestamp" desc:"With GATE_CLOCK=event, where a record's time is read: timestamp (the Kafka record timestamp) or json:FIELD (a top-level or dotted field holding an RFC 3339 string or a Unix time in seconds, milliseconds, microseconds or nanoseconds) (default timestamp); a record whose field is missing or unreadable is judged at its record timestamp and counted in gate_event_time_unreadable_total."`
	MaxEventAge       time.Duration `envconfig:"MAX_EVENT_AGE" default:"15m" desc:"With GATE_CLOCK=event, the oldest a record's time may be: an older one is counted and judged as if it were this old, and one more than 5s ahead of the gate's clock as if it were now, both counted in gate_limiter_event_time_clamped_total (default 15m); longer lets a longer backlog replay in its own windows, for more Redis memory (each window's counts are kept this much longer)."`

	// The tick (internal/sync) and Redis.
	TickInterval        time.Duration  `envconfig:"TICK_INTERVAL" default:"1s" desc:"How often counts are written to Redis and due reads made, shorter than GATE_WINDOW and no longer than GATE_SYNC_INTERVAL (default 1s); ticks fall on the wall clock's multiples of it, the same instants on every gate, writes at the boundary and reads a quarter of it later, so every gate with this interval and a clock within that quarter of the others reads the whole fleet's writes; shorter lets the fleet react sooner, longer batches more work into each round trip."`
	RedisMode           redisMode      `envconfig:"REDIS_MODE" default:"standalone" desc:"Redis topology: standalone (independent instances listed in GATE_REDIS_URLS, teams spread by a stable hash), cluster (a Redis Cluster whose seed nodes are GATE_REDIS_URLS, database 0 only, keys hash-tagged by one of 256 shards) or sentinel (the primary that GATE_REDIS_SENTINEL_ADDRS know as GATE_REDIS_SENTINEL_MASTER, followed through failovers, with password, database and TLS from the one URL in GATE_REDIS_URLS) (default standalone); cluster scales past one instance, sentinel survives losing the primary."`
	RedisSentinelMaster sentinelMaster `envconfig:"REDIS_SENTINEL_MASTER" default:"" desc:"With GATE_REDIS_MODE=sentinel, the name the sentinels know the primary by, as in their sentinel monitor line (default none)."`
	RedisSentinelAddrs  sentinelAddrs  `envconfig:"REDIS_SENTINEL_ADDRS" default:"" desc:"With GATE_REDIS_MODE=sentinel, comma-separated sentinels as host:port, asked for the current primary (default none); list several, so that losing one still finds the primary."`
	RedisURLs           redisURLs      `envconfig:"REDIS_URLS" default:"redis://127.0.0.1:6379/0" desc:"Comma-separated Redis instances as redis:// or rediss:// URLs with optional password and database, over which teams are spread by a stable hash (default redis://127.0.0.1:6379/0); every gate of a fleet needs the same list in the same order, and changing it moves teams and briefly resets their counts."`
	RedisUsername       string         `envconfig:"REDIS_USERNAME" default:"" desc:"Redis ACL user the gate logs in as on every instance of GATE_REDIS_URLS, in place of any user name in the URLs, with GATE_REDIS_PASSWORD (default none), the URLs' user, else Redis's default user, being used without it; in sentinel mode it is the primary's, the sentinels being reached without one."`
	RedisPassword       secret         `envconfig:"REDIS_PASSWORD" default:"" desc:"Redis password for every instance of GATE_REDIS_URLS, in place of any password in the URLs, taken as is, so it need not be URL-escaped (default none), the URLs' password, if any, being used without it; in sentinel mode it is the primary's, the sentinels being reached without one; set it from a Secret, it is never logged."`
	RedisPrefix         string         `envconfig:"REDIS_PREFIX" default:"gate" desc:"First part of every counter key {prefix}:{team}:{epoch} (default gate); gates with the same prefix on the same Redis share their limits, so give each fleet its own."`
	RedisKeyTTL         time.Duration  `envconfig:"REDIS_KEY_TTL" default:"0" desc:"Expiry of each counter key: this value raised to 2 x the limit's window (default 0, meaning exactly that; 2 x the window plus GATE_MAX_EVENT_AGE with GATE_CLOCK=event), plus 30 s for clock skew between gates. The previous epoch must outlive a whole window or over-limit teams get free traffic, so longer only keeps dead keys around longer. Profile keys (adaptive mode) live 7 days and hold flags GATE_DIVERT_HOLD, whatever this says."`
	RedisTLSCAFile      string         `envconfig:"REDIS_TLS_CA_FILE" default:"" desc:"PEM file of the CA certificates that sign the Redis servers' certificates, for rediss:// URLs (default none), the system's CA certificates being used without it; read again when it changes, as GATE_KAFKA_TLS_CERT_FILE."`
	RedisTLSCertFile    string         `envconfig:"REDIS_TLS_CERT_FILE" default:"" desc:"PEM client certificate for mutual TLS with rediss:// URLs, with GATE_REDIS_TLS_KEY_FILE (default none); read again when it changes, as GATE_KAFKA_TLS_CERT_FILE."`
	RedisTLSKeyFile     string         `envconfig:"REDIS_TLS_KEY_FILE" default:"" desc:"PEM private key of GATE_REDIS_TLS_CERT_FILE (default none); read again with it."`
	RedisReadTimeout    time.Duration  `envconfig:"REDIS_READ_TIMEOUT" default:"250ms" desc:"Longest wait for a Redis reply (default 250ms); shorter gives up on a slow Redis sooner (views go stale, records are never held up), longer rides out pauses but delays the tick."`
	RedisWriteTimeout   time.Duration  `envconfig:"REDIS_WRITE_TIMEOUT" default:"250ms" desc:"Longest wait to send a command to Redis (default 250ms); shorter gives up on a stuck connection sooner, longer rides out pauses but delays the tick."`
	RedisDialTimeout    time.Duration  `envconfig:"REDIS_DIAL_TIMEOUT" default:"1s" desc:"Longest wait to open a connection to Redis (default 1s); shorter notices a lost instance sooner, too short fails on a slow network."`
	KeysPerCommand      int            `envconfig:"KEYS_PER_COMMAND" default:"200" desc:"Keys in one MGET, at least 2 (default 200); larger sends fewer commands per tick, but each one holds Redis a little longer."`
	KeysPerTick         int            `envconfig:"KEYS_PER_TICK" default:"500000" desc:"Most keys one tick touches over all instances, a write being one key and a read two, the rest waiting for the next tick, writes first (default 500000); it bounds a tick's Redis work after an outage at the cost of a slower catch-up."`
	MaxPendingWrites    int            `envconfig:"MAX_PENDING_WRITES" default:"1000000" desc:"Most (team, epoch) counts kept waiting for Redis, for example while it is down, new counts past it being dropped and counted in gate_limiter_dropped_counts_total (default 1000000); larger rides out longer outages for more memory."`
	MaxReadsPerTick     int            `envconfig:"MAX_READS_PER_TICK" default:"100000" desc:"Most team reads one tick makes, hottest teams first and the rest planned again next tick (default 100000); it bounds Redis load in a read storm, at the cost of staler views for cooler teams."`

	// The process.
	HTTPAddr  string    `envconfig:"HTTP_ADDR" default:":8080" desc:"Address the HTTP server listens on for /metrics, /healthz, /readyz and the team view, as host:port, port 0 choosing a free one (default :8080); a 127.0.0.1 host keeps them off the network."`
	TeamAPI   bool      `envconfig:"TEAM_API" default:"false" desc:"Serve the read-only team view on GATE_HTTP_ADDR: GET /v1/teams/{team} (threshold, override, level, last global estimate and its age, pending, tier, limited, seconds until under) and GET /v1/teams?top=N (this gate's teams closest to or over their limits), which gate team reads (default false: it lists team names and their rates to anyone who reaches the port, so it is turned on deliberately); off, the server answers only /metrics, /healthz and /readyz."`
	LogLevel  logLevel  `envconfig:"LOG_LEVEL" default:"info" desc:"Least severe log level written to stderr: debug, info, warn or error (default info); debug is noisy, error hides the start-up line with the effective settings."`
	LogFormat logFormat `envconfig:"LOG_FORMAT" default:"json" desc:"Log line format on stderr: json for log collectors or text for people (default json)."`
}

// Load reads Config through getenv and checks it (Validate). names lists the variables
// set in the environment (only their names); a GATE_ name among them that Config does not
// define is an error, since it is most likely a typo whose value would otherwise be
// ignored in silence, unless it is one of the variables Kubernetes sets for a Service
// named gate or gate-... (see isServiceLink).
//
// Each value is parsed by envconfig.Process, by its field's type: the types below
// implement envconfig.Decoder and say what they want. Process itself reads only the
// process environment and stops at the first bad value, while the gate's environment is
// injected (getenv: run and its tests hold no global state) and every bad value is
// reported, so Load hands Process one variable at a time (see decode).
//
// getenv cannot tell an empty variable from an unset one (os.Getenv cannot either):
// an empty value means the default.
//
// Every error names the variable and what it wants, on one line; all problems are
// reported at once, joined by "; ".
func Load(getenv func(string) string, names []string) (Config, error) {
	var c Config
	var p Problems
	fields := configFields()
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.key] = true
	}
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		// A Kubernetes service link (GATE_SERVICE_HOST, ... of a Service named gate) is
		// not a setting; serve logs the ones ignored (see servicelinks.go).
		if strings.HasPrefix(n, envPrefix+"_") && !known[n] && !isServiceLink(n, getenv(n)) {
			p.add(&unknownVarError{Name: n, Suggest: closest(n, slices.Collect(maps.Keys(known)))})
		}
	}

	v := reflect.ValueOf(&c).Elem()
	raw := make(map[string]string, len(fields)) // values as shown in errors
	failed := make(map[string]bool)             // reported once, not again by Validate
	for _, f := range fields {
		s := strings.TrimSpace(getenv(f.key))
		if s == "" {
			s = f.def
		}
		fv := v.FieldByIndex(f.index)
		raw[f.key] = s
		if r, ok := fv.Addr().Interface().(redacter); ok {
			raw[f.key] = r.redact(s)
		}
		if s == "" {
			continue // no value and no default: the zero value
		}
		if err := decode(fv, s); err != nil {
			e := &varError{Key: f.key, Value: raw[f.key], Want: wantFor(fv, f.def), Err: err}
			if _, ok := fv.Addr().Interface().(wanter); ok {
				e.Detail = err.Error() // our own types' errors say which part is wrong
			}
			p.add(e)
			failed[f.key] = true
		}
	}
	// GATE_LIMITS, when set, is every limit: its first is the primary, in place of
	// GATE_WINDOW and GATE_THRESHOLD (setting those too would leave two primaries). Only
	// the environment tells a value set from a default, so this rule is Load's.
	if len(c.Limits) > 0 {
		if strings.TrimSpace(getenv(envPrefix+"_WINDOW")) != "" || strings.TrimSpace(getenv(envPrefix+"_THRESHOLD")) != "" {
			p.add(&varError{Key: envPrefix + "_LIMITS", Value: raw[envPrefix+"_LIMITS"],
				Want: "either GATE_LIMITS or GATE_WINDOW and GATE_THRESHOLD, not both (GATE_LIMITS's first window:threshold is the primary limit)"})
			failed[envPrefix+"_LIMITS"] = true
		} else {
			c.Window, c.Threshold = c.Limits[0].Window, c.Limits[0].Threshold
			c.Limits = c.Limits[1:]
		}
	}
	// A value that failed holds a zero, not the operator's value: it is not reported
	// again, and the rules between values wait until every value reads.
	for _, e := range c.validate(len(failed) == 0) {
		if ve, ok := e.(*varError); ok && !failed[ve.Key] {
			ve.Value = raw[ve.Key] // as the operator wrote it
			p.add(ve)
		}
	}
	if len(p) > 0 {
		return Config{}, p
	}
	return c, nil
}

// Names returns the GATE_ variable names Load checks for typos, from environ (the
// process environment, os.Environ), since getenv cannot list what it holds; a name counts
// only when getenv gives it a value. In production getenv is os.Getenv, so this is the
// process's GATE_ names (less empty ones, which set nothing); under a test's getenv, a
// stray GATE_ variable in the developer's shell is ignored, as its value is. Load's tests
// pass names directly.
func Names(environ []string, getenv func(string) string) []string {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix+"_") && getenv(name) != "" {
			names = append(names, name)
		}
	}
	return names
}

// Validate checks each value's range and the rules between values: every rule on the
// configuration lives here. The libraries check again (limit.New, gatesync.New, ...),
// but they read a zero as "the default", and their messages name struct fields; here a
// zero is rejected where it would be silently replaced, and every message names the
// variable to fix. Where a rule is a package's own (a topic name, the cluster key
// prefix, the event-age bound, the enums), that package's function decides and Validate
// only words the message. The rules between values run once every value is sane. The
// error is a Problems.
func (c Config) Validate() error {
	if p := c.validate(true); len(p) > 0 {
		return p
	}
	return nil
}

// validate is Validate, the rules between values only if between.
func (c Config) validate(between bool) Problems {
	var p Problems
	bad := func(key, want string) {
		key = envPrefix + "_" + key
		p.add(&varError{Key: key, Value: c.shown(key), Want: want})
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "a duration above zero such as "+durationExample(key))
		}
	}
	atLeast := func(key string, n, lo int) {
		if n < lo {
			bad(key, fmt.Sprintf("a whole number of at least %d", lo))
		}
	}

	if c.Window < time.Millisecond {
		bad("WINDOW", "a duration of at least 1ms such as 60s")
	}
	if c.Threshold < 1 || c.Threshold > limit.MaxThreshold {
		bad("THRESHOLD", fmt.Sprintf("a whole number from 1 to %d", int64(limit.MaxThreshold)))
	}
	positive("SYNC_INTERVAL", c.SyncInterval)
	positive("OVERRIDES_REFRESH", c.OverridesRefresh)
	atLeast("OVERRIDES_MAX_ENTRIES", c.OverridesMaxEntries, 1)
	if c.PendingReadShare == 0 || c.PendingReadShare > 1 {
		bad("PENDING_READ_SHARE", "a share above 0 and at most 1 such as 0.05, or a negative number to disable")
	}
	if c.SyncFloor <= 0 || c.SyncFloor >= 0.1 {
		bad("SYNC_FLOOR", "a share above 0 and below 0.1 such as 0.01")
	}
	if c.DivertHold.d < 0 {
		bad("DIVERT_HOLD", "a duration of 0 or more such as 60s, or unset for one window")
	} else if c.DivertHold.d > 0 && c.Clock.Clock == limit.EventClock {
		bad("DIVERT_HOLD", "0 or unset with GATE_CLOCK=event (holds are not kept under the event clock)")
	}
	if c.DivertRelease <= 0 || c.DivertRelease > 1 {
		bad("DIVERT_RELEASE", "a share above 0 and at most 1 such as 0.8")
	}
	p = append(p, c.validateAdaptive(bad)...)
	if c.ColdWriteInterval < 0 || c.ColdWriteInterval > c.Window {
		bad("COLD_WRITE_INTERVAL", fmt.Sprintf("a duration above 0 and at most the window (%s), such as 30s", c.Window))
	}
	atLeast("CACHE_CAPACITY", c.CacheCapacity, 1)
	positive("CACHE_TTL", c.CacheTTL)
	positive("CACHE_IDLE_TIMEOUT", c.CacheIdleTimeout)
	positive("TICK_INTERVAL", c.TickInterval)
	if c.RedisKeyTTL < 0 {
		bad("REDIS_KEY_TTL", "0 (meaning 2 x GATE_WINDOW) or a positive duration such as 120s")
	}
	if c.RedisMode.value() == gatesync.ModeSentinel {
		if c.RedisSentinelMaster == "" {
			bad("REDIS_SENTINEL_MASTER", "the master name the sentinels monitor, such as mymaster, with GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisSentinelAddrs) == 0 {
			bad("REDIS_SENTINEL_ADDRS", "sentinel host:port entries such as sentinel-1:26379,sentinel-2:26379 with GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisURLs) > 1 {
			bad("REDIS_URLS", "one URL with GATE_REDIS_MODE=sentinel (its password, database and TLS apply to the primary; its host is not used)")
		}
	} else {
		// Set without sentinel mode, they would be ignored: most likely GATE_REDIS_MODE
		// was forgotten.
		if c.RedisSentinelMaster != "" {
			bad("REDIS_SENTINEL_MASTER", "unset unless GATE_REDIS_MODE=sentinel")
		}
		if len(c.RedisSentinelAddrs) > 0 {
			bad("REDIS_SENTINEL_ADDRS", "unset unless GATE_REDIS_MODE=sentinel")
		}
	}
	if c.RedisMode.value() == gatesync.ModeCluster {
		for _, u := range c.RedisURLs {
			if opt, err := gatesync.ParseURL(u); err == nil && opt.DB != 0 {
				bad("REDIS_URLS", "URLs of database 0 with GATE_REDIS_MODE=cluster: Redis Cluster has no other")
				break
			}
		}
	}
	if gatesync.CheckKeyPrefix(c.RedisMode.value(), c.RedisPrefix) != nil {
		bad("REDIS_PREFIX", "a prefix without braces with GATE_REDIS_MODE=cluster: a brace would change the keys' hash tag")
	}
	positive("REDIS_READ_TIMEOUT", c.RedisReadTimeout)
	positive("REDIS_WRITE_TIMEOUT", c.RedisWriteTimeout)
	positive("REDIS_DIAL_TIMEOUT", c.RedisDialTimeout)
	atLeast("KEYS_PER_COMMAND", c.KeysPerCommand, 2)
	atLeast("KEYS_PER_TICK", c.KeysPerTick, 2)
	atLeast("MAX_PENDING_WRITES", c.MaxPendingWrites, 1)
	atLeast("MAX_READS_PER_TICK", c.MaxReadsPerTick, 1)
	for _, k := range []struct{ key, v string }{{"INPUT_TOPIC", c.InputTopic}, {"ACCEPTED_TOPIC", c.AcceptedTopic}, {"OVERFLOW_TOPIC", c.OverflowTopic}, {"DEAD_LETTER_TOPIC", c.DeadLetterTopic}} {
		if route.CheckTopic(k.v) != nil {
			bad(k.key, "a Kafka topic name: 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'")
		}
	}
	if c.GroupID == "" {
		bad("GROUP_ID", "a consumer group name such as capture-gate")
	}
	atLeast("MAX_KEY_BYTES", c.MaxKeyBytes, 1)
	atLeast("MAX_POLL_RECORDS", c.MaxPollRecords, 1)
	positive("COMMIT_INTERVAL", c.CommitInterval)
	atLeast("PRODUCE_RETRIES", c.ProduceRetries, 0)
	atLeast("MAX_BUFFERED_RECORDS", c.MaxBufferedRecords, 1)
	atLeast("MAX_BUFFERED_BYTES", c.MaxBufferedBytes, 1<<20)
	if c.KafkaMaxMessageBytes < 1024 {
		bad("KAFKA_MAX_MESSAGE_BYTES", "a whole number of bytes from 1024 to 2147483647 such as 1048588")
	}
	positive("REVOKE_TIMEOUT", c.RevokeTimeout)
	if c.KafkaSessionTimeout < time.Second {
		bad("KAFKA_SESSION_TIMEOUT", "a duration of at least 1s such as 45s, within the brokers' group.min/max.session.timeout.ms")
	}
	if c.KafkaFetchMaxWait < time.Millisecond {
		bad("KAFKA_FETCH_MAX_WAIT", "a duration of at least 1ms such as 500ms")
	}
	positive("SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	if c.StallNotReady < 0 {
		bad("STALL_NOT_READY", "0 (off) or a duration such as 2m")
	}
	if c.StallRestart < 0 {
		bad("STALL_RESTART", "0 (off) or a duration such as 10m")
	}
	if c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute {
		bad("TRANSACTION_TIMEOUT", "a duration from 1s to 15m such as 90s, within the brokers' transaction.max.timeout.ms")
	}
	if c.TransactionalID != "" && !validTransactionalID(c.TransactionalID) {
		bad("TRANSACTIONAL_ID", "1 to 200 of a-z, A-Z, 0-9, '.', '_' and '-' such as capture-gate-0")
	}
	positive("MAX_EVENT_AGE", c.MaxEventAge)
	if (c.KafkaTLSCertFile == "") != (c.KafkaTLSKeyFile == "") {
		bad("KAFKA_TLS_CERT_FILE", "a client certificate file together with GATE_KAFKA_TLS_KEY_FILE, or neither")
	}
	if (c.RedisTLSCertFile == "") != (c.RedisTLSKeyFile == "") {
		bad("REDIS_TLS_CERT_FILE", "a client certificate file together with GATE_REDIS_TLS_KEY_FILE, or neither")
	}
	if c.RedisUsername != "" && c.RedisPassword == "" {
		bad("REDIS_USERNAME", "unset, or a user name with GATE_REDIS_PASSWORD set")
	}
	if c.KafkaSASLMechanism != "none" && (c.KafkaSASLUsername == "" || c.KafkaSASLPassword == "") {
		bad("KAFKA_SASL_MECHANISM", "none, or a mechanism with GATE_KAFKA_SASL_USERNAME and GATE_KAFKA_SASL_PASSWORD set")
	}
	if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil || !validPort(port) {
		bad("HTTP_ADDR", "host:port such as :8080 or 127.0.0.1:8080")
	}
	if len(p) > 0 || !between {
		return p // the rules between values below assume each value is sane
	}

	// A record routed to the topic it was read from would be read again, forever.
	topics := map[string]string{}
	for _, k := range []struct{ key, v string }{{"INPUT_TOPIC", c.InputTopic}, {"ACCEPTED_TOPIC", c.AcceptedTopic}, {"OVERFLOW_TOPIC", c.OverflowTopic}, {"DEAD_LETTER_TOPIC", c.DeadLetterTopic}} {
		if other, dup := topics[k.v]; dup {
			bad(k.key, fmt.Sprintf("a topic other than GATE_%s's (%s): the input and the three outputs must all differ", other, k.v))
		}
		topics[k.v] = k.key
	}
	// A drain longer than the rebalance would get the gate evicted while it drains.
	if c.KafkaRebalanceTimeout <= c.RevokeTimeout {
		bad("KAFKA_REBALANCE_TIMEOUT", fmt.Sprintf("a duration longer than GATE_REVOKE_TIMEOUT (%s)", c.RevokeTimeout))
	}
	// Ending a transaction waits for a rebalance in progress, and a join waits for a
	// dead member's session (a slow one's rebalance timeout): a transaction timeout
	// shorter than either gets healthy gates' transactions aborted and their producers
	// fenced whenever a peer crashes.
	if c.Delivery.value() == consume.ExactlyOnce && (c.TransactionTimeout <= c.KafkaRebalanceTimeout || c.TransactionTimeout <= c.KafkaSessionTimeout) {
		bad("TRANSACTION_TIMEOUT", fmt.Sprintf("a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (%s) and GATE_KAFKA_SESSION_TIMEOUT (%s): "+
			"a transaction's end waits out a rebalance, which waits out a dead member's session", c.KafkaRebalanceTimeout, c.KafkaSessionTimeout))
	}
	// A gate waiting behind a rebalance is not stuck; one not ready is restarted later.
	if c.StallNotReady > 0 && c.StallNotReady <= c.KafkaRebalanceTimeout {
		bad("STALL_NOT_READY", fmt.Sprintf("0 (off) or a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (%s), the longest a healthy gate waits behind a rebalance", c.KafkaRebalanceTimeout))
	}
	if c.StallRestart > 0 && c.StallRestart <= c.StallNotReady {
		bad("STALL_RESTART", fmt.Sprintf("0 (off) or a duration longer than GATE_STALL_NOT_READY (%s)", c.StallNotReady))
	}
	// A tick as long as the window would let a whole epoch pass between two writes.
	if c.TickInterval >= c.Window {
		bad("TICK_INTERVAL", fmt.Sprintf("a duration shorter than GATE_WINDOW (%s)", c.Window))
	}
	// Each further limit needs its own epochs, and a tick per epoch at least.
	for _, e := range c.Limits {
		if e.Window == c.Window {
			bad("LIMITS", fmt.Sprintf("windows other than GATE_WINDOW (%s): each limit needs its own", c.Window))
			break
		}
		if e.Window <= c.TickInterval {
			bad("LIMITS", fmt.Sprintf("windows longer than GATE_TICK_INTERVAL (%s)", c.TickInterval))
			break
		}
	}
	// Set without exactly-once they would be ignored: most likely GATE_DELIVERY is missing.
	if c.TransactionalID != "" && c.Delivery.value() != consume.ExactlyOnce {
		bad("TRANSACTIONAL_ID", "unset unless GATE_DELIVERY=exactly-once")
	}
	if c.EventTimeFrom.String() != "timestamp" && c.Clock.Clock != limit.EventClock {
		bad("EVENT_TIME_FROM", "timestamp unless GATE_CLOCK=event")
	}
	// The event clock keeps a window of state per window back to GATE_MAX_EVENT_AGE.
	if c.Clock.Clock == limit.EventClock {
		shortest := c.Window
		for _, e := range c.Limits {
			shortest = min(shortest, e.Window)
		}
		if limit.CheckEventAge(c.MaxEventAge, shortest) != nil {
			bad("MAX_EVENT_AGE", fmt.Sprintf("a duration of at most %d of the shortest window (%s)", limit.MaxEventWindows, shortest))
		}
	}
	// Reads happen on ticks: a sync interval shorter than a tick could not be honoured.
	if c.SyncInterval < c.TickInterval {
		bad("SYNC_INTERVAL", fmt.Sprintf("a duration no shorter than GATE_TICK_INTERVAL (%s)", c.TickInterval))
	}
	return p
}

// shown is the value of variable key as an error shows it: secrets and passwords
// redacted by their types' String.
func (c Config) shown(key string) string {
	for _, f := range configFields() {
		if f.key == key {
			return fmt.Sprint(reflect.ValueOf(c).FieldByIndex(f.index).Interface())
		}
	}
	return ""
}

// HTTPShutdownTimeout bounds waiting for in-flight scrapes and probes at shutdown; they
// are short, and the tick's final flush should not wait behind a stuck client.
const HTTPShutdownTimeout = 5 * time.Second

// ShutdownBound is the longest a shutdown can take, whatever hangs: the consumer's drain
// (GATE_SHUTDOWN_TIMEOUT), its final commit and its leave (GATE_REVOKE_TIMEOUT each), the
// tick's final flush (sync.DefaultFlushTimeout) and the HTTP server's close. The gate logs
// it at start (shutdown_bound); the chart's terminationGracePeriodSeconds (TestGracePeriod)
// and docker-compose's stop_grace_period (TestComposeStopGracePeriod) are held to it.
func (c Config) ShutdownBound() time.Duration {
	return c.ShutdownTimeout + 2*c.RevokeTimeout + gatesync.DefaultFlushTimeout + HTTPShutdownTimeout
}

// KeyTTL returns the expiry to set on counter keys: GATE_REDIS_KEY_TTL raised to 2 × window
// (0 means exactly that). clamped reports a non-zero setting that was raised, which the
// caller logs: the operator asked for something else.
func (c Config) KeyTTL() (ttl time.Duration, clamped bool) {
	floor := 2 * c.Window
	if c.RedisKeyTTL >= floor {
		return c.RedisKeyTTL, false
	}
	return floor, c.RedisKeyTTL != 0
}

// LimitConfig maps Config to the limiter's settings. Every field is set explicitly, so
// none falls back to a library default the operator did not see in `gate env`.
func (c Config) LimitConfig() limit.Config {
	hot := c.HotEveryTick
	return limit.Config{
		Window:            c.Window,
		Threshold:         c.Threshold,
		Overrides:         maps.Clone(map[string]int64(c.Overrides)),
		Mode:              c.LimitMode,
		SyncInterval:      c.SyncInterval,
		HotEveryTick:      &hot,
		PendingReadShare:  c.PendingReadShare,
		SyncFloor:         c.SyncFloor,
		ColdWriteInterval: c.ColdWriteInterval,
		DivertHold:        c.DivertHold.limit(c.Clock.Clock),
		DivertRelease:     c.divertRelease(),
		Capacity:          c.CacheCapacity,
		TTL:               c.CacheTTL,
		IdleTimeout:       c.CacheIdleTimeout,
		Clock:             c.Clock.Clock,
		MaxEventAge:       c.MaxEventAge,
		Adaptive:          c.adaptive(),
	}
}

// OverridesConfig maps Config to the live overrides' settings; the caller adds Extra.
// The timeout bounds a whole read of the hash, in many short commands (each also bounded
// by GATE_REDIS_READ_TIMEOUT), so it is no shorter than overrides.DefaultTimeout.
func (c Config) OverridesConfig() overrides.Config {
	return overrides.Config{
		Key:        overrides.Key(c.RedisPrefix),
		Base:       maps.Clone(map[string]int64(c.Overrides)),
		Interval:   c.OverridesRefresh,
		Timeout:    max(overrides.DefaultTimeout, c.RedisDialTimeout+c.RedisWriteTimeout+c.RedisReadTimeout),
		MaxEntries: c.OverridesMaxEntries,
	}
}

// ExtraLimitConfigs returns one limiter configuration per GATE_LIMITS entry: the primary's
// settings with the entry's window and threshold, and the overrides scaled by
// threshold / GATE_THRESHOLD.
func (c Config) ExtraLimitConfigs() []limit.Config {
	out := make([]limit.Config, len(c.Limits))
	for i, e := range c.Limits {
		lc := c.LimitConfig()
		lc.Window, lc.Threshold = e.Window, e.Threshold
		lc.Overrides = overrides.Scale(lc.Overrides, c.LimitFactor(i))
		lc.Adaptive = nil // adaptive thresholds are the primary limit's only
		out[i] = lc
	}
	return out
}

// LimitFactor is GATE_LIMITS entry i's threshold over GATE_THRESHOLD: what an override
// is multiplied by in that limit.
func (c Config) LimitFactor(i int) float64 {
	return float64(c.Limits[i].Threshold) / float64(c.Threshold)
}

// LimitKeyPrefix is the Redis key prefix of GATE_LIMITS entry i: {prefix}:w{seconds}.
func (c Config) LimitKeyPrefix(i int) string {
	return c.RedisPrefix + ":w" + strconv.FormatInt(int64(c.Limits[i].Window/time.Second), 10)
}

// SyncConfig maps Config to the tick's settings.
func (c Config) SyncConfig() gatesync.Config {
	ttl, _ := c.KeyTTL()
	return gatesync.Config{
		TickInterval:     c.TickInterval,
		Mode:             c.RedisMode.value(),
		KeyPrefix:        c.RedisPrefix,
		KeyTTL:           ttl,
		KeysPerCommand:   c.KeysPerCommand,
		KeysPerTick:      c.KeysPerTick,
		MaxPendingWrites: c.MaxPendingWrites,
		MaxReadsPerTick:  c.MaxReadsPerTick,
	}
}

// RouteConfig maps Config to the router's settings.
func (c Config) RouteConfig() route.Config {
	return route.Config{
		KeyFrom:         c.KeyFrom.KeyFrom,
		AcceptedTopic:   c.AcceptedTopic,
		OverflowTopic:   c.OverflowTopic,
		DeadLetterTopic: c.DeadLetterTopic,
		ForceOverflow:   slices.Clone(c.ForceOverflow),
		DryRun:          c.DryRun,
		OverflowKeepKey: c.OverflowKeepKey,
		MaxKeyBytes:     c.MaxKeyBytes,
		ValidateJSON:    c.ValidateJSON,
		Cost:            c.Cost.Cost,
		EventTimeFrom:   c.EventTimeFrom.EventTimeFrom,
	}
}

// Reload is what the TLS files' reloaders (internal/tlsreload) take from the caller of
// ConsumeConfig and DialRedis. The zero value reads the files by the wall clock, logs
// nothing and registers no metrics.
type Reload struct {
	Clock clock.Clock           // paces the reads of the files; clock.Real if nil
	Log   *slog.Logger          // the reload and warning lines; none if nil
	Reg   prometheus.Registerer // gate_tls_* metrics; none if nil
}

func (r Reload) options(target string) tlsreload.Options {
	return tlsreload.Options{Target: target, Clock: r.Clock, Log: r.Log, Reg: r.Reg}
}

// kafkaDialTimeout bounds opening a connection to a broker, TLS handshake included:
// franz-go's own default, which a dialer of ours replaces.
const kafkaDialTimeout = 10 * time.Second

// ConsumeConfig maps Config to the consumer's settings, with the TLS and SASL options
// built from the files and credentials named; TLS files are read again when they change
// (see Reload). Its errors name the variable at fault.
func (c Config) ConsumeConfig(r Reload) (consume.Config, error) {
	opts := []kgo.Opt{
		kgo.ClientID(c.KafkaClientID),
		kgo.SessionTimeout(c.KafkaSessionTimeout),
		kgo.RebalanceTimeout(c.KafkaRebalanceTimeout),
		kgo.FetchMaxWait(c.KafkaFetchMaxWait),
	}
	tlsOpt, err := c.kafkaTLS(r)
	if err != nil {
		return consume.Config{}, Problems{err} // a configuration error: exit status 2
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	if m := c.kafkaSASL(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return consume.Config{
		Brokers:            slices.Clone(c.KafkaBrokers),
		InputTopic:         c.InputTopic,
		GroupID:            c.GroupID,
		GroupProtocol:      c.KafkaGroupProtocol.value(),
		StartOffset:        c.KafkaStartOffset.value(),
		MaxPollRecords:     c.MaxPollRecords,
		CommitInterval:     c.CommitInterval,
		ProduceRetries:     c.ProduceRetries,
		MaxBufferedRecords: c.MaxBufferedRecords,
		MaxBufferedBytes:   c.MaxBufferedBytes,
		MaxMessageBytes:    c.KafkaMaxMessageBytes,
		RevokeTimeout:      c.RevokeTimeout,
		ShutdownTimeout:    c.ShutdownTimeout,
		Delivery:           c.Delivery.value(),
		TransactionalID:    c.transactionalID(),
		TransactionTimeout: c.TransactionTimeout,
		OnUndeliverable:    c.OnUndeliverable.value(),
		StallNotReady:      orDisabled(c.StallNotReady),
		StallRestart:       orDisabled(c.StallRestart),
		OnDataLoss:         c.OnDataLoss.value(),
		OutputTopics:       []string{c.AcceptedTopic, c.OverflowTopic, c.DeadLetterTopic},
		ClientOpts:         opts,
	}, nil
}

// transactionalID is GATE_TRANSACTIONAL_ID; empty unless exactly-once. Its default,
// GATE_GROUP_ID-hostname (unique per pod, as a pod's host name is its name), is set by
// the caller, who knows the host (cmd/gate's serve): with none, the consumer refuses
// exactly-once delivery with an error that says so.
func (c Config) transactionalID() string {
	if c.Delivery.value() != consume.ExactlyOnce {
		return ""
	}
	return c.TransactionalID
}

// validTransactionalID keeps ids to what shows plainly in broker logs and tools.
// Those are a topic name's characters, so the router's check decides.
func validTransactionalID(s string) bool { return len(s) <= 200 && route.CheckTopic(s) == nil }

// kafkaTLS returns the client option that dials the brokers over TLS, or nil when TLS
// is off. With a CA or certificate file, a dialer of ours makes each connection with the
// files' current contents (tlsreload), checking each broker's certificate against
// GATE_KAFKA_TLS_SERVER_NAME, else the broker's host name, as franz-go's own TLS dialer
// does; without one, franz-go's dialer and the system's CAs.
func (c Config) kafkaTLS(r Reload) (kgo.Opt, error) {
	if !c.KafkaTLS && c.KafkaTLSCAFile == "" && c.KafkaTLSCertFile == "" && c.KafkaTLSServerName == "" {
		return nil, nil
	}
	if c.KafkaTLSCAFile == "" && c.KafkaTLSCertFile == "" {
		return kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.KafkaTLSServerName}), nil
	}
	rl, err := tlsreload.New(tlsreload.Files{
		CAFile: c.KafkaTLSCAFile, CertFile: c.KafkaTLSCertFile, KeyFile: c.KafkaTLSKeyFile,
		CAVar: envPrefix + "_KAFKA_TLS_CA_FILE", CertVar: envPrefix + "_KAFKA_TLS_CERT_FILE", KeyVar: envPrefix + "_KAFKA_TLS_KEY_FILE",
	}, r.options("kafka"))
	if err != nil {
		return nil, err
	}
	return kgo.Dialer(rl.DialContext(&net.Dialer{Timeout: kafkaDialTimeout}, c.KafkaTLSServerName)), nil
}

// kafkaSASL returns the SASL mechanism, or nil for none.
func (c Config) kafkaSASL() sasl.Mechanism {
	user, pass := c.KafkaSASLUsername, string(c.KafkaSASLPassword)
	switch c.KafkaSASLMechanism {
	case "plain":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
	return nil
}

// RedisOptions maps Config to the Redis connection settings. Its errors name the
// variable at fault.
func (c Config) RedisOptions() (gatesync.RedisOptions, error) {
	o := gatesync.RedisOptions{
		ReadTimeout:  c.RedisReadTimeout,
		WriteTimeout: c.RedisWriteTimeout,
		DialTimeout:  c.RedisDialTimeout,
	}
	if c.RedisTLSCAFile != "" {
		pool, err := loadCAs("REDIS_TLS_CA_FILE", c.RedisTLSCAFile)
		if err != nil {
			return o, Problems{err} // a configuration error: exit status 2
		}
		o.RootCAs = pool
	}
	return o, nil
}

// DialRedis returns the clients GATE_REDIS_MODE calls for: one per URL in standalone
// mode, else one cluster or failover client. None connects yet.
//
// GATE_REDIS_USERNAME and GATE_REDIS_PASSWORD, when set, replace the URLs' user and
// password (see dialURLs). With rediss:// URLs and a GATE_REDIS_TLS_* file, every
// connection (to the sentinels too, in sentinel mode) presents the current client
// certificate and checks the server against the current CAs and the URL's host name,
// the files being read again when they change (see Reload).
func (c Config) DialRedis(o gatesync.RedisOptions, r Reload) ([]redis.UniversalClient, error) {
	var u []redis.UniversalClient
	urls := c.dialURLs()
	switch c.RedisMode.value() {
	case gatesync.ModeCluster:
		cc, err := gatesync.DialCluster(urls, o)
		if err != nil {
			return nil, err
		}
		u = []redis.UniversalClient{cc}
	case gatesync.ModeSentinel:
		fc, err := gatesync.DialSentinel(string(c.RedisSentinelMaster), c.RedisSentinelAddrs, urls[0], o)
		if err != nil {
			return nil, err
		}
		u = []redis.UniversalClient{fc}
	default:
		cs, err := gatesync.Dial(urls, o)
		if err != nil {
			return nil, err
		}
		for _, x := range cs {
			u = append(u, x)
		}
	}
	if err := c.redisTLS(u, r); err != nil {
		for _, x := range u {
			_ = x.Close()
		}
		return nil, Problems{err} // a configuration error: exit status 2
	}
	return u, nil
}

// dialURLs returns GATE_REDIS_URLS with GATE_REDIS_USERNAME and GATE_REDIS_PASSWORD, each
// when set, in place of the user and password the URLs hold; net/url escapes them, and
// go-redis unescapes them, so a password need not be URL-safe. A URL that does not parse
// is returned as is, for the dialer's error (Load has rejected it already).
func (c Config) dialURLs() []string {
	if c.RedisUsername == "" && c.RedisPassword == "" {
		return c.RedisURLs
	}
	out := make([]string, len(c.RedisURLs))
	for i, s := range c.RedisURLs {
		pu, err := url.Parse(s)
		if err != nil {
			out[i] = s
			continue
		}
		var user, pass string
		if pu.User != nil {
			user = pu.User.Username()
			pass, _ = pu.User.Password()
		}
		if c.RedisUsername != "" {
			user = c.RedisUsername
		}
		if c.RedisPassword != "" {
			pass = string(c.RedisPassword)
		}
		pu.User = url.UserPassword(user, pass)
		out[i] = pu.String()
	}
	return out
}

// redisTLS puts the GATE_REDIS_TLS_* files' reloader on the TLS configuration of every
// client that has one (rediss:// URLs). go-redis reads a client's TLS configuration at
// each dial, and shares one between a cluster's nodes and between a failover client's
// primary and sentinels, so changing it before the first dial covers every connection.
func (c Config) redisTLS(clients []redis.UniversalClient, r Reload) error {
	if c.RedisTLSCAFile == "" && c.RedisTLSCertFile == "" {
		return nil
	}
	var cfgs []*tls.Config
	for _, x := range clients {
		var tc *tls.Config
		switch x := x.(type) {
		case *redis.Client:
			tc = x.Options().TLSConfig
		case *redis.ClusterClient:
			tc = x.Options().TLSConfig
		}
		if tc != nil {
			cfgs = append(cfgs, tc)
		}
	}
	if len(cfgs) == 0 {
		return nil // redis:// URLs only: the files are not used
	}
	rl, err := tlsreload.New(tlsreload.Files{
		CAFile: c.RedisTLSCAFile, CertFile: c.RedisTLSCertFile, KeyFile: c.RedisTLSKeyFile,
		CAVar: envPrefix + "_REDIS_TLS_CA_FILE", CertVar: envPrefix + "_REDIS_TLS_CERT_FILE", KeyVar: envPrefix + "_REDIS_TLS_KEY_FILE",
	}, r.options("redis"))
	if err != nil {
		return err
	}
	for _, tc := range cfgs {
		rl.Apply(tc)
	}
	return nil
}

// RedisLabels names DialRedis's clients, passwords redacted, for logs and readiness.
func (c Config) RedisLabels() []string {
	var urls []string
	for _, u := range c.RedisURLs {
		urls = append(urls, redactURL(u))
	}
	switch c.RedisMode.value() {
	case gatesync.ModeCluster:
		return []string{"cluster " + strings.Join(urls, ",")}
	case gatesync.ModeSentinel:
		return []string{"sentinel master " + string(c.RedisSentinelMaster) + " via " + strings.Join(c.RedisSentinelAddrs, ",")}
	}
	return urls
}

// loadCAs reads a PEM file of CA certificates named by GATE_<key>.
func loadCAs(key, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("GATE_%s=%q: reading the CA certificates: %w", key, file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("GATE_%s=%q: want PEM certificates, found none", key, file)
	}
	return pool, nil
}

// --- Field types with their own syntax -------------------------------------------------

// The field types of this package are envconfig Decoders; keyFrom, cost, eventTimeFrom,
// clockSetting and limit.Mode are read by their packages' UnmarshalText, which
// envconfig.Process calls as well.
var _ = []envconfig.Decoder{
	(*overrideList)(nil), (*limitList)(nil), (*brokerList)(nil), (*startOffset)(nil),
	(*delivery)(nil), (*onUndeliverable)(nil), (*onDataLoss)(nil), (*teamList)(nil),
	(*saslMechanism)(nil), (*redisMode)(nil), (*sentinelAddrs)(nil), (*sentinelMaster)(nil),
	(*redisURLs)(nil), (*logLevel)(nil), (*logFormat)(nil),
}

// wanter is a field type that says what a valid value looks like. Its parse errors are
// shown to the operator (they say which part is wrong); other types' are not (they are
// strconv's, and "want a duration such as 60s" says more).
type wanter interface{ want() string }

// redacter is a field type whose raw value must not be repeated in errors as is.
type redacter interface{ redact(string) string }

// overrideList is GATE_OVERRIDES: team=limit pairs separated by commas.
type overrideList map[string]int64

func (overrideList) want() string {
	return fmt.Sprintf("team=limit pairs separated by commas such as team1=5000,team2=200000, each limit from 1 to %d", int64(limit.MaxThreshold))
}

// Decode parses the pairs strictly: a mistyped override silently ignored would give a
// team the default threshold, so every malformed entry is an error.
func (o *overrideList) Decode(text string) error {
	m := make(overrideList)
	for i, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		team, lim, ok := strings.Cut(entry, "=")
		team, lim = strings.TrimSpace(team), strings.TrimSpace(lim)
		switch {
		case !ok:
			return fmt.Errorf("entry %q has no '='", entry)
		case team == "":
			return fmt.Errorf("entry %q has no team", entry)
		}
		if _, dup := m[team]; dup {
			return fmt.Errorf("team %q appears twice", team)
		}
		n, err := strconv.ParseInt(lim, 10, 64)
		if err != nil || n < 1 || n > limit.MaxThreshold {
			return fmt.Errorf("team %q: limit %q is not a whole number from 1 to %d", team, lim, int64(limit.MaxThreshold))
		}
		m[team] = n
	}
	*o = m
	return nil
}

// extraLimit is one entry of GATE_LIMITS.
type extraLimit struct {
	Window    time.Duration
	Threshold int64
}

// limitList is GATE_LIMITS: window:threshold pairs separated by commas.
type limitList []extraLimit

func (limitList) want() string {
	return fmt.Sprintf("window:threshold pairs separated by commas such as 1h:20000000,24h:200000000, each window a whole number of seconds and each threshold from 1 to %d", int64(limit.MaxThreshold))
}

// Decode parses the pairs strictly; the rules between values (distinct windows,
// longer than a tick) are checked with the other variables.
func (l *limitList) Decode(text string) error {
	var out limitList
	for i, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		w, thr, ok := strings.Cut(entry, ":")
		if !ok {
			return fmt.Errorf("entry %q has no ':'", entry)
		}
		d, err := time.ParseDuration(strings.TrimSpace(w))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return fmt.Errorf("entry %q: window %q is not a whole number of seconds such as 1h", entry, w)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(thr), 10, 64)
		if err != nil || n < 1 || n > limit.MaxThreshold {
			return fmt.Errorf("entry %q: threshold %q is not a whole number from 1 to %d", entry, thr, int64(limit.MaxThreshold))
		}
		for _, e := range out {
			if e.Window == d {
				return fmt.Errorf("window %s appears twice", d)
			}
		}
		out = append(out, extraLimit{Window: d, Threshold: n})
	}
	*l = out
	return nil
}

// String is the list as GATE_LIMITS spells it.
func (l limitList) String() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Window.String() + ":" + strconv.FormatInt(e.Threshold, 10)
	}
	return strings.Join(parts, ",")
}

// brokerList is GATE_KAFKA_BROKERS: host:port entries separated by commas.
type brokerList []string

func (brokerList) want() string {
	return "host:port entries separated by commas such as kafka-1:9092,kafka-2:9092"
}

func (b *brokerList) Decode(text string) error {
	var out brokerList
	for i, s := range strings.Split(text, ",") {
		s = strings.TrimSpace(s)
		host, port, err := net.SplitHostPort(s)
		switch {
		case s == "":
			return fmt.Errorf("entry %d is empty", i+1)
		case err != nil || host == "" || !validPort(port) || port == "0":
			return fmt.Errorf("entry %q is not host:port", s)
		}
		out = append(out, s)
	}
	*b = out
	return nil
}

// startOffset is GATE_KAFKA_START_OFFSET.
type startOffset string

func (startOffset) want() string { return "earliest or latest" }

func (s *startOffset) Decode(text string) error {
	switch v := strings.ToLower(text); v {
	case "earliest", "latest":
		*s = startOffset(v)
		return nil
	}
	return fmt.Errorf("unknown start offset %q", text)
}

func (s startOffset) value() consume.StartOffset {
	if s == "latest" {
		return consume.StartLatest
	}
	return consume.StartEarliest
}

// keyFrom is GATE_KEY_FROM.
type keyFrom struct{ route.KeyFrom }

func (keyFrom) want() string { return "json:FIELD, json:FIELD+FIELD, header:NAME or key" }

// delivery is GATE_DELIVERY.
type delivery string

func (delivery) want() string {
	return consume.AtLeastOnce.String() + " or " + consume.ExactlyOnce.String()
}

// Decode takes the names consume.ParseDelivery reads, in any case.
func (d *delivery) Decode(text string) error {
	v, err := consume.ParseDelivery(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown delivery %q", text)
	}
	*d = delivery(v.String())
	return nil
}

func (d delivery) value() consume.Delivery {
	v, _ := consume.ParseDelivery(string(d))
	return v
}

// groupProtocol is GATE_KAFKA_GROUP_PROTOCOL.
type groupProtocol string

func (groupProtocol) want() string {
	return consume.GroupClassic.String() + " or " + consume.GroupConsumer.String()
}

// Decode takes the names consume.ParseGroupProtocol reads, in any case.
func (g *groupProtocol) Decode(text string) error {
	v, err := consume.ParseGroupProtocol(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown group protocol %q", text)
	}
	*g = groupProtocol(v.String())
	return nil
}

func (g groupProtocol) value() consume.GroupProtocol {
	v, _ := consume.ParseGroupProtocol(string(g))
	return v
}

// orDisabled maps a setting's 0 (off) to the consumer's negative (disabled), its zero
// meaning the default.
func orDisabled(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// onUndeliverable is GATE_ON_UNDELIVERABLE.
type onUndeliverable string

func (onUndeliverable) want() string { return "stop or skip" }

func (u *onUndeliverable) Decode(text string) error {
	v := strings.ToLower(text)
	if _, err := consume.ParseUndeliverable(v); err != nil {
		return fmt.Errorf("unknown policy %q", text)
	}
	*u = onUndeliverable(v)
	return nil
}

func (u onUndeliverable) value() consume.Undeliverable {
	p, _ := consume.ParseUndeliverable(string(u))
	return p
}

// onDataLoss is GATE_ON_DATA_LOSS.
type onDataLoss string

func (onDataLoss) want() string { return "continue or stop" }

func (d *onDataLoss) Decode(text string) error {
	v := strings.ToLower(text)
	if _, err := consume.ParseDataLoss(v); err != nil {
		return fmt.Errorf("unknown policy %q", text)
	}
	*d = onDataLoss(v)
	return nil
}

func (d onDataLoss) value() consume.DataLoss {
	p, _ := consume.ParseDataLoss(string(d))
	return p
}

// divertRelease is GATE_DIVERT_RELEASE for the limiter: 1 under the event clock, which
// keeps no holds.
func (c Config) divertRelease() float64 {
	if c.Clock.Clock == limit.EventClock {
		return 1
	}
	return c.DivertRelease
}

// validateAdaptive checks the GATE_ADAPTIVE_* values, whatever the mode (a bad value is
// bad before it is used), and what adaptive mode needs of the rest.
func (c Config) validateAdaptive(bad func(key, want string)) Problems {
	if !(c.AdaptiveFactor > spike.DefaultClip) || c.AdaptiveFactor > 1000 {
		bad("ADAPTIVE_FACTOR", "a number above 1.5 and at most 1000 such as 4")
	}
	if c.AdaptiveFloor < 1 || c.AdaptiveFloor > limit.MaxThreshold {
		bad("ADAPTIVE_FLOOR", fmt.Sprintf("a whole number from 1 to %d such as 100", int64(limit.MaxThreshold)))
	}
	if c.AdaptiveCeiling != 0 && (c.AdaptiveCeiling < c.AdaptiveFloor || c.AdaptiveCeiling > limit.MaxThreshold) {
		bad("ADAPTIVE_CEILING", fmt.Sprintf("0 for none, or a whole number from GATE_ADAPTIVE_FLOOR (%d) to %d", c.AdaptiveFloor, int64(limit.MaxThreshold)))
	}
	if c.AdaptiveHalfLife < c.Window {
		bad("ADAPTIVE_HALF_LIFE", fmt.Sprintf("a duration of at least GATE_WINDOW (%s) such as 72h", c.Window))
	}
	if lo := spike.MaxFoldEvery + 2*c.Window; c.AdaptiveMaxSpike < lo || c.AdaptiveMaxSpike > 7*24*time.Hour {
		bad("ADAPTIVE_MAX_SPIKE", fmt.Sprintf("a duration from %s (an hour and two GATE_WINDOWs) to 168h such as 3h", lo))
	}
	if c.AdaptiveMinHistory < c.Window {
		bad("ADAPTIVE_MIN_HISTORY", fmt.Sprintf("a duration of at least GATE_WINDOW (%s) such as 24h", c.Window))
	}
	if c.ThresholdMode != adaptiveMode {
		return nil
	}
	switch {
	case c.Window > time.Hour || time.Hour%c.Window != 0:
		bad("THRESHOLD_MODE", fmt.Sprintf("static unless GATE_WINDOW (%s) divides an hour, such as 60s (adaptive learns per hour of the day)", c.Window))
	case c.Clock.Clock == limit.EventClock:
		bad("THRESHOLD_MODE", "static with GATE_CLOCK=event (learned thresholds are kept under the wall clock only)")
	}
	return nil
}

// adaptive is the learner's configuration in adaptive mode, nil in static mode.
func (c Config) adaptive() *spike.Config {
	if c.ThresholdMode != adaptiveMode {
		return nil
	}
	return &spike.Config{
		Window:        c.Window,
		Factor:        c.AdaptiveFactor,
		Floor:         float64(c.AdaptiveFloor),
		Ceiling:       float64(c.AdaptiveCeiling),
		LevelHalfLife: c.AdaptiveHalfLife,
		MinHistory:    c.AdaptiveMinHistory,
		MaxSpike:      c.AdaptiveMaxSpike,
	}
}

// thresholdMode is GATE_THRESHOLD_MODE.
type thresholdMode string

const (
	staticMode   thresholdMode = "static"
	adaptiveMode thresholdMode = "adaptive"
)

func (thresholdMode) want() string { return "static or adaptive" }

func (m *thresholdMode) Decode(text string) error {
	switch s := thresholdMode(strings.ToLower(strings.TrimSpace(text))); s {
	case staticMode, adaptiveMode:
		*m = s
		return nil
	}
	return fmt.Errorf("unknown threshold mode %q", text)
}

// divertHold is GATE_DIVERT_HOLD: unset (one window), 0 (no hold) or a duration.
type divertHold struct {
	d   time.Duration
	set bool
}

func (divertHold) want() string { return "a duration such as 60s, or 0 for no hold" }

// Decode takes a duration; "0" is no hold.
func (h *divertHold) Decode(text string) error {
	if text == "" {
		*h = divertHold{}
		return nil
	}
	d, err := time.ParseDuration(text)
	if err != nil && text != "0" {
		return fmt.Errorf("not a duration: %q", text)
	}
	*h = divertHold{d: d, set: true}
	return nil
}

// String is the value as `gate env` shows it.
func (h divertHold) String() string {
	if !h.set {
		return ""
	}
	return h.d.String()
}

// limit maps the setting to limit.Config.DivertHold: 0 (the window) when unset, negative
// for none; and none under the event clock, which keeps no holds.
func (h divertHold) limit(clk limit.Clock) time.Duration {
	switch {
	case clk == limit.EventClock || h.set && h.d == 0:
		return -1
	case !h.set:
		return 0
	}
	return h.d
}

// clockSetting is GATE_CLOCK.
type clockSetting struct{ limit.Clock }

func (clockSetting) want() string { return "wall or event" }

// eventTimeFrom is GATE_EVENT_TIME_FROM.
type eventTimeFrom struct{ route.EventTimeFrom }

func (eventTimeFrom) want() string { return "timestamp or json:FIELD" }

// cost is GATE_COST.
type cost struct{ route.Cost }

func (cost) want() string { return "events or bytes" }

// teamList is GATE_FORCE_OVERFLOW: team names separated by commas.
type teamList []string

func (teamList) want() string { return "team names separated by commas such as team1,team2" }

func (l *teamList) Decode(text string) error {
	var out teamList
	seen := map[string]bool{}
	for i, s := range strings.Split(text, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			return fmt.Errorf("entry %d is empty", i+1)
		case seen[s]:
			return fmt.Errorf("team %q appears twice", s)
		}
		seen[s] = true
		out = append(out, s)
	}
	*l = out
	return nil
}

// saslMechanism is GATE_KAFKA_SASL_MECHANISM.
type saslMechanism string

func (saslMechanism) want() string { return "none, plain, scram-sha-256 or scram-sha-512" }

func (m *saslMechanism) Decode(text string) error {
	switch s := strings.ToLower(text); s {
	case "none", "plain", "scram-sha-256", "scram-sha-512":
		*m = saslMechanism(s)
		return nil
	}
	return fmt.Errorf("unknown mechanism %q", text)
}

// secret is a value never repeated in errors or logs.
type secret string

func (secret) redact(string) string { return "xxxxx" }

func (s secret) String() string {
	if s == "" {
		return ""
	}
	return "xxxxx"
}

// LogValue keeps a secret out of structured logs too.
func (s secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// redisMode is GATE_REDIS_MODE.
type redisMode string

func (redisMode) want() string {
	return fmt.Sprintf("%s, %s or %s", gatesync.ModeStandalone, gatesync.ModeCluster, gatesync.ModeSentinel)
}

// Decode takes the names gatesync.ParseMode reads, in any case.
func (m *redisMode) Decode(text string) error {
	v, err := gatesync.ParseMode(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown mode %q", text)
	}
	*m = redisMode(v)
	return nil
}

func (m redisMode) value() gatesync.Mode { return gatesync.Mode(m) }

// sentinelAddrs is GATE_REDIS_SENTINEL_ADDRS: host:port entries, checked like brokers.
type sentinelAddrs []string

func (sentinelAddrs) want() string {
	return "host:port entries separated by commas such as sentinel-1:26379,sentinel-2:26379"
}

func (a *sentinelAddrs) Decode(text string) error {
	var b brokerList
	if err := b.Decode(text); err != nil {
		return err
	}
	*a = sentinelAddrs(b)
	return nil
}

// sentinelMaster is GATE_REDIS_SENTINEL_MASTER: a name as sentinel.conf takes it, one word.
type sentinelMaster string

func (sentinelMaster) want() string { return "a master name without spaces or commas such as mymaster" }

func (m *sentinelMaster) Decode(text string) error {
	if strings.ContainsAny(text, " \t,") {
		return fmt.Errorf("name %q has a space or comma", text)
	}
	*m = sentinelMaster(text)
	return nil
}

// redisURLs is GATE_REDIS_URLS. Its String redacts passwords, so a Config can be logged.
type redisURLs []string

func (redisURLs) want() string {
	return "redis:// or rediss:// URLs separated by commas such as redis://127.0.0.1:6379/0"
}

// Decode checks every URL with the same parser Dial uses, and rejects an instance
// listed twice: the tick needs distinct instances, and a duplicate would count a team's
// events on two keys without either seeing the sum.
func (u *redisURLs) Decode(text string) error {
	var out redisURLs
	seen := make(map[string]int)
	for i, s := range strings.Split(text, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		opt, err := gatesync.ParseURL(s)
		if err != nil {
			return err // names the URL with its password redacted
		}
		id := fmt.Sprintf("%s/%d", opt.Addr, opt.DB)
		if j, dup := seen[id]; dup {
			return fmt.Errorf("entries %d and %d are the same instance (%s)", j+1, i+1, id)
		}
		seen[id] = i
		out = append(out, s)
	}
	*u = out
	return nil
}

func (redisURLs) redact(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// String returns the URLs with passwords replaced by "xxxxx".
func (u redisURLs) String() string { return u.redact(strings.Join(u, ",")) }

func redactURL(s string) string {
	pu, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return "(unparsable URL)" // it may hold a password
		}
		return s
	}
	return pu.Redacted()
}

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

// --- Reading fields by their tags ------------------------------------------------------

// configField is one variable of Config, from its tags.
type configField struct {
	index []int
	key   string // GATE_WINDOW
	def   string
}

// configFields lists Config's variables in declaration order. The key is built as
// envconfig builds it for a field with an envconfig tag: prefix, "_", tag, upper-cased.
func configFields() []configField {
	t := reflect.TypeFor[Config]()
	out := make([]configField, 0, t.NumField())
	for _, sf := range reflect.VisibleFields(t) {
		name := sf.Tag.Get("envconfig")
		if name == "" {
			panic(fmt.Sprintf("gate: Config.%s has no envconfig tag", sf.Name)) // caught by the tests
		}
		out = append(out, configField{
			index: sf.Index,
			key:   strings.ToUpper(envPrefix + "_" + name),
			def:   sf.Tag.Get("default"),
		})
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// noVariable is the name under which decode hands a value to envconfig.Process: no
// environment variable can have it, as a name ends at its first '='.
const noVariable = "="

// decode parses s into v, a field of Config, with envconfig.Process: it calls the
// field type's Decode (or UnmarshalText) or parses a duration, number or boolean. Process
// reads the process environment only, so the value reaches it as the default of a
// one-field spec whose variable cannot be set; and one field at a time, as Process stops
// at the first error. Two rules are the gate's own: whole numbers are decimal (Process
// would read "010" as 8 and "0x10" as 16), and numbers are finite.
func decode(v reflect.Value, s string) error {
	_, decoder := v.Addr().Interface().(envconfig.Decoder)
	_, unmarshaler := v.Addr().Interface().(encoding.TextUnmarshaler)
	if v.CanInt() && v.Type() != durationType && !decoder && !unmarshaler {
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		s = strconv.FormatInt(n, 10) // "010" as 10, which base 0 reads as 10 too
	}
	spec := reflect.New(reflect.StructOf([]reflect.StructField{{
		Name: "V",
		Type: v.Type(),
		Tag:  reflect.StructTag(`envconfig:"` + noVariable + `" default:` + strconv.Quote(s)),
	}}))
	if err := envconfig.Process("", spec.Interface()); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return pe.Err // the type's own words; Process's name Go types
		}
		return err
	}
	got := spec.Elem().Field(0)
	if got.CanFloat() && (math.IsNaN(got.Float()) || math.IsInf(got.Float(), 0)) {
		return errors.New("not a finite number")
	}
	v.Set(got)
	return nil
}

// wantFor says, for an error message, what a valid value of v's type looks like.
func wantFor(v reflect.Value, def string) string {
	if w, ok := v.Addr().Interface().(wanter); ok {
		return w.want()
	}
	switch {
	case v.Type() == reflect.TypeFor[limit.Mode]():
		return "divert or cap"
	case v.Type() == durationType:
		if def == "" || def == "0" {
			def = "120s"
		}
		return "a duration such as " + def
	case v.CanInt():
		return "a whole number such as " + def
	case v.CanFloat():
		return "a number such as " + def
	case v.Kind() == reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func durationExample(key string) string {
	for _, f := range configFields() {
		if f.key == envPrefix+"_"+key && f.def != "0" && f.def != "" {
			return f.def
		}
	}
	return "1s"
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// --- Errors ----------------------------------------------------------------------------

// varError is one bad value: GATE_WINDOW="abc": want a duration such as 60s.
type varError struct {
	Key, Value string
	Detail     string // which part is wrong, when the type can tell
	Want       string
	Err        error // the parser's error, if any, for errors.Is/As
}

func (e *varError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s=%q: %s; want %s", e.Key, e.Value, e.Detail, e.Want)
	}
	return fmt.Sprintf("%s=%q: want %s", e.Key, e.Value, e.Want)
}

func (e *varError) Unwrap() error { return e.Err }

// unknownVarError is a GATE_ variable Config does not define.
type unknownVarError struct{ Name, Suggest string }

func (e *unknownVarError) Error() string {
	if e.Suggest != "" {
		return fmt.Sprintf("%s: unknown variable (did you mean %s?)", e.Name, e.Suggest)
	}
	return fmt.Sprintf("%s: unknown variable (`gate env` lists the known ones)", e.Name)
}

// problems collects every configuration error, so an operator fixes them in one round.
// It prints on one line: start-up failures are read in log lines, where a second line
// would come loose from the first.
type Problems []error

func (p *Problems) add(err error) { *p = append(*p, err) }

func (p Problems) Error() string {
	s := make([]string, len(p))
	for i, e := range p {
		s[i] = e.Error()
	}
	return "configuration: " + strings.Join(s, "; ")
}

func (p Problems) Unwrap() []error { return p }

// closest returns the candidate nearest to name by edit distance, if it is near enough to
// be a plausible typo.
func closest(name string, candidates []string) string {
	best, bestD := "", 4 // more than 3 edits away is not a typo
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// --- The variable table ----------------------------------------------------------------

// envTableTemplate renders Config's variables as a Markdown table. It runs on envconfig's
// own view of the struct (envconfig.Usaget), so the table shows the names envconfig derives.
const envTableTemplate = `| Variable | Default | Description |
| --- | --- | --- |
{{range .}}| ` + "`{{.Key}}`" + ` | {{default (.Tags.Get "default")}} | {{cell (.Tags.Get "desc")}} |
{{end}}`

// WriteEnvTable writes the Markdown table of every variable: name, default, description.
func WriteEnvTable(w io.Writer) error {
	tmpl, err := template.New("env").Funcs(template.FuncMap{
		"default": func(s string) string {
			if s == "" {
				return "*(empty)*"
			}
			return "`" + s + "`"
		},
		"cell": func(s string) string { return strings.ReplaceAll(s, "|", `\|`) },
	}).Parse(envTableTemplate)
	if err != nil {
		return fmt.Errorf("parsing the variable table template: %w", err)
	}
	if err := envconfig.Usaget(envPrefix, &Config{}, w, tmpl); err != nil {
		return fmt.Errorf("writing the variable table: %w", err)
	}
	return nil
}
