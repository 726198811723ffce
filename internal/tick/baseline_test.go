package tick

import (
	"context"
	"math"

	"github.com/redis/go-redis/v9"
)

// baselineWrites writes counts as the gate did before writeScript: INCRBY and EXPIRE per
// count, not safe to repeat. The benchmarks set it as Ticker.writes to measure the two side
// by side; it is bench code, so the binary does not carry it.
type baselineWrites struct {
	incrs map[*batch][]*redis.IntCmd // each queued batch's INCRBYs, until its result
}

func (w *baselineWrites) queue(ctx context.Context, t *Ticker, pipe redis.Pipeliner, b *batch) {
	if w.incrs == nil {
		w.incrs = map[*batch][]*redis.IntCmd{}
	}
	incrs := w.incrs[b][:0]
	for _, it := range b.items {
		key := t.key(it.k.lim, it.k.team, it.k.epoch)
		incrs = append(incrs, pipe.IncrBy(ctx, key, it.n))
		pipe.Expire(ctx, key, t.limits[it.k.lim].ttl)
	}
	w.incrs[b] = incrs
}

// result is batch.result for a batch queued by queue. Its writes carry no number, so it
// reports the lane as far ahead as can be: nothing looks lost.
func (w *baselineWrites) result(b *batch) (outcome, []int64, error) {
	incrs := w.incrs[b]
	delete(w.incrs, b)
	for _, c := range incrs {
		if err := c.Err(); err != nil {
			return outRefused, nil, err
		}
	}
	b.last = math.MaxInt64
	return outApplied, nil, nil
}
