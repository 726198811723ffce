package consume

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Where a StartLatest group starts a partition. franz-go, as Kafka's own consumers,
// starts a partition the group has no offset for at the log's end as of the assignment,
// and remembers it nowhere but in the client: a gate that leaves before it has committed
// anything of the partition (a pod rolled or crash-looping in a new fleet's first
// minutes, a rebalance before its first poll of the partition) hands its next owner no
// start, and that one starts at the end as of its own assignment, past every record
// written in between, though each was written after the group began reading the topic.
//
// So with StartLatest each gate, as it is assigned partitions the group has no offset
// for, commits their end as their start before franz-go, once onAssigned returns,
// fetches their offsets: franz-go then starts them there, and so does any later owner.
// The commit carries the assignment's generation (its member epoch under KIP-848), so
// only the owner's lands. The end is the one franz-go would have started at: the last
// stable offset when the input is read read_committed (exactly-once), else the high
// watermark. It costs an offset fetch at each assignment, and a listing and a commit
// only while the group is new to a partition.
//
// A failure is logged, not retried: the partition then starts as Kafka's consumers
// start it, and under exactly-once commitTxnStarts still commits where the first
// transaction began before producing any of its records.

// commitLatestStarts commits, for each partition of ids the group has no offset for, its
// end offset (StartLatest only; see the top of this file). Partitions added to the topic
// since the count the gate knows are left to checkAdded, which starts them at their
// log start. It returns the offsets committed.
func (c *Consumer) commitLatestStarts(ctx context.Context, cl *kgo.Client, ids []int32) (map[int32]int64, error) {
	known := c.knownInput()
	var asked []int32
	for _, id := range ids {
		if known == 0 || id < known {
			asked = append(asked, id)
		}
	}
	if len(asked) == 0 {
		return nil, nil
	}
	adm := kadm.NewClient(cl)
	list := adm.ListCommittedOffsets // the last stable offset, as a read_committed client's end (both modes)
	return c.commitStarts(ctx, cl, asked, nil, list, "end")
}

// commitInput commits offs, offsets of input partitions, for the group through cl,
// outside any transaction, and returns the first error: the request's, or a partition's.
func (c *Consumer) commitInput(ctx context.Context, cl *kgo.Client, offs map[int32]kgo.EpochOffset) error {
	var result error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{c.cfg.InputTopic: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil {
				for _, t := range resp.Topics {
					for _, rp := range t.Partitions {
						if e := kerr.ErrorForCode(rp.ErrorCode); e != nil && err == nil {
							err = fmt.Errorf("partition %d: %w", rp.Partition, e)
						}
					}
				}
			}
			result = err
		})
	return result
}
