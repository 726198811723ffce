package tick

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestBacklogFitsTheTickTimeout: a backlog larger than Redis answers within the client's
// timeouts (150,000 teams counted at once, each due for a write and, at a read floor of
// one record, for reads: a per-user rule when a third gate joined the demo, or the counts
// kept through an outage) was sent whole every tick, and every tick timed out: nothing
// written or read for as long as it lasted (0 writes in 30 ticks here; over a minute in
// the demo, a team at twice its limit let through), writes in doubt resent whole and
// failed reads due again. The tick fits its key budget to what Redis answers in time
// (fitBudget): the backlog is written, and reads are made, tick by tick.
//
// The ticks go on until a quarter of the backlog is written rather than stopping at 20:
// how many pipelines answer within 40 ms is the machine's load. Quiet, 20 ticks write all
// of it; beside the package's parallel tests a loaded 2-core machine wrote 60,200 (40 %)
// in 20, and beside three packages' tests at once (go test -p 3) 20 wrote less than a
// quarter, 26 then writing 37,600. Sent whole, no tick ever gets through.
//
// Not parallel: its 150,000 keys take CPU the package's timed tests need. The one run
// that had it parallel (with go test -p 3, on the 2-core VM) failed two of them on their
// tick deadlines, TestHungInstanceCutsNoOtherBudget and
// TestFleetDivertsNewTeamSpreadOverManyGates.
func TestBacklogFitsTheTickTimeout(t *testing.T) {
	const teams, minTicks, maxTicks = 150_000, 20, 300
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	// The client's timeouts short, the tick's long: a pipeline's replies must come within
	// 40 ms, as GATE_REDIS_READ_TIMEOUT bounds a gate's (250 ms).
	g := newGateWith(t, clk, limit.Config{Window: time.Minute, Threshold: 300, SyncInterval: time.Second},
		Config{KeyPrefix: "t", TickTimeout: 10 * time.Second},
		RedisOptions{ReadTimeout: 40 * time.Millisecond, WriteTimeout: 40 * time.Millisecond, DialTimeout: 5 * time.Second}, srv)
	logs := g.withLog()
	for i := range teams {
		g.l.Check("u"+strconv.Itoa(i), 1)
	}
	// A deadline besides the ticks' bound, generous (the package has 12 minutes under make
	// test): a failing run, every tick timing out, ends before the package's timeout.
	deadline := time.Now().Add(7 * time.Minute)
	writes, reads, failed, ticks := 0, 0, 0, 0
	for ticks < minTicks || writes < teams/4 && ticks < maxTicks && time.Now().Before(deadline) {
		clk.Advance(time.Second)
		for j := ticks % 10; j < teams; j += 10 { // a tenth of the teams again each tick
			g.l.Check("u"+strconv.Itoa(j), 1)
		}
		r := g.tk.Tick(context.Background())
		writes, reads = writes+r.Writes, reads+r.Reads
		if r.Errors > 0 {
			failed++
		}
		ticks++
	}
	t.Logf("%d ticks: %d counts written, %d reads made, %d ticks failed", ticks, writes, reads, failed)
	// Sent whole, no tick got through: 0 counts written in 20 ticks. Fitted, the backlog
	// goes through in parts (more than all of it in 20 ticks here, quiet; 127,800 under
	// -race beside the rest of the suite, 60,200 beside the tick package's parallel tests
	// on a loaded machine): a quarter of it is the bar, far from none.
	if writes < teams/4 || reads == 0 || failed == ticks {
		t.Errorf("%d ticks wrote %d counts (the backlog %d) and made %d reads, %d of them failed: the backlog is sent whole and times out",
			ticks, writes, teams, reads, failed)
	}
	if len(logs.lines("redis ticks time out with this many keys")) == 0 {
		t.Errorf("no line saying the ticks carry fewer keys; log:\n%s", logs.buf.String())
	}
}

// TestHungInstanceCutsNoOtherBudget: the tick's key budget is cut where ticks time out,
// instance by instance. Cut for the whole gate, as it first was, one instance that hangs
// (a stopped process, a dead host before its failover), timing out every tick, took the
// budget down to one command's keys, which its own batches in doubt then used: the
// healthy instance got no write and no read for as long as it hung (996 of its 996 teams
// behind in a reviewer's run), and no gate's counts were shared on it.
func TestHungInstanceCutsNoOtherBudget(t *testing.T) {
	t.Parallel()
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t)}
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{KeyPrefix: "hb", TickTimeout: 300 * time.Millisecond}, srvs...)
	ep := g.l.Epoch(clk.Now())
	var all, healthy []string
	for i := range 2000 {
		team := "t" + strconv.Itoa(i)
		all = append(all, team)
		if InstanceFor(team, 2) == 0 {
			healthy = append(healthy, team)
		}
	}
	srvs[1].Pause(t)
	defer srvs[1].Resume(t)
	var want int64
	for range 8 {
		for _, team := range all {
			g.l.Check(team, 1)
		}
		want++
		clk.Advance(time.Second)
		g.tk.Tick(context.Background())
	}
	behind := 0
	for _, team := range healthy {
		if stored(t, srvs[0].Client(t), ModeStandalone, "hb", team, ep) != want {
			behind++
		}
	}
	if behind > 0 {
		t.Errorf("%d of %d teams of the healthy instance behind its count after 8 ticks with the other instance hung", behind, len(healthy))
	}
}

// TestStalledRedisIsNotBlamedOnTickSize: a tick of a few hundred keys timing out on a
// Redis that stalls (a stopped process, a long script) is the server's, not the tick's
// size: the budget is not cut and no line says the ticks carry too many keys. It said
// "redis ticks time out with this many keys … keys=206 next_budget=200" (a review, a
// redis-server stopped for 10 s).
func TestStalledRedisIsNotBlamedOnTickSize(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{KeyPrefix: "st", TickTimeout: 300 * time.Millisecond}, srv)
	logs := g.withLog()
	srv.Pause(t)
	defer srv.Resume(t)
	for range 3 {
		for i := range 3 * g.tk.cfg.KeysPerCommand / 2 { // a command and a half's keys
			g.l.Check("t"+strconv.Itoa(i), 1)
		}
		clk.Advance(time.Second)
		g.tk.Tick(context.Background())
	}
	if got := g.tk.plans[0].causes; !got.has(causeTimeout) {
		t.Fatalf("the ticks on a paused redis-server did not time out (causes %v): the test tests nothing", got)
	}
	if lines := logs.lines("redis ticks time out with this many keys"); len(lines) > 0 || g.tk.instCap[0] != 0 {
		t.Errorf("a stalled Redis blamed on the tick's size: budget %d, lines %q", g.tk.instCap[0], lines)
	}
}
