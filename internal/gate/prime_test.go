package gate

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
)

// TestTakingOverABacklogOfAHeldTeam: a gate that starts with records of a team the fleet
// holds in overflow waiting for it (a restart, a rebalance after a crash) reads the
// team's key before it routes them (Config.Prime: route.Router.Expect, tick.TickNow),
// and sends none of them to the accepted topic. Before, the team was first contact to
// the new gate, admitted by its own count of the backlog until its first tick, one
// threshold of records (50 here) routed in the meanwhile; a team with a single waiting
// record is still judged as first contact, and teams under their limit are accepted.
func TestTakingOverABacklogOfAHeldTeam(t *testing.T) {
	t.Parallel()
	const threshold = 50
	srv := redistest.Start(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, "events", "events_accepted", "events_overflow", "events_dead_letter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(kc.ListenAddrs(), ","),
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_THRESHOLD":     strconv.Itoa(threshold),
		// A prime is bounded by two tick intervals (then first contact): 2 s, which a
		// loaded machine under -race keeps to, where 200 ms ticks once let 50 through.
		"GATE_TICK_INTERVAL":   "1s",
		"GATE_COMMIT_INTERVAL": "100ms",
	})
	pcl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	produce := func(from, to int, team func(int) string) {
		t.Helper()
		var recs []*kgo.Record
		for id := from; id < to; id++ {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"team_id":%q,"id":%d}`, team(id), id),
				Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strconv.Itoa(id))}}})
		}
		if err := pcl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatalf("producing records %d to %d: %v", from, to, err)
		}
	}
	routed := func() int64 {
		var n int64
		for _, topic := range []string{"events_accepted", "events_overflow", "events_dead_letter"} {
			n += kc.PartitionInfo(topic, 0).HighWatermark
		}
		return n
	}
	run := func(name string) (stop func()) {
		log := slog.New(slog.DiscardHandler)
		g, err := New(cfg, log, Options{Writer: name})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { g.RunTick(ctx) })
		wg.Go(func() { g.RunOverrides(ctx) })
		wg.Go(func() {
			if err := g.Consumer.Run(ctx); err != nil {
				t.Errorf("gate %s: Run: %v", name, err)
			}
		})
		return func() { cancel(); wg.Wait(); g.Consumer.Close(); g.CloseRedis(log) }
	}

	// Gate a holds the whale: 200 records against a threshold of 50.
	stopA := run("a")
	produce(0, 200, func(int) string { return "whale" })
	waitFor(t, "gate a to route the whale's 200 records", func() bool { return routed() == 200 })
	stopA() // its counts and the hold flag written by its final flush, its offsets committed

	// Waiting for gate b: 300 more of the whale's, 20 of a team under its limit, and one
	// of a team never seen.
	backlog := func(id int) string {
		switch {
		case id < 500:
			return "whale"
		case id < 520:
			return "small"
		}
		return "single"
	}
	produce(200, 521, backlog)
	stopB := run("b")
	defer stopB()
	waitFor(t, "gate b to route the backlog", func() bool { return routed() == 521 })

	accepted := map[string]int{}
	for _, r := range readAll(t, kc, "events_accepted") {
		id, _ := strconv.Atoi(headerValue(r, "id"))
		if id >= 200 {
			accepted[backlog(id)]++
		}
	}
	if accepted["whale"] != 0 {
		t.Errorf("gate b accepted %d of the held whale's 300 waiting records, want none", accepted["whale"])
	}
	if accepted["small"] != 20 || accepted["single"] != 1 {
		t.Errorf("gate b accepted %d of small's 20 and %d of single's 1, want all", accepted["small"], accepted["single"])
	}
}

// readAll reads every record of topic's partition 0 up to its high watermark.
func readAll(t *testing.T, kc *kfake.Cluster, topic string) []*kgo.Record {
	t.Helper()
	end := kc.PartitionInfo(topic, 0).HighWatermark
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for int64(len(recs)) < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %d of %d records: %v", topic, len(recs), end, err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// headerValue is the value of rec's header key, "" without one.
func headerValue(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// A prime whose tick fails (Redis out of reach) is said in one line, and priming rests
// for primePause: a catch-up primes every poll, and with Redis hung each poll would wait
// for a tick bound to fail, where the gate must fail open.
func TestPrimeRestsAfterItsTickFailed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	srv.Stop(t)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    url,
		"GATE_TICK_INTERVAL": "200ms",
	})
	g, logs := startReloadingLogged(t, cfg, "prime-rest") // no rules file: nothing reloads
	ctx := t.Context()
	recs := []*kgo.Record{{Value: []byte(`{"team_id":"a"}`)}, {Value: []byte(`{"team_id":"a"}`)}}
	g.prime(ctx, recs)
	if n := labelValue(t, g, "gate_limiter_reads_total", "reason", "primed"); n != 1 {
		t.Fatalf("primed reads after the first prime: %v, want 1", n)
	}
	start := time.Now()
	g.prime(ctx, recs)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a prime while priming rests took %s: want it skipped", took)
	}
	if n := labelValue(t, g, "gate_limiter_reads_total", "reason", "primed"); n != 1 {
		t.Errorf("primed reads after a prime while priming rests: %v, want still 1", n)
	}
	if n := strings.Count(logs.String(), "routed before all their keys were read"); n != 1 {
		t.Errorf("%d lines saying the prime failed, want 1:\n%s", n, logs.String())
	}
}

// A prime its caller cuts short (at least once, a rebalance waiting for the poll; exactly
// once, a revoke aborting the transaction) is no failure of Redis: priming does not rest,
// and no line says the keys could not be read. Before, it rested for primePause, so the
// partitions the rebalance brought, whose waiting records priming is for, were routed as
// first contact for their first 10 s.
func TestPrimeCutShortByItsCallerDoesNotRest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_TICK_INTERVAL": "200ms",
	})
	g, logs := startReloadingLogged(t, cfg, "prime-cut") // no rules file: nothing reloads
	recs := []*kgo.Record{{Value: []byte(`{"team_id":"a"}`)}, {Value: []byte(`{"team_id":"a"}`)}}
	cut, cancel := context.WithCancel(t.Context())
	cancel()
	g.prime(cut, recs)
	if off := g.primeOff.Load(); off != 0 {
		t.Errorf("priming rests until %s after a prime its caller cut short, want it not to rest", time.Unix(0, off))
	}
	if strings.Contains(logs.String(), "routed before all their keys were read") {
		t.Errorf("a prime cut short by its caller logged that the keys could not be read:\n%s", logs.String())
	}
}
