package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partitions added to the input topic while the gates run (scaling out). franz-go
// notices them at its next metadata refresh, up to MetadataMaxAge (5 minutes by
// default) later, and it is the group leader's refresh that has them assigned: until
// then their records wait, owned by no gate, in no gate's lag. And an added partition
// has no committed offset, so it starts at Config.StartOffset: with StartLatest, at its
// end as of its assignment, past every record written to it before, though each was
// written after the group began reading the topic, skipped without a word.
//
// So each gate watches the input topic's partition count (every Config.WatchInterval, and
// at each assignment that holds a partition beyond the count it knows): once it grows,
// it refreshes the client's metadata at once (the leader then has them assigned), and
// with StartLatest it first commits the log start offset of each added partition the
// group has no offset for, so that whoever is assigned it reads it from its start.
// onAssigned runs before franz-go fetches the offsets of the partitions it assigns, so
// a gate that knew the topic before it grew never starts one it is given at its end.
// A gate that first saw the topic with them cannot tell them from the others: a
// partition added while no gate ran is started at Config.StartOffset.
//
// Kafka has no conditional commit: a start committed for a partition another gate
// (one started after the growth, which started it at its end) committed an offset of in
// the instant between this gate's look at the group's offsets and its commit moves the
// group's offset back, and that partition's next owner routes again what the first did
// (twice, under exactly-once too). Only a gate's first check after the growth commits,
// within Config.WatchInterval of it, before such a gate is likely to own one.

// addedWatch is the input topic's partition count the gate knows.
type addedWatch struct {
	mu    sync.Mutex
	known int32 // 0 until first seen
}

// sawInput records n as the input topic's partition count, if none was known yet.
func (c *Consumer) sawInput(n int32) {
	c.added.mu.Lock()
	defer c.added.mu.Unlock()
	if c.added.known == 0 {
		c.added.known = n
	}
}

// knownInput returns the input topic's partition count the gate knows (0: none yet).
func (c *Consumer) knownInput() int32 {
	c.added.mu.Lock()
	defer c.added.mu.Unlock()
	return c.added.known
}

// partitionCount is how many partitions topic has in resp (0 when resp does not say).
func partitionCount(resp *kmsg.MetadataResponse, topic string) int32 {
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == topic && t.ErrorCode == 0 {
			return int32(len(t.Partitions))
		}
	}
	return 0
}

// checkAdded asks the cluster how many partitions the input topic has, and handles the
// ones added since the count the gate knows (see the top of this file). A failure is
// logged, and the next check tries again.
func (c *Consumer) checkAdded(ctx context.Context, cl *kgo.Client) {
	c.added.mu.Lock()
	defer c.added.mu.Unlock()
	resp, err := topicsMetadata(ctx, cl, []string{c.cfg.InputTopic})
	if err != nil {
		c.log.Debug("kafka: could not count the input topic's partitions", "err", err)
		return
	}
	n := partitionCount(resp, c.cfg.InputTopic)
	if c.added.known == 0 || n <= c.added.known {
		c.added.known = max(c.added.known, n)
		return
	}
	var ids []int32
	for id := c.added.known; id < n; id++ {
		ids = append(ids, id)
	}
	var started map[int32]int64
	if c.cfg.StartOffset == StartLatest {
		if started, err = c.commitAddedStarts(ctx, cl, ids); err != nil {
			c.log.Warn("kafka: partitions added to the input topic; committing their start failed, tried again in a while",
				"topic", c.cfg.InputTopic, "partitions", ids, "err", err)
			return
		}
	}
	c.log.Info("kafka: partitions added to the input topic; the group reads them from their start",
		"topic", c.cfg.InputTopic, "partitions", ids, "before", c.added.known, "now", n, "start_committed", started)
	c.added.known = n
	cl.ForceMetadataRefresh()
}

// commitAddedStarts commits, for each partition of ids the group has no offset for and
// this gate does not own (a partition it owns started where it was assigned), its log
// start offset. It returns the offsets committed.
func (c *Consumer) commitAddedStarts(ctx context.Context, cl *kgo.Client, ids []int32) (map[int32]int64, error) {
	owned := func(id int32) bool { return len(c.snapshot([]int32{id})) > 0 }
	return c.commitStarts(ctx, cl, ids, owned, kadm.NewClient(cl).ListStartOffsets, "start")
}

// commitStarts commits, for each partition of ids the group has no offset for (and, when
// skip is not nil, skip does not report), the offset list gives it (what names them in
// errors: start, end). A partition whose offset fetch reports an offset a transaction
// commits (UNSTABLE_OFFSET_COMMIT) has a reader already, and is left alone. It returns
// the offsets committed.
func (c *Consumer) commitStarts(ctx context.Context, cl *kgo.Client, ids []int32, skip func(int32) bool,
	list func(context.Context, ...string) (kadm.ListedOffsets, error), what string) (map[int32]int64, error) {
	offs, errs, err := c.offsetFetch(ctx, cl, ids, true)
	if err != nil {
		return nil, fmt.Errorf("fetching the group's offsets: %w", err)
	}
	var todo []int32
	for _, id := range ids {
		if _, ok := offs[id]; ok || skip != nil && skip(id) {
			continue
		}
		if err := errs[id]; err != nil {
			if errors.Is(err, kerr.UnstableOffsetCommit) {
				continue // a transaction commits an offset for it: a gate reads it already
			}
			return nil, fmt.Errorf("fetching the group's offset of partition %d: %w", id, err)
		}
		todo = append(todo, id)
	}
	if len(todo) == 0 {
		return nil, nil
	}
	listed, err := list(ctx, c.cfg.InputTopic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing the %s offsets: %w", what, err)
	}
	commit := make(map[int32]kgo.EpochOffset, len(todo))
	for _, id := range todo {
		o, ok := listed.Lookup(c.cfg.InputTopic, id)
		if !ok {
			return nil, fmt.Errorf("no %s offset listed for partition %d", what, id)
		}
		commit[id] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset}
	}
	if err := c.commitInput(ctx, cl, commit); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	done := make(map[int32]int64, len(commit))
	for id, o := range commit {
		done[id] = o.Offset
	}
	return done, nil
}

// assignsAdded reports whether ids holds a partition beyond the input topic's count the
// gate knows: one added since, that onAssigned must handle before franz-go fetches its
// offset.
func (c *Consumer) assignsAdded(ids []int32) bool {
	known := c.knownInput()
	return known > 0 && len(ids) > 0 && slices.Max(ids) >= known
}
