package tick

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// stored returns what Redis holds as team's shared count in epoch under prefix, whatever
// the key layout: tests that check what reached Redis read it through here, so that a
// change of layout changes one function.
func stored(t testing.TB, rc redis.Cmdable, mode Mode, prefix, team string, epoch int64) int64 {
	t.Helper()
	key := KeyFor(mode, prefix, team, epoch)
	v, err := rc.Get(context.Background(), key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return v
}

// writeEveryTick, as a limiter's ColdWriteInterval, hands every team's counts to the tick on
// every tick: for tests about how writes reach Redis, whose teams are all cold.
const writeEveryTick = -1
