package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/outcome"
)

// Range is what a replay reads from Topic: every partition's records whose replay times
// (merge) are from From to To (found through ListOffsets, then by the records read; zero:
// the partition's start, and its end offset when the read begins, read once the
// transactions open there end), or, when
// Offsets is set, exactly those offsets.
type Range struct {
	Topic    string
	From, To time.Time
	Offsets  []PartitionRange
}

// Progress is how far a read is: the offsets read of the range's (Done of Total, every
// offset counted, transaction markers and aborted transactions' records included, so
// Done ends at most at Total), the records handed on (Records: what is replayed, fewer
// than the offsets on a transactional input) and the newest record time.
type Progress struct {
	Done, Total int64
	Records     int64
	At          time.Time
	// Waiting, when not empty, are the partitions that have not reached their end and
	// sent nothing for stallAfter: a transaction still open holds back what a
	// read_committed reader gets, up to the broker's transaction timeout.
	Waiting []int32
}

// stallAfter is how long a read waits for fetches before saying which partitions it waits
// for (Progress.Waiting).
const stallAfter = 10 * time.Second

// maxQueued is how many records a partition may hold waiting for the others before its
// fetches pause.
const maxQueued = 50_000

// ErrNoTopic is Read's error for a topic the cluster does not have.
var ErrNoTopic = errors.New("the topic does not exist")

// ErrOffsets is Read's error (errors.Is) for Range.Offsets the topic cannot have: a
// partition it does not have, or a range that starts below a partition's first record
// kept. Nothing was read, and a read of the same offsets fails alike.
var ErrOffsets = errors.New("offsets the topic does not have")

// offsetsError is an ErrOffsets saying which offsets and why.
type offsetsError struct{ msg string }

func (e *offsetsError) Error() string        { return e.msg }
func (e *offsetsError) Is(target error) bool { return target == ErrOffsets }

// Read reads rng with a client of opts of its own: it joins no group, commits nothing and
// produces nothing. It hands every record to fn once with its replay time, in
// replay-time order across partitions (ties by partition, then offset; see merge), so
// that two reads of a range replay it alike, and progress, if not nil, once the range's
// offsets are listed (nothing read yet, At zero), after every fetch (the caller paces
// what it shows) and once at the end. It reads committed records only,
// as the gate does, and returns the offsets it read. It stops early when ctx is done,
// returning ctx's error with the offsets read so far.
func Read(ctx context.Context, rng Range, fn func(*kgo.Record, time.Time), progress func(Progress), opts ...kgo.Opt) ([]PartitionRange, error) {
	// No reset: a range starting below a partition's log start (retention deleted it
	// since) is an error naming it, not a silent skip to what is left.
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	parts, hard, err := offsets(ctx, adm, rng)
	if err != nil {
		return nil, err
	}
	m := newMerge(parts)
	if len(rng.Offsets) == 0 {
		m.bound(rng.From, rng.To, hard)
	}
	if progress != nil {
		// The brokers answered: said before the first fetch, which a loaded broker may be
		// slow to answer, so that a caller waiting for their first word stops waiting.
		progress(Progress{Total: m.total})
	}
	if len(m.live) == 0 {
		return m.read(), nil
	}
	from := map[int32]kgo.Offset{}
	for _, p := range m.live {
		from[p.Partition] = kgo.NewOffset().At(p.Start)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{rng.Topic: from})
	for !m.done() {
		pctx, cancel := context.WithTimeout(ctx, stallAfter)
		fs := cl.PollFetches(pctx)
		// Stalled: the poll's time ran out with nothing fetched. Its time can also run out
		// once it has taken records (a pause of the process as it returns): those are
		// the client's no longer, and go on below.
		stalled := pctx.Err() != nil && fs.NumRecords() == 0 // before cancel, which sets it
		cancel()
		if err := ctx.Err(); err != nil {
			m.drain(fn)
			return m.read(), err
		}
		if stalled {
			if err := m.leaders(ctx, adm, rng.Topic); err != nil {
				if ctx.Err() != nil {
					m.drain(fn) // stopped during the check
				}
				return m.read(), err
			}
			if progress != nil {
				progress(Progress{Done: m.offsets, Total: m.total, Records: m.records, At: m.at, Waiting: m.waiting()})
			}
			continue
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if pctx.Err() != nil && errors.Is(err, pctx.Err()) {
				return // the poll's own time ran out, its records taken
			}
			ferr = errors.Join(ferr, fmt.Errorf("reading %s partition %d: %w", rng.Topic, p, err))
		})
		if ferr != nil {
			return m.read(), ferr
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) { m.add(p.Partition, p.Records) })
		m.emit(fn)
		var pause, resume []int32
		for _, q := range m.all { // the ended too: one ended at -to may be far from its log's end
			switch {
			case len(q.recs) >= maxQueued && !q.paused:
				q.paused = true
				pause = append(pause, q.Partition)
			case q.exhausted() && !q.ended:
				// Read to its end: fetching on would read its tail only to drop it.
				q.ended, q.paused = true, true
				pause = append(pause, q.Partition)
			case len(q.recs) < maxQueued/2 && q.paused && !q.ended:
				q.paused = false
				resume = append(resume, q.Partition)
			}
		}
		if len(pause) > 0 {
			cl.PauseFetchPartitions(map[string][]int32{rng.Topic: pause})
		}
		if len(resume) > 0 {
			cl.ResumeFetchPartitions(map[string][]int32{rng.Topic: resume})
		}
		if progress != nil {
			progress(Progress{Done: m.offsets, Total: m.total, Records: m.records, At: m.at})
		}
	}
	if progress != nil {
		progress(Progress{Done: m.offsets, Total: m.total, Records: m.records, At: m.at})
	}
	return m.read(), nil
}

// Offsets is what a Read of rng would read, partition by partition, before it bounds
// the range by its records' times: from the first offset at or after From (each
// partition's start without it) to the first at or after To (its end offset without
// it), or rng.Offsets cut at the end offsets. A reader that judges each
// record by its own time, as gate redrive does (a dead-letter topic's times go back and
// forth, a rejected one stamped when refused), reads these exact offsets instead.
func Offsets(ctx context.Context, rng Range, opts ...kgo.Opt) ([]PartitionRange, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	parts, _, err := offsets(ctx, kadm.NewClient(cl), rng)
	return parts, err
}

// TrimmedPartition is a partition whose read of a range starts at the first record it
// keeps (Start, above 0), retention (or DeleteRecords) having deleted those before it.
type TrimmedPartition struct {
	Partition int32
	Start     int64
}

// Trimmed returns the partitions of rng.Topic whose read from rng.From starts at their
// first record kept, records before it deleted: Kafka keeps no time of a deleted record,
// so some of them may have been rng's, the read a part of the range it was asked for.
// None without From (a read from each partition's start reads what is kept) or with
// rng.Offsets (refused below the start: offsets).
func Trimmed(ctx context.Context, rng Range, opts ...kgo.Opt) ([]TrimmedPartition, error) {
	if rng.From.IsZero() || len(rng.Offsets) > 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, rng.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of %s: %w", rng.Topic, err)
	}
	from, err := adm.ListOffsetsAfterMilli(ctx, rng.From.UnixMilli(), rng.Topic)
	if err == nil {
		err = from.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s from %s: %w", rng.Topic, rng.From.Format(time.RFC3339), err)
	}
	var out []TrimmedPartition
	starts.Each(func(s kadm.ListedOffset) {
		if f, ok := from.Lookup(rng.Topic, s.Partition); ok && s.Offset > 0 && f.Offset == s.Offset {
			out = append(out, TrimmedPartition{Partition: s.Partition, Start: s.Offset})
		}
	})
	slices.SortFunc(out, func(a, b TrimmedPartition) int { return int(a.Partition - b.Partition) })
	return out, nil
}

// offsets finds each partition's [start, end) of rng, and its end offset (hard):
// with -to, end is where ListOffsets found it, which a record stamped far ahead can put
// early (merge.bound).
func offsets(ctx context.Context, adm *kadm.Client, rng Range) ([]PartitionRange, map[int32]int64, error) {
	list := func(what string, f func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
		l, err := f()
		if err == nil {
			err = l.Error()
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			// The broker's words ("does not host this topic-partition") read as its fault,
			// not as a name mistyped.
			return nil, fmt.Errorf("listing the offsets of %s: %w", rng.Topic, ErrNoTopic)
		}
		if err != nil {
			return nil, fmt.Errorf("listing the %s offsets of %s: %w", what, rng.Topic, err)
		}
		return l, nil
	}
	// The end offset (high watermark), not the last stable offset: a range past a
	// transaction still open is read once it ends, as a gate reads it (read_committed, the
	// fetch waits; the progress line names the partitions waited for). Ended at the last
	// stable offset, such a range left out every record after the open transaction's
	// first, and said nothing.
	ends, err := list("end", func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, rng.Topic) })
	if err != nil {
		return nil, nil, err
	}
	if len(ends[rng.Topic]) == 0 {
		return nil, nil, fmt.Errorf("listing the offsets of %s: %w", rng.Topic, ErrNoTopic)
	}
	if len(rng.Offsets) > 0 {
		// Exact offsets, each partition's end no further than its end offset (a range past
		// an open transaction waits for it, as above). A start below
		// the log start (retention deleted it since the offsets were noted) is refused
		// saying where the partition starts now: the fetch's OFFSET_OUT_OF_RANGE did not.
		starts, err := list("start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, rng.Topic) })
		if err != nil {
			return nil, nil, err
		}
		out := slices.Clone(rng.Offsets)
		for i, asked := range out {
			e, ok := ends.Lookup(rng.Topic, asked.Partition)
			if !ok || asked.Partition < 0 {
				return nil, nil, &offsetsError{fmt.Sprintf("reading %s: it has no partition %d (it has %d: 0 to %d)", rng.Topic, asked.Partition, len(ends[rng.Topic]), len(ends[rng.Topic])-1)}
			}
			out[i].End = min(asked.End, e.Offset)
			out[i].Start = min(asked.Start, out[i].End)
			if s, ok := starts.Lookup(rng.Topic, asked.Partition); ok && out[i].Start < min(s.Offset, out[i].End) {
				return nil, nil, &offsetsError{fmt.Sprintf("reading %s: partition %d starts at offset %d (the records before it deleted): offsets %d:%d-%d start before it",
					rng.Topic, asked.Partition, s.Offset, asked.Partition, asked.Start, asked.End)}
			}
		}
		return out, nil, nil
	}
	starts, err := list("start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, rng.Topic) })
	if err != nil {
		return nil, nil, err
	}
	if !rng.From.IsZero() {
		if starts, err = list("from", func() (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, rng.From.UnixMilli(), rng.Topic)
		}); err != nil {
			return nil, nil, err
		}
	}
	var to kadm.ListedOffsets
	if !rng.To.IsZero() {
		if to, err = list("to", func() (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, rng.To.UnixMilli(), rng.Topic)
		}); err != nil {
			return nil, nil, err
		}
	}
	var out []PartitionRange
	hard := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 {
			return
		}
		hard[o.Partition] = o.Offset
		pr := PartitionRange{Partition: o.Partition, End: o.Offset}
		if s, ok := starts.Lookup(rng.Topic, o.Partition); ok {
			pr.Start = s.Offset
		}
		if t, ok := to.Lookup(rng.Topic, o.Partition); ok && t.Offset >= 0 {
			pr.End = min(pr.End, t.Offset)
		}
		pr.Start = min(pr.Start, pr.End)
		out = append(out, pr)
	})
	slices.SortFunc(out, func(a, b PartitionRange) int { return int(a.Partition - b.Partition) })
	return out, hard, nil
}

// queue is one partition's records waiting to be handed on.
type queue struct {
	PartitionRange
	// hint is where ListOffsets found -to, or End when End is exact (the end offset, or
	// -offsets); hard the offset the partition may be read to: End, or the end offset
	// past hint, as a record stamped far ahead can put hint early
	// (merge.findEnd). Once the partition ends, hard is its end.
	hint, hard int64
	next       int64 // the offset after the last one received
	recs       []*kgo.Record
	head       int64 // recs[0]'s replay time in Unix ns, set by ready
	scan       int   // recs[:scan] are known not to end the range (findEnd)
	start      bool  // past the records before -from
	paused     bool
	ended      bool // its fetches paused for good
	// stopped: the read stops here (merge.drain), and what q holds is all it gets: its
	// last record's time is its own, as if nothing came after it.
	stopped bool
	// lookAhead is how many records after one its replay time looks at
	// (replayLookAhead; tests give fewer). rt holds the replay times of recs[:len(rt)] in
	// Unix ns (fillTimes), floor the latest of every replay time computed; ts the
	// records' own (stampOf), for fillTimes to scan without a record's line each.
	lookAhead int
	rt, ts    []int64
	floor     int64
	tmp       []int64 // fillTimes' scratch
	dq        []int
}

// stampOf is r's timestamp in Unix ns for fillTimes' look-ahead, or the largest int64 for
// one without a timestamp (Kafka's -1, or 0: no time for the records before it).
func stampOf(r *kgo.Record) int64 {
	if r.Timestamp.UnixMilli() <= 0 {
		return math.MaxInt64
	}
	return r.Timestamp.UnixNano()
}

// replayLookAhead is how many of its partition's next records a record's replay time
// looks at. A producer whose clock is wrong sends its records in batches: a run of them
// stamped ahead, each replayed at the next one's time, moved the replay's clock to
// theirs, every later record of the range then routed at that instant (a review: a batch
// of 2 stamped a day ahead, 400 of 600 records limited; on the event clock as well, the
// rest clamped as too old), and -to ended the partition there. A run shorter than this is
// replayed among its neighbours.
const replayLookAhead = 128

// exhausted reports whether q has received every record it may read.
func (q *queue) exhausted() bool { return q.next >= q.hard }

// final reports whether q gets no record after those it holds: read to its end, or the
// read stopped.
func (q *queue) final() bool { return q.stopped || q.exhausted() }

// merge hands on the records of several partitions in the order of their replay times: a
// record's time, or the earliest of its partition's next records' (replayLookAhead) no
// earlier than the replay times before it, so that a record (or a run of them) stamped
// far ahead (a producer's clock; a CreateTime topic keeps what the producer says) is
// replayed among its neighbours, not after every other partition, and moves the
// replay's clock no further than they do. A record goes only when every partition not
// yet at its end has one waiting whose time is known (its look-ahead come, or none to
// come), so the order does not depend on how the fetches came.
//
// With -from and -to, a partition's range is the records whose replay times are in
// [from, to): ListOffsets, which looks at record times alone, gives where to start (no
// later than the first such record) and where the range may end; a record stamped far
// ahead there (its replay time before -to) does not end it.
type merge struct {
	live     []*queue // partitions with records left to read or hand on
	all      []*queue
	from, to int64 // the range's times in Unix ns; 0: none
	offsets  int64 // offsets received, for progress
	records  int64 // records handed on, for progress
	total    int64 // offsets of the range, as far as known
	at       time.Time
}

func newMerge(parts []PartitionRange) *merge {
	m := &merge{}
	for _, p := range parts {
		q := &queue{PartitionRange: p, next: p.Start, hint: p.End, hard: p.End, start: true, lookAhead: replayLookAhead, floor: math.MinInt64}
		m.all = append(m.all, q)
		m.total += p.End - p.Start
		if p.End > p.Start {
			m.live = append(m.live, q)
		}
	}
	return m
}

// bound has q read its partition to hard, the end offset, when q's End was found
// by -to's time (and its records before -from skipped): m's range by replay times.
func (m *merge) bound(from, to time.Time, hard map[int32]int64) {
	if !from.IsZero() {
		m.from = from.UnixNano()
	}
	if !to.IsZero() {
		m.to = to.UnixNano()
	}
	for _, q := range m.all {
		q.start = m.from == 0
		if h, ok := hard[q.Partition]; ok && m.to != 0 && h > q.End {
			q.hard = h
		}
		if q.hard > q.Start && !slices.Contains(m.live, q) {
			m.live = append(m.live, q)
		}
	}
	slices.SortFunc(m.live, func(a, b *queue) int { return int(a.Partition - b.Partition) })
}

func (m *merge) byPartition(p int32) *queue {
	for _, q := range m.live {
		if q.Partition == p {
			return q
		}
	}
	return nil
}

// add queues a fetch's records of partition p, control records aside.
func (m *merge) add(p int32, recs []*kgo.Record) {
	q := m.byPartition(p)
	if q == nil {
		return
	}
	next := q.next
	for _, r := range recs {
		if r.Offset >= q.hard {
			// Past what it may read: everything before it came or was filtered (an
			// aborted transaction's records, offsets compacted away).
			q.next = q.hard
			break
		}
		if r.Offset < q.next {
			continue
		}
		q.next = r.Offset + 1
		if !r.Attrs.IsControl() {
			q.recs = append(q.recs, r)
			q.ts = append(q.ts, stampOf(r))
		}
	}
	m.offsets += q.next - next
	m.total += max(q.next, q.hint) - max(next, q.hint) // read past where -to was found
	m.findEnd(q)
}

// findEnd ends q, read past where -to was found, at its first record there whose replay
// time is -to or later, as soon as that record and the next are queued: the partition's
// fetches then stop (Read pauses it) rather than going on until the merge reaches its
// end, each fetch held, up to maxQueued records, and counted in the progress's total.
func (m *merge) findEnd(q *queue) {
	if m.to == 0 || q.hard <= q.hint {
		return
	}
	for i := q.scan; i < len(q.recs); i++ {
		r := q.recs[i]
		if r.Offset < q.hint {
			q.scan = i + 1
			continue
		}
		at, ok := q.replayTime(i)
		if !ok {
			return
		}
		if at >= m.to {
			m.end(q, r.Offset)
			clear(q.recs[i:])
			q.recs, q.ts = q.recs[:i], q.ts[:i]
			// The records before it keep the times they have, taken over records past
			// it (i's own took lookAhead after it: theirs are all known), as they
			// would be had the end been found after they went.
			q.rt = q.rt[:min(len(q.rt), i)]
			return
		}
		q.scan = i + 1
	}
}

// replayTime is q.recs[i]'s replay time in Unix ns: its timestamp, or the earliest of
// the partition's next lookAhead records' timestamps that are no earlier than the replay
// times before it, when that is earlier; false while those may yet come. A record without
// a timestamp (Kafka's -1, before 1970 here, or 0, a producer's unset one, as the engine
// and the gate's event clock take it) is no time for the records before it: it would put
// them in 1969 or 1970, before -from (the engine routes such a record itself at the
// replay's clock).
func (q *queue) replayTime(i int) (int64, bool) {
	if i >= len(q.rt) {
		q.fillTimes()
		if i >= len(q.rt) {
			return 0, false
		}
	}
	return q.rt[i], true
}

// fillTimes computes, in order, the replay times of the records after those rt holds
// whose next lookAhead records are queued (all of them once q is final). floor, the
// latest replay time so far, keeps a record stamped behind (a late retry) out of the
// times of the records before it: the earliest of the look-ahead pulled every one of
// them back to its time (a review: 301 records at one instant).
func (q *queue) fillTimes() {
	n, from := len(q.recs), len(q.rt)
	upto := n - q.lookAhead // recs[:upto] have their look-ahead queued
	if q.final() {
		upto = n
	}
	if upto <= from {
		return
	}
	if q.floor == math.MinInt64 {
		// The partition's first timed records: no replay time before them, the floor is
		// the first look-ahead's time an eighth of the way up, so that a few stamped
		// behind among them (one after the start of a -from range) pull none of them
		// back, and a run stamped ahead at the start (where ListOffsets finds -from), up
		// to seven eighths of it, still takes its neighbours' time.
		var first []int64
		for _, t := range q.ts[from:min(from+q.lookAhead+1, n)] {
			if t != math.MaxInt64 {
				first = append(first, t)
			}
		}
		if len(first) > 0 {
			slices.Sort(first)
			q.floor = first[len(first)/8]
		}
	}
	// The earliest of each look-ahead, from the last record back: the front of a queue of
	// indices whose times rise from front to back. It is the time sought unless it is
	// below the floor (a record stamped behind in the look-ahead), which a scan of the
	// look-ahead then passes over: a record or two a partition, not every one.
	wmin := slices.Grow(q.tmp[:0], upto-from)[:upto-from]
	dq, h := q.dq[:0], 0
	for j := n - 1; j >= from; j-- {
		for h < len(dq) && dq[h] > j+q.lookAhead {
			h++
		}
		if j < upto {
			wmin[j-from] = math.MaxInt64
			if h < len(dq) {
				wmin[j-from] = q.ts[dq[h]]
			}
		}
		if t := q.ts[j]; t != math.MaxInt64 {
			for len(dq) > h && q.ts[dq[len(dq)-1]] >= t {
				dq = dq[:len(dq)-1]
			}
			dq = append(dq, j)
		}
	}
	for j := from; j < upto; j++ {
		at := q.recs[j].Timestamp.UnixNano()
		if m := wmin[j-from]; m >= q.floor {
			at = min(at, m)
		} else {
			behind := true // every timed record of the look-ahead is below the floor
			for _, t := range q.ts[j+1 : min(j+1+q.lookAhead, n)] {
				if t >= q.floor && t != math.MaxInt64 {
					behind, at = false, min(at, t)
				}
			}
			if behind {
				// Followed by a late batch alone: the replay time before it stands for
				// its neighbours', or one stamped ahead kept its own and moved the clock
				// (a review: -to ended the range there, 500 of 801 records left out).
				at = min(at, q.floor)
			}
		}
		q.rt = append(q.rt, at)
		if q.ts[j] != math.MaxInt64 {
			// An untimed record's replay time (1969) is no floor: the records after it
			// would take their look-ahead's earliest, a late one's (a review).
			q.floor = max(q.floor, at)
		}
	}
	q.tmp, q.dq = wmin[:0], dq[:0]
}

// end ends q at offset off: what was read from there goes uncounted.
func (m *merge) end(q *queue, off int64) {
	m.offsets -= q.next - off
	m.total -= q.next - off
	q.hard, q.next, q.scan = off, off, 0
}

// ready readies q's first record to go, its replay time in q.head, and reports whether
// there is one: false when q has none, or one whose time waits on the next record. It
// drops the records before -from a partition starts with; its end at -to is found as the
// records come (findEnd).
func (m *merge) ready(q *queue) bool {
	for len(q.recs) > 0 {
		at, ok := q.replayTime(0)
		if !ok {
			return false
		}
		if !q.start && at < m.from {
			q.pop()
			continue
		}
		if q.stopped && m.to != 0 && at >= m.to {
			// Past -to, a drain's record whose end findEnd could not yet tell: not
			// the range's.
			clear(q.recs)
			q.recs, q.rt, q.ts = q.recs[:0], q.rt[:0], q.ts[:0]
			return false
		}
		q.start = true
		q.head = at
		return true
	}
	return false
}

// pop takes q's first record off.
func (q *queue) pop() {
	q.recs[0] = nil
	q.recs, q.ts = q.recs[1:], q.ts[1:]
	if len(q.rt) > 0 {
		q.rt = q.rt[1:]
	}
	q.scan = max(q.scan-1, 0)
	if len(q.recs) == 0 {
		q.recs, q.rt, q.ts = q.recs[:0:0], q.rt[:0:0], q.ts[:0:0] // let the fetch's array go
	}
}

// emit hands on every record it can, with its replay time.
func (m *merge) emit(fn func(*kgo.Record, time.Time)) {
	for {
		var best *queue
		for _, q := range m.live {
			if !m.ready(q) {
				if !q.final() {
					return // its next record may yet be earlier
				}
				continue
			}
			if best == nil || q.head < best.head || q.head == best.head && q.Partition < best.Partition {
				best = q
			}
		}
		if best == nil {
			m.live = slices.DeleteFunc(m.live, func(q *queue) bool { return q.exhausted() && len(q.recs) == 0 })
			return
		}
		r := best.recs[0]
		best.pop()
		m.at = time.Unix(0, best.head)
		m.records++
		fn(r, m.at)
	}
}

func (m *merge) done() bool { return len(m.live) == 0 }

// drain hands on, in order, every record m holds, the read stopping (Ctrl-C): a record
// waits for its partition's next one to know its replay time, and a stopped read's last
// record of each partition was held back and left out of the report (a review's 100
// records read, 99 reported). Nothing comes after them now: each is judged at its own
// time, as at a partition's end.
func (m *merge) drain(fn func(*kgo.Record, time.Time)) {
	for _, q := range m.live {
		q.stopped = true
	}
	m.emit(fn)
}

// leaders checks, after a stall, that the partitions waited for still answer: their
// offsets are listed, within stallAfter. A partition whose leader is
// unavailable (its broker down, no replica to take over) sends nothing and the client
// retries its fetches for ever: the read fails naming it, rather than waiting as for an
// open transaction, whose partition answers.
func (m *merge) leaders(ctx context.Context, adm *kadm.Client, topic string) error {
	waiting := m.waiting()
	if len(waiting) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, stallAfter)
	defer cancel()
	l, err := adm.ListCommittedOffsets(lctx, topic)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return outcome.Unanswered(topic, waiting, l, err, stallAfter)
}

// waiting is the partitions not read to their end.
func (m *merge) waiting() []int32 {
	var out []int32
	for _, q := range m.live {
		if !q.exhausted() {
			out = append(out, q.Partition)
		}
	}
	return out
}

// read is the offsets replayed so far: each partition up to its first record not yet
// handed on.
func (m *merge) read() []PartitionRange {
	var out []PartitionRange
	for _, q := range m.all {
		pr := q.PartitionRange
		pr.End = max(q.hard, pr.Start) // read to its end
		if slices.Contains(m.live, q) {
			pr.End = q.next
			if len(q.recs) > 0 {
				pr.End = q.recs[0].Offset
			}
		}
		out = append(out, pr)
	}
	return out
}
