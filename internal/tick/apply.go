// Applying reads to the limiters. A read that failed rebuilds the team's view from this
// gate's own counts (fail-open: views go stale and keep draining). A read that succeeded
// has this gate's counts that Redis surely does not hold added to it, so a team over its
// limit stays limited while Redis refuses writes.

package tick

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/capturegate/gate/internal/limit"
)

// applyReads applies the reads sent; fresh says they were made after every gate of the
// fleet wrote its counts of this tick's boundary (a split tick's read phase).
//
// A read that succeeded while some of this gate's counts for the team are not in Redis
// (refused: OOM, READONLY, MISCONF; or one key's error) does not hold them: they are
// added to what it returned, as if written. Applying it as returned would drop them from
// the level, and a team over its limit would be let through for as long as Redis refuses
// writes. They stay in every read until they are written (and so in what Redis returns)
// or dropped (stale epoch).
//
// fleetRefused: while the instance (in cluster mode, the read's primary) refuses this
// gate's writes for what every gate meets (OOM, NOREPLICAS, MISCONF, a command it lacks:
// fleetRefusals) it refuses every gate's,
// and what the others count is missing from the read too. Each gate adding its own alone, N
// gates sharing a team let N times its limit through (4 gates, a team at 4 × its limit:
// 4,706 of 4,800 records admitted in 2 minutes, about 1,200 allowed;
// TestFleetRefusingWritesKeepsLimit). The refused counts are scaled by the team's fleet
// factor (limit.Limiter.FleetFactor: the fleet's records per record counted here, about
// N for one of N gates sharing it evenly, 1 for a gate that has it alone), so the read
// grows as the fleet's count would; the factor is not learned from such a read
// (limit.Read.Refused), which holds this gate's prediction, not the fleet's count.
func (t *Ticker) applyReads(res *TickResult, fresh bool) {
	res.Reads = 0
	applyAt := t.limits[0].l.Clock().Now()
	for i := range t.plans {
		p := &t.plans[i]
		for _, rc := range p.rcmds {
			// Refused for every gate alike: a full Redis, too few replicas, a failed
			// snapshot, a command it lacks; on the read's node (execute), not the
			// instance's: one full primary of a cluster refuses no other's writes, and
			// took every node's reads for refused ones, their fleet factors frozen.
			// READONLY and a refused login can be this gate's alone (a failover its client
			// has not followed, a password its pod has not got yet), the others writing to
			// the primary: their counts are in the read, and scaling this gate's own
			// counted them twice, limiting a team under its limit.
			refused := t.lanes[rc.lane].refused
			if rc.cmd.Err() != nil {
				// Fail open: rebuild these views from what this gate counted, so that
				// they keep draining instead of piling up pending records; the limiter
				// keeps them due, so they are read again next tick.
				for _, rr := range rc.teams {
					t.limits[rr.lim].l.ApplyLocal(rr.r, applyAt)
					t.notePrimedMissed(res, rr.r, rr.lim)
				}
				res.FailedReads += len(rc.teams)
				continue
			}
			vals := rc.cmd.Val()
			at := 0
			// Where a value that does not parse was read: in cluster mode its primary.
			instance := t.laneInstance(i, p, rc.lane)
			for _, rr := range rc.teams {
				l := t.limits[rr.lim].l
				base := at
				curr, err1 := counterValue(vals[at])
				prev, err2 := counterValue(vals[at+1])
				var flag any
				if at += 2; rr.r.Hold {
					flag = vals[at]
					at++
				}
				pvals := vals[at : at+profileVals(rr.r)]
				at += len(pvals)
				if err1 != nil || err2 != nil {
					epoch, v := rr.r.Epoch, vals[base]
					if err1 == nil {
						epoch, v = rr.r.Epoch-1, vals[base+1]
					}
					t.unreadable(instance, valueCounter, t.key(rr.lim, rr.r.Team, epoch), v, nil)
					l.ApplyLocal(rr.r, applyAt)
					res.FailedReads++
					t.notePrimedMissed(res, rr.r, rr.lim)
					continue
				}
				// Refused, the other gates' counts are not in Redis either: they are what
				// this gate's fleet factor, learned while Redis took writes, predicts from
				// its own (fleetRefused).
				f := 1.0
				if rr.r.Refused = refused; refused {
					f = l.FleetFactor(rr.r) // kept as it was while the refusal lasts: Read.Refused
				}
				curr += scaled(t.notInRedis(countKey{rr.lim, rr.r.Team, rr.r.Epoch}), f)
				prev += scaled(t.notInRedis(countKey{rr.lim, rr.r.Team, rr.r.Epoch - 1}), f)
				rr.r.Fresh = fresh
				a := l.ApplyRead(rr.r, curr, prev, applyAt)
				t.noteRead(rr.r, rr.lim)
				// The profile before the hold flag: a flag set under a learned threshold
				// is judged by this gate's learned threshold, which a first look sets.
				if len(pvals) > 0 {
					t.applyProfile(instance, rr, pvals, applyAt)
				}
				if v, ok := flag.(string); ok {
					if f, ok := parseHold(rr.r.Team, v); ok {
						l.ApplyHold(rr.r, f)
					} else {
						t.unreadable(instance, valueHold, HoldKeyFor(t.cfg.Mode, t.limits[rr.lim].prefix, rr.r.Team), v, nil)
					}
				}
				t.m.drift.Observe(a.Drift)
				if a.Staleness > 0 {
					t.m.staleness.Observe(a.Staleness.Seconds())
				}
				res.Reads++
			}
		}
	}
}

// notInRedis is what this gate counted for k that Redis surely does not hold: pending
// counts not in doubt (not sent: over budget, or behind a lane's batches in doubt;
// refused; or a key's own error), this tick's and those of the rule sets a reload
// retired that count into the same key (Config.Unwritten). Counts in doubt are most
// likely in Redis (a reply lost to a stall) and are not added.
func (t *Ticker) notInRedis(k countKey) int64 {
	return max(t.pending[k]-t.doubt[k], 0) + t.cfg.Unwritten.count(t, t.limits[k.lim].prefix, k.team, k.epoch)
}

// counterValue reads one MGET value: nil (no key) is 0.
func counterValue(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading counter %q: %w", x, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("reading counter: unexpected %T", v)
}

// scaled is n records scaled by fleet factor f (≥ 1), rounded.
func scaled(n int64, f float64) int64 {
	if n <= 0 || f <= 1 {
		return n
	}
	return int64(math.Round(float64(n) * f))
}

// notePrimedMissed counts r in res.PrimedMissed when it is a read of a key Expect marked,
// and keeps its key for the next TickNow (primedMissed): a tick Run scheduled may take
// the mark between Expect and TickNow's own tick, which then reads the key as any due
// read, and TickNow said all was read (a review).
func (t *Ticker) notePrimedMissed(res *TickResult, r *limit.Read, lim int) {
	if r.Reason != limit.ReadPrimed {
		return
	}
	res.PrimedMissed++
	k := teamRef{lim, r.Team}
	if _, ok := t.primedMissed[k]; ok {
		return
	}
	if len(t.primedMissed) >= maxPrimedMissed {
		t.primedMore++
		return
	}
	k.team = strings.Clone(k.team) // kept past the sweep whose read it was
	t.primedMissed[k] = struct{}{}
}

// maxPrimedMissed bounds the keys primedMissed holds: a gate's prime sample (some
// hundreds of keys a poll) between two TickNows.
const maxPrimedMissed = 1 << 14

// noteRead forgets a key whose read a tick applied from Redis: a primed read missed
// before is no longer missed.
func (t *Ticker) noteRead(r *limit.Read, lim int) {
	if len(t.primedMissed) > 0 {
		delete(t.primedMissed, teamRef{lim, r.Team})
	}
}

// takePrimedMissed returns how many keys Expect marked were missed and not read since
// the last call (primedMissed), and forgets them.
func (t *Ticker) takePrimedMissed() int {
	n := len(t.primedMissed) + t.primedMore
	clear(t.primedMissed)
	t.primedMore = 0
	return n
}
