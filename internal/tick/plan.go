// Planning a tick: what each instance's pipeline writes and reads. Writes go first, then
// reads, within the tick's key budget (KeysPerTick; reads also MaxReadsPerTick, teams
// nearest their limit first), the rest waiting for the next tick. A lane with batches in
// doubt resends them as they are and gets no new batch until they are answered, so a
// lane's batches reach Redis in the order of their numbers. Counts are dropped only past
// the pending-write cap or once their epoch is no longer written, and every drop is
// counted.

package tick

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
)

// readRef is a planned read and the limiter it belongs to.
type readRef struct {
	lim  int
	r    *limit.Read
	prio float64 // over budget: the order reads are made in (readPriority)
}

// teamRef is one limiter's team.
type teamRef struct {
	lim  int
	team string
}

// putOff is how many ticks in a row a due read has been put off by the read budget, as of
// tick (Ticker.tickN).
type putOff struct {
	n    int
	tick uint64
}

// readAging is what each tick a due read was put off adds to its pressure when the reads
// due are over budget: the nearest their limit go first, but a read put off catches up
// with nearer ones, a tier's width in about three ticks. Sorted by pressure alone, a team due on every
// tick (hot, HotEveryTick; or a failed read's retry) behind as many hotter ones as the
// budget holds was never read: its view stayed this gate's own counts for as long.
const readAging = 0.1

// readPriority is the order a due read is made in when over budget, highest first: the
// teams nearest their limit, whose decision a read changes, from under it by pressure and
// from over it by its inverse, so a team far over its limit (limited whatever a read
// says) ranks as one as far under it. By pressure alone, teams at 5 × their threshold read
// every tick put a team at 0.95 × off for 40 ticks, one at 50 × for 490.
func (t *Ticker) readPriority(rr readRef) float64 {
	if rr.r.Reason == limit.ReadPrimed {
		// Its records wait for it (TickNow): a gate taking partitions over routes none
		// of them until this tick has read it: before any other read.
		return 2
	}
	p := rr.r.Pressure
	if p > 1 {
		p = 1 / p
	}
	return p + readAging*float64(t.putOff[teamRef{rr.lim, rr.r.Team}].n)
}

// plan is one instance's share of a tick.
type plan struct {
	batches []*batch // resends first (in order, by lane), then new batches
	lanes   []int    // the instance's lanes, in order
	writes  int      // counts in batches
	reads   int      // teams read
	// readKeys is the keys the reads carry (readCost), with writes what fitBudget weighs.
	readKeys int
	err      error // the first command's error that makes the pipeline failed (not TRYAGAIN)
	dur      time.Duration
	// The last send's (a split tick sends twice).
	sent    int
	sendErr error
	rcmds   []readCmd
	holds   []holdWrite // hold flags to set (limit.HoldFlag)
	// The commands that set them (send.go): a SET for a lane's one flag, a holdScript
	// EVAL per KeysPerCommand of several.
	holdSets, holdEvals int
	// learned profiles to set (profile.go), and their scripts once queued
	profiles []profileWrite
	pcmds    []profileCmd
	// What failed, command by command: a pipeline can partly fail, as when Redis
	// refuses writes (OOM, READONLY, MISCONF) and still answers reads.
	failedWrites int // counts whose batch was refused or unanswered, or whose key failed
	failedReads  int // teams whose read failed, as reads counts them (not MGETs: 5 of 300 when all failed)
	tryAgain     int // commands answered TRYAGAIN or left with an ASK (a slot in migration): retried next tick
	causes       causeSet
	// Cluster mode only: each pipeline's primary (its address, "" with no slot map) in
	// the last send (pipelines), and the causes by primary over the tick's sends, so that
	// the errors metric and the log name the node that failed, not the one instance.
	nodes      []string
	nodeCauses map[string]causeSet
	// nodeDur: cluster mode, each primary's pipeline time over the tick's sends (as dur
	// the instance's), so that the pipeline duration names the slow node.
	nodeDur map[string]time.Duration
	// refusedLogin: a command was refused for the gate's login or rights (loginRefusal),
	// which its log line names, as no retry cures them.
	refusedLogin bool
	// missingCommand: a command the server does not have (commandMissing).
	missingCommand bool
	// tlsCert: a TLS failure (causeTLS) was on a certificate (tlsreload.Refused), not a
	// TLS version the two do not share: the line names the files then.
	tlsCert bool
}

// has reports whether the plan has work in the given parts.
func (p *plan) has(part int) bool {
	return part&partWrites != 0 && len(p.batches)+len(p.holds)+len(p.profiles) > 0 || part&partReads != 0 && p.reads > 0
}

// readCmd is one MGET and the teams it reads: per team its counters of the read's epoch
// and the one before, then its hold flag when the read asks for it (Read.Hold).
type readCmd struct {
	cmd   *redis.SliceCmd
	teams []readRef
	lane  int // the lane the teams' keys are on
	// unsent: failed before it was sent, its lane's node hung (queueReads), and counted
	// in failedReads then
	unsent bool
}

// holdWrite is one hold flag to set, on a lane's node.
type holdWrite struct {
	lane int
	key  string
	val  string
	ttl  time.Duration
}

// prepare takes each limiter's counts and due reads and plans the tick's commands.
func (t *Ticker) prepare(withReads bool, res *TickResult) {
	t.tickN++

	// 1. Take each limiter's counts and due reads.
	for li := range t.limits {
		ls := &t.limits[li]
		now := ls.l.Clock().Now()
		ls.oldest = ls.l.OldestEpoch(now)
		if withReads {
			ls.l.Sweep(now, &ls.sweep)
		} else {
			ls.l.SweepAll(now, &ls.sweep) // a flush: cold teams' counts too
		}
		res.Dropped += ls.sweep.Stale
		t.m.dropped.WithLabelValues("stale_epoch").Add(float64(ls.sweep.Stale))
		t.logSpikes(ls)
		t.logRotations(ls, now)
		t.logOverfull(ls, now)
		for _, c := range ls.sweep.Counts {
			k := countKey{li, c.Team, c.Epoch}
			if _, ok := t.pending[k]; !ok && len(t.pending) >= t.cfg.MaxPendingWrites {
				res.Dropped += c.N
				t.m.dropped.WithLabelValues("write_cap").Add(float64(c.N))
				continue
			}
			t.pending[k] += c.N
		}
	}
	for k, n := range t.pending {
		if k.epoch < t.limits[k.lim].oldest {
			delete(t.pending, k)
			delete(t.doubt, k)
			res.Dropped += n
			t.m.dropped.WithLabelValues("stale_epoch").Add(float64(n))
		}
	}
	t.dropStaleDoubt()
	t.forgetConfirmed()

	// 2. Plan: writes first, then reads, within the key budget. A lane with batches in
	// doubt resends them as they are and gets no new batch until they are answered.
	for i := range t.plans {
		p := &t.plans[i]
		clear(p.batches)
		clear(p.rcmds)
		clear(p.holds)
		clear(p.profiles)
		clear(p.pcmds)
		clear(p.nodeDur)
		*p = plan{batches: p.batches[:0], rcmds: p.rcmds[:0], holds: p.holds[:0], profiles: p.profiles[:0], pcmds: p.pcmds[:0], lanes: p.lanes, nodes: p.nodes[:0], nodeDur: p.nodeDur}
	}
	clear(t.open)
	budget := t.cfg.KeysPerTick
	// left is each instance's own budget, what the ticks that timed out on it left
	// (fitBudget; the whole budget otherwise): a hung instance's cut costs no other its
	// writes or reads.
	left := t.instanceBudgets()
	for li := range t.lanes {
		ln := &t.lanes[li]
		ln.hung, ln.refused = false, false
		p := &t.plans[ln.inst]
		for j, b := range ln.doubt {
			if p.writes > 0 && len(b.items) > left[ln.inst] {
				// Over what the ticks that timed out on the instance left it: the lane's
				// batches from here on wait for a later tick, in order (a lane's numbers
				// may be sent over any number of ticks, never out of order); the
				// instance's first always goes, so that a backlog moves.
				for _, w := range ln.doubt[j:] {
					res.CarriedWrites += len(w.items)
				}
				break
			}
			p.batches = append(p.batches, b)
			p.writes += len(b.items)
			budget -= len(b.items)
			left[ln.inst] -= len(b.items)
		}
	}
	// Keys the writes leave for the reads due: writing the whole budget tick after tick
	// (more teams with counts than GATE_KEYS_PER_TICK) read no team ever, every gate
	// deciding on its own counts a team the fleet had far over its limit (a review: 0
	// reads in 20 ticks). Two keys, a tick's first read (below); a budget under four
	// keeps them every other tick, so that the writes go on too.
	reserve := 0
	if withReads && (t.cfg.KeysPerTick >= 4 || t.tickN%2 == 0) {
		for li := range t.limits {
			if len(t.limits[li].sweep.Reads) > 0 {
				reserve = 2
				break
			}
		}
	}
	for k, n := range t.pending {
		n -= t.doubt[k]
		if n <= 0 {
			continue // all of it in doubt, resent above
		}
		li := t.laneFor(k.team)
		if budget <= reserve || left[t.lanes[li].inst] < 1 || len(t.lanes[li].doubt) > 0 {
			res.CarriedWrites++
			continue
		}
		budget--
		left[t.lanes[li].inst]--
		g := t.limits[k.lim].ttlGroup
		o := li*t.ttlGroups + g
		b := t.open[o]
		if b == nil || len(b.items) == t.cfg.KeysPerCommand {
			ln := &t.lanes[li]
			ln.seq++
			b = &batch{lane: li, ttl: t.limits[k.lim].ttl, seq: ln.seq, items: make([]item, 0, min(t.cfg.KeysPerCommand, len(t.pending)))}
			t.open[o] = b
			p := &t.plans[ln.inst]
			p.batches = append(p.batches, b)
		}
		b.items = append(b.items, item{k, n})
		t.plans[t.lanes[li].inst].writes++
	}
	// Hold flags: one SET each, refreshed every tick while the team is over its release
	// level, living as long as a hold. A few teams at most (those over their limit).
	for li := range t.limits {
		ls := &t.limits[li]
		for _, f := range ls.sweep.Holds {
			ln := t.laneFor(f.Team)
			p := &t.plans[t.lanes[ln].inst]
			p.holds = append(p.holds, holdWrite{ln, HoldKeyFor(t.cfg.Mode, ls.prefix, f.Team), holdValue(f), ls.l.DivertHold()})
		}
	}
	t.planProfiles()
	for li := range t.laneReads {
		clear(t.laneReads[li])
		t.laneReads[li] = t.laneReads[li][:0]
	}
	if withReads {
		// The keys left for reads, each read counted as the keys its MGET carries (its
		// counters, and its hold flag, profile and folded count when asked for them).
		maxReads, keys, need := t.cfg.MaxReadsPerTick, max(budget, 0), 0
		clear(t.reads)
		reads := t.reads[:0]
		for li := range t.limits {
			for i := range t.limits[li].sweep.Reads {
				reads = append(reads, readRef{lim: li, r: &t.limits[li].sweep.Reads[i]})
				need += readCost(reads[len(reads)-1].r)
			}
		}
		t.reads = reads
		over := len(reads) > maxReads || need > keys
		if over {
			// Over budget: the teams nearest their limit first, those put off before
			// gaining on them (readAging); the rest are planned again next tick.
			for i := range reads {
				reads[i].prio = t.readPriority(reads[i])
			}
			slices.SortFunc(reads, func(a, b readRef) int { return cmp.Compare(b.prio, a.prio) })
		} else {
			clear(t.putOff)
		}
		for _, rr := range reads {
			// A team whose counts were not all sent is read all the same: what Redis
			// does not hold is added to the read (notInRedis), so none is forgotten.
			// The tick's first read goes when two keys are left, as before reads were
			// counted by their keys, though it carries up to five: a budget under a read's
			// keys (GATE_KEYS_PER_TICK may be 2), or writes leaving fewer keys than it
			// carries on every tick, would read no team ever (ageing no help: the read put
			// off ages as those behind it do). A tick goes over by three keys at most.
			c := readCost(rr.r)
			li := t.laneFor(rr.r.Team)
			inst := t.lanes[li].inst
			// Over what the ticks that timed out on its instance left it (fitBudget): its
			// instance's reads from here on wait, the others' go on.
			instFull := c > left[inst] && t.plans[inst].reads > 0
			if res.Reads >= maxReads || c > keys && !(res.Reads == 0 && keys >= 2) || instFull {
				if instFull {
					left[inst] = 0
				} else {
					keys = 0 // in order: a cheaper read after this one waits as well
				}
				res.SkippedReads++
				t.notePrimedMissed(res, rr.r, rr.lim)
				k := teamRef{rr.lim, rr.r.Team}
				if po, ok := t.putOff[k]; !ok || po.tick != t.tickN { // a team read in two epochs counts once
					if !ok {
						k.team = strings.Clone(k.team) // kept past the sweep whose read it was
					}
					t.putOff[k] = putOff{po.n + 1, t.tickN}
				}
				continue
			}
			keys -= c
			left[inst] -= c
			if over {
				delete(t.putOff, teamRef{rr.lim, rr.r.Team})
			}
			t.laneReads[li] = append(t.laneReads[li], rr)
			t.plans[inst].reads++
			t.plans[inst].readKeys += c
			res.Reads++
			t.m.reads.WithLabelValues(rr.r.Reason.String()).Inc()
		}
		if over && len(t.putOff) > res.SkippedReads {
			// Teams put off before and not due now (read in the meantime, or gone)
			// start again from nothing when they are due again.
			maps.DeleteFunc(t.putOff, func(_ teamRef, po putOff) bool { return po.tick != t.tickN })
		}
		t.m.skippedReads.Add(float64(res.SkippedReads))
	}
	t.m.pendingSync.Set(float64(res.SkippedReads))

}

func (t *Ticker) laneFor(team string) int {
	if t.cfg.Mode == ModeCluster {
		return ClusterShard(team)
	}
	return t.instanceFor(team)
}

func (t *Ticker) instanceFor(team string) int { return InstanceFor(team, len(t.instances)) }

func (t *Ticker) key(lim int, team string, epoch int64) string {
	return KeyFor(t.cfg.Mode, t.limits[lim].prefix, team, epoch)
}
