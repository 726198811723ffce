package consume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPassthroughBehindStopsWithACommitInFlight stops BenchmarkRealKafka's bare
// pass-through (passthroughBehind) while its interval commit of the input's end is in
// flight, the broker holding it: the stop gives that commit up, which is no failure, and
// the last commit sends its offsets again, so the run ends without an error and with the
// group's commits at the input's end (the held commit is then refused, never applied).
// Before, the given-up commit's "context canceled" was the run's error (a make bench's
// BenchmarkRealKafkaReplicated/passthrough on three brokers, 2026-12-04), and the last
// commit sent nothing, its offsets taken as sent.
func TestPassthroughBehindStopsWithACommitInFlight(t *testing.T) {
	env := newEnv(t, 1)
	const n = 200
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: inTopic, Value: fmt.Appendf(nil, `{"team_id":"t%d"}`, i%7)}
	}
	produceAll(t, producer(t, env.cluster), recs)

	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	var holding atomic.Bool // the broker holds the commit of the input's end
	env.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		if holding.Load() {
			return nil, nil, false
		}
		atEnd := false
		for _, tp := range req.(*kmsg.OffsetCommitRequest).Topics { // by topic ID: the group's only topic
			for _, p := range tp.Partitions {
				atEnd = atEnd || p.Offset == n
			}
		}
		if !atEnd {
			return nil, nil, false
		}
		holding.Store(true)
		holdOnce.Do(func() { close(held) })
		env.cluster.SleepControl(func() { <-release })
		// Not applied, as a commit a stop gives up may never reach the broker: only the
		// last commit sending its offsets again puts the group at the input's end.
		return refuseOffsetCommit(req, kerr.RequestTimedOut), nil, true
	})

	cfg, err := env.ccfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// The held commit is let through once the pass-through has its answer, which a stop
	// gives it without the broker's: the broker holding every request after it on its
	// connection (the group's heartbeats too) for longer would end the member's session.
	e := &benchEnv{n: n, in: inTopic, acc: accTopic, cfg: cfg, commitDone: func(sync bool, err error) {
		if !sync && holding.Load() {
			free()
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- e.passthroughBehind(ctx) }()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no commit of the input's end in 30 s")
	}
	cancel() // while the broker holds that commit
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("the pass-through stopped with %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the pass-through had not stopped 60 s after its context ended")
	}
	waitCommitted(t, env.cluster, 1, 20*time.Second)
}
