package main

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// Two operators adding a team each to a hash one team short of GATE_OVERRIDES_MAX_ENTRIES
// at the same moment: one is refused. Checked (checkRoom) and written (overrides.Set) in
// two steps, both passed the check before either wrote, and the hash ended over the cap,
// which every gate refuses whole as too large, keeping its limits: neither override, nor
// any change after, applied, though both commands said it would.
func TestOverridesSetConcurrentKeepsTheCap(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	env := map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_OVERRIDES_MAX_ENTRIES": "3"}
	for _, team := range []string{"a", "b"} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"overrides", "set", team, "5"}, testHost(env), &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
	}
	const operators = 8
	var wg sync.WaitGroup
	errs := make([]error, operators)
	for i := range operators {
		wg.Go(func() {
			var stdout, stderr bytes.Buffer
			errs[i] = run(t.Context(), []string{"overrides", "set", fmt.Sprintf("t%d", i), "7"}, testHost(env), &stdout, &stderr)
		})
	}
	wg.Wait()
	set := 0
	for _, err := range errs {
		if err == nil {
			set++
		}
	}
	n, err := rs.Client(t).HLen(t.Context(), "gate:overrides").Result()
	if err != nil {
		t.Fatal(err)
	}
	if teams := n - 2; set != 1 || teams > 3 { // n less the marker and the version
		t.Errorf("%d concurrent sets of new teams to a hash of 2 (cap 3): %d succeeded, the hash holds %d teams; want 1 and 3 (errors %v)", operators, set, teams, errs)
	}
}
