package tick

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// adaptiveGates returns n gates in adaptive mode on one Redis, window 1 min, static
// threshold 1,000,000, learned after minHistory, and the fake clock, at midnight UTC.
func adaptiveGates(t *testing.T, n int, srv *redistest.Server, minHistory time.Duration) ([]*gate, *clock.Fake) {
	t.Helper()
	day0 := epochStart.Truncate(24 * time.Hour)
	clk := clock.NewFake(day0)
	lc := limit.Config{Window: time.Minute, Threshold: 1_000_000, SyncInterval: 15 * time.Second,
		Adaptive: &spike.Config{MinHistory: minHistory}}
	var gs []*gate
	for range n {
		gs = append(gs, newGate(t, clk, lc, Config{TickInterval: 15 * time.Second}, srv))
	}
	return gs, clk
}

// storedProfile reads team's profile from Redis.
func storedProfile(t *testing.T, srv *redistest.Server, team string) (spike.Profile, bool) {
	t.Helper()
	c := srv.Client(t)
	v, err := c.Get(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)).Bytes()
	if err != nil {
		return spike.Profile{}, false
	}
	var p spike.Profile
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatalf("stored profile of %s: %v", team, err)
	}
	return p, true
}

// TestAdaptiveFleetLearnsOneProfile: two gates on one real Redis, each seeing half of a
// team's traffic, 15 s ticks, fake clock, for 44 simulated hours. The team sends 50
// records a minute, and 600 a minute between 18:00 and 20:00 UTC every day (its daily
// peak, 12 × its night, 3 × its daily mean: over 4 × the level were its season not learned); on day 2 it spikes to 1,000 a minute from 10:00 for 20 minutes.
// Both gates learn one profile, stored in Redis, and give the team the same learned
// threshold, that of the stored profile; the spike is diverted on both from its second
// window on, and logged as a spike that starts and ends; the day 2 peak is not diverted.
// With about half of each window each, both gates fold every fold and mostly both write it,
// one of the two losing the compare-and-set: harmless (they agree throughout).
func TestAdaptiveFleetLearnsOneProfile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("44 simulated hours")
	}
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 2, srv, 24*time.Hour)
	day0 := clk.Now()
	const team = "peaky"
	rate := func(at time.Time) float64 { // records a minute
		d := at.Sub(day0)
		h := d % (24 * time.Hour)
		switch {
		case d >= 34*time.Hour && d < 34*time.Hour+20*time.Minute:
			return 1000
		case h >= 18*time.Hour && h < 20*time.Hour:
			return 600
		}
		return 50
	}
	tick := 15 * time.Second
	var carry [2]float64
	spikeStart := day0.Add(34 * time.Hour)
	var peakLimited, spikeAllowedLate, spikeLimited, spikeChecks int
	var agreed bool
	// To the last tick of the day 2 peak: at 20:00 the night's threshold is under what the
	// sliding window still holds of the peak, and the team is in a spike from that sweep.
	for now := day0; now.Before(day0.Add(44*time.Hour - tick)); now = now.Add(tick) {
		// Each gate's records of the tick, in 5 checks spread over it.
		for gi, g := range gs {
			carry[gi] += rate(now) * tick.Seconds() / 60 / 2
			n := int64(carry[gi])
			carry[gi] -= float64(n)
			checkSpread(g, now, tick, team, n, func(at time.Time, d limit.Decision) {
				inPeak := at.Sub(day0) >= 42*time.Hour && at.Sub(day0) < 44*time.Hour
				inSpike := !at.Before(spikeStart) && at.Before(spikeStart.Add(20*time.Minute))
				switch {
				case inPeak && d.Limited:
					peakLimited++
				case inSpike:
					spikeChecks++
					if d.Limited {
						spikeLimited++
					} else if at.Sub(spikeStart) >= 2*time.Minute {
						spikeAllowedLate++
					}
				}
			})
		}
		clk.Set(now.Add(tick))
		tickAll(t, gs...)
		if debugAdaptive && now.Sub(day0)%(30*time.Minute) == 0 {
			p, _ := storedProfile(t, srv, team)
			for gi, g := range gs {
				st, _ := g.l.Snapshot(clk.Now(), team)
				t.Logf("%v gate %d: thr %d %s learned %d base %.1f level %.0f | stored epoch %d windows %d level %.1f set %v lost %v", now.Sub(day0), gi, st.Threshold, st.Source, st.Learned, st.Baseline, st.Level, p.Epoch-gs[0].l.Epoch(day0), p.Windows, p.Level, testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("set")), testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("lost")))
			}
		}
		// Before the spike: both gates hold the stored profile's threshold.
		if now.Equal(day0.Add(33*time.Hour + 30*time.Minute)) {
			p, ok := storedProfile(t, srv, team)
			if !ok {
				t.Fatal("no profile stored at 33.5 h")
			}
			c, _ := gs[0].l.Adaptive().WithDefaults()
			want, learned := c.Threshold(&p, gs[0].l.Epoch(clk.Now()))
			if !learned {
				t.Fatalf("stored profile at 33.5 h has %d windows: not learned", p.Windows)
			}
			for gi, g := range gs {
				st, _ := g.l.Snapshot(clk.Now(), team)
				if st.Source != limit.SourceLearned || float64(st.Threshold) != float64(int64(want+0.999999)) {
					t.Errorf("gate %d at 33.5 h: threshold %d (%s), want %.1f learned from the stored profile (baseline %.1f)", gi, st.Threshold, st.Source, want, st.Baseline)
				}
			}
			agreed = true
		}
		if now.Equal(spikeStart.Add(5 * time.Minute)) {
			for gi, g := range gs {
				if st, _ := g.l.Snapshot(clk.Now(), team); st.SpikeSince.IsZero() || st.SpikeSince.Sub(spikeStart) > 2*time.Minute {
					t.Errorf("gate %d 5 min into the spike: spike since %v, want within 2 min of its start", gi, st.SpikeSince.Sub(day0))
				}
			}
		}
	}
	if !agreed {
		t.Fatal("never compared thresholds")
	}
	if peakLimited > 0 {
		t.Errorf("%d checks limited during the day 2 peak (its usual volume at that hour), want 0", peakLimited)
	}
	if spikeLimited == 0 || spikeAllowedLate > 0 {
		t.Errorf("spike: %d of %d checks limited, %d allowed from its second window on, want all", spikeLimited, spikeChecks, spikeAllowedLate)
	}
	for gi, g := range gs {
		st, _ := g.l.Snapshot(clk.Now(), team)
		if !st.SpikeSince.IsZero() {
			t.Errorf("gate %d at the end: still in a spike since %v", gi, st.SpikeSince.Sub(day0))
		}
		if n := testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("set")) + testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("lost")); n == 0 {
			t.Errorf("gate %d folded no profile (share 1/2: it folds every fold)", gi)
		}
		started, ended := gatherCounter(t, g, "gate_limiter_spikes_started_total"), gatherCounter(t, g, "gate_limiter_spikes_ended_total")
		if started < 1 || started != ended {
			t.Errorf("gate %d: %v spikes started, %v ended, want as many, at least one", gi, started, ended)
		}
	}
	lost := testutil.ToFloat64(gs[0].tk.m.profiles.WithLabelValues("lost")) + testutil.ToFloat64(gs[1].tk.m.profiles.WithLabelValues("lost"))
	if lost == 0 {
		t.Error("no compare-and-set lost: the race this test means to show harmless never happened")
	}
}

const debugAdaptive = false

// checkSpread checks n records of team on g in 5 checks spread over the tick from now,
// handing each decision to each.
func checkSpread(g *gate, now time.Time, tick time.Duration, team string, n int64, each func(at time.Time, d limit.Decision)) {
	for k := range int64(5) {
		at := now.Add(time.Duration(k) * tick / 5)
		m := n / 5
		if k == 4 {
			m = n - 4*(n/5)
		}
		each(at, g.l.CheckAt(at, team, m))
	}
}

func gatherCounter(t *testing.T, g *gate, name string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestProfileScriptCompareAndSet: a profile write sets an absent key, or one still at the
// epoch it was folded from; one whose stored profile moved on meanwhile (another gate
// folded it) is left as stored.
func TestProfileScriptCompareAndSet(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	key := ProfileKeyFor(ModeStandalone, "gate", "t")
	enc := func(epoch int64) string {
		b, _ := (&spike.Profile{Epoch: epoch, Windows: 1}).MarshalBinary()
		return string(b)
	}
	run := func(old string, val string) int64 {
		n, err := c.Eval(ctx, profileScript, []string{key}, int64(60_000), old, val).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := run("", enc(10)); n != 1 {
		t.Fatalf("absent key: set %d, want 1", n)
	}
	if n := run(enc(9)[:8], enc(11)); n != 0 {
		t.Errorf("stale epoch 9 against stored 10: set %d, want 0", n)
	}
	if n := run("", enc(11)); n != 0 {
		t.Errorf("a write that found no profile, against stored 10: set %d, want 0", n)
	}
	if n := run(enc(10)[:8], enc(12)); n != 1 {
		t.Errorf("matching epoch: set %d, want 1", n)
	}
	v, _ := c.Get(ctx, key).Result()
	if v != enc(12) {
		t.Errorf("stored %q, want epoch 12's", v)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL %v, want the script's minute", ttl)
	}
	if !strings.HasSuffix(key, ":t:profile") {
		t.Errorf("key %q", key)
	}
}

// TestAdaptiveCluster: in cluster mode a team's profile lives in its counters' slot, so
// its look rides in its shard's MGET and its fold in its shard's script (no CROSSSLOT):
// over teams spread across the slots (braces in names too), two gates fold and store
// every team's profile, with no failed command, and agree on each team's threshold. Two
// hours: with an hour of history asked for and a fold every spike.MinFoldEvery, the last
// teams are learned after about 85 minutes.
func TestAdaptiveCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	day0 := epochStart.Truncate(time.Hour)
	clk := clock.NewFake(day0)
	lc := limit.Config{Window: time.Minute, Threshold: 1_000_000, SyncInterval: 15 * time.Second,
		Adaptive: &spike.Config{MinHistory: time.Hour}}
	var gs []*gate
	for range 2 {
		cc, err := DialCluster(cl.URLs(), RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, newTopologyGate(t, clk, lc, Config{Mode: ModeCluster, TickInterval: 15 * time.Second}, cc))
	}
	teams := []string{"a{b}c", "{", "}"}
	for i := range 20 {
		teams = append(teams, fmt.Sprintf("team-%d", i))
	}
	for now := day0; now.Before(day0.Add(2 * time.Hour)); now = now.Add(15 * time.Second) {
		for _, g := range gs {
			for _, team := range teams {
				g.l.CheckAt(now, team, 100) // 400 a minute a gate
			}
		}
		clk.Set(now.Add(15 * time.Second))
		for gi, g := range gs {
			if r := g.tk.Tick(context.Background()); r.Errors != 0 || r.FailedReads != 0 {
				t.Fatalf("gate %d's tick at %v: %+v", gi, now.Sub(day0), r)
			}
		}
	}
	cc, err := DialCluster(cl.URLs(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	now := clk.Now()
	for _, team := range teams {
		v, err := cc.Get(context.Background(), ProfileKeyFor(ModeCluster, DefaultKeyPrefix, team)).Bytes()
		var p spike.Profile
		if err != nil || p.UnmarshalBinary(v) != nil {
			t.Errorf("%q: no profile stored (%v)", team, err)
			continue
		}
		a, _ := gs[0].l.Snapshot(now, team)
		b, _ := gs[1].l.Snapshot(now, team)
		if a.Source != limit.SourceLearned || a.Threshold != b.Threshold || a.Threshold < 2400 || a.Threshold > 4000 {
			t.Errorf("%q: thresholds %d (%s) and %d (%s), want one learned near 4 x 800", team, a.Threshold, a.Source, b.Threshold, b.Source)
		}
	}
}

// TestAdaptiveFleetPauseAndStep: two gates on one real Redis, fake clock, 15 s ticks, each
// seeing half of a team's traffic, through the two shapes of issue 35 that kept a team
// diverted for good. The team sends 300 records a minute (learned after 6 hours); it goes
// silent for 24 hours (both gates forget it) and comes back at 300: not one check is
// limited. Two hours later it steps up for good to 3,000 a minute: a spike at first, caught
// on both gates, which the shared profile ends by re-learning the team at its new volume
// within GATE_ADAPTIVE_MAX_SPIKE (3 h) of the step; from then on it is accepted, both
// gates count the spike as re-learned and log it so.
func TestAdaptiveFleetPauseAndStep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("39 simulated hours")
	}
	srv := redistest.Start(t)
	day0 := epochStart.Truncate(24 * time.Hour)
	clk := clock.NewFake(day0)
	lc := limit.Config{Window: time.Minute, Threshold: 1_000_000, SyncInterval: 15 * time.Second,
		Adaptive: &spike.Config{MinHistory: 6 * time.Hour}}
	var logs [2]strings.Builder
	var gs []*gate
	for gi := range 2 {
		g := newGate(t, clk, lc, Config{TickInterval: 15 * time.Second}, srv)
		tk, err := New(g.l, g.tk.instances, Config{TickInterval: 15 * time.Second}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs[gi], nil)))
		if err != nil {
			t.Fatal(err)
		}
		clockChecked(tk)
		g.tk = tk
		gs = append(gs, g)
	}
	const team = "steps"
	pauseFrom, pauseTo := 8*time.Hour, 32*time.Hour
	step := 34 * time.Hour
	end := step + 5*time.Hour
	rate := func(d time.Duration) float64 { // records a minute
		switch {
		case d >= pauseFrom && d < pauseTo:
			return 0
		case d >= step:
			return 3000
		}
		return 300
	}
	tick := 15 * time.Second
	var carry [2]float64
	var backLimited, stepLimited int
	var lastStepLimited time.Duration
	for now := day0; now.Before(day0.Add(end)); now = now.Add(tick) {
		for gi, g := range gs {
			carry[gi] += rate(now.Sub(day0)) * tick.Seconds() / 60 / 2
			n := int64(carry[gi])
			carry[gi] -= float64(n)
			if n == 0 {
				continue
			}
			checkSpread(g, now, tick, team, n, func(at time.Time, d limit.Decision) {
				switch since := at.Sub(day0); {
				case since >= pauseTo && since < step && d.Limited:
					backLimited++
				case since >= step && d.Limited:
					stepLimited++
					lastStepLimited = since - step
				}
			})
		}
		clk.Set(now.Add(tick))
		tickAll(t, gs...)
	}
	if backLimited > 0 {
		t.Errorf("back at its usual volume after 24 h of silence: %d checks limited, want none", backLimited)
	}
	maxSpike := spike.DefaultMaxSpike
	switch {
	case stepLimited == 0:
		t.Error("a lasting step to 10 ×: never limited, want it caught as a spike first")
	case lastStepLimited > maxSpike:
		t.Errorf("a lasting step to 10 ×: limited until %v after it, want accepted within GATE_ADAPTIVE_MAX_SPIKE (%v)", lastStepLimited, maxSpike)
	}
	p, ok := storedProfile(t, srv, team)
	if !ok || p.Relearned == 0 {
		t.Errorf("stored profile %+v: no spike ended by re-learning", p)
	}
	for gi, g := range gs {
		if n := gatherCounter(t, g, "gate_limiter_spikes_relearned_total"); n < 1 {
			t.Errorf("gate %d: gate_limiter_spikes_relearned_total %v, want the step's spike counted", gi, n)
		}
		started, ended := gatherCounter(t, g, "gate_limiter_spikes_started_total"), gatherCounter(t, g, "gate_limiter_spikes_ended_total")
		if started != 1 || ended != 1 {
			t.Errorf("gate %d: %v spikes started, %v ended; want the step's one spike, ended (its hold's release no spike of its own)", gi, started, ended)
		}
		if !strings.Contains(logs[gi].String(), "spike ended: it lasted GATE_ADAPTIVE_MAX_SPIKE, team re-learned at its new volume") {
			t.Errorf("gate %d logged no re-learned spike:\n%s", gi, logs[gi].String())
		}
		if st, _ := g.l.Snapshot(clk.Now(), team); !st.SpikeSince.IsZero() || st.Limited {
			t.Errorf("gate %d at the end: %+v, want accepted, in no spike", gi, st)
		}
	}
}

// TestProfileScriptWrongTypeKey: a profile key of the wrong type (an operator's error: a
// list where the profile goes) fails on its own, as a counter of the wrong type does: the
// other profiles in the same script are still set, the bad key is left as it is, and the
// script answers its error, counted and logged with the pipeline's.
func TestProfileScriptWrongTypeKey(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	bad, good := ProfileKeyFor(ModeStandalone, "gate", "bad"), ProfileKeyFor(ModeStandalone, "gate", "good")
	if err := c.LPush(ctx, bad, "x").Err(); err != nil {
		t.Fatal(err)
	}
	b, _ := (&spike.Profile{Epoch: 10, Windows: 1}).MarshalBinary()
	err := c.Eval(ctx, profileScript, []string{bad, good}, int64(60_000), "", string(b), "", string(b)).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Errorf("script's reply: %v, want the WRONGTYPE error", err)
	}
	if v, _ := c.Get(ctx, good).Result(); v != string(b) {
		t.Errorf("the good key behind the bad one: %q, want its profile set", v)
	}
	if typ := c.Type(ctx, bad).Val(); typ != "list" {
		t.Errorf("the bad key is now a %s, want it left as it is", typ)
	}
}
