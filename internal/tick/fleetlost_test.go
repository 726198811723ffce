package tick

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// A Redis that loses the fleet's counts (restarted empty, or down for a slot or more, so
// that no gate's count of it landed), or that refused every gate's count for a while
// (OOM under noeviction), leaves the slots the gates read next without a count, or with
// none of the gates that ran: each gate found a fleet of 1 for a slot or two after, its
// floors and pending-read share N times the fleet's (a key under the floor on every gate
// admitted fleet-wide up to N × SyncFloor of its threshold, unread) and gate_fleet_gates
// 1 on every gate. A slot that holds no count, though this gate ran in it, says nothing of
// the fleet: the last size found stays.
func TestFleetSizeKeptWhenRedisLosesItsCount(t *testing.T) {
	slot0 := time.Unix(1_800_000_000, 0).Truncate(FleetSlot)
	at := func(s int) time.Time { return slot0.Add(time.Duration(s)*FleetSlot + time.Second) }
	ctx := context.Background()
	setup := func(t *testing.T) (*redistest.Server, []*gate, func(s int) []int) {
		srv := redistest.Start(t)
		var gates []*gate
		// TickTimeout a minute: a count a loaded machine's Redis is slow to answer is
		// not the count Redis lost.
		for i := range 3 {
			gates = append(gates, newGate(t, nil, limit.Config{Window: time.Minute}, Config{KeyPrefix: "fk", Writer: fmt.Sprint("w", i), TickTimeout: time.Minute}, srv))
		}
		count := func(s int) []int {
			var sizes []int
			for _, g := range gates {
				g.tk.countFleet(ctx, at(s))
				sizes = append(sizes, g.l.FleetSize())
			}
			return sizes
		}
		for s := range 3 {
			count(s)
		}
		if got := count(3); fmt.Sprint(got) != "[3 3 3]" {
			t.Fatalf("three gates counted over four slots: sizes %v, want 3 each", got)
		}
		return srv, gates, count
	}
	t.Run("restarted empty", func(t *testing.T) {
		srv, _, count := setup(t)
		srv.Restart(t)
		for s := 4; s < 7; s++ {
			if got := count(s); fmt.Sprint(got) != "[3 3 3]" {
				t.Errorf("slot %d after Redis restarted empty: sizes %v, want 3 each", s, got)
			}
		}
	})
	t.Run("down two slots", func(t *testing.T) {
		srv, _, count := setup(t)
		srv.Stop(t)
		count(4)
		count(5)
		srv.Restart(t)
		for s := 6; s < 9; s++ {
			if got := count(s); fmt.Sprint(got) != "[3 3 3]" {
				t.Errorf("slot %d after Redis was down two slots: sizes %v, want 3 each", s, got)
			}
		}
	})
	t.Run("writes refused two slots", func(t *testing.T) {
		srv, _, count := setup(t)
		srv.RefuseWrites(t, redistest.RefuseOOM)
		count(4)
		count(5)
		srv.AcceptWrites(t)
		for s := 6; s < 9; s++ {
			if got := count(s); fmt.Sprint(got) != "[3 3 3]" {
				t.Errorf("slot %d after Redis refused writes two slots: sizes %v, want 3 each", s, got)
			}
		}
	})
}
