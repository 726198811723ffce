// The Redis topologies (Mode) and the keys a team's state lives under in each. Every gate
// computes a team's keys alike, and within one key prefix a key is one team's counter,
// hold flag or profile, whatever the team's name. In cluster mode a team's keys share one
// slot (its shard's hash tag), so one command on one node reaches them all; standalone and
// sentinel keys are the same, so switching between the two keeps the counts. Redirects
// counts a cluster's MOVED, ASK and TRYAGAIN replies.

package tick

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
)

// Mode is the Redis topology the tick talks to.
type Mode string

// The topologies. Standalone is a list of independent instances over which teams are
// spread by InstanceFor; cluster and sentinel are one go-redis client each, which finds
// the right node (cluster) or the current primary (sentinel) itself.
const (
	ModeStandalone Mode = "standalone"
	ModeCluster    Mode = "cluster"
	ModeSentinel   Mode = "sentinel"
)

// KeyFor returns the Redis key of team's counter in epoch for the given topology: Key in
// standalone and sentinel mode (unchanged keys, so switching between the two keeps the
// counts), ClusterKey in cluster mode.
func KeyFor(m Mode, prefix, team string, epoch int64) string {
	if m == ModeCluster {
		return ClusterKey(prefix, team, epoch)
	}
	return Key(prefix, team, epoch)
}

// HoldKeyFor returns the key of team's hold flag (limit.HoldFlag) for the given topology:
// {prefix}:{team}:hold, or in cluster mode {prefix}:{sN}:{team}:hold, in the slot of the
// team's counters, so one pipeline to one node reads both. A counter's key ends in a
// number, a flag's in "hold": the two never meet, whatever the team.
func HoldKeyFor(m Mode, prefix, team string) string {
	return string(append(appendTeamKey(make([]byte, 0, len(prefix)+len(team)+16), m, prefix, team), ":hold"...))
}

// holdValue is a hold flag's value: since, last time over (unix ms) and threshold.
func holdValue(f limit.HoldFlag) string {
	b := strconv.AppendInt(nil, f.Since.UnixMilli(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, f.LastOver.UnixMilli(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, f.Threshold, 10)
	return string(b)
}

// parseHold reads a hold flag's value; false if it is not one.
func parseHold(team, v string) (limit.HoldFlag, bool) {
	a, rest, ok1 := strings.Cut(v, ":")
	b, c, ok2 := strings.Cut(rest, ":")
	since, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	thr, err3 := strconv.ParseInt(c, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil {
		return limit.HoldFlag{}, false
	}
	return limit.HoldFlag{Team: team, Since: time.UnixMilli(since), LastOver: time.UnixMilli(last), Threshold: thr}, true
}

// ClusterKey returns {prefix}:{sN}:{team}:{epoch}, where N is the team's shard
// (ClusterShard) between literal braces, so that Redis Cluster hashes only it: all keys of
// a shard share a slot, and one script writes, one MGET reads, many teams at once. The
// team follows the tag as it is: Redis hashes only the first {...}, and the epoch, a
// number, ends the key, so two teams never share a key. The prefix must not contain braces
// (Config checks), or its own '{' would start the tag.
func ClusterKey(prefix, team string, epoch int64) string {
	b := appendTeamKey(make([]byte, 0, len(prefix)+len(team)+32), ModeCluster, prefix, team)
	return string(strconv.AppendInt(append(b, ':'), epoch, 10))
}

// appendTeamKey appends the part every key of team's starts with: {prefix}:{team}, or in
// cluster mode {prefix}:{sN}:{team}, its shard's hash tag putting all of them in one slot.
// Outside cluster mode the team is written as appendTeam writes it.
func appendTeamKey(b []byte, m Mode, prefix, team string) []byte {
	b = append(b, prefix...)
	if m == ModeCluster {
		b = append(b, ":{s"...)
		b = strconv.AppendInt(b, int64(ClusterShard(team)), 10)
		b = append(b, '}')
		return append(append(b, ':'), team...)
	}
	return appendTeam(append(b, ':'), team)
}

// appendTeam appends team as a standalone or sentinel key holds it: as it is, but for a
// team that starts with 'w', digits and ':' ("w60:x"), written %77 in place of its 'w',
// one that starts with "rule:", written %72 in place of its 'r', and one that starts with
// %77, %72 or %25, written %25 in place of its '%'.
//
// GATE_LIMITS' further limits keep their keys under {prefix}:w{seconds} and the primary
// under {prefix}, so the primary's team "w60:x" spelt the 60-second limit's team x's keys
// that carry no epoch (its hold flag, its profile): held by one limit, x was held by the
// other. A rule's keys are under {prefix}:rule:{name}, which the primary's team
// "rule:{name}:x" spelt likewise (a fleet rolling out its first rules file runs both). No
// key of the primary's starts {prefix}:w{digits}: or {prefix}:rule: now, and the escape is
// one to one (a key starting %77, %72 or %25 is an escaped team's, any other is the team
// as it is). Cluster keys need none: their hash tag comes before the team, and a further
// limit's "w{seconds}" or a rule's "rule:{name}" before its tag. Every team of another
// form keeps the keys it always had.
func appendTeam(b []byte, team string) []byte {
	switch {
	case strings.HasPrefix(team, "%77") || strings.HasPrefix(team, "%72") || strings.HasPrefix(team, "%25"):
		return append(append(b, "%25"...), team[1:]...)
	case strings.HasPrefix(team, "rule:"):
		return append(append(b, "%72"...), team[1:]...)
	case len(team) > 2 && team[0] == 'w' && isDigit(team[1]):
		i := 2
		for i < len(team) && isDigit(team[i]) {
			i++
		}
		if i < len(team) && team[i] == ':' {
			return append(append(b, "%77"...), team[1:]...)
		}
	}
	return append(b, team...)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// ClusterShard returns team's shard in cluster mode, 0..ClusterShards-1: its FNV-1a hash
// modulo ClusterShards, which every gate computes alike.
func ClusterShard(team string) int {
	return int(fnv64a(team) % ClusterShards)
}

// Redirects counts a cluster client's MOVED and ASK replies, and the tick's TRYAGAINs,
// as gate_limiter_redis_redirects_total: one counter for the client's life. Its hook is
// added to each node client as go-redis creates it (OnNewNode), so only whoever watches
// the client first sees every node: a tick made later (a gate's next rule set) found its
// nodes made already and counted no redirect. Such ticks share the first's Redirects
// (Config.Redirects).
type Redirects struct{ c *prometheus.CounterVec }

// NewRedirects makes the counter, registered with reg when it is not nil.
func NewRedirects(reg prometheus.Registerer) (*Redirects, error) {
	r := &Redirects{c: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_limiter_redis_redirects_total",
		Help: "MOVED, ASK and TRYAGAIN replies from Redis Cluster (cluster mode), by kind (moved, ask, tryagain); the client follows MOVED and ASK, the next tick retries TRYAGAIN (a slot in migration)."}, []string{"kind"})}
	for _, k := range []string{"moved", "ask", "tryagain"} {
		r.c.WithLabelValues(k)
	}
	if reg != nil {
		if err := reg.Register(r.c); err != nil {
			return nil, fmt.Errorf("registering the redirect counter: %w", err)
		}
	}
	return r, nil
}

// Watch counts cc's redirects from now on: call it before cc makes its first node client.
func (r *Redirects) Watch(cc *redis.ClusterClient) {
	cc.OnNewNode(func(nc *redis.Client) { nc.AddHook(redirectHook{r.c}) })
}

// redirectHook counts MOVED and ASK replies in the cluster client's per-node pipelines.
// go-redis follows them itself (up to MaxRedirects) and exposes no counter, but a node
// client's pipeline hook sees each reply after it is read, before the redirect is retried.
type redirectHook struct{ c *prometheus.CounterVec }

func (redirectHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); e != nil {
				switch msg := e.Error(); {
				case strings.HasPrefix(msg, "MOVED "):
					h.c.WithLabelValues("moved").Inc()
				case strings.HasPrefix(msg, "ASK "):
					h.c.WithLabelValues("ask").Inc()
				}
			}
		}
		return err
	}
}

func (m Mode) valid() error {
	switch m {
	case ModeStandalone, ModeCluster, ModeSentinel:
		return nil
	}
	return fmt.Errorf("mode %q: want standalone, cluster or sentinel", string(m))
}

// ParseMode reads a Mode from its name: standalone, cluster or sentinel.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	return m, m.valid()
}

// CheckKeyPrefix reports a key prefix mode m cannot use: in cluster mode a brace in the
// prefix would start the keys' hash tag before the team's (see ClusterKey).
func CheckKeyPrefix(m Mode, prefix string) error {
	if m == ModeCluster && strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("key prefix %q: must not contain braces in cluster mode", prefix)
	}
	return nil
}
