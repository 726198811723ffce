package kafkatest

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestWaitBrokersFindsAnExitedNodeBehindAnother: a node that exited while starting (its
// port taken by another process) ends the wait with exitedError, which New retries on
// fresh ports, even while a node before it cannot list it. Checking each node's process
// only when the nodes before it were ready waited out the whole start timeout instead,
// and the cluster was not retried (CI, 2026-11-29: TestGroupCoordinatorDies, "brokers
// [1 2 3] not all listed within 3m0s: node 1: metadata lists brokers [1 3], not yet 2",
// node 2's log: "Address already in use").
func TestWaitBrokersFindsAnExitedNodeBehindAnother(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	running := &process{done: make(chan struct{})}
	exited := &process{done: make(chan struct{}), waitErr: errors.New("exit status 1")}
	close(exited.done)
	c := &Cluster{nodes: []*node{
		{id: 1, port: free(), proc: running}, // nothing listens: it never lists node 2
		{id: 2, port: free(), proc: exited},
	}}
	err := c.waitBrokers(20*time.Second, 1, 2)
	var ex *exitedError
	if !errors.As(err, &ex) || ex.node != 2 {
		t.Fatalf("waitBrokers = %v, want node 2's exit", err)
	}
}
