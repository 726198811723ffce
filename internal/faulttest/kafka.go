package faulttest

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group timings the broker imposes on the gates (see FastGroups).
const (
	// SessionTimeout is how long a member may go without a heartbeat; a SIGKILLed gate's
	// partitions move after it. franz-go heartbeats every 3s by default.
	SessionTimeout = 8 * time.Second
	// RebalanceTimeout is how long members have to rejoin in a rebalance.
	RebalanceTimeout = 20 * time.Second
	// FetchMaxWait is the longest the broker holds a fetch with no new data.
	FetchMaxWait = 200 * time.Millisecond
)

// NewCluster starts an in-process Kafka-protocol broker with opts and FastGroups, closed
// at cleanup.
func NewCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	FastGroups(c)
	return c
}

// FastGroups makes the broker shorten what the gate's client asks for: the session and
// rebalance timeouts of a JoinGroup (45s and 60s by default, with no GATE_ variable to
// change them), and the wait of a fetch with no data (5s). The requests are rewritten in
// place before the broker handles them, so the gate binary runs unmodified and a
// SIGKILLed member leaves the group after SessionTimeout instead of 45s.
func FastGroups(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r, ok := req.(*kmsg.JoinGroupRequest); ok {
			r.SessionTimeoutMillis = int32(SessionTimeout / time.Millisecond)
			r.RebalanceTimeoutMillis = int32(RebalanceTimeout / time.Millisecond)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r, ok := req.(*kmsg.FetchRequest); ok && r.MaxWaitMillis > int32(FetchMaxWait/time.Millisecond) {
			r.MaxWaitMillis = int32(FetchMaxWait / time.Millisecond)
		}
		return nil, nil, false
	})
}
