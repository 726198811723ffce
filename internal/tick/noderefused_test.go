package tick

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestClusterNodeRefusingWritesIsItsOwn: one primary of a cluster full (OOM under
// noeviction) refuses the writes of its slots' teams, and every gate's alike; the other
// primaries take theirs. The tick sends the cluster one plan, and took the full node's
// refusal for the whole cluster's: every team's read on every node was applied as one
// that holds the other gates' counts only as predicted (limit.Read.Refused), its fleet
// factor frozen and this gate's unwritten counts scaled by it, for as long as one node
// stayed full (a team shared by two gates kept a factor of 1). A read from a node that
// takes the writes is an ordinary read.
func TestClusterNodeRefusingWritesIsItsOwn(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	// A second gate shares the healthy team, counting as much as this one.
	cc2, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc2)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	full := cl.Owner(t, ClusterKey(DefaultKeyPrefix, "full", ep))
	healthy := ""
	for i := range 1000 {
		if team := fmt.Sprintf("team-%d", i); cl.Owner(t, ClusterKey(DefaultKeyPrefix, team, ep)) != full {
			healthy = team
			break
		}
	}
	fc := full.Client(t)
	for _, kv := range [][]any{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		if err := fc.Do(ctx, kv...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read := map[string]int{}
	var last *limit.Read // this gate's last read of the healthy team
	for i := range 10 {
		g.l.Check("full", 10)
		g.l.Check(healthy, 10)
		other.l.Check(healthy, 10)
		other.tk.Tick(ctx)
		r := g.tk.Tick(ctx)
		if i > 0 && r.Errors == 0 {
			t.Fatalf("tick %d: no error while a node refuses writes: %+v", i, r)
		}
		for _, rc := range g.tk.plans[0].rcmds {
			for _, rr := range rc.teams {
				read[rr.r.Team]++
				if rr.r.Team == healthy {
					last = rr.r
				}
				if want := rr.r.Team == "full"; rr.r.Refused != want {
					t.Errorf("tick %d: %s's read applied with Refused %v, want %v", i, rr.r.Team, rr.r.Refused, want)
				}
			}
		}
		clk.Advance(time.Second)
	}
	if read["full"] == 0 || read[healthy] == 0 {
		t.Fatalf("reads made: %v, want both teams read", read)
	}
	// Two gates counting alike: the healthy team's reads teach this one that the fleet
	// counts about twice what it does.
	if f := g.l.FleetFactor(last); f < 1.5 {
		t.Errorf("the healthy team's fleet factor is %.2f, want about 2: two gates count it alike", f)
	}
}

// TestClusterErrorsNameTheNode: in cluster mode a primary refusing writes is named by
// its address in gate_limiter_errors_total{redis_instance} and in the failure's log line
// (nodes="ADDR=oom"), not as instance "0", which is every primary of the cluster; the other
// primaries have no errors counted. When that primary is gone (killed, its replica
// promoted) and the new one fails, the gone node's series are deleted, so a cluster
// whose nodes change address keeps a series per node it has, not per node it had. Every
// primary's series are there at zero from the first tick.
func TestClusterErrorsNameTheNode(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	cl, l, tk, clk := clusterTicker(t, logs)
	ctx := context.Background()
	tickUntil := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !done(); clk.Advance(time.Second) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after a minute of ticks; errors counted: %v\nlog:\n%s", what, errorSeries(t, tk), logs.buf.String())
			}
			l.Check("full", 10)
			tk.Tick(ctx)
		}
	}
	full := cl.Owner(t, ClusterKey(DefaultKeyPrefix, "full", l.Epoch(clk.Now())))
	fillUp(t, full)
	tickUntil("the full primary named", func() bool { return errorSeries(t, tk)[[2]string{"oom", full.Addr()}] > 0 })
	series := errorSeries(t, tk)
	for _, p := range cl.Primaries {
		// Every primary's series from the start, at zero: a first failure is an increase.
		if _, ok := series[[2]string{"timeout", p.Addr()}]; !ok {
			t.Errorf("no gate_limiter_errors_total series of primary %s: %v", p.Addr(), series)
		}
	}
	for k, v := range series {
		if v > 0 && k != [2]string{"oom", full.Addr()} {
			t.Errorf("gate_limiter_errors_total{cause=%q,redis_instance=%q} = %v: want errors only as oom on %s", k[0], k[1], v, full.Addr())
		}
	}
	if lines := logs.lines("redis refused writes", "nodes=", full.Addr()+"=oom"); len(lines) == 0 {
		t.Errorf("no failure line naming %s=oom; log:\n%s", full.Addr(), logs.buf.String())
	}

	// The full primary dies; its replica takes over and refuses writes in turn.
	full.Stop(t)
	promoted := cl.Promoted(t)
	fillUp(t, promoted)
	tickUntil("the promoted primary named", func() bool { return errorSeries(t, tk)[[2]string{"oom", promoted.Addr()}] > 0 })
	for k := range errorSeries(t, tk) {
		if k[1] == full.Addr() {
			t.Errorf("gate_limiter_errors_total{cause=%q,redis_instance=%q} kept for a node gone from the cluster", k[0], k[1])
		}
	}
}

// clusterTicker starts a cluster of three primaries with a replica each, and a gate
// (newTopologyGate: a minute's window, 100, every count written each tick) on it in
// cluster mode, its ticker logging to logs.
func clusterTicker(t *testing.T, logs *logBuffer) (*redistest.Cluster, *limit.Limiter, *Ticker, *clock.Fake) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 1)
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	g.tk.log = slog.New(slog.NewTextHandler(logs, nil))
	return cl, g.l, g.tk, clk
}

// fillUp makes the cluster primary s refuse writes as full (OOM under noeviction);
// redistest's RefuseWrites checks with a key another primary may own.
func fillUp(t *testing.T, s *redistest.Server) {
	t.Helper()
	c := s.Client(t)
	for _, kv := range [][]any{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		if err := c.Do(context.Background(), kv...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// errorSeries is tk's gate_limiter_errors_total by cause and redis_instance.
func errorSeries(t *testing.T, tk *Ticker) map[[2]string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	go func() { tk.m.errors.Collect(ch); close(ch) }()
	out := map[[2]string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var k [2]string
		for _, lp := range pb.GetLabel() {
			switch lp.GetName() {
			case "cause":
				k[0] = lp.GetValue()
			case "redis_instance":
				k[1] = lp.GetValue()
			}
		}
		out[k] = pb.GetCounter().GetValue()
	}
	return out
}

// TestClusterPipelineAndEvictionsNameTheNode: in cluster mode the pipeline duration and
// the evicted keys are labelled by primary (its address), as the errors are, not as
// instance "0", which is every primary of the cluster: a slow node or one that evicts is
// named. Each primary's series is there at zero from the tick or look that first sees
// it; when a primary is gone (killed, its replica promoted), its series go, and the
// promoted one's come.
func TestClusterPipelineAndEvictionsNameTheNode(t *testing.T) {
	t.Parallel()
	cl, l, tk, clk := clusterTicker(t, &logBuffer{})
	wall := clock.NewFake(time.Now())
	tk.clockCheck.wall = wall
	ctx := context.Background()
	teams := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	tickUntil := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !done(); clk.Advance(time.Second) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after a minute of ticks; pipeline duration samples: %v", what, seriesOf(t, tk.m.pipelineDur))
			}
			for _, team := range teams {
				l.Check(team, 1)
			}
			tk.Tick(ctx)
		}
	}
	// The primaries that own the teams' keys: those whose pipelines carry commands.
	owners := map[string]bool{}
	for _, team := range teams {
		owners[cl.Owner(t, ClusterKey(DefaultKeyPrefix, team, l.Epoch(clk.Now()))).Addr()] = true
	}
	tickUntil("every owning primary's pipeline timed", func() bool {
		s := seriesOf(t, tk.m.pipelineDur)
		for addr := range owners {
			if s[addr] == 0 {
				return false
			}
		}
		return true
	})
	s := seriesOf(t, tk.m.pipelineDur)
	for _, p := range cl.Primaries {
		if _, ok := s[p.Addr()]; !ok {
			t.Errorf("no gate_limiter_pipeline_duration_seconds series of primary %s: %v", p.Addr(), s)
		}
	}
	if _, ok := s["0"]; ok {
		t.Errorf("gate_limiter_pipeline_duration_seconds{redis_instance=\"0\"} in cluster mode: %v", s)
	}

	// Evictions: the watch's first look notes each primary; one then evicts.
	tk.watchEviction(ctx) // starts its minute
	wall.Advance(time.Minute)
	tk.watchEviction(ctx)
	ev := seriesOf(t, tk.m.evicted)
	for _, p := range cl.Primaries {
		if v, ok := ev[p.Addr()]; !ok || v != 0 {
			t.Errorf("gate_redis_evicted_keys_total of primary %s after the first look: %v (present %v), want 0", p.Addr(), v, ok)
		}
	}
	if _, ok := ev["0"]; ok {
		t.Errorf("gate_redis_evicted_keys_total{redis_instance=\"0\"} in cluster mode: %v", ev)
	}
	evicting := cl.Primaries[0]
	evictOn(t, cl, evicting)
	wall.Advance(time.Minute)
	tk.watchEviction(ctx)
	ev = seriesOf(t, tk.m.evicted)
	for addr, v := range ev {
		if (addr == evicting.Addr()) != (v > 0) {
			t.Errorf("gate_redis_evicted_keys_total{redis_instance=%q} = %v: want keys counted on %s alone", addr, v, evicting.Addr())
		}
	}

	// The evicting primary dies; its replica takes over.
	evicting.Stop(t)
	promoted := cl.Promoted(t).Addr()
	tickUntil("the promoted primary's pipeline timed, the dead one's series gone", func() bool {
		s := seriesOf(t, tk.m.pipelineDur)
		_, dead := s[evicting.Addr()]
		_, now := s[promoted]
		return now && !dead
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		wall.Advance(time.Minute)
		tk.watchEviction(ctx)
		ev := seriesOf(t, tk.m.evicted)
		_, dead := ev[evicting.Addr()]
		_, now := ev[promoted]
		if now && !dead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate_redis_evicted_keys_total after a minute of looks: %v; want %s's series, not %s's", ev, promoted, evicting.Addr())
		}
	}
}

// evictOn has the cluster primary s evict keys: maxmemory 3 MiB over its use under
// allkeys-lru (its replication backlog, up to 1 MiB, grows into it), then 8 MB of keys of
// one slot it owns.
func evictOn(t *testing.T, cl *redistest.Cluster, s *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	tag := ""
	for i := 0; tag == ""; i++ {
		if k := fmt.Sprintf("{evict%d}", i); cl.Owner(t, k).Addr() == s.Addr() {
			tag = k
		}
		if i > 100 {
			t.Fatalf("no hash tag of %s's slots among 100", s.Addr())
		}
	}
	c := s.Client(t)
	used := usedMemory(t, c)
	for _, kv := range [][]any{{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}, {"CONFIG", "SET", "maxmemory", strconv.FormatInt(used+3<<20, 10)}} {
		if err := c.Do(ctx, kv...).Err(); err != nil {
			t.Fatalf("%v: %v", kv, err)
		}
	}
	val := strings.Repeat("x", 1024)
	for b := range 160 { // small pipelines: their replication stream counts in used memory too
		pipe := c.Pipeline()
		for i := range 50 {
			pipe.Set(ctx, fmt.Sprintf("%s:%d:%d", tag, b, i), val, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("filling %s: %v", s.Addr(), err)
		}
	}
	stats, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(infoValue(stats, "evicted_keys")); n == 0 {
		t.Fatalf("%s evicted no key after 8 MB over a maxmemory 3 MiB above its use", s.Addr())
	}
}

// seriesOf is c's series by redis_instance: a counter's value, a histogram's sample count.
func seriesOf(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == "redis_instance" {
				if h := pb.GetHistogram(); h != nil {
					out[lp.GetValue()] = float64(h.GetSampleCount())
				} else {
					out[lp.GetValue()] = pb.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestClusterFleetClockAndParseErrorsNameTheNode: in cluster mode the fleet count's
// failures, the clock check's and the unreadable values (cause parse) are counted on the
// primary that answered, by its address, as the tick's own errors are, not on instance
// "0" (every primary of the cluster): an operator is told which node refuses the fleet
// count's INCRBY or GET, TIME, or holds a value no gate can read. A primary first met by
// the fleet count has its series at zero, and they go when it leaves the slot map.
func TestClusterFleetClockAndParseErrorsNameTheNode(t *testing.T) {
	t.Parallel()
	cl, l, tk, clk := clusterTicker(t, &logBuffer{})
	ctx := context.Background()
	acl := func(s *redistest.Server, rule string) {
		t.Helper()
		if err := s.Client(t).Do(ctx, "ACL", "SETUSER", "default", rule).Err(); err != nil {
			t.Fatalf("ACL SETUSER default %s on %s: %v", rule, s.Addr(), err)
		}
	}
	// counted says what a step added to the errors metric, by cause and redis_instance.
	counted := func(step func()) map[[2]string]float64 {
		t.Helper()
		before := errorSeries(t, tk)
		step()
		added := map[[2]string]float64{}
		for k, v := range errorSeries(t, tk) {
			if d := v - before[k]; d > 0 {
				added[k] = d
			}
		}
		return added
	}
	want := func(what string, got map[[2]string]float64, cause, addr string) {
		t.Helper()
		if len(got) != 1 || got[[2]string{cause, addr}] != 1 {
			t.Errorf("%s: errors counted %v, want one %s on %s", what, got, cause, addr)
		}
	}
	slotAt := func(slot int64) time.Time { return time.Unix(0, slot*int64(tk.fleetSlot())) }

	// The fleet count's INCRBY refused by the primary of the slot's counter.
	slot := time.Now().UnixNano() / int64(tk.fleetSlot())
	incrOn := cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, slot))
	acl(incrOn, "-incrby")
	want("INCRBY refused", counted(func() { tk.countFleet(ctx, slotAt(slot)) }), "redis", incrOn.Addr())
	acl(incrOn, "+incrby")
	if _, ok := errorSeries(t, tk)[[2]string{"timeout", incrOn.Addr()}]; !ok {
		t.Errorf("no errors series at zero of %s, which the fleet count met first: %v", incrOn.Addr(), errorSeries(t, tk))
	}

	// A GET of the last slots' counters refused by its primary, not the INCRBY's.
	for slot++; cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, slot-1)) == cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, slot)); slot++ {
	}
	getOn := cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, slot-1))
	acl(getOn, "-get")
	want("GET refused", counted(func() { tk.countFleet(ctx, slotAt(slot)) }), "redis", getOn.Addr())
	acl(getOn, "+get")

	// TIME refused everywhere: counted on the primary the check asked.
	for _, p := range cl.Primaries {
		acl(p, "-time")
	}
	tk.clockCheck.wall = clock.NewFake(time.Now())
	asked := cl.Owner(t, LiveKeyFor(DefaultKeyPrefix))
	want("TIME refused", counted(func() { tk.checkClock(ctx) }), "redis", asked.Addr())
	for _, p := range cl.Primaries {
		acl(p, "+time")
	}

	// A counter that is no integer: the last epoch's, which this gate's writes leave alone.
	ep := l.Epoch(clk.Now())
	bad := ClusterKey(DefaultKeyPrefix, "unreadable", ep-1)
	if err := cl.Owner(t, bad).Client(t).Set(ctx, bad, "not a count", 0).Err(); err != nil {
		t.Fatal(err)
	}
	parsed := func() (map[[2]string]float64, bool) {
		s := errorSeries(t, tk)
		for k, v := range s {
			if k[0] == "parse" && v > 0 {
				return s, true
			}
		}
		return s, false
	}
	for deadline := time.Now().Add(60 * time.Second); ; clk.Advance(time.Second) {
		if _, ok := parsed(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no parse error after a minute of ticks reading %s: %v", bad, errorSeries(t, tk))
		}
		l.Check("unreadable", 1)
		tk.Tick(ctx)
	}
	s, _ := parsed()
	for k, v := range s {
		if k[0] == "parse" && v > 0 && k[1] != cl.Owner(t, bad).Addr() {
			t.Errorf("parse counted on %q (%v), want on %s, which holds %s", k[1], v, cl.Owner(t, bad).Addr(), bad)
		}
	}

	// The INCRBY's primary dies; its replica, promoted, refuses the fleet's counters in
	// turn, and may be met by the fleet count before the tick: the dead primary's series
	// go all the same. The slots
	// to count in are those whose counter the dead primary held, its replica's now.
	var itsSlots []int64
	for s := slot + 1; len(itsSlots) < 10; s++ {
		if cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, s)) == incrOn {
			itsSlots = append(itsSlots, s)
		}
	}
	incrOn.Stop(t)
	promoted := cl.Promoted(t)
	// The fleet's counters refused there, the tick's keys (gate:{sN}:...) not: an error
	// on the promoted node is the fleet count's.
	acl(promoted, "resetkeys")
	acl(promoted, "~gate:{*")
	// A team of the dead node's: the tick's commands, failing there, have the client
	// read the slot map again, which the INCRBY's own (on the node's client) do not.
	deadTeam := ""
	for i := 0; deadTeam == ""; i++ {
		if team := fmt.Sprintf("dead-%d", i); cl.Owner(t, ClusterKey(DefaultKeyPrefix, team, l.Epoch(clk.Now()))).Addr() == promoted.Addr() {
			deadTeam = team
		}
	}
	for i, deadline := 0, time.Now().Add(60*time.Second); errorSeries(t, tk)[[2]string{"redis", promoted.Addr()}] == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet count's INCRBY refused by the promoted %s not counted on it within a minute: %v", promoted.Addr(), errorSeries(t, tk))
		}
		l.Check(deadTeam, 1)
		tk.Tick(ctx)
		clk.Advance(time.Second)
		tk.countFleet(ctx, slotAt(itsSlots[i%len(itsSlots)]))
	}
	for deadline := time.Now().Add(60 * time.Second); ; clk.Advance(time.Second) {
		gone := true
		for k := range errorSeries(t, tk) {
			gone = gone && k[1] != incrOn.Addr()
		}
		if _, ok := seriesOf(t, tk.m.pipelineDur)[incrOn.Addr()]; gone && !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series of %s, gone from the cluster, kept after a minute of ticks: errors %v, pipeline duration %v", incrOn.Addr(), errorSeries(t, tk), seriesOf(t, tk.m.pipelineDur))
		}
		l.Check("unreadable", 1)
		tk.Tick(ctx)
	}
}

// TestClusterFleetCountAndClockCheckFollowAFailover: the fleet count's INCRBY and the
// clock check's TIME go to a primary's own client (MasterForKey), whose failures do not
// have the cluster client read its slot map again; the tick's own failures do, but a
// quiet gate sends none. When that primary died, its replica promoted, the count and the
// check went on to the dead node, failing, until the client's own refresh a minute later:
// the fleet's size stale, no clock offset measured. A failure that means the node is gone
// has the slot map read again, and the next count or check reaches the promoted primary.
func TestClusterFleetCountAndClockCheckFollowAFailover(t *testing.T) {
	t.Parallel()
	cl, _, fleetTk, _ := clusterTicker(t, &logBuffer{})
	// The clock check on a client of its own: the fleet count's failures, had they
	// the slot map read again, must not make the check's pass.
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clockTk := newTopologyGate(t, clock.NewFake(epochStart), limit.Config{Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc).tk
	wall := clock.NewFake(time.Now())
	clockTk.clockCheck.wall = wall
	// A third, whose fleet count's INCRBY goes to a live primary, a GET to the dead one.
	cc2, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	getTk := newTopologyGate(t, clock.NewFake(epochStart), limit.Config{Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc2).tk
	ctx := context.Background()

	// The primary of the live key (the clock check's) and the slots whose fleet counter it
	// holds.
	dead := cl.Owner(t, LiveKeyFor(DefaultKeyPrefix))
	var itsSlots, getSlots []int64 // getSlots: the last slot's counter its, the current one's not
	for s := time.Now().UnixNano() / int64(fleetTk.fleetSlot()); len(itsSlots) < 8 || len(getSlots) < 8; s++ {
		switch {
		case cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, s)) == dead:
			itsSlots = append(itsSlots, s)
		case cl.Owner(t, FleetKeyFor(DefaultKeyPrefix, s-1)) == dead:
			getSlots = append(getSlots, s)
		}
	}
	slotAt := func(slot int64) time.Time { return time.Unix(0, slot*int64(fleetTk.fleetSlot())) }
	counted := func(on *redistest.Server, slot int64) bool {
		n, err := on.Client(t).Get(ctx, FleetKeyFor(DefaultKeyPrefix, slot)).Int()
		return err == nil && n == 1
	}
	// Both slot maps loaded before the failover, and naming dead.
	fleetTk.countFleet(ctx, slotAt(itsSlots[0]))
	if !counted(dead, itsSlots[0]) {
		t.Fatalf("the fleet count before the failover: slot %d not counted on %s", itsSlots[0], dead.Addr())
	}
	getTk.countFleet(ctx, slotAt(getSlots[0]))
	if got := getTk.fleet.Size(); got < 1 || got == 5 {
		t.Fatalf("the fleet count before the failover found %d gates, want some, not 5", got)
	}
	clockTk.checkClock(ctx)
	if _, node := clockTk.clockSource(ctx); !clockTk.clockCheck.measured || node != dead.Addr() {
		t.Fatalf("the clock check before the failover: measured %v on %q, want on %s", clockTk.clockCheck.measured, node, dead.Addr())
	}
	loaded := time.Now()

	dead.Stop(t)
	promoted := cl.Promoted(t)
	// follow waits a few seconds (polled) for c's slot map to name promoted for key: the
	// refresh a failure had it make. Unrefreshed, the map names dead for a minute from
	// loaded, far longer than the attempts below take.
	follow := func(c *Ticker, key string) {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c.nodeOf(ctx, key) == promoted.Addr() {
				return
			}
		}
	}
	const attempts = 3 // a refresh may read the map of a node not yet told of the failover

	for i := 0; ; i++ {
		if i == attempts {
			t.Fatalf("the clock check after %d attempts (%v after the slot map was loaded) asks %q, not the promoted %s",
				attempts, time.Since(loaded).Round(time.Millisecond), nodeName(clockTk.clockSource(ctx)), promoted.Addr())
		}
		wall.Advance(clockCheckInterval)
		clockTk.clockCheck.measured = false
		clockTk.checkClock(ctx)
		if _, node := clockTk.clockSource(ctx); clockTk.clockCheck.measured && node == promoted.Addr() {
			break
		}
		follow(clockTk, LiveKeyFor(DefaultKeyPrefix))
	}

	for i := 1; ; i++ {
		if i == 1+attempts {
			t.Fatalf("the fleet count after %d attempts (%v after the slot map was loaded) counts on %q, not the promoted %s",
				attempts, time.Since(loaded).Round(time.Millisecond), fleetTk.nodeOf(ctx, FleetKeyFor(DefaultKeyPrefix, itsSlots[i-1])), promoted.Addr())
		}
		fleetTk.countFleet(ctx, slotAt(itsSlots[i]))
		if counted(promoted, itsSlots[i]) {
			break
		}
		follow(fleetTk, FleetKeyFor(DefaultKeyPrefix, itsSlots[i]))
	}

	// The GET of the last slot's counter, now the promoted primary's, which counts 4
	// gates there: read, the fleet is 5 (this gate did not count itself in that slot).
	for i := 1; ; i++ {
		last := FleetKeyFor(DefaultKeyPrefix, getSlots[i]-1)
		if i == 1+attempts {
			t.Fatalf("the fleet count after %d attempts (%v after the slot map was loaded) reads %s on %q, not the promoted %s: %d gates",
				attempts, time.Since(loaded).Round(time.Millisecond), last, getTk.nodeOf(ctx, last), promoted.Addr(), getTk.fleet.Size())
		}
		if err := promoted.Client(t).Set(ctx, last, 4, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		getTk.countFleet(ctx, slotAt(getSlots[i]))
		if getTk.fleet.Size() == 5 {
			break
		}
		follow(getTk, last)
	}
}

// nodeName is clockSource's node.
func nodeName(_ any, node string) string { return node }

// TestTrackNodesDeletesAPrimaryGoneAfterItsSuccessorCame: a tick whose slot map changed
// while it looked its lanes' primaries up (the client reloads it in the background)
// sends to the old primary and its successor both; the next tick, the old one gone, has
// no new primary. The gone one's series are deleted all the same. Before, they were
// deleted only when a new primary came, which it had a tick before: kept for good.
func TestTrackNodesDeletesAPrimaryGoneAfterItsSuccessorCame(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry(), 1, true, nil, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tk := &Ticker{m: m}
	for _, nodes := range [][]string{{"a:1", "b:1", "d:1"}, {"a:1", "b:1", "d:1", "p:1"}, {"a:1", "b:1", "p:1"}} {
		tk.trackNodes(&plan{nodes: nodes})
	}
	for k := range errorSeries(t, tk) {
		if k[1] == "d:1" {
			t.Errorf("gate_limiter_errors_total{cause=%q,redis_instance=%q} kept for a primary gone from the slot map", k[0], k[1])
		}
	}
	if _, ok := errorSeries(t, tk)[[2]string{"timeout", "p:1"}]; !ok {
		t.Error("no series of the new primary p:1")
	}
}
