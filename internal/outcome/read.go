package outcome

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Scan reads the rows written to topic from since (by record timestamp) up to the end
// the topic had when Scan began, as a read_committed reader sees them (rows of aborted
// transactions, and of transactions still open, are not rows), and passes each to each
// once, in its partition's order: a row seen again with the same (ID, IntervalStart,
// Key, Rule, Outcome, Reason, Folded) is dropped. With team set, it reads only the
// partitions the gates' producers put that team's rows in (they are keyed by team, placed
// by Kafka's default partitioner: the partition of each of its TeamNames), and passes
// only its rows: what it holds is that team's, whatever the topic holds. opts are the
// client's (brokers, TLS, SASL). A record that is not a row of this schema is counted in
// skipped, not passed.
//
// Memory: the rows are the caller's to keep or not; Scan remembers 16 bytes of each row
// it passes (to know a row written again: a retry after an answer lost), and the rows of
// transactions still open.
//
// It reads uncommitted, control records (transaction markers) included, and keeps a
// transaction's rows until its marker says commit: every offset below the high watermark
// is then delivered, so reaching the end is seen for certain. A read_committed client
// would skip an aborted transaction's records, and when the last offsets before the end
// are such records, nothing tells it the end was reached.
func Scan(ctx context.Context, topic string, since time.Time, team string, each func(*Row), opts ...kgo.Opt) (skipped int, err error) {
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return 0, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	// With team set, the partitions of its names (TeamNames: a team with ':' or '%' has
	// two, each the Kafka key of its rows).
	var names []string
	var only map[int32]bool
	if team != "" {
		n := 0
		ends.Each(func(kadm.ListedOffset) { n++ })
		names, only = TeamNames(team), map[int32]bool{}
		for _, name := range names {
			only[int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: []byte(name)}, n))] = true
		}
	}
	// Kafka takes a negative timestamp for a special offset (-1 the end, -2 the start, ...)
	// and refuses any other (UNSUPPORTED_VERSION): a since before 1970 reads from the
	// epoch, which no record's timestamp is before.
	starts, err := adm.ListOffsetsAfterMilli(ctx, max(since.UnixMilli(), 0), topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("finding the offsets of %s at %s: %w", topic, since.Format(time.RFC3339), err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → its end, while records remain before it
	starts.Each(func(o kadm.ListedOffset) {
		if only != nil && !only[o.Partition] {
			return
		}
		if end, ok := ends.Lookup(topic, o.Partition); ok && end.Offset > o.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			left[o.Partition] = end.Offset
		}
	})
	if len(from) == 0 {
		return 0, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	// seen holds a 128-bit hash of each row passed (a collision, a row taken for another
	// written again, is one in 2^64 for any two of them).
	seen := map[[2]uint64]struct{}{}
	seeds := [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	// open holds, by partition and producer id, the rows of transactions whose marker
	// has not come yet.
	open := map[int32]map[int64][]Row{}
	keep := func(row *Row) {
		if team != "" && !slices.Contains(names, row.Team) {
			return
		}
		id := [2]uint64{rowHash(seeds[0], row), rowHash(seeds[1], row)}
		if _, dup := seen[id]; dup {
			return
		}
		seen[id] = struct{}{}
		each(row)
	}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return skipped, fmt.Errorf("reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
		})
		if ferr != nil {
			return skipped, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return // past the end the read began at
			}
			if r.Offset >= end-1 {
				delete(left, r.Partition)
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
			if err != nil {
				skipped++
				return
			}
			if r.Attrs.IsTransactional() {
				if open[r.Partition] == nil {
					open[r.Partition] = map[int64][]Row{}
				}
				open[r.Partition][r.ProducerID] = append(open[r.Partition][r.ProducerID], row)
				return
			}
			keep(&row)
		})
	}
	return skipped, nil
}

// rowHash hashes what makes a row the same row written again (Scan).
func rowHash(seed maphash.Seed, r *Row) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [binary.MaxVarintLen64]byte
	for _, s := range [...]string{r.ID, r.Key, r.Rule, r.Outcome, r.Reason} {
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
