package replay

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/route"
)

// Engine routes recorded records through its candidates, on the replay's clock: the
// newest record time read so far, so that it never goes back however the partitions
// interleave. Each candidate's fleet ticks every tick interval of that clock, and its
// outcomes are sealed every minute of it. An Engine is used by one goroutine.
type Engine struct {
	cands      []*Candidate
	now        time.Time
	nextSeal   time.Time
	first      time.Time
	records    int64
	bytes      int64
	minHistory time.Duration
	longest    time.Duration // the longest window of any candidate's limits
	err        error
	// With workers (Workers; parallel.go), cands keep the clock (each one's next tick)
	// and the workers' candidates route; by is the member records are dealt by.
	workers []*worker
	by      route.KeyFrom
	peek    route.Scratch
	// untimed are the records without a timestamp (Kafka's -1) met before any with one:
	// routed at the first timed record's time, as a gate routes them at its own.
	untimed []*kgo.Record
}

// NewEngine replays through cands (one, or two to compare). A candidate on the wall
// clock ticks every tick (the gate's GATE_TICK_INTERVAL) of record time, as a gate does:
// its levels are rebuilt from the store's counts at each. One on the event clock counts
// exactly without reads, and ticks every tenth of its shortest window, or once a
// shortest window when none of its limiters holds keys: what its ticks time is a hold's
// release and the expiry of idle keys. A tick sweeps every key cached; one every 250 ms
// of record time would cost a replay of a busy day hundreds of thousands of sweeps.
func NewEngine(tick time.Duration, cands ...*Candidate) (*Engine, error) {
	if len(cands) == 0 || len(cands) > 2 {
		return nil, fmt.Errorf("replay: %d candidates (want one, or two to compare)", len(cands))
	}
	if tick <= 0 {
		return nil, fmt.Errorf("replay: tick interval %s (want a positive duration)", durtext.String(tick))
	}
	e := &Engine{cands: cands}
	for _, c := range cands {
		e.minHistory = max(e.minHistory, c.adaptive)
		var shortest time.Duration
		timed := false
		c.idle = 0
		for _, s := range c.stores {
			if w := s.l.Config().Window; shortest == 0 || w < shortest {
				shortest = w
			}
			c.idle = max(c.idle, s.l.Config().IdleTimeout)
			if c.wall {
				// On the wall clock a key held or near its threshold stays cached past the
				// idle timeout, until its window ages out (two windows after its last
				// record at most) and its hold is released, which a gate's ticks through
				// a pause do.
				c.idle = max(c.idle, 2*s.l.Config().Window+s.l.DivertHold())
			}
			e.longest = max(e.longest, s.l.Config().Window)
			timed = timed || s.l.DivertHold() > 0
		}
		// The gate's read delay (tick.Ticker's readDelay: a quarter of its interval, within
		// half its tick timeout, 3/4 of the interval).
		c.delay = tick / 4
		switch {
		case c.wall:
			c.every = tick
		case timed:
			c.every = max(tick, shortest/10)
		default:
			c.every = max(tick, shortest)
		}
	}
	return e, nil
}

// Workers has up to n goroutines route the records (parallel.go), and returns how many
// will and the member records are dealt to them by: one, and "", when n is under 2 or
// the keys share no member. It is called before the first Route. The report is the
// same whatever the number of workers.
func (e *Engine) Workers(n int) (int, string) {
	if n < 2 || e.records > 0 || e.workers != nil {
		return max(len(e.workers), 1), e.by.String()
	}
	by, ok := sharedMember(e.cands)
	if !ok {
		return 1, ""
	}
	e.by = by
	for range n {
		var cs []*Candidate
		for _, c := range e.cands {
			cs = append(cs, c.worker())
		}
		e.workers = append(e.workers, newWorker(cs))
	}
	return n, by.String()
}

// Route replays one record at its record time: RouteAt(rec, rec.Timestamp).
func (e *Engine) Route(rec *kgo.Record) { e.RouteAt(rec, rec.Timestamp) }

// RouteAt replays one record at at, its replay time as Read hands it on: the replay's
// clock moves to it, if it is later. With workers, rec is kept until a worker has routed
// it (at the latest when Report returns); it must not change meanwhile.
func (e *Engine) RouteAt(rec *kgo.Record, at time.Time) {
	// No timestamp (Kafka's -1), or 0, a producer's unset one, as the gate's event
	// clock takes them (route's recordTime): the replay's clock, not 1969 or 1970.
	if at.UnixMilli() <= 0 {
		if e.records == 0 {
			e.untimed = append(e.untimed, rec)
			return
		}
		at = e.now
	}
	e.routeAt(rec, at)
}

// routeAt is RouteAt of a record whose replay time at is known.
func (e *Engine) routeAt(rec *kgo.Record, at time.Time) {
	t := at.UTC() // the report's times are UTC, whatever the host's zone
	if e.records == 0 {
		defer func(held []*kgo.Record) {
			for _, r := range held {
				e.RouteAt(r, t)
			}
		}(e.untimed)
		e.untimed = nil
		e.first, e.now = t, t
		for _, c := range e.cands {
			if err := c.start(t); err != nil && e.err == nil {
				e.err = err
			}
			c.next = nextTick(t, c.every)
			c.readAt = time.Time{}
		}
		e.nextSeal = t.Truncate(time.Minute).Add(time.Minute)
		e.broadcast(task{kind: taskStart, now: t})
	}
	if e.err != nil {
		return
	}
	if t.After(e.now) {
		e.advance(t)
	}
	e.records++
	e.bytes += int64(len(rec.Value))
	if e.workers != nil {
		v, ok := e.by.Peek(rec, &e.peek)
		e.workers[workerOf(v, ok, len(e.workers))].push(task{kind: taskRecord, now: e.now, rec: rec})
		return
	}
	for _, c := range e.cands {
		c.route(e.now, rec)
	}
}

// Close stops the workers, if any, without a report: for a replay that failed. It does
// nothing after Report.
func (e *Engine) Close() {
	for _, w := range e.workers {
		w.stop()
	}
	e.workers = nil
}

// broadcast hands t to every worker.
func (e *Engine) broadcast(t task) {
	for _, w := range e.workers {
		w.push(t)
	}
}

// Err is what stopped the replay from routing, if anything: a candidate that could not
// be built again for the range's start (it was built once with the same settings).
func (e *Engine) Err() error { return e.err }

func (e *Engine) advance(t time.Time) {
	e.now = t
	if !t.Before(e.nextSeal) {
		if e.workers != nil {
			e.broadcast(task{kind: taskSeal})
		} else {
			for _, c := range e.cands {
				c.seal()
			}
		}
		e.nextSeal = t.Truncate(time.Minute).Add(time.Minute)
	}
	for i, c := range e.cands {
		// A gate ticks at every multiple of its interval, records or not: so does the
		// fleet here, through a pause in the input too, or a hold's release and the views
		// would be judged by the one tick after it. Past c.idle (the idle timeout, or two
		// windows and a hold, when longer) every key has left the caches and a tick
		// changes nothing a later one would not: the ticks of a long pause are skipped
		// from there, to the record's. Two seconds more, as a cache expires a key up to
		// a second past its idle timeout rounded up to a second (limit's idleSeconds).
		quiet := c.next.Add(max(c.idle, 2*time.Second) + c.every + 2*time.Second)
		for {
			// Each tick is split as the gate's (tick.Ticker.Run): the counts written at
			// the boundary, the views read a read delay later; a record routed between
			// the two is judged on the views of the tick before, as at a gate.
			if !c.readAt.IsZero() && !t.Before(c.readAt) && c.readAt.Before(c.next) {
				e.read(i, c.readAt)
				continue
			}
			if t.Before(c.next) {
				break
			}
			at := c.next
			if !at.Before(quiet) {
				at = t
			}
			if !c.readAt.IsZero() {
				e.read(i, at) // a write phase makes the reads planned before it first
			}
			if e.workers != nil {
				e.broadcast(task{kind: taskTick, cand: i, now: at})
			} else {
				c.tick(at)
			}
			c.readAt = at.Add(c.delay)
			c.next = nextTick(at, c.every)
		}
	}
}

// nextTick is the first multiple of every since the Unix epoch after t: where a gate's
// ticks fall (tick.Ticker.Run). Not t.Truncate(every), whose multiples count from year
// 1: the same instants only for intervals that divide the 62,135,596,800 s between the
// two (a tick of 7s fell 4s early).
func nextTick(t time.Time, every time.Duration) time.Time {
	ns, d := t.UnixNano(), int64(every)
	r := ns % d
	if r < 0 { // before 1970 (records without a timestamp, alone): still the multiple below
		r += d
	}
	return time.Unix(0, ns-r+d).UTC()
}

// read is candidate i's read phase at now.
func (e *Engine) read(i int, now time.Time) {
	if e.workers != nil {
		e.broadcast(task{kind: taskRead, cand: i, now: now})
	} else {
		e.cands[i].read(now)
	}
	e.cands[i].readAt = time.Time{}
}

// Report ends the replay: the last minute sealed, and the report with each candidate's
// top most affected keys.
func (e *Engine) Report(top int) *Report {
	if held := e.untimed; e.records == 0 && len(held) > 0 {
		// Not one record of the range had a timestamp: they are routed at the epoch's
		// start, which the report then shows, rather than left out.
		e.untimed = nil
		for _, r := range held {
			e.routeAt(r, time.Unix(0, 0))
		}
	}
	r := &Report{From: e.first, To: e.now, Records: e.records, Bytes: e.bytes, Notes: []string{}}
	if e.workers != nil {
		// The workers' reports, summed, become the candidates' own; their limiters,
		// which never routed, have nothing to seal or flush below.
		for _, w := range e.workers {
			w.stop()
		}
		for i, c := range e.cands {
			b := newBuilder()
			b.ruleSet, b.shadows = c.b.ruleSet, c.b.shadows
			for _, w := range e.workers {
				if e.records > 0 { // else never started: nothing to seal
					w.cands[i].seal()
				}
				b.merge(w.cands[i].b)
			}
			c.b = b
		}
		e.workers = nil // a second Report reports the same
	}
	for _, c := range e.cands {
		c.seal()
		for _, s := range c.stores {
			s.flush(e.now)
		}
		r.Candidates = append(r.Candidates, c.b.report(c.name, top, c.router.LimiterKey))
	}
	if len(e.cands) == 2 {
		r.Diff = diff(e.cands[0].b.teams, e.cands[1].b.teams)
	}
	if e.longest > time.Minute && e.records > 0 {
		// A gate running before the range had the windows before it: replay's are empty,
		// so a long window's level is short of a gate's until the end of the window after
		// the one the range starts in.
		r.Notes = append(r.Notes, fmt.Sprintf("counts start at the range's start, as a fleet started then would count: the longest window, %s, sees nothing from before it, so the range's first %s to %s is judged on less than a gate running before it had, and fewer records are limited there; start the range %s before the part that matters",
			durtext.String(e.longest), durtext.String(e.longest), durtext.String(2*e.longest), durtext.String(2*e.longest)))
	}
	if e.minHistory > 0 {
		span := e.now.Sub(e.first)
		note := fmt.Sprintf("learned thresholds: a team's is learned after %s of its history; replay learns from the start of the range, as a fleet started then would", durtext.String(e.minHistory))
		if span < e.minHistory+24*time.Hour {
			note += fmt.Sprintf(", and this range (%s) is too short for a fair answer: start it at least %s before the part that matters", durtext.String(span.Round(time.Minute)), durtext.String(e.minHistory+24*time.Hour))
		}
		r.Notes = append(r.Notes, note)
	}
	return r
}
