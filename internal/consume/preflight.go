package consume

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/throttle"
)

// Preflight: before the loop starts, the gate checks that the topics it reads and
// writes exist and that it may read and write them, as a real cluster (auto-creation
// off, ACLs on) requires. A missing topic or permission otherwise shows only as
// produces retried for ever. Until every check passes the consumer is not ready, checks
// again every Config.PreflightInterval, and logs one error line naming each problem when
// they change, repeated at most once per preflightLogEvery while they stay the same.

// DefaultPreflightInterval is how often a failing preflight is retried.
const DefaultPreflightInterval = 5 * time.Second

// Kafka's ACL operations, as bits of an AuthorizedOperations field (KIP-430).
const (
	opRead     = 1 << kmsg.ACLOperationRead
	opWrite    = 1 << kmsg.ACLOperationWrite
	opDescribe = 1 << kmsg.ACLOperationDescribe
	// opsUnknown is the field's value when the broker did not say (it predates
	// KIP-430 or was not asked).
	opsUnknown = math.MinInt32
)

// transientGrace is how long a preflight answer that Kafka calls retriable (a group
// coordinator not yet available, as on a new cluster while it creates
// __consumer_offsets, or loading after a broker restart) is retried quietly, every
// transientRetry, before it is reported as a problem like any other.
const (
	transientGrace = 30 * time.Second
	transientRetry = 250 * time.Millisecond
)

// preflightLogEvery is how often, at most, a failing preflight repeats its error line
// while what it finds stays the same: a topic created the next morning must not log an
// error every PreflightInterval through the night.
const preflightLogEvery = time.Minute

// awaitPreflight runs preflight until it passes or ctx ends (ctx's error).
func (c *Consumer) awaitPreflight(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var transientSince time.Time
	logs := throttle.NewEvery(preflightLogEvery, nil) // wall time: it paces a log
	logged := ""                                      // the problems last logged
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		found, transient, err := c.preflight(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p := saslProblem(err); p != "" {
			found = append(found, p) // not a topic's or a permission's: the login's
		} else if p := tlsProblem(err); p != "" {
			found = append(found, p) // the handshake's
		} else if p := c.plainListener(ctx, err); p != "" {
			found = append(found, p) // TLS to a listener without it
		} else if err != nil {
			found = append(found, "checking topics and permissions: "+err.Error())
		}
		if len(found) == 0 && len(transient) == 0 {
			if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, "preflight/") }) || attempt > 1 {
				c.log.Info("preflight passed: topics exist and permissions suffice", "attempts", attempt)
			}
			c.preflightWait.Store(nil)
			c.preflighted.Store(true)
			c.join()
			c.logGroupProtocol(ctx)
			return nil
		}
		if len(found) == 0 {
			// Only answers that a retry cures: retried quietly for a while. The problems
			// an earlier check found are fixed: no longer said (a review: /readyz named a
			// topic created since until the wait was over).
			wait := strings.Join(transient, "; ")
			c.preflightWait.Store(&wait)
			if c.problems.clear(func(k string) bool { return strings.HasPrefix(k, "preflight/") }) {
				logged = ""
			}
			if transientSince.IsZero() {
				transientSince = time.Now()
				c.log.Info("kafka: waiting for the cluster before consuming", "waiting_for", strings.Join(transient, "; "))
			}
			if time.Since(transientSince) < transientGrace {
				t.Reset(transientRetry)
				continue
			}
		}
		found = append(found, transient...)
		c.preflightWait.Store(nil) // a problem now, listed as one
		c.problems.clear(func(k string) bool { return strings.HasPrefix(k, "preflight/") })
		for i, p := range found {
			c.problems.set(fmt.Sprintf("preflight/%03d", i), p)
		}
		if all := strings.Join(found, "; "); all != logged {
			logged = all
			logs.Reset() // other problems: said at once
		}
		if ok, unlogged := logs.Allow(); ok {
			c.log.Error("kafka: the gate cannot start consuming until an operator fixes this; not ready",
				"problems", logged, "retry_in", c.cfg.PreflightInterval.String(), "checks_unlogged", unlogged)
		}
		t.Reset(c.cfg.PreflightInterval)
	}
}

// join has the client consume the input topic, which makes it join the group: only once
// the preflight has passed (Config.clientOpts), so that a gate that cannot route takes
// no partition from those that can.
func (c *Consumer) join() { c.cl.AddConsumeTopics(c.cfg.InputTopic) }

// preflight returns what stops the gate from working: topics missing, permissions
// lacking (found), and answers that a retry cures (transient: a group coordinator not
// available yet). The error is for a check that could not be made at all.
func (c *Consumer) preflight(ctx context.Context) (found, transient []string, err error) {
	topics := append([]string{c.cfg.InputTopic}, c.cfg.OutputTopics...)
	if w := c.cfg.RuleTopics; w != nil {
		// The rule topics are those of the rules in use now: a reload while the
		// preflight waits may have removed a rule (its topic is left out, once: it may
		// be one of the gate's own topics too) or added one.
		for _, t := range c.startRuleTopics {
			if i := slices.Index(topics[1:], t); i >= 0 && !w.Watched(t) {
				topics = slices.Delete(topics, i+1, i+2)
			}
		}
		for _, t := range w.Topics() {
			if !slices.Contains(c.startRuleTopics, t) {
				topics = append(topics, t)
			}
		}
	}
	slices.Sort(topics[1:])
	topics = slices.Compact(topics)

	resp, err := topicsMetadata(ctx, c.cl, topics)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	c.sawInput(partitionCount(resp, c.cfg.InputTopic)) // partitions added later are new to the group (added.go)
	c.topicIDs.note(resp)
	for _, t := range topics {
		want := int32(opWrite)
		if t == c.cfg.InputTopic {
			want = opRead
		}
		if p := topicProblem(resp, t, want); p != "" {
			if at := c.ruleTopicAt(t); at != "" {
				p += " (the topic of " + at + ")"
			}
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		// Before the first produce, which fixes a partition's batch limit in the client.
		found = append(found, c.readOutputSettings(ctx, topics[1:])...)
	}

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{c.cfg.GroupID}
	dg.IncludeAuthorizedOperations = true
	gresp, err := dg.RequestWith(ctx, c.cl)
	if kerr.IsRetriable(err) {
		// franz-go sends the request to the group's coordinator, and reports the
		// lookup's retriable answer (COORDINATOR_NOT_AVAILABLE) as the error.
		return found, []string{fmt.Sprintf("consumer group %q: %v", c.cfg.GroupID, err)}, nil
	}
	if err != nil {
		return found, nil, fmt.Errorf("describing group %q: %w", c.cfg.GroupID, err)
	}
	// groupAnswer reads one group's answer to DescribeGroups or ConsumerGroupDescribe,
	// and reports whether the group was not found.
	groupAnswer := func(code int16, ops int32) (notFound bool) {
		switch err := kerr.ErrorForCode(code); {
		case errors.Is(err, kerr.GroupIDNotFound):
			// A new group (newer brokers say so; older ones describe it as Dead): the
			// first join creates it.
			return true
		case kerr.IsRetriable(err):
			transient = append(transient, fmt.Sprintf("consumer group %q: %v", c.cfg.GroupID, err))
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			found = append(found, fmt.Sprintf("consumer group %q: not authorized: grant the READ ACL on the group to the gate's principal", c.cfg.GroupID))
		case err != nil:
			found = append(found, fmt.Sprintf("consumer group %q: %v", c.cfg.GroupID, err))
		case ops != opsUnknown && ops&opRead == 0:
			found = append(found, fmt.Sprintf("consumer group %q: no permission to join it: grant the READ ACL on the group to the gate's principal", c.cfg.GroupID))
		}
		return false
	}
	notFound := false
	for _, g := range gresp.Groups {
		notFound = groupAnswer(g.ErrorCode, g.AuthorizedOperations) || notFound
	}
	if notFound && c.cfg.GroupProtocol == GroupConsumer {
		// DescribeGroups describes classic groups only: Kafka 4 answers GROUP_ID_NOT_FOUND
		// ("is not a classic group") for a KIP-848 one, whose permissions only
		// ConsumerGroupDescribe tells. A broker without it (classic only), or with KIP-848
		// off (Kafka 4 answers UNSUPPORTED_VERSION then), has no such group: nothing more
		// to check. Taken for a problem, that answer kept a new group's first gates from
		// consuming until franz-go's classic join had created the group.
		cg := kmsg.NewPtrConsumerGroupDescribeRequest()
		cg.Groups = []string{c.cfg.GroupID}
		cg.IncludeAuthorizedOperations = true
		if cresp, err := cg.RequestWith(ctx, c.cl); err == nil {
			for _, g := range cresp.Groups {
				if g.ErrorCode != kerr.UnsupportedVersion.Code {
					groupAnswer(g.ErrorCode, g.AuthorizedOperations)
				}
			}
		} else if kerr.IsRetriable(err) {
			transient = append(transient, fmt.Sprintf("consumer group %q: %v", c.cfg.GroupID, err))
		}
	}

	if c.exactlyOnce() {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType = 1 // transaction
		fc.CoordinatorKeys = []string{c.cfg.TransactionalID}
		fc.CoordinatorKey = c.cfg.TransactionalID
		fresp, err := fc.RequestWith(ctx, c.cl)
		if kerr.IsRetriable(err) {
			return found, append(transient, fmt.Sprintf("transactional id %q: %v", c.cfg.TransactionalID, err)), nil
		}
		if err != nil {
			return found, transient, fmt.Errorf("finding the coordinator of transactional id %q: %w", c.cfg.TransactionalID, err)
		}
		code := fresp.ErrorCode
		for _, co := range fresp.Coordinators {
			code = max(code, co.ErrorCode)
		}
		switch err := kerr.ErrorForCode(code); {
		case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
			found = append(found, fmt.Sprintf("transactional id %q: not authorized: grant the WRITE and DESCRIBE ACLs on it to the gate's principal", c.cfg.TransactionalID))
		case kerr.IsRetriable(err):
			// The lookup's answer is in the response (franz-go returns no error): a
			// transaction coordinator not available (__transaction_state loading after a
			// broker restart, or not yet created) cannot begin the first transaction, and
			// the gate passed as ready with records no transaction could take.
			transient = append(transient, fmt.Sprintf("transactional id %q: %v", c.cfg.TransactionalID, err))
		}
		if len(resp.Brokers) > 0 {
			if p := c.transactionTimeoutProblem(ctx, resp.Brokers[0].NodeID); p != "" {
				found = append(found, p)
			}
		}
	}
	return found, transient, nil
}

// readOutputSettings reads the max.message.bytes and cleanup.policy of topics (the
// output and rule topics, not the outcomes topic: readBatchLimits) and of the dead-letter
// topic in one request: it takes the batch limits, warns of the compacted topics the gate
// keeps keys on (compactedWarnings), and returns a problem for each compacted one it
// writes records without a key to. Kafka refuses every such record (INVALID_RECORD,
// "Compacted topic cannot accept message without key"). Unchecked, the gate started
// ready and sent every overflow record to the dead-letter topic, retried alone then
// dead-lettered alone, two round trips a record, with no line said. A topic the gate may
// not describe (DESCRIBE_CONFIGS) is not checked.
func (c *Consumer) readOutputSettings(ctx context.Context, topics []string) []string {
	ask := slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return t == c.cfg.OutcomesTopic })
	if dlt := c.cfg.DeadLetterTopic; dlt != "" && !slices.Contains(ask, dlt) {
		ask = append(ask, dlt)
	}
	if len(ask) == 0 {
		return nil
	}
	settings, errs, err := topicSettings(ctx, c.cl, ask, "max.message.bytes", "cleanup.policy")
	c.mergeBatchLimits(intSetting(settings, "max.message.bytes"), errs, err)
	if err != nil {
		return nil
	}
	var found []string
	for _, t := range ask {
		if policy := settings[t]["cleanup.policy"]; c.keyless(t) && compacted(policy) {
			found = append(found, compactedProblem(t, policy))
		}
	}
	c.compactedWarnings(settings)
	return found
}

// keyless reports that the gate writes records without a key to topic t
// (readOutputSettings).
func (c *Consumer) keyless(t string) bool {
	return slices.Contains(c.cfg.KeylessTopics, t) || c.rulesKeyless() && c.cfg.RuleTopics.Watched(t)
}

// rulesKeyless reports that the rules' own topics get records without a key: the
// router drops it from theirs as from overflow ones.
func (c *Consumer) rulesKeyless() bool {
	w := c.cfg.RuleTopics
	return w != nil && slices.Contains(c.cfg.KeylessTopics, w.Fallback())
}

// compacted reports that a topic of cleanup.policy policy is compacted (compact, or
// compact,delete).
func compacted(policy string) bool {
	return slices.ContainsFunc(strings.Split(policy, ","), func(p string) bool { return strings.TrimSpace(p) == "compact" })
}

// compactedProblem is the problem of topic, compacted (cleanup.policy policy), that the
// gate writes records without a key to.
func compactedProblem(topic, policy string) string {
	return fmt.Sprintf("topic %q: cleanup.policy=%s: the brokers refuse every record without a key to it (INVALID_RECORD), "+
		"and the gate writes its overflow and rule-topic records without one (GATE_OVERFLOW_KEEP_KEY=false), so each would go to the dead-letter topic: "+
		"set cleanup.policy=delete on the topic (or GATE_OVERFLOW_KEEP_KEY=true, if every input record has a key)", topic, policy)
}

// compactedWarnings warns, once a run, of each topic of settings (the output and rule
// topics' and the dead-letter topic's, readOutputSettings) that is compacted while the
// gate keeps the record key on it. Such a topic refuses a record without a key
// (INVALID_RECORD), and keeps only the last record of each key, a null value deleting
// the others. An input record without a key, kept so, is refused: to the accepted or a
// kept-key overflow topic it goes to dead letter; to the dead-letter topic, refused by
// every topic, its partition then stops. Warnings, not refusals: input records that all
// have keys are taken, and a gate that ran so must still start. The topics written
// without keys are problems of their own (readOutputSettings).
func (c *Consumer) compactedWarnings(settings map[string]map[string]string) {
	if !c.compactedWarned.CompareAndSwap(false, true) {
		return
	}
	for _, t := range slices.Sorted(maps.Keys(settings)) {
		policy := settings[t]["cleanup.policy"]
		switch {
		case !compacted(policy) || t == c.cfg.OutcomesTopic || c.keyless(t):
		case t == c.cfg.DeadLetterTopic:
			c.log.Warn("kafka: the dead-letter topic is compacted: it refuses a dead letter without a key (its input partition then stops, "+
				"the record refused by every topic) and keeps only the last dead letter of each key; set cleanup.policy=delete on it",
				"topic", t, "cleanup.policy", policy)
		default:
			c.warnCompactedKept(t, policy)
		}
	}
}

// compactedKept is the set of topics warnCompactedKept warned of, safe for concurrent
// use: the preflight's and a rules reload's checks (CheckTopics) each add to it.
type compactedKept struct {
	mu   sync.Mutex
	said map[string]bool
}

// warnCompactedKept warns, once a topic, that topic t, an output or rule topic the gate
// keeps the record key on, is compacted (cleanup.policy policy): see compactedWarnings.
func (c *Consumer) warnCompactedKept(t, policy string) {
	k := &c.compactedKept
	k.mu.Lock()
	said := k.said[t]
	if k.said == nil {
		k.said = map[string]bool{}
	}
	k.said[t] = true
	k.mu.Unlock()
	if said {
		return
	}
	c.log.Warn("kafka: an output topic is compacted: the gate keeps the record key on it, so it refuses an input record without a key "+
		"(INVALID_RECORD: the record goes to the dead-letter topic) and keeps only the last record of each key; "+
		"set cleanup.policy=delete on it unless every input record has a key and only the last of each is wanted",
		"topic", t, "cleanup.policy", policy)
}

// problemCompacted prefixes the problems key of a topic, written without keys, found
// compacted while the gate runs (checkCompacted).
const problemCompacted = "compacted/"

// checkCompacted marks the gate not ready, naming the topic as the preflight does, for
// each topic of settings (read again every Config.TopicConfigInterval, with the batch
// limits: rereadBatchLimits) the gate writes without keys that is compacted: made so
// while the gate runs, it refuses every such record, and each would go to the dead-letter
// topic. The problem clears when the topic is read not compacted, or no longer written
// without keys. A topic not described this time is left as it was.
func (c *Consumer) checkCompacted(ctx context.Context, settings map[string]map[string]string) {
	if c.problems.clear(func(k string) bool {
		t, ok := strings.CutPrefix(k, problemCompacted)
		if !ok {
			return false
		}
		s, read := settings[t]
		return read && !compacted(s["cleanup.policy"]) || !c.keyless(t)
	}) {
		c.log.Info("kafka: an output topic found compacted is no longer, or no longer written without keys")
	}
	// Topics not described this time are left as they were, as their problems are.
	var refuses []keylessRefusal
	if prev := c.refusesKeyless.Load(); prev != nil {
		for _, r := range *prev {
			if _, read := settings[r.topic]; !read && c.keyless(r.topic) {
				refuses = append(refuses, r)
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(settings)) {
		if !c.keyless(t) {
			continue
		}
		if policy := settings[t]["cleanup.policy"]; compacted(policy) {
			c.logProblem(ctx, problemCompacted+t, "kafka: "+compactedProblem(t, policy)+"; the gate is not ready until it is", "topic", t)
			refuses = append(refuses, keylessRefusal{topic: t, err: &compactedRefusal{policy: policy}})
		}
	}
	if len(refuses) == 0 {
		c.refusesKeyless.Store(nil)
	} else {
		c.refusesKeyless.Store(&refuses)
	}
}

// keylessRefusal is a topic that refuses every record without a key, and the error a
// dead letter of such a record names (checkCompacted).
type keylessRefusal struct {
	topic string
	err   error
}

// compactedRefusal is the error of a record without a key to a compacted topic, which
// the gate did not send: Kafka's INVALID_RECORD, which it would have answered, with why.
type compactedRefusal struct{ policy string }

func (e *compactedRefusal) Error() string {
	return fmt.Sprintf("%v (not sent: the topic is compacted, cleanup.policy=%s, and the record has no key)", kerr.InvalidRecord, e.policy)
}

func (e *compactedRefusal) Unwrap() error { return kerr.InvalidRecord }

// knownRefusal returns the error topic is known to refuse a record without a key with
// (refusesKeyless), nil when none. Asked of keyless records only: an atomic load when
// no topic is compacted, else a scan of the few that are.
func (c *Consumer) knownRefusal(topic string) error {
	rs := c.refusesKeyless.Load()
	if rs == nil {
		return nil
	}
	for _, r := range *rs {
		if r.topic == topic {
			return r.err
		}
	}
	return nil
}

// topicsMetadata asks the brokers of cl about topics, with the gate's permissions on
// each (KIP-430), never asking them to create one: a check must not make what it checks.
func topicsMetadata(ctx context.Context, cl *kgo.Client, topics []string) (*kmsg.MetadataResponse, error) {
	meta := kmsg.NewPtrMetadataRequest()
	meta.AllowAutoTopicCreation = false
	meta.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, rt)
	}
	return meta.RequestWith(ctx, cl)
}

// topicProblem is what keeps the gate from reading (want opRead) or writing (opWrite)
// topic t, as the broker's metadata answer resp says: "" when nothing does.
func topicProblem(resp *kmsg.MetadataResponse, t string, want int32) string {
	_, p := topicProblemKind(resp, t, want)
	return p
}

// topicProblemKind is topicProblem with the kind of the problem (TopicError.Kind): ""
// when there is none.
func topicProblemKind(resp *kmsg.MetadataResponse, t string, want int32) (kind, problem string) {
	verb := "write to output"
	if want == opRead {
		verb = "read input"
	}
	op := strings.Fields(verb)[0]
	i := slices.IndexFunc(resp.Topics, func(rt kmsg.MetadataResponseTopic) bool { return rt.Topic != nil && *rt.Topic == t })
	if i < 0 {
		return "unanswered", fmt.Sprintf("topic %q: not in the broker's metadata answer", t)
	}
	rt := resp.Topics[i]
	switch err := kerr.ErrorForCode(rt.ErrorCode); {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return "missing", fmt.Sprintf("topic %q does not exist: create it (the gate does not)", t)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return "describe refused", fmt.Sprintf("topic %q: not authorized to describe it: grant DESCRIBE and %s ACLs to the gate's principal", t, strings.ToUpper(op))
	case err != nil:
		kind := err.Error()
		if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
			kind = ke.Message // the code's name, not its description
		}
		return kind, fmt.Sprintf("topic %q: %v", t, err)
	case rt.AuthorizedOperations != opsUnknown && rt.AuthorizedOperations&want == 0:
		return op + " refused", fmt.Sprintf("topic %q: no permission to %s it: grant the %s ACL on it to the gate's principal", t, op, strings.ToUpper(op))
	}
	return "", ""
}

// transactionTimeoutProblem compares Config.TransactionTimeout with broker's
// transaction.max.timeout.ms: a broker refuses to start transactions with a longer
// timeout (InitProducerId answers INVALID_TRANSACTION_TIMEOUT), so the gate could route
// nothing. Reading a broker's configuration needs DESCRIBE_CONFIGS on the cluster,
// which a gate's principal may lack: then the check is skipped, and the refusal is
// reported when it comes (produceProblem).
func (c *Consumer) transactionTimeoutProblem(ctx context.Context, broker int32) string {
	if max, ok := c.brokerTxnMax(ctx, broker); ok && c.cfg.TransactionTimeout > max {
		return transactionTimeoutMessage(c.cfg.TransactionTimeout, durtext.String(max))
	}
	return ""
}

// brokerTxnMax reads broker's transaction.max.timeout.ms; ok is false when it cannot
// (no DESCRIBE_CONFIGS on the cluster, say).
func (c *Consumer) brokerTxnMax(ctx context.Context, broker int32) (max time.Duration, ok bool) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	res.ResourceName = strconv.Itoa(int(broker))
	res.ConfigNames = []string{"transaction.max.timeout.ms"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		c.log.Debug("kafka: could not read the brokers' transaction.max.timeout.ms", "err", err)
		return 0, false
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			c.log.Debug("kafka: could not read the brokers' transaction.max.timeout.ms", "err", err)
			return 0, false
		}
		for _, cfg := range r.Configs {
			if cfg.Name != "transaction.max.timeout.ms" || cfg.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*cfg.Value, 10, 64)
			if err != nil {
				return 0, false
			}
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	return 0, false
}

// transactionTimeoutMessage says that the gate's transaction timeout is above the
// brokers' maximum (brokerMax, or "unknown").
func transactionTimeoutMessage(gate time.Duration, brokerMax string) string {
	return fmt.Sprintf("GATE_TRANSACTION_TIMEOUT (%s) is above the brokers' transaction.max.timeout.ms (%s): they refuse every transaction; "+
		"lower GATE_TRANSACTION_TIMEOUT or raise transaction.max.timeout.ms", durtext.String(gate), brokerMax)
}

// produceProblem marks the gate not ready when a produce failed for a reason only an
// operator can fix (a topic deleted, an ACL revoked after start, a broker's policy
// refusing the writes); the retries go on, and the next record acknowledged on the
// topic clears it, or at least once the failed records given up (produceSettled).
func (c *Consumer) produceProblem(topic string, err error) {
	if w := c.cfg.RuleTopics; w != nil && w.Watched(topic) && topicClosed(err) {
		// A rule's own topic: its records go to overflow meanwhile (ruletopics.go).
		c.ruleTopicMissing(context.Background(), topic, fmt.Sprintf("producing to it fails with %v", err))
		return
	}
	if w := c.cfg.RuleTopics; w != nil && topicClosed(err) && !w.Watched(topic) {
		// No rule in use sends there any more (deleted with its rules): the old rules'
		// records in flight go to overflow (retryRecord: it is marked missing), and
		// nothing the operator must fix is left. Said once a retirement.
		if w.RetiredGone(topic) {
			c.log.Warn("kafka: producing to a rule topic no rule in use sends to fails; the records the old rules sent there go to the overflow topic",
				"topic", topic, "err", err)
		}
		if w.Missing(topic) {
			return
		}
	}
	// The problem is recorded before produceBlocked is set: produceRecovered's check
	// after its store of false then sees it, or this store comes after that one.
	if errors.Is(err, kerr.InvalidTransactionTimeout) {
		c.logProblem(context.Background(), problemTxnTimeout,
			"kafka: "+transactionTimeoutMessage(c.cfg.TransactionTimeout, "unknown: the gate may not read it")+
				"; records are retried, nothing is committed past them", "err", err)
		c.produceBlocked.Store(true)
		return
	}
	for _, e := range []error{kerr.TopicAuthorizationFailed, kerr.UnknownTopicOrPartition, kerr.UnknownTopicID,
		kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed, kerr.PolicyViolation} {
		if errors.Is(err, e) {
			if e == kerr.UnknownTopicID {
				// Maybe deleted and created again: the client keeps the old ID until
				// the topic is purged from it (purgeStale).
				c.stale.add(topic)
			}
			key := "produce/" + topic
			if e == kerr.ClusterAuthorizationFailed {
				// The producer's, not the topic's: franz-go keeps the refusal of its id
				// for as long as the client lives, so every produce fails until an
				// acknowledgement (produceRecovered) or a restart, whatever the records
				// given up meanwhile (produceSettled clears topics' problems only).
				key = problemProducerID
			}
			c.logProblem(context.Background(), key,
				fmt.Sprintf("kafka: producing to topic %q fails with %v: %s; records are retried, nothing is committed past them", topic, err, c.produceAdvice(err)),
				"topic", topic)
			c.produceBlocked.Store(true)
			return
		}
	}
}

// problemProducerID keys the brokers' refusal of the producer's id
// (CLUSTER_AUTHORIZATION_FAILED), a produce problem of no one topic.
const problemProducerID = "producer-id"

// produceAdvice is what the operator must do about err, a produce refusal only they can
// fix (produceProblem).
func (c *Consumer) produceAdvice(err error) string {
	switch {
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		// The broker refused the producer its id (InitProducerID): franz-go keeps a
		// refusal that is not retriable for as long as the client lives.
		return "grant the gate's principal the IDEMPOTENT_WRITE ACL on the cluster (its producer is idempotent; Kafka before 2.8 asks for it), " +
			"then restart the gate: its client keeps the refusal of its producer id until then"
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Sprintf("grant the gate's principal the WRITE and DESCRIBE ACLs on its transactional id %q", c.cfg.TransactionalID)
	case errors.Is(err, kerr.PolicyViolation):
		// A broker-side policy (a plugin or proxy the operator runs) refuses the
		// writes; retrying alone never cures it.
		return "a policy on the brokers refuses the gate's writes to it: change the policy or the topic so that it allows them"
	}
	return "create the topic or grant the gate's principal the WRITE ACL on it"
}

// produceRecovered clears a produce problem on topic once a record is acknowledged there.
// producedOK is every produce promise's on success: one atomic load unless a produce
// problem is recorded, then its topic's cleared (produceRecovered). Both deliveries'
// record and outcome-row promises call it, so a problem clears whichever wrote.
func (c *Consumer) producedOK(topic string) {
	if c.produceBlocked.Load() {
		c.produceRecovered(topic)
	}
}

func (c *Consumer) produceRecovered(topic string) {
	// A record acknowledged: the topic takes it, and the producer has its id.
	if c.problems.clear(func(k string) bool { return k == "produce/"+topic || k == problemTxnTimeout || k == problemProducerID }) {
		c.log.Info("kafka: producing works again", "topic", topic)
	}
	c.produceSettled()
	c.produceUnblocked()
}

// produceUnblocked clears produceBlocked once no problem is recorded. Stored, then
// checked again: a problem recorded on another topic meanwhile (produceProblem records
// it before it stores true) would otherwise be left with produceBlocked false, which no
// acknowledgement then clears.
func (c *Consumer) produceUnblocked() {
	if c.problems.empty() {
		c.produceBlocked.Store(false)
		if !c.problems.empty() {
			c.produceBlocked.Store(true)
		}
	}
}

// produceSettled clears (at least once) every produce problem once no record or outcome
// row that failed awaits a retry: the records that failed on a topic were given up with
// their partition (revoked, lost or stopped), not written there, and no produce fails
// any more. Left, the problem kept the gate not ready, saying its records were retried,
// until it happened to write to that topic itself, which a gate that rarely writes a
// dead letter, or owns nothing any more, may never do. A topic still closed is named
// again at its next failure. A failure is counted awaiting its retry (retryQueue.pending,
// the rows' retries) before its problem is recorded, and the counts are read under the
// problems' lock, so a problem recorded meanwhile is never cleared here. The producer's
// id refused (problemProducerID) is no topic's problem, and stays: every produce still
// fails, and the gate must say to grant the ACL and restart, though it may own nothing
// to produce.
func (c *Consumer) produceSettled() {
	if c.exactlyOnce() || !c.produceBlocked.Load() {
		return
	}
	var topics []string
	if c.problems.clear(func(k string) bool {
		t, ok := strings.CutPrefix(k, "produce/")
		if ok = ok && c.retry.pending.Load() == 0 && c.rowsRetrying() == 0; ok {
			topics = append(topics, t)
		}
		return ok
	}) {
		slices.Sort(topics)
		c.log.Info("kafka: no failed produce awaits a retry any more: the records that failed were given up with their partitions, "+
			"and the topics are no longer named as failing", "topics", topics)
		c.produceUnblocked()
	}
}

// logGroupProtocol says which consumer group protocol the gate will run: the one asked
// for, or classic when KIP-848 was asked for and the brokers do not run it (franz-go
// falls back by itself, running KIP-848 when any broker it knows offers
// ConsumerGroupHeartbeat v1 and the first one it joins through does not answer it
// UNSUPPORTED_VERSION; the one broker asked here tells for a cluster at one version, not
// for one half way through a rolling upgrade).
//
// Kafka 4 lists ConsumerGroupHeartbeat among its APIs whether KIP-848 is on or not (the
// group.version feature at 1 or more, which a cluster upgraded from 3.x does not have
// until it is raised, and consumer among group.coordinator.rebalance.protocols): off, it
// answers it, and ConsumerGroupDescribe, with UNSUPPORTED_VERSION. The API list alone
// made the gate log that the consumer protocol ran while franz-go ran the classic one.
func (c *Consumer) logGroupProtocol(ctx context.Context) {
	asked := c.cfg.GroupProtocol
	if asked != GroupConsumer {
		c.log.Info("kafka: consumer group protocol", "group_protocol", asked.String())
		return
	}
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, c.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && ctx.Err() != nil {
		// The gate is stopping (a pod replaced while it started): the stop cut the
		// question short, no broker failed to answer it.
		return
	}
	if err != nil {
		c.log.Warn("kafka: could not ask the broker whether it offers the KIP-848 group protocol", "group_protocol_asked", asked.String(), "err", err)
		return
	}
	offered := slices.ContainsFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
		return k.ApiKey == int16(kmsg.ConsumerGroupHeartbeat) && k.MaxVersion >= 1
	})
	if offered {
		cg := kmsg.NewPtrConsumerGroupDescribeRequest()
		cg.Groups = []string{c.cfg.GroupID}
		cresp, err := cg.RequestWith(ctx, c.cl)
		if err != nil {
			c.log.Warn("kafka: could not ask the broker whether it runs the KIP-848 group protocol", "group_protocol_asked", asked.String(), "err", err)
			return
		}
		// Any other answer (the group, none, a refused DESCRIBE) comes from a broker
		// that runs it: Kafka checks that KIP-848 is on first.
		offered = !slices.ContainsFunc(cresp.Groups, func(g kmsg.ConsumerGroupDescribeResponseGroup) bool {
			return g.ErrorCode == kerr.UnsupportedVersion.Code
		})
	}
	if offered {
		session, from := c.groupSessionTimeout(ctx)
		if c.quota != nil {
			c.quota.setGroupSession(session)
		}
		c.log.Info("kafka: consumer group protocol", "group_protocol", asked.String(), "session_timeout", session.String(), "session_timeout_from", from)
		return
	}
	c.log.Warn("kafka: GATE_KAFKA_GROUP_PROTOCOL is consumer but the brokers do not run the KIP-848 consumer group protocol "+
		"(Kafka 4.0 or later, with the group.version feature at 1 or more and consumer among group.coordinator.rebalance.protocols); "+
		"running the classic one, under which GATE_KAFKA_SESSION_TIMEOUT is the session timeout",
		"group_protocol_asked", asked.String(), "group_protocol", GroupClassic.String())
}

// kip848SessionDefault is Kafka's default group.consumer.session.timeout.ms: a KIP-848
// group's session timeout when the gate may not read its own.
const kip848SessionDefault = 45 * time.Second

// groupSessionTimeout is the session timeout the brokers apply to the gate's group under
// KIP-848's protocol, where the client's (GATE_KAFKA_SESSION_TIMEOUT) is not sent, and
// from says where it was read: the group's consumer.session.timeout.ms, which Apache
// Kafka describes as the group's own (GROUP_CONFIG) or, unset, as the brokers'
// group.consumer.session.timeout.ms (DEFAULT_CONFIG); Kafka's default when the gate may
// not read it (DESCRIBE_CONFIGS on the group) or the answer holds no value. The quota
// hook's warning of a throttle near it takes it.
func (c *Consumer) groupSessionTimeout(ctx context.Context) (d time.Duration, from string) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = c.cfg.GroupID
	res.ConfigNames = []string{"consumer.session.timeout.ms"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, c.cl)
	if err == nil {
		if len(resp.Resources) != 1 {
			// A proxy or a broker of its own answering none: read as one, the gate panicked.
			err = fmt.Errorf("the brokers answered %d resources for the one asked", len(resp.Resources))
		} else {
			err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
		}
	}
	if err != nil {
		return kip848SessionDefault, fmt.Sprintf("Kafka's default group.consumer.session.timeout.ms: the group's consumer.session.timeout.ms could not be read: %v", err)
	}
	for _, cfg := range resp.Resources[0].Configs {
		if cfg.Name != "consumer.session.timeout.ms" || cfg.Value == nil {
			continue
		}
		if ms, err := strconv.ParseInt(*cfg.Value, 10, 64); err == nil && ms > 0 {
			if cfg.Source == kmsg.ConfigSourceGroupConfig {
				return time.Duration(ms) * time.Millisecond, "the group's consumer.session.timeout.ms"
			}
			return time.Duration(ms) * time.Millisecond, "the brokers' group.consumer.session.timeout.ms (the group sets none of its own)"
		}
	}
	return kip848SessionDefault, "Kafka's default group.consumer.session.timeout.ms: the brokers' answer held no value"
}

// ruleTopicAt is where the rules in use name topic t (Config.RuleTopicAt), "" for a
// topic no rule names, or without rules.
func (c *Consumer) ruleTopicAt(t string) string {
	if c.cfg.RuleTopicAt == nil {
		return ""
	}
	return c.cfg.RuleTopicAt(t)
}
