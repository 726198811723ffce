package gate

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// refusingReload is a gate on srv with a rules file at path reloaded every 50 ms, its log
// in logs, and send, which routes n records of team t1 and says where they went.
func refusingReload(t *testing.T, srv *redistest.Server, rulesText string, env map[string]string) (*Gate, config.Config, string, *syncBuffer, func(n int) map[string]int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, rulesText)
	vars := map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg := load(t, vars)
	g, logs := startReloadingLogged(t, cfg, "reload-refused")
	send := func(n int) map[string]int {
		topics := map[string]int{}
		for range n {
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
			topics[out.Topic]++
		}
		return topics
	}
	return g, cfg, path, logs, send
}

// A rules reload while Redis refuses writes (OOM) keeps the old rules' unwritten counts
// in the team's level: the new rules' reads add what the old rules' tick still holds, as
// each tick adds its own. Before, the new rules' first read of the team dropped them,
// and a team Redis had at 40 of 100 but the gate at 120 was let through again, 60
// records, until the old tick could write them (when Redis took writes again).
func TestRulesReloadWithWritesRefusedKeepsOldCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// An hour's window: with a minute's, a test that ran across the minute's end (its
	// first 40 sent in the last second of one) saw the level slide below what it counts,
	// and waited in vain for the 40 read back.
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [1h:100]}\n"
	// No hold: the team's level alone says where its records go.
	g, cfg, path, logs, send := refusingReload(t, srv, team, map[string]string{"GATE_DIVERT_HOLD": "0"})
	if got := send(40); got[cfg.AcceptedTopic] != 40 {
		t.Fatalf("40 records of t1 under 100 a minute: %v", got)
	}
	waitFor(t, "t1's 40 read back from Redis", func() bool {
		s, ok := g.CurrentRules()[0].Lims[0].Snapshot(time.Now(), "t1")
		return ok && !s.ReadAt.IsZero() && s.Estimate >= 40 && s.Pending == 0
	})
	srv.RefuseWrites(t, redistest.RefuseOOM)
	got := send(80)
	t.Logf("80 more records of t1, Redis refusing writes: %v", got)
	// The old rules' tick reads 40 and adds the 80 it could not write.
	start := time.Now()
	waitFor(t, "t1 read at 120 with the writes refused", func() bool {
		s, ok := g.CurrentRules()[0].Lims[0].Snapshot(time.Now(), "t1")
		return ok && s.ReadAt.After(start) && s.Estimate >= 110
	})
	first := g.gen.Load()
	writeRules(t, path, "# the team rule\n"+team)
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	reloaded := time.Now()
	waitFor(t, "the new rules' read of t1", func() bool {
		s, ok := g.CurrentRules()[0].Lims[0].Snapshot(time.Now(), "t1")
		return ok && s.ReadAt.After(reloaded)
	})
	waitFor(t, "the old rules' tick stopped with counts unwritten", func() bool {
		return strings.Contains(logs.String(), "retired rules' counts not written yet")
	})
	// A tick more: a team under its limit is released by the sweep after the read.
	waitTicks(t, g.gen.Load(), 2)
	s, _ := g.CurrentRules()[0].Lims[0].Snapshot(time.Now(), "t1")
	if got := send(60); got[cfg.AcceptedTopic] != 0 {
		t.Errorf("t1 at 120 of 100 (40 in Redis, 80 refused) after a reload, read at %.0f: %v, want all 60 diverted", s.Estimate, got)
	}
}

// The counts a retired rule set's tick drops while it waits for Redis (their epoch left
// the window before Redis took writes again) are counted in
// gate_limiter_dropped_counts_total, which GateLimiterCountsDropped watches. Before,
// they were counted on the retired rules' metrics, no longer shown: only the log line
// "retired rules' counts written" gave them.
func TestRulesReloadRetiredDroppedCountsShown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [2s:1000]}\n"
	g, cfg, path, logs, send := refusingReload(t, srv, team, map[string]string{
		"GATE_TICK_INTERVAL": "200ms",
		"GATE_SYNC_INTERVAL": "1s",
	})
	srv.RefuseWrites(t, redistest.RefuseOOM)
	if got := send(50); got[cfg.AcceptedTopic] != 50 {
		t.Fatalf("50 records of t1 under 1000 in 2s: %v", got)
	}
	first := g.gen.Load()
	writeRules(t, path, "# the team rule\n"+team)
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	waitFor(t, "the old rules' counts dropped", func() bool {
		return strings.Contains(logs.String(), "retired rules' counts written")
	})
	if !strings.Contains(logs.String(), "dropped_counts=50") {
		t.Fatalf("the old rules' 50 counts not dropped:\n%s", logs)
	}
	if n := labelValue(t, g, "gate_limiter_dropped_counts_total", "reason", "stale_epoch"); n != 50 {
		t.Errorf("gate_limiter_dropped_counts_total{reason=\"stale_epoch\"} once the retired rules' tick dropped its 50 counts: %v, want 50", n)
	}
}

// A gate that stops a tick after a rules reload, Redis refusing writes for a moment as it
// does, writes the retired rules' counts once Redis takes them, within the final flush's
// time, as it writes the rules in use's: their tick's final flush made one attempt and
// the Drain after it, its context done, none (a review: 100 of 150 counts lost to a
// 400 ms refusal).
func TestRulesReloadRetiredCountsWrittenAsTheGateStops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [1h:1000000]}\n"
	writeRules(t, path, team)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1", "GATE_REDIS_URLS": srv.URL(), "GATE_RULES_FILE": path,
		"GATE_TICK_INTERVAL": "10s", // the retired tick waits a tick before it stops: the gate stops first
	})
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	g, err := New(cfg, log, Options{Writer: "retired-at-stop", RulesReload: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Consumer.Close(); g.CloseRedis(log) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); g.RunTick(ctx) }()
	send := func(n int) {
		for range n {
			var out kgo.Record
			switchRouter{g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"t1"}`)}, &route.Scratch{}, &out)
		}
	}
	srv.RefuseWrites(t, redistest.RefuseOOM) // no scheduled tick writes them before the stop
	send(100)
	first := g.gen.Load()
	writeRules(t, path, "# the team rule\n"+team)
	waitFor(t, "the edit in use", func() bool { return g.gen.Load() != first })
	send(50)
	cancel()
	waitFor(t, "the retired rules' final flush refused", func() bool {
		return strings.Contains(logs.String(), "final flush of pending counts incomplete")
	})
	srv.AcceptWrites(t)
	<-done
	rc := srv.Client(t)
	keys, err := rc.Keys(context.Background(), "gate:rule:team:t1:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, k := range keys {
		v, _ := rc.Get(context.Background(), k).Int()
		sum += v
	}
	if sum != 150 {
		t.Errorf("Redis holds %d of t1's 150 records after the gate stopped (keys %v), want 150\n%s", sum, keys, logs)
	}
}

// A changed rules file that parses but whose rules cannot be built (no file reaches this
// today: the test breaks the gate's Redis mode after its start) is refused as a bad file
// is: the rules in use stay, gate_rules_file_valid is 0, the refusal is counted once and
// logged once. Built after the reloader had taken it, it left gate_rules_file_valid at 1
// and was counted as put in use (a review).
func TestRulesReloadThatCannotBeBuiltRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := rulesConfig(t, srv.URL(), teamRule)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	g, err := New(cfg, log, Options{Writer: "reload-unbuilt", RulesReload: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Read by the next generation's build alone: its tick refuses the mode.
	g.cfg.RedisMode = "ring"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.RunTick(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.Consumer.Close(); g.CloseRedis(log) })
	first := g.gen.Load()

	writeRules(t, cfg.RulesFile, teamRule+"  - {name: other, key: json:team_id, limits: [1m:7]}\n")
	waitFor(t, "the edit that cannot be built to be read", func() bool { return strings.Contains(logs.String(), `mode \"ring\"`) })
	// A few more reads of the same file: still refused, counted and logged once.
	for range 3 {
		if _, _, ok := g.CheckRulesNow(ctx); !ok {
			t.Fatal("the rules file not read")
		}
	}
	if g.gen.Load() != first {
		t.Fatalf("rules that cannot be built were put in use: %+v", g.CurrentRules())
	}
	if v := gaugeValue(t, g, "gate_rules_file_valid"); v != 0 {
		t.Errorf("gate_rules_file_valid %v while the edit cannot be built, want 0", v)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "error"); got != 1 {
		t.Errorf("the refusal counted %v times, want once", got)
	}
	if got := labelValue(t, g, "gate_rules_loads_total", "result", "ok"); got != 1 {
		t.Errorf("gate_rules_loads_total{result=ok} %v, want 1 (the start's read alone)", got)
	}
	if n := strings.Count(logs.String(), `mode \"ring\"`); n != 1 {
		t.Errorf("the refusal logged %d times, want once:\n%s", n, logs.String())
	}
}
