package faulttest

import (
	"testing"
	"time"

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

// AllowACL is kfake ACLs allowing each of ops on the literal resource name of type res
// (for kfake.User).
func AllowACL(res kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) []kfake.ACL {
	var acls []kfake.ACL
	for _, op := range ops {
		acls = append(acls, kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
	}
	return acls
}
