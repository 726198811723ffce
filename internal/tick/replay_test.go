package tick

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestLostAcknowledgedWritesAreSentAgain: Redis loses writes it had acknowledged, as when a
// failover promotes a replica that had not received them (here: the counters and this
// writer's sequence key put back as they were two ticks ago). The next write's reply says
// the lane's number is behind what this gate saw confirmed; the tick sends the lost batches'
// counts again, and Redis ends up with every count, once.
func TestLostAcknowledgedWritesAreSentAgain(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000}, Config{Writer: "w1"}, srv)
	logs := g.withLog()
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	seqKey := laneKey(ModeStandalone, DefaultKeyPrefix, "w1", 0)

	g.l.Check("team-a", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	// What a replica that stopped receiving here would hold.
	snapSeq, err := rc.Get(ctx, seqKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		g.l.Check("team-a", 5)
		g.l.Check("team-b", 7)
		clk.Advance(time.Second)
		if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 2 {
			t.Fatalf("tick %d = %+v", i, r)
		}
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-a", ep); got != 20 {
		t.Fatalf("team-a holds %d before the loss, want 20", got)
	}
	// The loss: Redis is back where it was after the first tick.
	rc.Set(ctx, Key(DefaultKeyPrefix, "team-a", ep), 10, time.Minute)
	rc.Del(ctx, Key(DefaultKeyPrefix, "team-b", ep))
	rc.Set(ctx, seqKey, snapSeq, time.Minute)

	g.l.Check("team-a", 1)
	clk.Advance(time.Second)
	r := g.tk.Tick(ctx)
	if r.Errors != 0 || r.Batches[outReplayed] != 2 || r.Replayed != 24 {
		t.Fatalf("tick after the loss = %+v, want 2 batches (24 counts) found lost and sent again", r)
	}
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.CarriedWrites != 0 || r.Writes != 2 {
		t.Fatalf("tick sending the lost counts = %+v", r)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-a", ep); got != 21 {
		t.Errorf("team-a holds %d, want the 21 counted", got)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-b", ep); got != 14 {
		t.Errorf("team-b holds %d, want the 14 counted", got)
	}
	if got := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("replayed")); got != 2 {
		t.Errorf("batches{outcome=replayed} = %v, want 2", got)
	}
	if w := logs.lines("level=WARN"); len(w) != 1 {
		t.Errorf("warnings = %q, want one saying Redis lost acknowledged writes", w)
	}

	// A loss older than what the gate keeps is reported, not repaired.
	for range 12 {
		g.l.Check("team-a", 1)
		clk.Advance(time.Second)
		g.tk.Tick(ctx)
	}
	rc.Del(ctx, seqKey)
	g.l.Check("team-a", 1)
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Batches[outLost] != 1 {
		t.Errorf("tick after losing batches no longer kept = %+v, want the loss reported", r)
	}
}

// TestSentinelFailoverLosesNoCounts: a planned failover (SENTINEL FAILOVER) while a gate
// writes every 100 ms. The old primary acknowledges writes until the client learns of the
// switch, and the promoted replica lacks those it had not replicated yet; before, they were
// lost without a word (about one tick's counts per failover). Now the first write to the
// new primary reveals the gap and the tick sends those counts again: the new primary ends
// up with every count.
//
// That the promoted replica lacks some writes is made certain, not left to the failover's
// timing: its replication is cut first (a masterauth the primary refuses, its link to the
// primary closed), and the gate writes lostTicks batches the primary acknowledges and the
// replica never receives. Those, and whatever the old primary takes until the client
// switches, are discarded when the old primary rejoins as a replica. So the test asserts
// the replay: at least lostTicks batches (lostTicks × 100 counts) sent again, none
// reported lost, the warn line, and every count on the new primary. In 12 runs (6 under
// -race, three processes at once) 46–55 batches were sent again, within the default keep
// window's 100 ticks. With the replay disabled (recoverLost returning at once) it fails:
// nothing sent again, no warning, the new primary thousands of counts short (5,400 of
// 10,200 and of 10,300 in two runs).
func TestSentinelFailoverLosesNoCounts(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinel(t, 1, 3)
	fc, err := DialSentinel(set.Master, set.SentinelAddrs(), "redis://127.0.0.1:6379/0", RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart)
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: 10 * time.Minute, Threshold: 1_000_000},
		// TickTimeout far past 3/4 of the interval: the test asserts ticks without errors,
		// which a loaded machine's late answer would fail.
		Config{Mode: ModeSentinel, TickInterval: 100 * time.Millisecond, TickTimeout: 10 * time.Second}, fc)
	logs := g.withLog()
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	old := set.Primary.Addr()
	var counted, replayedCounts int64
	step := func() TickResult {
		g.l.Check("team", 100)
		counted += 100
		clk.Advance(100 * time.Millisecond)
		r := g.tk.Tick(ctx)
		replayedCounts += r.Replayed
		return r
	}
	for range 10 {
		step()
	}

	// Cut the replica off: it cannot authenticate to the primary (which has no password)
	// and so cannot reconnect once its link is closed. Sentinel still deems it fit to
	// promote: its link has been down for far less than 10 × down-after.
	pc, rc := set.Primary.Client(t), set.Replicas[0].Client(t)
	if err := rc.ConfigSet(ctx, "masterauth", "not-the-primary-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ClientKillByFilter(ctx, "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:down") ||
		!strings.Contains(pc.Info(ctx, "replication").Val(), "connected_slaves:0") {
		if time.Now().After(deadline) {
			t.Fatal("the replica's link to the primary never went down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	atCut := stored(t, rc, ModeSentinel, DefaultKeyPrefix, "team", ep)
	const lostTicks = 5
	for i := range lostTicks {
		if r := step(); r.Errors != 0 || r.Writes != 1 {
			t.Fatalf("tick %d after the cut = %+v, want its write acknowledged by the primary", i, r)
		}
	}
	// The primary holds every count, the replica none of the last lostTicks batches'.
	if p, r := stored(t, pc, ModeSentinel, DefaultKeyPrefix, "team", ep), stored(t, rc, ModeSentinel, DefaultKeyPrefix, "team", ep); p != counted || r != atCut {
		t.Fatalf("after the cut the primary holds %d (want %d) and the replica %d (want %d, the count at the cut)", p, counted, r, atCut)
	}

	set.Failover(t)
	deadline = time.Now().Add(60 * time.Second)
	for set.CurrentPrimary(t) == old {
		if time.Now().After(deadline) {
			t.Fatal("no failover")
		}
		step()
		time.Sleep(20 * time.Millisecond)
	}
	// Go on until the new primary has taken writes for a while (the client learns of the
	// switch after the sentinels do) and nothing is pending.
	for i := 0; ; i++ {
		r := step()
		if i > 40 && r.Errors == 0 && r.CarriedWrites == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes never settled on the new primary: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	clk.Advance(100 * time.Millisecond)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.CarriedWrites != 0 {
		t.Fatalf("last tick = %+v", r)
	}
	got := stored(t, fc, ModeSentinel, DefaultKeyPrefix, "team", ep)
	replayed := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("replayed"))
	lost := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("lost"))
	t.Logf("counted %d, the new primary holds %d; %v batches (%d counts) found lost and sent again, %d written after the cut among them",
		counted, got, replayed, replayedCounts, lostTicks)
	if replayed < lostTicks || replayedCounts < lostTicks*100 {
		t.Errorf("%v batches (%d counts) sent again, want at least the %d batches (%d counts) the primary took after the cut",
			replayed, replayedCounts, lostTicks, lostTicks*100)
	}
	if lost != 0 {
		t.Errorf("batches{outcome=lost} = %v, want 0: every lost batch was confirmed within the keep window", lost)
	}
	if w := logs.lines("level=WARN", "redis lost writes it had acknowledged"); len(w) == 0 {
		t.Errorf("no warning that Redis lost acknowledged writes")
	}
	if got != counted {
		t.Errorf("the new primary holds %d, want the %d counted", got, counted)
	}
}

// A batch is applied while one of its counters fails on its own (a key of the wrong type),
// and its reply is lost to a stall. Its resend, found a repeat, hands back the failed
// position the script kept beside the lane's number, and that count stays pending, to be
// written once the key is repaired, as an answered batch's is. It was taken out of pending
// as written: lost.
func TestResendFoundAppliedKeepsAFailedKeysCount(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{TickTimeout: 10 * time.Second}, srv) // the stalled tick alone waits stallWait (stallCtx)
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	bad := Key(DefaultKeyPrefix, "team-a", ep)
	if err := rc.HSet(ctx, bad, "x", 1).Err(); err != nil {
		t.Fatal(err)
	}
	g.l.Check("team-c", 1) // a first tick opens the connection
	if r := g.tk.Tick(ctx); r.Errors != 0 {
		t.Fatalf("first tick = %+v", r)
	}
	clk.Advance(time.Second)
	g.l.Check("team-a", 5)
	g.l.Check("team-b", 3)
	srv.Pause(t)
	r := g.tk.Tick(stallCtx(ctx, t))
	srv.Resume(t)
	if r.Batches[outUnknown] != 1 {
		t.Fatalf("tick during the stall = %+v, want its batch in doubt", r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-b", ep) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled batch was never applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rc.Del(ctx, bad) // the wrong-type key is removed
	for range 3 {
		clk.Advance(time.Second)
		g.tk.Tick(ctx)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-a", ep); got != 5 {
		t.Errorf("team-a holds %d, want the 5 counted (its key failed in the batch whose reply was lost)", got)
	}
}

// TestLossFoundThoughTheRevealingReplyIsLost: Redis loses acknowledged writes (restarted
// empty here; a failover to a replica that lacked them is the same), and the reply of the
// first write after the loss, the one whose number says the lane is behind, is itself
// lost (a timeout: failovers and restarts are when connections break). The batch stays in
// doubt and its resend finds it applied. That answer must still say where the lane stood
// before the batch, or the batches lost before it are never sent again: before, the
// resend answered with the batch's own number, and the 22 counts Redis lost were gone
// without a word.
func TestLossFoundThoughTheRevealingReplyIsLost(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clients, err := Dial([]string{srv.URL()}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	seqKey := laneKey(ModeStandalone, DefaultKeyPrefix, "w1", 0)
	var armed atomic.Bool
	clients[0].AddHook(dialWrapHook{func(cn net.Conn) net.Conn {
		return &dropReplyConn{Conn: cn, marker: []byte(seqKey), armed: &armed, onDrop: func() {}}
	}})
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{Writer: "w1"}, clients[0])
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()

	g.l.Check("team-a", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	g.l.Check("team-a", 5)
	g.l.Check("team-b", 7)
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 2 {
		t.Fatalf("tick = %+v", r)
	}
	// The loss: everything the gate wrote is gone.
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The next write is applied, and its reply lost.
	g.l.Check("team-a", 1)
	clk.Advance(time.Second)
	armed.Store(true)
	if r := g.tk.Tick(ctx); r.Batches[outUnknown] != 1 {
		t.Fatalf("tick whose reply is lost = %+v, want its batch in doubt", r)
	}
	if armed.Load() {
		t.Fatal("the fault never fired")
	}
	replayed := tickUntilSettled(t, g, clk)
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-a", ep); got != 16 {
		t.Errorf("team-a holds %d, want the 16 counted (batches replayed: %d)", got, replayed)
	}
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team-b", ep); got != 7 {
		t.Errorf("team-b holds %d, want the 7 counted", got)
	}
}

// TestKeptBatchesHoldItemsOnly: a batch Redis confirmed is kept KeepConfirmed to be sent
// again if Redis loses it, from its items (recoverLost); its command (every key and boxed
// argument once more) was kept with it, some 120 bytes a count where docs/design.md says
// about 48.
func TestKeptBatchesHoldItemsOnly(t *testing.T) {
	srv := redistest.Start(t)
	clients, err := Dial([]string{srv.URL()}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{Writer: "w1"}, clients[0])
	for i := range 50 {
		g.l.Check(fmt.Sprintf("team-%d", i), 1)
	}
	if r := g.tk.Tick(context.Background()); r.Errors != 0 || r.Writes != 50 {
		t.Fatalf("tick = %+v", r)
	}
	kept := 0
	for i := range g.tk.lanes {
		for _, b := range g.tk.lanes[i].kept {
			kept++
			if b.cmd != nil {
				t.Errorf("lane %d: kept batch %d holds its command (%d arguments)", i, b.seq, len(b.cmd.Args()))
			}
			if len(b.items) == 0 {
				t.Errorf("lane %d: kept batch %d holds no items to send again", i, b.seq)
			}
		}
	}
	if kept == 0 {
		t.Fatal("no batch kept after a confirmed write")
	}
}

// TestRestartAfterLongOutageReplaysKeptBatches: Redis is unreachable for longer than
// KeepConfirmed (12 s of 100 ms ticks against the default 10 s), then comes back empty
// (a restart without persistence; a primary that died and a replica promoted after
// Sentinel's default 30 s is the same seen from the gate). Only an answered write can
// reveal the loss, and none answers during the outage: the batches confirmed before it
// must still be kept when the first write after it answers. Before, they aged by the tick
// whether or not Redis answered, were forgotten 10 s into the outage, and their counts
// were reported lost (outcome="lost"), never sent again. Nothing is confirmed while
// nothing answers, so what is kept does not grow meanwhile.
func TestRestartAfterLongOutageReplaysKeptBatches(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{TickInterval: 100 * time.Millisecond, TickTimeout: 10 * time.Second}, srv) // no late answer fails a tick
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()
	var counted int64
	for i := range 3 {
		g.l.Check("team", 10)
		counted += 10
		clk.Advance(100 * time.Millisecond)
		if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
			t.Fatalf("tick %d = %+v", i, r)
		}
	}
	kept := len(g.tk.lanes[0].kept)
	if kept != 3 {
		t.Fatalf("%d batches kept after 3 confirmed, want 3", kept)
	}

	srv.Stop(t)
	const outageTicks = 120 // 12 s: past the 10 s KeepConfirmed
	for i := range outageTicks {
		g.l.Check("team", 1)
		counted++
		clk.Advance(100 * time.Millisecond)
		if r := g.tk.Tick(ctx); r.Errors != 1 {
			t.Fatalf("tick %d with Redis down = %+v, want 1 error", i, r)
		}
		if n := len(g.tk.lanes[0].kept); n > kept {
			t.Fatalf("tick %d with Redis down: %d batches kept, more than the %d before the outage", i, n, kept)
		}
	}

	srv.Restart(t) // empty
	rc := srv.Client(t)
	// After so many failed dials the client's pool tries a dial once a second (wall time)
	// before it hands out connections again: tick at a pace the wall clock sees too.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		clk.Advance(100 * time.Millisecond)
		r := g.tk.Tick(ctx)
		if r.Errors == 0 && r.CarriedWrites == 0 && len(g.tk.pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts never settled after Redis came back: %+v", r)
		}
	}
	replayed := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("replayed"))
	lost := testutil.ToFloat64(g.tk.m.batches.WithLabelValues("lost"))
	if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, "team", ep); got != counted {
		t.Errorf("Redis holds %d after coming back empty, want the %d counted (batches replayed %v, lost %v)", got, counted, replayed, lost)
	}
	if replayed != 3 || lost != 0 {
		t.Errorf("batches replayed %v, lost %v; want the 3 confirmed before the outage replayed, none lost", replayed, lost)
	}
}

// TestQuietLaneLetsGoOfStaleBatches: kept batches age only in ticks their lane's writes
// are answered in (TestRestartAfterLongOutageReplaysKeptBatches), and a lane whose teams
// went quiet gets none: its batches are let go once every count in them is of an epoch
// no longer written, which no loss could need, rather than kept for good.
func TestQuietLaneLetsGoOfStaleBatches(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: 10 * time.Second, Threshold: 1_000_000}, Config{}, srv)
	ctx := context.Background()
	g.l.Check("team", 1)
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 || len(g.tk.lanes[0].kept) != 1 {
		t.Fatalf("tick = %+v, %d batches kept; want its write kept", r, len(g.tk.lanes[0].kept))
	}
	for range 5 { // within the window after: the count is still written, so kept
		clk.Advance(time.Second)
		g.tk.Tick(ctx)
	}
	if n := len(g.tk.lanes[0].kept); n != 1 {
		t.Fatalf("%d batches kept with their epoch still written, want 1", n)
	}
	for range 20 { // two windows on, nothing written
		clk.Advance(time.Second)
		g.tk.Tick(ctx)
	}
	if n := len(g.tk.lanes[0].kept); n != 0 {
		t.Errorf("%d batches kept of an epoch no longer written, want none", n)
	}
}

// TestLossFoundThoughTwoBatchesInDoubt: as TestLossFoundThoughTheRevealingReplyIsLost, but
// the first write after the loss is two batches of the lane in one pipeline (here three
// counts at KeysPerCommand 2; in production any tick of a lane with more counts than
// KeysPerCommand, or limits of two lifetimes), both applied, both replies lost. Their
// resends are both repeats: the first's reply said where the lane stands now, the second's
// where it stood before the second alone, so neither said it was behind before the first,
// and the batch Redis had lost was neither sent again nor reported lost.
func TestLossFoundThoughTwoBatchesInDoubt(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	clients, err := Dial([]string{srv.URL()}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	seqKey := laneKey(ModeStandalone, DefaultKeyPrefix, "w1", 0)
	var armed atomic.Bool
	clients[0].AddHook(dialWrapHook{func(cn net.Conn) net.Conn {
		return &dropReplyConn{Conn: cn, marker: []byte(seqKey), armed: &armed, onDrop: func() {}}
	}})
	clk := clock.NewFake(epochStart.Add(10 * time.Second))
	g := newTopologyGate(t, clk, limit.Config{ColdWriteInterval: writeEveryTick, Window: time.Minute, Threshold: 1_000_000},
		Config{Writer: "w1", KeysPerCommand: 2}, clients[0])
	ep := g.l.Epoch(clk.Now())
	ctx := context.Background()

	g.l.Check("team-a", 10)
	if r := g.tk.Tick(ctx); r.Errors != 0 || r.Writes != 1 {
		t.Fatalf("tick = %+v", r)
	}
	// The loss: everything the gate wrote is gone.
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The next tick writes two batches on the lane, both applied, their replies lost.
	g.l.Check("team-a", 1)
	g.l.Check("team-b", 7)
	g.l.Check("team-c", 3)
	clk.Advance(time.Second)
	armed.Store(true)
	if r := g.tk.Tick(ctx); r.Batches[outUnknown] != 2 {
		t.Fatalf("tick whose replies are lost = %+v, want its two batches in doubt", r)
	}
	if armed.Load() {
		t.Fatal("the fault never fired")
	}
	replayed := tickUntilSettled(t, g, clk)
	for team, want := range map[string]int64{"team-a": 11, "team-b": 7, "team-c": 3} {
		if got := stored(t, rc, ModeStandalone, DefaultKeyPrefix, team, ep); got != want {
			t.Errorf("%s holds %d, want the %d counted (batches replayed: %d)", team, got, want, replayed)
		}
	}
	if replayed != 1 {
		t.Errorf("batches replayed = %d, want the 1 Redis lost", replayed)
	}
}

// TestWriteScriptRepeatSaysWhereItsRunBegan drives writeScript by hand through the cases
// where a lane's batches applied one after another in a pipeline come back as repeats: the
// resend of the lane's latest batch says where the lane stood before the first of them and
// which that first was, so that the gate sends again exactly the batches confirmed before
// that first and above that number (recoverLost), not those of the run itself.
func TestWriteScriptRepeatSaysWhereItsRunBegan(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	seqKey := "gate:w:w1:seq"
	run := func(seq, pred int64) []any {
		t.Helper()
		v, err := rc.Eval(ctx, writeScript, []string{seqKey, "gate:c"}, seq, 60000, 60000, pred, 1).Slice()
		if err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
		return v
	}
	want := func(got []any, want ...any) {
		t.Helper()
		if fmt.Sprintf("%v", got) != fmt.Sprintf("%v", []any(want)) {
			t.Errorf("reply %v, want %v", got, want)
		}
	}
	want(run(1, 0), int64(1), int64(0))
	rc.FlushAll(ctx) // Redis loses batch 1
	// Batches 2 and 3 in one pipeline, both applied, their replies lost.
	want(run(2, 0), int64(1), int64(0))
	want(run(3, 2), int64(1), int64(2))
	// Resent: 2 finds the lane past it; 3, the latest, says the lane stood at 0 before 2.
	want(run(2, 0), int64(0), int64(3))
	want(run(3, 2), int64(0), int64(0), "", int64(2))
	// Batch 4 applied alone: its own run.
	want(run(4, 0), int64(1), int64(3))
	want(run(4, 0), int64(0), int64(3), "", int64(4))
	// Batch 5 applied, 6 not sent (its pipeline cut short); resent, 5 is a repeat and 6
	// is applied after it: 6 joins 5's run, which began at 5 with the lane at 4.
	want(run(5, 0), int64(1), int64(4))
	want(run(5, 0), int64(0), int64(4), "", int64(5))
	want(run(6, 5), int64(1), int64(5))
	want(run(6, 0), int64(0), int64(4), "", int64(5))
	// A batch behind a predecessor not applied is refused.
	want(run(8, 7), int64(2), int64(6))
	if got, _ := rc.Get(ctx, "gate:c").Int64(); got != 5 {
		t.Errorf("counter = %d, want the 5 batches applied once each", got)
	}
}

// tickUntilSettled ticks g a second apart until nothing is pending, in doubt or failing,
// and returns how many batches the ticks replayed.
func tickUntilSettled(t *testing.T, g *gate, clk *clock.Fake) (replayed int) {
	t.Helper()
	for i := 0; ; i++ {
		clk.Advance(time.Second)
		r := g.tk.Tick(context.Background())
		replayed += r.Batches[outReplayed]
		if r.Errors == 0 && r.CarriedWrites == 0 && len(g.tk.pending) == 0 {
			return replayed
		}
		if i == 5 {
			t.Fatalf("writes never settled: %+v", r)
		}
	}
}
