package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Range is what a replay reads from Topic: every partition's records from From to To
// (record times, found through ListOffsets; zero: the partition's start, and its last
// stable offset when the read begins), or, when Offsets is set, exactly those offsets.
type Range struct {
	Topic    string
	From, To time.Time
	Offsets  []PartitionRange
}

// Progress is how far a read is: records read of the range's offsets (Total counts
// every offset, control records and aborted transactions' records included, so Done
// ends at most at Total) and the newest record time.
type Progress struct {
	Done, Total int64
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

// Read reads rng with a client of opts of its own: it joins no group, commits nothing and
// produces nothing. It hands every record to fn once, in record-time order across
// partitions (ties by partition, then offset), so that two reads of a range replay it
// alike, and progress, if not nil, after every fetch (the caller paces what it shows)
// and once at the end. It reads committed records only,
// as the gate does, and returns the offsets it read. It stops early when ctx is done,
// returning ctx's error with the offsets read so far.
func Read(ctx context.Context, rng Range, fn func(*kgo.Record), progress func(Progress), opts ...kgo.Opt) ([]PartitionRange, error) {
	// No reset: a range starting below a partition's log start (retention deleted it
	// since) is an error naming it, not a silent skip to what is left.
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	parts, err := offsets(ctx, kadm.NewClient(cl), rng)
	if err != nil {
		return nil, err
	}
	m := newMerge(parts)
	if len(m.live) == 0 {
		return parts, nil
	}
	from := map[int32]kgo.Offset{}
	for _, p := range m.live {
		from[p.Partition] = kgo.NewOffset().At(p.Start)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{rng.Topic: from})
	var total int64
	for _, p := range parts {
		total += p.End - p.Start
	}
	for !m.done() {
		pctx, cancel := context.WithTimeout(ctx, stallAfter)
		fs := cl.PollFetches(pctx)
		// Stalled: the poll's time ran out with nothing fetched. Its time can also run out
		// once it has taken records (a pause of the process as it returns): those are
		// the client's no longer, and go on below.
		stalled := pctx.Err() != nil && fs.NumRecords() == 0 // before cancel, which sets it
		cancel()
		if err := ctx.Err(); err != nil {
			return m.read(), err
		}
		if stalled {
			if progress != nil {
				progress(Progress{Done: m.offsets, Total: total, At: m.at, Waiting: m.waiting()})
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
		for _, q := range m.live {
			switch {
			case len(q.recs) >= maxQueued && !q.paused:
				q.paused = true
				pause = append(pause, q.Partition)
			case q.next >= q.End && !q.ended:
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
			progress(Progress{Done: m.offsets, Total: total, At: m.at})
		}
	}
	if progress != nil {
		progress(Progress{Done: m.offsets, Total: total, At: m.at})
	}
	return parts, nil
}

// offsets finds each partition's [start, end) of rng.
func offsets(ctx context.Context, adm *kadm.Client, rng Range) ([]PartitionRange, error) {
	list := func(what string, f func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
		l, err := f()
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("listing the %s offsets of %s: %w", what, rng.Topic, err)
		}
		return l, nil
	}
	// The last stable offset: a read_committed reader gets nothing past it.
	ends, err := list("last stable", func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, rng.Topic) })
	if err != nil {
		return nil, err
	}
	if len(ends[rng.Topic]) == 0 {
		return nil, fmt.Errorf("listing the offsets of %s: the topic does not exist", rng.Topic)
	}
	if len(rng.Offsets) > 0 {
		// Exact offsets, each partition's end no further than its last stable offset: a
		// read_committed reader gets nothing past it, and would wait for it.
		out := slices.Clone(rng.Offsets)
		for i := range out {
			e, ok := ends.Lookup(rng.Topic, out[i].Partition)
			if !ok || out[i].Partition < 0 {
				return nil, fmt.Errorf("reading %s: it has no partition %d", rng.Topic, out[i].Partition)
			}
			out[i].End = min(out[i].End, e.Offset)
			out[i].Start = min(out[i].Start, out[i].End)
		}
		return out, nil
	}
	starts, err := list("start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, rng.Topic) })
	if err != nil {
		return nil, err
	}
	if !rng.From.IsZero() {
		if starts, err = list("from", func() (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, rng.From.UnixMilli(), rng.Topic)
		}); err != nil {
			return nil, err
		}
	}
	var to kadm.ListedOffsets
	if !rng.To.IsZero() {
		if to, err = list("to", func() (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, rng.To.UnixMilli(), rng.Topic)
		}); err != nil {
			return nil, err
		}
	}
	var out []PartitionRange
	ends.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 {
			return
		}
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
	return out, nil
}

// queue is one partition's records waiting to be handed on.
type queue struct {
	PartitionRange
	next   int64 // the offset after the last one received
	recs   []*kgo.Record
	head   int64 // recs[0]'s time in Unix ns, while recs is not empty: compared without a load of it
	paused bool
	ended  bool // its fetches paused for good
}

// merge hands on the records of several partitions in record-time order: a record goes
// only when every partition not yet at its end has one waiting, so the order does not
// depend on how the fetches came.
type merge struct {
	live    []*queue // partitions with records left to read or hand on
	parts   []PartitionRange
	offsets int64 // offsets received, for progress
	at      time.Time
}

func newMerge(parts []PartitionRange) *merge {
	m := &merge{parts: parts}
	for _, p := range parts {
		if p.End > p.Start {
			m.live = append(m.live, &queue{PartitionRange: p, next: p.Start})
		}
	}
	return m
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
	for _, r := range recs {
		if r.Offset >= q.End {
			// Past the range: everything before it came or was filtered (an aborted
			// transaction's records, offsets compacted away), so the partition is done.
			m.offsets += q.End - q.next
			q.next = q.End
			break
		}
		if r.Offset < q.next {
			continue
		}
		m.offsets += r.Offset + 1 - q.next
		q.next = r.Offset + 1
		if !r.Attrs.IsControl() {
			if len(q.recs) == 0 {
				q.head = r.Timestamp.UnixNano()
			}
			q.recs = append(q.recs, r)
		}
	}
}

// emit hands on every record it can.
func (m *merge) emit(fn func(*kgo.Record)) {
	for {
		var best *queue
		for _, q := range m.live {
			if len(q.recs) == 0 {
				if q.next < q.End {
					return // it may yet hold an earlier record
				}
				continue
			}
			if best == nil || q.head < best.head || q.head == best.head && before(q.recs[0], best.recs[0]) {
				best = q
			}
		}
		if best == nil {
			m.live = slices.DeleteFunc(m.live, func(q *queue) bool { return q.next >= q.End && len(q.recs) == 0 })
			return
		}
		r := best.recs[0]
		best.recs[0] = nil
		best.recs = best.recs[1:]
		if len(best.recs) == 0 {
			best.recs = best.recs[:0:0] // let the fetch's array go
		} else {
			best.head = best.recs[0].Timestamp.UnixNano()
		}
		m.at = r.Timestamp
		fn(r)
	}
}

func before(a, b *kgo.Record) bool {
	if c := a.Timestamp.Compare(b.Timestamp); c != 0 {
		return c < 0
	}
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Offset < b.Offset
}

func (m *merge) done() bool { return len(m.live) == 0 }

// waiting is the partitions not read to their end.
func (m *merge) waiting() []int32 {
	var out []int32
	for _, q := range m.live {
		if q.next < q.End {
			out = append(out, q.Partition)
		}
	}
	return out
}

// read is the offsets replayed so far: each partition up to its first record not yet
// handed on.
func (m *merge) read() []PartitionRange {
	out := slices.Clone(m.parts)
	for i := range out {
		if q := m.byPartition(out[i].Partition); q != nil {
			out[i].End = q.next
			if len(q.recs) > 0 {
				out[i].End = q.recs[0].Offset
			}
		}
	}
	return out
}
