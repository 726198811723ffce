package tick

import (
	"context"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestAdaptiveHoldTakenAtFirstLook: in adaptive divert mode, a gate that meets a team the
// fleet holds under its learned threshold (a gate restarted, or given the team's
// partition, in the hold's tail: the team under the release level, held for
// GATE_DIVERT_HOLD) holds it from its first read, as a gate does in static mode. Before,
// the first read fetched no hold flag (it was a look at the profile, not a first read)
// and judged the flag by the static threshold the team had until that look, so the new
// gate sent the team back to the accepted topic while the rest of the fleet diverted it.
func TestAdaptiveHoldTakenAtFirstLook(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: time.Minute, Threshold: 1_000_000, SyncInterval: 5 * time.Second,
		Mode: limit.Divert, DivertHold: 5 * time.Minute, DivertRelease: 0.8,
		Adaptive: &spike.Config{MinHistory: time.Hour}}
	// TickTimeout a minute: a tick failed by a loaded machine's slow Redis is not what
	// this test checks.
	a := newGate(t, clk, lc, Config{TickInterval: 5 * time.Second, TickTimeout: time.Minute}, srv)
	b := newGate(t, clk, lc, Config{TickInterval: 5 * time.Second, TickTimeout: time.Minute}, srv)
	const team = "held"
	// A learned profile: level 100 a window, threshold 400.
	p := spike.Profile{Epoch: a.l.Epoch(epochStart) - 1, Windows: 100_000, Level: 100, Recent: 100}
	v, _ := p.MarshalBinary()
	if err := srv.Client(t).Set(context.Background(), ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team), v, ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return epochStart.Add(d) }
	a.l.CheckAt(at(time.Second), team, 1)
	for s := 5 * time.Second; s <= 10*time.Second; s += 5 * time.Second {
		clk.Set(at(s))
		tickAll(t, a)
	}
	if st, _ := a.l.Snapshot(at(10*time.Second), team); st.Source != limit.SourceLearned || st.Threshold != 400 {
		t.Fatalf("gate a: threshold %d (%s), want 400 learned", st.Threshold, st.Source)
	}
	a.l.CheckAt(at(11*time.Second), team, 500)
	if d := a.l.CheckAt(at(11*time.Second), team, 1); !d.Held {
		t.Fatalf("gate a at 501 records: %+v, want held", d)
	}
	// Window 1: the count ages out, under the release level (320) at about 82 s; the hold
	// lasts 5 minutes from then. Gate b meets the team at 150 s, its level near 0.
	for s := 15 * time.Second; s <= 150*time.Second; s += 5 * time.Second {
		clk.Set(at(s))
		tickAll(t, a)
	}
	if d := a.l.CheckAt(at(150*time.Second), team, 1); !d.Held {
		t.Fatalf("gate a at 150 s: %+v, want held (the hold's tail)", d)
	}
	b.l.CheckAt(at(150*time.Second), team, 50)
	for s := 155 * time.Second; s <= 165*time.Second; s += 5 * time.Second {
		clk.Set(at(s))
		tickAll(t, a, b)
	}
	if d := b.l.CheckAt(at(166*time.Second), team, 1); !d.Held {
		st, _ := b.l.Snapshot(at(166*time.Second), team)
		t.Errorf("gate b after two reads, the fleet holding the team: %+v (threshold %d %s), want held", d, st.Threshold, st.Source)
	}
	if d := a.l.CheckAt(at(166*time.Second), team, 1); !d.Held {
		t.Errorf("gate a at 166 s: %+v, want still held", d)
	}
}
