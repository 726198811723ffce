package tick

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// TestUnreadableValuesLogged: a counter, a hold flag and a learned profile in Redis that
// the tick cannot read (an operator's SET, another program writing under the prefix) are
// counted as errors{cause="parse"}, which the chart's GateRedisErrors alert fires on, and
// logged with their key and what they held, once a minute at most for each kind however
// many ticks read them. Before, they were counted and never logged, though the package
// says Redis errors are: an operator paged by the alert found no line saying which key.
func TestUnreadableValuesLogged(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := holdGates(t, 1, srv)
	g := gs[0]
	logs := g.withLog()
	c := srv.Client(t)
	ctx := context.Background()
	ep := g.l.Epoch(epochStart)
	// The window before's counter: read with the current one, never written this window.
	counter := Key(DefaultKeyPrefix, "counted", ep-1)
	hold := HoldKeyFor(ModeStandalone, DefaultKeyPrefix, "held")
	long := "not a counter " + strings.Repeat("x", 500)
	if err := c.Set(ctx, counter, long, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, hold, "held since yesterday", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	const ticks = 5
	for s := 1; s <= ticks; s++ {
		now := epochStart.Add(time.Duration(s)*time.Second - 500*time.Millisecond)
		g.l.CheckAt(now, "counted", 10)
		g.l.CheckAt(now, "held", 10)
		clk.Set(epochStart.Add(time.Duration(s) * time.Second))
		g.tk.Tick(ctx)
	}
	parse := testutil.ToFloat64(g.tk.m.errors.WithLabelValues("parse", "0"))
	if parse < ticks {
		t.Fatalf("errors{cause=\"parse\"} = %v after %d ticks reading the counter, want one a tick at least", parse, ticks)
	}
	if l := logs.lines("pipeline failed"); len(l) != 0 {
		t.Errorf("unreadable values logged as a failed pipeline: %q", l)
	}
	counterLines := logs.lines("level=WARN", "key="+counter)
	if len(counterLines) != 1 {
		t.Fatalf("%d lines name the unreadable counter %s, want 1 in %d ticks:\n%s", len(counterLines), counter, ticks, strings.Join(logs.lines(), "\n"))
	}
	if l := counterLines[0]; !strings.Contains(l, "not a counter xxx") || strings.Contains(l, strings.Repeat("x", 100)) || !strings.Contains(l, "cause=parse") {
		t.Errorf("counter line = %s\nwant what it held, cut short, and the cause", l)
	}
	if l := logs.lines("level=WARN", "key="+hold, "held since yesterday"); len(l) != 1 {
		t.Errorf("%d lines name the unreadable hold flag %s with its value, want 1:\n%s", len(l), hold, strings.Join(logs.lines(), "\n"))
	}
}

// TestUnreadableProfileLogged: a learned profile the tick cannot read (a corrupt one, or a
// newer schema's) is refused with a parse error (TestAdaptiveProfileRefusedLooksEveryPeriod)
// and logged with its key, as an unreadable counter is.
func TestUnreadableProfileLogged(t *testing.T) {
	srv := redistest.Start(t)
	gs, clk := adaptiveGates(t, 1, srv, 24*time.Hour)
	g := gs[0]
	logs := g.withLog()
	day0 := clk.Now()
	const team = "corrupt"
	key := ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, team)
	p := spike.Profile{Epoch: g.l.Epoch(day0) - 1, Windows: 1440, Level: 300}
	v, _ := p.MarshalBinary()
	if err := srv.Client(t).Set(context.Background(), key, v[:len(v)-3], ProfileTTL).Err(); err != nil {
		t.Fatal(err)
	}
	tick := 15 * time.Second
	for now := day0; now.Before(day0.Add(5*time.Minute)) && testutil.ToFloat64(g.tk.m.errors.WithLabelValues("parse", "0")) == 0; now = now.Add(tick) {
		checkSpread(g, now, tick, team, 300*15/60, func(time.Time, limit.Decision) {})
		clk.Set(now.Add(tick))
		g.tk.Tick(context.Background())
	}
	if testutil.ToFloat64(g.tk.m.errors.WithLabelValues("parse", "0")) == 0 {
		t.Fatal("the corrupt profile was never read")
	}
	if l := logs.lines("level=WARN", "key="+key, "cause=parse"); len(l) != 1 {
		t.Errorf("%d lines name the unreadable profile %s, want 1:\n%s", len(l), key, strings.Join(logs.lines(), "\n"))
	}
}
