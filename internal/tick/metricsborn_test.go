package tick

import (
	"slices"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// gate_limiter_reads_total and gate_limiter_redis_commands_total have every series
// from the gate's start, at zero, as the errors and batches by outcome have: a series
// born at its first event shows no increase() or rate() for that event, and an alert or
// a panel on a reason never seen yet (retry: reads failing) has nothing to look at.
// And a tick's commands stay among those series: none is born later.
func TestReadsAndCommandsExistFromTheStart(t *testing.T) {
	srv := redistest.Start(t)
	g := newGate(t, nil, limit.Config{Window: time.Minute, ColdWriteInterval: writeEveryTick}, Config{}, srv)
	series := func(name, label string) map[string]float64 {
		t.Helper()
		fams, err := g.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label {
						out[lp.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	reads := series("gate_limiter_reads_total", "reason")
	for _, r := range []string{"first", "pending", "hot", "cadence", "ttl", "retry", "profile"} {
		if v, ok := reads[r]; !ok || v != 0 {
			t.Errorf("gate_limiter_reads_total{reason=%q} at the start: %v (present %v), want 0", r, v, ok)
		}
	}
	cmds := series("gate_limiter_redis_commands_total", "command")
	want := []string{"eval", "get", "incrby", "mget", "pexpire", "set"}
	for _, c := range want {
		if v, ok := cmds[c]; !ok || v != 0 {
			t.Errorf("gate_limiter_redis_commands_total{command=%q} at the start: %v (present %v), want 0", c, v, ok)
		}
	}
	for range 3 {
		g.l.Check("team", 1)
		g.tk.Tick(t.Context())
	}
	for c, v := range series("gate_limiter_redis_commands_total", "command") {
		if !slices.Contains(want, c) {
			t.Errorf("command=%q counted (%v) but not among the series made at the start", c, v)
		}
	}
}
