package tick

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// newTopologyGate returns a limiter and its ticker on one cluster or sentinel client.
func newTopologyGate(t *testing.T, clk clock.Clock, lc limit.Config, sc Config, c redis.UniversalClient) *gate {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	l, err := limit.New(lc, clk, reg)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{c}, sc, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	clockChecked(tk)
	return &gate{l: l, tk: tk, reg: reg}
}

func TestClusterKeyTagIsTheShard(t *testing.T) {
	for _, team := range []string{"acme", "a{b}c", "}", "50%", "", "{s1}"} {
		want := fmt.Sprintf("gate:{s%d}:%s:7", ClusterShard(team), team)
		if got := ClusterKey("gate", team, 7); got != want {
			t.Errorf("ClusterKey(%q) = %q, want %q", team, got, want)
		}
	}
	// Shards spread teams evenly: 100,000 teams over 256 shards, none more than 20%
	// off the mean.
	var n [ClusterShards]int
	for i := range 100_000 {
		n[ClusterShard(fmt.Sprintf("team-%d", i))]++
	}
	mean := 100_000 / ClusterShards
	for s, c := range n {
		if c < mean*8/10 || c > mean*12/10 {
			t.Errorf("shard %d holds %d teams, mean %d", s, c, mean)
		}
	}
	if KeyFor(ModeStandalone, "g", "t", 1) != Key("g", "t", 1) || KeyFor(ModeSentinel, "g", "t", 1) != Key("g", "t", 1) {
		t.Error("standalone and sentinel keys changed")
	}
	l, _ := limit.New(limit.Config{Window: time.Minute}, clock.NewFake(epochStart), nil)
	if _, err := New(l, []redis.UniversalClient{redis.NewClient(&redis.Options{})}, Config{Mode: ModeCluster, KeyPrefix: "a{b"}, nil, nil); err == nil {
		t.Error("cluster mode took a prefix with a brace")
	}
	if _, err := New(l, []redis.UniversalClient{redis.NewClient(&redis.Options{})}, Config{Mode: "ring"}, nil, nil); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestClusterCountsAndReadsLandOnOwningNode: against a real 3-primary cluster, each team's
// two epoch keys share a slot (teams with braces too), its counts are on the primary that
// owns that slot, one pipeline is sent per tick, and a read seeds the limiter.
func TestClusterCountsAndReadsLandOnOwningNode(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart.Add(15 * time.Second)) // progress 0.25 into a 60 s epoch
	g := newTopologyGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()

	teams := []string{"a{b}c", "}", "{", ""}
	for i := range 60 {
		teams = append(teams, fmt.Sprintf("team-%d", i))
	}
	for i, team := range teams {
		g.l.Check(team, int64(i+1))
	}
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Writes != len(teams) || r.Reads != len(teams) {
		t.Fatalf("tick = %+v, want %d writes and reads, no error", r, len(teams))
	}
	// One pipeline: one write script and one MGET per shard the teams fall in.
	shards := map[int]bool{}
	for _, team := range teams {
		shards[ClusterShard(team)] = true
	}
	if want := 2 * len(shards); r.Commands != want {
		t.Errorf("commands = %d, want %d (%d shards)", r.Commands, want, len(shards))
	}
	owners := map[*redistest.Server]int{}
	for i, team := range teams {
		cur, prev := ClusterKey(DefaultKeyPrefix, team, ep), ClusterKey(DefaultKeyPrefix, team, ep-1)
		owner := cl.Owner(t, cur)
		if o := cl.Owner(t, prev); o != owner {
			t.Errorf("%q: epoch keys on %s and %s", team, owner.Addr(), o.Addr())
		}
		owners[owner]++
		if got := getInt(t, owner.Client(t), cur); got != int64(i+1) {
			t.Errorf("%q on its slot's owner %s = %d, want %d", team, owner.Addr(), got, i+1)
		}
	}
	if len(owners) != 3 {
		t.Errorf("teams spread over %d primaries, want 3", len(owners))
	}

	// A read seeds the limiter: the fleet counted 80 + 40 for "seeded"; estimate 100.
	cc.Set(ctx, ClusterKey(DefaultKeyPrefix, "seeded", ep-1), 80, 0)
	cc.Set(ctx, ClusterKey(DefaultKeyPrefix, "seeded", ep), 40, 0)
	if d := g.l.Check("seeded", 1); d.Limited {
		t.Fatalf("first contact limited: %+v", d)
	}
	if r := g.tk.Tick(ctx); r.Reads < 1 || r.Errors != 0 {
		t.Fatalf("tick = %+v, want the new team read", r)
	}
	if d := g.l.Check("seeded", 1); !d.Limited || d.Level < 100 || d.Level > 102 {
		t.Errorf("after read: %+v, want limited at level ≈ 101", d)
	}
}

// TestClusterPrimaryLost: with a replica per primary, one primary killed: checks keep
// answering (fail-open), and the counts made meanwhile reach Redis once the replica has
// taken over, without any action from the gate.
func TestClusterPrimaryLost(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}, Config{Mode: ModeCluster}, cc)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	teams := make([]string, 30)
	for i := range teams {
		teams[i] = fmt.Sprintf("team-%d", i)
		g.l.Check(teams[i], 1)
	}
	if r := g.tk.Tick(ctx); r.Errors != 0 {
		t.Fatalf("tick = %+v", r)
	}

	victim := cl.Owner(t, ClusterKey(DefaultKeyPrefix, teams[0], ep))
	// Redis replicates asynchronously: a write acknowledged just before its primary dies
	// can be missing from the promoted replica (the gate cannot tell, and does not
	// wait for replicas). Wait for the replica here, so that the test is about the
	// counts made during the failover.
	vc := redis.NewClient(&redis.Options{Addr: victim.Addr()})
	if n, err := vc.Do(ctx, "WAIT", 1, 10_000).Int64(); err != nil || n < 1 {
		t.Fatalf("WAIT for the victim's replica: %d replicas, %v", n, err)
	}
	_ = vc.Close()
	victim.Stop(t)
	start := time.Now()
	want := map[string]int64{}
	for _, team := range teams {
		want[team] = 1
	}
	var failed int
	for time.Since(start) < 30*time.Second {
		for _, team := range teams {
			if d := g.l.Check(team, 1); d.Limited {
				t.Fatalf("%s limited while a primary is down: %+v", team, d)
			}
			want[team]++
		}
		r := g.tk.Tick(ctx)
		if r.Errors > 0 {
			failed++
		}
		if failed > 0 && r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if failed == 0 {
		t.Fatal("no tick failed after the primary was killed")
	}
	t.Logf("counts resumed %s after the primary was killed (%d failed ticks)", time.Since(start).Round(time.Millisecond), failed)
	for _, team := range teams {
		if got, err := cc.Get(ctx, ClusterKey(DefaultKeyPrefix, team, ep)).Int64(); err != nil || got != want[team] {
			t.Errorf("%s = %d (%v), want %d: every count made during the failover", team, got, err, want[team])
		}
	}
	moved := testutil.ToFloat64(g.tk.m.redirects.WithLabelValues("moved"))
	t.Logf("MOVED replies counted: %v", moved)
}

// TestSentinelFollowsPromotion: the primary killed, the sentinel promotes its replica, and
// the same ticker's counts land on the new primary, without a restart.
func TestSentinelFollowsPromotion(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinel(t, 1, 1)
	fc, err := DialSentinel(set.Master, set.SentinelAddrs(), "redis://127.0.0.1:6379/0", RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}, Config{Mode: ModeSentinel}, fc)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	g.l.Check("team", 5)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	if got := getInt(t, set.Primary.Client(t), Key(DefaultKeyPrefix, "team", ep)); got != 5 {
		t.Fatalf("on the first primary: %d, want 5", got)
	}
	// The replica must hold the count before the primary dies, or the promotion loses it.
	replica := set.Replicas[0].Client(t)
	for deadline := time.Now().Add(30 * time.Second); getInt(t, replica, Key(DefaultKeyPrefix, "team", ep)) != 5; {
		if time.Now().After(deadline) {
			t.Fatal("replica never caught up")
		}
		time.Sleep(20 * time.Millisecond)
	}

	set.Primary.Stop(t)
	start := time.Now()
	want, failed := int64(5), 0
	for time.Since(start) < 30*time.Second {
		g.l.Check("team", 1)
		want++
		r := g.tk.Tick(ctx)
		if r.Errors > 0 {
			failed++
		}
		if failed > 0 && r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if failed == 0 {
		t.Fatal("no tick failed after the primary was killed")
	}
	t.Logf("counts resumed %s after the primary was killed (%d failed ticks)", time.Since(start).Round(time.Millisecond), failed)
	if now := set.CurrentPrimary(t); now != set.Replicas[0].Addr() {
		t.Fatalf("sentinel's primary is %s, want the promoted replica %s", now, set.Replicas[0].Addr())
	}
	if got := getInt(t, replica, Key(DefaultKeyPrefix, "team", ep)); got != want {
		t.Errorf("on the promoted primary: %d, want %d", got, want)
	}
	if v, err := replica.Do(ctx, "ROLE").Slice(); err != nil || len(v) == 0 || !strings.EqualFold(fmt.Sprint(v[0]), "master") {
		t.Errorf("promoted replica's ROLE = %v (%v)", v, err)
	}
}

// TestClusterMovedFollowedAndCounted: a slot moved to another primary after the client
// loaded the slot map; the tick's write gets MOVED, the client follows it within the same
// tick, and the redirect is counted.
func TestClusterMovedFollowedAndCounted(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}, Config{Mode: ModeCluster}, cc)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	g.l.Check("warm-up", 1)
	if r := g.tk.Tick(ctx); r.Errors != 0 {
		t.Fatalf("tick = %+v", r) // the client has its slot map now
	}

	key := ClusterKey(DefaultKeyPrefix, "mover", ep)
	from := cl.Owner(t, key)
	var to *redistest.Server
	for _, p := range cl.Primaries {
		if p != from {
			to = p
			break
		}
	}
	cl.MoveEmptySlot(t, key, to) // the slot is empty, so it moves with no MIGRATE

	g.l.Check("mover", 7)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v, want the write redirected and done", r)
	}
	if got := getInt(t, to.Client(t), key); got != 7 {
		t.Errorf("on the slot's new owner: %d, want 7", got)
	}
	if got := testutil.ToFloat64(g.tk.m.redirects.WithLabelValues("moved")); got < 1 {
		t.Errorf("redirects{kind=moved} = %v, want ≥ 1", got)
	}
}

// TestClusterTryAgainDuringMigration: a slot in migration (MIGRATING on its owner,
// IMPORTING on the next) with some of its keys moved already. A multi-key command whose
// keys are split between the two nodes gets TRYAGAIN: Redis did not run it, and it is no
// failure of Redis. The tick counts it as such (redirects{kind="tryagain"}), keeps the
// writes for the next tick and reads the team again next tick, with no pipeline error; once
// the migration ends the counts land, once. Before, the TRYAGAIN of the read made the
// pipeline fail: counted as a Redis error and logged "counts kept for the next tick".
func TestClusterTryAgainDuringMigration(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart.Add(30 * time.Second))
	g := newTopologyGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	ctx := context.Background()
	prev := g.l.Epoch(clk.Now())
	g.l.Check("mover", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	clk.Advance(time.Minute)
	ep := g.l.Epoch(clk.Now())
	g.l.Check("mover", 20)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}

	key := ClusterKey(DefaultKeyPrefix, "mover", ep)
	mv := newSlotMove(t, cl, key)
	mv.start(key) // the current epoch's key moves first

	g.l.Check("mover", 5)
	clk.Advance(time.Second)
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Writes != 0 || r.CarriedWrites != 1 || r.FailedReads != 1 {
		t.Errorf("tick during the migration = %+v, want no error, the write kept and the read failed", r)
	}
	if got := testutil.ToFloat64(g.tk.m.redirects.WithLabelValues("tryagain")); got < 1 {
		t.Errorf("redirects{kind=tryagain} = %v, want ≥ 1", got)
	}
	// Every series: in cluster mode a failure is counted on its primary, not instance 0.
	for k, got := range errorSeries(t, g.tk) {
		if got != 0 {
			t.Errorf("errors{cause=%s,redis_instance=%s} = %v, want 0", k[0], k[1], got)
		}
	}

	mv.finish() // the remaining keys move, the slot is the new owner's
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 || r.Reads != 1 {
		t.Fatalf("tick after the migration = %+v, want the kept write made and the team read again", r)
	}
	if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, "mover", ep); got != 25 {
		t.Errorf("current epoch holds %d, want 25", got)
	}
	if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, "mover", prev); got != 10 {
		t.Errorf("previous epoch holds %d, want 10", got)
	}
}

// TestFlushEndsOnATickThatWritesNothing: a flush (the final one at shutdown; a retired
// rule set's Drain, each interval) ends at its first tick that writes nothing, as Drain
// says. A slot in migration refuses the writes with TRYAGAIN, no error: the flush sent
// them again at once, tick after tick, each a round of the client's TRYAGAIN retries
// against the migrating node, until its context ended (5 s at shutdown; Drain's, the
// gate's, not before the migration did).
func TestFlushEndsOnATickThatWritesNothing(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart.Add(30 * time.Second))
	g := newTopologyGate(t, clk, limit.Config{Window: time.Minute, Threshold: 100, ColdWriteInterval: writeEveryTick}, Config{Mode: ModeCluster}, cc)
	ctx := context.Background()
	ep := g.l.Epoch(clk.Now())
	g.l.Check("mover", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	key := ClusterKey(DefaultKeyPrefix, "mover", ep)
	mv := newSlotMove(t, cl, key)
	mv.start(key)

	g.l.Check("mover", 5)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	before := g.tk.tickN
	err = g.tk.Flush(fctx)
	ticks := g.tk.tickN - before
	if err == nil || errors.Is(err, context.DeadlineExceeded) || ticks != 1 {
		t.Errorf("flush during a migration: %d ticks, %v; want it to end after the tick that wrote nothing, with an error", ticks, err)
	}
	if g.tk.PendingWrites() != 1 {
		t.Errorf("pending writes = %d, want the count kept", g.tk.PendingWrites())
	}

	mv.finish()
	if err := g.tk.Flush(ctx); err != nil {
		t.Fatalf("flush after the migration: %v", err)
	}
	if got := stored(t, cc, ModeCluster, DefaultKeyPrefix, "mover", ep); got != 15 {
		t.Errorf("Redis holds %d, want 15", got)
	}
}

// slotMove moves the slot of a key of cluster cl from its owner to another primary, in a
// rebalance's steps: start (the slot IMPORTING and MIGRATING, a first key moved), then
// finish (its other keys moved, the slot the new owner's). A step that fails fails the
// test with Errorf: start may run on a connection's goroutine (a fault's hook).
type slotMove struct {
	t              *testing.T
	cl             *redistest.Cluster
	fc, tc         *redis.Client // the slot's owner and its next
	slot           int64
	fromID, toID   string
	toHost, toPort string
}

func newSlotMove(t *testing.T, cl *redistest.Cluster, key string) *slotMove {
	t.Helper()
	ctx := context.Background()
	from := cl.Owner(t, key)
	var to *redistest.Server
	for _, p := range cl.Primaries {
		if p != from {
			to = p
			break
		}
	}
	m := &slotMove{t: t, cl: cl, fc: from.Client(t), tc: to.Client(t)}
	m.slot = m.fc.ClusterKeySlot(ctx, key).Val()
	var err1, err2 error
	m.fromID, err1 = m.fc.Do(ctx, "CLUSTER", "MYID").Text()
	m.toID, err2 = m.tc.Do(ctx, "CLUSTER", "MYID").Text()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	m.toHost, m.toPort, _ = strings.Cut(to.Addr(), ":")
	return m
}

func (m *slotMove) do(c *redis.Client, args ...any) {
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		m.t.Errorf("%v on %s: %v", args, c.Options().Addr, err)
	}
}

// start marks the slot migrating and moves key.
func (m *slotMove) start(key string) {
	m.do(m.tc, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.fromID)
	m.do(m.fc, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID)
	m.do(m.fc, "MIGRATE", m.toHost, m.toPort, key, 0, 5000)
}

// finish moves the slot's other keys and gives it to the new owner on every primary.
func (m *slotMove) finish() {
	m.t.Helper()
	keys, err := m.fc.ClusterGetKeysInSlot(context.Background(), int(m.slot), 100).Result()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, k := range keys {
		m.do(m.fc, "MIGRATE", m.toHost, m.toPort, k, 0, 5000)
	}
	for _, p := range m.cl.Primaries {
		m.do(p.Client(m.t), "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	}
}

// TestClusterFleetCountWithANodeDownCountsGateOnce: in cluster mode the fleet's slot
// counters are spread over the primaries. With the primary that holds a previous slot's
// counter down, countFleet's INCRBY of the current slot is applied by its own (healthy)
// primary while the GET of the previous slot fails: the gate has counted itself, and the
// next tick of the same slot must not count it again, or every gate of the fleet believes
// the fleet larger (floors shrink, gate_fleet_gates lies) for as long as the node is down.
func TestClusterFleetCountWithANodeDownCountsGateOnce(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := newTopologyGate(t, nil, limit.Config{Window: time.Minute}, Config{Mode: ModeCluster, KeyPrefix: "fc", Writer: "w0"}, cc)
	ctx := context.Background()
	// A slot whose counter and the one before it live on different primaries.
	base := time.Unix(1_800_000_000, 0).Truncate(FleetSlot).UnixNano() / int64(FleetSlot)
	s := base + 10
	for ; ; s++ {
		if cl.Owner(t, FleetKeyFor("fc", s)) != cl.Owner(t, FleetKeyFor("fc", s-1)) {
			break
		}
	}
	at := func(slot int64, off time.Duration) time.Time { return time.Unix(0, slot*int64(FleetSlot)).Add(off) }
	g.tk.countFleet(ctx, at(s-5, time.Second)) // the client has its slot map
	owner := cl.Owner(t, FleetKeyFor("fc", s))
	oc := owner.Client(t)
	cl.Owner(t, FleetKeyFor("fc", s-1)).Stop(t)

	g.tk.countFleet(ctx, at(s, time.Second))
	g.tk.countFleet(ctx, at(s, 2*time.Second)) // the next tick, same slot
	g.tk.countFleet(ctx, at(s, 3*time.Second))
	if n, err := oc.Get(ctx, FleetKeyFor("fc", s)).Int(); err != nil || n != 1 {
		t.Errorf("slot counter of one gate = %d (%v) after three ticks of one slot with a node down, want 1", n, err)
	}
}

// TestClusterFleetCountStallCountsGateOnce is TestFleetCountStallCountsGateOnce on Redis
// Cluster: the primary that holds the slot's counter stalls while countFleet's INCRBY is
// in flight. The cluster client resends a node's pipeline by itself after a read timeout
// (up to MaxRedirects, whatever MaxRetries says), so the stalled node held the INCRBY
// several times and applied each when it woke: one gate counted as several in a slot, and
// every gate of the fleet believed the fleet that much larger for two slots.
func TestClusterFleetCountStallCountsGateOnce(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := newTopologyGate(t, nil, limit.Config{Window: time.Minute}, Config{Mode: ModeCluster, KeyPrefix: "fcs", Writer: "w0"}, cc)
	ctx := context.Background()
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int, off time.Duration) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + off) }
	g.tk.countFleet(ctx, at(0, time.Second)) // a first, clean count: the client has its slot map

	// The stall must catch the INCRBY in the node's socket, which the client cannot
	// always be made to do: a connection it had to open to the stopped node sends only
	// its handshake. Such an attempt says nothing of a resend; it is logged, with what
	// the client saw, and the next slot tried. The assertion is on an attempt whose
	// INCRBY reached the node.
	for attempt := 1; ; attempt++ {
		s := attempt // slot s, this attempt's own counter
		key := FleetKeyFor("fcs", at(s, 0).UnixNano()/int64(FleetSlot))
		owner := cl.Owner(t, key)
		oc := owner.Client(t)
		node := clusterNodeFor(t, cc, key, owner.Addr())
		rec := &stallRecorder{}
		node.AddHook(rec)
		// Several connections to the node in the client's pool, as a gate's client has
		// from its other users (readiness, overrides, the tick's own pipelines): a resend
		// after a timeout takes another one, on which the command is written again.
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				pipe := cc.Pipeline()
				for range 2000 {
					pipe.Get(ctx, key)
				}
				_, _ = pipe.Exec(ctx)
			})
		}
		wg.Wait()
		before := incrbyCalls(t, oc)
		owner.Pause(t)
		g.tk.countFleet(ctx, at(s, time.Second)) // times out: the node has the INCRBY in its socket
		owner.Resume(t)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if n, _ := oc.Get(ctx, key).Int(); n >= 1 {
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n, _ := oc.Get(ctx, key).Int(); n == 0 {
			calls := incrbyCalls(t, oc)
			if calls != before {
				t.Fatalf("the stalled INCRBY reached the node (%d INCRBY calls, %d before) and was not applied; the client saw: %s", calls, before, rec)
			}
			if attempt == 3 {
				t.Fatalf("in %d attempts the stalled INCRBY never reached the node; the client saw: %s", attempt, rec)
			}
			t.Logf("attempt %d: the INCRBY never reached the stopped node; the client saw: %s", attempt, rec)
			continue
		}
		time.Sleep(200 * time.Millisecond)         // any resent INCRBY behind it is applied too
		g.tk.countFleet(ctx, at(s, 2*time.Second)) // the next tick, same slot
		if n, _ := oc.Get(ctx, key).Int(); n != 1 {
			t.Errorf("slot counter of one gate = %d after a stalled INCRBY on its node and the next tick, want 1; the client saw: %s", n, rec)
		}
		return
	}
}

// clusterNodeFor returns the client cc sends key's commands to, once it names addr, the
// slot's owner: a slot map read while the cluster settled may name another node, whose
// MOVED reply a stall test would take for the stall.
func clusterNodeFor(t *testing.T, cc *redis.ClusterClient, key, addr string) *redis.Client {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(30 * time.Second)
	for {
		node, err := cc.MasterForKey(ctx, key)
		if err == nil && node.Options().Addr == addr {
			return node
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster client never sent %q to its owner %s (last: %v, %v)", key, addr, node, err)
		}
		cc.ReloadState(ctx)
		time.Sleep(50 * time.Millisecond)
	}
}

// incrbyCalls returns the INCRBY commands the server of c has run.
func incrbyCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_incrby:calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		var calls int
		if _, err := fmt.Sscan(n, &calls); err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return calls
	}
	return 0
}

// stallRecorder records a node client's dials and its pipelines that hold an INCRBY,
// with their outcomes: what a stall test says when the stall caught nothing.
type stallRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *stallRecorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *stallRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return "nothing"
	}
	return strings.Join(r.events, "; ")
}

func (r *stallRecorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		r.add("dial %s: %v", addr, err)
		return c, err
	}
}

func (*stallRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (r *stallRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		if slices.Contains(names, "incrby") || slices.Contains(names, "hello") {
			r.add("pipeline %s: %v", strings.Join(names, " "), err)
		}
		return err
	}
}
