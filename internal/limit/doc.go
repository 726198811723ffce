// Package limit is the gate's per-record rate-limit check and the local state behind it.
//
// Guarantees:
//
//   - Check and CheckAt do no network or disk I/O, take no lock shared by every core, send
//     on no channel and allocate nothing for a team already in the cache. A team seen for the
//     first time costs one insert under its shard's lock, and so does a check racing the
//     rebuild of its shard's table (index.go), which it waits out.
//   - First contact is allowed. A team is limited when its level reaches its threshold, where
//     level = max(0, estimate − drain × elapsed) + pending / share: the fleet's count at
//     the last read, less what ages out of the window since (drain = prev / window, the
//     sliding-window estimate's own fall), plus what this gate counted since, each record
//     standing for 1 / share of the fleet's, share being this gate's part of the team's
//     traffic as measured between its reads (1 for a gate alone and before a second read;
//     the estimate also holds the other gates' half tick not yet written). Under
//     EventClock, and after a failed read, share is 1.
//   - In Divert mode every record counts toward the team's window, allowed or not; in Cap mode
//     only allowed records count. Every counted record is handed to the tick (Sweep) exactly
//     once for writing to the shared store, also when its entry moves to a new table or is
//     evicted or expired as the check counts it (it is then counted in the team's next
//     entry), except when a whole window passes without a sweep (those counts are stale and
//     reported as dropped), past 2^46 records of a team in a window between two sweeps
//     (8 × the largest threshold: reported as displaced) and, under EventClock, when a window's cache is dropped as a
//     check counts into it (the record then counts as a check whose clock ran that late
//     does: in a newer window, or dropped as stale). A team's counts go
//     on the sweep after the check, except a cold team's (Config.ColdWriteInterval): those
//     wait, at most ColdWriteShare of its threshold, and go by the end of the window after
//     their own.
//   - Memory is bounded: at most Capacity teams are cached; the least recently seen of a
//     small sample is evicted when a shard is full, and teams not seen for IdleTimeout are
//     expired by the sweep, up to a second later (never earlier: seen is kept in whole
//     seconds). A team that could be over its limit (at half its threshold or
//     more, or held) is never evicted: when every team a full shard looks at is one, the
//     cache grows past Capacity, by at most 2 × a window's records ÷ the threshold. Nor is
//     it expired idle while a read has it there: under a window longer than IdleTimeout
//     its next record is judged on the window's count, not as first contact.
//   - With Config.SketchWidth, a key under its floor (SyncFloor × its threshold ÷ the
//     fleet's size, SetFleetSize) is counted in a fixed-size sketch and neither cached nor
//     handed to the tick; the record that brings it to its floor caches it with the
//     sketch's counts less an estimate of the other keys' records they hold, which may
//     be under its own by that noise (sketch.go). The fleet's count of a key every gate
//     keeps in its sketch is under SyncFloor of its threshold.
//   - Threshold overrides are swapped atomically: a check sees either the old set or the new
//     one, never a mix.
//   - With Config.Adaptive, a team's threshold is its override, else its learned threshold
//     (from its profile, as the tick hands it to ApplyProfile), else the default; the check
//     reads it from the same word and is unchanged. Gates holding the same profile derive the
//     same threshold. The learned state is bounded per team (a 124-byte profile and a few
//     words) and freed with the team's entry. Without it nothing of it runs.
//   - A read that failed is not counted as made: the team's view is rebuilt from local
//     counts (ApplyLocal), which drain at threshold / window with share 1 (this gate's own
//     traffic only), so the check fails open, and the team is due
//     again on the next sweep, and on every one after, until a read of it is applied.
//
// The package knows nothing of Kafka or Redis: internal/tick calls Sweep on every tick to
// collect the counts to write and the teams due for a read, ApplyRead to apply what the
// shared store answered, and ApplyLocal for a read it did not answer.
package limit
