package gate

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/capturegate/gate/internal/redistest"
)

// Fifty reloads, one after another, leave one generation running: each old one's tick
// and overrides refreshers stop a tick after it is replaced, the gate's registry gathers
// without error (no series twice), the goroutines are as many as before the first, and
// no retired generation is held in memory.
func TestRulesManyReloadsLeakNothing(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	text := func(n int) string {
		return fmt.Sprintf("rules:\n  - {name: team, key: json:team_id, limits: [1m:%d]}\n  - {name: other, key: json:team_id, limits: [1h:%d]}\n", 1000+n, 5000+n)
	}
	writeRules(t, path, text(0))
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
		"GATE_TICK_INTERVAL": "200ms",
	})
	g := startReloading(t, cfg, "reload-many")
	waitFor(t, "the first generation's overrides read", func() bool { return len(pendingReads(g.gen.Load().overrides)) == 0 })
	time.Sleep(500 * time.Millisecond)
	before := runtime.NumGoroutine()
	gens := []weak.Pointer[generation]{weak.Make(g.gen.Load())}
	for i := 1; i <= 50; i++ {
		writeRules(t, path, text(i))
		waitFor(t, fmt.Sprintf("generation %d", i+1), func() bool { return g.gen.Load().n == i+1 })
		if _, err := g.Reg.Gather(); err != nil {
			t.Fatalf("after reload %d: gathering the gate's metrics: %v", i, err)
		}
		gens = append(gens, weak.Make(g.gen.Load()))
	}
	var after int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before || time.Now().After(deadline) {
			break
		}
	}
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before 50 reloads, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	// The retired generations are let go: nothing of the gate holds one once its tick
	// has stopped (g.Lim, g.Ticker and g.Router are the first's, as the gate started).
	runtime.GC()
	runtime.GC()
	var kept []int
	for i, w := range gens[1 : len(gens)-1] {
		if w.Value() != nil {
			kept = append(kept, i+2)
		}
	}
	if len(kept) > 0 {
		t.Errorf("retired generations still held after 50 reloads: %v", kept)
	}
	mfs, err := g.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gate_rules_loads_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "ok" && m.GetCounter().GetValue() != 51 {
					t.Errorf("gate_rules_loads_total{result=ok} = %v, want 51", m.GetCounter().GetValue())
				}
			}
		}
	}
}
