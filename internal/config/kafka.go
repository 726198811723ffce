package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/tlsreload"
)

// Kafka is Config's variables for the consumer and the router.
type Kafka struct {
	// Kafka and routing (internal/consume, internal/route).
	KafkaBrokers          brokerList      `envconfig:"KAFKA_BROKERS" default:"127.0.0.1:9092" desc:"Comma-separated seed brokers as host:port (default 127.0.0.1:9092); the client finds the rest of the cluster from them."`
	InputTopic            string          `envconfig:"INPUT_TOPIC" default:"events" desc:"Topic the raw events are read from (default events)."`
	AcceptedTopic         string          `envconfig:"ACCEPTED_TOPIC" default:"events_accepted" desc:"Topic records of teams under their limit go to, key kept (default events_accepted)."`
	OverflowTopic         string          `envconfig:"OVERFLOW_TOPIC" default:"events_overflow" desc:"Topic records of teams over their limit (or forced) go to, with header gate-overflow-reason and, unless GATE_OVERFLOW_KEEP_KEY, no key (default events_overflow)."`
	DeadLetterTopic       string          `envconfig:"DEAD_LETTER_TOPIC" default:"events_dead_letter" desc:"Topic records whose team cannot be read go to, with headers gate-error (the reason), gate-error-detail and gate-source (topic/partition/offset) (default events_dead_letter)."`
	GroupID               string          `envconfig:"GROUP_ID" default:"capture-gate" desc:"Consumer group shared by every gate of a fleet; the input's partitions are spread over its members (default capture-gate)."`
	KafkaGroupProtocol    groupProtocol   `envconfig:"KAFKA_GROUP_PROTOCOL" default:"classic" desc:"Consumer group protocol, by Kafka's own names: classic (members assign partitions among themselves, cooperative-sticky; every broker) or consumer (KIP-848: the broker assigns, and a member joining or leaving moves only the partitions that change owner; Kafka 4.0 or later, franz-go advising 4.3 or later), a broker that does not offer it getting classic with a warning (default classic); under consumer the session timeout is the brokers' group.consumer.session.timeout.ms, not GATE_KAFKA_SESSION_TIMEOUT."`
	KafkaStartOffset      startOffset     `envconfig:"KAFKA_START_OFFSET" default:"earliest" desc:"Where the group starts reading a partition it has no committed offset for, as when the group is new: earliest (the oldest record the partition still holds, so what was written before the group existed is routed too) or latest (only what is written from the group's first assignment of it on, the gate committing that start at once so that a partition moved or left before it was read keeps it; a partition added to the topic while gates run is read from its start, as every record in it was written since, and only one added while none runs, or seen by none that knew the topic before, starts at its end) (default earliest); it does not decide where a partition resumes when its committed offset is no longer in the log, and the chart gives the same value to KEDA as offsetResetPolicy."`
	KeyFrom               keyFrom         `envconfig:"KEY_FROM" default:"json:team_id" desc:"Where a record's team is read: json:FIELD for a top-level or dotted field of a JSON value, json:A+B for several fields joined with ':', each value's ':' and '%' written %3A and %25 so that distinct values never make one team (a limit per user within a team), header:NAME, or key for the record key (default json:team_id)."`
	ValidateJSON          bool            `envconfig:"VALIDATE_JSON" default:"false" desc:"With a json: GATE_KEY_FROM (refused with another, which reads no value), check that every value is valid JSON and dead-letter a corrupt one (not_json) even when its team is readable (default false: only records whose team cannot be read are dead-lettered); costs about 1 µs of CPU per KB of event. With GATE_RULES_FILE it is not refused, whatever the rules read: it checks the values the rules read as JSON (a json: key or match field), dead-letters a corrupt one only when an enforced rule reads JSON (to a shadow rule it is a key it cannot read), and with rules that read no JSON does nothing, which the gate warns of after its rules line, at start and at each reload."`
	MaxKeyBytes           int             `envconfig:"MAX_KEY_BYTES" default:"256" desc:"Longest team key, in bytes (a composite key as escaped); a longer one sends the record to dead letter with reason key_too_long, and a longer key in GATE_FORCE_OVERFLOW, GATE_OVERRIDES, a rule's force list or gate overrides set is refused (default 256)."`
	Cost                  cost            `envconfig:"COST" default:"events" desc:"What a record counts toward its team's window: events (1 per record) or bytes (its value's size), so that with bytes a team sending few huge events is limited too and every threshold is in bytes per window (default events); with bytes the counters, hold flags and learned profiles are under {prefix}/bytes in place of {prefix} ({prefix}/bytes:{team}:{epoch}), so a gate restarted with another cost starts its counts afresh rather than read bytes as events or events as bytes, while the live overrides stay in {prefix}:overrides and are read in the new unit."`
	ForceOverflow         teamList        `envconfig:"FORCE_OVERFLOW" default:"" desc:"Comma-separated teams always sent to overflow with reason forced, whatever their rate, each written as GATE_KEY_FROM builds keys (a composite one escaped: token phc_x and distinct_id user:1 is phc_x:user%3A1) (default none)."`
	DryRun                bool            `envconfig:"DRY_RUN" default:"false" desc:"Send every record to the accepted topic but count and report decisions as if enforced, in gate_dry_run_diverted_total (default false); for trying a threshold on live traffic."`
	OverflowKeepKey       bool            `envconfig:"OVERFLOW_KEEP_KEY" default:"false" desc:"Keep the record key on overflow and on a rule's own topic (action topic:NAME) (default false: dropped, so a hot team's overflow spreads over every partition instead of loading one; a compacted (cleanup.policy=compact) overflow or rule topic then refuses those records, and the gate names it and is not ready, at start and at the topics' reads each minute, until it is cleanup.policy=delete or this is true)."`
	MaxPollRecords        int             `envconfig:"MAX_POLL_RECORDS" default:"10000" desc:"Most records routed per poll (default 10000); rebalances wait for a poll's records to be handed to the producer, so smaller lets a rebalance through sooner, larger batches more."`
	CommitInterval        time.Duration   `envconfig:"COMMIT_INTERVAL" default:"1s" desc:"With GATE_DELIVERY=at-least-once, how often offsets acknowledged on the output topics are committed, at least 10ms (default 1s); a crash replays at most about this much traffic (with GATE_OUTCOMES_TOPIC this plus GATE_OUTCOMES_FLUSH_INTERVAL, the commits stopping at the last outcome seal), and shorter means more commit requests. Exactly-once commits offsets in its transactions (GATE_TRANSACTION_INTERVAL) and does not use it."`
	ProduceRetries        int             `envconfig:"PRODUCE_RETRIES" default:"0" desc:"Tries the client makes for an output record a broker failed with a retriable error before reporting it failed, after which the gate logs, counts and produces it again with backoff, never committing past it; 0 for no bound, the client retrying in order until the record is written (default 0); a bound shows broker errors sooner in gate_produce_errors_total but can reorder a key's records, a broker failing for long shows in gate_stalled_seconds either way."`
	MaxBufferedRecords    int             `envconfig:"MAX_BUFFERED_RECORDS" default:"50000" desc:"Most output records waiting for the broker's acknowledgement; routing blocks when reached, so a slow broker slows consumption instead of growing memory. Nor is anything polled while the polls not yet wholly acknowledged keep as many input records, as one output partition refusing writes holds every poll with a record for it (default 50000)."`
	MaxBufferedBytes      int             `envconfig:"MAX_BUFFERED_BYTES" default:"268435456" desc:"Most bytes of output records waiting for acknowledgement, and of input records kept for them, as GATE_MAX_BUFFERED_RECORDS (default 268435456, 256 MiB); at least 1048576 and GATE_KAFKA_MAX_MESSAGE_BYTES less 61 (a record batch's header), as the client refuses a record larger than it."`
	KafkaMaxMessageBytes  int32           `envconfig:"KAFKA_MAX_MESSAGE_BYTES" default:"1048588" desc:"Largest record batch the producer sends, as the brokers' message.max.bytes (default 1048588, from 1024 to 104857600, the client's largest produce request); batches to an output topic whose own max.message.bytes is lower (read at start with DESCRIBE_CONFIGS, and for a rule topic a rules reload adds before its rules are put in use; read again every minute, where a change is logged: it takes effect when the gate restarts) stay within that; a record larger than the output topic takes goes to dead letter, without its value if it is too large for that topic too."`
	RevokeTimeout         time.Duration   `envconfig:"REVOKE_TIMEOUT" default:"10s" desc:"Longest a revoked partition's in-flight records are awaited before what is acknowledged is committed and the rest left to the next owner (default 10s), that commit having a bound as long of its own, so that a revoke holds the rebalance up to twice this; shorter than GATE_KAFKA_REBALANCE_TIMEOUT (60s by default), and best well under half of it. It bounds shutdown's final commit and its leaving the group too (GATE_SHUTDOWN_TIMEOUT). With GATE_DELIVERY=exactly-once a revoke aborts the open transaction and awaits nothing."`
	ShutdownTimeout       time.Duration   `envconfig:"SHUTDOWN_TIMEOUT" default:"20s" desc:"Longest a shutdown waits for in-flight records before committing what is acknowledged and leaving the group (default 20s); keep the pod's terminationGracePeriodSeconds above the whole shutdown, logged at start as shutdown_bound: this + 2 x GATE_REVOKE_TIMEOUT + 10s (50s by default)."`
	KafkaSessionTimeout   time.Duration   `envconfig:"KAFKA_SESSION_TIMEOUT" default:"45s" desc:"How long the group waits without a heartbeat before it gives a gate's partitions to the others (default 45s, from 1s to 596h, within the brokers' group.min/max.session.timeout.ms); shorter moves a crashed gate's partitions sooner, too short evicts gates that pause (GC, slow node). Classic group protocol only: with GATE_KAFKA_GROUP_PROTOCOL=consumer (KIP-848) the brokers' group.consumer.session.timeout.ms applies in its place while the brokers offer that protocol, this one applying again when they do not and the gate falls back to classic, so it is checked (and held under GATE_TRANSACTION_TIMEOUT) under either protocol."`
	KafkaRebalanceTimeout time.Duration   `envconfig:"KAFKA_REBALANCE_TIMEOUT" default:"60s" desc:"How long a rebalance waits for every member to rejoin, which includes a revoked partition's drain (default 60s, at least 100ms, at most 596h); longer than GATE_REVOKE_TIMEOUT."`
	KafkaFetchMaxBytes    int32           `envconfig:"KAFKA_FETCH_MAX_BYTES" default:"52428800" desc:"Most bytes one fetch from a broker returns, as fetched, so compressed (default 52428800, 50 MiB, Kafka's fetch.max.bytes; from 1024 to that default, the most, as a response must stay within what the client reads; a record batch larger than it still comes whole); the gate holds, per broker, the poll it routes and the next fetch, each decompressed, so with compressed input it holds up to 2 x this x the compression ratio a broker besides the records in flight: lower it when a backlog of well-compressed large records runs the pod out of memory (docs/operations.md, sizing)."`
	KafkaFetchMaxWait     time.Duration   `envconfig:"KAFKA_FETCH_MAX_WAIT" default:"500ms" desc:"Longest a fetch waits at the broker for new records when a partition is idle (default 500ms, from 10ms to 596h); it only matters for quiet topics, shorter lowering their latency for more fetch requests."`
	KafkaClientID         string          `envconfig:"KAFKA_CLIENT_ID" default:"capture-gate" desc:"Client id sent to the brokers, seen in their logs and quotas, at most 247 bytes (default capture-gate)."`
	KafkaTLS              bool            `envconfig:"KAFKA_TLS" default:"false" desc:"Connect to the brokers over TLS (default false); implied by any other GATE_KAFKA_TLS_* variable, beside which false is refused."`
	KafkaTLSCAFile        string          `envconfig:"KAFKA_TLS_CA_FILE" default:"" desc:"PEM file of the CA certificates that sign the brokers' certificates (default none), the system's CA certificates being used without it; read again when it changes, as GATE_KAFKA_TLS_CERT_FILE."`
	KafkaTLSCertFile      string          `envconfig:"KAFKA_TLS_CERT_FILE" default:"" desc:"PEM client certificate for mutual TLS, with GATE_KAFKA_TLS_KEY_FILE (default none); the files are read again when they change (checked at most once a second, when a connection is opened or /metrics is scraped), so a certificate renewed in place (cert-manager, a Secret volume) is used by new connections without a restart, and files that turn unreadable or invalid leave the last good ones in use, with a warning and gate_tls_reload_errors_total."`
	KafkaTLSKeyFile       string          `envconfig:"KAFKA_TLS_KEY_FILE" default:"" desc:"PEM private key of GATE_KAFKA_TLS_CERT_FILE (default none); read again with it."`
	KafkaTLSServerName    string          `envconfig:"KAFKA_TLS_SERVER_NAME" default:"" desc:"Name the brokers' certificates are checked against, when not their host names (default none), each broker's own host name being used without it."`
	KafkaSASLMechanism    saslMechanism   `envconfig:"KAFKA_SASL_MECHANISM" default:"none" desc:"SASL authentication: none, plain, scram-sha-256 or scram-sha-512 (default none); use it with TLS, as plain sends the password as is."`
	KafkaSASLUsername     string          `envconfig:"KAFKA_SASL_USERNAME" default:"" desc:"SASL user name (default none)."`
	KafkaSASLPassword     secret          `envconfig:"KAFKA_SASL_PASSWORD" default:"" desc:"SASL password (default none); set it from a Secret, it is never logged."`
	Delivery              delivery        `envconfig:"DELIVERY" default:"at-least-once" desc:"Delivery guarantee on the output topics: at-least-once (a crash or rebalance may write a record twice) or exactly-once (records are produced and their input offsets committed in Kafka transactions, each open for GATE_TRANSACTION_INTERVAL, so consumers reading with isolation.level=read_committed see every input record once) (default at-least-once); exactly-once delays read-committed consumers until a transaction commits."`
	TransactionalID       string          `envconfig:"TRANSACTIONAL_ID" default:"" desc:"With GATE_DELIVERY=exactly-once, this gate's transactional id, which must differ between the gates of a fleet, GATE_GROUP_ID-hostname (unique per pod) being used without it (default none); a gate restarted with the same id aborts its predecessor's open transaction at once, one with a new id leaves it to time out (GATE_TRANSACTION_TIMEOUT)."`
	OnUndeliverable       onUndeliverable `envconfig:"ON_UNDELIVERABLE" default:"stop" desc:"What to do with a record refused by every topic (its output topic, then the dead-letter topic with and without its value, each tried with the record alone), as a broker validating timestamps or a small max.message.bytes can: stop (its partition stops there, nothing past it is committed, /readyz fails and an error line names the record) or skip (logged with its partition and offset, counted in gate_records_undeliverable_total, committed past) (default stop); skip keeps the pipeline moving at the cost of a gap an operator must replay by hand."`
	OnDataLoss            onDataLoss      `envconfig:"ON_DATA_LOSS" default:"continue" desc:"What to do when input records are gone before the gate read them, deleted by the topic's retention below its position (a gate that fell behind, a group away longer than the retention) or lost by a broker (a log truncated by an unclean leader election): either way an error line names the partition and the offsets and gate_records_lost_total{cause} counts them, then continue (resume after them, committing past them) or stop (the partition stops there, nothing past it is routed or committed, /readyz fails naming it) (default continue); stop suits pipelines where a gap must stop the line until an operator replays it or accepts it."`
	StallNotReady         time.Duration   `envconfig:"STALL_NOT_READY" default:"2m" desc:"How long the gate may make no progress (no poll returning records, no commit; exactly once, no transaction committed) while it has work (lag, records in flight or awaiting a retry, offsets it holds fetching to commit) before /readyz fails, naming the stall (default 2m); keep it above GATE_KAFKA_REBALANCE_TIMEOUT, the longest a healthy gate waits behind a rebalance, and with GATE_DELIVERY=exactly-once above it plus GATE_TRANSACTION_INTERVAL, how far apart commits come; 0 turns it off. An idle gate never stalls."`
	StallRestart          time.Duration   `envconfig:"STALL_RESTART" default:"10m" desc:"How long the gate may make no progress while it has work before /healthz fails, so that Kubernetes restarts it (default 10m); longer than GATE_STALL_NOT_READY, and 0 turns it off; with GATE_STALL_NOT_READY=0, longer than GATE_KAFKA_REBALANCE_TIMEOUT (plus GATE_TRANSACTION_INTERVAL with GATE_DELIVERY=exactly-once) in its place."`
	TransactionInterval   time.Duration   `envconfig:"TRANSACTION_INTERVAL" default:"100ms" desc:"With GATE_DELIVERY=exactly-once, how long a transaction stays open while further polls route into it before it commits (default 100ms; it commits sooner when no record comes for a tenth of it); at most 10s and below half GATE_TRANSACTION_TIMEOUT, refused past that whatever GATE_DELIVERY; ending one takes two round trips during which nothing is polled, so longer is faster, but read-committed consumers see records later by up to this long and an aborted transaction replays up to this long of records; 0 ends a transaction after every poll."`
	TransactionMaxRecords int             `envconfig:"TRANSACTION_MAX_RECORDS" default:"500000" desc:"With GATE_DELIVERY=exactly-once, the most input records routed in one transaction before it commits (default 500000), bounding what an abort replays; the default leaves GATE_TRANSACTION_INTERVAL to end transactions up to 5 million records a second, as a lower cap ends them sooner and each end stops polling for its round trips."`
	OutcomesTopic         string          `envconfig:"OUTCOMES_TOPIC" default:"" desc:"Topic every record's fate is written to as outcome rows, one per interval, key, rule, outcome and reason, keyed by team (docs/outcomes.md; read them with gate outcomes); with GATE_DELIVERY=exactly-once in the transaction of the records they count, with at-least-once before those records' offsets are committed (default none); needed by a rule of action drop, unless it is a shadow rule (shadow: true, which drops nothing)."`
	OutcomesInterval      time.Duration   `envconfig:"OUTCOMES_INTERVAL" default:"1m" desc:"With GATE_OUTCOMES_TOPIC, the outcome rows' interval: each row counts records routed within one interval_start + this (default 1m); from 1s to 1h, dividing an hour."`
	OutcomesMaxRows       int             `envconfig:"OUTCOMES_MAX_ROWS" default:"100000" desc:"With GATE_OUTCOMES_TOPIC, the most outcome rows the gate holds between writes, kept in about 1 KB each with several CPUs (600 bytes with one; 100 MB at the default, and about 500 bytes more a row while a seal's rows are written) (default 100000); keys that come once it is reached are summed in one row per rule, outcome and reason, marked folded (gate_outcome_folded_records_total)."`
	OutcomesFlushInterval time.Duration   `envconfig:"OUTCOMES_FLUSH_INTERVAL" default:"10s" desc:"With GATE_OUTCOMES_TOPIC and GATE_DELIVERY=at-least-once, how often the gate seals its outcome rows and writes them (and on revoke and at shutdown) (default 10s); a partition's offsets are committed only up to its last seal, so a crash replays about this plus GATE_COMMIT_INTERVAL. Each seal writes a row per key, rule, outcome and reason seen since the last, so shorter means more rows and more of the gate's CPU (a seal a second wrote a row per active team a second); from 100ms to 10m. Exactly once, each transaction is a seal."`
	TransactionTimeout    time.Duration   `envconfig:"TRANSACTION_TIMEOUT" default:"90s" desc:"With GATE_DELIVERY=exactly-once, how long the brokers let a transaction stay open before aborting it, longer than GATE_KAFKA_REBALANCE_TIMEOUT and GATE_KAFKA_SESSION_TIMEOUT (a transaction's end waits out a rebalance, which waits out a dead member's session) and at most the brokers' transaction.max.timeout.ms, from 1s to 15m (default 90s); a crashed gate's open transaction holds back read-committed consumers of its output partitions, and the input partitions' next owner, for up to this long."`
}

// kafkaDialTimeout bounds opening a connection to a broker, TLS handshake included:
// franz-go's own default, which a dialer of ours replaces.
const kafkaDialTimeout = 10 * time.Second

// kafkaMaxWireTimeout is the longest session, rebalance and fetch wait the Kafka client
// takes: it sends them in milliseconds as 32-bit numbers (at most 596h31m23.647s).
const kafkaMaxWireTimeout = 596 * time.Hour

// kafkaMaxRequestBytes is the largest produce request the Kafka client writes (its
// BrokerMaxWriteBytes default, as Kafka's socket.request.max.bytes): a record batch
// may be no larger.
const kafkaMaxRequestBytes = 100 << 20

// kafkaMaxFetchBytes is the largest GATE_KAFKA_FETCH_MAX_BYTES, its default (Kafka's
// fetch.max.bytes and franz-go's): half the largest response the client reads
// (BrokerMaxReadBytes, 100 MiB), as franz-go pairs them; larger would only hold more
// memory.
const kafkaMaxFetchBytes = 50 << 20

// kafkaRecordBatchHeader is the bytes of a record batch besides its records (Kafka's v2
// batch header): a record larger than GATE_KAFKA_MAX_MESSAGE_BYTES less this is never
// sent, whatever GATE_MAX_BUFFERED_BYTES.
const kafkaRecordBatchHeader = 61

// kafkaMaxClientID is the longest GATE_KAFKA_CLIENT_ID: the client refuses an id over
// 256 bytes, and the tools send it with "-" and their name (gate outcomes: "-outcomes").
const kafkaMaxClientID = 256 - len("-outcomes")

// minCommitInterval is the shortest GATE_COMMIT_INTERVAL.
const minCommitInterval = 10 * time.Millisecond

// kafkaHeartbeatInterval is how often a member of a classic group heartbeats (franz-go's
// and Kafka's default), a third of GATE_KAFKA_SESSION_TIMEOUT when that is shorter, as
// Kafka advises: the client refuses a heartbeat interval longer than the session.
const kafkaHeartbeatInterval = 3 * time.Second

// ConsumeConfig maps Config to the consumer's settings, with the TLS and SASL options
// built from the files and credentials named; TLS files are read again when they change
// (see Reload). Its errors name the variable at fault.
func (c Kafka) ConsumeConfig(r Reload) (consume.Config, error) {
	opts := []kgo.Opt{
		kgo.ClientID(c.KafkaClientID),
		kgo.SessionTimeout(c.KafkaSessionTimeout),
		kgo.HeartbeatInterval(min(kafkaHeartbeatInterval, c.KafkaSessionTimeout/3)),
		kgo.RebalanceTimeout(c.KafkaRebalanceTimeout),
		kgo.FetchMaxWait(c.KafkaFetchMaxWait),
		kgo.FetchMaxBytes(c.KafkaFetchMaxBytes),
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
		Brokers:               slices.Clone(c.KafkaBrokers),
		TLS:                   c.KafkaTLSOn(),
		InputTopic:            c.InputTopic,
		GroupID:               c.GroupID,
		GroupProtocol:         c.KafkaGroupProtocol.value(),
		StartOffset:           c.KafkaStartOffset.value(),
		MaxPollRecords:        c.MaxPollRecords,
		CommitInterval:        c.CommitInterval,
		ProduceRetries:        c.ProduceRetries,
		MaxBufferedRecords:    c.MaxBufferedRecords,
		MaxBufferedBytes:      c.MaxBufferedBytes,
		MaxMessageBytes:       c.KafkaMaxMessageBytes,
		RevokeTimeout:         c.RevokeTimeout,
		ShutdownTimeout:       c.ShutdownTimeout,
		Delivery:              c.Delivery.value(),
		TransactionalID:       c.transactionalID(),
		TransactionTimeout:    c.TransactionTimeout,
		TransactionInterval:   max(c.TransactionInterval, time.Nanosecond), // 0: one poll (consume's zero is its default)
		TransactionMaxRecords: c.TransactionMaxRecords,
		OutcomesTopic:         c.OutcomesTopic,
		OutcomesInterval:      c.OutcomesInterval,
		OutcomesMaxRows:       c.OutcomesMaxRows,
		OutcomesFlushInterval: c.OutcomesFlushInterval,
		OnUndeliverable:       c.OnUndeliverable.value(),
		StallNotReady:         orDisabled(c.StallNotReady),
		StallRestart:          orDisabled(c.StallRestart),
		OnDataLoss:            c.OnDataLoss.value(),
		OutputTopics:          c.OutputTopics(),
		KeylessTopics:         c.keylessTopics(),
		DeadLetterTopic:       c.DeadLetterTopic,
		ClientOpts:            opts,
	}, nil
}

// OutputTopics are the topics the gate writes whatever its rules (the three outputs and
// GATE_OUTCOMES_TOPIC when set): checked at start.
func (c Kafka) OutputTopics() []string {
	ts := []string{c.AcceptedTopic, c.OverflowTopic, c.DeadLetterTopic}
	if c.OutcomesTopic != "" {
		ts = append(ts, c.OutcomesTopic)
	}
	return ts
}

// keylessTopics are the output topics the gate writes records without a key to: the
// overflow topic (and with it the rules' own, consume.Config.KeylessTopics) unless
// GATE_OVERFLOW_KEEP_KEY.
func (c Kafka) keylessTopics() []string {
	if c.OverflowKeepKey {
		return nil
	}
	return []string{c.OverflowTopic}
}

// orDisabled maps a setting's 0 (off) to the consumer's negative (disabled), its zero
// meaning the default.
func orDisabled(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// transactionalID is GATE_TRANSACTIONAL_ID; empty unless exactly-once. Its default,
// GATE_GROUP_ID-hostname (unique per pod, as a pod's host name is its name), is set by
// the caller, who knows the host (cmd/gate's serve): with none, the consumer refuses
// exactly-once delivery with an error that says so.
func (c Kafka) transactionalID() string {
	if c.Delivery.value() != consume.ExactlyOnce {
		return ""
	}
	return c.TransactionalID
}

// validTransactionalID keeps ids to what shows plainly in broker logs and tools.
// Those are a topic name's characters, so the router's check decides.
func validTransactionalID(s string) bool { return len(s) <= 200 && route.CheckTopic(s) == nil }

// KafkaTLSOn reports whether the gate dials the brokers over TLS: GATE_KAFKA_TLS, or any
// other GATE_KAFKA_TLS_* variable set (kafkaTLS), as the start line says it.
func (c Kafka) KafkaTLSOn() bool {
	return c.KafkaTLS || len(c.kafkaTLSImpliedBy()) > 0
}

// kafkaTLSImpliedBy names the GATE_KAFKA_TLS_* variables set that turn TLS on without
// GATE_KAFKA_TLS: the one list KafkaTLSOn and Load's refusal of GATE_KAFKA_TLS=false read.
func (c Kafka) kafkaTLSImpliedBy() []string {
	var set []string
	for _, v := range []struct{ name, value string }{
		{"KAFKA_TLS_CA_FILE", c.KafkaTLSCAFile}, {"KAFKA_TLS_CERT_FILE", c.KafkaTLSCertFile}, {"KAFKA_TLS_SERVER_NAME", c.KafkaTLSServerName},
	} {
		if v.value != "" {
			set = append(set, envPrefix+"_"+v.name)
		}
	}
	return set
}

// kafkaTLS returns the client option that dials the brokers over TLS, or nil when TLS
// is off. With a CA or certificate file, a dialer of ours makes each connection with the
// files' current contents (tlsreload), checking each broker's certificate against
// GATE_KAFKA_TLS_SERVER_NAME, else the broker's host name, as franz-go's own TLS dialer
// does; without one, franz-go's dialer and the system's CAs.
func (c Kafka) kafkaTLS(r Reload) (kgo.Opt, error) {
	if !c.KafkaTLSOn() {
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
func (c Kafka) kafkaSASL() sasl.Mechanism {
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

// validate checks the Kafka variables' values, each on its own.
func (c Kafka) validate(bad report) {
	for _, k := range []struct{ key, v string }{{"INPUT_TOPIC", c.InputTopic}, {"ACCEPTED_TOPIC", c.AcceptedTopic}, {"OVERFLOW_TOPIC", c.OverflowTopic}, {"DEAD_LETTER_TOPIC", c.DeadLetterTopic}} {
		if route.CheckTopic(k.v) != nil {
			bad(k.key, "a Kafka topic name: 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'")
		}
	}
	if c.GroupID == "" {
		bad("GROUP_ID", "a consumer group name such as capture-gate")
	}
	bad.atLeast("MAX_KEY_BYTES", c.MaxKeyBytes, 1)
	bad.atLeast("MAX_POLL_RECORDS", c.MaxPollRecords, 1)
	// A floor, not just above zero: at 1ns the commit loop spins, and with outcomes on
	// every poll seals its rows.
	if c.CommitInterval < minCommitInterval {
		bad("COMMIT_INTERVAL", "a duration of at least 10ms such as 1s")
	}
	bad.atLeast("PRODUCE_RETRIES", c.ProduceRetries, 0)
	bad.atLeast("MAX_BUFFERED_RECORDS", c.MaxBufferedRecords, 1)
	bad.atLeast("MAX_BUFFERED_BYTES", c.MaxBufferedBytes, 1<<20)
	// The client refuses a batch larger than a produce request it may write (its
	// BrokerMaxWriteBytes, Kafka's socket.request.max.bytes default).
	if c.KafkaMaxMessageBytes < 1024 || c.KafkaMaxMessageBytes > kafkaMaxRequestBytes {
		bad("KAFKA_MAX_MESSAGE_BYTES", "a whole number of bytes from 1024 to 104857600 such as 1048588")
	}
	if len(c.KafkaClientID) > kafkaMaxClientID {
		bad("KAFKA_CLIENT_ID", fmt.Sprintf("a client id of at most %d bytes such as capture-gate", kafkaMaxClientID))
	}
	bad.positive("REVOKE_TIMEOUT", c.RevokeTimeout)
	// The client sends these in milliseconds as 32-bit numbers, and refuses what would
	// not fit; and it waits at least 10ms for a fetch, 100ms for a rebalance.
	if c.KafkaSessionTimeout < time.Second || c.KafkaSessionTimeout > kafkaMaxWireTimeout {
		bad("KAFKA_SESSION_TIMEOUT", "a duration from 1s to 596h such as 45s, within the brokers' group.min/max.session.timeout.ms")
	}
	if c.KafkaRebalanceTimeout < 100*time.Millisecond || c.KafkaRebalanceTimeout > kafkaMaxWireTimeout {
		bad("KAFKA_REBALANCE_TIMEOUT", "a duration from 100ms to 596h such as 60s")
	}
	// Up to the client's default (kafkaMaxFetchBytes): a response may exceed a fetch's
	// bytes by a record batch, and must stay within what the client reads.
	if c.KafkaFetchMaxBytes < 1024 || c.KafkaFetchMaxBytes > kafkaMaxFetchBytes {
		bad("KAFKA_FETCH_MAX_BYTES", "a whole number of bytes from 1024 to 52428800 such as 8388608")
	}
	if c.KafkaFetchMaxWait < 10*time.Millisecond || c.KafkaFetchMaxWait > kafkaMaxWireTimeout {
		bad("KAFKA_FETCH_MAX_WAIT", "a duration from 10ms to 596h such as 500ms")
	}
	bad.positive("SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	if c.StallNotReady < 0 {
		bad("STALL_NOT_READY", "0 (off) or a duration such as 2m")
	}
	if c.StallRestart < 0 {
		bad("STALL_RESTART", "0 (off) or a duration such as 10m")
	}
	if c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute {
		bad("TRANSACTION_TIMEOUT", "a duration from 1s to 15m such as 90s, within the brokers' transaction.max.timeout.ms")
	}
	if c.TransactionInterval < 0 || c.TransactionInterval > 10*time.Second || c.TransactionInterval >= c.TransactionTimeout/2 {
		bad("TRANSACTION_INTERVAL", "0 (a transaction per poll) or a duration up to 10s and below half GATE_TRANSACTION_TIMEOUT, such as 100ms")
	}
	bad.atLeast("TRANSACTION_MAX_RECORDS", c.TransactionMaxRecords, 1)
	if c.OutcomesTopic != "" && route.CheckTopic(c.OutcomesTopic) != nil {
		bad("OUTCOMES_TOPIC", "empty (off) or a Kafka topic name: 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'")
	}
	if c.OutcomesInterval < time.Second || c.OutcomesInterval > time.Hour || time.Hour%c.OutcomesInterval != 0 {
		bad("OUTCOMES_INTERVAL", "a duration from 1s to 1h that divides an hour, such as 1m")
	}
	bad.atLeast("OUTCOMES_MAX_ROWS", c.OutcomesMaxRows, 1)
	if c.OutcomesFlushInterval < 100*time.Millisecond || c.OutcomesFlushInterval > 10*time.Minute {
		bad("OUTCOMES_FLUSH_INTERVAL", "a duration from 100ms to 10m such as 10s")
	}
	if c.TransactionalID != "" && !validTransactionalID(c.TransactionalID) {
		bad("TRANSACTIONAL_ID", "1 to 200 of a-z, A-Z, 0-9, '.', '_' and '-' such as capture-gate-0")
	}
	if (c.KafkaTLSCertFile == "") != (c.KafkaTLSKeyFile == "") {
		bad("KAFKA_TLS_CERT_FILE", "a client certificate file together with GATE_KAFKA_TLS_KEY_FILE, or neither")
	}
	if c.KafkaSASLMechanism != "none" && (c.KafkaSASLUsername == "" || c.KafkaSASLPassword == "") {
		bad("KAFKA_SASL_MECHANISM", "none, or a mechanism with GATE_KAFKA_SASL_USERNAME and GATE_KAFKA_SASL_PASSWORD set")
	}
	// Set without a mechanism they would be ignored, and the gate would connect without
	// authenticating: most likely GATE_KAFKA_SASL_MECHANISM is missing.
	if c.KafkaSASLMechanism == "none" {
		if c.KafkaSASLUsername != "" {
			bad("KAFKA_SASL_USERNAME", "unset unless GATE_KAFKA_SASL_MECHANISM is plain, scram-sha-256 or scram-sha-512")
		}
		if c.KafkaSASLPassword != "" {
			bad("KAFKA_SASL_PASSWORD", "unset unless GATE_KAFKA_SASL_MECHANISM is plain, scram-sha-256 or scram-sha-512")
		}
	}
}

// stallBound reports a stall bound (GATE_STALL_NOT_READY, or GATE_STALL_RESTART when it
// is the only one) within what a healthy gate may go without progress: a rebalance, and
// exactly once a rebalance plus GATE_TRANSACTION_INTERVAL. 0 (off) is no bound.
func (c Kafka) stallBound(bad report, key string, d time.Duration) {
	if d > 0 && d <= c.KafkaRebalanceTimeout {
		bad(key, fmt.Sprintf("0 (off) or a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (%s), the longest a healthy gate waits behind a rebalance", durtext.String(c.KafkaRebalanceTimeout)))
	} else if c.Delivery.value() == consume.ExactlyOnce && d > 0 && d <= c.KafkaRebalanceTimeout+c.TransactionInterval {
		bad(key, fmt.Sprintf("0 (off) or, with GATE_DELIVERY=exactly-once, a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (%s) plus GATE_TRANSACTION_INTERVAL (%s): "+
			"only a committed transaction is progress, commits come GATE_TRANSACTION_INTERVAL apart, and a transaction's end waits out a rebalance", durtext.String(c.KafkaRebalanceTimeout), durtext.String(c.TransactionInterval)))
	}
}

// validateBetween checks the rules between Kafka variables, once every value is sane.
func (c Kafka) validateBetween(bad report) {
	// A forced team is a key as GATE_KEY_FROM builds it: a composite one escaped, or it
	// names nothing the gate counts, in silence.
	for _, t := range c.ForceOverflow {
		if err := c.KeyFrom.CheckKey(t, c.MaxKeyBytes); err != nil {
			bad("FORCE_OVERFLOW", fmt.Sprintf("keys as GATE_KEY_FROM builds them: %v", err))
			break
		}
	}
	// Validation checks what the key is read from: with a header or the record key, no
	// value is read, and GATE_VALIDATE_JSON=true did nothing, silently (a review). A rules
	// file's rules read as they say (GATE_KEY_FROM reads unset then).
	if c.ValidateJSON && !strings.HasPrefix(c.KeyFrom.String(), "json:") {
		bad("VALIDATE_JSON", fmt.Sprintf("false (or unset) unless GATE_KEY_FROM reads JSON (json:FIELD): with %s no value is read, so none is validated", c.KeyFrom.String()))
	}
	// A record routed to the topic it was read from would be read again, forever.
	topics := map[string]string{}
	for _, k := range []struct{ key, v string }{{"INPUT_TOPIC", c.InputTopic}, {"ACCEPTED_TOPIC", c.AcceptedTopic}, {"OVERFLOW_TOPIC", c.OverflowTopic}, {"DEAD_LETTER_TOPIC", c.DeadLetterTopic}, {"OUTCOMES_TOPIC", c.OutcomesTopic}} {
		if k.v == "" {
			continue // GATE_OUTCOMES_TOPIC off
		}
		if other, dup := topics[k.v]; dup {
			bad(k.key, fmt.Sprintf("a topic other than GATE_%s's (%s): the input and the outputs must all differ", other, k.v))
		}
		topics[k.v] = k.key
	}
	// The client fails a record larger than its buffer as too large (MESSAGE_TOO_LARGE,
	// before any broker sees it): one the output topic would take would go to dead letter
	// without its value.
	if c.MaxBufferedBytes < int(c.KafkaMaxMessageBytes)-kafkaRecordBatchHeader {
		bad("MAX_BUFFERED_BYTES", fmt.Sprintf("a whole number of bytes of at least GATE_KAFKA_MAX_MESSAGE_BYTES (%d) less a record batch's %d-byte header, so that every record a batch takes fits the buffer",
			c.KafkaMaxMessageBytes, kafkaRecordBatchHeader))
	}
	// A drain longer than the rebalance would get the gate evicted while it drains.
	if c.KafkaRebalanceTimeout <= c.RevokeTimeout {
		bad("KAFKA_REBALANCE_TIMEOUT", fmt.Sprintf("a duration longer than GATE_REVOKE_TIMEOUT (%s)", durtext.String(c.RevokeTimeout)))
	}
	// Ending a transaction waits for a rebalance in progress, and a join waits for a
	// dead member's session (a slow one's rebalance timeout): a transaction timeout
	// shorter than either gets healthy gates' transactions aborted and their producers
	// fenced whenever a peer crashes.
	if c.Delivery.value() == consume.ExactlyOnce && (c.TransactionTimeout <= c.KafkaRebalanceTimeout || c.TransactionTimeout <= c.KafkaSessionTimeout) {
		bad("TRANSACTION_TIMEOUT", fmt.Sprintf("a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (%s) and GATE_KAFKA_SESSION_TIMEOUT (%s): "+
			"a transaction's end waits out a rebalance, which waits out a dead member's session", durtext.String(c.KafkaRebalanceTimeout), durtext.String(c.KafkaSessionTimeout)))
	}
	// A gate waiting behind a rebalance is not stuck; one not ready is restarted later.
	// Exactly once, only a committed transaction is progress (internal/consume's
	// watchdog): a healthy gate with steady input commits GATE_TRANSACTION_INTERVAL apart,
	// and a transaction's end waits out a rebalance, so that a bound within both took
	// it for stalled between commits.
	c.stallBound(bad, "STALL_NOT_READY", c.StallNotReady)
	if c.StallRestart > 0 && c.StallRestart <= c.StallNotReady {
		bad("STALL_RESTART", fmt.Sprintf("0 (off) or a duration longer than GATE_STALL_NOT_READY (%s)", durtext.String(c.StallNotReady)))
	} else if c.StallNotReady == 0 {
		// The only stall bound: within a rebalance, it would restart a healthy gate
		// waiting behind one (and the restart start another rebalance).
		c.stallBound(bad, "STALL_RESTART", c.StallRestart)
	}
	// Set without exactly-once they would be ignored: most likely GATE_DELIVERY is missing.
	if c.TransactionalID != "" && c.Delivery.value() != consume.ExactlyOnce {
		bad("TRANSACTIONAL_ID", "unset unless GATE_DELIVERY=exactly-once")
	}
}
