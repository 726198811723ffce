package gate

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

const fleetRules = `rules:
  - name: team-user
    key: json:team_id+distinct_id
    missing: skip
    limits: [1m:100]
  - name: team
    key: json:team_id
    limits: [1m:10000, 1h:100000]
`

// Two gates with the same rules enforce each rule fleet-wide through one Redis, standalone
// or a 3-node Redis Cluster: what one gate counted for a user, the other reads and diverts
// on; every rule's keys are its own ({prefix}:rule:{name}, a further window's
// /w{seconds}), and the team rule, which the runaway user's diverted records do not reach,
// diverts nobody.
func TestRulesFleet(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		testRulesFleet(t, map[string]string{"GATE_REDIS_URLS": srv.URL()}, func(ctx context.Context, pattern string) ([]string, error) {
			return rdb.Keys(ctx, pattern).Result()
		})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		testRulesFleet(t, map[string]string{"GATE_REDIS_URLS": strings.Join(c.URLs(), ","), "GATE_REDIS_MODE": "cluster"}, func(ctx context.Context, pattern string) ([]string, error) {
			var all []string
			for _, u := range c.URLs() {
				opt, err := redis.ParseURL(u)
				if err != nil {
					return nil, err
				}
				cl := redis.NewClient(opt)
				keys, err := cl.Keys(ctx, pattern).Result()
				cl.Close()
				if err != nil {
					return nil, err
				}
				all = append(all, keys...)
			}
			return all, nil
		})
	})
}

func testRulesFleet(t *testing.T, env map[string]string, keysOf func(context.Context, string) ([]string, error)) {
	env["GATE_KAFKA_BROKERS"] = "127.0.0.1:1"
	env["GATE_REDIS_PREFIX"] = "fleet"
	cfg := load(t, env)
	cluster := env["GATE_REDIS_MODE"] == "cluster"
	set, err := rules.Parse("rules.yaml", []byte(fleetRules), cfg.RulesOptions())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	gates := make([]*Gate, 2)
	for i := range gates {
		g, err := New(cfg, log, Options{Rules: set, Writer: fmt.Sprintf("gate-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Consumer.Close(); g.CloseRedis(log) })
		gates[i] = g
		if rs, gen := g.CurrentRules(), g.gen.Load(); len(rs) != 2 || len(rs[1].Lims) != 2 || len(gen.overrides) != 2 || g.Lim != rs[0].Lims[0] || g.Overrides != nil {
			t.Fatalf("gate %d: rules %+v, overrides %d", i, rs, len(gen.overrides))
		}
	}
	if got := gates[0].CurrentRules()[1].KeyPrefixes; !slices.Equal(got, []string{"fleet:rule:team", "fleet:rule:team/w3600"}) {
		t.Errorf("team rule's key prefixes %v", got)
	}
	ctx := context.Background()
	route1 := func(g *Gate, user string) string {
		rec := &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t1","distinct_id":%q}`, user)}
		out, _ := g.Router.Route(time.Now(), rec, nil)
		return out.Topic
	}
	tick := func(g *Gate) {
		t.Helper()
		if r := g.Ticker.Tick(ctx); r.Errors != 0 || r.FailedReads != 0 {
			t.Fatalf("tick: %+v", r)
		}
	}
	// Gate 0 sees 80 of the runaway's records, all under the user rule's 100, and writes
	// them; gate 1 meets the user, reads the fleet's count and diverts past 100. The
	// windows are the wall clock's minutes, and a minute turning in between weighs the
	// 81 down as the new minute goes on (some 4 s in, more than 24 pass): so the records
	// go in with at least 30 s of the minute left, as the rotation test's do.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 30*time.Second {
		time.Sleep(left) // a wall-clock instant, not a condition: the next minute's start
	}
	for range 80 {
		if topic := route1(gates[0], "runaway"); topic != cfg.AcceptedTopic {
			t.Fatalf("gate 0: runaway's record to %s before its limit", topic)
		}
	}
	tick(gates[0])
	route1(gates[1], "runaway")
	tick(gates[1]) // the first sweep reads the new key from Redis
	topics := map[string]int{}
	for range 40 {
		topics[route1(gates[1], "runaway")]++
	}
	// 19 reach the user's 100; a slow run lets the window drain a few more in.
	if a := topics[cfg.AcceptedTopic]; a < 19 || a > 24 || topics[cfg.OverflowTopic] != 40-a {
		t.Errorf("gate 1, 40 more of the runaway's records after the fleet's 81: %v, want those past 100 diverted", topics)
	}
	t.Logf("gate 1, the runaway's 40 records after the fleet's 81: %v", topics)
	for i := range 20 {
		if topic := route1(gates[1], fmt.Sprintf("user-%d", i)); topic != cfg.AcceptedTopic {
			t.Errorf("another user of the team to %s", topic)
		}
	}
	// A live override in the user rule's own hash lowers one user's limit, not the team's.
	if _, err := overrides.SetWithin(ctx, gates[0].Clients[0], "fleet:rule:team-user:overrides", "t1:user-0", 2, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := gates[1].gen.Load().overrides[0].Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := route1(gates[1], "user-0"), route1(gates[1], "user-0"); a != cfg.AcceptedTopic || b != cfg.OverflowTopic {
		t.Errorf("user-0 (1 record before), 2 more under its override of 2: %s, %s; want the 2nd accepted, the 3rd diverted", a, b)
	}
	if topic := route1(gates[1], "user-1"); topic != cfg.AcceptedTopic {
		t.Errorf("user-1 without an override: %s", topic)
	}
	tick(gates[0])
	tick(gates[1])
	keys, err := keysOf(ctx, "fleet:*")
	if err != nil {
		t.Fatal(err)
	}
	// In cluster mode a key carries its shard's hash tag after the prefix: {prefix}:{sN}:{key}.
	tag := ""
	if cluster {
		tag = `\{s\d+\}:`
	}
	var user, team, hour int
	for _, k := range keys {
		switch {
		case regexp.MustCompile(`^fleet:rule:team-user:` + tag + `t1:runaway:`).MatchString(k):
			user++
		case regexp.MustCompile(`^fleet:rule:team/w3600:` + tag + `t1:`).MatchString(k):
			hour++
		case regexp.MustCompile(`^fleet:rule:team:` + tag + `t1:`).MatchString(k):
			team++
		case regexp.MustCompile(`^fleet:` + tag + `t1:`).MatchString(k):
			t.Errorf("key %s: the gate without rules' layout", k)
		}
	}
	if user == 0 || team == 0 || hour == 0 {
		t.Errorf("keys %v: want the user rule's, the team rule's and its hour window's", keys)
	}
}

// A gate with GATE_RULES_FILE puts an edit in use: a raised threshold lets a diverted
// user through, judged by the fleet's count in Redis (the old generation flushed its
// counts when it stopped); a bad edit keeps the rules in use and is counted; a renamed
// rule counts under its new keys.
func TestRulesFileReload(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(s string) { t.Helper(); writeRules(t, path, s) }
	userRule := func(name string, threshold int) string {
		return fmt.Sprintf("rules:\n  - {name: %s, key: json:team_id+distinct_id, limits: [1m:%d]}\n", name, threshold)
	}
	write(userRule("user", 5))
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	g := startReloading(t, cfg, "reload-test")
	ctx := context.Background()

	router := switchRouter{g}
	send := func(n int) map[string]int {
		topics := map[string]int{}
		for range n {
			var out kgo.Record
			router.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1","distinct_id":"u1"}`)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	if got := send(10); got[cfg.AcceptedTopic] != 5 || got[cfg.OverflowTopic] != 5 {
		t.Fatalf("under 5 a minute: %v", got)
	}
	first := g.gen.Load()
	write(userRule("user", 1000))
	waitFor(t, "the edit to be in use", func() bool { return g.gen.Load() != first })
	// The rule sets' ticks share the gate's fleet count (tick.Config.Fleet).
	if f := g.gen.Load().ticker.Config().Fleet; f == nil || f != first.ticker.Config().Fleet {
		t.Errorf("the reloaded rules' tick counts the fleet on its own (%p, the first's %p)", f, first.ticker.Config().Fleet)
	}
	// The first generation's 10 reach Redis by its final flush, a tick after the swap.
	rdb := srv.Client(t)
	sum := func(pattern string) int {
		keys, err := rdb.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range keys {
			v, err := rdb.Get(ctx, k).Int()
			if err == nil {
				n += v
			}
		}
		return n
	}
	waitFor(t, "the old generation's counts in Redis", func() bool { return sum("gate:rule:user:t1:u1:*") >= 10 })
	// The key, held under 5, keeps its hold into the new rules (limit.InheritState), as a
	// raised override does: their first sweep releases it, under the new release level.
	// Sent before that sweep, some of the 10 went to overflow (a CI run: 8).
	waitTicks(t, g.gen.Load(), 2)
	if got := send(10); got[cfg.AcceptedTopic] != 10 {
		t.Errorf("under 1000 a minute: %v", got)
	}

	second := g.gen.Load()
	write("rules:\n  - {name: user, key: json:team_id+distinct_id, limits: [1m:zero]}\n")
	waitFor(t, "the bad edit to be counted", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "error") == 1
	})
	if g.gen.Load() != second {
		t.Fatal("a bad edit replaced the rules")
	}
	write(userRule("user-v2", 3))
	waitFor(t, "the renamed rule to be in use", func() bool { return g.gen.Load() != second })
	if got := send(5); got[cfg.AcceptedTopic] != 3 {
		t.Errorf("the renamed rule, 3 a minute under new keys: %v", got)
	}
	if rs := g.CurrentRules(); len(rs) != 1 || rs[0].Name != "user-v2" || rs[0].KeyPrefixes[0] != "gate:rule:user-v2" {
		t.Errorf("rules in use: %+v", rs)
	}
}

// A rules gate on Redis Cluster counts the redirects of its ticks after a reload too. The
// cluster client's hook is added to a node client as go-redis makes it; the first rule
// set's tick made them all, so a later set's tick, which added a hook of its own for new
// nodes only, counted no MOVED: gate_limiter_redis_redirects_total stopped at the first
// reload. The counter is now the client's, for its life.
func TestRulesReloadKeepsCountingRedirects(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(threshold int) {
		t.Helper()
		writeRules(t, path, fmt.Sprintf("rules:\n  - {name: team, key: json:team_id, limits: [1m:%d]}\n", threshold))
	}
	write(1000)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    strings.Join(c.URLs(), ","),
		"GATE_REDIS_MODE":    "cluster",
		"GATE_RULES_FILE":    path,
	})
	g := startReloading(t, cfg, "redirects-test")
	ctx := context.Background()
	// A team's records, enough that it is no cold team (GATE_COLD_WRITE_INTERVAL, by
	// default the window): one record would be written at the limiter's first sweep only,
	// and after it at the end of the window, not within the test's wait (in CI the second
	// rule set's first sweep came before the record, and no MOVED was met in 30 s).
	send := func(team string) {
		var out kgo.Record
		for range 40 { // over 0.5% of 2000 waiting: written at the next sweep
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":%q}`, team)}, &route.Scratch{}, &out)
		}
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Primaries[0].Addr()}})
	defer rdb.Close()
	written := func(team string) bool {
		var keys atomic.Int64 // ForEachMaster asks the primaries at once
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			ks, err := n.Keys(ctx, "gate:rule:team:*:"+team+":*").Result()
			keys.Add(int64(len(ks)))
			return err
		})
		return keys.Load() > 0
	}
	// The first rule set's tick writes, and so makes the node clients.
	send("t1")
	waitFor(t, "t1's count in Redis", func() bool { return written("t1") })
	first := g.gen.Load()
	write(2000)
	waitFor(t, "the edit to be in use", func() bool { return g.gen.Load() != first })

	// A team of another slot, none of whose keys exist yet: the slot moves with no key
	// to migrate, and the client's slot map is then stale for it.
	t2 := "t2"
	for i := 3; tick.ClusterShard(t2) == tick.ClusterShard("t1"); i++ {
		t2 = fmt.Sprintf("t%d", i)
	}
	key := tick.ClusterKey("gate:rule:team", t2, 0)
	to := c.Primaries[0]
	if c.Owner(t, key) == to {
		to = c.Primaries[1]
	}
	c.MoveEmptySlot(t, key, to)
	send(t2)
	waitFor(t, t2+"'s count in Redis", func() bool { return written(t2) })
	if n := labelValue(t, g, "gate_limiter_redis_redirects_total", "kind", "moved"); n < 1 {
		t.Errorf("%s written to the slot's new owner with %v MOVED counted, want 1 or more", t2, n)
	}
}

// labelValue is the value of the counter name{label=value} on g's registry (0: none).
func labelValue(t *testing.T, g *Gate, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == name && l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// writeRules replaces the rules file at path with text in one rename, as a ConfigMap's
// update does, so that a reload never reads it half written.
func writeRules(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rulesConfig is the configuration of a gate with the rules file text, Redis at
// redisURL and a broker it never reaches.
func rulesConfig(t *testing.T, redisURL, text string) config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, text)
	return load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    redisURL,
		"GATE_RULES_FILE":    path,
	})
}

// startReloading builds a gate of cfg (its rules file read again every 50 ms) and runs its
// tick until the test ends.
func startReloading(t *testing.T, cfg config.Config, writer string) *Gate {
	t.Helper()
	g, _ := startReloadingLogged(t, cfg, writer)
	return g
}

// startReloadingLogged is startReloading, returning the gate's log too (text lines).
func startReloadingLogged(t *testing.T, cfg config.Config, writer string) (*Gate, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	g, err := New(cfg, log, Options{Writer: writer, RulesReload: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.RunTick(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.Consumer.Close(); g.CloseRedis(log) })
	return g, logs
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// A team found rotating identities stays so across a reload that leaves its rule
// unchanged (an unrelated rule added): its fresh keys keep going where on_cardinality
// says, not accepted until the new limiter finds it again, 1.5 × max_keys keys later.
func TestRulesReloadKeepsRotatingTeam(t *testing.T) {
	t.Parallel()
	g, cfg, send := rotatingTeamReload(t, userRule(50)+"  - {name: ev, key: json:event, missing: skip, limits: [1m:100]}\n")
	got := send(60)
	t.Logf("after the reload, 60 fresh keys of t1: %v; rotating teams %v", got, g.CurrentRules()[0].Lims[0].Rotating())
	if got[cfg.AcceptedTopic] != 0 {
		t.Errorf("a rotating team after a reload that left its rule unchanged: %d of 60 fresh keys accepted, want all to overflow (on_cardinality: overflow)", got[cfg.AcceptedTopic])
	}
}

// A reload raising a rule's max_keys over a rotating team's keys lets the team through at
// once: the operator raised the bound for it, and its rotation, found under the old bound,
// would otherwise last until the window ends (a day, with a 1d window).
func TestRulesReloadRaisingMaxKeysReleasesTeam(t *testing.T) {
	t.Parallel()
	g, cfg, send := rotatingTeamReload(t, userRule(100_000))
	got := send(60)
	if got[cfg.AcceptedTopic] != 60 {
		t.Errorf("after max_keys 50 -> 100000, 60 fresh keys of a team of ~600: %v, want all accepted; rotating teams %v", got, g.CurrentRules()[0].Lims[0].Rotating())
	}
}

// userRule is a rules file of one per-user rule bounding each team's keys to maxKeys.
func userRule(maxKeys int) string {
	return fmt.Sprintf("rules:\n  - {name: user, key: json:team_id+distinct_id, missing: skip, max_keys: %d, on_cardinality: overflow, limits: [1m:1000]}\n", maxKeys)
}

// rotatingTeamReload starts a reloading gate with userRule(50), has team t1 found rotating
// identities, then reloads the rules file edit and returns the gate, its config and send,
// which routes n records of t1, each a fresh key, and counts them by output topic.
func rotatingTeamReload(t *testing.T, edit string) (*Gate, config.Config, func(n int) map[string]int) {
	t.Helper()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, userRule(50))
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	g := startReloading(t, cfg, "rotation")
	id := 0
	send := func(n int) map[string]int {
		topics := map[string]int{}
		for range n {
			id++
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t1","distinct_id":"u%d"}`, id)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	send(500)
	waitFor(t, "t1 found rotating", func() bool { return len(g.CurrentRules()[0].Lims[0].Rotating()) == 1 })
	if got := send(20); got[cfg.OverflowTopic] != 20 {
		t.Fatalf("a rotating team's fresh keys before the reload: %v, want all to overflow", got)
	}
	first := g.gen.Load()
	writeRules(t, path, edit)
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	return g, cfg, send
}

// A reloaded rules file naming a rule topic the cluster does not have is refused as a bad
// file is, through the gate's own check (Consumer.CheckTopics, not a stand-in): the rules
// in use stay and the refusal is counted; the same rule naming a topic that exists is
// put in use.
func TestRulesReloadNamingMissingTopicRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, "events", "events_accepted", "events_overflow", "events_dead_letter", "merges"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n"
	writeRules(t, path, team)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(kc.ListenAddrs(), ","),
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	checks := topicChecks(kc, "no-such-topic")
	g, logs := startReloadingLogged(t, cfg, "reload-topic-test")
	first := g.gen.Load()

	const merges = "  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:no-such-topic'}"
	writeRules(t, path, team+merges+"\n")
	waitFor(t, "the edit naming a missing topic to be refused", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "error") == 1
	})
	waitChecks(t, checks, 3) // a few more reads: still refused, counted once
	if g.gen.Load() != first {
		t.Fatalf("a rules file naming a missing topic was put in use: rules %+v", g.CurrentRules())
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "error"); got != 1 {
		t.Errorf("the refusal counted %v times, want once", got)
	}
	// Said as a parse problem is: the file, the action's line and column, the rule.
	at := fmt.Sprintf(`%s:3:%d: rules[1] \"merges\".action: a rule's topic cannot take the gate's records: topic \"no-such-topic\" does not exist`,
		path, strings.Index(merges, "'topic:")+1)
	if n := strings.Count(logs.String(), "rules file changed but cannot be used"); n != 1 || !strings.Contains(logs.String(), at) {
		t.Errorf("%d refusal lines, want one saying %s:\n%s", n, at, logs.String())
	}

	const inUse = "  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n"
	writeRules(t, path, team+inUse)
	waitFor(t, "the edit naming an existing topic to be in use", func() bool { return g.gen.Load() != first })
	if rs := g.CurrentRules(); len(rs) != 2 || rs[1].Name != "merges" {
		t.Errorf("rules in use: %+v", rs)
	}

	// The topic in use lost: an edit of another rule is put in use all the same (the
	// loss is the topic watch's, which sends the rule's records to overflow). It was
	// refused for the topic, and every edit with it until the topic came back: a limit
	// raised mid-incident too (a reviewer's run).
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if rs, err := kadm.NewClient(cl).DeleteTopics(t.Context(), "merges"); err != nil || rs.Error() != nil {
		t.Fatalf("deleting topic merges: %v %v", err, rs.Error())
	}
	inUseGen := g.gen.Load()
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:2000]}\n"+inUse)
	waitFor(t, "the edit of another rule to be in use while the rule topic in use is lost", func() bool { return g.gen.Load() != inUseGen })
	if rs := g.CurrentRules(); len(rs) != 2 || rs[0].Lims[0].Config().Threshold != 2000 {
		t.Errorf("rules in use: %+v", rs)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "error"); got != 1 {
		t.Errorf("refusals counted %v, want still the one naming no-such-topic", got)
	}
}

// A gate starting with a rules file whose rule names a topic the cluster does not have
// is not ready, and its problem names the rule and where the file names the topic, as a
// reload's refusal does: it said only `topic "no-such-topic" does not exist`, and the
// operator had to search the file for the rule (a reviewer's run).
func TestRulesStartNamingMissingTopicSaysWhichRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, "events", "events_accepted", "events_overflow", "events_dead_letter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const merges = "  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:no-such-topic'}"
	writeRules(t, path, teamRule+merges+"\n")
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(kc.ListenAddrs(), ","),
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	log := slog.New(slog.DiscardHandler)
	g, err := New(cfg, log, Options{Writer: "start-topic-test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Consumer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.CloseRedis(log) })
	want := fmt.Sprintf(`topic "no-such-topic" does not exist: create it (the gate does not) (the topic of %s:3:%d: rules[1] "merges".action)`,
		path, strings.Index(merges, "'topic:")+1)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		said := strings.Join(g.Consumer.NotReady(), "; ")
		if strings.Contains(said, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready for %q after 30s, want it saying %q", said, want)
		}
	}
}

// topicChecks counts the gate's checks of topic: the Metadata requests naming it, which
// only Consumer.CheckTopics sends for a topic no rule in use names, once a read of a
// rules file naming it (a refused edit is read, parsed and checked again at every read).
func topicChecks(kc *kfake.Cluster, topic string) *atomic.Int64 {
	return faulttest.RequestsCounted(kc, kmsg.Metadata, func(req kmsg.Request) bool {
		return slices.ContainsFunc(req.(*kmsg.MetadataRequest).Topics, func(rt kmsg.MetadataRequestTopic) bool { return rt.Topic != nil && *rt.Topic == topic })
	})
}

// waitChecks waits for more checks counted by checks (topicChecks), from now: a test
// that a refused edit stays refused, counted and logged once, over reads that happened,
// not over a sleep a loaded machine may pass with none.
func waitChecks(t *testing.T, checks *atomic.Int64, more int64) {
	t.Helper()
	from := checks.Load()
	waitFor(t, fmt.Sprintf("%d more checks of the rule's topic", more), func() bool { return checks.Load() >= from+more })
}

// teamRule is the one-rule file the topic-check tests start from.
const teamRule = "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n"

// unansweredTopicGate is a reloading gate on teamRule (file path) whose Kafka leaves every
// topic check of the topic "merges" unanswered (its metadata request times out, as in a
// broker's brief outage) while down holds, which it does at first.
func unansweredTopicGate(t *testing.T, name string) (*Gate, string, *atomic.Bool) {
	t.Helper()
	srv := redistest.Start(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, "events", "events_accepted", "events_overflow", "events_dead_letter", "merges"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	down := new(atomic.Bool)
	down.Store(true)
	kc.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		m := req.(*kmsg.MetadataRequest)
		asksMerges := slices.ContainsFunc(m.Topics, func(rt kmsg.MetadataRequestTopic) bool { return rt.Topic != nil && *rt.Topic == "merges" })
		// Handled without an answer: the gate's request times out.
		return nil, nil, down.Load() && asksMerges && m.IncludeTopicAuthorizedOperations
	})
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, teamRule)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(kc.ListenAddrs(), ","),
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	return startReloading(t, cfg, name), path, down
}

// A reloaded rules file whose rule topic Kafka could not be asked about (its metadata
// request timing out, as in a broker's brief outage) is neither refused nor taken: it is
// not counted invalid and gate_rules_file_valid stays 1 (no GateRulesFileInvalid for a
// good file), it is counted unchecked once, and once Kafka answers it is put in use
// without another edit.
func TestRulesReloadTopicCheckUnansweredNotInvalid(t *testing.T) {
	t.Parallel()
	g, path, down := unansweredTopicGate(t, "reload-unanswered-test")
	first := g.gen.Load()

	writeRules(t, path, teamRule+"  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n")
	waitFor(t, "the edit's topic check to end", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "error")+labelValue(t, g, "gate_rules_loads_total", "result", "unchecked") > 0
	})
	if g.gen.Load() != first {
		t.Fatal("a rules file whose topic check could not be made was put in use")
	}
	if got, valid := labelValue(t, g, "gate_rules_loads_total", "result", "error"), gaugeValue(t, g, "gate_rules_file_valid"); got != 0 || valid != 1 {
		t.Errorf("a valid file whose topic check timed out: counted invalid %v times, gate_rules_file_valid %v; want 0 and 1", got, valid)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "unchecked"); got != 1 {
		t.Errorf("unchecked counted %v, want 1", got)
	}

	down.Store(false)
	waitFor(t, "the edit in use once Kafka answers", func() bool { return g.gen.Load() != first })
	if rs := g.CurrentRules(); len(rs) != 2 || rs[1].Name != "merges" {
		t.Errorf("rules in use: %+v", rs)
	}
}

// A rules file refused (GateRulesFileInvalid firing) and then fixed while Kafka cannot be
// asked about the fixed file's rule topics is no longer invalid: gate_rules_file_valid
// goes back to 1 as the file parses, the alert clears, and what is pending (the topic
// check) is counted unchecked and logged; once Kafka answers the file is put in use.
// Before, the gauge stayed 0 until Kafka answered, the alert firing for a fixed file.
func TestRulesReloadFixedFileTopicCheckUnansweredClearsInvalid(t *testing.T) {
	t.Parallel()
	g, path, down := unansweredTopicGate(t, "reload-fixed-unanswered-test")
	first := g.gen.Load()

	writeRules(t, path, teamRule+"  - {name: merges, key: json:team_id, limits: [1m:zero], action: 'topic:merges'}\n")
	waitFor(t, "the bad edit to be refused", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "error") == 1 && gaugeValue(t, g, "gate_rules_file_valid") == 0
	})

	writeRules(t, path, teamRule+"  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n")
	waitFor(t, "the fixed file's topic check to end unanswered", func() bool {
		return labelValue(t, g, "gate_rules_loads_total", "result", "unchecked") == 1
	})
	if g.gen.Load() != first {
		t.Fatal("a rules file whose topic check could not be made was put in use")
	}
	if got, valid := labelValue(t, g, "gate_rules_loads_total", "result", "error"), gaugeValue(t, g, "gate_rules_file_valid"); got != 1 || valid != 1 {
		t.Errorf("the fixed file, its topic check unanswered: counted invalid %v times, gate_rules_file_valid %v; want 1 (the bad edit) and 1", got, valid)
	}

	down.Store(false)
	waitFor(t, "the fixed file in use once Kafka answers", func() bool { return g.gen.Load() != first })
	if rs := g.CurrentRules(); len(rs) != 2 || rs[1].Name != "merges" {
		t.Errorf("rules in use: %+v", rs)
	}
	if valid := gaugeValue(t, g, "gate_rules_file_valid"); valid != 1 {
		t.Errorf("gate_rules_file_valid %v once the fixed file is in use, want 1", valid)
	}
}

// gaugeValue is the value of the unlabelled gauge name on g's registry (-1: none).
func gaugeValue(t *testing.T, g *Gate, name string) float64 {
	t.Helper()
	mfs, err := g.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// A rule whose cost changes (bytes to events) under the same name starts its counts
// afresh, as one whose windows change does: its keys differ by unit. Read in the new unit,
// the bytes it had counted made the team thousands of events over its limit, diverted (and
// held) for up to two windows.
func TestRulesReloadCostChangeStartsCountsAfresh(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, cost: bytes, limits: [1m:100000]}\n")
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	})
	g := startReloading(t, cfg, "cost-test")
	ctx := context.Background()
	send := func(n int) map[string]int {
		topics := map[string]int{}
		for range n {
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1","distinct_id":"u1"}`)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	if got := send(100); got[cfg.AcceptedTopic] != 100 { // 3,500 bytes of 100,000
		t.Fatalf("under 100,000 bytes a minute: %v", got)
	}
	first := g.gen.Load()
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n")
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	rdb := srv.Client(t)
	// The first generation's 3,500 bytes reach Redis by its final flush, a tick after the
	// swap, wherever its keys are.
	waitFor(t, "the bytes counted in Redis", func() bool {
		keys, err := rdb.Keys(ctx, "gate:rule:team*:t1:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range keys {
			if v, err := rdb.Get(ctx, k).Int(); err == nil {
				n += v
			}
		}
		return n >= 3500
	})
	send(20) // at its floor (1% of 1,000) or more: read at the next sweep
	lim := g.CurrentRules()[0].Lims[0]
	waitFor(t, "the events rule to read t1 from Redis", func() bool {
		s, ok := lim.Snapshot(time.Now(), "t1")
		return ok && !s.ReadAt.IsZero()
	})
	if got := send(100); got[cfg.AcceptedTopic] != 100 {
		s, _ := lim.Snapshot(time.Now(), "t1")
		t.Errorf("120 events under 1,000 a minute, after 3,500 bytes under the rule's bytes cost: %v (level %.0f); want all accepted", got, s.Level)
	}
	if rs := g.CurrentRules(); rs[0].KeyPrefixes[0] != "gate:rule:team" {
		t.Errorf("an events rule's keys: %v, want gate:rule:team as ever", rs[0].KeyPrefixes)
	}
}

// A rule's further limit whose floor is 0 (10s:100: 1% of it is one record, under the
// sketch's two) caches every key, and so, once the primary limit has found a team rotating
// identities and stopped caching its keys, cached and wrote to Redis each of its fresh
// keys still, one a record (PostHog #83004 on the rule's second limit): 2,000 more here.
// Such keys stay in its sketch while the team rotates, as under a floor; the primary's
// on_cardinality decides their records.
func TestRulesFurtherLimitKeepsRotatingKeysOutOfTheCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := rulesConfig(t, srv.URL(), "rules:\n  - {name: user, key: json:team_id+distinct_id, missing: skip, max_keys: 50, on_cardinality: overflow, limits: [1m:1000, 10s:100]}\n")
	g := startReloading(t, cfg, "further")
	id := 0
	send := func(n int) map[string]int {
		topics := map[string]int{}
		for range n {
			id++
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t1","distinct_id":"u%d"}`, id)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	// Found rotating by a sweep (a tick) of the window the keys were counted in: a window
	// that ended before its sweep, on a loaded machine, leaves the next one without them
	// (a -race run beside the other packages waited 30 s in vain). So fresh keys again,
	// after each tick that did not find it.
	lims := g.CurrentRules()[0].Lims
	var sent time.Time
	waitFor(t, "t1 found rotating", func() bool {
		if len(lims[0].Rotating()) == 1 {
			return true
		}
		if time.Since(sent) > 2*cfg.TickInterval {
			send(500)
			sent = time.Now()
		}
		return false
	})
	if f := lims[1].Config().Threshold; f != 100 {
		t.Fatalf("further limit's threshold %d, want 100", f)
	}
	before := lims[1].Len()
	got := send(2000)
	if got[cfg.OverflowTopic] != 2000 {
		t.Fatalf("a rotating team's fresh keys: %v, want all to overflow", got)
	}
	if grown := lims[1].Len() - before; grown > 0 {
		t.Errorf("the further limit (10s:100, no floor) cached %d more keys for 2,000 fresh keys of a rotating team, want none", grown)
	}
	if lims[0].Len() != 0 {
		t.Errorf("the primary limit cached %d keys, want none", lims[0].Len())
	}
}
