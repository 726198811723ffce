// Watching Redis evict keys. The start-up check (internal/endpoints) reads each
// instance's maxmemory-policy once, when it first answers; a policy changed later (CONFIG
// SET) or a failover to a primary configured otherwise went unseen, and once Redis evicted
// keys nothing said so: an evicted counter lets its team past its limit, an evicted write
// sequence lets a resent batch count twice. Once a minute, with the clock check and the
// fleet count, Run reads each instance's INFO server, stats and memory (each primary of a
// cluster), adds the keys evicted since its last look to gate_redis_evicted_keys_total
// (by instance, or by primary in cluster mode), and warns when they rise or the policy
// becomes an evicting one.

package tick

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/throttle"
)

// evictionWarnInterval is how often, at most, the tick warns of one instance's evictions
// while they go on: a Redis at its maxmemory evicts every minute.
const evictionWarnInterval = 10 * time.Minute

// evictionWatch is Run's watch of Redis's evictions (watchEviction): the tick's own, or
// the gate's (Config.Evictions).
type evictionWatch struct {
	// mu guards every field: a cluster's primaries are looked at together
	// (ForEachMaster), and two rule sets' ticks share a gate's watch for a tick after a
	// reload.
	mu      sync.Mutex
	last    time.Time // the last look, on the clock check's wall clock
	nodes   map[evictionNode]*evictionSeen
	looked  []bool            // by instance: looked at before (a node first seen since is new)
	refused []bool            // by instance: a refused INFO was said
	warn    []*throttle.Every // by instance: the evictions' warnings
}

// Evictions is a gate's watch of Redis's evictions, shared by its successive rule sets'
// ticks (Config.Evictions): what each node had evicted at the last look, when that was,
// and the warnings' pace. A rules reload's new tick with a watch of its own looked first
// a minute after it started, and that look only noted each node's count: the keys Redis
// evicted in the minute or two about each reload were never counted nor warned of, nor
// a policy changed to an evicting one then, and a file edited every minute or so had
// nothing watched.
type Evictions struct{ w evictionWatch }

// NewEvictions returns a watch of evictions to share between a gate's ticks.
func NewEvictions() *Evictions { return &Evictions{} }

// evictionNode is one Redis server the watch looks at: an instance, or one primary of a
// cluster (its address).
type evictionNode struct {
	instance int
	node     string
}

// evictionSeen is what the last look at a node found.
type evictionSeen struct {
	runID    string
	at       time.Time
	evicted  int64 // evicted_keys
	evicting bool  // maxmemory set with a policy other than noeviction
}

// watchEviction looks at every instance once per clockCheckInterval, from a minute after
// the tick starts (with Config.Evictions, the gate's first tick; a retired tick leaves it
// to the new rules' tick), the instances together: one that hangs costs the others nothing. A refused INFO (an ACL without
// +info) is said once per instance, at info level, as the start-up check does; an
// unanswered one is the tick's to report.
func (t *Ticker) watchEviction(ctx context.Context) {
	if t.retired.Load() {
		// A reload replaced the rules: the new rules' tick looks, its metrics the ones
		// shown (a retired tick's count would be lost with its registry).
		return
	}
	w := t.evictionWatch
	if t.clockCheck.wall == nil {
		t.clockCheck.wall = clock.Real{}
	}
	now := t.clockCheck.wall.Now()
	w.mu.Lock()
	due := w.due(now, len(t.instances), t.clockCheck.wall)
	w.mu.Unlock()
	if !due {
		return
	}
	var wg sync.WaitGroup
	for i, c := range t.instances {
		wg.Go(func() {
			var seen atomic.Bool
			if cc, ok := c.(*redis.ClusterClient); ok {
				var mu sync.Mutex
				primaries := make(map[string]bool)
				_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
					addr := n.Options().Addr
					mu.Lock()
					primaries[addr] = true
					mu.Unlock()
					if t.lookForEviction(ctx, i, n, addr, now) {
						seen.Store(true)
					}
					return nil
				})
				t.forgetPrimaries(i, primaries)
			} else {
				seen.Store(t.lookForEviction(ctx, i, c, "", now))
			}
			if seen.Load() {
				w.mu.Lock()
				w.looked[i] = true
				w.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// forgetPrimaries deletes the evictions metric's series, and what the watch saw, of
// cluster instance i's primaries not among primaries (the slot map's at this look): a
// cluster's nodes change address over failovers and resharding, and each would otherwise
// keep its series for the process's life. No primary at all (no slot map) forgets none.
func (t *Ticker) forgetPrimaries(i int, primaries map[string]bool) {
	if len(primaries) == 0 {
		return
	}
	w := t.evictionWatch
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.nodes {
		if key.instance == i && key.node != "" && !primaries[key.node] {
			delete(w.nodes, key)
			t.m.evicted.DeleteLabelValues(key.node)
		}
	}
}

// due reports whether a look is due at now, and notes it as made: not at the watch's
// first call, which starts its minute (the start-up check, a new process, looked then;
// a cluster's look reloads the client's slot map), and then once per
// clockCheckInterval. w.mu held.
func (w *evictionWatch) due(now time.Time, instances int, wall clock.Clock) bool {
	if w.last.IsZero() {
		w.last = now
		return false
	}
	if now.Sub(w.last) < clockCheckInterval {
		return false
	}
	w.last = now
	if w.nodes == nil {
		w.nodes = make(map[evictionNode]*evictionSeen)
		w.looked = make([]bool, instances)
		w.refused = make([]bool, instances)
		w.warn = make([]*throttle.Every, instances)
		for i := range w.warn {
			w.warn[i] = throttle.NewEvery(evictionWarnInterval, wall)
		}
	}
	return true
}

// lookForEviction reads one node's INFO server, stats and memory, counts the keys it
// evicted since the last look and warns as watchEviction says. A node whose run_id
// changed is another process: one started since the last look (a restart, its
// evicted_keys counted from 0) has all of them counted, another (a failover to a
// replica) is only noted; evicted_keys under the last (CONFIG RESETSTAT) counts from 0.
// It reports whether the node answered. The node's count is labelled by its address, a
// cluster's primary, else by i: a cluster's whole count on one series hid the node that
// evicts; it starts at zero (so that a first eviction is an increase) from the first look.
func (t *Ticker) lookForEviction(ctx context.Context, i int, c redis.UniversalClient, node string, now time.Time) bool {
	label := cmp.Or(node, strconv.Itoa(i))
	t.m.evicted.WithLabelValues(label)
	cctx, cancel := context.WithTimeout(ctx, t.cfg.TickTimeout)
	defer cancel()
	pipe := c.Pipeline()
	srv, stats, mem := pipe.Info(cctx, "server"), pipe.Info(cctx, "stats"), pipe.Info(cctx, "memory")
	_, err := pipe.Exec(cctx)
	w := t.evictionWatch
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// Refused alone (NOPERM, renamed): said once, at info level, as at start. Any other
		// failure is the tick's to report: the same Redis.
		if timeRefused(err) && !w.refused[i] {
			w.refused[i] = true
			t.log.Info("redis: INFO refused; its evictions and maxmemory-policy are not watched (gate_redis_evicted_keys_total stays 0; grant the gate's Redis user +info to have them watched)",
				"instance", i, "node", node, "err", err)
		}
		return false
	}
	runID, uptime := infoValue(srv.Val(), "run_id"), infoValue(srv.Val(), "uptime_in_seconds")
	evicted, perr := strconv.ParseInt(infoValue(stats.Val(), "evicted_keys"), 10, 64)
	if perr != nil {
		return false // not a Redis that counts its evictions
	}
	policy, maxmemory := infoValue(mem.Val(), "maxmemory_policy"), infoValue(mem.Val(), "maxmemory")
	seen := &evictionSeen{runID: runID, at: now, evicted: evicted,
		evicting: maxmemory != "" && maxmemory != "0" && policy != "" && policy != "noeviction"}
	key := evictionNode{i, node}
	prev := w.nodes[key]
	w.nodes[key] = seen
	if prev == nil && !w.looked[i] {
		return true // the first look: the start-up check said what the policy is
	}
	if seen.evicting && (prev == nil || !prev.evicting) {
		t.log.Warn("redis may evict the gate's keys: its maxmemory-policy became an evicting one since the tick last looked (CONFIG SET, or a failover to a primary configured otherwise), and an evicted counter lets its team past its limit, an evicted write sequence lets a resent batch count twice; set maxmemory-policy noeviction (a full Redis then refuses writes, which the gate waits out)",
			"instance", i, "node", node, "maxmemory_policy", policy, "maxmemory", maxmemory)
	}
	if prev == nil {
		return true
	}
	var n int64
	switch up, _ := strconv.ParseFloat(uptime, 64); {
	case runID != prev.runID && time.Duration(up*float64(time.Second)) > now.Sub(prev.at):
		return true // another server, running before the last look: only noted
	case runID != prev.runID, evicted < prev.evicted:
		n = evicted // restarted, or its stats reset, since the last look
	default:
		n = evicted - prev.evicted
	}
	if n <= 0 {
		return true
	}
	t.m.evicted.WithLabelValues(label).Add(float64(n))
	if ok, quiet := w.warn[i].Allow(); ok {
		t.log.Warn("redis evicted keys: the gate's may be among them, an evicted counter letting its team past its limit, an evicted write sequence a resent batch count twice; set maxmemory-policy noeviction, or raise maxmemory (gate_redis_evicted_keys_total; logged at most every 10 minutes)",
			"instance", i, "node", node, "evicted", n, "maxmemory_policy", policy, "maxmemory", maxmemory, "warnings_unlogged", quiet)
	}
	return true
}

// infoValue is the value of name in an INFO reply ("" when absent).
func infoValue(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
