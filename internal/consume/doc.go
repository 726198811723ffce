// Package consume is the gate's Kafka loop: one franz-go client per process that reads
// the input topic as a member of a consumer group, routes every record through a Router
// (internal/route, which asks the limiter) and produces it to its output topic, and
// commits input offsets only behind what the broker has acknowledged (at-least-once,
// the default) or together with the output in one transaction per poll (exactly-once,
// Config.Delivery).
//
// Guarantees (at-least-once):
//
//   - Every polled record is produced to exactly one output topic, or is still being
//     retried when the process stops; none is skipped. A produce that finally fails (after
//     the client's own retries, bounded by Config.ProduceRetries) is logged, counted in
//     gate_produce_errors_total and produced again, with backoff, until it succeeds; a
//     record the broker rejects for good on its topic (too large, invalid) goes to the
//     dead-letter topic instead, with its reason.
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
//   - Memory is bounded: the producer buffers at most Config.MaxBufferedRecords records
//     and Config.MaxBufferedBytes bytes, and blocks when full; while any record is being
//     retried no new records are polled. A slow or failing broker slows consumption.
//   - Run stops gracefully when its context ends: no new poll, in-flight produces
//     awaited (up to Config.ShutdownTimeout), acknowledged offsets committed, the group
//     left.
//
// Guarantees (exactly-once, Config.Delivery = ExactlyOnce):
//
//   - Consumers reading the output topics with read_committed see every input record
//     exactly once, on one output topic, across rebalances, produce failures and
//     crashes: each poll's records are produced, and its input offsets committed, in
//     one transaction (franz-go's GroupTransactSession), which commits whole or not
//     at all. Readers with read_uncommitted (Kafka's default) also see the records of
//     aborted transactions, replayed ones included.
//   - A transaction aborts when a produce in it fails (the poll is replayed after a
//     backoff, 100 ms growing to 5 s) or when the group rebalances before it ends (the
//     records are replayed by whichever member owns their partition next). A record
//     the broker rejects for good is replayed to the dead-letter topic with reason
//     "rejected", without its value if it must, as in at-least-once mode: it cannot
//     stop its partition. An error ending a transaction, which franz-go documents as
//     not retryable, stops Run with the error (at shutdown it is logged: the broker
//     aborts the transaction and the partitions' next owner replays it), with one
//     exception below.
//   - A transaction that outlives Config.TransactionTimeout is aborted by the broker,
//     which fences the producer. Ending a transaction waits for a rebalance in
//     progress, and a join waits for a dead member until its session times out, so a
//     timeout below the group's session timeout (or its rebalance timeout) meets this
//     whenever a member restarts. The gate then recovers in-process, as a restart
//     would: it closes its client, leaving the group, builds a new one under the same
//     transactional id (whose initialisation bumps the producer's epoch), rejoins and
//     replays the aborted poll, logging a warning. A fence that comes before the
//     transaction was open for the timeout can only be another live instance with the
//     same transactional id: Run stops with an error naming the id. So does a sixth
//     timeout within 10 minutes, so that a timeout too short for the gate's polls
//     stops the gate rather than aborting every transaction for ever.
//   - Limiter counts stay at-least-once: an aborted transaction's records were counted
//     by the limiter when routed and are counted again when replayed, so each abort
//     over-counts at most one poll (Config.MaxPollRecords) of the partitions it held.
//   - A crashed instance's open transaction holds back read_committed readers of the
//     partitions it wrote to until it ends: at once when the instance restarts with the
//     same Config.TransactionalID (the restart fences it), else after
//     Config.TransactionTimeout, when the broker aborts it.
//   - Order within an input partition and bounded memory are as in at-least-once mode;
//     rebalances are not held while a poll is routed (the open transaction aborts
//     instead, so a slow poll cannot exceed the group's rebalance timeout).
//   - Run stops gracefully when its context ends: the records polled are routed, the
//     open transaction is committed (its End is given Config.ShutdownTimeout and is
//     not cut short by the cancellation), the group left.
//
// The package logs lifecycle events only (start, assigned, revoked, lost, shutdown),
// never a line per record.
package consume
