package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/route"
)

// Rule topics: a rule's own topic (action topic:NAME) is one of the gate's output topics,
// checked at start with the others (preflight), before a reload puts a rule set in use
// (CheckTopics), and every Config.WatchInterval while the gate runs. Unlike the accepted,
// overflow and dead-letter topics, one rule topic serves only the records one rule
// diverts: when it is missing or closed to the gate, waiting for it would hold up every
// team behind those records. So the topic is marked missing in Config.RuleTopics (the
// router then sends its records to the overflow topic, with the gate-rule-topic-missing
// header), the gate is not ready with the topic named, and every record goes on being
// routed. A record already produced to it and failed is produced again to overflow. The
// check that finds the topic writable again clears both.

// problemRuleTopics prefixes the problems key of a missing rule topic.
const problemRuleTopics = "ruletopics/"

// topicClosed reports a produce error that says the topic is missing or closed to the
// gate's principal.
func topicClosed(err error) bool {
	for _, e := range []error{kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.TopicAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ruleTopicGone reports whether records whose produce to topic failed with err go to
// the overflow topic when retried (retryRecord): topic is marked missing, or err is the
// failure produceProblem marks a rule topic in use missing for. The retry loop may take
// a failure up before its promise has called produceProblem, so the mark alone is late.
func (c *Consumer) ruleTopicGone(topic string, err error) bool {
	w := c.cfg.RuleTopics
	return w != nil && (w.Missing(topic) || w.Watched(topic) && topicClosed(err))
}

// ruleTopicMissing marks topic missing and the gate not ready, saying why (once per
// distinct reason).
func (c *Consumer) ruleTopicMissing(ctx context.Context, topic, why string) {
	c.cfg.RuleTopics.SetMissing(topic, true)
	c.logProblem(ctx, problemRuleTopics+topic,
		fmt.Sprintf("kafka: rule topic %q: %s; its rule's records go to the overflow topic (header %s) until the topic exists and the gate's principal may WRITE to it; every other record is routed as ever",
			topic, why, route.HeaderRuleTopicMissing), "topic", topic)
}

// slowFlush is how long an exactly-once transaction's records may take to be
// acknowledged before the rule topics are checked out of the watch's schedule
// (checkRuleTopicsSoon): a flush takes some milliseconds, and one that takes a second
// may wait on a rule topic deleted under it.
const slowFlush = time.Second

// checkRuleTopicsSoon has the output watch check the rule topics now, not at its next
// round (up to WatchInterval, 5 s, away): an exactly-once transaction whose records wait
// on a rule topic deleted under it holds every team's records with them until the topic
// is found missing (ruleTopicMissing), which fails its records at once; the client's own
// retries took some 10 s on Apache Kafka 4.3. A check already asked for is not asked
// again.
func (c *Consumer) checkRuleTopicsSoon() {
	if w := c.cfg.RuleTopics; w == nil || len(w.Topics()) == 0 {
		return
	}
	select {
	case c.checkRules <- struct{}{}:
	default:
	}
}

// checkRuleTopics checks every rule topic in use: one found missing or closed is marked
// so, one found writable again is marked back. Problems of topics no rule uses any more
// are cleared.
func (c *Consumer) checkRuleTopics(ctx context.Context, cl *kgo.Client) {
	w := c.cfg.RuleTopics
	if w == nil {
		return
	}
	topics := w.Topics()
	inUse := func(k string) bool {
		t, ok := strings.CutPrefix(k, problemRuleTopics)
		return !ok || w.Watched(t)
	}
	var gone []string // the topics of the problems cleared, named in the line
	if c.problems.clear(func(k string) bool {
		if inUse(k) {
			return false
		}
		gone = append(gone, strings.TrimPrefix(k, problemRuleTopics))
		return true
	}) {
		slices.Sort(gone)
		c.log.Info("kafka: a rule topic that was missing is no longer used by the rules in use", "topics", gone)
	}
	if len(topics) == 0 {
		return
	}
	found, unasked, changed, err := c.topicProblems(ctx, cl, topics)
	if err != nil {
		c.log.Debug("kafka: could not check the rule topics", "err", err)
		return
	}
	for _, t := range topics {
		if unasked[t] {
			continue // no answer on it this time: marked as it was
		}
		if !w.Watched(t) {
			// A reload dropped its rules while this check asked: no rule sends to it, no
			// reason to name (a review: named, with an error line, until the next check).
			// Records the old rules sent there go to the fallback (RetiredGone) as a
			// failed produce finds it gone.
			continue
		}
		if p := found[t]; p != "" {
			// The problem names the topic as the start-up check does; the line names it once.
			c.ruleTopicMissing(ctx, t, strings.TrimLeft(strings.TrimPrefix(p, fmt.Sprintf("topic %q", t)), ": "))
			if c.stillMissing(ctx, cl, t) {
				// The records of it the client holds would wait out its retries, and with
				// exactly-once delivery the transaction holding them with every other
				// team's records (some 10 s on Apache Kafka 4.3, the topic deleted under
				// load). Failed at once, they go to overflow as the router sends the
				// rule's records now: retried (retryRecord), or routed again after the
				// abort. At every check that finds it missing, not only the one that marks
				// it: a failed produce may have marked it (produceProblem) with others
				// of it still held. Here, not in produceProblem: that runs in a promise,
				// which a purge, failing promises, must not be called from.
				c.purgeProducing(cl, t)
			}
			continue
		}
		if w.Missing(t) || slices.Contains(changed, t) {
			// Deleted and created again between two checks, it was never marked missing
			// and the client kept the old ID, its rule's next record failing (a review).
			// franz-go keeps a topic's ID for as long as it holds the topic, and fails
			// every produce to one deleted and created again with UNKNOWN_TOPIC_ID until
			// it is purged: forget it before its records go to it again, so that the
			// client learns the topic anew (records of it still buffered fail, and go to
			// overflow, as it is still marked missing).
			rctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
			c.relearnTopic(rctx, cl, t)
			cancel()
		}
		back := w.SetMissing(t, false)
		if c.problems.clear(func(k string) bool { return k == problemRuleTopics+t }) || back {
			c.log.Info("kafka: rule topic takes writes again; its rule's records go to it again", "topic", t)
		}
	}
}

// stillMissing asks the cluster about rule topic t again, one answer having said it is
// missing or closed, and reports whether it says so again: a purge of t (which, exactly
// once, aborts the transaction holding its records, every team's) is not made on one
// broker's answer alone, which may lag (a topic just created).
func (c *Consumer) stillMissing(ctx context.Context, cl *kgo.Client, t string) bool {
	ctx, cancel := context.WithTimeout(ctx, watchRequestTimeout)
	defer cancel()
	found, unasked, _, err := c.topicProblems(ctx, cl, []string{t})
	return err == nil && !unasked[t] && found[t] != ""
}

// ErrUnasked is wrapped by a CheckTopics error that says the cluster could not be asked
// about a topic (no answer in time, a broker unreachable, an answer Kafka calls
// retriable), not that the topic is missing or closed to the gate.
var ErrUnasked = errors.New("kafka could not be asked")

// TopicError is one topic's problem, as CheckTopics finds it: its error joins one a
// topic that fails, so that a caller can say which of its rules name it.
type TopicError struct {
	Topic string
	// Kind is what the problem is, in words that stay while it does ("missing", "write
	// refused", "compacted"; else Kafka's error code): the reloader says a refused edit
	// again when its problem changes kind, not when its words do.
	Kind    string
	Problem string // names the topic, and what to do
}

func (e *TopicError) Error() string { return e.Problem }

// CheckTopics checks that each of topics exists and that the gate may write to it, as
// preflight checks the gate's own topics: a rules reload naming a topic that fails is
// refused (internal/gate). Topics that pass get their batch limits read, as the
// preflight reads the gate's own (readOutputSettings), a change of a known one said. The
// error joins a *TopicError for every topic that fails, naming it and what to do; when
// none is known to fail but the cluster could not be asked about some, it wraps
// ErrUnasked instead.
func (c *Consumer) CheckTopics(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	cl := c.live.Load()
	if cl == nil {
		cl = c.cl
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := topicsMetadata(ctx, cl, topics)
	if err != nil {
		return fmt.Errorf("checking the rule topics %s: %w: metadata: %w", strings.Join(topics, ", "), ErrUnasked, err)
	}
	var errs, unasked []error
	for _, t := range topics {
		switch kind, p := topicProblemKind(resp, t, opWrite); {
		case p == "":
		case topicUnanswered(resp, t):
			unasked = append(unasked, errors.New(p))
		default:
			errs = append(errs, &TopicError{Topic: t, Kind: kind, Problem: p})
		}
	}
	if len(errs) == 0 && len(unasked) > 0 {
		return fmt.Errorf("checking the rule topics: %w: %w", ErrUnasked, errors.Join(unasked...))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, t := range c.topicIDs.note(resp) {
		// Deleted and created again since the gate last saw it: the client may hold the
		// old topic's ID, failing every produce to it with UNKNOWN_TOPIC_ID once the
		// reload puts it in use (the gate not ready, its rule's records to overflow). A
		// topic in use too: this answer took the change the watch's next check would
		// have learned it anew by (checkRuleTopics).
		c.relearnTopic(ctx, cl, t)
	}
	// Each topic's batch limit, before its rule is put in use: a topic the preflight did
	// not know (a rule the reload adds) would otherwise get batches up to
	// GATE_KAFKA_MAX_MESSAGE_BYTES, every one over its own max.message.bytes refused.
	// A known one's change is said here, as rereadBatchLimits says it (the client keeps
	// the limit it took until the gate restarts): merged here unsaid, at any edit of the
	// rules file, it was never said, the periodic read finding nothing changed.
	known := slices.DeleteFunc(slices.Clone(topics), func(t string) bool {
		_, ok := c.batchLimits.get(t)
		return !ok
	})
	before := c.batchLimitsOf(known)
	// With cleanup.policy in the same request: when the rules' records have no key, a
	// compacted topic refuses every one (readOutputSettings); when they keep it, one is
	// warned of as at start (compactedWarnings), where a reload said nothing.
	names := []string{"max.message.bytes", "cleanup.policy"}
	var settings map[string]map[string]string
	if ask := slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return t == c.cfg.OutcomesTopic }); len(ask) > 0 {
		var readErrs map[string]error
		settings, readErrs, err = topicSettings(ctx, cl, ask, names...)
		c.mergeBatchLimits(intSetting(settings, "max.message.bytes"), readErrs, err)
	}
	c.sayBatchLimitChanges(known, before)
	for _, t := range topics {
		policy := settings[t]["cleanup.policy"]
		switch {
		case !compacted(policy):
		case c.rulesKeyless():
			errs = append(errs, &TopicError{Topic: t, Kind: "compacted", Problem: compactedProblem(t, policy)})
		case t != c.cfg.DeadLetterTopic: // the dead-letter topic has the preflight's warning of its own
			c.warnCompactedKept(t, policy)
		}
	}
	return errors.Join(errs...)
}

// topicIDs are topics' IDs as metadata answers gave them, safe for concurrent use: a
// topic whose ID changed was deleted and created again.
type topicIDs struct {
	mu sync.Mutex
	m  map[string][16]byte
}

// note records the ID resp gives each topic it knows (none for a broker too old to give
// IDs), and returns the topics whose ID it had recorded and that changed.
func (ids *topicIDs) note(resp *kmsg.MetadataResponse) (changed []string) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for _, rt := range resp.Topics {
		if rt.Topic == nil || rt.ErrorCode != 0 || rt.TopicID == ([16]byte{}) {
			continue
		}
		if old, ok := ids.m[*rt.Topic]; ok && old != rt.TopicID {
			changed = append(changed, *rt.Topic)
		}
		if ids.m == nil {
			ids.m = map[string][16]byte{}
		}
		ids.m[*rt.Topic] = rt.TopicID
	}
	return changed
}

// topicUnanswered reports that the metadata answer resp says nothing of topic t's
// existence or permissions: t is left out of it, or its error is one Kafka calls
// retriable (a leader being elected) other than the topic being unknown.
func topicUnanswered(resp *kmsg.MetadataResponse, t string) bool {
	i := slices.IndexFunc(resp.Topics, func(rt kmsg.MetadataResponseTopic) bool { return rt.Topic != nil && *rt.Topic == t })
	if i < 0 {
		return true
	}
	err := kerr.ErrorForCode(resp.Topics[i].ErrorCode)
	return kerr.IsRetriable(err) && !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.UnknownTopicID)
}

// topicProblems asks the cluster about topics (to be written): what keeps the gate from
// writing each, by topic; none for a topic it may write. A topic the answer says nothing
// definite of (topicUnanswered: left out, or an error Kafka calls retriable, as while a
// leader is elected) is in unasked, not found: the callers leave its state as it was,
// rather than take a broker's passing answer for a missing topic. changed are the topics
// whose ID the answer says is not the one the gate saw last (deleted and created again).
func (c *Consumer) topicProblems(ctx context.Context, cl *kgo.Client, topics []string) (found map[string]string, unasked map[string]bool, changed []string, err error) {
	resp, err := topicsMetadata(ctx, cl, topics)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metadata: %w", err)
	}
	changed = c.topicIDs.note(resp)
	found, unasked = map[string]string{}, map[string]bool{}
	for _, t := range topics {
		if p := topicProblem(resp, t, opWrite); p != "" {
			if topicUnanswered(resp, t) {
				unasked[t] = true
				continue
			}
			found[t] = p
		}
	}
	return found, unasked, changed, nil
}
