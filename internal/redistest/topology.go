package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// topologyTimeout bounds how long a cluster or sentinel set may take to settle.
const topologyTimeout = 30 * time.Second

// ClusterNodeTimeout is the cluster-node-timeout of clusters started by StartCluster: small,
// so that a killed primary's replica takes over within a few seconds.
const ClusterNodeTimeout = time.Second

// Cluster is a Redis Cluster of servers started by StartCluster.
type Cluster struct {
	// Primaries and Replicas as they were after creation, each a Server that can be
	// stopped to simulate a lost node.
	Primaries []*Server
	Replicas  []*Server
}

// StartCluster starts primaries × (1 + replicasPer) redis-server processes with cluster
// mode on, joins them with redis-cli --cluster create, and returns once every node reports
// cluster_state:ok, knows every other node, and every replica is in sync with its primary.
// Like Start, it skips (or fails under CI=true) without redis-server, and fails without
// redis-cli.
func StartCluster(t testing.TB, primaries, replicasPer int) *Cluster {
	t.Helper()
	if primaries < 3 {
		t.Fatalf("redistest: StartCluster: Redis Cluster needs at least 3 primaries, got %d", primaries)
	}
	cli := lookCLI(t)
	n := primaries * (1 + replicasPer)
	nodes := make([]*Server, 0, n)
	for range n {
		nodes = append(nodes, start(t, nil, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout / time.Millisecond)),
			// A replica takes over however long its link was down: a test kills primaries
			// at arbitrary moments.
			"--cluster-replica-validity-factor", "0",
		}, Options{}))
	}
	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPer), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c := &Cluster{}
	deadline := time.Now().Add(topologyTimeout)
	for _, s := range nodes {
		waitFor(t, deadline, s, func(info string) bool {
			return strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r")
		}, "CLUSTER", "INFO")
	}
	for _, s := range nodes {
		var role string
		waitFor(t, deadline, s, func(info string) bool {
			role = field(info, "role")
			return role == "master" || field(info, "master_link_status") == "up"
		}, "INFO", "replication")
		if role == "master" {
			c.Primaries = append(c.Primaries, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if len(c.Primaries) != primaries {
		t.Fatalf("redistest: cluster has %d primaries, want %d", len(c.Primaries), primaries)
	}
	return c
}

// URLs returns every node's URL, to use as seed nodes.
func (c *Cluster) URLs() []string {
	var u []string
	for _, s := range append(append([]*Server(nil), c.Primaries...), c.Replicas...) {
		u = append(u, s.URL())
	}
	return u
}

// Owner returns the primary that serves key's slot now, asking each running primary for
// its own slot ranges (CLUSTER SHARDS would do, but CLUSTER SLOTS is enough for 7.0).
func (c *Cluster) Owner(t testing.TB, key string) *Server {
	t.Helper()
	all := append(append([]*Server(nil), c.Primaries...), c.Replicas...)
	for _, s := range all {
		if !s.running() {
			continue
		}
		if addr := c.ownerAddr(t, s, key); addr != "" {
			for _, o := range all {
				if o.Addr() == addr {
					return o
				}
			}
		}
	}
	t.Fatalf("redistest: no node owns the slot of %q", key)
	return nil
}

// Promoted returns the replica that has taken over as a primary (ROLE master), waiting up
// to topologyTimeout for one: after a primary is stopped, its replica's promotion.
func (c *Cluster) Promoted(t testing.TB) *Server {
	t.Helper()
	for deadline := time.Now().Add(topologyTimeout); ; time.Sleep(50 * time.Millisecond) {
		for _, r := range c.Replicas {
			if !r.running() {
				continue
			}
			if role, _ := r.Client(t).Do(context.Background(), "ROLE").Slice(); len(role) > 0 && role[0] == "master" {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no replica promoted within %s", topologyTimeout)
		}
	}
}

// MoveEmptySlot gives the slot of key, which must hold no key, from its owner to the
// primary to, and returns once every running primary names to as its owner.
//
// It marks the slot importing on to before giving it (as redis-cli's resharding does),
// whatever the slot holds: a node given a slot it was importing bumps its config epoch,
// and only that keeps the move. A slot simply reassigned keeps the new owner's old epoch,
// and the old owner's gossip, if it reaches the new owner before the old owner is told,
// claims the slot back with its higher epoch: each node then names the other, and every
// command on the slot is redirected between them for good (a CI run of a test that
// reassigned slots that way waited 30 s for a write).
func (c *Cluster) MoveEmptySlot(t testing.TB, key string, to *Server) {
	t.Helper()
	ctx := context.Background()
	from := c.Owner(t, key)
	if from == to {
		t.Fatalf("redistest: MoveEmptySlot: %s owns the slot of %q already", to.Addr(), key)
	}
	fc, tc := from.Client(t), to.Client(t)
	slot, err := fc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	if n, err := fc.ClusterCountKeysInSlot(ctx, int(slot)).Result(); err != nil || n != 0 {
		t.Fatalf("redistest: MoveEmptySlot: slot %d holds %d keys (%v)", slot, n, err)
	}
	fromID, err1 := fc.Do(ctx, "CLUSTER", "MYID").Text()
	toID, err2 := tc.Do(ctx, "CLUSTER", "MYID").Text()
	if err1 != nil || err2 != nil {
		t.Fatalf("redistest: CLUSTER MYID: %v, %v", err1, err2)
	}
	do := func(s *Server, args ...any) {
		t.Helper()
		rc := s.rawClient()
		defer rc.Close()
		if err := rc.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: %v on %s: %v", args, s.Addr(), err)
		}
	}
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID)
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID)
	do(to, "CLUSTER", "SETSLOT", slot, "NODE", toID) // first: its epoch bumped
	for _, p := range c.Primaries {
		if p != to && p.running() {
			do(p, "CLUSTER", "SETSLOT", slot, "NODE", toID)
		}
	}
	deadline := time.Now().Add(topologyTimeout)
	for _, p := range c.Primaries {
		if !p.running() {
			continue
		}
		for c.ownerAddr(t, p, key) != to.Addr() {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: %s does not name %s the owner of slot %d after %v", p.Addr(), to.Addr(), slot, topologyTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// ownerAddr is the address of the node s names the owner of key's slot ("" if none).
func (c *Cluster) ownerAddr(t testing.TB, s *Server, key string) string {
	t.Helper()
	ctx := context.Background()
	// A client of its own, closed here: MoveEmptySlot asks every 20 ms for up to
	// topologyTimeout, and Client's, closed at the test's end, kept a connection each.
	rc := s.rawClient()
	defer rc.Close()
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q on %s: %v", key, s.Addr(), err)
	}
	// CLUSTER SLOTS, though deprecated in Redis 7 for CLUSTER SHARDS: tests run
	// against whatever redis-server is on PATH, and 6.x has no CLUSTER SHARDS.
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; this must run on 6.x too.
	ranges, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER SLOTS on %s: %v", s.Addr(), err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr
		}
	}
	return ""
}

// SentinelSet is a primary, its replicas and the sentinels watching them.
type SentinelSet struct {
	Master    string // the name the sentinels know the primary by
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Server
}

// SentinelDownAfter is how long sentinels started by StartSentinel wait before they call a
// silent primary down.
const SentinelDownAfter = time.Second

// SentinelOptions protect a set started by StartSentinelWith; the zero value is
// StartSentinel's open set.
type SentinelOptions struct {
	// Password is the primary's and the replicas' requirepass (and the replicas' and
	// sentinels' password for the primary); empty for none.
	Password string
	// SentinelPassword is the sentinels' own requirepass, which they also give each
	// other, as Bitnami's chart sets it; empty for none.
	SentinelPassword string
}

// StartSentinel starts a primary, replicas replicas of it and sentinels sentinels (quorum
// a majority) watching it as master "gate-master", and returns once every replica is in
// sync and every sentinel knows every replica and the other sentinels.
func StartSentinel(t testing.TB, replicas, sentinels int) *SentinelSet {
	t.Helper()
	return StartSentinelWith(t, replicas, sentinels, SentinelOptions{})
}

// StartSentinelWith is StartSentinel with passwords on the data nodes and on the
// sentinels (opts).
func StartSentinelWith(t testing.TB, replicas, sentinels int, opts SentinelOptions) *SentinelSet {
	t.Helper()
	if sentinels < 1 {
		t.Fatalf("redistest: StartSentinel: need at least one sentinel")
	}
	data := Options{Password: opts.Password}
	set := &SentinelSet{Master: "gate-master", Primary: StartWith(t, data)}
	deadline := time.Now().Add(topologyTimeout)
	var masterauth []string
	if opts.Password != "" {
		masterauth = []string{"--masterauth", opts.Password}
	}
	for range replicas {
		r := start(t, nil, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(set.Primary.port)}, masterauth...), data)
		waitFor(t, deadline, r, func(info string) bool { return field(info, "master_link_status") == "up" }, "INFO", "replication")
		set.Replicas = append(set.Replicas, r)
	}
	quorum := sentinels/2 + 1
	for range sentinels {
		conf := func(dir string) string {
			p := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
				"sentinel down-after-milliseconds %[1]s %[4]d\n"+
				"sentinel failover-timeout %[1]s 10000\n"+
				"sentinel parallel-syncs %[1]s 1\n",
				set.Master, set.Primary.port, quorum, SentinelDownAfter.Milliseconds())
			if opts.Password != "" {
				body += fmt.Sprintf("sentinel auth-pass %s %s\n", set.Master, opts.Password)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatalf("redistest: writing %s: %v", p, err)
			}
			return p
		}
		// requirepass (from Options.Password) protects the sentinel itself.
		set.Sentinels = append(set.Sentinels, start(t, conf, []string{"--sentinel"}, Options{Password: opts.SentinelPassword}))
	}
	for _, s := range set.Sentinels {
		waitFor(t, deadline, s, func(info string) bool {
			return strings.Contains(info, fmt.Sprintf("slaves=%d,sentinels=%d", replicas, sentinels))
		}, "INFO", "sentinel")
	}
	return set
}

// SentinelAddrs returns the sentinels' host:port addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	var a []string
	for _, x := range s.Sentinels {
		a = append(a, x.Addr())
	}
	return a
}

// CurrentPrimary returns the address the first running sentinel gives for the master.
func (s *SentinelSet) CurrentPrimary(t testing.TB) string {
	t.Helper()
	for _, x := range s.Sentinels {
		if !x.running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: x.Addr(), Password: x.opts.Password})
		addr, err := sc.GetMasterAddrByName(context.Background(), s.Master).Result()
		_ = sc.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1]
		}
	}
	t.Fatal("redistest: no sentinel answers for the master")
	return ""
}

// Failover asks the first running sentinel to fail the master over now (SENTINEL
// FAILOVER: a planned switch, the primary still up), retrying while the sentinel has no
// replica it deems fit yet (NOGOODSLAVE). It returns once the sentinel has taken the
// request, not once the switch is done: wait for that with CurrentPrimary.
func (s *SentinelSet) Failover(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(topologyTimeout)
	var last error
	for time.Now().Before(deadline) {
		for _, x := range s.Sentinels {
			if !x.running() {
				continue
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: x.Addr(), Password: x.opts.Password})
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			last = sc.Failover(ctx, s.Master).Err()
			cancel()
			_ = sc.Close()
			if last == nil {
				return
			}
			if !strings.HasPrefix(last.Error(), "NOGOODSLAVE") {
				t.Fatalf("redistest: SENTINEL FAILOVER %s on %s: %v", s.Master, x.Addr(), last)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.Master, last)
}

// running reports whether the server's process is up.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

func lookCLI(t testing.TB) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		// redis-server was found (start has not skipped yet, but Start would), so a missing
		// redis-cli is a broken installation rather than an absent one.
		if _, serr := exec.LookPath("redis-server"); serr != nil {
			Start(t) // skips, or fails under CI, with Start's message
		}
		t.Fatalf("redistest: redis-cli not found on PATH (%v): it is needed to create a cluster", err)
	}
	return cli
}

// waitFor runs the command on s until ok accepts its reply (as text) or deadline passes.
func waitFor(t testing.TB, deadline time.Time, s *Server, ok func(string) bool, args ...any) {
	t.Helper()
	c := s.rawClient()
	defer c.Close()
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		v, err := c.Do(ctx, args...).Text()
		cancel()
		if err == nil && ok(v) {
			return
		}
		last = v
		if err != nil {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: %s: %v never got the expected reply; last:\n%s\n%s", s.Addr(), args, last, s.logTail())
}

// field returns a "name:value" line's value from an INFO reply.
func field(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}
