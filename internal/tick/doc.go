// Package tick is the gate's tick: the one goroutine per process that moves counts and
// global views between the local limiter and Redis.
//
// Guarantees:
//
//   - The per-record path never waits on Redis: all Redis work happens here, on a timer.
//   - Each tick sends at most one pipeline per Redis instance, writes before reads (MGET
//     of the current and previous epoch), so a read includes this instance's own counts;
//     instances run in parallel. Every tick is bounded by Config.TickTimeout (3/4 of the
//     interval): a server or node that hangs costs its own teams that tick, never the
//     next tick's start nor the other nodes' teams.
//   - Counts are written exactly once while Redis keeps what it acknowledged. Writes go in
//     batches run by a script (writeScript) under this process's sequence number on the
//     batch's lane (an instance; a hash-tag shard in cluster mode), and a batch resent
//     with its number changes nothing if it was applied before. A batch whose reply is
//     lost (a timeout, a stall, a broken connection) is therefore resent as it is until
//     answered, and no new batch is made for its lane meanwhile; a batch refused (an
//     error reply) was not applied and its counts go in a new one. Counts are dropped
//     only when their epoch is older than the previous one (then they no longer matter;
//     under the event clock, older than GATE_MAX_EVENT_AGE) or at the pending-write cap;
//     both drops are counted. When Redis loses writes it acknowledged (a failover to a
//     replica that had not received them, a restart), the next write's reply shows the
//     lane's number behind, and the batches confirmed in the last Config.KeepConfirmed
//     (counted in ticks Redis answered the lane's writes in, so an outage ages none) are
//     sent again; older ones are reported lost.
//   - A counter's TTL is set once, when a write creates it: KeyTTL (at least 2 of its own limit's windows)
//     plus a margin for clock skew between gates. A PEXPIRE refused (an ACL without it) is
//     an error, counted and logged: the counter, written, would never expire.
//   - Counts Redis has not taken stay in the level until it takes them. A pipeline can
//     partly fail, and every command's error is checked, not only the pipeline's: when
//     writes fail while the same pipeline's reads succeed (Redis refusing writes: OOM
//     under maxmemory with noeviction, READONLY from a demoted primary, MISCONF after a
//     failed snapshot; or an error on one key), each read is applied as if this gate's
//     counts still waiting for its keys had been written, so a team over its limit stays
//     limited while Redis refuses writes. Those counts are sent again every tick until
//     written, or dropped as above; as their epochs age they weigh in the level as they
//     would in Redis, so a team within its limit is not limited by them.
//   - Work per tick is bounded (keys per tick, keys per command) and memory is bounded (a
//     cap on pending writes; reads are planned afresh from the limiter each tick).
//   - Redis errors and timeouts are counted by cause (timeout, connection, tls, oom,
//     readonly, noreplicas, misconf, redis, parse) and logged, never returned to a check: the
//     limiter's views go stale and keep draining (fail-open), dead connections are replaced
//     by the client's pool, and the next tick tries again. The log says when an instance
//     starts failing, then at most once a minute while it goes on (sooner for a cause
//     no line named within the minute), and when it works again: not a line per tick.
//   - A team is always sent to the same Redis instance, by a stable hash of its name that
//     every gate in the fleet computes alike (standalone mode).
//   - In cluster mode (Config.Mode) there is one ClusterClient and, each tick, one of its
//     pipelines per primary, run in parallel, so that a node that hangs fails its own
//     commands only (send.go); keys are hash-tagged by
//     shard (ClusterKey: ClusterShards tags), so a shard's keys share a slot and one
//     script writes, one MGET reads, many teams. MOVED and ASK are followed by the client
//     and counted; TRYAGAIN (a multi-key command on a slot in migration) is counted too,
//     and what it refused is written and read again next tick, without an error, as is
//     what is left with an ASK when the client's redirects run out.
//   - In sentinel mode there is one failover client, which asks the sentinels for the
//     primary and so follows a promotion without a restart; keys are those of standalone.
//   - Under the event clock (limit.EventClock) counts go to the epoch of each record's
//     timestamp and a read fetches the epoch of the entry read and the one before, so a
//     team may be read in several epochs in one tick; keys live MaxEventAge longer.
//   - With adaptive thresholds (limit.Config.Adaptive) no round trip is added to a tick: a
//     team's profile and the count it folds ride in the read's MGET, and folded profiles go
//     in the next tick's pipeline, one script per lane and KeysPerCommand profiles, each set
//     only if the stored one is still at the epoch it was folded from (profile.go). A lost race or a lost write leaves the
//     stored profile as another gate folded it, or for the next fold.
//   - Run ends with a final flush of pending counts. A tick whose final flush failed can
//     go on flushing (Drain): its counts in doubt can be sent again only under its writer.
//     A tick retired by a rules reload (Retire) shares what it cannot write with the
//     gate's other ticks (Config.Unwritten), which add it to their reads of its keys.
package tick
