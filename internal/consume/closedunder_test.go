package consume

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// closeCounter counts the closes of each client it hooks (OnClientClosed runs once at
// the end of each Close).
type closeCounter struct {
	mu sync.Mutex
	n  map[*kgo.Client]int
}

func (h *closeCounter) OnClientClosed(cl *kgo.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[*kgo.Client]int{}
	}
	h.n[cl]++
}

// of is how many times cl was closed.
func (h *closeCounter) of(cl *kgo.Client) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[cl]
}

// most is the most times one client was closed.
func (h *closeCounter) most() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := 0
	for _, n := range h.n {
		m = max(m, n)
	}
	return m
}

// TestClientClosedUnderTheLoopIsNotClosedAgain: a client closed by another while the
// loop runs (the crash tests end a gate so, as a SIGKILL would) was closed again by the
// loop as it stopped, at the same time when the loop found it closed first: franz-go's
// Close run twice at once races with itself (each kills the fetch sessions; a data race
// in v1.22.2, which failed every consume test after it under -race). The loop now leaves
// a client it found closed alone: one close, the closer's.
func TestClientClosedUnderTheLoopIsNotClosedAgain(t *testing.T) {
	t.Parallel()
	for _, eos := range []bool{false, true} {
		name := "at-least-once"
		if eos {
			name = "exactly-once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var env *gateEnv
			if eos {
				env = newEOSEnv(t, 2)
			} else {
				env = newEnv(t, 2)
			}
			closes := &closeCounter{}
			env.ccfg.ClientOpts = append(env.ccfg.ClientOpts, kgo.WithHooks(closes))
			prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			var recs []*kgo.Record
			for id := range 50 {
				recs = append(recs, inputRecord(id, "team-"+strconv.Itoa(id%5)))
			}
			produceAll(t, prod, recs)
			g := env.start(t, "a")
			deadline := time.Now().Add(30 * time.Second)
			for !g.c.Ready() {
				if time.Now().After(deadline) {
					t.Fatal("the gate never became ready")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Closes are counted per client: under a loaded machine an exactly-once gate may
			// rebuild its client before the close below (a transaction recovered), and the
			// one it closed then is no second close of the one closed under it.
			cl := g.c.cl
			g.c.Close() // under the running loop, not through it
			select {
			case <-g.done: // an error or not: its client was closed under it
			case <-time.After(60 * time.Second):
				t.Fatal("the gate's Run did not return after its client was closed")
			}
			g.cancel = nil // stopped already
			if n, most := closes.of(cl), closes.most(); n != 1 || most != 1 {
				t.Errorf("the client closed under the loop was closed %d times, a client at most %d times; want once (by its closer): the loop closed it again", n, most)
			}
		})
	}
}

// Close beside a running exactly-once Run closes the client in use when the loop has
// rebuilt its session (a transaction outlived its timeout, as in
// TestExactlyOnceTimeoutRecovers), and Run returns. Close read the client's field, which
// the loop writes as it rebuilds, without synchronizing with it; it reads the client
// the loop publishes (Consumer.live). The race detector did not report the old read
// here (the loop's own later reads of the field take the write's place in its history),
// so this guards the behaviour: the client closed is the rebuilt one.
func TestCloseAfterSessionRebuilt(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	env.ccfg.TransactionTimeout = time.Second
	var held atomic.Bool
	env.cluster.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			env.cluster.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	// A producer id asked for after the held commit: the rebuilt session's. Seen on the
	// broker's side, which shares no lock with the gate's loop.
	var rebuilt atomic.Bool
	env.cluster.ControlKey(kmsg.InitProducerID.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if held.Load() {
			rebuilt.Store(true)
		}
		return nil, nil, false
	})
	a := env.start(t, "a")
	var recs []*kgo.Record
	for id := range 20 {
		recs = append(recs, inputRecord(id, "team-a"))
	}
	produceAll(t, producer(t, env.cluster), recs)
	for deadline := time.Now().Add(30 * time.Second); !rebuilt.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no session rebuilt within 30s (offset commit held: %v)", held.Load())
		}
	}
	a.c.Close()
	select {
	case <-a.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the gate's Run did not return after its client was closed")
	}
	a.cancel = nil
}

// An exactly-once transaction whose end failed because its client was closed under the
// loop (Close) stops the loop: before, the failure was taken for an end of unknown
// outcome, and the loop closed the client a second time (the closes
// TestClientClosedUnderTheLoopIsNotClosedAgain counts, which a CI run under load met) and
// rebuilt a session, a client no one would close.
//
// Nor when the end failed otherwise (a connection cut as the client closed) once Close
// had closed the client: a CI run's crash test rebuilt the session while that close was
// under way, and the new client's metrics, registered while the closed one's still
// were, panicked as a duplicate registration.
func TestTransactionEndOnAClosedClientIsNoRecovery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed bool // Close called first
		endErr error
	}{
		{"the end failed as closed", false, fmt.Errorf("ending the transaction: %w", kgo.ErrClientClosed)},
		{"the end failed otherwise after Close", true, errors.New("ending the transaction: broker connection closed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closes := &closeCounter{}
			c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: "in", GroupID: "g", Gate: "g",
				Delivery: ExactlyOnce, TransactionalID: "g-0", ClientOpts: []kgo.Opt{kgo.WithHooks(closes)}},
				nil, nil, prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl := c.cl
			if tc.closed {
				c.Close()
			}
			if err := c.recoverFenced(tc.endErr, time.Second, false); !errors.Is(err, tc.endErr) {
				t.Errorf("recoverFenced(%v) = %v: want the error back, the loop stopping", tc.endErr, err)
			}
			if c.cl != cl || c.live.Load() != cl {
				t.Error("a new session was built for a client closed under the loop")
			}
			if n, want := closes.of(cl), map[bool]int{false: 0, true: 1}[tc.closed]; n != want {
				t.Errorf("the client was closed %d times: want %d, its closer's", n, want)
			}
			if len(c.recoveries) != 0 {
				t.Errorf("%d recoveries counted: want none", len(c.recoveries))
			}
		})
	}
}

// clientCounter counts the clients made and each one's closes.
type clientCounter struct {
	closeCounter
	made atomic.Int64
}

func (h *clientCounter) OnNewClient(*kgo.Client) { h.made.Add(1) }

// Close beside an exactly-once loop rebuilding its session (a transaction's end failed
// with its outcome unknown) leaves no client open and closes none twice, whichever of
// the two comes first: before, a Close that came after the loop's check built a new
// session no one closed, and one that read the client the loop was replacing closed it a
// second time.
func TestCloseBesideASessionRebuildClosesEveryClientOnce(t *testing.T) {
	for i := range 20 {
		hooks := &clientCounter{}
		c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: "in", GroupID: "g", Gate: "g",
			Delivery: ExactlyOnce, TransactionalID: "g-0", RevokeTimeout: time.Second, ClientOpts: []kgo.Opt{kgo.WithHooks(hooks)}},
			nil, nil, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			_ = c.recoverFenced(errors.New("ending the transaction: connection reset"), time.Second, false)
		})
		wg.Go(c.Close)
		wg.Wait()
		made := hooks.made.Load()
		hooks.mu.Lock()
		closed, most := len(hooks.n), 0
		for _, n := range hooks.n {
			most = max(most, n)
		}
		hooks.mu.Unlock()
		if int64(closed) != made || most != 1 {
			t.Fatalf("round %d: %d clients made, %d closed, one %d times: want every one closed once", i, made, closed, most)
		}
	}
}

// An exactly-once session rebuilt after its client's close outlived RevokeTimeout (a
// coordinator slow to answer the leave) is built once that close is over: before, the
// new client registered its metrics (kprom's) beside the closed one's, still
// registered, and the process panicked on the duplicate registration.
func TestSessionRebuiltOnceTheSlowCloseIsOver(t *testing.T) {
	c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: "in", GroupID: "g", Gate: "g",
		Delivery: ExactlyOnce, TransactionalID: "g-0", RevokeTimeout: 20 * time.Millisecond},
		nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	old := c.cl
	release := make(chan struct{})
	closed := c.closeClient(func() { <-release; old.Close() }) // returns at RevokeTimeout, the close held
	built := make(chan error, 1)
	go func() { built <- c.resumeSession(closed) }()
	select {
	case err := <-built:
		t.Fatalf("a session was built (%v) while the closed client's close was under way", err)
	case <-time.After(200 * time.Millisecond): // a window to see the wrong thing in, not a wait
	}
	close(release)
	if err := <-built; err != nil {
		t.Fatalf("the session was not rebuilt once the close was over: %v", err)
	}
	if c.cl == old || c.live.Load() != c.cl {
		t.Error("no new client in use")
	}
}

// The closes kept for each client (Consumer.closeMus) do not keep the clients alive:
// a session rebuilt again and again (an output topic deleted: every 10 s) kept every
// client it had built, each with its metadata and buffers.
func TestRebuiltSessionsLeaveNoClientBehind(t *testing.T) {
	c, err := New(Config{Brokers: []string{"127.0.0.1:1"}, InputTopic: "in", GroupID: "g", Gate: "g",
		Delivery: ExactlyOnce, TransactionalID: "g-0", RevokeTimeout: time.Second},
		nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rebuilds = 8
	for range rebuilds {
		if err := c.resumeSession(c.closeClient(c.cl.Close)); err != nil {
			t.Fatal(err)
		}
	}
	var kept int
	for range 10 { // the collector may need more than one cycle to free a client
		runtime.GC()
		c.dropCollectedCloses()
		kept = 0
		c.closeMus.Range(func(any, any) bool { kept++; return true })
		if kept <= 1 {
			break
		}
	}
	if kept > 1 {
		t.Errorf("%d closes kept after %d rebuilds: want at most the live client's", kept, rebuilds)
	}
}
