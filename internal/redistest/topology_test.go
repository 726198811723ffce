package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartClusterServesKeys(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	owner := c.Owner(t, "k{x}")
	if err := owner.Client(t).Set(context.Background(), "k{x}", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the slot's owner: %v", err)
	}
}

// TestOwnerLeavesNoConnection: Owner (and MoveEmptySlot's polling, the same ownerAddr)
// closes the client it asks with: each call kept a connection to every node until the
// test's end, some 1,500 a primary in a slow MoveEmptySlot (200 calls: 1 client before,
// 201 after).
func TestOwnerLeavesNoConnection(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	p := c.Primaries[0]
	admin := p.Client(t) // one client of the test's own, counted in both
	clients := func() int {
		info, err := admin.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(field(info, "connected_clients"))
		return n
	}
	before := clients()
	for i := range 50 {
		c.Owner(t, fmt.Sprintf("k{%d}", i))
	}
	// Closed connections leave the server's count as it reads them: polled, not assumed.
	deadline := time.Now().Add(topologyTimeout)
	for clients() > before+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := clients(); after > before+1 {
		t.Errorf("connected_clients on %s: %d before 50 Owner calls, %d after", p.Addr(), before, after)
	}
}

func TestStartSentinelKnowsPrimary(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 1, 1)
	if got := s.CurrentPrimary(t); got != s.Primary.Addr() {
		t.Errorf("sentinel says the primary is %s, want %s", got, s.Primary.Addr())
	}
}

// TestMoveEmptySlotOutlastsGossip: a slot given to another primary stays given once the
// old owner's gossip has reached the new one. Reassigned without the new owner's epoch
// bump, the new owner took the slot back within half a second of gossip (the old owner
// claims it with a higher epoch), which left the two naming each other once the old owner
// was told: a test's writes were redirected between them until it failed.
func TestMoveEmptySlotOutlastsGossip(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	ctx := context.Background()
	epoch := func(s *Server) int {
		info, err := s.Client(t).ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(field(info, "cluster_my_epoch"))
		return n
	}
	// The new owner has the lowest epoch: the case where the old owner's gossip wins.
	to := c.Primaries[0]
	for _, p := range c.Primaries {
		if epoch(p) < epoch(to) {
			to = p
		}
	}
	key := "k{moved}"
	for i := 0; c.Owner(t, key) == to; i++ {
		key = fmt.Sprintf("k{moved%d}", i)
	}
	from := c.Owner(t, key)
	c.MoveEmptySlot(t, key, to)

	// Gossip from every other node reaches to (it counts the pings and pongs it gets).
	received := func() int {
		info, err := to.Client(t).ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(field(info, "cluster_stats_messages_received"))
		return n
	}
	before := received()
	for deadline := time.Now().Add(topologyTimeout); received() < before+20; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s received no gossip in %v", to.Addr(), topologyTimeout)
		}
	}
	for _, p := range c.Primaries {
		if got := c.ownerAddr(t, p, key); got != to.Addr() {
			t.Errorf("%s names %s the owner, want %s (the slot went back)", p.Addr(), got, to.Addr())
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{from.Addr()}, MaxRedirects: 3})
	defer cc.Close()
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET through a cluster client: %v", err)
	}
	if got, err := to.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("GET on the new owner = %q, %v; want v", got, err)
	}
}
