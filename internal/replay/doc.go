// Package replay runs recorded traffic (the input topic) through the gate's own router
// and limiters and reports what the gate would have done: `gate replay`.
//
// Guarantees:
//
//   - Safe: Read reads with a client of its own that joins no consumer group (it assigns
//     itself the partitions), commits no offset, and produces nothing; nothing here
//     touches Redis. The gates' group and every topic are as they were.
//   - The same decisions: each candidate is the router and the limiters the gate builds
//     from the same settings (a rules file, or the GATE_* limits), on the gate's clock:
//     on the event clock every record is judged in the window of its own timestamp; on
//     the wall clock as a gate routing it at its record time would, holds included. One
//     process sees every partition, so counting is exact (every key is cached: the
//     sketch of quiet keys, and max_keys with it, are left out); a store in memory stands
//     for the fleet's Redis (store.go), so that views are read, learned thresholds folded
//     and holds shared as a fleet's are. What the gate reads from Redis at run time (the
//     live overrides) is not replayed: GATE_OVERRIDES is.
//   - A record's replay time is its timestamp, or the earliest of its partition's next
//     replayLookAhead records' no earlier than the replay times before it, when that is
//     earlier (merge): a record stamped far ahead, or a run of them shorter than that,
//     moves the replay's clock no further than its neighbours, one stamped behind moves
//     no other record's, and -from and -to select by replay time.
//   - Deterministic: records are routed in replay-time order across partitions (ties by
//     partition, then offset), whatever way the fetches come, on limiters whose clock
//     starts an hour before the range, and the report is sorted and in UTC: two replays
//     of the same range give the same report byte for byte while no limiter's cache is
//     full (an eviction's choice depends on hashes seeded per process). On several
//     workers (Engine.Workers, parallel.go) too: the report is one goroutine's.
//   - Bounded: a candidate keeps a row per (minute, key, rule, outcome, reason) for the
//     minute being routed (at most MaxRowsPerMinute; keys past it are folded into one
//     row and counted), and a series only for the keys that came within half of their
//     threshold, a point for each minute they were; on workers, each worker as much. A
//     partition read ahead of the others pauses its fetches, and one read to its end
//     stops them; a worker behind holds the reader once 8 batches wait for it.
//   - Bad input gets the gate's dead-letter reasons in the report, nothing more.
package replay
