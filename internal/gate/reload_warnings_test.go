package gate

import (
	"context"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// A reload does not repeat a warning the clock check just gave: its pace (at most every
// ten minutes) is the gate's, not each rule set's tick's. The gate's Redis user may not
// run TIME, so the first tick's check warns; the reloaded rules' tick checks at once, and
// its own pace, new, let the same warning through again (a review).
func TestRulesReloadDoesNotRepeatTheClockWarning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "gate", "on", ">gate-pw", "~*", "&*", "+@all", "-time").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := rulesConfig(t, srv.URLAs("gate", "gate-pw"), teamRule)
	g, logs := startReloadingLogged(t, cfg, "reload-warnings")
	const warning = "the clock check cannot run TIME"
	waitFor(t, "the clock check's warning of TIME refused", func() bool { return strings.Contains(logs.String(), warning) })
	first := g.gen.Load()
	writeRules(t, cfg.RulesFile, teamRule+"  - {name: other, key: json:team_id, limits: [1m:7]}\n")
	waitFor(t, "the edit to be in use", func() bool { return g.gen.Load() != first })
	// The new rules' tick has made its first check once it has ticked.
	waitTicks(t, g.gen.Load(), 2)
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Errorf("%d warnings of TIME refused within ten minutes across a reload, want 1:\n%s", n, logs.String())
	}
}
