package consume

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partition tracks one owned input partition: the batches handed to the producer, in
// offset order, and the offset up to which everything is acknowledged.
//
// Acknowledgements arrive out of order (one input partition's records go to several
// output partitions), so each poll's records of a partition form a batch with a count
// of records still unacknowledged; the committable offset is the end of the longest
// prefix of batches whose count reached zero. One atomic decrement per record, and a
// commit never passes an unacknowledged record.
type partition struct {
	topic string
	id    int32
	mono  mono // the consumer's: when its batches were registered

	mu      sync.Mutex
	batches []*batch // unacknowledged or not yet popped, in offset order
	acked   kgo.EpochOffset
	// committed is the offset last committed (or found committed at assignment: -1
	// when unknown); a commit is sent only when acked is past it.
	committed int64

	// gen counts the rewinds below what was committed (resumeAt): a commit's answer
	// is applied only to the generation it was sent in.
	gen int

	gone atomic.Bool // revoked or lost: late acknowledgements and retries are dropped
	// abandoned is set when an at-least-once revoke has stopped waiting for the
	// partition's records in flight (Consumer.onRevoked), before gone: a record of it
	// that fails from then on is given up, not retried.
	abandoned atomic.Bool
	// primed is set once the records of the partition's first poll here were handed to
	// Config.Prime, caughtUp once a poll of it reached the end of what it could poll,
	// from when on it is primed no more (prime, on the polling goroutine).
	primed, caughtUp atomic.Bool
	// transacted is set once records of the partition went into a transaction
	// (exactly-once): the client then holds offsets for it until it is revoked or lost,
	// the group's once a transaction commits, marked by rewindTxnStarts once one aborts
	// (see Consumer.dropRevokedUntold). A poll alone gives no such hold: an abort's
	// rewind hides a partition the group has not committed until a poll returns its
	// records again.
	transacted atomic.Bool
	// stopped is set when a record of the partition is refused by every topic and
	// Config.OnUndeliverable is stop, or records of it were lost before the gate read
	// them and Config.OnDataLoss is stop: nothing more of it is routed or committed.
	stopped atomic.Bool
	// lag is the partition's lag as last seen (see Consumer.setLag), for the
	// progress watchdog.
	lag atomic.Int64
	// next is the offset the lag was last measured from (setLag's next; where an
	// aborted transaction's records are read again: rewindTxnStarts), lagAt when (a
	// mono reading; 0: never): a partition polled no longer (polling held, fetching
	// paused) has its lag measured again from there (Consumer.refreshLag).
	next, lagAt atomic.Int64
	// doneAt is, exactly once, the offset + 1 the partition's records are committed to
	// here (0: none read yet): the start of the first transaction that read it, then
	// each commit's offset. The lag metric counts from it (Consumer.setLag): a record
	// polled into a transaction that aborts is not routed, and through an output outage
	// every poll reached the input's end again, the metric reading 0 while nothing
	// committed.
	doneAt atomic.Int64
	// hwm is the high watermark the lag metric was last set from (-1 before): a commit
	// sets the metric again from it (Consumer.afterEnd).
	hwm atomic.Int64
	// assignedAt is when the partition was assigned (a mono reading): one no poll has
	// measured lagStale after it (polling held from the start, or no record since) is
	// measured from the group's committed offset (Consumer.refreshLag).
	assignedAt int64
	// movedTo is where the gate last moved the client past lost records (loss.go), so
	// that a second out-of-range fetch before anything more is read starts from there,
	// not from a committed offset that may still be below the first gap. Read and
	// written by the poll loop only.
	movedTo  kgo.EpochOffset
	hasMoved bool
	// startCommitted, with exactly-once and StartLatest, is set once the group is known
	// to have an offset committed for the partition: found at assignment, committed by
	// a transaction, or committed by the gate before it produced the partition's first
	// records (Consumer.commitTxnStarts). The exactly-once loop's goroutine only.
	startCommitted bool

	// out is the partition's outcome aggregate (outcomes.go); nil when outcomes are off.
	out *outcomeState
}

// batch is one poll's records of one partition.
type batch struct {
	p         *partition
	end       int64 // offset after the batch's last record
	epoch     int32 // leader epoch of the last record, committed with the offset
	remaining atomic.Int64
	// at is when the batch was registered (its partition's mono reading): its records
	// have waited at most since then (see Consumer.oldestWaiting).
	at int64
	// records and bytes are the poll's input records (their keys, values and headers),
	// all kept in memory until the batch completes (Consumer.inputFull). bytes is added
	// to as they are routed (routeWork sums them in its loop, not in a pass of its own).
	records int64
	bytes   atomic.Int64
	// slab is the batch's records in flight (routeWork, routeTxnWork), put back for
	// reuse by the call that takes remaining to zero (Consumer.ackBatch).
	slab []failed
	// keep is set, with exactly-once, when a record of the batch failed to produce: the
	// transaction's end reads the failures (txnState.failures), so the batch's slab and
	// input are left to the garbage collector instead of being reused.
	keep atomic.Bool
	// seal is set on an outcome seal's batch (addSeal): it counts no record, only the
	// seal's rows, one. rows is the seal's rows in flight (nil in tests of the batches
	// alone): those of a revoked partition's seals are what its revoke leaves unwritten.
	seal bool
	rows *sealBatch
	// givenUp counts the batch's records given up unacknowledged, at least once: a
	// retry dropped as its partition was released or stopped, an undeliverable record
	// that stopped it. They are never acknowledged, so a wait for a stopped
	// partition's records leaves them out (partition.inFlight).
	givenUp atomic.Int64
}

func newPartition(topic string, id int32, m mono) *partition {
	p := &partition{topic: topic, id: id, mono: m, acked: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
	p.hwm.Store(-1)
	return p
}

// released reports whether p is another gate's now, or about to be: revoked or lost, or
// its revoke stopped waiting for its records.
func (p *partition) released() bool { return p.gone.Load() || p.abandoned.Load() }

// givenUp reports whether a failed record of p is given up rather than retried: p was
// released, or stopped.
func (p *partition) givenUp() bool { return p.released() || p.stopped.Load() }

// add registers a batch of n records ending (exclusive) at end, before any is produced;
// its bytes are added as they are routed.
func (p *partition) add(end int64, epoch int32, n int) *batch {
	b := &batch{p: p, end: end, epoch: epoch, at: p.mono.now(), records: int64(n)}
	b.remaining.Store(int64(n))
	p.mu.Lock()
	p.batches = append(p.batches, b)
	p.mu.Unlock()
	return b
}

// addEmpty registers that p's position moved to end past control records alone (a poll
// of transaction markers): a batch of no record, complete at once, that a commit moves
// past in offset order. One behind a batch still waiting on its records is extended
// rather than another added: markers polled while a produce is retried piled up batches.
func (p *partition) addEmpty(end int64, epoch int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.batches); n > 0 {
		if b := p.batches[n-1]; b.records == 0 && !b.seal && b.remaining.Load() == 0 {
			b.end, b.epoch = end, epoch
			return
		}
	}
	b := &batch{p: p, end: end, epoch: epoch, at: p.mono.now()}
	p.batches = append(p.batches, b)
}

// addSeal registers the batch of an outcome seal (outcomes.go) whose rows count p's
// records from offset from on, which completes when the seal's rows are acknowledged.
// It ends at from and goes before every batch that ends past it, the batches of the
// records the rows count among them, so no commit passes from before the rows are
// acknowledged: once a commit covers a record, its next owner does not route it again,
// and a row still in flight then (lost with the gate) would leave it counted nowhere.
// (Placed after those batches, as it was, it held back only the records after the seal,
// and a commit between the seal and its rows' acknowledgement covered the seal's.)
func (p *partition) addSeal(from int64, rows *sealBatch) *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := len(p.batches)
	for i > 0 && p.batches[i-1].end > from {
		i--
	}
	// Committed with the leader epoch of the record before from: the batch before it
	// ended there, or everything up to it is acknowledged already.
	epoch := p.acked.Epoch
	if i > 0 {
		epoch = p.batches[i-1].epoch
	}
	b := &batch{p: p, end: from, epoch: epoch, seal: true, rows: rows, at: p.mono.now()}
	b.remaining.Store(1)
	p.batches = slices.Insert(p.batches, i, b)
	return b
}

// advance pops the acknowledged prefix of batches and returns the offset up to which
// everything is acknowledged, and whether it is past the last commit.
func (p *partition) advance() (kgo.EpochOffset, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	hold := int64(-1) // with outcomes on: records from here on are counted but not sealed
	if p.out != nil {
		hold = p.out.hold.Load()
	}
	for ; i < len(p.batches) && p.batches[i].remaining.Load() == 0 && (hold < 0 || p.batches[i].end <= hold); i++ {
		p.acked = kgo.EpochOffset{Epoch: p.batches[i].epoch, Offset: p.batches[i].end}
	}
	if i > 0 {
		clear(p.batches[:i]) // let the popped batches go
		p.batches = p.batches[i:]
	}
	return p.acked, p.gen, p.acked.Offset > p.committed
}

// inFlight returns how many records are routed but not acknowledged, and whether an
// outcome seal counting records of p awaits its rows: a seal's batch is no record, and
// counted as one it made a shutdown whose rows went unwritten report records abandoned
// where none were. awaitable leaves out the records given up (batch.givenUp), never to
// be acknowledged: for a stopped partition's wait (waitInFlight), where a data-loss stop
// (loss.go) leaves the records of the polls before the gap in flight, and their rows,
// which the broker acknowledges as any; a seal's rows count even an undeliverable
// stop's records.
func (p *partition) inFlight(awaitable bool) (records int64, rows bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		n := b.remaining.Load()
		if b.seal {
			rows = rows || n > 0
			continue
		}
		if awaitable {
			n = max(n-b.givenUp.Load(), 0)
		}
		records += n
	}
	return records, rows
}

// oldestWaiting returns when the oldest batch of p not yet acknowledged was registered
// (a mono reading), 0 when every one is. Not always the first: a seal goes before the
// batches whose records its rows count (addSeal).
func (p *partition) oldestWaiting() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var oldest int64
	for _, b := range p.batches {
		if b.remaining.Load() > 0 && (oldest == 0 || b.at < oldest) {
			oldest = b.at
		}
	}
	return oldest
}

// held returns the input records of p's batches not yet complete, and their bytes.
func (p *partition) held() (records, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		if !b.seal && b.remaining.Load() > 0 {
			records += b.records
			bytes += b.bytes.Load()
		}
	}
	return records, bytes
}

// sealsUnwritten adds to seals the seals whose rows count records of p and are not all
// acknowledged.
func (p *partition) sealsUnwritten(seals map[*sealBatch]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		if b.seal && b.rows != nil && b.remaining.Load() > 0 {
			seals[b.rows] = true
		}
	}
}

// markCommitted records a successful commit of off.
func (p *partition) markCommitted(off int64, gen int) {
	p.mu.Lock()
	if gen == p.gen && off > p.committed {
		p.committed = off
	}
	p.mu.Unlock()
}
