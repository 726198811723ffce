package outcome

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Read returns the rows written to topic from since (by record timestamp) up to the end
// the topic had when Read began, as a read_committed reader sees them (rows of aborted
// transactions, and of transactions still open, are not rows), each once: a row seen
// again with the same (ID, IntervalStart, Key, Rule, Outcome, Reason, Folded) is
// dropped. opts are the client's (brokers, TLS, SASL). A record that is not a row of
// this schema is counted in skipped, not returned.
//
// It reads uncommitted, control records (transaction markers) included, and keeps a
// transaction's rows until its marker says commit: every offset below the high watermark
// is then delivered, so reaching the end is seen for certain. A read_committed client
// would skip an aborted transaction's records, and when the last offsets before the end
// are such records, nothing tells it the end was reached.
func Read(ctx context.Context, topic string, since time.Time, opts ...kgo.Opt) (rows []Row, skipped int, err error) {
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, 0, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("finding the offsets of %s at %s: %w", topic, since.Format(time.RFC3339), err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → its end, while records remain before it
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := ends.Lookup(topic, o.Partition); ok && end.Offset > o.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			left[o.Partition] = end.Offset
		}
	})
	if len(from) == 0 {
		return nil, 0, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	seen := map[rowID]struct{}{}
	// open holds, by partition and producer id, the rows of transactions whose marker
	// has not come yet.
	open := map[int32]map[int64][]Row{}
	keep := func(row Row) {
		id := rowID{row.ID, row.IntervalStart.UnixNano(), row.Key, row.Rule, row.Outcome, row.Reason, row.Folded}
		if _, dup := seen[id]; dup {
			return
		}
		seen[id] = struct{}{}
		rows = append(rows, row)
	}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return rows, skipped, fmt.Errorf("reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
		})
		if ferr != nil {
			return rows, skipped, ferr
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
					for _, row := range pending {
						keep(row)
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
			keep(row)
		})
	}
	return rows, skipped, nil
}

type rowID struct {
	id                         string
	start                      int64
	key, rule, outcome, reason string
	folded                     bool
}
