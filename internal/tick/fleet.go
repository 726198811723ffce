// Counting the fleet: how many gates share the input, for the limiters' floors.

package tick

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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

// FleetKeyFor is the counter of slot's gates. Its last part is no number, ":hold",
// ":profile" nor ":seq", so no counter or other key of a team can take its form.
func FleetKeyFor(prefix string, slot int64) string {
	return prefix + ":fleet:" + strconv.FormatInt(slot, 10) + ":gates"
}

// fleetCount is Run's count of the fleet, kept between ticks.
type fleetCount struct {
	counted [3]int64 // the last three slots this gate added itself to, the latest first
	size    int      // the last size found; 0: none yet
}

// countFleet adds this gate to the current slot's count, once a slot, reads the last two
// whole slots' counts and tells every limiter the fleet's size (limit.SetFleetSize): the
// larger count, plus this gate when it did not count itself in that slot (it was not
// running yet). Four commands a slot on the first instance (single-key commands, so any
// slot of a cluster). When Redis does not answer, the last size stays: a fleet does not
// change size with its Redis.
func (t *Ticker) countFleet(ctx context.Context, now time.Time) {
	f := &t.fleet
	slot := now.UnixNano() / int64(t.fleetSlot())
	if f.counted[0] == slot {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	pipe := t.instances[0].Pipeline()
	cur := FleetKeyFor(t.cfg.KeyPrefix, slot)
	incr := pipe.IncrBy(cctx, cur, 1)
	pipe.PExpire(cctx, cur, 4*t.fleetSlot())
	prev := [2]*redis.StringCmd{pipe.Get(cctx, FleetKeyFor(t.cfg.KeyPrefix, slot-1)), pipe.Get(cctx, FleetKeyFor(t.cfg.KeyPrefix, slot-2))}
	_, err := pipe.Exec(cctx)
	t.m.commands.WithLabelValues("incrby").Inc()
	t.m.commands.WithLabelValues("pexpire").Inc()
	t.m.commands.WithLabelValues("get").Add(2)
	if err != nil && !errors.Is(err, redis.Nil) {
		var re redis.Error
		if errors.As(err, &re) {
			t.countError(classify(err), 0)
		} else if ierr := incr.Err(); ierr != nil && !errors.As(ierr, &re) && f.counted[0] != slot {
			// No reply: the INCRBY may have been applied (a stall, a lost reply). Sent again
			// this slot it would count this gate twice; not sent, it leaves this gate out of
			// one slot at worst, which the larger of two slots covers.
			f.counted = [3]int64{slot, f.counted[0], f.counted[1]}
		}
		return // out of reach: the tick's to report
	}
	f.counted = [3]int64{slot, f.counted[0], f.counted[1]}
	size := 1
	for i, c := range prev {
		n, err := c.Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		if s := slot - 1 - int64(i); f.counted[1] != s && f.counted[2] != s {
			n++ // this gate was not running then
		}
		size = max(size, n)
	}
	f.size = size
	t.m.fleetGates.Set(float64(size))
	for i := range t.limits {
		t.limits[i].l.SetFleetSize(size)
	}
}
