package gate

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/route"
)

// A learned limit (threshold_mode: adaptive) changed by a reload (its static threshold
// raised or lowered) keeps its counters in Redis, but its new limiter takes nothing over
// from the old (limit.InheritState refuses learned thresholds): a team over the new limit
// is limited from its first record under the new rules because the keys the old limiter
// had near or over its limit are read before the new rules route (primeReload). Without
// that read every key was first contact to the new limiter, admitted by this gate's own
// count until it reached the sync floor and a tick read it: 10 of the whale's 10 records
// after the edit went to accepted (as they did for every changed limit before a static
// one took its old one's keys over).
func TestRulesReloadChangedLimitReadsPressingKeysFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to int
	}{
		{"raised", 100, 200},   // 300 sent: over both
		{"lowered", 1000, 200}, // 300 sent: under the old, over the new
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := startWhale(t, "reload-prime", "threshold_mode: adaptive", tc.from)
			w.send(300)
			first := w.g.gen.Load()
			waitTicks(t, first, 2) // the 300 written to Redis
			w.reload(tc.to)
			if got := w.send(10); got[w.cfg.AcceptedTopic] != 0 {
				t.Errorf("the whale's first records under the new limit of %d (300 in Redis): %v, want none accepted", tc.to, got)
			}
		})
	}
}

// A reload that changes a rule's thresholds keeps what its old limiters knew of each key
// (limit.InheritState, as for unchanged limits): the same windows count into the same
// Redis keys, and only the threshold a key is judged by moves. With Redis down at the
// reload, nothing can be read (primeReload's tick fails) and new limiters that knew
// nothing admitted a team held in overflow under its old limit, each gate by its own
// count, until Redis came back: here 300 sent, held under 100, the limit raised to 200
// (still under the team's count) or lowered to 50, then 10 more of the team. Raised
// far above its count (1,000), the team's hold, kept over the reload, ends at the new
// limiters' first sweep, and its records are accepted again.
func TestRulesReloadChangedLimitWithRedisDownKeepsTheKeysState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to int
	}{
		{"raised", 100, 200},
		{"lowered", 100, 50},
		{"raised-above", 100, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := startWhale(t, "reload-down", "", tc.from)
			if got := w.send(300); got[w.cfg.AcceptedTopic] != tc.from {
				t.Fatalf("the whale's first 300 records: %v, want %d accepted", got, tc.from)
			}
			waitTicks(t, w.g.gen.Load(), 2) // read back from Redis: the level is the fleet's
			w.srv.Stop(t)
			w.reload(tc.to)
			if tc.to > 300 {
				waitTicks(t, w.g.gen.Load(), 2)
				if got := w.send(10); got[w.cfg.AcceptedTopic] != 10 {
					t.Errorf("the whale's records under a limit raised to %d (300 counted), Redis down, a tick on: %v, want all accepted", tc.to, got)
				}
				return
			}
			if got := w.send(10); got[w.cfg.AcceptedTopic] != 0 {
				t.Errorf("the whale's records under the new limit of %d (300 counted), Redis down: %v, want none accepted", tc.to, got)
			}
		})
	}
}

// whale is a gate whose rules file has one rule, team, keyed by team_id, of one limit a
// minute, and the redis-server it syncs with: its tests send records of one team, whale,
// and reload the rule with another threshold.
type whale struct {
	t    *testing.T
	srv  *redistest.Server
	path string
	opts string // the rule's further fields, written after its limits
	cfg  config.Config
	g    *Gate
}

// startWhale starts a whale gate named name whose rule has a threshold of thr and the
// fields opts (e.g. "threshold_mode: adaptive"), if any.
func startWhale(t *testing.T, name, opts string, thr int) *whale {
	t.Helper()
	w := &whale{t: t, srv: redistest.Start(t), path: filepath.Join(t.TempDir(), "rules.yaml"), opts: opts}
	writeRules(t, w.path, w.rule(thr))
	w.cfg = load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    w.srv.URL(),
		"GATE_RULES_FILE":    w.path,
	})
	w.g = startReloading(t, w.cfg, name)
	return w
}

func (w *whale) rule(thr int) string {
	opts := ""
	if w.opts != "" {
		opts = ", " + w.opts
	}
	return fmt.Sprintf("rules:\n  - {name: team, key: json:team_id, limits: [1m:%d]%s}\n", thr, opts)
}

// send routes n records of the whale and returns how many went to each topic.
func (w *whale) send(n int) map[string]int {
	topics := map[string]int{}
	for range n {
		var out kgo.Record
		switchRouter{w.g}.RouteInto(time.Now(), &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"whale"}`)}, &route.Scratch{}, &out)
		topics[out.Topic]++
	}
	return topics
}

// reload writes the rule with threshold thr and waits until the gate routes on it.
func (w *whale) reload(thr int) {
	w.t.Helper()
	first := w.g.gen.Load()
	writeRules(w.t, w.path, w.rule(thr))
	waitFor(w.t, "the edit in use", func() bool { return w.g.gen.Load() != first })
}

// A rebalance's prime (Config.Prime) that lands while a reload is putting new rules in
// use reads its keys into the new rules' limiters too: they took the old ones' view of
// each key over (limit.InheritState) before the prime's read landed in the old ones, and
// before, the read went to the old limiters alone, so the new rules met the primed keys
// as first contact for about a tick. Here a peer has put the whale at 300 in Redis
// against a limit of 100; this gate, which never met the whale, primes two of its waiting
// records while Redis is paused for 600 ms and a reload (a rule added, whose live
// overrides are read before the rules are put in use) waits for it, then routes 10 more
// under the new rules: all 10 were accepted. The prime begins after the reload built its
// rules (pending), or before, its read then landing after the copy (a second round).
func TestRulesReloadDuringAPrimeReadsTheKeysIntoTheNewRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		primeBefore bool
	}{
		{"prime-after-the-copy", false},
		{"prime-before-the-copy", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primeDuringReload(t, tc.primeBefore)
		})
	}
}

// primeDuringReload is TestRulesReloadDuringAPrimeReadsTheKeysIntoTheNewRules: the prime
// marks its keys before the reload reads the rules file if before, else after.
func primeDuringReload(t *testing.T, before bool) {
	const team = "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n"
	srv := redistest.Start(t)
	env := func(path string) map[string]string {
		return map[string]string{
			"GATE_KAFKA_BROKERS":      "127.0.0.1:1",
			"GATE_REDIS_URLS":         srv.URL(),
			"GATE_RULES_FILE":         path,
			"GATE_TICK_INTERVAL":      "2s",  // its tick's bound (1.5 s) outlasts the pause
			"GATE_REDIS_READ_TIMEOUT": "10s", // Redis paused answers late, not never
		}
	}
	peerPath, path := filepath.Join(t.TempDir(), "peer.yaml"), filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, peerPath, team)
	writeRules(t, path, team)
	peer := &whale{t: t, g: startReloading(t, load(t, env(peerPath)), "peer")}
	if got := peer.send(300); got["events_accepted"] != 100 {
		t.Fatalf("the peer's 300 records of the whale: %v, want 100 accepted", got)
	}
	waitTicks(t, peer.g.gen.Load(), 2) // the 300 written to Redis
	w := &whale{t: t, g: startReloading(t, load(t, env(path)), "primed")}
	first := w.g.gen.Load()
	waitFirstOverridesRead(t, first)

	// Redis paused: the prime's read waits, and the reload, once it has built its rules,
	// waits for the new rule's hash.
	if err := srv.Client(t).Do(t.Context(), "CLIENT", "PAUSE", 600, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	rec := func() *kgo.Record { return &kgo.Record{Topic: "events", Value: []byte(`{"team_id":"whale"}`)} }
	primed := make(chan struct{})
	prime := func() { defer close(primed); w.g.prime(t.Context(), []*kgo.Record{rec(), rec()}) }
	if before {
		go prime()
		waitFor(t, "the whale's key marked in the rules in use", func() bool {
			_, ok := first.rules[0].Lims[0].Snapshot(time.Now(), "whale")
			return ok
		})
	}
	set := w.g.reloader.Current()
	writeRules(t, path, team+"  - {name: ev, key: json:event, missing: skip, limits: [1m:100]}\n")
	waitFor(t, "the edit read", func() bool { return w.g.reloader.Current() != set })
	if !before {
		go prime()
	}
	<-primed // bounded by the prime's own bound
	if off := w.g.primeOff.Load(); off != 0 {
		t.Fatalf("the prime's read failed: priming rests until %s", time.Unix(0, off))
	}
	for deadline := time.Now().Add(30 * time.Second); w.g.gen.Load() == first; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("waited 30s for the edit in use")
		}
	}
	if got := w.send(10); got["events_accepted"] != 0 {
		t.Errorf("the whale's records under the new rules after a prime during the reload (300 in Redis, limit 100): %v, want none accepted", got)
	}
}
