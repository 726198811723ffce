package faulttest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group timings the gates run with in these tests, through their own settings (StartGate
// sets them unless a test does): a SIGKILLed gate's partitions move after SessionTimeout
// instead of the default 45s.
const (
	// SessionTimeout is GATE_KAFKA_SESSION_TIMEOUT; franz-go heartbeats every 3s.
	SessionTimeout = 8 * time.Second
	// RebalanceTimeout is GATE_KAFKA_REBALANCE_TIMEOUT.
	RebalanceTimeout = 20 * time.Second
	// FetchMaxWait is GATE_KAFKA_FETCH_MAX_WAIT.
	FetchMaxWait = 200 * time.Millisecond
)

// NewCluster starts an in-process Kafka-protocol broker with opts, closed at cleanup. Its
// minimum session timeout is low enough for SessionTimeout.
func NewCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// RequestsCounted counts the requests of key c receives from now on that match (every
// one when match is nil), each answered as c answers it: for a test to wait until the
// gate has made some attempts (its preflight checks, its checks of a rule's topic)
// rather than sleep for them, which a loaded machine may pass with none made.
func RequestsCounted(c *kfake.Cluster, key kmsg.Key, match func(kmsg.Request) bool) *atomic.Int64 {
	n := new(atomic.Int64)
	c.ControlKey(key.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if match == nil || match(req) {
			n.Add(1)
		}
		return nil, nil, false
	})
	return n
}

// GateNeeds is a gate's resources on a cluster with ACLs, as docs/operations.md's table
// "What the gate needs from the cluster" lists them (TestGateNeedsAsDocumented keeps
// ACLs to that table).
type GateNeeds struct {
	Input, Group string
	// Outputs are the topics the gate writes: its three, the outcomes topic, rules' own.
	Outputs []string
	// TransactionalID is an exactly-once gate's id ("": at least once, none needed).
	TransactionalID string
}

// ACLs returns the ACLs the table grants n's principal: READ and DESCRIBE on the input
// and the group, WRITE and DESCRIBE on each output and the transactional id, and the
// cluster's IDEMPOTENT_WRITE (for kfake.User). A test of a missing one leaves that
// resource out of n and grants what it wants of it itself.
func (n GateNeeds) ACLs() []kfake.ACL {
	var acls []kfake.ACL
	if n.Input != "" {
		acls = append(acls, AllowACL(kmsg.ACLResourceTypeTopic, n.Input, kmsg.ACLOperationRead, kmsg.ACLOperationDescribe)...)
	}
	if n.Group != "" {
		acls = append(acls, AllowACL(kmsg.ACLResourceTypeGroup, n.Group, kmsg.ACLOperationRead, kmsg.ACLOperationDescribe)...)
	}
	for _, tp := range n.Outputs {
		acls = append(acls, AllowACL(kmsg.ACLResourceTypeTopic, tp, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...)
	}
	if n.TransactionalID != "" {
		acls = append(acls, AllowACL(kmsg.ACLResourceTypeTransactionalId, n.TransactionalID, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...)
	}
	return append(acls, AllowACL(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite)...)
}

// AllowACL is kfake ACLs allowing each of ops on the literal resource name of type res
// (for kfake.User).
func AllowACL(res kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) []kfake.ACL {
	var acls []kfake.ACL
	for _, op := range ops {
		acls = append(acls, kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
	}
	return acls
}

// ProduceRefused is a broker's answer to req that writes none of it: each partition
// refused with the code code returns for it (topic index i into req.Topics, and the
// partition's part of the request), kerr.NotEnoughReplicas.Code for one a test only holds
// back (retriable: the client sends it again). For a kfake control function that
// answers a produce itself.
func ProduceRefused(req *kmsg.ProduceRequest, code func(i int, p *kmsg.ProduceRequestTopicPartition) int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.SetVersion(req.GetVersion())
	for i := range req.Topics {
		tp := &req.Topics[i]
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
		for j := range tp.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = tp.Partitions[j].Partition
			rp.ErrorCode = code(i, &tp.Partitions[j])
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// NotEnoughReplicas is ProduceRefused's code for a partition held back.
func NotEnoughReplicas(int, *kmsg.ProduceRequestTopicPartition) int16 {
	return kerr.NotEnoughReplicas.Code
}
