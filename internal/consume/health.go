package consume

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// problems are the conditions an operator must fix, by a key naming what they concern:
// while any is set the consumer is not ready (Consumer.NotReady lists them), and each
// was logged as an error when it was set. A problem is cleared by whatever cures it.
type problems struct {
	mu sync.Mutex
	m  map[string]string // key -> what is wrong and what to do
}

// set records the problem under key and reports whether it is new or changed.
func (p *problems) set(key, msg string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]string)
	}
	if p.m[key] == msg {
		return false
	}
	p.m[key] = msg
	return true
}

// clear removes the problems whose key key matches, and reports whether any was set.
func (p *problems) clear(match func(key string) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.m)
	maps.DeleteFunc(p.m, func(k, _ string) bool { return match(k) })
	return len(p.m) != n
}

func (p *problems) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := slices.Sorted(maps.Keys(p.m))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.m[k]
	}
	return out
}

// keys returns the keys of the problems set, sorted.
func (p *problems) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.m))
}

func (p *problems) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m) == 0
}

// Undeliverable is what the gate does with a record that no topic accepts: not its
// output topic, not the dead-letter topic, not even stripped of its value there.
type Undeliverable int

const (
	// UndeliverableStop (the default) stops the record's partition: nothing past the
	// record is committed or routed, the consumer is not ready, and an error line
	// names the record and the broker's answer, until an operator fixes the topic's
	// configuration (or skips the record by moving the group's offset) and restarts.
	UndeliverableStop Undeliverable = iota
	// UndeliverableSkip counts and logs the record with its coordinates (it stays
	// readable in the input topic) and commits past it.
	UndeliverableSkip
)

// ParseUndeliverable reads an Undeliverable from its name: "stop" or "skip".
func ParseUndeliverable(s string) (Undeliverable, error) {
	switch s {
	case "stop":
		return UndeliverableStop, nil
	case "skip":
		return UndeliverableSkip, nil
	}
	return UndeliverableStop, fmt.Errorf("%q: want stop or skip", s)
}

func (u Undeliverable) String() string {
	if u == UndeliverableSkip {
		return "skip"
	}
	return "stop"
}

// undeliverable applies Config.OnUndeliverable to f, a record no topic accepts,
// retried in at-least-once mode (f.b is its batch).
func (c *Consumer) undeliverable(f *failed) {
	if c.cfg.OnUndeliverable == UndeliverableSkip {
		c.skipUndeliverable(f.in, f.out.Topic, f.err)
		c.ackBatch(f.b, 1) // as if acknowledged: the commit may pass it; f may be reused
		c.retryDone()
		return
	}
	f.b.givenUp.Add(1) // never acknowledged: a wait for the stopped partition leaves it out
	c.stopPartition(f.b.p, f.in, f.out.Topic, f.err)
	c.retryDone() // given up: routing and polling go on for the other partitions
}

func (c *Consumer) skipUndeliverable(in *kgo.Record, topic string, err error) {
	c.m.undeliverable.WithLabelValues("skipped").Inc()
	c.log.Error("record refused by every topic, skipped (GATE_ON_UNDELIVERABLE=skip); it stays in the input topic at its offset",
		"topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "refused_by", topic, "err", err)
}

// stopPartition stops p at in, a record no topic accepts: p is no longer fetched,
// nothing past in is committed, and the consumer is not ready until p is revoked.
func (c *Consumer) stopPartition(p *partition, in *kgo.Record, topic string, err error) {
	if !c.halt(p, fmt.Sprintf("partition %s/%d stopped at offset %d: the record is refused by every topic (last %s: %v); "+
		"fix the topics' configuration, or move the group's offset past it (or set GATE_ON_UNDELIVERABLE=skip), then restart the gate",
		in.Topic, in.Partition, in.Offset, topic, err)) {
		return
	}
	c.m.undeliverable.WithLabelValues("stopped").Inc()
	c.log.Error("record refused by every topic; partition stopped (GATE_ON_UNDELIVERABLE=stop), not ready until it is fixed",
		"topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "refused_by", topic, "err", err)
}

// halt stops partition p, once, for the reason msg: it is no longer fetched, nothing
// more of it is routed or committed (partition.stopped), and the consumer is not ready,
// saying msg, until p is revoked or lost (releaseStopped). It reports whether p was
// running.
func (c *Consumer) halt(p *partition, msg string) bool {
	if !c.park(p) {
		return false
	}
	c.sayStopped(p, msg)
	return true
}

// sayStopped makes the consumer not ready, saying msg, for stopped partition p, unless
// p was revoked or lost meanwhile: drop marks p gone under partsMu before
// releaseStopped clears the reason, so a reason set here either is cleared by it or
// is not set at all, and no revoked partition keeps the gate not ready.
func (c *Consumer) sayStopped(p *partition, msg string) {
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	if !p.gone.Load() {
		c.problems.set(stoppedKey(p.id), msg)
	}
}

// park is halt without the saying: p is no longer fetched, routed or
// committed, and the caller sets why (c.problems, stoppedKey) once what it does next
// is done, so that not ready never says more than is true yet. It reports whether p
// was running.
func (c *Consumer) park(p *partition) bool {
	// Under partsMu, as drop marks p gone: a partition revoked or lost is not paused
	// (nothing would resume it), and one paused before is resumed by releaseStopped.
	c.partsMu.Lock()
	defer c.partsMu.Unlock()
	if p.gone.Load() || p.stopped.Swap(true) {
		return false
	}
	// c.live, not c.cl: a rebuilt session's client runs its callbacks while the
	// transaction loop is still installing it.
	c.live.Load().PauseFetchPartitions(map[string][]int32{c.cfg.InputTopic: {p.id}})
	return true
}

func stoppedKey(p int32) string { return fmt.Sprintf("stopped/%06d", p) }

// releaseStopped forgets that the partitions among ids were stopped, as they are
// revoked or lost: fetching them is resumed for whenever they come back, when the
// record that stopped them stops them again unless it was fixed.
func (c *Consumer) releaseStopped(ids []int32) {
	// Every one is resumed, not only those whose reason is cleared: a partition parked
	// (paused) and then revoked before its reason was said has none, and a paused
	// partition stays paused in the client across rebalances. Resuming one that is not
	// paused does nothing.
	for _, id := range ids {
		c.problems.clear(func(k string) bool { return k == stoppedKey(id) })
	}
	if len(ids) > 0 {
		// c.live, not c.cl: a rebuilt session's client runs its callbacks while the
		// transaction loop is still installing it.
		c.live.Load().ResumeFetchPartitions(map[string][]int32{c.cfg.InputTopic: ids})
	}
}

// NotReady returns why the consumer is not ready, or nothing when it is: it has not
// joined its group yet, or a condition an operator must fix holds (see problems).
func (c *Consumer) NotReady() []string {
	c.fetchRefusalOver(false)
	ps := c.problems.list()
	if s := c.stallProblem(); s != "" {
		ps = append(ps, s)
	}
	if !c.preflighted.Load() {
		// Not consuming yet: what the preflight waits for, or that it checks (its
		// problems, when it found some, are listed already).
		if w := c.preflightWait.Load(); w != nil {
			ps = append([]string{"kafka: waiting for the cluster before consuming: " + *w}, ps...)
		} else if c.problems.empty() {
			ps = append([]string{"kafka: checking topics and permissions before consuming"}, ps...)
		}
	}
	if !c.ready.Load() {
		ps = append([]string{"kafka: not joined to consumer group " + c.cfg.GroupID + " yet"}, ps...)
	}
	return ps
}

// logProblem logs msg as an error when it is new for key.
func (c *Consumer) logProblem(ctx context.Context, key, msg string, attrs ...any) {
	if c.problems.set(key, msg) {
		c.log.Log(ctx, slog.LevelError, msg, attrs...)
	}
}
