// Package consume is the gate's Kafka loop: one franz-go client per process that reads
// the input topic as a member of a consumer group, routes every record through a Router
// (internal/route, which asks the limiter) and produces it to its output topic, and
// commits input offsets only behind what the broker has acknowledged.
//
// Guarantees (at-least-once):
//
//   - Every polled record is produced to exactly one output topic, or is still being
//     retried when the process stops; none is skipped. A produce that finally fails (after
//     the client's own retries, bounded by Config.ProduceRetries) is logged, counted in
//     gate_produce_errors_total and produced again, with backoff, until it succeeds; a
//     record the broker rejects for good on its topic (too large, invalid) goes to the
//     dead-letter topic instead, with its reason.
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
// The package logs lifecycle events only (start, assigned, revoked, lost, shutdown),
// never a line per record.
package consume
