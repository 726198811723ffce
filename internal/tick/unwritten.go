// Counts a retired tick holds: a rules reload hands a rule set's limiters over to a new
// tick while the old one keeps, and writes once Redis takes them, the counts Redis
// refused (Drain). The new tick's reads of the same keys add them, as its own.

package tick

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Unwritten is what a gate's retired ticks (Retire) hold that Redis does not: shared by
// the ticks of a gate's successive rule sets (Config.Unwritten), each of which adds it to
// its reads of the same keys, as it adds its own refused counts (notInRedis). Without it,
// the new rule set's first read of a team, with Redis refusing writes, dropped the old
// rule set's counts from the team's level (limit.InheritState keeps them where a read
// takes them out), and a team over its limit was let through by up to them until the old
// tick could write them. A retired tick shares what it holds after each tick's writes; a
// read made between Redis taking them and that tick's end counts them twice, a team held
// a tick early rather than let through. Safe for concurrent use.
type Unwritten struct {
	mu    sync.Mutex // serializes publish
	parts atomic.Pointer[[]unwrittenPart]
}

// unwrittenPart is one retired tick's counts not in Redis, by key.
type unwrittenPart struct {
	t *Ticker
	n map[unwrittenKey]int64
}

// unwrittenKey names a counter as Redis does: the same key prefix, team and epoch are
// the same key, whichever tick counts into it.
type unwrittenKey struct {
	prefix, team string
	epoch        int64
}

// NewUnwritten returns the counts to share between a gate's ticks (Config.Unwritten).
func NewUnwritten() *Unwritten { return &Unwritten{} }

// publish replaces t's part with what t holds now that Redis surely does not (as
// notInRedis counts it); nothing left removes it. Called by t's tick goroutine.
func (u *Unwritten) publish(t *Ticker) {
	if u == nil {
		return
	}
	n := make(map[unwrittenKey]int64)
	for k, v := range t.pending {
		if c := v - t.doubt[k]; c > 0 {
			n[unwrittenKey{t.limits[k.lim].prefix, k.team, k.epoch}] += c
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var parts []unwrittenPart
	if p := u.parts.Load(); p != nil {
		parts = slices.DeleteFunc(slices.Clone(*p), func(p unwrittenPart) bool { return p.t == t })
	}
	if len(n) > 0 {
		parts = append(parts, unwrittenPart{t: t, n: n})
	}
	if len(parts) == 0 {
		u.parts.Store(nil)
		return
	}
	u.parts.Store(&parts)
}

// count is what the retired ticks other than t hold for prefix's key of team in epoch.
func (u *Unwritten) count(t *Ticker, prefix, team string, epoch int64) int64 {
	if u == nil {
		return 0
	}
	p := u.parts.Load()
	if p == nil {
		return 0
	}
	var n int64
	for _, part := range *p {
		if part.t != t {
			n += part.n[unwrittenKey{prefix, team, epoch}]
		}
	}
	return n
}

// Retire says a rules reload replaced t's limiters: from the end of its next tick's
// writes on, t shares what it holds that Redis does not with the gate's other ticks
// (Config.Unwritten), until it is written or dropped. Call it before the new rule set's
// tick starts; safe to call from any goroutine.
func (t *Ticker) Retire() { t.retired.Store(true) }
