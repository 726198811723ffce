package tick

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// pipelineCounter counts the pipelines a client sends, other than connection handshakes.
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := cmds[0].Name(); n != "hello" && n != "client" { // not a connection's handshake
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

type multiGate struct {
	min, hour *limit.Limiter
	tk        *Ticker
	pipes     *pipelineCounter
}

// newMultiGate returns a per-minute and a per-hour limiter synced by one ticker.
func newMultiGate(t *testing.T, clk clock.Clock, minThr, hourThr int64, srv *redistest.Server) *multiGate {
	t.Helper()
	return newMultiGateOf(t, clk, limit.Config{Threshold: minThr}, limit.Config{Threshold: hourThr}, srv)
}

// newMultiGateOf is newMultiGate with the two limiters' settings, their windows set to a
// minute and an hour: the primary's keys under t, the hour's under t:w3600.
func newMultiGateOf(t *testing.T, clk clock.Clock, mc, hc limit.Config, srv *redistest.Server) *multiGate {
	t.Helper()
	reg := prometheus.NewRegistry()
	mc.Window, hc.Window = time.Minute, time.Hour
	lm, err := limit.New(mc, clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1m0s"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	lh, err := limit.New(hc, clk, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "1h0m0s"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	pc := &pipelineCounter{}
	clients[0].AddHook(pc)
	tk, err := NewMulti([]Limit{{Lim: lm}, {Lim: lh, KeyPrefix: "t:w3600"}}, []redis.UniversalClient{clients[0]}, Config{KeyPrefix: "t"}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &multiGate{min: lm, hour: lh, tk: tk, pipes: pc}
}

func TestMultiCountsLandInEachLimitsKeysWithTTL(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(59 * time.Second))
	g := newMultiGate(t, clk, 1000, 100000, srv)
	em, eh := g.min.Epoch(clk.Now()), g.hour.Epoch(clk.Now())

	for range 7 {
		g.min.Check("team-a", 1)
		g.hour.Check("team-a", 1)
	}
	g.hour.Check("team-b", 3)
	r := g.tk.Tick(context.Background())
	if r.Errors != 0 || r.Writes != 3 {
		t.Fatalf("tick = %+v, want 3 writes and no error", r)
	}
	if n := g.pipes.n.Load(); n != 1 {
		t.Errorf("pipelines = %d, want 1 for both limits", n)
	}
	for key, want := range map[string]int64{
		Key("t", "team-a", em): 7, Key("t:w3600", "team-a", eh): 7,
		Key("t", "team-b", em): 0, Key("t:w3600", "team-b", eh): 3,
	} {
		if got := getInt(t, rc, key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
	if ttl := rc.TTL(context.Background(), Key("t", "team-a", em)).Val(); ttl <= 2*time.Minute || ttl > 2*time.Minute+KeyTTLMargin {
		t.Errorf("minute key TTL = %s, want within (2m, 2m + margin]", ttl)
	}
	if ttl := rc.TTL(context.Background(), Key("t:w3600", "team-a", eh)).Val(); ttl <= 2*time.Hour || ttl > 2*time.Hour+KeyTTLMargin {
		t.Errorf("hour key TTL = %s, want within (2h, 2h + margin]", ttl)
	}
}

func TestMultiReadsSeedEachLimit(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(15 * time.Second))
	g := newMultiGate(t, clk, 100, 1000, srv)
	em, eh := g.min.Epoch(clk.Now()), g.hour.Epoch(clk.Now())
	ctx := context.Background()
	// The minute limit: 80 × 0.75 + 40 = 100, at its threshold. The hour limit: the
	// fleet counted 2000 in this hour, twice its threshold.
	rc.Set(ctx, Key("t", "team", em-1), 80, 0)
	rc.Set(ctx, Key("t", "team", em), 40, 0)
	rc.Set(ctx, Key("t:w3600", "team", eh), 2000, 0)

	if d := g.min.Check("team", 1); d.Limited {
		t.Fatalf("first contact limited: %+v", d)
	}
	if d := g.hour.Check("team", 20); d.Limited { // above the sync floor: read on the next tick
		t.Fatalf("first contact limited: %+v", d)
	}
	before := g.pipes.n.Load()
	if r := g.tk.Tick(ctx); r.Reads != 2 || r.Errors != 0 {
		t.Fatalf("tick = %+v, want both limits read", r)
	}
	if n := g.pipes.n.Load() - before; n != 1 {
		t.Errorf("pipelines = %d, want 1 for the writes and reads of both limits", n)
	}
	if d := g.min.Check("team", 0); !d.Limited || d.Level < 100 || d.Level > 102 {
		t.Errorf("minute limit after read: %+v, want limited at level ≈ 101", d)
	}
	if d := g.hour.Check("team", 0); !d.Limited || d.Level < 2000 {
		t.Errorf("hour limit after read: %+v, want limited at level ≥ 2000", d)
	}
}

func TestNewMultiRejectsSharedPrefix(t *testing.T) {
	reg := prometheus.NewRegistry()
	l1, _ := limit.New(limit.Config{}, nil, nil)
	l2, _ := limit.New(limit.Config{Window: time.Hour}, nil, nil)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := NewMulti([]Limit{{Lim: l1}, {Lim: l2}}, []redis.UniversalClient{c}, Config{}, reg, nil); err == nil {
		t.Error("two limits with one key prefix accepted")
	}
}

// TestMultiClusterSharesBatchesAcrossLimits: in cluster mode, two limits of one window
// share their lanes' write batches and hold commands (a lane is one slot, whatever the
// limit's prefix), and Redis takes every one of them: each counter of both limits holds
// its count with the window's TTL, and every team over both limits has both flags set.
// A batch or hold command whose keys spanned slots would be refused (CROSSSLOT).
func TestMultiClusterSharesBatchesAcrossLimits(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	clk := clock.NewFake(epochStart.Add(30 * time.Second))
	lc := limit.Config{Window: time.Minute, Threshold: 100, Mode: limit.Divert, DivertHold: 5 * time.Second, DivertRelease: 0.8}
	var lims []*limit.Limiter
	for range 2 {
		l, err := limit.New(lc, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	// The test's client timeouts and a minute for the tick: one tick must write all, and
	// under -race with four test packages at once on two cores the default deadline (3/4
	// of the 1 s tick) cut it short (1,298 of 2,006 written).
	cc, err := DialCluster(cl.URLs(), testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	prefixes := []string{"t:rule:a", "t:rule:b"}
	tk, err := NewMulti([]Limit{{Lim: lims[0], KeyPrefix: prefixes[0]}, {Lim: lims[1], KeyPrefix: prefixes[1]}},
		[]redis.UniversalClient{cc}, Config{Mode: ModeCluster, KeyPrefix: "t", TickTimeout: time.Minute}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 teams over 256 lanes: most lanes carry several teams of both limits.
	var teams []string
	for i := range 1000 {
		teams = append(teams, fmt.Sprintf("team-%d", i))
	}
	teams = append(teams, "a{b}c", "{", "}")
	now := clk.Now()
	for i, team := range teams {
		lims[0].CheckAt(now, team, int64(1+i%7))
		lims[1].CheckAt(now, team, 150)
		if d := lims[1].CheckAt(now, team, 1); !d.Held {
			t.Fatalf("%q at 151 of 100: %+v, want held", team, d)
		}
	}
	clk.Advance(time.Second)
	r := tk.Tick(context.Background())
	if r.Errors != 0 || r.Writes != 2*len(teams) {
		t.Fatalf("tick = %+v, want %d writes and no error", r, 2*len(teams))
	}
	// Per lane, one write batch of both limits' counters, one hold command, one read.
	if r.Commands > 3*ClusterShards {
		t.Errorf("%d commands for %d counters and %d flags over %d lanes, want at most 3 a lane", r.Commands, 2*len(teams), len(teams), ClusterShards)
	}
	ctx := context.Background()
	// The hold flags first, in one pipeline: they live DivertHold (5 s) in Redis's own
	// time, and the round trips below, one a key, outlasted them under a load of 50 on 2
	// cores (the last few hundred teams "without" a flag).
	exists := make([]*redis.IntCmd, len(teams))
	if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, team := range teams {
			exists[i] = p.Exists(ctx, HoldKeyFor(ModeCluster, prefixes[1], team))
		}
		return nil
	}); err != nil {
		t.Fatalf("reading the hold flags: %v", err)
	}
	for i, team := range teams {
		if exists[i].Val() != 1 {
			t.Errorf("%q: no hold flag under %s", team, prefixes[1])
		}
	}
	ep := lims[0].Epoch(now)
	for i, team := range teams {
		for li, want := range []int64{int64(1 + i%7), 151} {
			key := ClusterKey(prefixes[li], team, ep)
			got, err := cc.Get(ctx, key).Int64()
			if err != nil || got != want {
				t.Fatalf("%s = %d (%v), want %d", key, got, err, want)
			}
			if ttl := cc.TTL(ctx, key).Val(); ttl <= time.Minute || ttl > 2*time.Minute+KeyTTLMargin {
				t.Errorf("%s TTL %s, want the window's", key, ttl)
			}
		}
	}
}

// TestMultiKeysExpireByTheirOwnWindow: the primary limit has the longest window (GATE_WINDOW
// of an hour with a minute limit in GATE_LIMITS, or a rules file whose first rule counts by
// the day), and every other limit's keys still expire after 2 × their own window, as
// GATE_REDIS_KEY_TTL says. Before, the primary's 2 × window was every limit's floor: the
// minute limit's keys (a per-user rule's, one key a user a minute) lived 2 hours.
func TestMultiKeysExpireByTheirOwnWindow(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(59 * time.Second))
	lh, err := limit.New(limit.Config{Window: time.Hour, Threshold: 100000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	tk, err := NewMulti([]Limit{{Lim: lh}, {Lim: lm, KeyPrefix: "t:w60"}}, []redis.UniversalClient{clients[0]}, Config{KeyPrefix: "t"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lh.Check("team-a", 1)
	lm.Check("team-a", 1)
	if r := tk.Tick(context.Background()); r.Errors != 0 || r.Writes != 2 {
		t.Fatalf("tick = %+v, want 2 writes and no error", r)
	}
	ctx := context.Background()
	if ttl := rc.TTL(ctx, Key("t:w60", "team-a", lm.Epoch(clk.Now()))).Val(); ttl <= 2*time.Minute || ttl > 2*time.Minute+KeyTTLMargin {
		t.Errorf("minute key TTL = %s, want within (2m, 2m + margin]", ttl)
	}
	if ttl := rc.TTL(ctx, Key("t", "team-a", lh.Epoch(clk.Now()))).Val(); ttl <= 2*time.Hour || ttl > 2*time.Hour+KeyTTLMargin {
		t.Errorf("hour key TTL = %s, want within (2h, 2h + margin]", ttl)
	}
}

// TestDesignStatesEachLimitsKeyLifetime: docs/design.md's "Several limits per team", where
// an operator sizing Redis for GATE_LIMITS reads how long each limit's keys live, said
// they expire after GATE_REDIS_KEY_TTL raised to 2 × their own window "and to 2 × the
// primary's": with GATE_LIMITS=1h:…,1m:… the minute limit's keys would live 2 hours, 120
// keys a team where the tick leaves 2 or 3 (measured here as the tick writes them). The
// section must give the limit's own window only, as configuration.md's
// GATE_REDIS_KEY_TTL does.
func TestDesignStatesEachLimitsKeyLifetime(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(59 * time.Second))
	lh, err := limit.New(limit.Config{Window: time.Hour, Threshold: 100000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := Dial([]string{srv.URL()}, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	tk, err := NewMulti([]Limit{{Lim: lh}, {Lim: lm, KeyPrefix: "t:w60"}}, []redis.UniversalClient{clients[0]}, Config{KeyPrefix: "t"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lm.Check("team-a", 1)
	if r := tk.Tick(context.Background()); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v, want 1 write and no error", r)
	}
	ttl := rc.TTL(context.Background(), Key("t:w60", "team-a", lm.Epoch(clk.Now()))).Val()
	if ttl > 2*time.Minute+KeyTTLMargin {
		t.Fatalf("the further minute limit's key lives %s, more than 2 × its own window + margin", ttl)
	}

	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "\n## Several limits per team")
	if i < 0 {
		t.Fatal(`docs/design.md has no "Several limits per team" section`)
	}
	s = s[i+1:]
	s = s[:strings.Index(s, "\n## ")]
	j := strings.Index(s, "- each key expires")
	if j < 0 {
		t.Fatal(`docs/design.md's "Several limits per team" no longer says when each key expires; has its wording changed?`)
	}
	item := strings.Join(strings.Fields(s[j:j+strings.Index(s[j:], "\n- ")]), " ")
	if strings.Contains(item, "primary") {
		t.Errorf("docs/design.md, Several limits per team: %q: a further limit's keys live 2 × its own window + %v (%s measured for a minute limit under an hour's), whatever the primary's window", item, KeyTTLMargin, ttl.Round(time.Second))
	}
}

// TestPrimaryTeamNeverMeetsAFurtherLimitsKeys: GATE_LIMITS' further limits keep their keys
// under {prefix}:w{seconds}, the primary under {prefix}, so a primary team spelt
// "w3600:x" (a composite key's first field "w3600", say) had the keys of the hour limit's
// team "x" that carry no epoch: its hold flag and profile. Held by the minute limit, it
// held "x" in the hour limit fleet-wide, far under its threshold, when the two limits had
// the same threshold (found in review). A
// primary team of that form is written escaped ('w' as %77), and so is one starting with
// an escape, so that no two teams of the two limits share a key.
func TestPrimaryTeamNeverMeetsAFurtherLimitsKeys(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(59 * time.Second))
	// The same threshold: a hold flag says which it was set under, and a gate ignores one
	// of another (an override changed since).
	lc := limit.Config{Threshold: 100, Mode: limit.Divert, DivertHold: time.Hour}
	g := newMultiGateOf(t, clk, lc, lc, srv)
	lm, lh, tk := g.min, g.hour, g.tk
	lm.Check("w3600:x", 150)
	if d := lm.Check("w3600:x", 1); !d.Held {
		t.Fatalf("minute limit, w3600:x at 150 of 100: %+v, want held", d)
	}
	ctx := context.Background()
	tick := func() {
		t.Helper()
		clk.Advance(time.Second)
		if r := tk.Tick(ctx); r.Errors != 0 {
			t.Fatalf("tick = %+v, want no error", r)
		}
	}
	tick()
	if n := rc.Exists(ctx, HoldKeyFor(ModeStandalone, "t", "w3600:x")).Val(); n != 1 {
		t.Fatalf("no hold flag written for the minute limit's w3600:x (%s)", HoldKeyFor(ModeStandalone, "t", "w3600:x"))
	}
	// The hour limit meets x now: its first read fetches x's hold flag.
	if d := lh.Check("x", 1); d.Limited {
		t.Fatalf("hour limit, x at 1 of 100: %+v, want allowed", d)
	}
	tick()
	tick()
	if d := lh.Check("x", 1); d.Limited || d.Held {
		t.Errorf("hour limit, x at 2 of 100 after the ticks: %+v, want allowed: the minute limit's hold of w3600:x is no hold of x", d)
	}
	if d := lm.Check("w3600:x", 0); !d.Held {
		t.Errorf("minute limit, w3600:x after the ticks: %+v, want still held", d)
	}
}

// TestTeamKeysNeverMeet: no two teams, nor a team of the primary limit and one of a
// further limit ({prefix}:w{seconds}) or of a rule ({prefix}:rule:{name}, and its further
// limits'), nor a team and a key of the gate's own (the limits check's, the fleet count's,
// the live key, a write lane's sequence, the rights probe's), share a key of any kind, in
// any topology; teams not of the escaped forms keep the keys they always had. Team
// "limits"'s counter was the limits check's key in standalone and sentinel mode (a
// review).
func TestTeamKeysNeverMeet(t *testing.T) {
	teams := []string{"x", "w", "w:x", "w1", "w1:", "w60", "w60:x", "w60:x:1", "w3600:x", "wx:1", "w60x:1",
		"%", "%7760:x", "%77", "%2577", "%25", "%2525", "%3A", "%77x", "%7760", "60:x", "x:w60:x", "W60:x", "",
		"rule", "rule:", "rule:r", "rule:r:x", "rule:r/w60:x", "%72ule:r:x", "%72", "rules:x", "r:x",
		"limits", "limits:7", "limits:7:hashes", "fleet", "fleet:7", "fleet:7:gates", "live", "probe", "probe:rights", "w:g", "w:g:seq"}
	prefixes := []string{"t", "t:w60", "t:w3600", "t:w1", "t:rule:r", "t:rule:r/w60"}
	for _, m := range []Mode{ModeStandalone, ModeSentinel, ModeCluster} {
		seen := map[string]string{}
		for _, p := range prefixes {
			for _, k := range []string{LimitsKeyFor(p, 7), FleetKeyFor(p, 7), LiveKeyFor(p), laneKey(m, p, "g", 0), p + ":probe:rights"} {
				seen[k] = fmt.Sprintf("prefix %q's own key", p)
			}
		}
		for _, p := range prefixes {
			for _, team := range teams {
				for _, k := range []string{KeyFor(m, p, team, 7), HoldKeyFor(m, p, team), ProfileKeyFor(m, p, team)} {
					who := fmt.Sprintf("prefix %q team %q", p, team)
					if o, ok := seen[k]; ok {
						t.Errorf("%s: key %q is %s's and %s's", m, k, o, who)
					}
					seen[k] = who
				}
			}
		}
	}
	// Unchanged keys for every team not of the escaped forms.
	for team, want := range map[string]string{"x": "t:x:7", "w": "t:w:7", "w:x": "t:w:x:7", "w60x:1": "t:w60x:1:7",
		"%3A": "t:%3A:7", "%": "t:%:7", "60:x": "t:60:x:7", "W60:x": "t:W60:x:7", "w60:x": "t:%7760:x:7", "%7760": "t:%257760:7",
		"rules:x": "t:rules:x:7", "rule:r:x": "t:%72ule:r:x:7", "%72ule": "t:%2572ule:7",
		"limits": "t:limits:7", "limits:x": "t:limits:x:7"} {
		if got := Key("t", team, 7); got != want {
			t.Errorf("Key(t, %q, 7) = %q, want %q", team, got, want)
		}
	}
	if got := ClusterKey("t", "w60:x", 7); !strings.HasSuffix(got, "}:w60:x:7") {
		t.Errorf("ClusterKey(t, w60:x, 7) = %q: cluster keys, whose hash tag comes first, never met and are unchanged", got)
	}
}
