package limit

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

var adaptT0 = time.Unix(1_800_000_000-1_800_000_000%3600, 0) // on the hour

func adaptiveLimiter(t *testing.T, cfg Config) *Limiter {
	t.Helper()
	cfg.Window = time.Minute
	if cfg.Threshold == 0 {
		cfg.Threshold = 1_000_000
	}
	if cfg.Adaptive == nil {
		cfg.Adaptive = &spike.Config{}
	}
	l, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// learnedProfile is a profile of a day's history at level per window, folded up to the
// window before epoch (not due for a fold before a while).
func learnedProfile(l *Limiter, level float32, epoch int64) spike.Profile {
	p := spike.Profile{Epoch: epoch - 1, Windows: 1440, Level: level}
	for l.adapt.cfg.NextFold(&p, "") <= epoch+1 { // far enough from its next fold
		p.Epoch++
	}
	return p
}

// learn sweeps l at now and hands team's profile read a learned profile of level: the
// team's threshold is then 4 × level (at least the floor, 100).
func learn(t *testing.T, l *Limiter, now time.Time, team string, level float32) *Read {
	t.Helper()
	var sw Sweep
	l.Sweep(now, &sw)
	for i := range sw.Reads {
		if r := &sw.Reads[i]; r.Team == team {
			if !r.Profile {
				t.Fatalf("%s's read does not ask for its profile: %+v", team, *r)
			}
			l.ApplyProfile(r, learnedProfile(l, level, r.Epoch), true, 0, now)
			return r
		}
	}
	t.Fatalf("no read of %s planned", team)
	return nil
}

// TestAdaptivePrecedence: a team's threshold is its override, else its learned threshold,
// else the static one; an override swap recomputes it from all three (refreshThreshold).
func TestAdaptivePrecedence(t *testing.T) {
	l := adaptiveLimiter(t, Config{Overrides: map[string]int64{"vip": 50_000}})
	now := adaptT0
	for _, team := range []string{"vip", "small", "big", "new"} {
		l.CheckAt(now, team, 1)
	}
	if d := l.CheckAt(now, "small", 0); d.Threshold != 1_000_000 {
		t.Fatalf("before any profile: threshold %d, want the static 1000000", d.Threshold)
	}
	learn(t, l, now, "vip", 1000)
	learn(t, l, now, "small", 10)
	learn(t, l, now, "big", 1000)
	for team, want := range map[string]struct {
		thr int64
		src Source
	}{"vip": {50_000, SourceOverride}, "small": {100, SourceLearned}, "big": {4000, SourceLearned}, "new": {1_000_000, SourceStatic}} {
		if d := l.CheckAt(now, team, 0); d.Threshold != want.thr {
			t.Errorf("%s: threshold %d, want %d", team, d.Threshold, want.thr)
		}
		if st, _ := l.Snapshot(now, team); st.Source != want.src || st.Threshold != want.thr {
			t.Errorf("%s: view %d from %s, want %d from %s", team, st.Threshold, st.Source, want.thr, want.src)
		}
	}
	// An override for big, and vip's taken away: the next checks refresh from all three.
	if err := l.SetOverrides(map[string]int64{"big": 7}); err != nil {
		t.Fatal(err)
	}
	for team, want := range map[string]int64{"vip": 4000, "big": 7, "small": 100, "new": 1_000_000} {
		if d := l.CheckAt(now, team, 0); d.Threshold != want {
			t.Errorf("after the swap, %s: threshold %d, want %d", team, d.Threshold, want)
		}
	}
}

// TestAdaptiveChangeKeepsTierAndHold: a learned threshold written into a held team's thr
// word keeps its tier and held bit, and its generation (no refresh on the next check).
func TestAdaptiveChangeKeepsTierAndHold(t *testing.T) {
	l := adaptiveLimiter(t, Config{})
	now := adaptT0
	l.CheckAt(now, "t", 1)
	learn(t, l, now, "t", 100) // 400
	if d := l.CheckAt(now, "t", 500); d.Threshold != 400 {
		t.Fatalf("threshold %d, want 400", d.Threshold)
	}
	d := l.CheckAt(now, "t", 0)
	if !d.Held || d.Tier != Hot {
		t.Fatalf("at 501 over 400: %+v, want held, hot", d)
	}
	h := hashOf(l, "t")
	e, _ := l.shards[h&l.mask].idx.tab.Load().lookup(h, "t")
	before := e.thr.Load()
	ls := l.adapt.of(e)
	ls.prof.Level = 200
	l.setLearned(e, "t", ls, l.Epoch(now)) // 800
	after := e.thr.Load()
	if after&thresholdMask != 800 || after&^uint64(thresholdMask) != before&^uint64(thresholdMask) {
		t.Errorf("thr word %x → %x: want threshold 800 and the gen, tier and held bits unchanged", before, after)
	}
	if d := l.CheckAt(now, "t", 0); !d.Held || d.Threshold != 800 {
		t.Errorf("after the change: %+v, want held (until the sweep releases it) at 800", d)
	}
}

// TestAdaptiveStateFreed: a team's learned state goes with its entry, expired or evicted,
// and a spike it was in is counted as ended.
func TestAdaptiveStateFreed(t *testing.T) {
	l := adaptiveLimiter(t, Config{Capacity: 1, Shards: 1, IdleTimeout: time.Minute})
	now := adaptT0
	l.CheckAt(now, "a", 1)
	learn(t, l, now, "a", 10)
	if n := countLearned(l); n != 1 {
		t.Fatalf("%d learned states, want 1", n)
	}
	l.CheckAt(now, "a", 200) // a spike: 201 over 100
	var sw Sweep
	l.Sweep(now, &sw)
	if len(sw.Spikes) != 1 || !sw.Spikes[0].Started || l.adapt.spiking.Load() != 1 {
		t.Fatalf("spikes %+v, spiking %d: want a started one", sw.Spikes, l.adapt.spiking.Load())
	}
	// A full cache keeps a, over its limit (limiter.go, evictOne): b is cached beside it.
	l.CheckAt(now, "b", 1)
	if n := countLearned(l); n != 1 || l.adapt.spiking.Load() != 1 || l.Len() != 2 {
		t.Errorf("after b: %d learned states, %d spiking, %d cached; want a's 1, 1, and 2", n, l.adapt.spiking.Load(), l.Len())
	}
	learn(t, l, now, "b", 10)
	l.Sweep(now.Add(2*time.Minute), &sw) // a and b idle for their timeout
	if n := countLearned(l); n != 0 || sw.Expired != 2 || l.adapt.spiking.Load() != 0 || l.adapt.ended.Load() != 1 {
		t.Errorf("after a and b expired (%d): %d learned states, %d spiking, %d ended; want 0, 0, 1", sw.Expired, n, l.adapt.spiking.Load(), l.adapt.ended.Load())
	}
	// Evicted: d, learned and under its limit, makes room for e, and its state goes.
	l.CheckAt(now.Add(2*time.Minute), "d", 1)
	learn(t, l, now.Add(2*time.Minute), "d", 10)
	l.CheckAt(now.Add(2*time.Minute+time.Second), "e", 1)
	if n := countLearned(l); n != 0 || l.Len() != 1 {
		t.Errorf("after d's eviction: %d learned states, %d cached; want 0, 1", n, l.Len())
	}
	// A read of an entry evicted since its sweep makes no state that would never be freed.
	l.CheckAt(now, "c", 1)
	l.Sweep(now, &sw)
	r := sw.Reads[0]
	l.CheckAt(now, "d", 1) // evicts c
	l.ApplyProfile(&r, learnedProfile(l, 10, r.Epoch), true, 0, now)
	if n := countLearned(l); n != 0 {
		t.Errorf("a profile applied to an evicted entry kept %d states", n)
	}
}

// countLearned counts the learned states kept, which the shards' maps (the sweep's) and
// the limiter's sync.Map (lookups without a shard's lock) must both hold.
func countLearned(l *Limiter) int {
	n, m := 0, 0
	l.adapt.teams.Range(func(k, v any) bool {
		n++
		return true
	})
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for e, ls := range sh.learned {
			if v, ok := l.adapt.teams.Load(e); !ok || v != ls {
				panic("a learned state is missing from the limiter's map")
			}
			if e.state.Load()&stateDeleted != 0 {
				panic("a learned state is kept for an entry no longer cached")
			}
		}
		m += len(sh.learned)
		sh.mu.Unlock()
	}
	if m != n {
		panic(fmt.Sprintf("the shards hold %d learned states, the limiter %d", m, n))
	}
	return n
}

// TestStaticModeUntouched: without Config.Adaptive no read asks for a profile, no state is
// kept, and the check still allocates nothing.
func TestStaticModeUntouched(t *testing.T) {
	l, err := New(Config{Window: time.Minute, Threshold: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := adaptT0
	l.CheckAt(now, "t", 50)
	var sw Sweep
	l.Sweep(now, &sw)
	if len(sw.Reads) == 0 {
		t.Fatal("the sweep planned no read of the team checked: nothing to look at")
	}
	for _, r := range sw.Reads {
		if r.Profile || r.Fold {
			t.Errorf("static mode read asks for a profile: %+v", r)
		}
	}
	if l.adapt != nil || l.Adaptive() != nil {
		t.Error("static mode has a learner")
	}
	if a := testing.AllocsPerRun(1000, func() { l.CheckAt(now, "t", 1) }); a != 0 {
		t.Errorf("check allocates %v", a)
	}
	if st, _ := l.Snapshot(now, "t"); st.Adaptive || st.Source != SourceStatic {
		t.Errorf("view %+v", st)
	}
}

// TestAdaptiveConfigRefused: adaptive with the event clock, or a window that does not
// divide an hour, is refused.
func TestAdaptiveConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{Window: time.Minute, Clock: EventClock, Adaptive: &spike.Config{}},
		{Window: 7 * time.Minute, Adaptive: &spike.Config{}},
		{Window: time.Minute, Adaptive: &spike.Config{Window: time.Hour}},
	} {
		if _, err := New(c, nil, nil); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// TestAdaptiveSpikeCapAndDivert: a spike starts when a team whose threshold is its learned
// one reaches it, and ends: in cap mode when its level is under the release level (0.8 ×
// the threshold), in divert mode with holds when its hold is released. Its start and end
// are reported once each, with the threshold and baseline.
func TestAdaptiveSpikeCapAndDivert(t *testing.T) {
	for _, mode := range []Mode{Cap, Divert} {
		t.Run(mode.String(), func(t *testing.T) {
			l := adaptiveLimiter(t, Config{Mode: mode, DivertHold: 10 * time.Second})
			now := adaptT0.Add(time.Second)
			l.CheckAt(now, "t", 1)
			learn(t, l, now, "t", 100) // 400
			d := l.CheckAt(now, "t", 600)
			if d.Threshold != 400 {
				t.Fatalf("threshold %d, want 400", d.Threshold)
			}
			if d = l.CheckAt(now, "t", 1); !d.Limited {
				t.Fatalf("after 600 records: %+v, want limited", d)
			}
			var sw Sweep
			l.Sweep(now, &sw)
			if len(sw.Spikes) != 1 || !sw.Spikes[0].Started || sw.Spikes[0].Threshold != 400 || sw.Spikes[0].Baseline != 100 {
				t.Fatalf("spikes %+v, want one started over 400, baseline 100", sw.Spikes)
			}
			if st, _ := l.Snapshot(now, "t"); !st.SpikeSince.Equal(now) {
				t.Errorf("spike since %v", st.SpikeSince)
			}
			// Nothing more is sent: the level ages out; the spike ends once released.
			var ended time.Time
			for s := 2; s <= 240 && ended.IsZero(); s++ {
				at := adaptT0.Add(time.Duration(s) * time.Second)
				l.Sweep(at, &sw)
				for i := range sw.Reads { // the store holds the 601 records, in the first window
					var curr, prev int64
					switch sw.Reads[i].Epoch - l.Epoch(now) {
					case 0:
						curr = 601
					case 1:
						prev = 601
					}
					l.ApplyRead(&sw.Reads[i], curr, prev, at)
				}
				for _, ev := range sw.Spikes {
					if ev.Started {
						t.Fatalf("a second start at %v", at.Sub(adaptT0))
					}
					ended = at
					if ev.Since != now || ev.Threshold != 400 {
						t.Errorf("end event %+v", ev)
					}
				}
			}
			if ended.IsZero() {
				t.Fatal("the spike never ended")
			}
			if l.adapt.started.Load() != 1 || l.adapt.ended.Load() != 1 || l.adapt.spiking.Load() != 0 {
				t.Errorf("started %d ended %d spiking %d", l.adapt.started.Load(), l.adapt.ended.Load(), l.adapt.spiking.Load())
			}
			t.Logf("%s: spike ended %v after it started", mode, ended.Sub(now))
		})
	}
}

// TestFoldWriterByShare: a gate writes the fold it made with probability min(1, 2 × its
// share of the window folded), its own count of that window against the fleet's, so that
// a fleet writes each fold about twice. A tail team's fleet factor stays at the 1 it starts
// with (a read weighs as an eighth of a threshold's records), and with the factor as the
// share every gate wrote every fold of it.
func TestFoldWriterByShare(t *testing.T) {
	const teams = 400
	for _, c := range []struct {
		name        string
		count, prev int64 // the fleet's counts of the window folded, F, and of F+1
		lo, hi      int   // writes expected of teams
		in          int64 // the window of this gate's one record: F, F+1, or none (-1)
	}{
		{"one percent", 100, 0, 0, 40, 0},   // p = 0.02: 8 expected
		{"half", 2, 0, teams, teams, 0},     // p = 1
		{"alone", 1, 0, teams, teams, 0},    // p = 1
		{"none of it", 50, 0, 0, 0, -1},     // share 0: never
		{"silent window", 0, 100, 0, 40, 1}, // F silent: F+1's share, 0.01
	} {
		t.Run(c.name, func(t *testing.T) {
			l := adaptiveLimiter(t, Config{ColdWriteInterval: -1})
			now := adaptT0
			name := func(i int) string { return fmt.Sprintf("team-%d", i) }
			for i := range teams {
				l.CheckAt(now, name(i), 1)
			}
			var sw Sweep
			l.Sweep(now, &sw)
			for i := range sw.Reads { // first looks: the learned state is made
				r := &sw.Reads[i]
				l.ApplyProfile(r, learnedProfile(l, 10, r.Epoch), true, 0, now)
			}
			if n := countLearned(l); n != teams {
				t.Fatalf("%d teams learned, want %d", n, teams)
			}
			// Window F (the states know this gate's counts from two windows after they were
			// made): this gate counts one record of each team (or none), handed over by the
			// next sweep.
			now = now.Add(2 * time.Minute)
			f := l.Epoch(now)
			for w := range int64(2) {
				if c.in == w {
					for i := range teams {
						l.CheckAt(now, name(i), 1)
					}
				}
				l.Sweep(now.Add(time.Second), &sw)
				now = now.Add(time.Minute)
			}
			// Window F+2: every team is due for a look, and folds F.
			l.adapt.teams.Range(func(_, v any) bool { v.(*learned).next = f + 2; return true })
			l.Sweep(now, &sw)
			writes, folds := 0, 0
			for i := range sw.Reads {
				r := &sw.Reads[i]
				if !r.Fold {
					continue
				}
				folds++
				p := spike.Profile{Epoch: f - 1, Windows: 1440, Level: 10}
				for l.adapt.cfg.NextFold(&p, r.Team) > f {
					p.Epoch--
				}
				l.ApplyRead(r, 0, c.prev, now)
				if _, write := l.ApplyProfile(r, p, true, c.count, now); write {
					writes++
				}
			}
			if folds != teams {
				t.Fatalf("%d folds, want %d", folds, teams)
			}
			if writes < c.lo || writes > c.hi {
				t.Errorf("%d of %d folds written, want %d to %d", writes, teams, c.lo, c.hi)
			}
		})
	}
}

// TestOwnCounts: what a gate handed to the tick, kept per epoch for the last three.
func TestOwnCounts(t *testing.T) {
	ls := &learned{ownFrom: 10}
	if _, ok := ls.ownOf(9); ok {
		t.Error("epoch 9, before the state was made: known")
	}
	ls.addOwn(10, 3)
	ls.addOwn(10, 4)
	ls.addOwn(11, 5)
	if n, ok := ls.ownOf(10); !ok || n != 7 {
		t.Errorf("epoch 10: %d %v, want 7", n, ok)
	}
	if n, ok := ls.ownOf(12); !ok || n != 0 {
		t.Errorf("epoch 12, nothing handed over: %d %v, want 0", n, ok)
	}
	ls.addOwn(13, 2) // epoch 10's slot
	if n, ok := ls.ownOf(10); ok {
		t.Errorf("epoch 10 after 13 took its slot: %d, known; want unknown", n)
	}
	if n, _ := ls.ownOf(13); n != 2 {
		t.Errorf("epoch 13: %d, want 2", n)
	}
	if n, _ := ls.ownOf(11); n != 5 {
		t.Errorf("epoch 11: %d, want 5", n)
	}
	// Epochs of today's clock, whose low 16 bits read as negative: an empty slot is still
	// nothing handed over, not a later epoch's.
	const e0 = 29_000_000 // 33,088 mod 2^16
	ls = &learned{ownFrom: e0}
	ls.addOwn(e0+1, 4)
	if n, ok := ls.ownOf(e0); !ok || n != 0 {
		t.Errorf("epoch %d, empty slot: %d %v, want 0 known", e0, n, ok)
	}
	if n, ok := ls.ownOf(e0 + 1); !ok || n != 4 {
		t.Errorf("epoch %d: %d %v, want 4", e0+1, n, ok)
	}
	ls.addOwn(e0+3, 1) // e0's slot
	if _, ok := ls.ownOf(e0); ok {
		t.Errorf("epoch %d after %d took its slot: known", e0, e0+3)
	}
}

// TestAdaptiveThresholdAtAnImportsEdge: a team whose 09:00 hour holds a nightly import has
// its learned threshold raised in the last 19 minutes of 08:00 (spike.Config's reach), and
// the limiter takes it there, not only on the hour: it recomputes a team's threshold in
// each part spike.Config.ThresholdPart names. Recomputed each hour, as before, the import's
// first minutes would still be judged by 08:00's threshold.
func TestAdaptiveThresholdAtAnImportsEdge(t *testing.T) {
	l := adaptiveLimiter(t, Config{})
	c := l.adapt.cfg
	now := adaptT0 // 08:00 UTC
	e0 := l.Epoch(now)
	if h := (e0 % 1440) / 60; h != 8 {
		t.Fatalf("adaptT0 is at hour %d, want 8", h)
	}
	// A day of history: 100 a window, 2,000 from 09:00 to 10:00.
	var p spike.Profile
	for e := e0 - 1440; e < e0; e++ {
		n := 100.0
		if m := e % 1440; m >= 9*60 && m < 10*60 {
			n = 2000
		}
		c.Fold(&p, e, n)
	}
	own, _ := c.Threshold(&p, e0)
	edge, _ := c.Threshold(&p, e0+45)
	if edge < 4*own {
		t.Fatalf("the profile's threshold at 08:45 is %g, at 08:00 %g: want the import hour's reach", edge, own)
	}
	l.CheckAt(now, "t", 1)
	var sw Sweep
	l.Sweep(now, &sw)
	for i := range sw.Reads {
		if r := &sw.Reads[i]; r.Team == "t" {
			l.ApplyProfile(r, p, true, 0, now)
		}
	}
	if d := l.CheckAt(now, "t", 0); d.Threshold != int64(math.Ceil(own)) {
		t.Fatalf("at 08:00: threshold %d, want %g", d.Threshold, math.Ceil(own))
	}
	at := now.Add(45 * time.Minute)
	l.CheckAt(at, "t", 0)
	l.Sweep(at, &sw)
	if d := l.CheckAt(at, "t", 0); d.Threshold != int64(math.Ceil(edge)) {
		t.Errorf("at 08:45, after a sweep: threshold %d, want the reached %g", d.Threshold, math.Ceil(edge))
	}
}

// A profile whose baseline × factor is beyond
// int64 (a finite float32 level that UnmarshalBinary accepts) must give a learned
// threshold clamped to MaxThreshold, not 1 (under the floor of 100), as it was: the
// float was converted to int64 before it was clamped.
func TestLearnedThresholdHugeBaselineNotOne(t *testing.T) {
	l := adaptiveLimiter(t, Config{})
	now := adaptT0
	l.CheckAt(now, "huge", 1)
	learn(t, l, now, "huge", 3e18) // 4 × 3e18 = 1.2e19 > MaxInt64
	d := l.CheckAt(now, "huge", 0)
	if d.Threshold != MaxThreshold {
		t.Fatalf("learned threshold %d, want MaxThreshold %d (floor 100)", d.Threshold, int64(MaxThreshold))
	}
}

// The fleet's folds re-learned a team (a lasting step
// over GATE_ADAPTIVE_CEILING: its learned threshold is still the ceiling, and it is still
// over it). The gate ends the spike it had, and starts one over the new threshold; that
// new spike must not be ended again, as "re-learned", by the same re-learning at the next
// sweep, and so on at every sweep (for up to spike.MaxFoldEvery after it): it was, 14
// times in 29 sweeps.
func TestSpikeAfterRelearnDoesNotFlap(t *testing.T) {
	l := adaptiveLimiter(t, Config{Mode: Divert, Adaptive: &spike.Config{Ceiling: 1000}})
	now := adaptT0.Add(time.Second)
	l.CheckAt(now, "t", 1)
	var sw Sweep
	l.Sweep(now, &sw)
	var r *Read
	for i := range sw.Reads {
		if sw.Reads[i].Team == "t" {
			r = &sw.Reads[i]
		}
	}
	if r == nil {
		t.Fatal("no read of t")
	}
	p := learnedProfile(l, 1000, r.Epoch) // 4000, capped at the ceiling: 1000
	p.Relearned = r.Epoch - 1             // the fleet re-learned it a window ago
	l.ApplyProfile(r, p, true, 0, now)
	if d := l.CheckAt(now, "t", 5000); d.Threshold != 1000 {
		t.Fatalf("threshold %d, want the ceiling 1000", d.Threshold)
	}
	started, ended := 0, 0
	for s := 2; s <= 30; s++ {
		at := adaptT0.Add(time.Duration(s) * time.Second)
		l.CheckAt(at, "t", 200) // still sending far over the ceiling
		l.Sweep(at, &sw)
		for _, ev := range sw.Spikes {
			if ev.Started {
				started++
			} else {
				ended++
			}
		}
	}
	// The re-learning may end the first spike (its slack of a fold period), once.
	if started > 2 || ended > 1 {
		t.Fatalf("29 sweeps of a team steadily over its learned threshold: %d spikes started, %d ended (relearned counted %d), want at most 2 and 1",
			started, ended, l.adapt.relearned.Load())
	}
}

// TestSpikeAcrossAnHourIsOneSpike: a team steadily over its learned threshold across an
// hour's edge, where its threshold moves to the next hour's season, is in one spike: the
// sweep that moved the learned threshold to the new hour judged the spike by the
// threshold it read before, took the team for one whose threshold is no longer its
// learned one, and ended the spike (logged, counted, spike_since reset) only to start it
// again at the next sweep, at every hour's edge.
func TestSpikeAcrossAnHourIsOneSpike(t *testing.T) {
	for _, mode := range []Mode{Cap, Divert} {
		l := adaptiveLimiter(t, Config{Mode: mode})
		start := adaptT0.Add(-10 * time.Minute)
		l.CheckAt(start, "t", 1)
		var sw Sweep
		l.Sweep(start, &sw)
		var r *Read
		for i := range sw.Reads {
			if sw.Reads[i].Team == "t" {
				r = &sw.Reads[i]
			}
		}
		if r == nil {
			t.Fatal("no read of t")
		}
		p := learnedProfile(l, 1000, r.Epoch) // 4,000 a window
		b, _ := p.MarshalBinary()
		h := int((r.Epoch + 10) % 1440 / 60) // the next hour
		b[16+2*h], b[16+2*h+1] = 0xa0, 0x3f  // its season 1.25 (bfloat16): 5,000 a window
		if err := p.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		l.ApplyProfile(r, p, true, 0, start)
		var events []string
		var since []time.Time
		for at := start.Add(15 * time.Second); at.Before(adaptT0.Add(10 * time.Minute)); at = at.Add(15 * time.Second) {
			l.CheckAt(at, "t", 5000) // 20,000 a minute: over both hours' thresholds
			l.Sweep(at, &sw)
			for _, ev := range sw.Spikes {
				events = append(events, fmt.Sprintf("%s started %v over %d", at.Sub(adaptT0), ev.Started, ev.Threshold))
			}
			if st, ok := l.Snapshot(at, "t"); ok && !st.SpikeSince.IsZero() && (len(since) == 0 || !since[len(since)-1].Equal(st.SpikeSince)) {
				since = append(since, st.SpikeSince)
			}
		}
		if len(events) != 1 || len(since) != 1 {
			t.Errorf("%v: a team over its threshold from 10 minutes before an hour's edge to 10 after: spike events %q, spike_since %v; want one spike started and not ended", mode, events, since)
		}
	}
}
