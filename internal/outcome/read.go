package outcome

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Read returns the rows written to topic from since (by record timestamp) up to the last
// stable offset the topic had when Read began, read_committed (rows of aborted
// transactions are not rows; an open transaction's are not read), each once: a row seen
// again with the same (ID, IntervalStart, Key, Rule, Outcome, Reason) is dropped. opts
// are the client's (brokers, TLS, SASL). A record that is not a row of this schema is
// counted in skipped, not returned.
func Read(ctx context.Context, topic string, since time.Time, opts ...kgo.Opt) (rows []Row, skipped int, err error) {
	// Control records (transaction markers) are kept: the last offset before the end
	// may be one, and seeing it is how a partition is known to be read through.
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, 0, fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("listing the last stable offsets of %s: %w", topic, err)
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
			id := rowID{row.ID, row.IntervalStart.UnixNano(), row.Key, row.Rule, row.Outcome, row.Reason}
			if _, dup := seen[id]; dup {
				return
			}
			seen[id] = struct{}{}
			rows = append(rows, row)
		})
	}
	return rows, skipped, nil
}

type rowID struct {
	id                         string
	start                      int64
	key, rule, outcome, reason string
}
