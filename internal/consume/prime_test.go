package consume

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
