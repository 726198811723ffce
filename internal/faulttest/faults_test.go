package faulttest_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/faulttest"
)

// Conservation under faults: several gate processes (the built binary) in one group
// against an in-process broker and a real redis-server. Goals: nothing lost in any case;
// nothing duplicated by a clean rebalance (joins, SIGTERM leaves) or by broker or Redis
// faults; after a SIGKILL, duplicates only among the records the killed gate had routed
// but not committed (see TestSIGKILLReplaysOnlyUncommitted).
//
// Durations are short in make test; GATETEST_SOAK=1 (make soak) runs the long versions.

// TestSteadyRun: three gates, steady traffic, then the producers stop.
func TestSteadyRun(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for _, n := range []string{"a", "b", "c"} {
		f.start(n)
	}
	f.waitMembers(3)
	l := f.produce()
	time.Sleep(dur(3*time.Second, 60*time.Second))
	l.Stop()
	f.waitDrained()
	if r := f.check(); len(r.Duplicated) > 0 {
		t.Errorf("duplicates in a steady run: %s", r)
	}
}

// TestScaleOneThreeOne: one gate, two more join while records flow, then leave on
// SIGTERM: every rebalance is clean, so nothing is duplicated.
func TestScaleOneThreeOne(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.start("a")
	f.waitMembers(1)
	l := f.produce()
	f.waitOutputsGrow(500, "one gate")
	rounds := 1
	if soak() {
		rounds = 3
	}
	for range rounds {
		b, c := f.start("b"), f.start("c")
		f.waitMembers(3)
		f.waitOutputsGrow(1000, "three gates")
		b.Term(t, 30*time.Second)
		c.Term(t, 30*time.Second)
		f.waitMembers(1)
		f.waitOutputsGrow(500, "back to one gate")
	}
	l.Stop()
	f.waitDrained()
	if r := f.check(); len(r.Duplicated) > 0 {
		t.Errorf("a clean rebalance duplicated records: %s", r)
	}
}

// TestSIGKILLReplaysOnlyUncommitted kills one of three gates mid-stream and restarts
// it. Nothing is lost. The bound on duplicates: every duplicated record was past its
// partition's committed offset when the gate died, and their number is at most the
// records between the commits and the input's end at that moment. The gates commit
// every GATE_COMMIT_INTERVAL (200ms) what is acknowledged, so that range is about one
// commit interval of traffic plus at most one poll (GATE_MAX_POLL_RECORDS, 500) in
// flight per partition: one uncommitted batch.
func TestSIGKILLReplaysOnlyUncommitted(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for _, n := range []string{"a", "b", "c"} {
		f.start(n)
	}
	f.waitMembers(3)
	l := f.produce()
	kills := 1
	if soak() {
		kills = 3
	}
	type snap struct{ commits, ends map[int32]int64 }
	var snaps []snap
	for i := range kills {
		f.waitOutputsGrow(1000, "before the kill")
		victim := []string{"b", "c", "a"}[i%3]
		f.gates[victim].Kill(t)
		// The dead process commits nothing more; its members' partitions stay put until
		// its session times out, so this is where their replay starts.
		snaps = append(snaps, snap{f.commits(), f.ends()})
		f.start(victim)
		f.waitMembers(3)
		f.waitOutputsGrow(1000, "after the restart")
	}
	l.Stop()
	f.waitDrained()
	r := f.check()
	var bound int64
	for _, s := range snaps {
		for p, end := range s.ends {
			bound += end - max(s.commits[p], 0)
		}
	}
	t.Logf("SIGKILL x%d: %d records duplicated (%d extra copies); bound %d", kills, len(r.Duplicated), r.Extra, bound)
	if int64(r.Extra) > bound {
		t.Errorf("%d extra copies, more than the %d records uncommitted at the kills", r.Extra, bound)
	}
	for id := range r.Duplicated {
		at := r.InputAt[id]
		ok := false
		for _, s := range snaps {
			if at.Offset >= max(s.commits[at.Partition], 0) && at.Offset < s.ends[at.Partition] {
				ok = true
			}
		}
		if !ok {
			t.Errorf("record %s (input %s) duplicated although committed before every kill", id, at)
		}
	}
}

// TestRedisFaults: Redis stopped, then hung (SIGSTOP), then restarted empty, while
// records flow through two gates. Routing never stops; counts reach Redis again once it
// is back; nothing is lost or duplicated.
func TestRedisFaults(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.start("a")
	f.start("b")
	f.waitMembers(2)
	l := f.produce()
	faulttest.WaitFor(t, 30*time.Second, "counts in Redis", func() bool { return f.counterSum() > 0 })

	// Stopped: routing goes on (the per-record path never waits on Redis), and the
	// counts kept meanwhile are written to the new, empty server.
	f.redis.Stop(t)
	down := time.Now()
	f.waitOutputsGrow(1000, "Redis stopped")
	time.Sleep(time.Until(down.Add(dur(3*time.Second, 30*time.Second)))) // the outage's length
	faulttest.WaitFor(t, 30*time.Second, "gate_limiter_errors_total to count the outage", func() bool {
		return metric(t, a, "gate_limiter_errors_total") > 0
	})
	f.redis.Restart(t)
	faulttest.WaitFor(t, 30*time.Second, "counts in Redis after the outage", func() bool { return f.counterSum() > 0 })

	// Hung: connections open, no answer. What the gates count meanwhile is written after.
	before := f.counterSum()
	f.redis.Pause(t)
	hung := time.Now()
	f.waitOutputsGrow(1000, "Redis hung")
	time.Sleep(time.Until(hung.Add(dur(2*time.Second, 10*time.Second))))
	f.redis.Resume(t)
	faulttest.WaitFor(t, 30*time.Second, "counts growing in Redis after SIGCONT", func() bool { return f.counterSum() > before })

	// Restarted empty, with no downtime to speak of.
	f.redis.Restart(t)
	faulttest.WaitFor(t, 30*time.Second, "counts in Redis after an empty restart", func() bool { return f.counterSum() > 0 })
	f.waitOutputsGrow(1000, "after the restart")

	for _, g := range f.gates {
		// Memory stays bounded: waiting counts never pass GATE_MAX_PENDING_WRITES.
		if pw := metric(t, g, "gate_limiter_pending_writes"); pw > 1_000_000 {
			t.Errorf("gate %s: %v pending writes", g.Name, pw)
		}
	}
	l.Stop()
	f.waitDrained()
	if r := f.check(); len(r.Duplicated) > 0 {
		t.Errorf("Redis faults duplicated records: %s", r)
	}
}

// TestBrokerFaults: produce errors, fetch errors, coordinators and partitions moving, and
// a slow broker, one after the other, while records flow through two gates on a
// three-broker cluster.
func TestBrokerFaults(t *testing.T) {
	t.Parallel()
	f := newFleet(t, kfake.NumBrokers(3))
	a := f.start("a")
	b := f.start("b")
	f.waitMembers(2)
	l := f.produce()
	f.waitOutputsGrow(500, "before the faults")
	hits := 6
	if soak() {
		hits = 200
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }

	// Produce errors on the accepted topic: a few retriable ones the client's own retries
	// absorb, then errors the client gives up on at once, until the gates have retried
	// on their own (holding their commits and polling nothing new meanwhile).
	h := f.c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.NotEnoughReplicas, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: accTopic, Err: kerr.TopicAuthorizationFailed, Count: -1},
	)
	faulttest.WaitFor(t, 60*time.Second, "gate-level produce retries", func() bool {
		return metric(t, a, "gate_produce_retries_total")+metric(t, b, "gate_produce_retries_total") > 0
	})
	h.Remove()
	phase("produce errors removed")
	f.waitOutputsGrow(1000, "after produce errors")
	phase("flowing again")

	// Fetch errors on the input (the client backs off after each, so fewer of them).
	fetchHits := min(hits, 40)
	h = f.c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Err: kerr.NotLeaderForPartition, Count: fetchHits / 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Err: kerr.UnknownServerError, Count: fetchHits / 2},
	)
	if err := h.Wait(ctx, fetchHits); err != nil {
		t.Fatalf("fetch fault: %d hits: %v", h.Hits(), err)
	}
	h.Remove()
	phase("fetch errors removed")
	f.waitOutputsGrow(1000, "after fetch errors")
	phase("flowing again")

	// The group coordinator moves (every group is rekeyed to another broker), several
	// times: commits and heartbeats fail with NOT_COORDINATOR until the gates find it.
	// Partition leaders are not moved: kfake answers OffsetForLeaderEpoch wrongly after
	// MoveTopicPartition or ShufflePartitionLeaders, and any franz-go consumer (the gate's
	// or a bare kgo one) then reports "lost records" and restarts the partition at offset
	// 0, replaying all of it: a broker-fake artefact a real cluster does not have.
	moves := 3
	if soak() {
		moves = 20
	}
	for range moves {
		f.c.RehashCoordinators()
		f.waitOutputsGrow(300, "coordinator moved")
	}

	phase("coordinator moves done")
	// A slow broker: produce requests held 300ms each, for a while.
	var slowed atomic.Int64
	f.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if slowed.Add(1) > int64(hits) {
			f.c.DropControl()
			return nil, nil, false
		}
		f.c.KeepControl()
		f.c.SleepControl(func() { time.Sleep(300 * time.Millisecond) })
		return nil, nil, false
	})
	faulttest.WaitFor(t, 60*time.Second, strconv.Itoa(hits)+" slow produce requests", func() bool { return slowed.Load() > int64(hits) })
	phase("slow broker done")
	f.waitOutputsGrow(1000, "after the slow broker")
	phase("flowing again")

	l.Stop()
	f.waitDrained()
	if r := f.check(); len(r.Duplicated) > 0 {
		t.Errorf("broker faults duplicated records: %s", r)
	}
}
