// Package outcome counts what became of every record the gate routes, per team, rule,
// outcome and reason, and writes the counts as rows (schema.go) to an outcomes topic that
// billing, the product and support read after the fact (Sentry Relay's outcomes; `gate
// outcomes` reads them from a terminal).
//
// Guarantees:
//
//   - Every record routed with an Agg (route.Scratch.Outcomes) is counted in exactly one row of its own
//     outcome (accepted, overflow, tagged, topic, dead_letter or dropped), with its bytes;
//     a shadow rule over it adds a shadow_over row beside, which counts no record of the
//     output topics. So, summed over a team's rows but shadow_over, records equal what
//     the gate wrote for it (or dropped).
//   - Rows are partial sums: a gate seals many times within an interval (every
//     transaction with exactly-once delivery, every GATE_OUTCOMES_FLUSH_INTERVAL with at-least-once),
//     and a reader sums the rows of one (interval_start, team, key, rule, outcome,
//     reason). A seal merges the Aggs of a gate's routing goroutines (Seal): one row per
//     key, rule, outcome and reason whichever partition counted it. Each row names its
//     seal (id), and the seal's SealInfo record names the input offsets it covers, so a
//     reader sees records counted twice, by a replay, as two seals over overlapping
//     offsets.
//   - Memory is bounded: a Budget shared by a gate's Aggs caps the rows held at once.
//     Keys that arrive once it is spent are summed into one row per (interval, rule,
//     outcome, reason) with an empty key and "folded": true, their records counted in
//     gate_outcome_folded_records_total; a new key of a team kept before (a user of
//     it, under a composite key) is counted in its team's row instead. Keys are taken
//     first come: a key that sends much arrives early in each seal, so the keys that
//     matter stay exact.
//   - Recording allocates nothing once a row exists: the lookup uses the record's own
//     key bytes, and only a new row copies it.
//
// An Agg is not safe for concurrent use: the consumer gives each routing goroutine its
// own, and seals them while none routes.
package outcome
