package tick

import (
	"context"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveProfileLostInRedis: two gates on one real Redis hold a team's learned
// threshold from its stored profile; the profile is then lost (DEL: an eviction, a restart
// without persistence). Both gates keep the learned threshold through their next looks,
// and the profile is written back from their copy, history and all, not restarted from
// nothing (which would put the team on the static threshold for a day).
func TestAdaptiveProfileLostInRedis(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 2, srv, 24*time.Hour)
	day0 := clk.Now()
	const team = "steady"
	c := srv.Client(t)
	key := ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)
	p := spike.Profile{Epoch: gs[0].l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	if err := c.Set(context.Background(), key, v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	run := func(from, to time.Duration, each func(d time.Duration)) {
		for now := day0.Add(from); now.Before(day0.Add(to)); now = now.Add(tick) {
			for _, g := range gs {
				checkSpread(g, now, tick, team, 300*15/60/2, func(time.Time, limit.Decision) {})
			}
			clk.Set(now.Add(tick))
			tickAll(t, gs...)
			if each != nil {
				each(now.Add(tick).Sub(day0))
			}
		}
	}
	run(0, 5*time.Minute, nil)
	for gi, g := range gs {
		if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceLearned || st.Threshold != 1200 {
			t.Fatalf("gate %d before the loss: threshold %d (%s), want 1200 learned", gi, st.Threshold, st.Source)
		}
	}
	if err := c.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	// Two hours: two looks at least (a fold every 20 minutes).
	run(5*time.Minute, 2*time.Hour+5*time.Minute, func(d time.Duration) {
		for gi, g := range gs {
			if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceLearned {
				t.Fatalf("gate %d %v after the profile was lost: threshold %d (%s), want the learned one kept", gi, d-5*time.Minute, st.Threshold, st.Source)
			}
		}
	})
	got, ok := storedProfile(t, srv, team)
	if !ok || got.Windows < p.Windows {
		t.Errorf("stored profile after the loss: %v, %+v; want the gates' copy written back (%d windows or more)", ok, got, p.Windows)
	}
}

// TestAdaptiveProfileWriteRefused: a profile write Redis refuses (OOM: used memory over
// maxmemory under noeviction) is one failed pipeline of one cause, counted once in
// gate_limiter_errors_total, as its help says ("one a tick per cause"), not
// once for the script and again for the pipeline. The fold lost is not retried as such:
// once Redis takes writes again, the team's next fold is stored, covering both periods.
func TestAdaptiveProfileWriteRefused(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	day0 := clk.Now()
	const team = "steady"
	c := srv.Client(t)
	key := ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)
	p := spike.Profile{Epoch: g.l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	if err := c.Set(context.Background(), key, v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	now := day0
	step := func() TickResult {
		checkSpread(g, now, tick, team, 300*15/60, func(time.Time, limit.Decision) {})
		now = now.Add(tick)
		clk.Set(now)
		return g.tk.Tick(context.Background())
	}
	// Run until a tick folds the profile: its write goes with the next tick.
	for len(g.tk.limits[0].profiles) == 0 {
		if now.Sub(day0) > 2*time.Hour {
			t.Fatal("no fold in two hours")
		}
		step()
	}
	srv.RefuseWrites(t, redistest.RefuseOOM)
	clk.Set(now.Add(time.Second)) // no new counts: the profile is this tick's only write
	r := g.tk.Tick(context.Background())
	if r.Errors != 1 {
		t.Errorf("tick whose profile write was refused: %+v, want 1 error", r)
	}
	if got := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("oom", "0")); got != 1 {
		t.Errorf("errors{cause=\"oom\"} = %v after one failed pipeline, want 1", got)
	}
	if got := testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("set")) + testutil.ToFloat64(g.tk.m.profiles.WithLabelValues("lost")); got != 0 {
		t.Errorf("profile writes set or lost = %v, want 0: the write failed", got)
	}
	srv.AcceptWrites(t)
	stored, _ := storedProfile(t, srv, team)
	for stored.Epoch == p.Epoch {
		if now.Sub(day0) > 3*time.Hour {
			t.Fatal("the profile was not stored again within an hour of Redis taking writes again")
		}
		step()
		stored, _ = storedProfile(t, srv, team)
	}
	if stored.Windows <= p.Windows {
		t.Errorf("profile stored after the refusal: %d windows, want more than %d", stored.Windows, p.Windows)
	}
}

// TestAdaptiveProfileRefusedLooksEveryPeriod: a profile this gate cannot read (one of a
// newer schema, 8 bytes longer, as after a rolling upgrade; or a corrupt one) is refused
// with a parse error and not folded (docs/design.md), and looked at again a fold period
// on, as a team with no history is: not read and refused at every tick. Before, the
// team, which had no learned state, was looked at by every sweep: a read and a parse
// error a tick for each such team, every team of an old gate during a rolling upgrade.
func TestAdaptiveProfileRefusedLooksEveryPeriod(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	day0 := clk.Now()
	const team = "newer"
	c := srv.Client(t)
	p := spike.Profile{Epoch: g.l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	v = append(v, make([]byte, 8)...)
	if err := c.Set(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	reads := 0
	for now := day0; now.Before(day0.Add(30 * time.Minute)); now = now.Add(tick) {
		checkSpread(g, now, tick, team, 300*15/60, func(time.Time, limit.Decision) {})
		clk.Set(now.Add(tick))
		reads += g.tk.Tick(context.Background()).Reads
	}
	t.Logf("%d reads, %v parse errors in 120 ticks", reads, testutil.ToFloat64(g.tk.m.errors.WithLabelValues("parse", "0")))
	// A look at the start and one a fold period (20 minutes) on.
	if got := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("parse", "0")); got < 1 || got > 3 {
		t.Errorf("errors{cause=\"parse\"} = %v over 30 minutes (120 ticks), want one a look: 1 to 3", got)
	}
	if reads > 20 {
		t.Errorf("%d reads of the team in 120 ticks, want its usual few", reads)
	}
	if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceStatic {
		t.Errorf("threshold %d (%s), want the static one: the profile is refused", st.Threshold, st.Source)
	}
}

// TestAdaptiveProfileLostStartedOverByANewGate: a gate holds a team's learned profile; Redis
// loses it, and before that gate's next look another gate meets the team (a rebalance, a
// gate started) and, finding no profile, starts one from nothing. The first gate's look
// finds that new profile, still being learned: it keeps its copy and sets it over the new
// one, and both gates hold the learned threshold. Before, it took the new profile up,
// and the team was on GATE_THRESHOLD on both gates for GATE_ADAPTIVE_MIN_HISTORY (a day),
// the gates disagreeing in between.
func TestAdaptiveProfileLostStartedOverByANewGate(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 2, srv, 24*time.Hour)
	day0 := clk.Now()
	const team = "steady"
	c := srv.Client(t)
	key := ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)
	p := spike.Profile{Epoch: gs[0].l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	if err := c.Set(context.Background(), key, v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	for now := day0; now.Before(day0.Add(2 * time.Hour)); now = now.Add(tick) {
		d := now.Sub(day0)
		if d == 5*time.Minute {
			if err := c.Del(context.Background(), key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for gi, g := range gs {
			if gi == 1 && d < 6*time.Minute {
				continue // gate 1 meets the team after the loss
			}
			checkSpread(g, now, tick, team, 300*15/60/2, func(time.Time, limit.Decision) {})
		}
		clk.Set(now.Add(tick))
		tickAll(t, gs...)
	}
	for gi, g := range gs {
		if st, _ := g.l.Snapshot(clk.Now(), team); st.Source != limit.SourceLearned {
			t.Errorf("gate %d 2 hours after the loss: threshold %d (%s), want the learned one kept", gi, st.Threshold, st.Source)
		}
	}
	if got, ok := storedProfile(t, srv, team); !ok || got.Windows < p.Windows {
		t.Errorf("stored profile 2 hours after the loss: %v, %d windows; want gate 0's copy set again (%d windows or more)", ok, got.Windows, p.Windows)
	}
}
