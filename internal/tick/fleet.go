// Counting the fleet: how many gates share the input, for the limiters' floors.

package tick

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/throttle"
)

// FleetSlot is how long one count of the fleet lasts: in each slot of the wall clock every
// running gate adds one to the slot's counter ({prefix}:fleet:{slot}:gates), and the
// fleet's size is the larger of the last two whole slots' counts. A gate that starts is
// counted by the others within two slots; one that stops, after two. A tick longer than
// FleetSlot makes the slot the tick's length (fleetSlot).
const FleetSlot = 5 * time.Second

// fleetSlot is the length of this tick's slots: FleetSlot, or the tick interval when that
// is longer. Run counts the fleet once a tick, a quarter interval after its boundary: with
// slots shorter than a tick, a gate skips slots (ticks of over two slots count in none of
// the two whole slots read, and every gate finds itself alone), and gates whose clocks
// are a little apart count in different slots (a count near a slot's edge), each slot
// holding part of the fleet. Slots of the tick's length start at its boundaries, and the
// count, a quarter interval in, falls in the same slot on every gate.
func (t *Ticker) fleetSlot() time.Duration { return max(FleetSlot, t.cfg.TickInterval) }

// fleetWarnEvery is how often, at most, the fleet count's refusals are logged.
const fleetWarnEvery = 10 * time.Minute

// FleetKeyFor is the counter of slot's gates. Its last part is no number, ":hold",
// ":profile" nor ":seq", so no counter or other key of a team can take its form.
func FleetKeyFor(prefix string, slot int64) string {
	return prefix + ":fleet:" + strconv.FormatInt(slot, 10) + ":gates"
}

// Fleet is a gate's count of its fleet, kept between ticks, and shared by the ticks of a
// gate's successive rule sets (Config.Fleet): two of them run together for a tick after a
// reload, and the new one, counting on its own, added the gate to a slot the old one had
// counted it in (the fleet one gate larger for two slots), and its limiters started at a
// fleet of one until its first count came back (their floors the whole fleet's). Safe
// for concurrent use.
type Fleet struct {
	mu      sync.Mutex
	counted [3]int64 // the last three slots this gate added itself to, the latest first
	// missed are the last two slots whose INCRBY Redis refused (OOM, READONLY...), the
	// latest first: the gate ran then, uncounted.
	missed [2]int64
	adding int64 // the slot a tick is adding the gate to now; 0: none
	size   int   // the last size found; 0: none yet
}

// record notes that the gate was added to slot, unless a later slot was noted already (a
// tick that waited on Redis finishing after another tick's count of the next slot), and
// reports whether it did. f.mu held.
func (f *Fleet) record(slot int64) bool {
	if slot <= f.counted[0] {
		return false
	}
	f.counted = [3]int64{slot, f.counted[0], f.counted[1]}
	return true
}

// NewFleet returns a fleet count to share between a gate's ticks (Config.Fleet).
func NewFleet() *Fleet { return &Fleet{} }

// Size is the last size found, 0 before the first.
func (f *Fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// applyFleet tells t's limiters the fleet's size, when one is known.
func (t *Ticker) applyFleet(size int) {
	if size < 1 {
		return
	}
	t.m.fleetGates.Set(float64(size))
	for i := range t.limits {
		t.limits[i].l.SetFleetSize(size)
	}
}

// countFleet adds this gate to the current slot's count, once a slot, reads the last two
// whole slots' counts and tells every limiter the fleet's size (limit.SetFleetSize): the
// larger count, plus this gate when it did not count itself in that slot (it was not
// running yet); a slot with no count though this gate ran in it (Redis lost or refused
// the slot's counts) is left out, and with both left out the last size stays. Four
// commands a slot on the first instance (single-key commands, so any slot of a
// cluster). When Redis does not answer, the last size stays: a fleet does not change
// size with its Redis. A slot another tick of the gate counted, or is counting
// (Config.Fleet), is not counted again: this tick takes the size found.
func (t *Ticker) countFleet(ctx context.Context, now time.Time) {
	f := t.fleet
	slot := now.UnixNano() / int64(t.fleetSlot())
	f.mu.Lock()
	if f.counted[0] == slot || f.adding == slot {
		size := f.size
		f.mu.Unlock()
		t.applyFleet(size)
		return
	}
	f.adding = slot
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if f.adding == slot { // another tick may be adding a later slot now
			f.adding = 0
		}
		f.mu.Unlock()
	}()
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	pipe := t.instances[0].Pipeline()
	cur := FleetKeyFor(t.cfg.KeyPrefix, slot)
	// The INCRBY is not safe to repeat. A cluster client resends a node's pipeline by
	// itself after a timeout or a lost connection (up to MaxRedirects, whatever MaxRetries
	// says), and a node that stalled applied each copy when it woke: the gate counted
	// several times in one slot. In cluster mode it goes to its slot's primary on that
	// node's own client, which does not resend; the GETs, safe to repeat, go through the
	// cluster client.
	ipipe := pipe
	incrNode := "" // cluster mode: the primary the INCRBY went to, which its failure is counted on
	cc, cluster := t.instances[0].(*redis.ClusterClient)
	if cluster {
		if node, err := cc.MasterForKey(cctx, cur); err == nil {
			ipipe, incrNode = node.Pipeline(), node.Options().Addr
		}
	}
	incr := ipipe.IncrBy(cctx, cur, 1)
	ipipe.PExpire(cctx, cur, 4*t.fleetSlot())
	prevKeys := [2]string{FleetKeyFor(t.cfg.KeyPrefix, slot-1), FleetKeyFor(t.cfg.KeyPrefix, slot-2)}
	prev := [2]*redis.StringCmd{pipe.Get(cctx, prevKeys[0]), pipe.Get(cctx, prevKeys[1])}
	var err, ierr error // ierr: the INCRBY's, on its node's client
	errNode := ""       // cluster mode: the primary that answered err
	if ipipe != pipe {
		var wg sync.WaitGroup
		wg.Go(func() { _, ierr = ipipe.Exec(cctx) })
		_, err = pipe.Exec(cctx)
		wg.Wait()
		if ierr != nil && (err == nil || errors.Is(err, redis.Nil)) {
			err, errNode = ierr, incrNode
		}
	} else {
		_, err = pipe.Exec(cctx)
	}
	// The INCRBY's slot moved (MOVED: not applied), or a primary the count went to is
	// gone, which neither the node's client nor the cluster client's pipeline of GETs has
	// the slot map read again for: read again here, once a count, the next count goes to
	// the slots' owners.
	if slotMapStale(ierr) {
		t.reloadSlotsAfter(cctx, ierr)
	} else {
		t.reloadSlotsAfter(cctx, err)
	}
	if cluster && errNode == "" && err != nil && !errors.Is(err, redis.Nil) {
		// A GET's error (or the INCRBY's, sent through the cluster client with no slot
		// map): the primary of the command whose error err is.
		keys := [3]string{cur, prevKeys[0], prevKeys[1]}
		for k, c := range [3]redis.Cmder{incr, prev[0], prev[1]} {
			if cerr := c.Err(); cerr != nil && errors.Is(cerr, err) {
				errNode = t.nodeOf(cctx, keys[k])
				break
			}
		}
	}
	t.m.commands.WithLabelValues(cmdIncrby).Inc()
	t.m.commands.WithLabelValues(cmdPexpire).Inc()
	t.m.commands.WithLabelValues(cmdGet).Add(2)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil && !errors.Is(err, redis.Nil) {
		var re redis.Error
		if errors.As(err, &re) {
			t.countOn(classify(err), errNode)
			// Redis answers, refusing: said here, as the tick, which reports its own
			// pipelines' errors, sends nothing while every key is quiet (a cold write a
			// window), and a password rotated on Redis first went unsaid that long while
			// GateRedisErrors fired on this count.
			if t.fleetWarn == nil {
				t.fleetWarn = throttle.NewEvery(fleetWarnEvery, nil)
			}
			if ok, quiet := t.fleetWarn.Allow(); ok {
				t.log.Warn("redis refuses the fleet count, made every 5 s (every tick of a GATE_TICK_INTERVAL longer) whatever the traffic: "+fleetRefusalHint(err),
					"instance", cmp.Or(errNode, "0"), "cause", classify(err).String(), "err", err, "warnings_unlogged", quiet)
			}
		}
		if ierr := incr.Err(); ierr == nil || !errors.As(ierr, &re) {
			// The INCRBY was applied (a GET failed on its own: on a cluster the slots'
			// counters live on other nodes, one of them down), or may have been (no reply:
			// a stall, a lost reply). Sent again this slot it would count this gate twice;
			// not sent, it leaves this gate out of one slot at worst, which the larger of
			// two slots covers.
			f.record(slot)
		} else if f.missed[0] != slot {
			f.missed = [2]int64{slot, f.missed[0]}
		}
		return // out of reach: the tick's to report
	}
	if !f.record(slot) {
		// Another tick of the gate counted a later slot while this one waited: its
		// count and size are newer.
		return
	}
	size, known := 1, false
	for i, c := range prev {
		n, err := c.Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		s := slot - 1 - int64(i)
		counted := f.counted[1] == s || f.counted[2] == s
		if n == 0 && (counted || f.missed[0] == s || f.missed[1] == s) {
			// No count, though this gate ran then: Redis lost the slot's counts (restarted
			// empty, or down through the slot, every gate's INCRBY failing) or refused them
			// all. The slot says nothing of the fleet; read as it is, every gate found a
			// fleet of 1 for a slot or two after, its floors N times the fleet's share.
			continue
		}
		if !counted {
			n++ // this gate was not running then, or Redis refused its count
		}
		size, known = max(size, n), true
	}
	if !known && f.size > 0 {
		size = f.size // the last size found stays, as while Redis does not answer
	}
	f.size = size
	t.applyFleet(size)
}

// fleetRefusalHint says what a refusal of the fleet count means for the tick, by its
// cause: one hint for all named the gate's password first, to an operator whose Redis was
// full (OOM) or whose cluster was down.
func fleetRefusalHint(err error) string {
	switch {
	case loginRefusal(err):
		return "the tick's writes and reads are refused too once it has any to send (NOAUTH or WRONGPASS: the gate's user or password is not Redis's; NOPERM: its ACL)"
	case commandMissing(err):
		return "the tick's are refused too (" + commandMissingHint + ")"
	}
	switch classify(err) {
	case causeOOM:
		return "Redis is at its maxmemory under maxmemory-policy noeviction (OOM): the tick's writes are refused too, its reads answered, each gate limiting by its own counts and those read before"
	case causeReadOnly:
		return "the instance is a replica (READONLY): the tick's writes are refused too until the gate is pointed at the primary (a failover the client has not followed, or GATE_REDIS_URLS naming a replica)"
	case causeNoReplicas, causeMisconf:
		return "Redis refuses writes (NOREPLICAS: fewer replicas than min-replicas-to-write; MISCONF: its last snapshot failed): the tick's writes are refused too, its reads answered"
	}
	if redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return "the Redis Cluster is down (CLUSTERDOWN: slots without a primary): the tick's writes and reads to those slots fail too until it is whole"
	}
	return "the tick's commands may be refused too"
}
