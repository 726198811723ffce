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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// WRONGPASS, NOPERM: a command or the key pattern), or of a command the server does not
// have (renamed or disabled: ERR unknown command). It returns nil for any other outcome,
// answered or not: those the gate fails open through.
//
// On a Redis Cluster it asks every primary, with a key in each one's slots
// ({prefix}:probe:rights:{TAG}), and names the node refusing: a cluster keeps its ACLs per
// node (ACL SETUSER is not passed on), so a grant added by hand on some primaries only
// left the tick's writes to the others refused, their teams never shared, where one key
// asked one node.
func ProbeRights(ctx context.Context, c redis.UniversalClient, prefixes ...string) error {
	tags, nodes := []string{""}, []string{""}
	if cc, ok := c.(*redis.ClusterClient); ok {
		if t, n := primaryTags(ctx, cc); len(t) > 0 {
			tags, nodes = t, n
		}
	}
	for _, prefix := range prefixes {
		for i, tag := range tags {
			if err := probeRights(ctx, c, prefix+":probe:rights"+tag); err != nil {
				if nodes[i] != "" {
					return fmt.Errorf("primary %s: %w", nodes[i], err)
				}
				return err
			}
		}
	}
	return nil
}

// primaryTags returns a hash tag ":{N}" in the slots of each primary of cc, and the
// primaries' addresses, found by the cluster client's own map of the slots (MasterForKey,
// as the fleet count finds its key's node); none when the primaries cannot be listed
// (the probe then asks one key, as elsewhere).
func primaryTags(ctx context.Context, cc *redis.ClusterClient) (tags, nodes []string) {
	var mu sync.Mutex
	masters := 0
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		mu.Lock()
		masters++
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, nil
	}
	// 16,384 tags reach every slot at least once or so; a primary without a slot has none
	// to probe.
	for n := 0; len(nodes) < masters && n < 1<<16; n++ {
		tag := ":{" + strconv.Itoa(n) + "}"
		node, err := cc.MasterForKey(ctx, tag)
		if err != nil {
			return nil, nil
		}
		if addr := node.Options().Addr; !slices.Contains(nodes, addr) {
			tags, nodes = append(tags, tag), append(nodes, addr)
		}
	}
	return tags, nodes
}

func probeRights(ctx context.Context, c redis.UniversalClient, key string) error {
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
		err := c.cmd.Err()
		switch {
		case err == nil:
		case loginRefusal(err):
			if call := scriptCall(rightsScript, err); call != "" {
				// Redis 7.0 names no command of a script it refused one inside.
				return fmt.Errorf("%s: %w (the call refused: %s, +%s missing)", c.what, err, call, strings.ToLower(call))
			}
			return fmt.Errorf("%s: %w", c.what, err)
		case commandMissing(err):
			return fmt.Errorf("%s: %w (%s)", c.what, err, commandMissingHint)
		}
	}
	return nil
}

// scriptLine finds the line of a script a refusal inside it names ("… script: …, on
// @user_script:3."); callName the command a line calls.
var (
	scriptLine = regexp.MustCompile(`@user_script:(\d+)`)
	callName   = regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)
)

// scriptCall returns the command script calls on the line err, a refusal of a call
// inside it, names, or "" when err names no line of it or the line calls none.
func scriptCall(script string, err error) string {
	m := scriptLine.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(script, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	if c := callName.FindStringSubmatch(lines[n-1]); c != nil {
		return strings.ToUpper(c[1])
	}
	return ""
}
