package tick

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestFailedReadsLoggedAsTeams: Redis answers a split tick's writes, then stalls through
// its reads (a fork, a slow command), and every team's read times out. The failure line
// says how many reads failed in the unit it says how many were made, teams: before, it
// gave the MGETs that failed against the teams read, "failed_reads=5 reads=300" for 300
// teams all read from this gate's own counts, as if under 2% had failed.
func TestFailedReadsLoggedAsTeams(t *testing.T) {
	const teams = 300 // in MGETs of 200 keys, a few of them
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart.Add(5 * time.Second))
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 100},
		Config{TickTimeout: 10 * time.Second}, srv) // the stalled read phase alone waits stallWait (stallCtx)
	logs := g.withLog()
	ctx := context.Background()
	for i := range teams {
		g.l.Check(fmt.Sprintf("team-%d", i), 50) // half the threshold: each read on its first tick
	}
	if r := g.tk.WritePhase(ctx); r.Errors != 0 || r.Writes != teams {
		t.Fatalf("write phase = %+v, want the %d teams' counts written", r, teams)
	}
	srv.Pause(t)
	r := g.tk.ReadPhase(stallCtx(ctx, t))
	srv.Resume(t)
	if r.FailedReads != teams {
		t.Fatalf("read phase during the stall = %+v, want the %d teams' reads failed", r, teams)
	}
	lines := logs.lines("level=WARN", "redis pipeline failed")
	if len(lines) != 1 {
		t.Fatalf("%d failure lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	// A timeout says which settings bound the wait: a slow Redis and a dead one look alike.
	if !strings.Contains(lines[0], "GATE_REDIS_READ_TIMEOUT") {
		t.Errorf("failure line of a timeout does not name GATE_REDIS_READ_TIMEOUT\n%s", lines[0])
	}
	if want := fmt.Sprintf("failed_reads=%d reads=%d", teams, teams); !strings.Contains(lines[0], want) {
		t.Errorf("failure line does not say %q: every team's read failed\n%s", want, lines[0])
	}
}
