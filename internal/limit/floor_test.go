package limit

import (
	"math"
	"testing"
	"time"
)

// TestLevelFloor: for one tick after a shared read, a gate that sees at most half of a
// team's records keeps its level at or above the estimate it read; after that tick the
// estimate drains at its rate from where the floor left it. A view rebuilt locally (Redis
// out of reach: the limiter fails open) and a gate that sees most of the team's records
// get no floor: their levels drain from the read at once.
func TestLevelFloor(t *testing.T) {
	const (
		tick  = int64(time.Second)
		est   = 1000.0
		drain = 500.0 / float64(time.Second) // records per ns
	)
	at := t0.UnixNano()
	level := func(factor float64, local bool, after time.Duration) float64 {
		var e entry
		e.estimate.Store(packView(est, drain, factor))
		e.readAt.Store(readStamp(at, local))
		return e.level(at+after.Nanoseconds(), tick)
	}
	for _, c := range []struct {
		name   string
		factor float64
		local  bool
		after  time.Duration
		want   float64
	}{
		{"one of four gates, half a tick on: held at the read", 4, false, 500 * time.Millisecond, 1000},
		{"one of four gates, a tick and a half on: drained half a tick", 4, false, 1500 * time.Millisecond, 750},
		{"rebuilt locally: drains at once", 4, true, 500 * time.Millisecond, 750},
		{"most records seen here (factor 1.5): drains at once", 1.5, false, 500 * time.Millisecond, 750},
	} {
		if got := level(c.factor, c.local, c.after); math.Abs(got-c.want) > 1 {
			t.Errorf("%s: level %.1f, want %.0f", c.name, got, c.want)
		}
	}
}
