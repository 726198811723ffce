// Checking this host's clock against Redis's. Each gate aligns its ticks (and, on the
// wall clock, cuts its epochs) on its own clock, so one whose clock is off the fleet's
// reads the others' counts a tick late, and nothing else says so. Before Run's first
// tick, then once a minute in the time Run leaves between ticks (ending an eighth of an
// interval before the next boundary), it reads the first instance's TIME (a cluster's: the
// live key's primary's, clockSource), sets gate_limiter_clock_offset_seconds,
// and warns, at most every ten minutes, while the offset is over half the read delay by
// more than half the round trip (what the measurement cannot tell apart), or TIME is
// refused.

package tick

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/throttle"
)

// clockCheckInterval is how often Run compares this host's clock with Redis's: a clock
// drifts by seconds over days, not minutes, and one TIME a minute costs nothing.
const clockCheckInterval = time.Minute

// clockCheck compares this host's wall clock with the first Redis instance's (a
// cluster's: the live key's primary's, clockSource), as the one clock every gate of a
// fleet talks to. The gates' clocks matter twice: the epochs every count is written
// under are cut by them, and Run's ticks are aligned on them, writes at each boundary
// and reads a quarter interval later; a gate whose clock is further off
// than that from the others' reads their counts of a tick a tick late. Kubernetes nodes
// keep within milliseconds of each other under NTP; a node whose time service stopped
// does not, and nothing else would say so.
type clockCheck struct {
	wall clock.Clock // this host's wall clock (the real one but in tests)
	last time.Time   // the last check, on wall
	// Each warning keeps its own pace: under one, a TIME refusal's warning held back the
	// skew's for ten minutes once +time was allowed (a review).
	warnTime, warnSkew, warnProfiles *throttle.Every
	// off is the last offset measured, less half its round trip (what the measurement
	// cannot tell apart), as a magnitude. Learned profiles are not written while it is a
	// window or more (withholdProfile).
	off time.Duration
	// ahead is how far this host's clock was last measured ahead of Redis's, less half the
	// round trip; 0 when it is not (or not measured). A key this gate creates gets that
	// much longer to live (createdEarly): created early by Redis's clock, and so the
	// fleet's, it must still outlive its window.
	ahead time.Duration
	// measured: a check has measured off. Until one has, no learned profile is written:
	// off read 0 then, and a gate whose first TIME got no answer (Redis slow or down at
	// its start) wrote the folds of a clock days ahead (a review).
	measured bool
	// refused: TIME itself is refused (no +time, or renamed away), so no check will ever
	// measure off. Folds are written then, as before the check existed: withheld, a
	// fleet whose ACL lacks +time would never learn a threshold, where the warning
	// already asks for +time.
	refused bool
	// shared: Config.Warnings, whose paces init takes in place of the tick's own.
	shared *Warnings
}

// init sets what c was not given, at its first use: here, not in New, so that a test's
// wall clock set after New paces the warnings.
func (c *clockCheck) init() {
	if c.wall == nil {
		c.wall = clock.Real{}
	}
	if c.warnTime == nil && c.shared != nil {
		c.warnTime, c.warnSkew, c.warnProfiles = c.shared.paces(c.wall)
	} else if c.warnTime == nil {
		c.warnTime, c.warnSkew, c.warnProfiles = newClockPaces(c.wall)
	}
}

// checkClock measures the offset once per clockCheckInterval, sets the gauge and warns
// (at most every ten minutes) while it is over half the read delay by more than half the
// round trip; it sets the live key (markLive) at the same pace. A check that TIME got no
// answer for (nor a refusal) is tried again at the next tick.
func (t *Ticker) checkClock(ctx context.Context) {
	c := &t.clockCheck
	c.init()
	start := c.wall.Now()
	if !c.last.IsZero() && start.Sub(c.last) < clockCheckInterval {
		return
	}
	// The same minute's other errand: the key that tells operator tools a fleet runs
	// under this prefix.
	t.markLive(ctx, start)
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	asked, node := t.clockSource(cctx)
	theirs, err := asked.Time(cctx).Result()
	if err != nil {
		t.reloadSlotsAfter(cctx, err) // the live key's primary gone: the next check asks its successor
		if !timeRefused(err) {
			// Redis out of reach, refusing every command (NOAUTH, WRONGPASS, LOADING...),
			// or no answer before the errands' deadline (a loaded host's tick running
			// late): the tick's to report, as it does, with the error. The check, and the
			// live key with it, are tried again at the next tick: marked done, a gate
			// whose first check came too late had no live key and no offset for a minute.
			return
		}
		c.last = start
		c.refused = true
		// TIME alone refused: an ACL without +time (NOPERM), or the command renamed away,
		// under which the offset is never measured and GateClockSkew can never fire.
		t.countOn(classify(err), node)
		if ok, quiet := c.warnTime.Allow(); ok {
			t.log.Warn("the clock check cannot run TIME on redis: this host's clock offset (gate_limiter_clock_offset_seconds) is not measured and the clock-skew alert cannot fire; allow +time for the gate's Redis user",
				"instance", cmp.Or(node, "0"), "err", err, "warnings_unlogged", quiet)
		}
		return
	}
	c.last = start
	rtt := c.wall.Now().Sub(start)
	// Redis read its clock somewhere in the round trip: the midpoint is the estimate, and
	// half the round trip its uncertainty (NTP's). An offset within that of the limit is
	// no evidence: a loaded host's late answer (a 44 ms round trip at a 12.5 ms limit)
	// warned of a clock that was right.
	offset := start.Add(rtt / 2).Sub(theirs)
	t.m.clockOffset.Set(offset.Seconds())
	c.off = max(offset.Abs()-rtt/2, 0)
	c.ahead = max(offset-rtt/2, 0)
	c.measured, c.refused = true, false
	if limit := t.readDelay() / 2; offset.Abs()-rtt/2 > limit {
		if ok, quiet := c.warnSkew.Allow(); ok {
			t.log.Warn("this host's clock is off Redis's by more than the tick can absorb: other gates' counts are read a tick late here, and counts near a window's edge go to a neighbouring epoch; check the node's time service (NTP, chrony)",
				"instance", cmp.Or(node, "0"), "offset", offset.Round(time.Millisecond), "round_trip", rtt.Round(time.Millisecond), "limit", limit, "warnings_unlogged", quiet)
		}
	}
}

// clockSource is the client the clock check asks TIME of and, in cluster mode, its
// primary's address: there the primary of the fleet's live key, the same node for every
// gate of the fleet, where the cluster client sends a command without a key to a node at
// random, each check of each gate another clock, and a refusal could not be told of
// its node. Outside cluster mode, or with no slot map, instance 0 and "".
func (t *Ticker) clockSource(ctx context.Context) (redis.Cmdable, string) {
	if cc, ok := t.instances[0].(*redis.ClusterClient); ok {
		if n, err := cc.MasterForKey(ctx, LiveKeyFor(t.cfg.KeyPrefix)); err == nil {
			return n, n.Options().Addr
		}
	}
	return t.instances[0], ""
}

// timeRefused reports whether err refuses TIME itself, not every command: NOPERM (an ACL
// without +time) or an unknown command (TIME renamed or disabled). Only then is allowing
// +time the cure the clock check's warning gives.
func timeRefused(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (redis.HasErrorPrefix(err, "NOPERM") || strings.HasPrefix(err.Error(), "ERR unknown command"))
}

// withholdProfile reports whether a profile ls's limiter folded is not to be written,
// this host's clock being off Redis's by a window of the limiter or more, or not measured
// yet (no clock check has had TIME's answer, nor found TIME refused), and says so (at most every ten minutes). A
// fold is of the window two back by this host's clock: one ahead by windows folds a
// window that has not ended (its counts partial or none), and puts the profile's last
// fold ahead of the fleet's clock, which finds no fold due until its time comes: the
// fleet's profile would take this host's error (a review: a gate two days ahead froze
// every profile it folded for two days).
func (t *Ticker) withholdProfile(ls *limitState) bool {
	c := &t.clockCheck
	w := ls.l.Config().Window
	if (c.measured || c.refused) && c.off < w {
		return false
	}
	t.m.profiles.WithLabelValues("withheld").Inc()
	c.init()
	ok, quiet := c.warnProfiles.Allow()
	if ok && !c.measured {
		t.log.Warn("this host's clock offset to Redis's is not measured yet (TIME unanswered): the learned profiles it folds are not written until it is, as a clock off by a window or more would fold the wrong windows into the fleet's",
			"window", w, "withheld_unlogged", quiet)
		return true
	}
	if ok {
		t.log.Warn("this host's clock is off Redis's by a window or more: the learned profiles it folds are not written, as they would fold the wrong windows into the fleet's; check the node's time service (NTP, chrony)",
			"offset_at_least", c.off.Round(time.Millisecond), "window", w, "withheld_unlogged", quiet)
	}
	return true
}
