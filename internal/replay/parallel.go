package replay

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/route"
)

// A replay routes on several goroutines (workers) when every key of every rule it replays
// is made of one same member, a field such as team_id that the per-user key
// team_id+distinct_id holds too: records are then dealt to workers by that member's
// value, so each key's records all go to one worker, in the replay's order, and no
// decision depends on another worker's records. Each worker has candidates of its own
// (limiters, stores, outcomes), and the engine hands every worker the replay's clock:
// the record time each record is routed at, the start, every tick and every seal, in
// the order the one-goroutine replay meets them. So each key is counted, read, held and
// decided as the one-goroutine replay decides it, and the report, the workers' parts
// summed, is the same byte for byte (TestWorkersReportAsOne) — while no limiter's cache
// is full and no minute reaches MaxRowsPerMinute. Each worker has the whole row budget
// and caches of GATE_CACHE_CAPACITY keys of its own, so none folds a row or evicts a key
// before the one goroutine would, though the memory they may take is the workers'
// number times as much.
//
// Where the rules share no member (a rule keyed by ip beside one keyed by team_id), one
// worker routes every record.

// workerBatch is how many tasks the engine gathers for a worker before handing them
// over: one channel operation per batch, not per record.
const workerBatch = 512

// workerQueue is how many batches may wait for a worker before the engine waits for it.
const workerQueue = 8

type taskKind uint8

const (
	taskRecord taskKind = iota
	taskStart
	taskTick // one candidate's tick (task.cand): its write phase
	taskRead // one candidate's read phase (task.cand)
	taskSeal
)

// task is what the engine hands a worker: a record to route at now, or a step of the
// replay's clock.
type task struct {
	kind taskKind
	cand int
	now  time.Time
	rec  *kgo.Record
}

// worker routes its share of the records through candidates of its own.
type worker struct {
	cands []*Candidate
	buf   []task
	in    chan []task
	free  chan []task
	done  chan struct{}
}

// sharedMember is the member every key of every candidate is made of (route.KeyFrom's
// Members), the first of the first key's that is; false when there is none.
func sharedMember(cands []*Candidate) (route.KeyFrom, bool) {
	var keys []route.KeyFrom
	for _, c := range cands {
		keys = append(keys, c.keys()...)
	}
	if len(keys) == 0 {
		return route.KeyFrom{}, false
	}
	for _, m := range keys[0].Members() {
		lacks := func(k route.KeyFrom) bool {
			return !slices.ContainsFunc(k.Members(), func(o route.KeyFrom) bool { return o.String() == m.String() })
		}
		if !slices.ContainsFunc(keys[1:], lacks) {
			return m, true
		}
	}
	return route.KeyFrom{}, false
}

func newWorker(cands []*Candidate) *worker {
	w := &worker{cands: cands, in: make(chan []task, workerQueue), free: make(chan []task, workerQueue+2), done: make(chan struct{})}
	w.buf = make([]task, 0, workerBatch)
	go w.run()
	return w
}

func (w *worker) run() {
	defer close(w.done)
	for batch := range w.in {
		for i := range batch {
			t := &batch[i]
			switch t.kind {
			case taskRecord:
				for _, c := range w.cands {
					c.route(t.now, t.rec)
				}
			case taskStart:
				for _, c := range w.cands {
					// The engine's own candidates were built the same way and stop the
					// replay on an error: a worker's cannot differ.
					_ = c.start(t.now)
				}
			case taskTick:
				w.cands[t.cand].tick(t.now)
			case taskRead:
				w.cands[t.cand].read(t.now)
			case taskSeal:
				for _, c := range w.cands {
					c.seal()
				}
			}
			*t = task{} // the record is not kept
		}
		select {
		case w.free <- batch[:0]:
		default:
		}
	}
}

// push queues t for w, handing the batch over when it is full.
func (w *worker) push(t task) {
	w.buf = append(w.buf, t)
	if len(w.buf) == workerBatch {
		w.hand()
	}
}

// hand gives w its gathered tasks.
func (w *worker) hand() {
	if len(w.buf) == 0 {
		return
	}
	w.in <- w.buf
	select {
	case w.buf = <-w.free:
	default:
		w.buf = make([]task, 0, workerBatch)
	}
}

// stop hands w what is gathered and waits until it has routed it all.
func (w *worker) stop() {
	w.hand()
	close(w.in)
	<-w.done
}

// workerOf is the worker of a record whose shared member reads v (ok: it could be
// read). A record from which no key can be read counts in no limiter: any worker does,
// the first.
func workerOf(v string, ok bool, n int) int {
	if !ok {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(v))
	return int(h.Sum64() % uint64(n))
}
