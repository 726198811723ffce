// The input topic watched for being deleted, or deleted and created again, while the
// gate runs. Either way it is no longer the topic the client and the group's state are
// of: franz-go keeps the old topic's id and fails every fetch of it with
// UNKNOWN_TOPIC_ID (thousands a second, each a warning's count, the gate ready with no
// lag), never taking the new topic up, and the group's committed offsets went with the
// old topic. The gate stops, as a Kafka Streams application does when a source topic
// goes: its partitions dropped and its open transaction aborted first, so that nothing
// of the old topic's offsets is committed onto the new one. Started again (its pod
// restarted), its preflight waits for the topic and it reads the new one from
// GATE_KAFKA_START_OFFSET.

package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errInputDoubt is why no offset is committed while the input topic is in doubt
// (Consumer.inputDoubt).
var errInputDoubt = errors.New("the input topic's fetches fail with UNKNOWN_TOPIC_ID or UNKNOWN_TOPIC_OR_PARTITION (deleted, or deleted and created again?): " +
	"no offset is committed until the output watch has found it as it was")

// inputIdentity counts the watch rounds in a row that found the input topic missing. Its
// topic id is the one the preflight recorded with the others' (Consumer.topicIDs; a
// broker before Kafka 2.8 gives none: then only a deletion is told), so that a topic
// created again between the preflight and the first round is told too.
type inputIdentity struct {
	mu      sync.Mutex
	missing int
	gone    bool // told once: the run is ending
}

// missingRounds is how many watch rounds in a row must find the input topic missing
// before the gate takes it for deleted: one broker's answer just after a change of
// leadership may lag.
const missingRounds = 2

// InputGoneError is what Run returns when the input topic was deleted, or deleted and
// created again, while the gate ran.
type InputGoneError struct {
	Topic     string
	Recreated bool // created again (another topic id), not only deleted
}

func (e *InputGoneError) Error() string {
	what := "was deleted"
	if e.Recreated {
		what = "was deleted and created again (its topic id changed)"
	}
	return fmt.Sprintf("kafka: the input topic %q %s while the gate ran: the gate stops, to start afresh on the topic as it is now "+
		"(its client keeps the old topic's id, and the group's offsets went with the old topic); started again, it waits for the topic "+
		"and reads it from GATE_KAFKA_START_OFFSET", e.Topic, what)
}

// checkInputIdentity asks the cluster for the input topic, and stops the gate (stopRun)
// once it finds it deleted or created again. A failed request is left to the next round.
func (c *Consumer) checkInputIdentity(ctx context.Context, cl *kgo.Client) {
	resp, err := topicsMetadata(ctx, cl, []string{c.cfg.InputTopic})
	if err != nil {
		c.log.Debug("kafka: could not look at the input topic", "err", err)
		return
	}
	i := slices.IndexFunc(resp.Topics, func(t kmsg.MetadataResponseTopic) bool {
		return t.Topic != nil && *t.Topic == c.cfg.InputTopic
	})
	if i < 0 {
		return
	}
	changed := c.topicIDs.note(resp)
	w := &c.inputID
	w.mu.Lock()
	if w.gone {
		w.mu.Unlock()
		return
	}
	var gone *InputGoneError
	switch code := resp.Topics[i].ErrorCode; {
	case code == kerr.UnknownTopicOrPartition.Code:
		if w.missing++; w.missing >= missingRounds {
			gone = &InputGoneError{Topic: c.cfg.InputTopic}
		}
	case code != 0:
		w.missing = 0 // another refusal (an ACL): the preflight's and the fetches' to tell
	case slices.Contains(changed, c.cfg.InputTopic):
		gone = &InputGoneError{Topic: c.cfg.InputTopic, Recreated: true}
	default:
		w.missing = 0
		c.inputDoubt.Store(false) // the topic as it was: its fetches' errors were passing
	}
	w.gone = gone != nil
	w.mu.Unlock()
	if gone != nil {
		c.inputGone(gone)
	}
}

// inputGone stops the gate for err: every partition dropped (nothing of the old topic is
// committed, as for partitions lost) and, exactly once, the open transaction aborted.
func (c *Consumer) inputGone(err *InputGoneError) {
	c.partsMu.Lock()
	ids := make([]int32, 0, len(c.parts))
	for id := range c.parts {
		ids = append(ids, id)
	}
	c.partsMu.Unlock()
	slices.Sort(ids)
	c.drop(ids)
	c.releaseStopped(ids)
	if c.exactlyOnce() {
		c.txn.inputGone.Store(true)
		c.interruptTxn()
	}
	c.log.Error(err.Error(), "topic", err.Topic, "partitions_dropped", ids)
	if c.stopRun != nil {
		c.stopRun(err)
	}
}
