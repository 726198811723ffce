package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/durtext"
)

// The unstable-offsets watch (exactly-once only). Before an exactly-once member reads a
// partition it asks the group for the partition's committed offset with RequireStable
// (KIP-447): while a transaction holding an offset for it is open, the coordinator
// answers UNSTABLE_OFFSET_COMMIT and franz-go asks again every second, for ever and
// without a word. That is right while the transaction ends (its producer commits or
// aborts it, or the brokers abort it at its timeout), but a transaction whose marker
// never reached __consumer_offsets (a hanging transaction: Apache Kafka 4.3.1 skips a
// marker when it cannot find the partition's leader while a restarted node is still
// fenced) holds the offset for good: the gate owns the partition, routes nothing of it
// (nor of the partitions assigned with it: franz-go fetches their offsets together),
// has no lag to report and would look healthy. So every Config.WatchInterval the watch asks
// the same question of the partitions the gate owns; a partition answered
// UNSTABLE_OFFSET_COMMIT without a break for longer than any transaction of the fleet may
// stay open (the gate's own GATE_TRANSACTION_TIMEOUT plus the brokers' abort sweep) makes
// the gate not ready, with an error line naming the partitions, the __consumer_offsets
// partition that holds the group, and how an operator ends the transaction. The gate
// starts the partitions by itself once it is ended.
const (
	problemUnstable = "offsets/unstable"
	// unstableSlack is what the brokers take, past a transaction's timeout, to abort it:
	// their sweep runs every transaction.abort.timed.out.transaction.cleanup.interval.ms
	// (10 s by default), then writes the markers.
	unstableSlack = 30 * time.Second
)

// unstableWatch is the watch's state; only the output watch's goroutine touches it.
type unstableWatch struct {
	since map[int32]time.Time // by owned partition: since when it has been unstable, without a break
}

// checkUnstable runs one round of the watch with client cl at now.
func (c *Consumer) checkUnstable(ctx context.Context, cl *kgo.Client, now time.Time) {
	var ids []int32
	for _, p := range c.snapshot(nil) {
		ids = append(ids, p.id)
	}
	w := &c.unstable
	if w.since == nil {
		w.since = make(map[int32]time.Time)
	}
	for id := range w.since {
		if !slices.Contains(ids, id) {
			delete(w.since, id)
		}
	}
	if len(ids) > 0 {
		unstable, err := c.unstablePartitions(ctx, cl, ids)
		if err != nil {
			c.log.Debug("kafka: could not ask the group whether its offsets are stable", "err", err)
			return // keep what is known: one failed request is no evidence either way
		}
		for _, id := range ids {
			if !slices.Contains(unstable, id) {
				delete(w.since, id)
			} else if _, ok := w.since[id]; !ok {
				w.since[id] = now
			}
		}
	}
	bound := c.cfg.TransactionTimeout + unstableSlack
	var held []int32
	for id, t := range w.since {
		if now.Sub(t) >= bound {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		if c.problems.clear(func(k string) bool { return k == problemUnstable }) {
			c.log.Info("kafka: the group's committed offsets are stable again; the partitions start")
		}
		return
	}
	slices.Sort(held)
	// The commands as an operator runs them: the tool wants the broker, and abort the
	// partition and the transaction's start offset, which find-hanging answers.
	where, part := "__consumer_offsets", "--partition N"
	if n, err := offsetsPartitions(ctx, cl); err == nil && n > 0 {
		p := groupOffsetsPartition(c.cfg.GroupID, n)
		where, part = fmt.Sprintf("__consumer_offsets partition %d", p), fmt.Sprintf("--partition %d", p)
	}
	// The message stays the same while the same partitions are held, so that it is
	// logged once (logProblem), not every round.
	c.logProblem(ctx, problemUnstable, fmt.Sprintf("kafka: the committed offsets of input partitions %s/%v have been unstable "+
		"(UNSTABLE_OFFSET_COMMIT) for over %s, longer than a transaction may stay open (GATE_TRANSACTION_TIMEOUT and the brokers' "+
		"abort sweep): a transaction holding them on %s was never ended (a hanging transaction), and the gate cannot start them "+
		"(nor the partitions assigned with them); find it with `kafka-transactions.sh --bootstrap-server BROKER find-hanging --topic __consumer_offsets %s` "+
		"and end it with `kafka-transactions.sh --bootstrap-server BROKER abort --topic __consumer_offsets %s --start-offset START` (START: its StartOffset "+
		"in find-hanging's answer), after which the gate starts them by itself",
		c.cfg.InputTopic, held, durtext.String(bound), where, part, part), "group", c.cfg.GroupID)
}

// unstablePartitions asks the group coordinator, with RequireStable, for the committed
// offsets of input partitions ids and returns those it answered UNSTABLE_OFFSET_COMMIT.
func (c *Consumer) unstablePartitions(ctx context.Context, cl *kgo.Client, ids []int32) ([]int32, error) {
	ctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
	defer cancel()
	_, errs, err := c.offsetFetch(ctx, cl, ids, true)
	if err != nil {
		return nil, err
	}
	var out []int32
	for p, err := range errs {
		if errors.Is(err, kerr.UnstableOffsetCommit) {
			out = append(out, p)
		}
	}
	return out, nil
}

// offsetsPartitions is the number of partitions of __consumer_offsets.
func offsetsPartitions(ctx context.Context, cl *kgo.Client) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("__consumer_offsets")
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == "__consumer_offsets" {
			return len(t.Partitions), kerr.ErrorForCode(t.ErrorCode)
		}
	}
	return 0, errors.New("no metadata for __consumer_offsets")
}

// groupOffsetsPartition is the __consumer_offsets partition that holds group's
// offsets among n, as Kafka places it: Utils.abs(group.hashCode()) % n, with Java's
// String.hashCode over UTF-16 code units.
func groupOffsetsPartition(group string, n int) int {
	var h int32
	for _, u := range utf16Units(group) {
		h = 31*h + int32(u)
	}
	return int(h&0x7fffffff) % n
}

// utf16Units is s as UTF-16 code units, as Java strings hold it.
func utf16Units(s string) []uint16 {
	out := make([]uint16, 0, len(s))
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xd800+(r>>10)), uint16(0xdc00+(r&0x3ff)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}
