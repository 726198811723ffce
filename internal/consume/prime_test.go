package consume

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// TestPrimeBeforeAPartitionsFirstRecordsAreRouted: Config.Prime is given the records of
// each partition's first poll since it was assigned, before any of them is routed, once
// (a later poll of the partition is not primed), in either delivery mode.
func TestPrimeBeforeAPartitionsFirstRecordsAreRouted(t *testing.T) {
	t.Parallel()
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			const parts, n = 4, 40
			env := newEnv(t, parts)
			env.ccfg.Delivery = d
			var mu sync.Mutex
			primed := map[int]bool{}  // record id -> given to Prime
			early := map[int32]bool{} // partitions a record of which was routed before their Prime
			partsPrimed := map[int32]int{}
			calls := 0
			env.ccfg.Prime = func(_ context.Context, recs []*kgo.Record) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				seen := map[int32]bool{}
				for _, r := range recs {
					id, _ := strconv.Atoi(header(r, idHeader))
					primed[id] = true
					if !seen[r.Partition] {
						seen[r.Partition] = true
						partsPrimed[r.Partition]++
					}
				}
			}
			env.wrap = func(r Router) Router {
				return &primeWatch{Router: r, routed: func(in *kgo.Record) {
					mu.Lock()
					if partsPrimed[in.Partition] == 0 {
						early[in.Partition] = true
					}
					mu.Unlock()
				}}
			}
			prod := producer(t, env.cluster)
			first := make([]*kgo.Record, n)
			for i := range first {
				first[i] = inputRecord(i, "team-"+strconv.Itoa(i%7))
			}
			produceAll(t, prod, first)
			g := env.start(t, "a")
			var opts []kgo.Opt
			if d == ExactlyOnce {
				opts = append(opts, readCommitted())
			}
			collect(t, env.cluster, n, 30*time.Second, 0, opts...)
			mu.Lock()
			primedFirst, callsFirst := len(primed), calls
			for p, k := range partsPrimed {
				if k != 1 {
					t.Errorf("partition %d primed %d times, want once", p, k)
				}
			}
			if len(partsPrimed) != parts {
				t.Errorf("partitions primed: %v, want all %d (every one had records waiting)", partsPrimed, parts)
			}
			if len(early) > 0 {
				t.Errorf("partitions with records routed before their Prime: %v", early)
			}
			mu.Unlock()
			if primedFirst == 0 {
				t.Fatal("no record given to Prime")
			}

			more := make([]*kgo.Record, n)
			for i := range more {
				more[i] = inputRecord(n+i, "team-1")
			}
			produceAll(t, prod, more)
			collect(t, env.cluster, 2*n, 30*time.Second, 0, opts...)
			mu.Lock()
			if calls != callsFirst {
				t.Errorf("Prime called %d more times for later polls of partitions primed already", calls-callsFirst)
			}
			mu.Unlock()
			g.stop(t)
		})
	}
}

// primeWatch tells routed of every record routed.
type primeWatch struct {
	Router
	routed func(in *kgo.Record)
}

func (w *primeWatch) RouteInto(now time.Time, in *kgo.Record, s *route.Scratch, out *kgo.Record) route.Outcome {
	w.routed(in)
	return w.Router.RouteInto(now, in, s, out)
}

// TestPrimeSamplesALaggingPartitionUntilCaughtUp: a partition whose backlog is longer than
// a poll has every eighth record of its later polls handed to Prime too (a review: a
// held team's 300 records behind 48,000 of another team's were met as first contact, 50
// accepted), until a poll reaches its end; from there on nothing is primed.
func TestPrimeSamplesALaggingPartitionUntilCaughtUp(t *testing.T) {
	t.Parallel()
	const n = 200
	env := newEnv(t, 1)
	env.ccfg.MaxPollRecords = 10
	var mu sync.Mutex
	var calls [][]int // the ids of each Prime call
	env.ccfg.Prime = func(_ context.Context, recs []*kgo.Record) {
		mu.Lock()
		calls = append(calls, recordIDs(recs))
		mu.Unlock()
	}
	prod := producer(t, env.cluster)
	produceAll(t, prod, teamRecords(0, n, "team-1"))
	g := env.start(t, "a")
	collect(t, env.cluster, n, 30*time.Second, 0)
	mu.Lock()
	first := len(calls)
	primed := 0
	for i, ids := range calls {
		primed += len(ids)
		if i > 0 && len(ids) > 2 {
			t.Errorf("a later poll of at most 10 records primed %d of them (%v), want every eighth", len(ids), ids)
		}
	}
	if first < 2 || len(calls[0]) == 0 {
		t.Errorf("Prime called %d times for a backlog of %d polled 10 at a time, want the first poll and samples of the later ones", first, n)
	}
	if lo := len(calls[0]) + (n-len(calls[0]))/8 - 1; primed < lo {
		t.Errorf("%d records primed, want at least %d (the first poll and an eighth of the rest)", primed, lo)
	}
	mu.Unlock()
	more := make([]*kgo.Record, 20)
	for i := range more {
		more[i] = inputRecord(n+i, "team-1")
	}
	produceAll(t, prod, more)
	collect(t, env.cluster, n+20, 30*time.Second, 0)
	mu.Lock()
	if len(calls) != first {
		t.Errorf("Prime called %d more times once the partition had caught up: %v", len(calls)-first, calls[first:])
	}
	mu.Unlock()
	g.stop(t)
}

// TestSurvivorTakingOverPrimesATeamItHadMet: a gate that takes a stopped peer's partition
// over, with a held team's records waiting there, reads the team before routing them
// though it had the team cached already, met on its own partition under the sync floor
// and never read (or read long before, at its own low level). A review's survivor
// accepted 998 of a held team's 1,500 waiting records so: Expect left a cached key as
// it was.
func TestSurvivorTakingOverPrimesATeamItHadMet(t *testing.T) {
	t.Parallel()
	const threshold = 50
	env := newEnv(t, 2)
	env.redis = redistest.Start(t)
	env.prime = true
	env.lcfg.Threshold = threshold
	env.lcfg.DivertHold = time.Minute
	env.tickEvery = 200 * time.Millisecond
	var mu sync.Mutex
	accepted := map[string]int{} // gate -> the whale's records it accepted, of the backlog
	const from = 1000            // the backlog's first id
	watch := func(name string) func(Router) Router {
		return func(r Router) Router {
			return &watchRouter{Router: r, seen: func(id int, o route.Outcome) {
				if o.Team == "whale" && o.Route == route.Accepted && id >= from {
					mu.Lock()
					accepted[name]++
					mu.Unlock()
				}
			}}
		}
	}
	env.wrap = watch("a")
	a := env.start(t, "a")
	env.wrap = watch("b")
	b := env.start(t, "b")
	waitFor(t, 30*time.Second, "each gate owning one partition", func() bool { return len(owned(a)) == 1 && len(owned(b)) == 1 })
	pa, pb := owned(a)[0], owned(b)[0]
	prod, err := kgo.NewClient(kgo.SeedBrokers(env.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	to := func(p int32, ids ...int) []*kgo.Record {
		var recs []*kgo.Record
		for _, id := range ids {
			r := inputRecord(id, "whale")
			r.Partition = p
			recs = append(recs, r)
		}
		return recs
	}
	seq := func(lo, hi int) []int {
		var ids []int
		for i := lo; i < hi; i++ {
			ids = append(ids, i)
		}
		return ids
	}
	// Gate b meets the whale: two records, under the floor, cached.
	produceAll(t, prod, to(pb, 0, 1))
	// Gate a holds it: 200 against 50.
	produceAll(t, prod, to(pa, seq(2, 202)...))
	collect(t, env.cluster, 202, 30*time.Second, 0)
	waitFor(t, 30*time.Second, "the whale diverted by gate a", func() bool { return overflowed(t, a) > 0 })
	a.stop(t) // its final flush: the counts and the hold flag in Redis
	produceAll(t, prod, to(pa, seq(from, from+300)...))
	collect(t, env.cluster, 502, 30*time.Second, 0)
	mu.Lock()
	defer mu.Unlock()
	if accepted["b"] != 0 {
		t.Errorf("gate b accepted %d of the held whale's 300 records waiting in the partition it took over, want none", accepted["b"])
	}
	_ = b
}

// TestPrimeCutShortPrimesTheFirstPollAgain: at least once, a rebalance waiting for the
// poll being primed ends the routing context (onBlocked): Prime's read is cut short and
// nothing of the poll is routed, the client moved back to it. The partition, kept, polls
// the same records again, and was then taken for one primed already: its first poll,
// the backlog a takeover is primed for, was only sampled (every eighth record), so a
// held team's waiting records were judged on this gate's own count. It is primed whole
// again.
func TestPrimeCutShortPrimesTheFirstPollAgain(t *testing.T) {
	t.Parallel()
	const n, poll = 200, 10
	env := newEnv(t, 1)
	env.ccfg.MaxPollRecords = poll
	var c *Consumer
	env.before = func(cons *Consumer) { c = cons }
	var mu sync.Mutex
	var calls [][]int // the ids of each Prime call
	env.ccfg.Prime = func(ctx context.Context, recs []*kgo.Record) {
		mu.Lock()
		calls = append(calls, recordIDs(recs))
		first := len(calls) == 1
		mu.Unlock()
		if first {
			// A rebalance wanting to run as the first poll is primed, as franz-go says
			// one does (OnPartitionsCallbackBlocked): the read ends with the context.
			c.onBlocked(ctx, nil)
			<-ctx.Done()
		}
	}
	prod := producer(t, env.cluster)
	produceAll(t, prod, teamRecords(0, n, "team-1"))
	g := env.start(t, "a")
	o := collect(t, env.cluster, n, 30*time.Second, 0)
	if lost, dup := o.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Errorf("%d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) < 2 {
		t.Fatalf("Prime called %d times, want the cut call and the records polled again: %v", len(calls), calls)
	}
	if len(calls[1]) != len(calls[0]) || calls[1][0] != calls[0][0] {
		t.Errorf("after a prime cut short, the first poll polled again (%v) was primed as %v, want whole", calls[0], calls[1])
	}
	g.stop(t)
}

// recordIDs are the ids of recs (inputRecord's), in order.
func recordIDs(recs []*kgo.Record) []int {
	ids := make([]int, 0, len(recs))
	for _, r := range recs {
		id, _ := strconv.Atoi(header(r, idHeader))
		ids = append(ids, id)
	}
	return ids
}

// teamRecords are n input records of team, ids from first on.
func teamRecords(first, n int, team string) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = inputRecord(first+i, team)
	}
	return recs
}

// primeSample bounds the sample of a poll's lagging partitions' records, all of them
// together: each partition was sampled from its own first record on, so a poll of 600
// lagging partitions of 5 records each had every one of its 600 partitions' first
// record read (a review). The sample stays spread over the poll.
func TestPrimeSampleBoundsAPollOfManyPartitions(t *testing.T) {
	var got []*kgo.Record
	c := &Consumer{cfg: Config{Prime: func(_ context.Context, recs []*kgo.Record) { got = append(got, recs...) }}}
	var ws []work
	for i := range 600 {
		p := &partition{}
		p.primed.Store(true) // its first poll primed before: lagging, sampled
		recs := make([]*kgo.Record, 5)
		for j := range recs {
			recs[j] = &kgo.Record{Partition: int32(i), Offset: int64(j)}
		}
		ws = append(ws, work{p: p, recs: recs, next: 5, stable: 1000})
	}
	c.prime(t.Context(), ws)
	if len(got) > primeSample || len(got) < primeSample/2 {
		t.Errorf("%d records sampled of a poll of 3,000 over 600 lagging partitions, want at most %d and near it", len(got), primeSample)
	}
	if last := got[len(got)-1].Partition; last < 590 {
		t.Errorf("the sample ends at partition %d of 600: want it spread over the poll", last)
	}
}

// TestPrimeCutShortByARevokeExactlyOnce: exactly once, a revoke while a poll's keys are
// being read (Config.Prime) aborts the open transaction, whose records the partition's
// next owner routes: the read is cut short, as at least once a rebalance waiting for the
// poll cuts it, and the gate goes on. Before, Prime was given a context that never ended
// under exactly-once delivery: a read a slow Redis held went on for its whole bound
// after the revoke (here, until the test let it go), the gate routing nothing meanwhile.
func TestPrimeCutShortByARevokeExactlyOnce(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 40
	env := newEOSEnv(t, parts)
	entered := make(chan struct{})
	var once sync.Once
	ended := make(chan error, 1)
	env.ccfg.Prime = func(ctx context.Context, recs []*kgo.Record) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		close(entered)
		select {
		case <-ctx.Done():
			ended <- nil
		case <-time.After(30 * time.Second): // a read that takes its time
			ended <- errors.New("Prime's context did not end within 30s of its call")
		}
	}
	a := env.start(t, "a")
	prod := producer(t, env.cluster)
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%5))
	}
	produceAll(t, prod, recs)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first poll was never primed")
	}
	b := env.start(t, "b") // its join revokes a partition of a's
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Prime still reading keys 20s after the member joined")
	}
	out := collect(t, env.cluster, n, 30*time.Second, 300*time.Millisecond, readCommitted())
	waitCommitted(t, env.cluster, parts, 20*time.Second)
	b.stop(t)
	a.stop(t)
	if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
		t.Fatalf("read_committed: %d lost %v, %d duplicated %v", len(lost), head(lost), len(dup), head(dup))
	}
}
