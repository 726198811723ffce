package gate

import (
	"fmt"
	"testing"
)

// ticksOf returns how many ticks gen's ticker has ended: the count of
// gate_limiter_tick_duration_seconds in the generation's registry, which every tick
// observes, failed or not, each tick of a final flush too.
func ticksOf(t *testing.T, gen *generation) uint64 {
	t.Helper()
	mfs, err := gen.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gate_limiter_tick_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("generation %d has no gate_limiter_tick_duration_seconds", gen.n)
	return 0
}

// waitTicks waits until gen's ticker has ended n more ticks than when called: a wait for
// the ticks a test means, which a loaded machine may run late, not for the time they take
// on an idle one.
func waitTicks(t *testing.T, gen *generation, n uint64) {
	t.Helper()
	from := ticksOf(t, gen)
	waitFor(t, fmt.Sprintf("%d ticks of the rules' generation %d", n, gen.n), func() bool { return ticksOf(t, gen) >= from+n })
}

// waitRetired waits until old, a generation the gate replaced, has stopped ticking: its
// tick count has not moved over two ticks of cur, which ticks as often (its tick runs a
// tick interval past the reload, then flushes and stops).
func waitRetired(t *testing.T, old, cur *generation) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the retired generation %d's tick stopped", old.n), func() bool {
		before := ticksOf(t, old)
		waitTicks(t, cur, 2)
		return ticksOf(t, old) == before
	})
}
