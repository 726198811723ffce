package tick

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// docsRedisGrants returns every ACL grant (+cmd, +cmd|sub) that docs/operations.md's
// "What the gate needs from Redis" section writes: what an operator who follows the
// section, whatever the mode, gives the gate's user.
func docsRedisGrants(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "### What the gate needs from Redis")
	if i < 0 {
		t.Fatal(`docs/operations.md has no section "What the gate needs from Redis"`)
	}
	sec := doc[i+1:]
	if j := strings.Index(sec, "\n### "); j >= 0 {
		sec = sec[:j]
	}
	// The sentinels' own user (their table row and ACL example) is no data node's.
	var lines []string
	for _, l := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(l, "| sentinel mode") {
			lines = append(lines, l)
		}
	}
	sec = strings.Join(lines, "\n")
	if i := strings.Index(sec, "`ACL SETUSER gate-sentinel "); i >= 0 {
		if j := strings.IndexByte(sec[i+1:], '`'); j >= 0 {
			sec = sec[:i] + sec[i+1+j+1:]
		}
	}
	var grants []string
	for _, m := range regexp.MustCompile("(?:^|[\\s`])(\\+[a-z|]+)").FindAllStringSubmatch(sec, -1) {
		grants = append(grants, m[1])
	}
	slices.Sort(grants)
	return slices.Compact(grants)
}

// TestClusterTickNeedsOnlyTheDocumentedRedisCommands: docs/operations.md ("What the gate
// needs from Redis") says a Redis ACL user limited to the listed commands works, and
// GATE_REDIS_MODE=cluster is one of the gate's modes. With the grants the section writes,
// on every node of a Redis Cluster, the tick must write and read as it does on a
// standalone instance. go-redis's cluster client learns the slots with CLUSTER SLOTS:
// without it every tick fails (NOPERM), the counts are never shared and no team is
// limited fleet-wide.
func TestClusterTickNeedsOnlyTheDocumentedRedisCommands(t *testing.T) {
	t.Parallel()
	grants := docsRedisGrants(t)
	if !slices.Contains(grants, "+eval") || !slices.Contains(grants, "+mget") {
		t.Fatalf("grants read from docs/operations.md = %v: the parse is broken", grants)
	}
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	var urls []string
	for _, s := range cl.Primaries {
		acl := []any{"ACL", "SETUSER", "gate", "on", ">gate-pw", "resetkeys", "~gate:*", "resetchannels", "-@all"}
		for _, g := range grants {
			acl = append(acl, g)
		}
		if err := s.Client(t).Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, s.URLAs("gate", "gate-pw"))
	}
	cc, err := DialCluster(urls, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100}, Config{Mode: ModeCluster}, cc)
	g.l.Check("team", 150)
	for i := range 3 {
		clk.Advance(time.Second)
		if r := g.tk.Tick(ctx); r.Errors != 0 {
			t.Fatalf("tick %d in cluster mode, as a user with the grants of docs/operations.md %v = %+v", i, grants, r)
		}
	}
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Errorf("PING (readiness) in cluster mode with the documented ACL: %v", err)
	}
}

// TestProbeRightsAsksEveryClusterPrimary: Redis Cluster keeps its ACLs per node (ACL
// SETUSER is not passed on), so a grant an operator added on two primaries of three, by
// hand, leaves the third refusing the tick's writes of every key in its slots: a third of
// the teams never shared. Readiness's probe asked the node owning its one key only, and
// passed. It asks every primary now, with a key in each one's slots, and names the node.
func TestProbeRightsAsksEveryClusterPrimary(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	// The primary refusing is one the one key gate:probe:rights is not in: asked there
	// (GET), the others answer MOVED.
	deny := -1
	for i, s := range cl.Primaries {
		if err := s.Client(t).Get(ctx, "gate:probe:rights").Err(); err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			deny = i
			break
		}
	}
	if deny < 0 {
		t.Fatal("every primary owns gate:probe:rights's slot")
	}
	var urls []string
	for i, s := range cl.Primaries {
		acl := []any{"ACL", "SETUSER", "gate", "on", ">pw", "resetkeys", "~gate:*", "-@all",
			"+get", "+set", "+incrby", "+pexpire", "+mget", "+ping", "+hello", "+info", "+cluster|slots", "+cluster|shards", "+readonly"}
		if i != deny {
			acl = append(acl, "+eval")
		}
		if err := s.Client(t).Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, s.URLAs("gate", "pw"))
	}
	cc, err := DialCluster(urls, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	err = ProbeRights(ctx, cc, "gate")
	if err == nil || !strings.Contains(err.Error(), cl.Primaries[deny].Addr()) || !strings.Contains(strings.ToLower(err.Error()), "eval") {
		t.Fatalf("probe with one primary of three without +eval = %v; want its refusal, naming %s", err, cl.Primaries[deny].Addr())
	}
	if err := cl.Primaries[deny].Client(t).Do(ctx, "ACL", "SETUSER", "gate", "+eval").Err(); err != nil {
		t.Fatal(err)
	}
	if err := ProbeRights(ctx, cc, "gate"); err != nil {
		t.Errorf("probe with every primary granted: %v", err)
	}
}
