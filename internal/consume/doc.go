// Package consume is the gate's Kafka loop: a franz-go client per process that reads
// the input topic as a member of a consumer group, routes every record through a Router
// (internal/route, which asks the limiter) and produces it to its output topic (at least
// once through a second client of its own, so that a produce throttle holds none of the
// group's requests: producer.go), and commits input offsets only behind what the broker
// has acknowledged (at-least-once,
// the default) or together with the output in transactions that span polls, up to
// Config.TransactionInterval and Config.TransactionMaxRecords (exactly-once,
// Config.Delivery).
//
// Guarantees (at-least-once):
//
//   - Every polled record is produced to exactly one output topic, or is still being
//     retried when the process stops; none is skipped but by the operator's choice
//     below. The client retries retriable broker errors in order (without a bound
//     unless Config.ProduceRetries sets one); a produce that finally fails is logged,
//     counted in gate_produce_errors_total and produced again, with backoff.
//   - A record the broker refuses for good (too large, invalid, a timestamp out of the
//     topic's bounds) is first produced again alone, as brokers refuse whole batches:
//     only a record refused on its own moves on, to the dead-letter topic stamped now
//     (reason rejected), then there without its value; one refused even so is
//     undeliverable, and Config.OnUndeliverable stops its partition (not ready, named)
//     or skips it (logged, counted). Never an endless retry. A record without a key to
//     a topic written without keys that the last read of its settings found compacted
//     is refused for sure: it goes to dead letter unsent (deadLetterUnsent; exactly
//     once with outcomes on, through one aborted transaction a poll, refuseKnown, so
//     that the outcome rows count it where it went).
//   - One key's records keep their input order on their output topic through the
//     retries of failures the broker may cure (a leader moving, a timeout): routing
//     holds while a record awaits its retry, and retries go out in the order the client
//     failed them, once every produce in flight has been answered. Not through a batch
//     the broker refuses for good (too large, invalid, a timestamp out of bounds): the
//     client reports it only after later records of its partition may have been sent,
//     so the batch's other records, produced again alone, can land after them.
//   - Before consuming, the input and output topics are checked to exist and to be
//     readable and writable; until they are, and while a produce fails for want of a
//     topic or an ACL, the consumer is not ready (NotReady names the problem). A
//     group coordinator a new cluster is still creating is waited for, not reported.
//     With exactly-once, a transaction timeout the brokers refuse is named, and the
//     consumer stays up, not ready, trying again (never an exit into a crash loop).
//   - Output records waiting unacknowledged for 10 s make the consumer ask the cluster
//     why; output partitions without a leader or under their min.insync.replicas are
//     named and make it not ready until writes are acknowledged again (outputs.go). A
//     broker's throttling under a client quota is counted and logged (quota.go).
//   - A gate with work and no progress (at least once no poll returning records and no
//     commit; exactly once no transaction committed, an aborted one's records being
//     polled again) is reported not ready after Config.StallNotReady and not live
//     after Config.StallRestart (watchdog.go); an idle one never is.
//   - A record gone from the input before it was polled (deleted by retention below the
//     gate's position or the group's committed offset, or lost by a broker) cannot be
//     routed, but is never skipped in silence: each gap is logged as an error with its
//     offsets and counted in gate_records_lost_total, then the partition resumes after
//     it or stops there (Config.OnDataLoss; see loss.go). So in exactly-once mode.
//   - An input offset is committed only once every record before it in its partition has
//     been acknowledged by the broker on its output topic, so a crash replays at most
//     what was routed since the last commit (Config.CommitInterval).
//   - Order is kept within an input partition: its records are routed and handed to the
//     producer by one goroutine, in offset order. Partitions are routed in parallel, all
//     sharing one limiter.
//   - Rebalances neither lose nor replay: rebalances are held while a poll's records are
//     being routed, and before a partition is given up its in-flight records are awaited
//     (up to Config.RevokeTimeout) and what is acknowledged is committed synchronously.
//     A rebalance waiting for the poll stops its routing (the client is moved back to the
//     first record not routed), so a full buffer before a hung broker cannot hold a
//     joining member.
//   - Memory is bounded: the producer buffers at most Config.MaxBufferedRecords records
//     and Config.MaxBufferedBytes bytes, and blocks when full; while any record is being
//     retried no new records are polled. A slow or failing broker slows consumption.
//     Besides the records in flight, the poll being routed and the fetch the client
//     buffers meanwhile (one a broker) are held, decompressed: kgo.FetchMaxBytes in
//     Config.ClientOpts bounds each as fetched (GATE_KAFKA_FETCH_MAX_BYTES).
//   - Run stops gracefully when its context ends, within Config.ShutdownTimeout + 2 ×
//     Config.RevokeTimeout whatever hangs: no new poll, in-flight produces awaited (up to
//     Config.ShutdownTimeout, after which what is buffered is failed), acknowledged
//     offsets committed (up to Config.RevokeTimeout), the group left (the same), then
//     the producer's client closed (about a second at most).
//
// Guarantees (exactly-once, Config.Delivery = ExactlyOnce):
//
//   - Consumers reading the output topics with read_committed see every input record
//     exactly once, on one output topic, across rebalances, produce failures and
//     crashes: a transaction's records (its polls', up to Config.TransactionInterval and
//     Config.TransactionMaxRecords) are produced, and their input offsets committed, in
//     one transaction (franz-go's GroupTransactSession), which commits whole or not
//     at all. Readers with read_uncommitted (Kafka's default) also see the records of
//     aborted transactions, replayed ones included.
//   - A transaction aborts when a produce in it fails (its records are replayed after a
//     backoff, 100 ms growing to 5 s) or when the group rebalances before it ends (the
//     records are replayed by whichever member owns their partition next; with
//     Config.StartOffset StartLatest, a partition the group never committed has where
//     the gate started it committed, outside the transaction, at its assignment (or,
//     should that fail, before its first records are produced), so its next owner does
//     not start at the log's end). A record
//     the broker rejects for good is replayed alone, then to the dead-letter topic,
//     then without its value, then Config.OnUndeliverable decides, as in at-least-once
//     mode. After an abort the gate did not ask for (franz-go retries a commit that
//     failed as an abort, and a broker can apply a commit and answer it with an error)
//     the client is moved to the group's committed offsets, so a committed poll is not
//     routed again. An error ending a transaction that leaves its outcome unknown (no
//     answer, a retriable or unknown-server error; franz-go says the client cannot go
//     on) is recovered from as a fence is below, counted; a definite refusal stops Run
//     with the error; at
//     shutdown it is logged: the broker aborts the transaction and the partitions'
//     next owner replays it.
//   - A transaction that outlives Config.TransactionTimeout is aborted by the broker,
//     which fences the producer. Ending a transaction waits for a rebalance in
//     progress, and a join waits for a dead member until its session times out, so a
//     timeout below the group's session timeout (or its rebalance timeout) meets this
//     whenever a member restarts. The gate then recovers in-process, as a restart
//     would: it closes its client, leaving the group, builds a new one under the same
//     transactional id (whose initialisation bumps the producer's epoch), rejoins and
//     replays the aborted transaction's records, logging a warning. A fence that comes
//     before the transaction was open for the timeout can only be another live instance
//     with the same transactional id: Run stops with an error naming the id. So does a
//     sixth timeout within 10 minutes that no rebalance explains, so that a timeout too
//     short for the gate's transactions stops the gate rather than aborting every
//     transaction for ever; a fence behind a rebalance (a peer that died without leaving holds every
//     join for its session) is the group's doing and never counts.
//   - A record counts once toward its team however often its transaction is replayed
//     by this gate, and goes where it went the first time: records below how far the
//     limiter has counted a partition are not counted again, and take the decisions
//     their first routing made (route.Decisions), kept until the gate commits past
//     them or commits without owning their partition (judged afresh only after a rules
//     reload, when their partition comes back after such a commit, or past where a
//     broker's loss made the log diverge). A partition that moves to another gate
//     mid-transaction is counted again there (at most the open transaction's records of
//     it per rebalance).
//   - A crashed instance's open transaction holds back read_committed readers of the
//     partitions it wrote to until it ends: at once when the instance restarts with the
//     same Config.TransactionalID (the restart fences it), else after
//     Config.TransactionTimeout, when the broker aborts it.
//   - Order within an input partition and bounded memory are as in at-least-once mode;
//     rebalances are not held while a poll is routed (the open transaction aborts
//     instead, so a slow poll cannot exceed the group's rebalance timeout).
//   - Run stops gracefully when its context ends: the records polled are routed, the
//     open transaction is committed (routing, producing and End are given
//     Config.ShutdownTimeout and are not cut short by the cancellation, but by its end),
//     the group left (up to Config.RevokeTimeout).
//
// The package logs lifecycle events only (start, assigned, revoked, lost, shutdown),
// never a line per record.
package consume
