package redistest

import (
	"context"
	"testing"
)

func TestStartClusterServesKeys(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	owner := c.Owner(t, "k{x}")
	if err := owner.Client(t).Set(context.Background(), "k{x}", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the slot's owner: %v", err)
	}
}

func TestStartSentinelKnowsPrimary(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 1, 1)
	if got := s.CurrentPrimary(t); got != s.Primary.Addr() {
		t.Errorf("sentinel says the primary is %s, want %s", got, s.Primary.Addr())
	}
}
