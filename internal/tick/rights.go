// The tick's rights: whether a Redis user may run the commands the tick sends, asked
// before a gate is ready. A user that answers PING but may not run the write script
// (an ACL written before it, without +eval) has every tick refused for good: the gate's
// counts reach no other gate, and each limits alone. A refusal for the gate's login or
// rights is one no retry cures, so readiness waits for it to be lifted, as it does for a
// topic's ACL; any other failure (a full Redis, a replica, a timeout) the gate fails open
// through, and does not wait for.

package tick

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// rightsScript calls, on a key of its own, what the write script calls: a user without
// one of them is refused as the tick would be (NOPERM naming the command, or the key).
const rightsScript = `redis.call('SET', KEYS[1], '0', 'PX', ARGV[1])
redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('GET', KEYS[1])`

// rightsTTL is how long the probe's key lives: it is gone seconds after readiness.
const rightsTTL = 5 * time.Second

// ProbeRights runs on c the commands the tick sends (the write script's, MGET for reads,
// SET for hold flags) on the key {prefix}:probe:rights of each of prefixes (the gate's,
// and its counters' when they are another: {prefix}/bytes), which expires within
// seconds, and returns Redis's refusal of one for the gate's login or rights (NOAUTH,
// WRONGPASS, NOPERM: a command or the key pattern). It returns nil for any other
// outcome, answered or not: those the gate fails open through.
func ProbeRights(ctx context.Context, c redis.UniversalClient, prefixes ...string) error {
	for _, prefix := range prefixes {
		if err := probeRights(ctx, c, prefix); err != nil {
			return err
		}
	}
	return nil
}

func probeRights(ctx context.Context, c redis.UniversalClient, prefix string) error {
	key := prefix + ":probe:rights"
	ttl := rightsTTL.Milliseconds()
	p := c.Pipeline()
	// Named by what they are for the tick: a refusal inside the script (Redis 7.0)
	// does not say which call it was.
	cmds := []struct {
		what string
		cmd  redis.Cmder
	}{
		{"EVAL of the write script's calls (GET, SET, INCRBY, PEXPIRE on " + key + ")", p.Eval(ctx, rightsScript, []string{key}, ttl)},
		{"MGET (reads)", p.MGet(ctx, key)},
		{"SET (hold flags)", p.Set(ctx, key, "1", rightsTTL)},
	}
	_, _ = p.Exec(ctx)
	for _, c := range cmds {
		if err := c.cmd.Err(); err != nil && loginRefusal(err) {
			return fmt.Errorf("%s: %w", c.what, err)
		}
	}
	return nil
}
