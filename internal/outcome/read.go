package outcome

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/durtext"
)

// ErrNoTopic is Scan's error for a topic the cluster does not have.
var ErrNoTopic = errors.New("the topic does not exist")

// ErrNoPartitions is Scan's error for a topic the cluster lists with no partitions: the
// metadata of a topic being created or deleted.
var ErrNoPartitions = errors.New("the topic is listed with no partitions (being created or deleted?)")

// Scan reads the rows written to topic from since (by record timestamp) up to the end
// the topic had when Scan began, as a read_committed reader sees them (rows of aborted
// transactions, and of transactions still open, are not rows), and passes each to each
// once, in its partition's order: a row seen again with the same (ID, IntervalStart,
// Team, Key, Rule, Outcome, Reason, Folded) is dropped. With team set, it reads only the
// partitions the gates' producers put that team's rows in (they are keyed by team, placed
// by Kafka's default partitioner: the partition of each of its TeamNames) and the
// partition of the rows of no team (keyed by the empty key: the gates' folded rows), and
// passes only its rows, and the folded rows found there (Row.Folded: they name no team,
// and may hold some of its records): what it holds is that team's, whatever the topic
// holds.
// opts are the client's (brokers, TLS, SASL). A record that is not a row of this schema is counted in
// Skipped, not passed, where a row would have been passed (committed; with team set,
// keyed by one of its names); seal records, of any schema, are not. Offsets retention
// deletes after Scan looked them up (or while it reads) are noted in Gone, and the read
// goes on from what is left; a partition whose rows from since on may be among those
// retention deleted before, in Trimmed. A partition it reads whose offsets cannot be
// listed, at the start or once it sent nothing for stallAfter, fails the read, naming
// it; one it does not read (another team's) holds up nothing; for one team, the folded
// rows' partition, when it is none of the team's, is left out instead (FoldedUnread).
//
// Memory: the rows are the caller's to keep or not; Scan remembers a 16-byte hash of each
// row it passes (to know a row written again: a retry after an answer lost), 35 to 56
// bytes a row in its map (docs/outcomes.md), and the rows of transactions still open.
//
// It reads uncommitted, control records (transaction markers) included, and keeps a
// transaction's rows until its marker says commit: every offset below the high watermark
// is then delivered, so reaching the end is seen for certain. A read_committed client
// would skip an aborted transaction's records, and when the last offsets before the end
// are such records, nothing tells it the end was reached.
func Scan(ctx context.Context, topic string, since time.Time, team string, each func(*Row), opts ...kgo.Opt) (read Scanned, err error) {
	// No reset: an offset retention deleted meanwhile is an error the read handles
	// (gone), where a reset would skip to the log start without a word, and past the
	// end, when all before it went, wait for ever.
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))...)
	if err != nil {
		return read, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tds, err := adm.ListTopics(ctx, topic)
	if err == nil {
		err = tds.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return read, fmt.Errorf("listing the partitions of %s: %w", topic, ErrNoTopic)
	}
	if err != nil {
		return read, fmt.Errorf("listing the partitions of %s: %w", topic, err)
	}
	// The partitions to read: every one, or, with team set, those of its names (TeamNames:
	// a team with ':' or '%' has two, each the Kafka key of its rows). Only theirs must be
	// listed below: another's leader unavailable holds up no team whose rows are elsewhere.
	var names []string
	need := map[int32]bool{}
	parts := tds[topic].Partitions
	if len(parts) == 0 {
		// Placing a team's names and the empty key (partitionOf) divides by the count.
		return read, fmt.Errorf("listing the partitions of %s: %w", topic, ErrNoPartitions)
	}
	if team == "" {
		for p := range parts {
			need[p] = true
		}
	} else {
		names = TeamNames(team)
		for _, name := range names {
			need[partitionOf(topic, []byte(name), len(parts))] = true
		}
	}
	// With team set, the partition of the rows of no team too (keyed by the empty key),
	// for the folded rows, which may hold some of its records: when not one of the
	// team's, it is read if it can be listed, and otherwise left out (FoldedUnread), the
	// team's own rows read all the same.
	folded := int32(-1)
	if p := partitionOf(topic, []byte{}, len(parts)); team != "" && !need[p] {
		folded, need[p] = p, true
	}
	// dropFolded leaves the folded rows' partition out when a listing lacks it.
	dropFolded := func(l kadm.ListedOffsets, err error) {
		if folded >= 0 && need[folded] {
			if ferr := listingErr(topic, folded, l, err); ferr != nil {
				delete(need, folded)
				read.FoldedUnread = fmt.Errorf("%s partition %d: %w", topic, folded, ferr)
			}
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	dropFolded(ends, err)
	if err := listed(topic, need, ends, err); err != nil {
		return read, fmt.Errorf("listing the end offsets of %w", err)
	}
	// Kafka takes a negative timestamp for a special offset (-1 the end, -2 the start, ...)
	// and refuses any other (UNSUPPORTED_VERSION): a since before 1970 reads from the
	// epoch, which no record's timestamp is before.
	starts, err := adm.ListOffsetsAfterMilli(ctx, max(since.UnixMilli(), 0), topic)
	dropFolded(starts, err)
	if err := listed(topic, need, starts, err); err != nil {
		return read, fmt.Errorf("finding the offsets at %s of %w", since.Format(time.RFC3339), err)
	}
	// Where each partition starts: a lookup by time that lands there, past rows retention
	// deleted, cannot tell whether they were from before since (Kafka keeps no time of
	// them), so the read says the rows since then may be short (Trimmed).
	kept, err := adm.ListStartOffsets(ctx, topic)
	dropFolded(kept, err)
	if err := listed(topic, need, kept, err); err != nil {
		return read, fmt.Errorf("listing the start offsets of %w", err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → its end, while records remain before it
	next := map[int32]int64{} // partition → the offset to read next
	starts.Each(func(o kadm.ListedOffset) {
		if !need[o.Partition] {
			return
		}
		// The read begins at the start of a partition retention deleted rows of, at a row
		// after since or at its end (none left, the timestamp -1): the deleted rows may
		// have been since then. A row found at since is kept whole.
		if k, ok := kept.Lookup(topic, o.Partition); ok && k.Offset > 0 && o.Offset == k.Offset && (o.Timestamp < 0 || o.Timestamp > since.UnixMilli()) {
			tr := Trimmed{Partition: o.Partition}
			if o.Timestamp >= 0 {
				tr.Oldest = time.UnixMilli(o.Timestamp).UTC()
			}
			read.Trimmed = append(read.Trimmed, tr)
		}
		if end, ok := ends.Lookup(topic, o.Partition); ok && end.Offset > o.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			left[o.Partition] = end.Offset
			next[o.Partition] = o.Offset
		}
	})
	if len(from) == 0 {
		return read, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	// seen holds a 128-bit hash of each row passed (a collision, a row taken for another
	// written again, is one in 2^64 for any two of them).
	seen := map[[2]uint64]struct{}{}
	seeds := [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	// open holds, by partition and producer id, the records of transactions whose marker
	// has not come yet: their rows, and those that are not rows, counted in Skipped only
	// once committed.
	open := map[int32]map[int64][]decoded{}
	keep := func(d *decoded) {
		if d.err != nil {
			// Counted as a record that is not a row only where it would have been one
			// passed: for one team, a record keyed by one of its names (the Kafka key of
			// a row is its team), not another team's on its partition.
			if team != "" && !slices.Contains(names, string(d.key)) {
				return
			}
			read.Skipped++
			if errors.Is(d.err, ErrNewerSchema) {
				read.Newer++
				read.NewestSchema = max(read.NewestSchema, d.row.Schema)
			}
			return
		}
		row := &d.row
		if team != "" && !row.Folded && !slices.Contains(names, row.Team) {
			return
		}
		id := [2]uint64{rowHash(seeds[0], row), rowHash(seeds[1], row)}
		if _, dup := seen[id]; dup {
			return
		}
		seen[id] = struct{}{}
		each(row)
	}
	// leaveFolded stops the read of the folded rows' partition, when it is no partition of
	// the team's, that failed mid-read (its leader gone): the team's history needs only
	// its own partitions, and the command failed whole for the folded rows alone (a
	// review). The rows read of it before stay passed; why, in FoldedUnread.
	leaveFolded := func(err error) {
		read.FoldedUnread = fmt.Errorf("read to offset %d of %d: %w", next[folded], left[folded], err)
		read.FoldedPartly = true
		delete(left, folded)
		delete(open, folded) // its transactions' rows, whose markers will not be read
		cl.RemoveConsumePartitions(map[string][]int32{topic: {folded}})
	}
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, stallAfter)
		fs := cl.PollFetches(pctx)
		// Stalled: the poll's time ran out with nothing fetched (records taken as it ran
		// out are the client's no longer, and go on below).
		stalled := pctx.Err() != nil && fs.NumRecords() == 0 // before cancel, which sets it
		cancel()
		if err := ctx.Err(); err != nil {
			return read, fmt.Errorf("reading %s: %w", topic, err)
		}
		if stalled {
			foldedErr, err := answering(ctx, adm, topic, left, folded)
			if err != nil {
				return read, err
			}
			if foldedErr != nil {
				leaveFolded(foldedErr)
			}
			continue
		}
		var ferr error
		var outOfRange []int32
		fs.EachError(func(_ string, p int32, err error) {
			if pctx.Err() != nil && errors.Is(err, pctx.Err()) {
				return // the poll's own time ran out, its records taken
			}
			if _, ok := left[p]; ok && errors.Is(err, kerr.OffsetOutOfRange) {
				outOfRange = append(outOfRange, p)
				return
			}
			if _, ok := left[p]; ok && p == folded {
				leaveFolded(fmt.Errorf("reading %s partition %d: %w", topic, p, err))
				return
			}
			ferr = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
		})
		if ferr != nil {
			return read, ferr
		}
		if i := slices.Index(outOfRange, folded); i >= 0 && folded >= 0 {
			// Apart from the team's: its offsets gone, and the partition now ending
			// below them (a broker lost records), it is left, not the read failed.
			outOfRange = slices.Delete(outOfRange, i, i+1)
			if err := skipGone(ctx, cl, adm, topic, []int32{folded}, next, left, &read); err != nil {
				leaveFolded(err)
			}
		}
		if len(outOfRange) > 0 {
			if err := skipGone(ctx, cl, adm, topic, outOfRange, next, left, &read); err != nil {
				return read, err
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end || r.Offset < next[r.Partition] {
				return // past the end the read began at, or before where it was moved on
			}
			next[r.Partition] = r.Offset + 1
			if r.Offset >= end-1 {
				// Read to its end: no more of its fetches. The rows the gates write
				// meanwhile would keep coming, read for nothing, and a poll of them
				// would not be a stall: a partition that stopped answering went unseen.
				delete(left, r.Partition)
				cl.RemoveConsumePartitions(map[string][]int32{topic: {r.Partition}})
			}
			if r.Attrs.IsControl() {
				// The key: version (int16), then type (int16): 0 abort, 1 commit.
				pending := open[r.Partition][r.ProducerID]
				delete(open[r.Partition], r.ProducerID)
				if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1 {
					for i := range pending {
						keep(&pending[i])
					}
				}
				return
			}
			row, err := Decode(r.Value)
			if errors.Is(err, ErrSealRecord) {
				return
			}
			d := decoded{row: row, err: err, key: r.Key}
			if r.Attrs.IsTransactional() {
				if open[r.Partition] == nil {
					open[r.Partition] = map[int64][]decoded{}
				}
				open[r.Partition][r.ProducerID] = append(open[r.Partition][r.ProducerID], d)
				return
			}
			keep(&d)
		})
	}
	return read, nil
}

// listed checks that a listing of topic's offsets (l, err: kadm's answer, err a failed
// shard's, whose partitions l lacks) holds each partition of need, and names the first
// that it does not: "TOPIC partition P: why".
func listed(topic string, need map[int32]bool, l kadm.ListedOffsets, err error) error {
	for _, p := range slices.Sorted(maps.Keys(need)) {
		if perr := listingErr(topic, p, l, err); perr != nil {
			return fmt.Errorf("%s partition %d: %w", topic, p, perr)
		}
	}
	return nil
}

// listingErr is why partition p of topic is not in a listing of its offsets (l, err:
// kadm's answer, err a failed shard's, whose partitions l lacks); nil when it is.
func listingErr(topic string, p int32, l kadm.ListedOffsets, err error) error {
	switch o, ok := l.Lookup(topic, p); {
	case ok && o.Err == nil:
		return nil
	case ok:
		return o.Err
	case err != nil:
		return err
	}
	return errors.New("not listed")
}

// decoded is a record Scan read: its row, or why it is none (Decode's error), and its
// Kafka key.
type decoded struct {
	row Row
	err error
	key []byte
}

// Scanned is what a Scan met besides its rows.
type Scanned struct {
	// Skipped counts the records that are not rows of this schema (committed; of the
	// team, for one team's Scan; seal records aside); Newer those of them that are rows
	// of a newer one (written by a newer gate), the newest NewestSchema.
	Skipped      int
	Newer        int
	NewestSchema int
	// Gone is the offsets the read was to read and could not.
	Gone []Gone
	// Trimmed is the partitions whose oldest rows retention deleted, the read beginning at
	// the oldest row left, after since: rows since then may be among those deleted.
	Trimmed []Trimmed
	// FoldedUnread, for one team's Scan, is why the partition of the rows of no team
	// (keyed by the empty key: the folded rows) was not read: it could not be listed; or,
	// FoldedPartly, not read whole: it failed mid-read (its leader gone), the rows read of
	// it before passed. Nil when it was read, or is one of the team's, whose failure fails
	// the Scan.
	FoldedUnread error
	FoldedPartly bool
}

// Trimmed is a partition the read began at its start, retention having deleted the rows
// before it: Oldest is the oldest row left's timestamp, zero when none is.
type Trimmed struct {
	Partition int32
	Oldest    time.Time
}

// Gone is a range of offsets of a partition, From up to To.
type Gone struct {
	Partition int32
	From, To  int64
}

// skipGone moves the read of each partition of parts, whose offset to read next the
// broker no longer has (out of range), to the partition's start: retention deleted the
// offsets before it after Scan looked them up (or while it read). The offsets skipped are
// noted in read.Gone; a partition whose every offset to read went is done. An offset out
// of range above the partition's start is not retention's: it is still held and read
// again, or, when the partition now ends below it (a broker lost records), an error.
func skipGone(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, parts []int32, next, left map[int32]int64, read *Scanned) error {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("finding where %s partitions %v start, an offset to read being gone: %w", topic, parts, err)
	}
	set := map[int32]kgo.EpochOffset{}
	for _, p := range parts {
		start, okStart := starts.Lookup(topic, p)
		end, okEnd := ends.Lookup(topic, p)
		switch {
		case !okStart || !okEnd:
			return fmt.Errorf("reading %s partition %d at offset %d: %w; the partition's offsets were not listed", topic, p, next[p], kerr.OffsetOutOfRange)
		case start.Offset > next[p]:
			to := min(start.Offset, left[p])
			if n := len(read.Gone); n > 0 && read.Gone[n-1].Partition == p && read.Gone[n-1].To == next[p] {
				read.Gone[n-1].To = to
			} else {
				read.Gone = append(read.Gone, Gone{Partition: p, From: next[p], To: to})
			}
			next[p] = start.Offset
		case end.Offset < next[p]:
			return fmt.Errorf("reading %s partition %d at offset %d: the partition now ends at %d (a broker lost records): %w", topic, p, next[p], end.Offset, kerr.OffsetOutOfRange)
		}
		if next[p] >= left[p] {
			delete(left, p)
			cl.RemoveConsumePartitions(map[string][]int32{topic: {p}})
			continue
		}
		set[p] = kgo.EpochOffset{Epoch: -1, Offset: next[p]}
	}
	if len(set) > 0 {
		cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: set})
	}
	return nil
}

// stallAfter is how long a Scan waits for a fetch before it checks that the partitions
// it has not read to their end still answer (answering).
const stallAfter = 10 * time.Second

// answering checks, after a stall, that the partitions of left (those not read to their
// end) still answer: their end offsets are listed, within stallAfter. A partition whose
// leader is unavailable (its broker down, no replica to take over) sends nothing and the
// client retries its fetches for ever: the read fails naming it, rather than waiting for
// the caller's limit, which says nothing of the partition. Scan reads uncommitted, so no
// open transaction holds a partition back: one that answers is read on.
// The folded rows' partition (folded, -1 for none) is judged apart: foldedErr, when it
// does not answer.
func answering(ctx context.Context, adm *kadm.Client, topic string, left map[int32]int64, folded int32) (foldedErr, err error) {
	lctx, cancel := context.WithTimeout(ctx, stallAfter)
	defer cancel()
	l, err := adm.ListEndOffsets(lctx, topic)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, ctx.Err())
	}
	parts := slices.Sorted(maps.Keys(left))
	if i := slices.Index(parts, folded); i >= 0 {
		parts = slices.Delete(parts, i, i+1)
		foldedErr = Unanswered(topic, []int32{folded}, l, err, stallAfter)
	}
	return foldedErr, Unanswered(topic, parts, l, err, stallAfter)
}

// Unanswered is an error for each of parts that a listing of topic's offsets (l, err:
// kadm's answer) left out or failed, saying nothing was fetched from it for waited; nil
// when every one answered. A partition whose leader is unavailable (its broker down, no
// replica to take over) sends nothing and franz-go retries its fetches for ever: gate
// outcomes and gate replay, which read a topic to its end, fail naming it rather than
// wait as for an open transaction, whose partition answers.
func Unanswered(topic string, parts []int32, l kadm.ListedOffsets, err error, waited time.Duration) error {
	var errs error
	for _, p := range parts {
		perr := listingErr(topic, p, l, err)
		if perr == nil {
			continue
		}
		errs = errors.Join(errs, fmt.Errorf("reading %s partition %d: nothing fetched for %s and its offsets cannot be listed (its leader unavailable?): %w", topic, p, durtext.String(waited), perr))
	}
	return errs
}

// rowHash hashes what makes a row the same row written again (Scan).
func rowHash(seed maphash.Seed, r *Row) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [binary.MaxVarintLen64]byte
	for _, s := range [...]string{r.ID, r.Team, r.Key, r.Rule, r.Outcome, r.Reason} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))]) // each string's length first: no two lists of strings write the same bytes
		h.WriteString(s)
	}
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(r.IntervalStart.UnixNano()))
	if r.Folded {
		b[8] = 1
	}
	h.Write(b[:])
	return h.Sum64()
}

// partitionOf is the partition of topic (of n) Kafka's default partitioner gives a
// record keyed by key, as the gates' producers place their rows.
func partitionOf(topic string, key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: key}, n))
}
